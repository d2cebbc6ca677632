"""Windowing and combining: many votes for a post become one delta per window.

ParseVotes (transforms/parse_and_sum.py) has already summed each bundle's votes per (post,
event hour), one element per shard of posts, and stamped them with *ingestion time* (the
wall-clock time their bundle ends). Windows are fixed, `window_seconds` long, over that time,
and each window's shard emits one delta per post and hour (`MergeSums`, `post_deltas`). The
vote's own event time is not lost: its hour is part of each sum's key and of the delta row,
for hourly counts.

Why ingestion time and not event time: a counter must never drop a vote for being late.
With event-time windows, a vote whose event_time is older than the watermark plus the
allowed lateness would be dropped silently, and no finite allowed lateness rules that out
(clients can be offline for days). An ingestion timestamp is not behind the watermark when
it is assigned: ParseVotes never stamps a bundle earlier than its own messages' publish
times, which hold the watermark, even on a worker whose clock lags Pub/Sub's. Each window's
state is freed once it closes, so state stays bounded by the keys of the open windows. A
global window with a repeating processing-time trigger would also drop nothing, but its
state (pane counters, trigger state) is never freed for any key ever seen.

Late data all the same: a bundle is stamped behind the watermark only if every one of its
messages arrived behind it (on Dataflow the watermark is an estimate) and its worker's clock
is behind it too; a window that allows no lateness would drop it silently. So windows allow
ALLOWED_LATENESS_S: such an element joins its window after the on-time pane has fired and
fires a late pane of its own, written as a delta row of its own (the pane index is in the key,
and DISCARDING keeps the late pane to the late votes), its votes counted in
WindowAndSumVotes/late_events. An element later still is dropped by the runner (Dataflow
counts it in its own droppedDueToLateness counter): no Python step can read the watermark to
catch it, which is why ParseVotes keeps the stamp ahead of the watermark instead.

Accumulation is DISCARDING: every pane is a delta of its own. ACCUMULATING panes (as in
Beam's leader board example) repeat earlier panes' votes and would count them twice.

A delta's key names its pane completely: the writer (job name and generation), the window's
start and end, the pane index and the shard count (schemas/delta_ids.py `pane_delta_id`). An in-place update may
change the window length or the shard count while windows of the old layout are still
open; their panes and the new layout's then share a start and a pane index, and without the
end and the shard count they would share a key, the second taken as already written. The
shard count travels in each element's grouping key (schemas/delta_ids.py shard_key) for the same
reason: a window buffered under the old count fires under the new code. Generations claimed before
this format keep the first one (spanner_writes/writers.py), so an update never re-spells a
key already written.

The trigger is Beam's default one, deliberately: one pane when the watermark passes the
window's end, and one more for each late arrival within the allowed lateness. Beam's
Dataflow translation lifts a streaming combine (merges partial sums before the shuffle) only
under the default trigger (DataflowPipelineTranslator: `allowCombinerLifting &= trigger
instanceof DefaultTrigger`); any other, `AfterWatermark(late=...)` included, turns lifting off
(profiled: with the late-firing trigger this module used to have, Beam's general trigger
driver took most of the per-vote cost).

Locally the allowed lateness costs time, not votes: the DirectRunner copies each key's state
for every bundle, and a window's state stays ALLOWED_LATENESS_S / window_seconds windows
longer (docs/benchmarks.md, "Measurements behind the code"). It cannot be freed sooner: a late element would
find no pane index and re-use the on-time pane's delta key, taken as already written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window
from apache_beam.utils.windowed_value import PaneInfoTiming

from schemas.counters import Counts
from schemas.delta_ids import KEY_FORMAT, pane_delta_id, shards_of_key
from schemas.records import CounterSums, PostDelta, PostHour
from schemas.voter_sketch import VoterUnion
from transforms.parse_and_sum import ShardSums

# How far behind the watermark an element may arrive and still be counted, in a late pane (see
# the module docstring): a minute of watermark error, for a minute more of each window's state.
ALLOWED_LATENESS_S = 60


@dataclass(slots=True)
class _Merged:
    """One (post, event hour)'s sums within a combine, merged in place; the voters as a
    growing union, so that each sketch is read once and the union written once."""

    counts: Counts
    events: int
    voters: VoterUnion | None

    def add(self, sums: CounterSums) -> None:
        self.counts = self.counts.plus(sums.counts)
        self.events += sums.events
        if sums.voters is not None:
            self.voters = (self.voters or VoterUnion()).add(sums.voters)

    def merge(self, other: _Merged) -> None:
        self.counts = self.counts.plus(other.counts)
        self.events += other.events
        if other.voters is not None:
            self.voters = (self.voters or VoterUnion()).merge(other.voters)

    def to_sums(self) -> CounterSums:
        return CounterSums(self.counts, self.events, None if self.voters is None else self.voters.to_bytes())


class MergeSums(beam.CombineFn):
    """Merges ShardSums; runners combine within each bundle before the shuffle."""

    def create_accumulator(self) -> dict[PostHour, _Merged]:
        return {}

    def add_input(self, acc: dict[PostHour, _Merged], sums: ShardSums) -> dict[PostHour, _Merged]:
        for key, value in sums.items():
            total = acc.get(key)
            if total is None:
                acc[key] = _Merged(
                    value.counts, value.events, None if value.voters is None else VoterUnion(value.voters)
                )
            else:
                total.add(value)
        return acc

    def merge_accumulators(self, accumulators: Iterable[dict[PostHour, _Merged]]) -> dict[PostHour, _Merged]:
        accumulators = iter(accumulators)
        merged = next(accumulators, {})  # Beam lets the first be changed; the others are copied
        for acc in accumulators:
            for key, value in acc.items():
                total = merged.get(key)
                if total is None:
                    merged[key] = total = _Merged(Counts(), 0, None)
                total.merge(value)
        return merged

    def extract_output(self, acc: dict[PostHour, _Merged]) -> ShardSums:
        return {key: total.to_sums() for key, total in acc.items()}


def ingestion_windows(window_seconds: int) -> beam.WindowInto:
    """Fixed windows over ingestion time, firing when the watermark passes their end and again
    for each late arrival within ALLOWED_LATENESS_S, every pane a delta of its own (see the
    module docstring): how every branch of the stream windows what ParseVotes emits."""
    return beam.WindowInto(
        window.FixedWindows(window_seconds),
        trigger=trigger.DefaultTrigger(),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
        allowed_lateness=ALLOWED_LATENESS_S,
    )


def post_deltas(sums: ShardSums, pane_id: str) -> Iterable[PostDelta]:
    """One pane's delta rows: one per post and hour, except sums whose votes cancel out and
    name no voter, which change nothing."""
    for key, total in sums.items():
        if not total.counts.is_zero() or total.voters is not None:
            yield PostDelta(key.post_id, key.event_hour, pane_id, total)


class _ToPostDeltas(beam.DoFn):
    def __init__(self, writer: str, key_format: int) -> None:
        self._writer = writer
        self._key_format = key_format
        # Votes of sums that cancel out and so write no row: what a drain's accounting of
        # pulled-but-unwritten votes (local_runner/drain.py) must not count as missing.
        self._without_effect = Metrics.counter("WindowAndSumVotes", "events_without_effect")
        # Votes that arrived behind the watermark, within the allowed lateness: counted, in late panes.
        self._late = Metrics.counter("WindowAndSumVotes", "late_events")

    def process(self, keyed, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, sums = keyed
        pane_id = pane_delta_id(
            self._writer, win.start.micros, pane.index, win.end.micros, shards_of_key(key), self._key_format
        )
        events = 0
        for delta in post_deltas(sums, pane_id):
            events += delta.sums.events
            yield delta
        all_events = sum(total.events for total in sums.values())
        self._without_effect.inc(all_events - events)
        if pane.timing == PaneInfoTiming.LATE:
            self._late.inc(all_events)


class WindowAndSumVotes(beam.PTransform):
    """(shard, ShardSums) stamped with their ingestion time (ParseVotes' sums) -> PostDelta,
    one per post, event hour and pane of fixed windows.

    `writer` names this pipeline run (the job name and its launch generation, which an
    update keeps: spanner_writes/writers.py) so that deltas of different runs never share a key;
    `key_format` is the one its generation was claimed with.
    """

    def __init__(self, writer: str, window_seconds: int, key_format: int = KEY_FORMAT) -> None:
        super().__init__()
        self._writer = writer
        self._window_seconds = window_seconds
        self._key_format = key_format

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return (
            keyed
            | "FixedWindows" >> ingestion_windows(self._window_seconds)
            | "SumPerShard" >> beam.CombinePerKey(MergeSums())
            | "ToPostDeltas" >> beam.ParDo(_ToPostDeltas(self._writer, self._key_format))
        )
