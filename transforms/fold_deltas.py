"""FoldDeltas: one fold run, as a Beam pipeline over the fold's Spanner pieces.

    Impulse -> ChooseSnapshot S -> PlanPartitions (of Posts, at S) -> Reshuffle
      -> ReadUnfoldedDeltas (index ranges after each watermark, at S) -> SumPerPost
      -> ApplyFolds (compare-and-set transactions) -> TotalOutcome -> RecordFoldRun

Why each step is exact (the snapshot, the compare-and-set, concurrent and killed folds) is
in `spanner_store.folding`, which holds every read and transaction used here. Partitions
are read in parallel on Dataflow.
"""
from __future__ import annotations

from datetime import datetime
import logging
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from schemas.voter_sketch import union_of
from spanner_store.database import (
    DEFAULT_RETRY, MUTATION_BUDGET, TRANSIENT_ERRORS, open_database, run_transaction, run_with_retries,
)
from spanner_store.folding import (
    FoldOutcome, PostFold, add_hours, apply_folds, choose_snapshot, fold_cost, fold_post_in_steps, plan_partitions,
    read_partition, record_fold_run,
)

LOG = logging.getLogger(__name__)


class SumPostDeltas(beam.CombineFn):
    """(EventHour, Upvotes, Shares, Voters) rows of one post -> (upvotes, shares, deltas, {hour: HourSums})."""

    def create_accumulator(self):
        return [0, 0, 0, {}]

    def add_input(self, acc, row):
        _, upvotes, shares, _ = row
        acc[0] += upvotes
        acc[1] += shares
        acc[2] += 1
        add_hours(acc[3], [row])
        return acc

    def merge_accumulators(self, accumulators):
        total = self.create_accumulator()
        for acc in accumulators:
            total[0] += acc[0]
            total[1] += acc[1]
            total[2] += acc[2]
            add_hours(total[3], [(h, *sums) for h, sums in acc[3].items()])
        return total

    def extract_output(self, acc):
        return acc


class _SpannerDoFn(beam.DoFn):
    def __init__(self, project: str, instance: str, database: str) -> None:
        self._where = (project, instance, database)

    def setup(self) -> None:
        self._database = open_database(*self._where)


class _PlanPartitions(_SpannerDoFn):
    """snapshot S -> (BatchSnapshot handle, partition) pairs of a partitioned read of Posts."""

    def process(self, snapshot_at: datetime):
        yield from plan_partitions(self._database, snapshot_at)


class _ReadPartition(_SpannerDoFn):
    """One partition of Posts -> (FoldKey, (hour, upvotes, shares, voters)) for each unfolded delta."""

    def process(self, element, snapshot_at: datetime):
        handle, partition = element
        yield from read_partition(self._database, handle, partition, snapshot_at)


class _ChooseSnapshot(_SpannerDoFn):
    def process(self, _):
        yield choose_snapshot(self._database)


