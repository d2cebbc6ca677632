"""How far behind the fold is, and how much the writers write: what `upvotes status` reports.

Read in one strong read-only snapshot, without a scan of old deltas:

1. every post's watermark (a read of Posts: one row per post, the table the fold reads too);
2. per post, one key range of the interleaved commit-time index PostDeltasByCommit from
   min(watermark, now - recent window) exclusive to the end of the post: the unfolded deltas
   and the recent ones, nothing older. Folded deltas older than the recent window, which the
   30-day retention keeps in the millions, are never touched (the ranges of reads.py).

The cost is one Posts row per post plus one index entry per unfolded or recent delta.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator

from google.cloud import spanner

from spanner_store.reads import READ_CHUNK, last_fold_snapshot, read_unfolded
from spanner_store.tables import POSTS, WATERMARK_COLUMNS, PostKey

RECENT_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class DeltaHealth:
    """The fold's lag and the writers' recent rate, as of one snapshot."""

    read_at: datetime
    posts: int
    last_fold_snapshot: datetime | None
    unfolded_deltas: int
    oldest_unfolded_commit: datetime | None
    recent_delta_rows: int  # committed in the last `recent_window`
    recent_votes: int  # the Events of those rows
    recent_window: timedelta


def _watermark_chunks(snapshot) -> Iterator[dict[PostKey, datetime]]:
    chunk: dict[PostKey, datetime] = {}
    for post_hash, post_id, folded_through in snapshot.read(POSTS, columns=WATERMARK_COLUMNS,
                                                            keyset=spanner.KeySet(all_=True)):
        chunk[(post_hash, post_id)] = folded_through
        if len(chunk) >= READ_CHUNK:
            yield chunk
            chunk = {}
    if chunk:
        yield chunk


def delta_health(database, recent_window: timedelta = RECENT_WINDOW) -> DeltaHealth:
    """Unfolded deltas across all posts (count, oldest commit) and the last `recent_window`'s rate."""
    posts = unfolded = recent_rows = recent_votes = 0
    oldest: datetime | None = None
    with database.snapshot(multi_use=True) as snapshot:
        last_fold = last_fold_snapshot(snapshot)  # also starts the snapshot, fixing its timestamp
        read_at = snapshot._transaction_read_timestamp  # noqa: SLF001 - the client exposes it only here
        recent_since = read_at - recent_window
        for watermarks in _watermark_chunks(snapshot):
            posts += len(watermarks)
            starts = {key: min(watermark, recent_since) for key, watermark in watermarks.items()}
            for post_hash, post_id, committed_at, events in read_unfolded(
                    snapshot, starts, ("PostHash", "PostId", "CommittedAt", "Events")):
                if committed_at > watermarks[(post_hash, post_id)]:
                    unfolded += 1
                    oldest = committed_at if oldest is None else min(oldest, committed_at)
                if committed_at > recent_since:
                    recent_rows += 1
                    recent_votes += events
    return DeltaHealth(read_at, posts, last_fold, unfolded, oldest, recent_rows, recent_votes, recent_window)
