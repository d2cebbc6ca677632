"""WriteDeltaRows: blind, insert-only, idempotent writes of PostDelta rows to Spanner.

Our own DoFn over google-cloud-spanner, because Beam's native spannerio is deprecated and
fails the whole pipeline on any write error, and the cross-language one needs Java. The
writes themselves (blind inserts, idempotent retries, commits planned within a mutation
budget) are `spanner_store.deltas`; this module buffers a bundle's rows and decides what a
failure means:

- Transient errors (`is_transient`: ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
  CANCELLED, a reset stream, a lost session) are retried with jittered backoff, longer for an
  overloaded Spanner; after the last attempt or the deadline the error is raised so the runner
  retries the bundle (Dataflow does, indefinitely, and the deterministic keys make that safe).
- Rows that can never be written (any other error) go to the `failed` output with the
  reason. Rows found already written count as `rows_already_written`, not errors.
- A database whose schema is behind this code (a table or column it writes is missing: the
  stream was updated before `upvotes provision` migrated the database) makes the sink wait
  and retry the same commit every few seconds, up to SCHEMA_WAIT_S, instead of dead-lettering
  or failing the stream; the migration adds the table and the next attempt commits.
"""
from __future__ import annotations

import logging
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from google.api_core import exceptions

from schemas.records import FailedDelta, PostDelta
from spanner_store.database import RetryPolicy, is_transient, open_database, run_with_retries, wait_for_schema
from spanner_store.deltas import plan_commits, write_new_deltas

LOG = logging.getLogger(__name__)
# Long enough to ride out a brief outage or a burst of aborts from a concurrent fold, and
# bounded, by attempts and by RetryPolicy's deadline: then the error is raised (see the module
# docstring).
SINK_RETRY = RetryPolicy(attempts=25, first_delay_s=0.005, max_delay_s=2.0)


class WriteDeltasFn(beam.DoFn):
    """Buffers a bundle's PostDeltas and commits them in planned batches."""

    FAILED = "failed"

    def __init__(
        self,
        project: str,
        instance: str,
        database: str,
        rows_per_commit: int,
        retry: RetryPolicy = SINK_RETRY,
    ) -> None:
        self._where = (project, instance, database)
        self._rows_per_commit = rows_per_commit
        self._retry = retry
        self._rows_written = Metrics.counter("WriteDeltaRows", "rows_written")
        self._rows_already = Metrics.counter("WriteDeltaRows", "rows_already_written")
        self._commits = Metrics.counter("WriteDeltaRows", "commits")
        self._retries = Metrics.counter("WriteDeltaRows", "transient_retries")
        self._failed = Metrics.counter("WriteDeltaRows", "rows_dead_lettered")
        self._schema_waits = Metrics.counter("WriteDeltaRows", "schema_waits")
        self._events_written = Metrics.counter("WriteDeltaRows", "events_written")
        self._events_failed = Metrics.counter("WriteDeltaRows", "events_dead_lettered")
        self._buffer: list[PostDelta] = []

    def setup(self) -> None:
        self._database = open_database(*self._where)

    def start_bundle(self) -> None:
        self._buffer = []

    def process(self, delta: PostDelta) -> Iterator:
        self._buffer.append(delta)
        if len(self._buffer) >= self._rows_per_commit:
            yield from self._flush()

    def finish_bundle(self) -> Iterator:
        for failed in self._flush():
            yield beam.pvalue.TaggedOutput(failed.tag, GlobalWindows.windowed_value(failed.value))

    def _flush(self) -> Iterator[beam.pvalue.TaggedOutput]:
        pending, self._buffer = self._buffer, []
        for batch in plan_commits(pending, self._rows_per_commit):
            try:
                run_with_retries(lambda b=batch: self._commit_once(b), self._retry, lambda _: self._retries.inc())
            except exceptions.GoogleAPICallError as error:
                if is_transient(error):
                    raise  # the runner retries the bundle; deterministic keys make that safe
                self._failed.inc(len(batch))
                self._events_failed.inc(sum(delta.sums.events for delta in batch))
                for delta in batch:
                    yield beam.pvalue.TaggedOutput(self.FAILED, FailedDelta(delta, f"spanner_write_failed: {error}"[:1000]))

    def _commit_once(self, batch: list[PostDelta]) -> None:
        # After SCHEMA_WAIT_S the rows are dead-lettered with the error, to be replayed once
        # the database is migrated.
        result = wait_for_schema(lambda: write_new_deltas(self._database, batch), "sink",
                                 self._schema_waits.inc)
        self._rows_written.inc(result.written)
        self._rows_already.inc(result.already_written)
        self._events_written.inc(sum(delta.sums.events for delta in batch))
        self._commits.inc()


class WriteDeltaRows(beam.PTransform):
    """PostDelta -> FailedDelta (rows that can never be written; everything else is in Spanner).

    Metrics: WriteDeltaRows/rows_written, rows_already_written, commits,
    transient_retries, rows_dead_lettered, schema_waits, events_written (the votes in rows now
    in Spanner, written or found written) and events_dead_lettered.
    """

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int) -> None:
        super().__init__()
        self._fn = WriteDeltasFn(project, instance, database, rows_per_commit)

    def expand(self, deltas: beam.PCollection) -> beam.PCollection:
        results = deltas | "Commit" >> beam.ParDo(self._fn).with_outputs(WriteDeltasFn.FAILED, main="written")
        return results[WriteDeltasFn.FAILED]
