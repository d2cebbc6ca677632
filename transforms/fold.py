"""Folding deltas into the Posts aggregate, exactly once, with commit timestamps as the watermark.

One fold run:
1. `ChooseSnapshot`: a strong read fixes the snapshot timestamp S. Spanner guarantees no
   later commit gets a timestamp <= S, so "deltas committed in (watermark, S]" is a fixed set.
2. `ReadUnfoldedDeltas`: at exactly S, a partitioned read of Posts gives each post's
   watermark, and key-range reads of the interleaved commit-time index give every delta
   committed after it (a seek: old, folded deltas are never touched). Partitions are read
   in parallel on Dataflow.
3. `SumPerPost`: per post (and per event hour), the deltas' sums.
4. `ApplyFolds`: short read-write transactions, many posts each, within a mutation budget.
   For each post: if its watermark is still the one the snapshot saw, add the sums and set
   the watermark to S (compare-and-set, so a delta is never folded twice). If another fold
   moved it to W < S in the meantime, the deltas in (W, S] are re-read inside the
   transaction and folded instead; if it is already >= S, nothing is done. A watermark never
   moves backwards, two concurrent folds end as one would, and a fold killed between
   transactions is completed by the next run.
5. `RecordFoldRun`: one FoldRuns row with S and the counts, for `upvotes top` to report
   how fresh the ranking is.
"""
from __future__ import annotations

import itertools
import uuid
from datetime import datetime, timezone
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from google.cloud import spanner
from google.cloud.spanner_v1.database import BatchSnapshot

from upvotes.database import DEFAULT_RETRY, commit_mutations, open_database, run_transaction, run_with_retries
from upvotes.reads import READ_CHUNK, read_unfolded

POST_COLUMNS = ("PostHash", "PostId", "Upvotes", "Shares", "FoldedThrough")
WATERMARK_COLUMNS = ("PostHash", "PostId", "FoldedThrough")
DELTA_COLUMNS = ("EventHour", "Upvotes", "Shares")
HOURLY_COLUMNS = ("PostHash", "PostId", "EventHour", "Upvotes", "Shares")
FOLD_RUN_COLUMNS = ("FoldId", "SnapshotAt", "PostsFolded", "DeltasFolded", "FinishedAt")
# Posts row (5 columns) + its PostsByUpvotes entry replaced (2 x 5), and per hour a
# PostHourlyCounts row (5): the fold's side of Spanner's 80,000-mutation commit limit.
MUTATIONS_PER_POST = 15
MUTATIONS_PER_HOUR = 5
DEFAULT_POSTS_PER_COMMIT = 500
DEFAULT_MAX_MUTATIONS = 20_000


class PostKey(NamedTuple):
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

    key: PostKey
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


class SumPostDeltas(beam.CombineFn):
    """(EventHour, Upvotes, Shares) rows of one post -> (upvotes, shares, deltas, {hour: HourSums})."""

    def create_accumulator(self):
        return [0, 0, 0, {}]

    def add_input(self, acc, row):
        hour, upvotes, shares = row
        acc[0] += upvotes
        acc[1] += shares
        acc[2] += 1
        add_hours(acc[3], [(hour, upvotes, shares)])
        return acc

    def merge_accumulators(self, accumulators):
        total = self.create_accumulator()
        for acc in accumulators:
            total[0] += acc[0]
            total[1] += acc[1]
            total[2] += acc[2]
            add_hours(total[3], [(h, s.upvotes, s.shares) for h, s in acc[3].items()])
        return total

    def extract_output(self, acc):
        return acc


def fold_cost(fold: PostFold) -> int:
    return MUTATIONS_PER_POST + MUTATIONS_PER_HOUR * len(fold.hours)


