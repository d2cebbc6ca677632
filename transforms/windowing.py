"""Windowing and combining: many votes for a post become one delta per window.

Each bundle's votes are first summed per (post, event hour) as ParseVotes reads them
(`BundleSums`), and stamped with *ingestion time* (the wall-clock time their bundle ends).
Windows are fixed, `window_seconds` long, over that time. The vote's own event time is not
lost: its hour is part of each sum's key and of the delta row, for hourly counts.

Why ingestion time and not event time: a counter must never drop a vote for being late.
With event-time windows, a vote whose event_time is older than the watermark plus the
allowed lateness would be dropped silently, and no finite allowed lateness rules that out
(clients can be offline for days). An ingestion timestamp is never behind the watermark
when it is assigned, so nothing is late by construction, and each window's state is
freed when it closes, so state stays bounded by the keys of the open windows. A global
window with a repeating processing-time trigger would also drop nothing, but its state
(pane counters, trigger state) is never freed for any key ever seen.

Why the grouping key is a shard of posts (SUM_SHARDS of them) and not the post: a runner's
cost is per key and per element (profiled on the DirectRunner during a viral burst: its
trigger driver and per-key state copies took 70% of the pipeline's CPU, for ~600 keys per
bundle), while merging two dicts of sums costs little. A bundle's sums become one element
per shard, {(post, event hour): sums}, and each window's shard emits one delta per post
and hour. The shard is a stable hash of the post (schemas.post_hash), so a post's sums
meet in one shard on every worker and every run: one delta per post, hour and pane.

Accumulation is DISCARDING: every pane is a delta of its own. ACCUMULATING panes (as in
Beam's leader board example) repeat earlier panes' votes and would count them twice.

A delta's key names its pane completely: the writer (job name and generation), the window's
start and end, the pane index and the shard count (`delta_id`). An in-place update may
change the window length or the shard count while windows of the old layout are still
open; their panes and the new layout's then share a start and a pane index, and without the
end and the shard count they would share a key, the second taken as already written. The
shard count travels in each element's grouping key (`shard_key`) for the same reason: a
window buffered under the old count fires under the new code. Generations claimed before
this format keep the first one (spanner_store/writers.py), so an update never re-spells a
key already written.

The trigger fires once when the watermark passes the window's end, deliberately: a vote
stamped on ingestion is held back by the watermark until it reaches the combine, so no
late pane can occur, and a late-firing trigger turns off combiner lifting, which merges
partial sums before the shuffle (profiled: with the late-firing trigger this module used
to have, Beam's general trigger driver took most of the per-vote cost). The pane index is
still part of each delta's key.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window
from apache_beam.transforms.window import GlobalWindows

from schemas import post_hash
from schemas.contract import EventTimePolicy, Sums, sum_message
from schemas.records import CounterSums, PostDelta, PostHour, Rejected
from schemas.voter_sketch import VoterUnion, sketch_of
from spanner_store.tables import FIRST_KEY_FORMAT, KEY_FORMAT

# Enough keys to spread the window combine over a few dozen Dataflow workers; few enough
# that a bundle's elements and a runner's per-key work stay small (see the module docstring).
SUM_SHARDS = 32
# The shard count of every job before the count was part of the grouping key: its keys are
# the bare shard numbers, so an update from such a job keeps grouping with its open windows.
FIRST_SUM_SHARDS = 32
_SHARDS_KEY_BASE = 1 << 20  # a grouping key is shards * base + shard, for any other count

ShardSums = dict[PostHour, CounterSums]  # one shard's sums (and voter sketches), per post and event hour


def sum_shard(post_id: str, shards: int = SUM_SHARDS) -> int:
    """The grouping key of a post's sums: stable across processes, workers and runs, and
    carrying the shard count it was computed with (`shards_of_key`)."""
    return shard_key(post_hash(post_id) % shards, shards)


def shard_key(shard: int, shards: int) -> int:
    return shard if shards == FIRST_SUM_SHARDS else shards * _SHARDS_KEY_BASE + shard


def shards_of_key(key: int) -> int:
    """The shard count a grouping key was computed with."""
    return FIRST_SUM_SHARDS if key < _SHARDS_KEY_BASE else key // _SHARDS_KEY_BASE


class MergeSums(beam.CombineFn):
    """Merges ShardSums; runners combine within each bundle before the shuffle.

    The accumulator maps (post, event hour) to a mutable [upvotes, shares, events, voters]
    list (voters: a VoterUnion or None), so that merging a sum updates it in place.
    """

    def create_accumulator(self) -> dict[PostHour, list]:
        return {}

    def add_input(self, acc: dict[PostHour, list], sums: ShardSums) -> dict[PostHour, list]:
        for key, value in sums.items():
            total = acc.get(key)
            if total is None:
                acc[key] = [value[0], value[1], value[2], None if value[3] is None else VoterUnion(value[3])]
            else:
                total[0] += value[0]
                total[1] += value[1]
                total[2] += value[2]
                if value[3] is not None:
                    total[3] = (total[3] or VoterUnion()).add(value[3])
        return acc

    def merge_accumulators(self, accumulators: Iterable[dict[PostHour, list]]) -> dict[PostHour, list]:
        accumulators = iter(accumulators)
        merged = next(accumulators, {})  # Beam lets the first be changed; the others are copied
        for acc in accumulators:
            for key, value in acc.items():
                total = merged.get(key)
                if total is None:
                    total = merged[key] = [0, 0, 0, None]
                total[0] += value[0]
                total[1] += value[1]
                total[2] += value[2]
                if value[3] is not None:
                    total[3] = (total[3] or VoterUnion()).merge(value[3])
        return merged

    def extract_output(self, acc: dict[PostHour, list]) -> ShardSums:
        return {key: CounterSums(up, sh, events, None if voters is None else voters.to_bytes())
                for key, (up, sh, events, voters) in acc.items()}


def delta_id(writer: str, window_start_us: int, pane_index: int, window_end_us: int, shards: int,
             key_format: int = KEY_FORMAT) -> str:
    """The deterministic identity of one pane's delta: same pane, same ID, on any retry; two
    different panes, different IDs, whatever an update changed (see the module docstring)."""
    if key_format == FIRST_KEY_FORMAT:
        return f"{writer}:{window_start_us}:{pane_index}"
    return f"{writer}:{window_start_us}:{pane_index}:{window_end_us}:{shards}"


class BundleSums:
    """Sums per (post, event hour) over one bundle, emitted when the bundle ends, stamped with
    that moment as their ingestion time (see the module docstring). Each message is parsed
    and summed in one pass (schemas.contract.sum_message); windowing and the shuffle see one
    element per shard of posts per bundle. The bundle is not yet committed when it emits, so
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
        """One element per shard: (shard, ShardSums), stamped with the bundle's end."""
        now = time.time()
        shards: dict[int, ShardSums] = {}
        shard_of: dict[str, int] = {}
        for (post_id, event_hour), acc in self._sums.items():
            shard = shard_of.get(post_id)
            if shard is None:
                shard = shard_of[post_id] = sum_shard(post_id)
            voters = acc[3]
            shards.setdefault(shard, {})[PostHour(post_id, event_hour)] = CounterSums(
                acc[0], acc[1], acc[2], None if voters is None else sketch_of(voters))
        for shard, sums in shards.items():
            yield GlobalWindows.windowed_value((shard, sums), timestamp=now)


