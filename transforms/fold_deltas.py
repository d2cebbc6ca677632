"""FoldDeltas: one fold run, as a Beam pipeline over the fold's Spanner pieces.

    Impulse -> PlanFold (chooses S, reads the cursor at S: the run's one FoldPlan, a side input of
               every step below, which takes S and the cursor from it and nowhere else)
      following the log:  PlanShards -> Reshuffle -> ReadChangedPosts (DeltaCommits after the
                          cursor, one shard each) + the cursor run's skipped posts -> Distinct
                          -> BatchElements -> ReadCandidates (watermarks, unfolded index ranges)
      or a full scan:     PlanPartitions (of Posts, at S) -> Reshuffle -> ReadUnfoldedDeltas
      -> SumPerPost -> ByKeyRange -> ApplyFolds (compare-and-set transactions) -> TotalOutcome
      -> RecordFoldRun (ChangesThrough: S, or less past the run's budget; the posts skipped)

Why each step is exact (the snapshot, the cursor, the compare-and-set, concurrent and killed
folds) is in `spanner_writes.folding`, which holds every read and transaction used here. Shards
and partitions are read in parallel on Dataflow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

import apache_beam as beam
from apache_beam.metrics import Metrics

from schemas.records import CounterSums
from spanner_store.database import (
    DEFAULT_RETRY,
    MUTATION_BUDGET,
    is_transient,
    open_database,
    run_transaction,
    run_with_retries,
)
from spanner_store.delta_commits import SkippedPost
from spanner_store.tables import COMMIT_SHARDS, key_range
from spanner_store.unfolded import READ_CHUNK
from spanner_writes.folding import (
    FoldKey,
    FoldOutcome,
    FoldPlan,
    PostFold,
    apply_folds,
    choose_snapshot,
    fold_cost,
    fold_post_in_steps,
    key_of,
    oldest_unfolded_commit,
    outlived_snapshot,
    plan_fold,
    plan_partitions,
    read_candidates,
    read_partition,
    read_shard_changes,
    record_fold_run,
)

LOG = logging.getLogger(__name__)


class SumPostDeltas(beam.CombineFn):
    """(event hour, CounterSums) of each unfolded delta of one post -> its PostFold, not yet keyed."""

    def create_accumulator(self) -> PostFold:
        return PostFold.empty()

    def add_input(self, acc: PostFold, delta: tuple[datetime, CounterSums]) -> PostFold:
        acc.add(*delta)
        return acc

    def merge_accumulators(self, accumulators: Iterable[PostFold]) -> PostFold:
        total = self.create_accumulator()
        for acc in accumulators:
            total.merge(acc)
        return total

    def extract_output(self, acc: PostFold) -> PostFold:
        return acc


class _SpannerDoFn(beam.DoFn):
    def __init__(self, project: str, instance: str, database: str) -> None:
        self._where = (project, instance, database)

    def setup(self) -> None:
        self._database = open_database(*self._where)


class _CountingDoFn(_SpannerDoFn):
    """A read step: counts the rows it reads in FoldDeltas/rows_read."""

    def __init__(self, project: str, instance: str, database: str) -> None:
        super().__init__(project, instance, database)
        self._rows_read = Metrics.counter("FoldDeltas", "rows_read")

    def count_rows(self, rows: int) -> None:
        self._rows_read.inc(rows)


class _PlanFold(_CountingDoFn):
    """Impulse -> the run's FoldPlan: its snapshot S (the given one, or a strong read's), its
    cursor at S, its budget, and whether it scans every post.

    S is chosen here and carried only in the plan: every read, every apply and the recorded
    ChangesThrough take it from the plan, so no step can see another timestamp (a second
    "now", from a side input a runner re-evaluated, would let the run vouch for deltas it
    never read)."""

    def __init__(
        self,
        project: str,
        instance: str,
        database: str,
        snapshot_at: datetime | None,
        full_scan: bool,
        max_delta_rows: int,
    ) -> None:
        super().__init__(project, instance, database)
        self._snapshot_at = snapshot_at
        self._full_scan = full_scan
        self._max_delta_rows = max_delta_rows
        self._full_scans = Metrics.counter("FoldDeltas", "full_scans")

    def process(self, _):
        snapshot_at = choose_snapshot(self._database) if self._snapshot_at is None else self._snapshot_at
        plan, rows = plan_fold(self._database, snapshot_at, self._full_scan, self._max_delta_rows)
        self.count_rows(rows)
        if plan.full_scan:
            self._full_scans.inc()
            LOG.info(
                "fold at %s scans every post (%s)",
                snapshot_at,
                "asked for" if plan.cursor else "no fold has recorded a cursor yet",
            )
        yield plan


class _PlanPartitions(_SpannerDoFn):
    """FoldPlan -> (BatchSnapshot handle, partition) pairs of a partitioned read of Posts (full scans only)."""

    def __init__(self, project: str, instance: str, database: str, data_boost: bool) -> None:
        super().__init__(project, instance, database)
        self._data_boost = data_boost

    def process(self, plan: FoldPlan):
        if plan.full_scan:
            yield from plan_partitions(self._database, plan.snapshot_at, self._data_boost)


class _ReadPartition(_CountingDoFn):
    """One partition of Posts -> (FoldKey, (hour, CounterSums)) for each unfolded delta, at the plan's S."""

    def process(self, element, plan: FoldPlan):
        handle, partition = element
        yield from read_partition(self._database, handle, partition, plan.snapshot_at, self.count_rows)