def apply_folds(transaction, folds: list[PostFold], snapshot_at: datetime) -> FoldOutcome:
    """The body of one fold transaction (see the module docstring, step 4)."""
    keys = [[f.key.post_hash, f.key.post_id] for f in folds]
    current = {
        (row[0], row[1]): row
        for row in transaction.read("Posts", columns=POST_COLUMNS, keyset=spanner.KeySet(keys=keys))
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
                "PostHourlyCounts", columns=HOURLY_COLUMNS,
                keyset=spanner.KeySet(keys=[list(k) for k in hour_gains]),
            )
        }
        transaction.insert_or_update(
            "PostHourlyCounts", columns=HOURLY_COLUMNS,
            values=[
                key + (existing.get(key, (0, 0))[0] + gain.upvotes, existing.get(key, (0, 0))[1] + gain.shares)
                for key, gain in hour_gains.items()
            ],
        )
    if post_rows:
        transaction.update("Posts", columns=POST_COLUMNS, values=post_rows)
    return outcome


def _refold(transaction, post_hash: int, post_id: str, after: datetime, through: datetime):
    """The deltas of one post committed in (after, through], read inside the fold transaction."""
    hours: dict = {}
    upvotes = shares = deltas = 0
    for hour, up, sh in read_unfolded(transaction, {(post_hash, post_id): after}, DELTA_COLUMNS, through):
        add_hours(hours, [(hour, up, sh)])
        upvotes, shares, deltas = upvotes + up, shares + sh, deltas + 1
    return upvotes, shares, deltas, hours


# --- Beam transforms ------------------------------------------------------------------

class _SpannerDoFn(beam.DoFn):
    def __init__(self, project: str, instance: str, database: str) -> None:
        self._where = (project, instance, database)

    def setup(self) -> None:
        self._database = open_database(*self._where)


class _PlanPartitions(_SpannerDoFn):
    """snapshot S -> (BatchSnapshot handle, partition) pairs of a partitioned read of Posts."""

    def process(self, snapshot_at: datetime):
        batch_snapshot = self._database.batch_snapshot(read_timestamp=snapshot_at)
        handle = batch_snapshot.to_dict()
        for partition in batch_snapshot.generate_read_batches(
                "Posts", columns=WATERMARK_COLUMNS, keyset=spanner.KeySet(all_=True)):
            yield handle, partition


class _ReadPartition(_SpannerDoFn):
    """One partition of Posts -> (PostKey, (hour, upvotes, shares)) for each unfolded delta,
    read as index ranges, READ_CHUNK posts per read, at exactly the same snapshot S."""

    def process(self, element, snapshot_at: datetime):
        handle, partition = element
        # One iterator for the whole partition: every iter() of the client's result set starts
        # over and drops the rows the previous one had buffered.
        posts = iter(BatchSnapshot.from_dict(self._database, handle).process_read_batch(partition))
        with self._database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
            while chunk := {(h, p): wm for h, p, wm in itertools.islice(posts, READ_CHUNK)}:
                for h, p, hour, up, sh in read_unfolded(snapshot, chunk, ("PostHash", "PostId") + DELTA_COLUMNS):
                    yield PostKey(h, p, watermark_text(chunk[(h, p)])), (hour, up, sh)


class _ChooseSnapshot(_SpannerDoFn):
    def process(self, _):
        yield choose_snapshot(self._database)


class _ApplyFoldsFn(_SpannerDoFn):
    """Buffers PostFolds and applies them in transactions of bounded size."""

    def __init__(self, project, instance, database, posts_per_commit: int, max_mutations: int = DEFAULT_MAX_MUTATIONS):
        super().__init__(project, instance, database)
        self._posts_per_commit = posts_per_commit
        self._max_mutations = max_mutations
        self._metrics = {name: Metrics.counter("FoldDeltas", name) for name in FoldOutcome._fields}
        self._retries = Metrics.counter("FoldDeltas", "transient_retries")

    def start_bundle(self) -> None:
        self._buffer: list[PostFold] = []
        self._cost = 0

    def process(self, fold: PostFold, snapshot_at: datetime) -> Iterator[FoldOutcome]:
        if self._buffer and (len(self._buffer) >= self._posts_per_commit or self._cost + fold_cost(fold) > self._max_mutations):
            yield self._flush(snapshot_at)
        self._buffer.append(fold)
        self._cost += fold_cost(fold)
        self._snapshot_at = snapshot_at

    def finish_bundle(self):
        if self._buffer:
            yield beam.transforms.window.GlobalWindows.windowed_value(self._flush(self._snapshot_at))

    def _flush(self, snapshot_at: datetime) -> FoldOutcome:
        folds, self._buffer, self._cost = self._buffer, [], 0
        outcome = run_with_retries(
            lambda: run_transaction(self._database, lambda txn: apply_folds(txn, folds, snapshot_at)),
            DEFAULT_RETRY,
            lambda _: self._retries.inc(),
        )
        for name, value in outcome._asdict().items():
            self._metrics[name].inc(value)
        return outcome


