"""Reads: exact counts and top posts.

An exact count is the folded aggregate plus the deltas committed after the post's
watermark (spanner_store/unfolded.py), read in one read-only snapshot, so a fold committing in
between can never make a delta count twice or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from google.cloud.spanner_v1 import param_types

from schemas.counters import Counts
from schemas.records import PostTotals
from schemas.voter_sketch import estimate, union_of
from spanner_store.key_sets import KeySet
from spanner_store.tables import COUNTER_COLUMNS, POSTS, VOTERS, counts_at, post_key, sketch_value
from spanner_store.unfolded import READ_CHUNK, read_unfolded

# The ranking is the index order itself (Upvotes DESC, then the Posts key): no sort, and
# ties always come out in the same order. (Column names come from schemas/counters.py, never input.)
TOP_POSTS_SQL = f"""SELECT PostId, {", ".join(COUNTER_COLUMNS)}
FROM Posts@{{FORCE_INDEX=PostsByUpvotes}}
ORDER BY Upvotes DESC, PostHash, PostId
LIMIT @limit"""

LAST_FOLD_SQL = "SELECT SnapshotAt FROM FoldRuns ORDER BY SnapshotAt DESC LIMIT 1"


def exact_counts(database, post_ids: Iterable[str], unique: bool = False) -> list[PostTotals]:
    """Exact counts of the given posts, in the order asked; unknown posts read as zeros.
    With `unique`, also each post's unique voters (schemas/voter_sketch.py), from the same snapshot."""
    with database.snapshot(multi_use=True) as snapshot:
        return counts_in_snapshot(snapshot, post_ids, unique)


def counts_in_snapshot(snapshot, post_ids: Iterable[str], unique: bool = False) -> list[PostTotals]:
    """exact_counts inside a multi-use snapshot the caller holds (and reads other things in).

    Unique voters are the union of the folded sketch and the unfolded deltas' sketches, read
    in the same snapshot and the same ranges as the counts; only asked for, as they are bytes."""
    wanted = list(dict.fromkeys(post_ids))
    voters = (VOTERS,) if unique else ()
    counts: dict[str, Counts] = {}
    sketches: dict[str, list[bytes | None]] = {}
    for start in range(0, len(wanted), READ_CHUNK):
        keys = [list(post_key(p)) for p in wanted[start : start + READ_CHUNK]]
        watermarks = {}
        for row in snapshot.read(
            POSTS, columns=("PostHash", "PostId", "FoldedThrough") + COUNTER_COLUMNS + voters, keyset=KeySet(keys=keys)
        ):
            post_hash, post_id, folded_through = row[:3]
            counts[post_id] = counts_at(row, 3)
            sketches[post_id] = [sketch_value(s) for s in row[3 + len(COUNTER_COLUMNS) :]]
            watermarks[(post_hash, post_id)] = folded_through
        for row in read_unfolded(snapshot, watermarks, ("PostId",) + COUNTER_COLUMNS + voters):
            post_id = row[0]
            counts[post_id] = counts[post_id].plus(counts_at(row, 1))
            sketches[post_id] += [sketch_value(s) for s in row[1 + len(COUNTER_COLUMNS) :]]
    return [
        PostTotals(p, counts.get(p, Counts()), estimate(union_of(sketches.get(p, ()))) if unique else None)
        for p in wanted
    ]


@dataclass(frozen=True)
class TopPosts:
    posts: list[PostTotals]  # folded counts, highest upvotes first
    folded_through: datetime | None  # snapshot of the newest fold: the ranking is that old


def ranked_posts(snapshot, limit: int) -> list[PostTotals]:
    """The top `limit` posts by folded upvotes, straight from the PostsByUpvotes index."""
    rows = snapshot.execute_sql(TOP_POSTS_SQL, params={"limit": limit}, param_types={"limit": param_types.INT64})
    return [PostTotals(row[0], counts_at(row, 1)) for row in rows]


def last_fold_snapshot(snapshot) -> datetime | None:
    """The snapshot of the newest finished fold, or None if no fold has run."""
    last = list(snapshot.execute_sql(LAST_FOLD_SQL))
    return last[0][0] if last else None


def top_posts(database, limit: int = 10) -> TopPosts:
    """The top posts by folded upvotes and how fresh that ranking is, in one snapshot."""
    with database.snapshot(multi_use=True) as snapshot:
        return TopPosts(ranked_posts(snapshot, limit), last_fold_snapshot(snapshot))