class _ReadChangedPosts(_CountingDoFn):
    """A shard number -> the post IDs of its DeltaCommits rows committed after the cursor, at S,
    within the run's budget; THROUGH: how far the shard was taken (folding.read_shard_changes)."""

    THROUGH = "through"

    def process(self, shard: int, plan: FoldPlan):
        changes = read_shard_changes(self._database, plan, shard, self.count_rows)
        yield from changes.post_ids
        yield beam.pvalue.TaggedOutput(self.THROUGH, changes.through)


class _ReadCandidates(_CountingDoFn):
    """A batch of post IDs -> (FoldKey, (hour, CounterSums)) for each unfolded delta, at the plan's S."""

    def process(self, post_ids: list[str], plan: FoldPlan):
        yield from read_candidates(self._database, post_ids, plan.snapshot_at, self.count_rows)


class _ApplyFoldsFn(_SpannerDoFn):
    """(key range, its PostFolds) -> the range's posts applied in key order, in transactions of
    bounded size that never span two ranges (on real Spanner each touches the splits of one
    range, not one split per post), through the plan's S. Main output: FoldOutcomes; SKIPPED: a
    SkippedPost for each post whose fold failed with a non-transient error."""

    SKIPPED = "skipped"

    def __init__(self, project, instance, database, posts_per_commit: int, max_mutations: int = MUTATION_BUDGET):
        super().__init__(project, instance, database)
        self._posts_per_commit = posts_per_commit
        self._max_mutations = max_mutations
        self._metrics = {name: Metrics.counter("FoldDeltas", name) for name in FoldOutcome._fields}
        self._retries = Metrics.counter("FoldDeltas", "transient_retries")

    def start_bundle(self) -> None:
        self._buffer: list[PostFold] = []
        self._cost = 0
        self._skipped: list[SkippedPost] = []

    def process(self, keyed: tuple[int, Iterable[PostFold]], plan: FoldPlan) -> Iterator:
        _, folds = keyed
        snapshot_at = plan.snapshot_at
        for fold in sorted(folds, key=lambda f: (key_of(f).post_hash, key_of(f).post_id)):
            if fold_cost(fold) > self._max_mutations:
                # Too many hours for one commit: this post alone, in bounded steps.
                yield self._count(
                    self._or_skip(
                        fold,
                        snapshot_at,
                        lambda: fold_post_in_steps(  # called at once
                            self._database, fold, snapshot_at, self._max_mutations, lambda _: self._retries.inc()
                        ),
                    )
                )
                continue
            if self._buffer and (
                len(self._buffer) >= self._posts_per_commit or self._cost + fold_cost(fold) > self._max_mutations
            ):
                yield self._flush(snapshot_at)
            self._buffer.append(fold)
            self._cost += fold_cost(fold)
        if self._buffer:
            yield self._flush(snapshot_at)
        yield from self._skipped_outputs()

    def _skipped_outputs(self) -> Iterator[beam.pvalue.TaggedOutput]:
        skipped, self._skipped = self._skipped, []
        for post in skipped:
            yield beam.pvalue.TaggedOutput(self.SKIPPED, post)

    def _apply(self, folds: list[PostFold], snapshot_at: datetime) -> FoldOutcome:
        return run_with_retries(
            lambda: run_transaction(self._database, lambda txn: apply_folds(txn, folds, snapshot_at)),
            DEFAULT_RETRY,
            lambda _: self._retries.inc(),
        )

    def _flush(self, snapshot_at: datetime) -> FoldOutcome:
        folds, self._buffer, self._cost = self._buffer, [], 0
        if len(folds) == 1:
            return self._count(self._or_skip(folds[0], snapshot_at, lambda: self._apply(folds, snapshot_at)))
        try:
            outcome = self._apply(folds, snapshot_at)
        except Exception as error:  # noqa: BLE001 - sorted by _skippable
            if not _skippable(error, snapshot_at):
                raise
            # Some post of the batch cannot be folded: fold each alone so only it is skipped.
            outcome = FoldOutcome()
            for fold in folds:
                outcome = outcome.plus(self._or_skip(fold, snapshot_at, lambda: self._apply([fold], snapshot_at)))
        return self._count(outcome)

    def _or_skip(self, fold: PostFold, snapshot_at: datetime, work: Callable[[], FoldOutcome]) -> FoldOutcome:
        """`work()`, or one skipped post when it fails with a non-transient error."""
        try:
            return work()
        except Exception as error:  # noqa: BLE001 - sorted by _skippable
            if not _skippable(error, snapshot_at):
                raise
            key = key_of(fold)
            LOG.error("fold of post %r skipped; it stays unfolded and reads stay exact: %r", key.post_id, error)
            self._skipped.append(SkippedPost(key.post_hash, key.post_id, repr(error)))
            return FoldOutcome(posts_skipped=1)

    def _count(self, outcome: FoldOutcome) -> FoldOutcome:
        for name, value in outcome._asdict().items():
            self._metrics[name].inc(value)
        return outcome


