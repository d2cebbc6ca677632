"""How far behind the fold is, and how much the writers write: what `upvotes status` reports.

Read in one strong read-only snapshot, from the same structure the fold follows
(spanner_store/delta_commits.py, the exactness argument in spanner_writes/folding.py):

1. the cursor: the finished fold run with the largest ChangesThrough C, and the posts it skipped;
2. the DeltaCommits rows committed after min(C, now - recent window), a seek per shard: the
   rows in the recent window give the write rate (their DeltaRows and Events), the rows after
   C name every post that can have unfolded deltas, with the cursor run's skipped posts;
3. for those posts only, their watermarks (point reads) and one key range each of the
   interleaved commit-time index PostDeltasByCommit after the watermark: the unfolded deltas.

The cost is one row per commit since min(C, now - window), one Posts row per post changed since
C, and one index entry per unfolded delta: what is unfolded and recent, never the catalogue.
Without a cursor (no fold has recorded one: a new or migrated database), or with `full_scan`
(`upvotes status --full-scan`), step 3 reads every post's watermark instead, as the fold's full
scan does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.cloud import spanner

from spanner_reads.reads import last_fold_snapshot
from spanner_store.database import read_timestamp
from spanner_store.delta_commits import fold_cursor, read_changes
from spanner_store.key_sets import KeySet
from spanner_store.tables import POSTS, WATERMARK_COLUMNS, PostKey, post_key
from spanner_store.unfolded import READ_CHUNK, read_unfolded

RECENT_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class DeltaHealth:
    """The fold's lag and the writers' recent rate, as of one snapshot."""

    read_at: datetime
    posts_with_unfolded_deltas: int
    last_fold_snapshot: datetime | None
    unfolded_deltas: int
    oldest_unfolded_commit: datetime | None
    recent_delta_rows: int  # committed in the last `recent_window`
    recent_votes: int  # the Events of those rows
    recent_window: timedelta
    rows_read: int  # FoldRuns, DeltaCommits and Posts rows and delta index entries this report read
    full_scan: bool  # no cursor yet: every post's watermark was read


def _watermark_chunks(snapshot, keyset: spanner.KeySet) -> Iterator[dict[PostKey, datetime]]:
    rows = iter(snapshot.read(POSTS, columns=WATERMARK_COLUMNS, keyset=keyset))
    while chunk := {(h, p): wm for h, p, wm in itertools.islice(rows, READ_CHUNK)}:
        yield chunk


def _candidate_chunks(snapshot, post_ids: Iterable[str]) -> Iterator[dict[PostKey, datetime]]:
    keys = sorted({post_key(p) for p in post_ids})
    for start in range(0, len(keys), READ_CHUNK):
        yield from _watermark_chunks(snapshot, KeySet(keys=[list(k) for k in keys[start : start + READ_CHUNK]]))


def delta_health(database, recent_window: timedelta = RECENT_WINDOW, full_scan: bool = False) -> DeltaHealth:
    """Unfolded deltas (count, oldest commit, posts) and the last `recent_window`'s rate; with
    `full_scan`, every post's watermark is read even when a cursor exists (a check of the log)."""
    posts = unfolded = recent_rows = recent_votes = 0
    oldest: datetime | None = None
    with database.snapshot(multi_use=True) as snapshot:
        last_fold = last_fold_snapshot(snapshot)  # also starts the snapshot, fixing its timestamp
        read_at = read_timestamp(snapshot)
        recent_since = read_at - recent_window
        cursor = None if full_scan else fold_cursor(snapshot)
        rows_read = 1 + (0 if cursor is None else 1 + len(cursor.skipped))
        candidates = set() if cursor is None else {post.post_id for post in cursor.skipped}
        for change in read_changes(
            snapshot, recent_since if cursor is None else min(cursor.changes_through, recent_since)
        ):
            rows_read += 1
            if change.committed_at > recent_since:
                recent_rows += change.delta_rows
                recent_votes += change.events
            if cursor is not None and change.committed_at > cursor.changes_through:
                candidates.update(change.post_ids)
        chunks = (
            _watermark_chunks(snapshot, spanner.KeySet(all_=True))
            if cursor is None
            else _candidate_chunks(snapshot, candidates)
        )
        for watermarks in chunks:
            rows_read += len(watermarks)
            with_unfolded = set()
            for post_hash, post_id, committed_at in read_unfolded(
                snapshot, watermarks, ("PostHash", "PostId", "CommittedAt")
            ):
                rows_read += 1
                unfolded += 1
                with_unfolded.add((post_hash, post_id))
                oldest = committed_at if oldest is None else min(oldest, committed_at)
            posts += len(with_unfolded)
    return DeltaHealth(
        read_at, posts, last_fold, unfolded, oldest, recent_rows, recent_votes, recent_window, rows_read, cursor is None
    )
