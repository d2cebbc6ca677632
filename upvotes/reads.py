"""Reads: exact counts, top posts, and verification against a publisher's ledger.

An exact count is the folded aggregate plus the deltas committed after the post's
watermark, read in one read-only snapshot, so a fold committing in between can never make a
delta count twice or not at all. The deltas are found through the interleaved commit-time
index, so a read touches only unfolded deltas however many old ones are kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from google.cloud.spanner_v1 import param_types

from schemas import post_hash
from transforms.records import PostTotals

EXACT_COUNTS_SQL = """SELECT p.PostId,
  p.Upvotes + COALESCE(SUM(d.Upvotes), 0) AS Upvotes,
  p.Shares + COALESCE(SUM(d.Shares), 0) AS Shares
FROM Posts AS p
LEFT JOIN PostDeltas@{FORCE_INDEX=PostDeltasByCommit} AS d
  ON d.PostHash = p.PostHash AND d.PostId = p.PostId AND d.CommittedAt > p.FoldedThrough
WHERE p.PostHash IN UNNEST(@post_hashes) AND p.PostId IN UNNEST(@post_ids)
GROUP BY p.PostId, p.Upvotes, p.Shares"""

TOP_POSTS_SQL = """SELECT PostId, Upvotes, Shares
FROM Posts@{FORCE_INDEX=PostsByUpvotes}
ORDER BY Upvotes DESC
LIMIT @limit"""

LAST_FOLD_SQL = "SELECT SnapshotAt FROM FoldRuns ORDER BY SnapshotAt DESC LIMIT 1"

# Spanner caps a query's parameters in total size; read big lists in chunks of this many.
READ_CHUNK = 10_000


def exact_counts(database, post_ids: Iterable[str]) -> list[PostTotals]:
    """Exact counts of the given posts, in the order asked; unknown posts read as zeros."""
    wanted = list(dict.fromkeys(post_ids))
    found: dict[str, PostTotals] = {}
    with database.snapshot(multi_use=True) as snapshot:
        for start in range(0, len(wanted), READ_CHUNK):
            chunk = wanted[start:start + READ_CHUNK]
            rows = snapshot.execute_sql(
                EXACT_COUNTS_SQL,
                params={"post_hashes": [post_hash(p) for p in chunk], "post_ids": chunk},
                param_types={
                    "post_hashes": param_types.Array(param_types.INT64),
                    "post_ids": param_types.Array(param_types.STRING),
                },
            )
            for post_id, upvotes, shares in rows:
                found[post_id] = PostTotals(post_id, upvotes, shares)
    return [found.get(p, PostTotals(p, 0, 0)) for p in wanted]


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