class _RecordFoldRun(_SpannerDoFn):
    """The run's total -> its FoldRuns row; then FoldDeltas/oldest_unfolded_age_s, the age of the
    oldest delta the run leaves unfolded (its skipped posts' and the commits past its budget),
    which the alerts as code watch against the 30-day retention (templates/monitoring)."""

    def __init__(self, project: str, instance: str, database: str) -> None:
        super().__init__(project, instance, database)
        self._oldest_unfolded_age = Metrics.counter("FoldDeltas", "oldest_unfolded_age_s")

    def process(
        self,
        outcome: FoldOutcome,
        plan: FoldPlan,
        skipped: list[SkippedPost],
        handle: dict | None,
        changes_through: datetime | None,
    ):
        record_fold_run(self._database, plan, outcome, skipped, handle, changes_through)
        oldest, now = oldest_unfolded_commit(self._database, plan, skipped, changes_through)
        if oldest is not None:
            assert now is not None  # read with `oldest`
            self._oldest_unfolded_age.inc(int((now - oldest).total_seconds()))
        yield outcome


def _to_post_fold(keyed: tuple[FoldKey, PostFold]) -> PostFold:
    key, fold = keyed
    return fold.keyed(key)


def _shards(plan: FoldPlan) -> Iterable[int]:
    return [] if plan.full_scan else range(COMMIT_SHARDS)


