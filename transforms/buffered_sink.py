"""BufferedSinkFn and BufferedSink: the one skeleton of the sinks that write to Spanner in planned
commits, WriteDeltaRows (transforms/spanner_sink.py) and ApplyVoteStates
(transforms/vote_state_sink.py). Each sink gives its own parts as typed functions: how an element
joins the buffer (`empty`, `add`), how the buffer is cut into batches (`plan`), one attempt to
write a batch (`apply`), a batch's dead letters (`fail`) and the events it stands for (`events`).
The skeleton does the rest, the same for both:

- A bundle's elements are buffered; the buffer is flushed when it holds `rows_per_commit` items
  and at the end of the bundle. A flush cuts it into batches and applies them one by one.
- Transient errors (`spanner_store.database.is_transient`: ABORTED, UNAVAILABLE,
  DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, CANCELLED, a reset stream, a lost session) are retried
  with jittered backoff (`retry`); after the last attempt or the deadline the error is raised so
  the runner retries the bundle (Dataflow does, indefinitely; every sink's `apply` is idempotent).
- A database whose schema is behind this code (a table or column the sink writes is missing:
  the stream was updated before `upvotes provision` migrated the database) makes the sink wait
  and retry the same batch every few seconds, up to SCHEMA_WAIT_S (`wait_for_schema`), instead
  of dead-lettering or failing the stream; after that the batch is dead-lettered with the error.
- Any other error sends the batch's dead letters (`fail`, with "<reason>: <error>") to the
  FAILED output, to be replayed through the same path once the cause is fixed.
- A batch applied but for some of its items, which the attempt refused (`refused`: the delta
  sink's key conflicts, a different row stored under an item's key), sends those items' dead
  letters alone, with "<reason>: <why>"; the rest counts as written.
- What the end of a bundle emits has no element's window: it is re-windowed into the global one.

Every sink counts the counters of `SinkCounters` in its step's namespace, under the names its
declaration gives them (spanner_writes/sinks.py), which the drain report and the alerts read
(tests/test_monitoring.py holds the alerts to them); its dead letters' errors start with the
reason it declares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Generic, NamedTuple, TypeVar

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metricbase import Counter
from apache_beam.transforms.window import GlobalWindows
from google.api_core import exceptions

from spanner_store.database import RetryPolicy, is_transient, run_with_retries, wait_for_schema
from spanner_writes.sinks import SinkDeclaration

Element = TypeVar("Element")  # what the sink's input PCollection holds
Pending = TypeVar("Pending", bound=Sized)  # a bundle's buffer; its length is what rows_per_commit caps
Batch = TypeVar("Batch", bound=Sized)  # one commit's (or transaction's) worth
Failed = TypeVar("Failed")  # a dead letter
Result = TypeVar("Result")  # what one attempt to write a batch returns, that `refused` reads

# Long enough to ride out a brief outage or a burst of aborts from a concurrent fold, and
# bounded, by attempts and by RetryPolicy's deadline: then the error is raised (see the module
# docstring).
SINK_RETRY = RetryPolicy(attempts=25, first_delay_s=0.005, max_delay_s=2.0)


class SinkCounters(NamedTuple):
    """The counters every buffered sink keeps, each in the sink's own namespace."""

    commits: Counter  # batches applied
    transient_retries: Counter
    schema_waits: Counter  # waits for a migration (wait_for_schema)
    dead_lettered: Counter  # items of the batches dead-lettered
    events_written: Counter  # the events the applied batches stand for
    events_dead_lettered: Counter  # the events the dead-lettered batches stand for

    @classmethod
    def of(cls, sink: SinkDeclaration) -> SinkCounters:
        """The counters of `sink`, under the names it declares, in its step's namespace."""
        names = sink.metrics
        return cls(
            commits=Metrics.counter(sink.step, names.commits),
            transient_retries=Metrics.counter(sink.step, names.transient_retries),
            schema_waits=Metrics.counter(sink.step, names.schema_waits),
            dead_lettered=Metrics.counter(sink.step, names.dead_lettered),
            events_written=Metrics.counter(sink.step, names.events_written),
            events_dead_lettered=Metrics.counter(sink.step, names.events_dead_lettered),
        )