def post_deltas(sums: ShardSums, pane_id: str) -> Iterable[PostDelta]:
    """One pane's delta rows: one per post and hour, except sums whose votes cancel out and
    name no voter, which change nothing."""
    for key, total in sums.items():
        if total.upvotes or total.shares or total.voters is not None:
            yield PostDelta(post_id=key.post_id, event_hour=key.event_hour, delta_id=pane_id,
                            upvotes=total.upvotes, shares=total.shares, events=total.events, voters=total.voters)


class _ToPostDeltas(beam.DoFn):
    def __init__(self, writer: str, key_format: int) -> None:
        self._writer = writer
        self._key_format = key_format
        # Votes of sums that cancel out and so write no row: what a drain's accounting of
        # pulled-but-unwritten votes (pipeline/drain.py) must not count as missing.
        self._without_effect = Metrics.counter("WindowAndSumVotes", "events_without_effect")

    def process(self, keyed, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, sums = keyed
        pane_id = delta_id(self._writer, win.start.micros, pane.index, win.end.micros, shards_of_key(key),
                           self._key_format)
        events = 0
        for delta in post_deltas(sums, pane_id):
            events += delta.events
            yield delta
        self._without_effect.inc(sum(total.events for total in sums.values()) - events)


class WindowAndSumVotes(beam.PTransform):
    """(shard, ShardSums) stamped with their ingestion time (ParseVotes' sums) -> PostDelta,
    one per post, event hour and pane of fixed windows.

    `writer` names this pipeline run (the job name and its launch generation, which an
    update keeps: spanner_store/writers.py) so that deltas of different runs never share a key;
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
            | "FixedWindows" >> beam.WindowInto(
                window.FixedWindows(self._window_seconds),
                trigger=trigger.AfterWatermark(),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
            | "SumPerShard" >> beam.CombinePerKey(MergeSums())
            | "ToPostDeltas" >> beam.ParDo(_ToPostDeltas(self._writer, self._key_format))
        )
