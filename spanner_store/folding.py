"""The fold's Spanner side: its snapshot, its reads and its compare-and-set transactions.

`transforms.fold_deltas.FoldDeltas` runs one fold run as a Beam pipeline over these pieces:

1. `choose_snapshot`: a strong read fixes the snapshot timestamp S. Spanner guarantees no
   later commit gets a timestamp <= S, so "deltas committed in (watermark, S]" is a fixed set.
2. `read_partition`: at exactly S, each partition of a partitioned read of Posts gives each
   post's watermark, and key-range reads of the interleaved commit-time index give every
   delta committed after it (a seek: old, folded deltas are never touched).
3. The transform sums them per post (and per event hour) into `PostFold`s.
4. `apply_folds`: the body of a short read-write transaction, many posts each, within a
   mutation budget (`fold_cost`). For each post: if its watermark is still the one the
   snapshot saw, add the sums and set the watermark to S (compare-and-set, so a delta is
   never folded twice). If another fold moved it to W < S in the meantime, the deltas in
   (W, S] are re-read inside the transaction and folded instead; if it is already >= S,
   nothing is done. A watermark never moves backwards, two concurrent folds end as one
   would, and a fold killed between transactions is completed by the next run.
5. `record_fold_run`: one FoldRuns row with S and the counts, for `upvotes top` to report
   how fresh the ranking is.
"""
from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timezone
from typing import Iterable, Iterator, NamedTuple

from google.cloud import spanner
from google.cloud.spanner_v1.database import BatchSnapshot

from spanner_store.database import commit_mutations, run_with_retries
from spanner_store.reads import READ_CHUNK, read_unfolded
from spanner_store.tables import (
    DELTA_SUM_COLUMNS, FOLD_RUN_COLUMNS, FOLD_RUNS, HOURLY, HOURLY_COLUMNS, POST_COLUMNS, POSTS, WATERMARK_COLUMNS,
)

# Posts row (5 columns) + its PostsByUpvotes entry replaced (2 x 5), and per hour a
# PostHourlyCounts row (5): the fold's side of Spanner's 80,000-mutation commit limit.
MUTATIONS_PER_POST = 15
MUTATIONS_PER_HOUR = 5


class FoldKey(NamedTuple):
    """A post as one fold run saw it: its key and its watermark at the snapshot."""


    post_hash: int
    post_id: str
    seen_watermark: str  # the post's watermark in the snapshot, as watermark_text() gives it


def watermark_text(timestamp: datetime) -> str:
    """A Spanner timestamp's exact RFC 3339 text. Grouping keys must encode deterministically,
    which datetimes do not; the text keeps the nanoseconds a datetime would drop."""
    if hasattr(timestamp, "rfc3339"):
        return timestamp.rfc3339()
    return timestamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class HourSums(NamedTuple):
    upvotes: int
    shares: int


class PostFold(NamedTuple):
    """Everything one post gains in this fold."""

    key: FoldKey
    upvotes: int
    shares: int
    deltas: int
    hours: dict  # datetime -> HourSums


class FoldOutcome(NamedTuple):
    posts_folded: int = 0
    deltas_folded: int = 0
    posts_refolded: int = 0  # watermark moved by a concurrent fold; re-read in the transaction
    posts_already_folded: int = 0

    def plus(self, other: "FoldOutcome") -> "FoldOutcome":
        return FoldOutcome(*(a + b for a, b in zip(self, other)))


def choose_snapshot(database) -> datetime:
    """The timestamp of a fresh strong read: every delta committed at or before it is visible."""
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))
        return snapshot._transaction_read_timestamp  # noqa: SLF001 - the client exposes it only here


def add_hours(into: dict, hours: Iterable[tuple[datetime, int, int]]) -> None:
    for hour, upvotes, shares in hours:
        current = into.get(hour, HourSums(0, 0))
        into[hour] = HourSums(current.upvotes + upvotes, current.shares + shares)


def fold_cost(fold: PostFold) -> int:
    return MUTATIONS_PER_POST + MUTATIONS_PER_HOUR * len(fold.hours)


