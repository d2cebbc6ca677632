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

from schemas.counters import NAMES, Counts
from schemas.records import CounterSums, PostTotals
from schemas.voter_sketch import estimate, union_of
from spanner_store.tables import (
    COUNTER_COLUMNS, DELTAS, DELTAS_BY_COMMIT, POSTS, VOTERS, PostKey, counts_at, post_key, sketch_value,
)

# The ranking is the index order itself (Upvotes DESC, then the Posts key): no sort, and
# ties always come out in the same order. (Column names come from schemas/counters.py, never input.)
TOP_POSTS_SQL = f"""SELECT PostId, {", ".join(COUNTER_COLUMNS)}
FROM Posts@{{FORCE_INDEX=PostsByUpvotes}}
ORDER BY Upvotes DESC, PostHash, PostId
LIMIT @limit"""

LAST_FOLD_SQL = "SELECT SnapshotAt FROM FoldRuns ORDER BY SnapshotAt DESC LIMIT 1"

# Posts per read call; bounds the size of one request's key set.
READ_CHUNK = 1_000


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
    return snapshot.read(DELTAS, columns=columns, keyset=unfolded_ranges(watermarks, through), index=DELTAS_BY_COMMIT)


def hour_sums_of(row) -> tuple[datetime, CounterSums]:
    """A row of DELTA_SUM_COLUMNS (EventHour, the counters, Voters), of PostDeltas or
    PostHourlyCounts, as (its event hour, its sums; no events: they are not read)."""
    return row[0], CounterSums(counts_at(row, 1), voters=sketch_value(row[-1]))


def hourly_watermark(folded_through: datetime, hourly_folded_through: datetime | None) -> datetime:
    """The watermark of a post's PostHourlyCounts rows (NULL: in step with FoldedThrough)."""
    return folded_through if hourly_folded_through is None else hourly_folded_through


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
        keys = [list(post_key(p)) for p in wanted[start:start + READ_CHUNK]]
        watermarks = {}
        for row in snapshot.read(POSTS, columns=("PostHash", "PostId", "FoldedThrough") + COUNTER_COLUMNS + voters,
                                 keyset=spanner.KeySet(keys=keys)):
            post_hash, post_id, folded_through = row[:3]
            counts[post_id] = counts_at(row, 3)
            sketches[post_id] = [sketch_value(s) for s in row[3 + len(COUNTER_COLUMNS):]]
            watermarks[(post_hash, post_id)] = folded_through
        for row in read_unfolded(snapshot, watermarks, ("PostId",) + COUNTER_COLUMNS + voters):
            post_id = row[0]
            counts[post_id] = counts[post_id].plus(counts_at(row, 1))
            sketches[post_id] += [sketch_value(s) for s in row[1 + len(COUNTER_COLUMNS):]]
    return [PostTotals(p, counts.get(p, Counts()), estimate(union_of(sketches.get(p, ()))) if unique else None)
            for p in wanted]


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


# Column names from schemas/counters.py, never input.
DELTA_ROW_COUNTS_SQL = f"""SELECT COUNT(*), {" + ".join(f"COUNTIF({c} != 0)" for c in COUNTER_COLUMNS)}
FROM PostDeltas"""


def delta_row_counts(database) -> tuple[int, int]:
    """Delta rows kept, and the (post, counter, pane) groups they hold: what one row per post,
    counter and pane would have cost. A full scan, for the demo and benchmarks only."""
    with database.snapshot() as snapshot:
        return tuple(list(snapshot.execute_sql(DELTA_ROW_COUNTS_SQL))[0])


@dataclass(frozen=True)
class Mismatch:
    post_id: str
    counter: str
    expected: int
    actual: int


def verify_unique_voters(database, expected: dict[str, int], tolerance: float) -> list[Mismatch]:
    """Every post's unique voters against the exact {post: distinct voters}: an estimate off by
    more than `tolerance` (relative; none at all for a post without voters) is a mismatch."""
    mismatches = []
    for totals in exact_counts(database, expected, unique=True):
        want = expected[totals.post_id]
        if abs(totals.unique_voters - want) > tolerance * want:
            mismatches.append(Mismatch(totals.post_id, "unique_voters", want, totals.unique_voters))
    return mismatches


def verify_totals(database, expected: dict[str, dict[str, int]]) -> list[Mismatch]:
    """Every post's exact count against the expected {post: {counter name: n}} (a missing counter: 0)."""
    mismatches = []
    for totals in exact_counts(database, expected):
        want = expected[totals.post_id]
        for counter, actual in zip(NAMES, totals.counts):
            if actual != want.get(counter, 0):
                mismatches.append(Mismatch(totals.post_id, counter, want.get(counter, 0), actual))
    return mismatches