class _ApplyFoldsFn(_SpannerDoFn):
    """Buffers PostFolds and applies them in transactions of bounded size."""

    def __init__(self, project, instance, database, posts_per_commit: int, max_mutations: int = MUTATION_BUDGET):
        super().__init__(project, instance, database)
        self._posts_per_commit = posts_per_commit
        self._max_mutations = max_mutations
        self._metrics = {name: Metrics.counter("FoldDeltas", name) for name in FoldOutcome._fields}
        self._retries = Metrics.counter("FoldDeltas", "transient_retries")

    def start_bundle(self) -> None:
        self._buffer: list[PostFold] = []
        self._cost = 0

    def process(self, fold: PostFold, snapshot_at: datetime) -> Iterator[FoldOutcome]:
        self._snapshot_at = snapshot_at
        if fold_cost(fold) > self._max_mutations:
            # Too many hours for one commit: this post alone, in bounded steps.
            yield self._count(self._or_skip(fold, lambda: fold_post_in_steps(
                self._database, fold, snapshot_at, self._max_mutations, lambda _: self._retries.inc())))
            return
        if self._buffer and (len(self._buffer) >= self._posts_per_commit or self._cost + fold_cost(fold) > self._max_mutations):
            yield self._flush(snapshot_at)
        self._buffer.append(fold)
        self._cost += fold_cost(fold)

    def finish_bundle(self):
        if self._buffer:
            yield beam.transforms.window.GlobalWindows.windowed_value(self._flush(self._snapshot_at))

    def _apply(self, folds: list[PostFold], snapshot_at: datetime) -> FoldOutcome:
        return run_with_retries(
            lambda: run_transaction(self._database, lambda txn: apply_folds(txn, folds, snapshot_at)),
            DEFAULT_RETRY,
            lambda _: self._retries.inc(),
        )

    def _flush(self, snapshot_at: datetime) -> FoldOutcome:
        folds, self._buffer, self._cost = self._buffer, [], 0
        if len(folds) == 1:
            return self._count(self._or_skip(folds[0], lambda: self._apply(folds, snapshot_at)))
        try:
            outcome = self._apply(folds, snapshot_at)
        except Exception as error:  # noqa: BLE001 - sorted by _skippable
            if not _skippable(error):
                raise
            # Some post of the batch cannot be folded: fold each alone so only it is skipped.
            outcome = FoldOutcome()
            for fold in folds:
                outcome = outcome.plus(self._or_skip(fold, lambda f=fold: self._apply([f], snapshot_at)))
        return self._count(outcome)

    def _or_skip(self, fold: PostFold, work: Callable[[], FoldOutcome]) -> FoldOutcome:
        """`work()`, or one skipped post when it fails with a non-transient error."""
        try:
            return work()
        except Exception as error:  # noqa: BLE001 - sorted by _skippable
            if not _skippable(error):
                raise
            LOG.error("fold of post %r skipped; it stays unfolded and reads stay exact: %r", fold.key.post_id, error)
            return FoldOutcome(posts_skipped=1)

    def _count(self, outcome: FoldOutcome) -> FoldOutcome:
        for name, value in outcome._asdict().items():
            self._metrics[name].inc(value)
        return outcome


class _RecordFoldRun(_SpannerDoFn):
    def process(self, outcome: FoldOutcome, snapshot_at: datetime, handle: dict | None):
        record_fold_run(self._database, snapshot_at, outcome, handle)
        yield outcome


def _to_post_fold(keyed) -> PostFold:
    key, (upvotes, shares, deltas, hours) = keyed
    # Every delta of the fold is in one of its hours: the post's voters are the hours' union.
    return PostFold(key, upvotes, shares, deltas, hours, union_of(sums.voters for sums in hours.values()))


class FoldDeltas(beam.PTransform):
    """PBegin -> one FoldOutcome: folds every unfolded delta into Posts and PostHourlyCounts.

    A post with more unfolded event hours than fit one commit is folded alone in bounded
    steps (posts_split); a post whose fold fails with a non-transient error is skipped,
    logged and counted (posts_skipped, also in its FoldRuns row) and every other post is
    still folded.

    Metrics: FoldDeltas/posts_folded, deltas_folded, posts_refolded, posts_already_folded,
    posts_split, posts_skipped, transient_retries.
    """

    def __init__(
        self, project: str, instance: str, database: str,
        posts_per_commit: int, snapshot_at: datetime | None = None,
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


def _skippable(error: Exception) -> bool:
    """A post's fold failing this way is skipped, so one post never blocks the others.
    Transient errors that outlast the retries (Spanner unreachable) still fail the whole run,
    and so do broken invariants (AssertionError, the test suite's commit-size check)."""
    return not isinstance(error, TRANSIENT_ERRORS + (AssertionError,))


def _any_handle(handles: Iterable[dict | None]) -> dict | None:
    """The partitions share one read session; any of their handles names it."""
    return next((handle for handle in handles if handle is not None), None)


def _sum_outcomes(outcomes: Iterable[FoldOutcome]) -> FoldOutcome:
    total = FoldOutcome()
    for outcome in outcomes:
        total = total.plus(outcome)
    return total
