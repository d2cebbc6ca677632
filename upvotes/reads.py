"""Reads: exact counts, top posts, and verification against a publisher's ledger.

An exact count is the folded aggregate plus the deltas committed after the post's
watermark, read in one read-only snapshot, so a fold committing in between can never make a
delta count twice or not at all.

Unfolded deltas are read as key ranges of the interleaved commit-time index, one range per
post from (post, watermark) exclusive to the end of the post: a seek, so a read touches only
unfolded deltas however many old ones are kept. (Measured on the emulator: the same
condition as SQL, even with the watermark as a constant parameter, scanned every delta of
the post, 370 ms with 50,000 old deltas against 7 ms for the range read.) The fold and the
hourly reads use the same ranges.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from schemas import post_hash
from transforms.records import PostTotals

TOP_POSTS_SQL = """SELECT PostId, Upvotes, Shares
FROM Posts@{FORCE_INDEX=PostsByUpvotes}
ORDER BY Upvotes DESC
LIMIT @limit"""

LAST_FOLD_SQL = "SELECT SnapshotAt FROM FoldRuns ORDER BY SnapshotAt DESC LIMIT 1"

DELTA_TABLE = "PostDeltas"
DELTA_INDEX = "PostDeltasByCommit"
# Posts per read call; bounds the size of one request's key set.
READ_CHUNK = 1_000

PostKey = tuple[int, str]  # (PostHash, PostId)


def unfolded_ranges(watermarks: Mapping[PostKey, datetime], through: datetime | None = None) -> spanner.KeySet:
    """Index ranges of each post's deltas committed after its watermark (and at or before `through`)."""
    return spanner.KeySet(ranges=[
        spanner.KeyRange(start_open=[h, p, after], end_closed=[h, p] if through is None else [h, p, through])
        for (h, p), after in watermarks.items()
    ])


def read_unfolded(snapshot, watermarks: Mapping[PostKey, datetime], columns: Sequence[str],
                  through: datetime | None = None) -> Iterable[list]:
    """Rows of `columns` (index, key or stored columns) of every unfolded delta of these posts."""
    if not watermarks:
        return []
    return snapshot.read(DELTA_TABLE, columns=columns, keyset=unfolded_ranges(watermarks, through), index=DELTA_INDEX)


def exact_counts(database, post_ids: Iterable[str]) -> list[PostTotals]:
    """Exact counts of the given posts, in the order asked; unknown posts read as zeros."""
    wanted = list(dict.fromkeys(post_ids))
    found: dict[str, list[int]] = {}
    with database.snapshot(multi_use=True) as snapshot:
        for start in range(0, len(wanted), READ_CHUNK):
            keys = [[post_hash(p), p] for p in wanted[start:start + READ_CHUNK]]
            watermarks = {}
            for h, post_id, upvotes, shares, folded_through in snapshot.read(
                    "Posts", columns=("PostHash", "PostId", "Upvotes", "Shares", "FoldedThrough"),
                    keyset=spanner.KeySet(keys=keys)):
                found[post_id] = [upvotes, shares]
                watermarks[(h, post_id)] = folded_through
            for post_id, upvotes, shares in read_unfolded(snapshot, watermarks, ("PostId", "Upvotes", "Shares")):
                found[post_id][0] += upvotes
                found[post_id][1] += shares
    return [PostTotals(p, *found.get(p, (0, 0))) for p in wanted]


@dataclass(frozen=True)
class TopPosts:
    posts: list[PostTotals]  # folded counts, highest upvotes first
    folded_through: datetime | None  # snapshot of the newest fold: the ranking is that old


def top_posts(database, limit: int = 10) -> TopPosts:
    """The top posts by folded upvotes, straight from the PostsByUpvotes index."""
    with database.snapshot(multi_use=True) as snapshot:
        rows = snapshot.execute_sql(
            TOP_POSTS_SQL, params={"limit": limit}, param_types={"limit": param_types.INT64}
        )
        posts = [PostTotals(post_id, upvotes, shares) for post_id, upvotes, shares in rows]
        last = list(snapshot.execute_sql(LAST_FOLD_SQL))
    return TopPosts(posts, last[0][0] if last else None)


@dataclass(frozen=True)
class Mismatch:
    post_id: str
    counter: str
    expected: int
    actual: int


def verify_totals(database, expected: dict[str, dict[str, int]]) -> list[Mismatch]:
    """Every post's exact count against the expected {post: {"upvotes": n, "shares": m}}."""
    mismatches = []
    for totals in exact_counts(database, expected):
        want = expected[totals.post_id]
        for counter in ("upvotes", "shares"):
            actual = getattr(totals, counter)
            if actual != want.get(counter, 0):
                mismatches.append(Mismatch(totals.post_id, counter, want.get(counter, 0), actual))
    return mismatches
