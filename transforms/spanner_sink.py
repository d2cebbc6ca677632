"""WriteDeltaRows: blind, insert-only, idempotent writes of PostDelta rows to Spanner.

Our own DoFn over google-cloud-spanner, because Beam's native spannerio is deprecated and
fails the whole pipeline on any write error, and the cross-language one needs Java. The
writes themselves (blind inserts, idempotent retries, commits planned within a mutation
budget) are `spanner_writes.deltas`; buffering a bundle's rows and deciding what a failure
means are the buffered sinks' one skeleton (transforms/buffered_sink.py): transient errors
are retried and then raised for the runner to retry the bundle (the deterministic keys make
that safe), a database whose schema is behind this code is waited for, and rows that can
never be written go to the `failed` output with the reason. Rows found already written (the
same row under the same key: a retry after an unseen success, a replayed bundle, a duplicate
execution of it racing this one) count as `rows_already_written`, not errors; a different row
under a row's key is a key conflict, and that row alone goes to the `failed` output saying so.
"""

from __future__ import annotations

from collections.abc import Iterator

from apache_beam.metrics import Metrics
from google.cloud.spanner_v1.database import Database

from schemas.records import FailedDelta, PostDelta
from spanner_store.database import RetryPolicy, open_database
from spanner_writes.deltas import KEY_CONFLICT, KeyConflict, plan_commits, write_new_deltas
from spanner_writes.known_posts import KnownPosts
from spanner_writes.sinks import DELTA_ROWS
from transforms.buffered_sink import SINK_RETRY, BufferedSink, BufferedSinkFn
from transforms.per_process import PerProcess


def _dead_letters(batch: list[PostDelta], error: str) -> Iterator[FailedDelta]:
    return (FailedDelta(delta, error) for delta in batch)


def _events(batch: list[PostDelta]) -> int:
    return sum(delta.sums.events for delta in batch)


def _conflicts(conflicting: tuple[PostDelta, ...]) -> tuple[list[PostDelta], str] | None:
    return (list(conflicting), KEY_CONFLICT) if conflicting else None


class WriteDeltasFn(BufferedSinkFn[PostDelta, list[PostDelta], list[PostDelta], FailedDelta, tuple[PostDelta, ...]]):
    """Buffers a bundle's PostDeltas and commits them in planned batches (plan_commits)."""

    def __init__(
        self,
        project: str,
        instance: str,
        database: str,
        rows_per_commit: int,
        retry: RetryPolicy = SINK_RETRY,
    ) -> None:
        super().__init__(
            sink=DELTA_ROWS,
            writer="sink",
            rows_per_commit=rows_per_commit,
            retry=retry,
            empty=list,
            add=list.append,
            plan=plan_commits,
            apply=self._commit_once,
            fail=_dead_letters,
            events=_events,
            refused=_conflicts,
        )
        self._where = (project, instance, database)
        self._rows_written = Metrics.counter(DELTA_ROWS.step, DELTA_ROWS.metrics.delta_rows_written)
        self._rows_already = Metrics.counter(DELTA_ROWS.step, "rows_already_written")
        self._per_process: PerProcess[tuple[Database, KnownPosts]] = PerProcess()

    def setup(self) -> None:
        # One client per process, and the posts this process has committed: their Posts rows are
        # not upserted again. Kept across bundles: the DirectRunner calls setup for each one.
        self._database, self._known_posts = self._per_process.get(lambda: (open_database(*self._where), KnownPosts()))

    def _commit_once(self, batch: list[PostDelta]) -> tuple[PostDelta, ...]:
        """Writes the batch; returns the rows a key conflict kept out (for `_conflicts`)."""
        conflicting: tuple[PostDelta, ...]
        try:
            result, conflicting = write_new_deltas(self._database, batch, self._known_posts), ()
        except KeyConflict as conflict:
            result, conflicting = conflict.result, conflict.conflicting
        self._rows_written.inc(result.written)
        self._rows_already.inc(result.already_written)
        return conflicting


class WriteDeltaRows(BufferedSink):
    """PostDelta -> FailedDelta (rows that can never be written; everything else is in Spanner).

    Metrics (named in its declaration, spanner_writes.sinks.DELTA_ROWS, but for
    rows_already_written): WriteDeltaRows/rows_written, rows_already_written, commits,
    transient_retries, rows_dead_lettered, schema_waits, events_written (the votes in rows now
    in Spanner, written or found written) and events_dead_lettered.
    """

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int) -> None:
        super().__init__("Commit", WriteDeltasFn(project, instance, database, rows_per_commit), main="written")