class FoldDeltas(beam.PTransform):
    """PBegin -> one FoldOutcome: folds every unfolded delta into Posts and PostHourlyCounts.

    It reads only the posts with deltas committed after the previous run's cursor (the
    DeltaCommits change log), or every post when no run has recorded a cursor yet or
    `full_scan` asks for it (with Spanner Data Boost when `data_boost`).

    A post with more unfolded event hours than fit one commit is folded alone in bounded
    steps (posts_split); a post whose fold fails with a non-transient error is skipped,
    logged and counted (posts_skipped, also in its FoldRuns row, and listed in
    FoldRunSkippedPosts for the next run) and every other post is still folded.

    A run takes the change log's commits oldest first up to `max_delta_rows_per_run` delta rows
    and leaves the rest to the next run (spanner_store.folding, "A run's work is bounded"). Posts
    are applied grouped by key range (tables.key_range), in key order.

    Metrics: FoldDeltas/posts_folded, deltas_folded, posts_refolded, posts_already_folded,
    posts_split, posts_skipped, rows_read, full_scans, transient_retries, oldest_unfolded_age_s.
    """

    def __init__(
        self,
        project: str,
        instance: str,
        database: str,
        posts_per_commit: int,
        snapshot_at: datetime | None = None,
        *,
        full_scan: bool,
        data_boost: bool,
        max_delta_rows_per_run: int,
    ):
        """`snapshot_at` folds as of a given past timestamp (under an hour old) instead of now."""
        super().__init__()
        self._where = (project, instance, database)
        self._posts_per_commit = posts_per_commit
        self._snapshot_at = snapshot_at
        self._full_scan = full_scan
        self._data_boost = data_boost
        self._max_delta_rows = max_delta_rows_per_run

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        plan = (
            begin
            | "Start" >> beam.Impulse()
            | "PlanFold"
            >> beam.ParDo(_PlanFold(*self._where, self._snapshot_at, self._full_scan, self._max_delta_rows))
        )
        planned = beam.pvalue.AsSingleton(plan)  # the only source of S and the cursor below

        partitions = plan | "PlanPartitions" >> beam.ParDo(_PlanPartitions(*self._where, self._data_boost))
        session = (
            partitions
            | "HandleOnly" >> beam.Map(lambda planned: planned[0])
            | "SessionHandle" >> beam.CombineGlobally(_any_handle)
        )
        scanned = (
            partitions
            | "SpreadPartitions" >> beam.Reshuffle()
            | "ReadUnfoldedDeltas" >> beam.ParDo(_ReadPartition(*self._where), planned)
        )
        shard_reads = (
            plan
            | "PlanShards" >> beam.FlatMap(_shards)
            | "SpreadShards" >> beam.Reshuffle()
            | "ReadChangedPosts"
            >> beam.ParDo(_ReadChangedPosts(*self._where), planned).with_outputs(
                _ReadChangedPosts.THROUGH, main="posts"
            )
        )
        changed = shard_reads.posts
        # The run vouches up to the least far-taken shard (None: no shard read, a full scan: S).
        changes_through = shard_reads[_ReadChangedPosts.THROUGH] | "ChangesThrough" >> beam.CombineGlobally(
            _earliest_or_none
        )
        skipped_before = plan | "SkippedByCursorRun" >> beam.FlatMap(
            lambda p: [] if p.full_scan else p.candidates_from_skips
        )
        followed = (
            (changed, skipped_before)
            | "Candidates" >> beam.Flatten()
            | "EachPostOnce" >> beam.Distinct()
            | "Batches" >> beam.BatchElements(min_batch_size=1, max_batch_size=READ_CHUNK)
            | "ReadCandidates" >> beam.ParDo(_ReadCandidates(*self._where), planned)
        )
        applied = (
            (scanned, followed)
            | "UnfoldedDeltas" >> beam.Flatten()
            | "SumPerPost" >> beam.CombinePerKey(SumPostDeltas())
            | "ToPostFold" >> beam.Map(_to_post_fold)
            | "ByKeyRange" >> beam.GroupBy(lambda fold: key_range(fold.key.post_hash))
            | "ApplyFolds"
            >> beam.ParDo(_ApplyFoldsFn(*self._where, self._posts_per_commit), planned).with_outputs(
                _ApplyFoldsFn.SKIPPED, main="outcomes"
            )
        )
        # ToList, not AsList: the BundleBasedDirectRunner's AsList of a tagged output also holds
        # the DoFn's main outputs (measured with Beam 2.77).
        skipped = applied[_ApplyFoldsFn.SKIPPED] | "SkippedPosts" >> beam.combiners.ToList()
        return (
            applied.outcomes
            | "TotalOutcome" >> beam.CombineGlobally(_sum_outcomes)
            | "RecordFoldRun"
            >> beam.ParDo(
                _RecordFoldRun(*self._where),
                planned,
                beam.pvalue.AsSingleton(skipped),
                beam.pvalue.AsSingleton(session),
                beam.pvalue.AsSingleton(changes_through),
            )
        )


def _skippable(error: Exception, snapshot_at: datetime) -> bool:
    """A post's fold failing this way is skipped, so one post never blocks the others.
    Transient errors that outlast the retries (Spanner unreachable) still fail the whole run,
    and so do broken invariants (AssertionError, the test suite's commit-size check) and a read
    at the run's snapshot that Spanner rejects as older than its version retention: the run
    outlived its snapshot, which says nothing about the post (folding.outlived_snapshot)."""
    if outlived_snapshot(error, snapshot_at):
        raise RuntimeError(
            f"the fold's snapshot {snapshot_at.isoformat()} is older than Spanner keeps versions: this run took too "
            "long to finish. Nothing is lost (the next run folds what this one did not); lower "
            "--max-delta-rows-per-run (template parameter maxDeltaRowsPerRun) if it happens again."
        ) from error
    return not (is_transient(error) or isinstance(error, AssertionError))


def _earliest_or_none(throughs: Iterable[datetime]) -> datetime | None:
    return min(throughs, default=None)


def _any_handle(handles: Iterable[dict | None]) -> dict | None:
    """The partitions share one read session; any of their handles names it."""
    return next((handle for handle in handles if handle is not None), None)


def _sum_outcomes(outcomes: Iterable[FoldOutcome]) -> FoldOutcome:
    total = FoldOutcome()
    for outcome in outcomes:
        total = total.plus(outcome)
    return total