class BufferedSinkFn(beam.DoFn, Generic[Element, Pending, Batch, Failed, Result]):
    """Buffer -> flush -> plan -> apply with retries -> dead letters (see the module docstring).

    Main output: nothing; FAILED: the dead letters of the batches that can never be applied."""

    FAILED = "failed"

    def __init__(
        self,
        *,
        sink: SinkDeclaration,
        writer: str,
        rows_per_commit: int,
        retry: RetryPolicy,
        empty: Callable[[], Pending],
        add: Callable[[Pending, Element], None],
        plan: Callable[[Pending, int], Iterable[Batch]],
        apply: Callable[[Batch], Result],
        fail: Callable[[Batch, str], Iterable[Failed]],
        events: Callable[[Batch], int],
        refused: Callable[[Result], tuple[Batch, str] | None] = lambda _result: None,
    ) -> None:
        """`sink` declares the counters' names and the reason that starts each dead letter's error;
        `writer` names the sink in the log line of a schema wait; `apply` is one attempt to write
        one batch (it may be a bound method of a subclass that opens its database in `setup`);
        `refused` reads from what `apply` returned the items it did not write and why, or None
        when it wrote (or found) them all."""
        self._writer = writer
        self._reason = sink.reason
        self._rows_per_commit = rows_per_commit
        self._retry = retry
        self._counters = SinkCounters.of(sink)
        self._empty = empty
        self._add = add
        self._plan = plan
        self._apply = apply
        self._fail = fail
        self._events = events
        self._refused = refused
        self._pending = empty()

    def start_bundle(self) -> None:
        self._pending = self._empty()

    def process(self, element: Element) -> Iterator:
        self._add(self._pending, element)
        if len(self._pending) >= self._rows_per_commit:
            yield from self._flush()

    def finish_bundle(self) -> Iterator:
        for failed in self._flush():
            yield beam.pvalue.TaggedOutput(failed.tag, GlobalWindows.windowed_value(failed.value))

    def _flush(self) -> Iterator[beam.pvalue.TaggedOutput]:
        pending, self._pending = self._pending, self._empty()
        counters = self._counters
        for batch in self._plan(pending, self._rows_per_commit):
            try:
                result = run_with_retries(
                    lambda: self._attempt(batch),
                    self._retry,  # called at once
                    lambda _: counters.transient_retries.inc(),
                )
            except exceptions.GoogleAPICallError as error:
                if is_transient(error):
                    raise  # the runner retries the bundle; applying a batch twice applies it once
                yield from self._dead_letter(batch, str(error))
                continue
            refused = self._refused(result)
            written_events = self._events(batch)
            if refused is not None:
                items, why = refused
                written_events -= self._events(items)
                yield from self._dead_letter(items, why)
            counters.events_written.inc(written_events)
            counters.commits.inc()

    def _dead_letter(self, batch: Batch, why: str) -> Iterator[beam.pvalue.TaggedOutput]:
        self._counters.dead_lettered.inc(len(batch))
        self._counters.events_dead_lettered.inc(self._events(batch))
        for failed in self._fail(batch, f"{self._reason}: {why}"[:1000]):
            yield beam.pvalue.TaggedOutput(self.FAILED, failed)

    def _attempt(self, batch: Batch) -> Result:
        # After SCHEMA_WAIT_S the error is raised, and the batch dead-lettered, to be replayed once
        # the database is migrated.
        return wait_for_schema(lambda: self._apply(batch), self._writer, self._counters.schema_waits.inc)


class BufferedSink(beam.PTransform):
    """Elements -> the dead letters of a BufferedSinkFn, applied as one step named `step`
    (the step names are kept stable: a Dataflow update matches steps by name)."""

    def __init__(self, step: str, fn: BufferedSinkFn, main: str) -> None:
        super().__init__()
        self._step = step
        self._fn = fn
        self._main = main

    def expand(self, elements: beam.PCollection) -> beam.PCollection:
        results = elements | self._step >> beam.ParDo(self._fn).with_outputs(BufferedSinkFn.FAILED, main=self._main)
        return results[BufferedSinkFn.FAILED]
