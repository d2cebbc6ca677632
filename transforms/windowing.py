"""Windowing and combining: many votes for a post become one delta per window.

Each bundle's votes are first summed per (post, event hour) as ParseVotes reads them
(`BundleSums`), and stamped with *ingestion time* (the wall-clock time their bundle ends). Windows are fixed, `window_seconds` long,
over that time. The vote's own event time is not lost: its hour is part of the grouping
key and of the delta row, for hourly counts.

Why ingestion time and not event time: a counter must never drop a vote for being late.
With event-time windows, a vote whose event_time is older than the watermark plus the
allowed lateness would be dropped silently, and no finite allowed lateness rules that out
(clients can be offline for days). An ingestion timestamp is never behind the watermark
when it is assigned, so nothing is late by construction, and each window's state is
freed when it closes, so state stays bounded by the keys of the open windows. A global
window with a repeating processing-time trigger would also drop nothing, but its state
(pane counters, trigger state) is never freed for any key ever seen.

Accumulation is DISCARDING: every pane is a delta of its own. ACCUMULATING panes (as in
Beam's leader board example) repeat earlier panes' votes and would count them twice.

The trigger is the default one (one pane when the watermark passes the window's end), and
deliberately so: a vote stamped on ingestion is held back by the watermark until it reaches
the combine, so no late pane can occur, and any non-default trigger turns off combiner
lifting, which merges partial sums before the shuffle (profiled: with the late-firing
trigger this module used to have, Beam's general trigger driver took most of the per-vote
cost). The pane index is still part of each delta's key.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

import apache_beam as beam
from apache_beam.transforms import trigger, window
from apache_beam.transforms.window import GlobalWindows

from schemas.contract import EventTimePolicy, Sums, sum_message
from schemas.records import CounterSums, PostDelta, PostHour, Rejected


class SumCounters(beam.CombineFn):
    """Sums CounterSums; runners combine within each bundle before the shuffle.

    The accumulator is a mutable [upvotes, shares, events] list: add_input runs once per
    vote, and updating a list in place is cheaper than building a tuple each time.
    """

    def create_accumulator(self) -> list[int]:
        return [0, 0, 0]

    def add_input(self, acc: list[int], value: CounterSums) -> list[int]:
        acc[0] += value.upvotes
        acc[1] += value.shares
        acc[2] += value.events
        return acc

    def merge_accumulators(self, accumulators: Iterable[list[int]]) -> list[int]:
        total = [0, 0, 0]
        for acc in accumulators:
            total[0] += acc[0]
            total[1] += acc[1]
            total[2] += acc[2]
        return total

    def extract_output(self, acc: list[int]) -> CounterSums:
        return CounterSums(*acc)


def delta_id(writer: str, window_start_us: int, pane_index: int) -> str:
    """The deterministic identity of one pane's delta: same pane, same ID, on any retry."""
    return f"{writer}:{window_start_us}:{pane_index}"


class BundleSums:
    """Sums per (post, event hour) over one bundle, emitted when the bundle ends, stamped with
    that moment as their ingestion time (see the module docstring). Each message is parsed
    and summed in one pass (schemas.contract.sum_message); windowing and the shuffle see one
    element per post and hour per bundle. The bundle is not yet committed when it emits, so
    the watermark is still held behind it. ParseVotes keeps one per bundle, so no element is
    made per vote at all."""

    def __init__(self) -> None:
        self._sums: Sums = {}

    def add_message(self, data: bytes, attributes: Mapping[str, str] | None, publish_time_s: float,
                    policy: EventTimePolicy, on_ingestion_hour: Callable[[str], None]) -> list[Rejected]:
        """Adds the message's accepted votes; returns its rejected events."""
        return sum_message(data, attributes, publish_time_s, self._sums, policy, on_ingestion_hour)

    @property
    def votes(self) -> int:
        return sum(acc[2] for acc in self._sums.values())

    def emit(self):
        now = time.time()
        for (post_id, event_hour), acc in self._sums.items():
            yield GlobalWindows.windowed_value((PostHour(post_id, event_hour), CounterSums(*acc)), timestamp=now)


class _ToPostDelta(beam.DoFn):
    def __init__(self, writer: str) -> None:
        self._writer = writer

    def process(self, keyed, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, sums = keyed
        if sums.upvotes == 0 and sums.shares == 0:
            return ()  # votes that cancel out change no count; nothing to write
        return [PostDelta(
            post_id=key.post_id,
            event_hour=key.event_hour,
            delta_id=delta_id(self._writer, win.start.micros, pane.index),
            upvotes=sums.upvotes,
            shares=sums.shares,
            events=sums.events,
        )]


class WindowAndSumVotes(beam.PTransform):
    """(PostHour, CounterSums) stamped with their ingestion time (ParseVotes' sums) -> PostDelta,
    one per post, event hour and pane of fixed windows.

    `writer` names this pipeline run (the job name and its launch generation, which an
    update keeps: spanner_store/writers.py) so that deltas of different runs never share a key.
    """

    def __init__(self, writer: str, window_seconds: int) -> None:
        super().__init__()
        self._writer = writer
        self._window_seconds = window_seconds

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return (
            keyed
            | "FixedWindows" >> beam.WindowInto(
                window.FixedWindows(self._window_seconds),
                trigger=trigger.AfterWatermark(),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
            | "SumPerPostHour" >> beam.CombinePerKey(SumCounters())
            | "ToPostDelta" >> beam.ParDo(_ToPostDelta(self._writer))
        )