class _RecordFoldRun(_SpannerDoFn):
    """Writes the FoldRuns row, then ends the partitioned read's session."""

    def process(self, outcome: FoldOutcome, snapshot_at: datetime, handle: dict | None):
        row = (str(uuid.uuid4()), snapshot_at, outcome.posts_folded, outcome.deltas_folded, spanner.COMMIT_TIMESTAMP)
        run_with_retries(lambda: commit_mutations(
            self._database, lambda batch: batch.insert("FoldRuns", columns=FOLD_RUN_COLUMNS, values=[row])
        ))
        if handle is not None:
            BatchSnapshot.from_dict(self._database, handle).close()
        yield outcome


def _to_post_fold(keyed) -> PostFold:
    key, (upvotes, shares, deltas, hours) = keyed
    return PostFold(key, upvotes, shares, deltas, hours)


class FoldDeltas(beam.PTransform):
    """PBegin -> one FoldOutcome: folds every unfolded delta into Posts and PostHourlyCounts.

    Metrics: FoldDeltas/posts_folded, deltas_folded, posts_refolded, posts_already_folded,
    transient_retries.
    """

    def __init__(
        self, project: str, instance: str, database: str,
        posts_per_commit: int = DEFAULT_POSTS_PER_COMMIT, snapshot_at: datetime | None = None,
    ):
        """`snapshot_at` folds as of a given past timestamp (under an hour old) instead of now."""
        super().__init__()
        self._where = (project, instance, database)
        self._posts_per_commit = posts_per_commit
        self._snapshot_at = snapshot_at

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        if self._snapshot_at is not None:
            snapshot = begin | "GivenSnapshot" >> beam.Create([self._snapshot_at])
        else:
            snapshot = begin | "Start" >> beam.Impulse() | "ChooseSnapshot" >> beam.ParDo(_ChooseSnapshot(*self._where))
        at = beam.pvalue.AsSingleton(snapshot)
        partitions = snapshot | "PlanPartitions" >> beam.ParDo(_PlanPartitions(*self._where))
        session = (
            partitions
            | "HandleOnly" >> beam.Map(lambda planned: planned[0])
            | "SessionHandle" >> beam.CombineGlobally(_any_handle)
        )
        return (
            partitions
            | "SpreadPartitions" >> beam.Reshuffle()
            | "ReadUnfoldedDeltas" >> beam.ParDo(_ReadPartition(*self._where), at)
            | "SumPerPost" >> beam.CombinePerKey(SumPostDeltas())
            | "ToPostFold" >> beam.Map(_to_post_fold)
            | "ApplyFolds" >> beam.ParDo(_ApplyFoldsFn(*self._where, self._posts_per_commit), at)
            | "TotalOutcome" >> beam.CombineGlobally(_sum_outcomes)
            | "RecordFoldRun" >> beam.ParDo(
                _RecordFoldRun(*self._where), at, beam.pvalue.AsSingleton(session))
        )


def _any_handle(handles: Iterable[dict | None]) -> dict | None:
    """The partitions share one read session; any of their handles names it."""
    return next((handle for handle in handles if handle is not None), None)


def _sum_outcomes(outcomes: Iterable[FoldOutcome]) -> FoldOutcome:
    total = FoldOutcome()
    for outcome in outcomes:
        total = total.plus(outcome)
    return total