def apply_folds(transaction, folds: list[PostFold], snapshot_at: datetime) -> FoldOutcome:
    """The body of one fold transaction (see the module docstring, step 4)."""
    keys = [[f.key.post_hash, f.key.post_id] for f in folds]
    current = {
        (row[0], row[1]): row
        for row in transaction.read(POSTS, columns=POST_COLUMNS, keyset=spanner.KeySet(keys=keys))
    }
    outcome = FoldOutcome()
    post_rows, hour_gains = [], {}
    for fold in folds:
        post_hash, post_id, seen = fold.key
        _, _, upvotes, shares, watermark = current[(post_hash, post_id)]
        if watermark >= snapshot_at:
            outcome = outcome.plus(FoldOutcome(posts_already_folded=1))
            continue
        if watermark_text(watermark) == seen:
            gain_up, gain_sh, deltas, hours = fold.upvotes, fold.shares, fold.deltas, fold.hours
            outcome = outcome.plus(FoldOutcome(posts_folded=1, deltas_folded=deltas))
        else:
            gain_up, gain_sh, deltas, hours = _refold(transaction, post_hash, post_id, watermark, snapshot_at)
            outcome = outcome.plus(FoldOutcome(posts_folded=1, deltas_folded=deltas, posts_refolded=1))
        post_rows.append((post_hash, post_id, upvotes + gain_up, shares + gain_sh, snapshot_at))
        for hour, sums in hours.items():
            hour_gains[(post_hash, post_id, hour)] = sums
    if hour_gains:
        existing = {
            (r[0], r[1], r[2]): (r[3], r[4])
            for r in transaction.read(
                HOURLY, columns=HOURLY_COLUMNS,
                keyset=spanner.KeySet(keys=[list(k) for k in hour_gains]),
            )
        }
        transaction.insert_or_update(
            HOURLY, columns=HOURLY_COLUMNS,
            values=[
                key + (existing.get(key, (0, 0))[0] + gain.upvotes, existing.get(key, (0, 0))[1] + gain.shares)
                for key, gain in hour_gains.items()
            ],
        )
    if post_rows:
        transaction.update(POSTS, columns=POST_COLUMNS, values=post_rows)
    return outcome


def _refold(transaction, post_hash: int, post_id: str, after: datetime, through: datetime):
    """The deltas of one post committed in (after, through], read inside the fold transaction."""
    hours: dict = {}
    upvotes = shares = deltas = 0
    for hour, up, sh in read_unfolded(transaction, {(post_hash, post_id): after}, DELTA_SUM_COLUMNS, through):
        add_hours(hours, [(hour, up, sh)])
        upvotes, shares, deltas = upvotes + up, shares + sh, deltas + 1
    return upvotes, shares, deltas, hours




def plan_partitions(database, snapshot_at: datetime) -> Iterator[tuple[dict, dict]]:
    """(BatchSnapshot handle, partition) pairs of a partitioned read of every post's watermark at S."""
    batch_snapshot = database.batch_snapshot(read_timestamp=snapshot_at)
    handle = batch_snapshot.to_dict()
    for partition in batch_snapshot.generate_read_batches(
            POSTS, columns=WATERMARK_COLUMNS, keyset=spanner.KeySet(all_=True)):
        yield handle, partition


def read_partition(database, handle: dict, partition: dict, snapshot_at: datetime) -> Iterator[tuple[FoldKey, tuple]]:
    """One partition of Posts -> (FoldKey, (hour, upvotes, shares)) for each unfolded delta,
    read as index ranges, READ_CHUNK posts per read, at exactly the same snapshot S."""
    # One iterator for the whole partition: every iter() of the client's result set starts
    # over and drops the rows the previous one had buffered.
    posts = iter(BatchSnapshot.from_dict(database, handle).process_read_batch(partition))
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        while chunk := {(h, p): wm for h, p, wm in itertools.islice(posts, READ_CHUNK)}:
            for h, p, hour, up, sh in read_unfolded(snapshot, chunk, ("PostHash", "PostId") + DELTA_SUM_COLUMNS):
                yield FoldKey(h, p, watermark_text(chunk[(h, p)])), (hour, up, sh)


def record_fold_run(database, snapshot_at: datetime, outcome: FoldOutcome, handle: dict | None) -> None:
    """Writes the FoldRuns row, then ends the partitioned read's session."""
    row = (str(uuid.uuid4()), snapshot_at, outcome.posts_folded, outcome.deltas_folded, spanner.COMMIT_TIMESTAMP)
    run_with_retries(lambda: commit_mutations(
        database, lambda batch: batch.insert(FOLD_RUNS, columns=FOLD_RUN_COLUMNS, values=[row])
    ))
    if handle is not None:
        BatchSnapshot.from_dict(database, handle).close()
