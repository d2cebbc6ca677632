"""Windowing and combining: many votes for a post become one delta per window.

Windows are fixed, `window_seconds` long, over *ingestion time*: each vote is stamped with
the wall-clock time it entered the pipeline. The vote's own event time is not lost: its
hour is part of the grouping key and of the delta row, for hourly counts.

Why ingestion time and not event time: a counter must never drop a vote for being late.
With event-time windows, a vote whose event_time is older than the watermark plus the
allowed lateness would be dropped silently, and no finite allowed lateness rules that out
(clients can be offline for days). An ingestion timestamp is never behind the watermark
when it is assigned, so nothing is late by construction, and each window's state is
freed when it closes, so state stays bounded by the keys of the open windows. A global
window with a repeating processing-time trigger would also drop nothing, but its state
(pane counters, trigger state) is never freed for any key ever seen.

Accumulation is DISCARDING: every pane is a delta of its own. ACCUMULATING panes (as in
Beam's leader board example) repeat earlier panes' votes and would count them twice. Late
firings stay enabled, with an allowed lateness, as a safety net for runner watermark
estimates; a late pane gets its own pane index and so its own delta row.
"""
from __future__ import annotations

import time
from typing import Iterable

import apache_beam as beam
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Duration

from transforms.records import CounterSums, PostDelta, PostHour, VoteEvent

DEFAULT_WINDOW_SECONDS = 10
ALLOWED_LATENESS_S = 600


class SumCounters(beam.CombineFn):
    """Sums CounterSums; runners combine within each bundle before the shuffle."""

    def create_accumulator(self) -> CounterSums:
        return CounterSums()

    def add_input(self, acc: CounterSums, value: CounterSums) -> CounterSums:
        return acc.plus(value)

    def merge_accumulators(self, accumulators: Iterable[CounterSums]) -> CounterSums:
        total = CounterSums()
        for acc in accumulators:
            total = total.plus(acc)
        return total

    def extract_output(self, acc: CounterSums) -> CounterSums:
        return acc


def delta_id(writer: str, window_start_us: int, pane_index: int) -> str:
    """The deterministic identity of one pane's delta: same pane, same ID, on any retry."""
    return f"{writer}:{window_start_us}:{pane_index}"


class _StampIngestionTime(beam.DoFn):
    def process(self, event: VoteEvent):
        yield window.TimestampedValue((PostHour(event.post_id, event.event_hour), CounterSums.of(event)), time.time())


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


class KeyByPostHour(beam.PTransform):
    """VoteEvent -> (PostHour, CounterSums), timestamped with the ingestion time."""

    def expand(self, votes: beam.PCollection) -> beam.PCollection:
        return votes | "StampIngestionTime" >> beam.ParDo(_StampIngestionTime())


class SumPerWindow(beam.PTransform):
    """(PostHour, CounterSums), timestamped -> PostDelta, one per post, hour and pane.

    `writer` names this pipeline run (on Dataflow, the job name, which survives an
    update) so that deltas of different runs never share a key.
    """

    def __init__(self, writer: str, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        super().__init__()
        self._writer = writer
        self._window_seconds = window_seconds

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return (
            keyed
            | "FixedWindows" >> beam.WindowInto(
                window.FixedWindows(self._window_seconds),
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=Duration(seconds=ALLOWED_LATENESS_S),
            )
            | "SumPerPostHour" >> beam.CombinePerKey(SumCounters())
            | "ToPostDelta" >> beam.ParDo(_ToPostDelta(self._writer))
        )


class WindowAndSumVotes(beam.PTransform):
    """VoteEvent -> PostDelta: ingestion-time windows, sums per post and event hour."""

    def __init__(self, writer: str, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        super().__init__()
        self._writer = writer
        self._window_seconds = window_seconds

    def expand(self, votes: beam.PCollection) -> beam.PCollection:
        return (
            votes
            | "KeyByPostHour" >> KeyByPostHour()
            | "SumPerWindow" >> SumPerWindow(self._writer, self._window_seconds)
        )
