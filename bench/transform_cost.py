"""Benchmark 2: CPU per event of the parse-validate-key-combine chain, against plain Python.

All variants run in this process over the same pre-generated Pub/Sub messages (a viral
workload: Zipf 1.1 over `transform_posts` posts, as upvotes.workload generates it), and
are timed in process CPU seconds (every thread). Variants:

- plain_json: json.loads, the event hour from event_time, a dict of sums keyed by
  (post_id, hour). The baseline.
- plain_parse_vote: the project's parse_vote (full validation) and the same dict, no Beam:
  separates the cost of validation from the cost of Beam.
- beam_chain: ParseVotes -> WindowAndSumVotes on the FnApiRunner, as the pipeline runs it
  (votes summed per post and hour within each bundle, then per window).
- proposed_fused_parse_sum: a prototype of a change proposed for transforms/ (not used by
  the pipeline): one DoFn parses, validates and sums per (post, hour) within the bundle,
  i.e. ParseVotes and SumVotesInBundle fused, then the same SumPerWindow. It saves one
  DoFn invocation and one VoteEvent per vote.

Every variant's sums per post are checked against plain_json's. A cProfile of beam_chain
attributes its time to areas (trigger driver, runner, parse_vote, ...).
"""
from __future__ import annotations

import cProfile
import json
import pstats
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Callable

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.transforms.window import GlobalWindows

from bench.config import Sizes
from bench.feeds import collect, emit_feed, local_pipeline, set_feed, take_collected
from bench.measure import measured
from pipeline.params import STREAMING_PARAMS, defaults
from schemas.contract import parse_vote
from transforms.parse import ParseVotes
from schemas.records import HOUR_S, UPVOTES, CounterSums, PostDelta, PostHour, VoteEvent
from transforms.windowing import SumPerWindow, WindowAndSumVotes
from upvotes.provision import Resources
from upvotes.publishing import event_message
from upvotes.workload import Workload, generate_events

POOL = 100_000  # distinct generated events; larger runs cycle through them
WINDOW_SECONDS = defaults(STREAMING_PARAMS)["window_seconds"]
ZIPF = 1.1
TOP_FUNCTIONS = 12
Totals = dict[str, tuple[int, int]]  # post -> (upvotes, shares)


def messages(sizes: Sizes) -> list[tuple[bytes, dict[str, str]]]:
    workload = Workload(events=min(POOL, sizes.transform_events), posts=sizes.transform_posts, zipf=ZIPF, seed=3)
    pool = [event_message(event) for event in generate_events(workload)]
    return [pool[i % len(pool)] for i in range(sizes.transform_events)]


def plain_json(items: list[tuple[bytes, dict]]) -> Totals:
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for data, _ in items:
        fields = json.loads(data)
        hour = int(datetime.fromisoformat(fields["event_time"]).timestamp()) // HOUR_S * HOUR_S
        sums[(fields["post_id"], hour)][0 if fields["counter"] == UPVOTES else 1] += fields["delta"]
    return _per_post((post, up, sh) for (post, _), (up, sh) in sums.items())


def plain_parse_vote(items: list[tuple[bytes, dict]]) -> Totals:
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for data, attributes in items:
        vote = parse_vote(data, attributes, 0.0)
        if isinstance(vote, VoteEvent):
            sums[(vote.post_id, vote.event_hour)][0 if vote.counter == UPVOTES else 1] += vote.delta
    return _per_post((post, up, sh) for (post, _), (up, sh) in sums.items())


def _per_post(rows) -> Totals:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for post, upvotes, shares in rows:
        totals[post][0] += upvotes
        totals[post][1] += shares
    # Votes that cancel out write no delta, so a post whose sums are all zero is left out.
    return {post: (up, sh) for post, (up, sh) in totals.items() if up or sh}


def _run_beam(summing: Callable[[beam.PCollection], beam.PCollection]) -> Totals:
    take_collected()
    pipeline = local_pipeline()
    votes = (pipeline | "Start" >> beam.Impulse() | "Messages" >> beam.FlatMap(emit_feed)
             | "ParseVotes" >> ParseVotes()).votes
    summing(votes) | "Collect" >> beam.Map(collect)
    pipeline.run().wait_until_finish()
    deltas: list[PostDelta] = take_collected()
    return _per_post((d.post_id, d.upvotes, d.shares) for d in deltas)


def beam_chain(_: list) -> Totals:
    return _run_beam(lambda votes: votes | "WindowAndSumVotes" >> WindowAndSumVotes("bench", WINDOW_SECONDS))


class _ParseAndSumInBundle(beam.DoFn):
    """parse_vote and sums per (post, hour) within the bundle, in one DoFn.

    Emits like SumVotesInBundle: each sum when the bundle ends, stamped with that moment
    as its ingestion time. Rejected messages are dropped here (the benchmark has none);
    the proposed transform would tag them as ParseVotes does.
    """

    def start_bundle(self) -> None:
        self._sums: dict[tuple[str, int], list[int]] = {}

    def process(self, message: PubsubMessage, timestamp=beam.DoFn.TimestampParam) -> None:
        vote = parse_vote(message.data or b"", message.attributes, float(timestamp))
        if not isinstance(vote, VoteEvent):
            return
        sums = self._sums.get((vote.post_id, vote.event_hour))
        if sums is None:
            sums = self._sums[(vote.post_id, vote.event_hour)] = [0, 0, 0]
        sums[0 if vote.counter == UPVOTES else 1] += vote.delta
        sums[2] += 1

    def finish_bundle(self):
        now = time.time()
        for (post_id, hour), sums in self._sums.items():
            yield GlobalWindows.windowed_value((PostHour(post_id, hour), CounterSums(*sums)), timestamp=now)


def proposed_fused_parse_sum(_: list) -> Totals:
    take_collected()
    pipeline = local_pipeline()
    (pipeline
     | "Start" >> beam.Impulse()
     | "Messages" >> beam.FlatMap(emit_feed)
     | "ParseAndSumInBundle" >> beam.ParDo(_ParseAndSumInBundle())
     | "SumPerWindow" >> SumPerWindow("bench", WINDOW_SECONDS)
     | "Collect" >> beam.Map(collect))
    pipeline.run().wait_until_finish()
    return _per_post((d.post_id, d.upvotes, d.shares) for d in take_collected())


VARIANTS: dict[str, Callable[[list], Totals]] = {
    "plain_json": plain_json,
    "plain_parse_vote": plain_parse_vote,
    "beam_chain": beam_chain,
    "proposed_fused_parse_sum": proposed_fused_parse_sum,
}

# Where a profiled function's own time goes, by the first matching part of its file name
# (or, for built-ins, of its name).
AREAS = (
    ("apache_beam/transforms/trigger.py", "trigger driver (GroupByKey + GeneralTriggerDriver)"),
    ("apache_beam/runners/", "runner: bundle processing, operations, shuffle"),
    ("apache_beam/coders/", "coders"),
    ("apache_beam/utils/timestamp.py", "timestamps and windows"),
    ("apache_beam/transforms/window.py", "timestamps and windows"),
    ("apache_beam/utils/windowed_value", "timestamps and windows"),
    ("apache_beam/metrics/", "metrics counters"),
    ("apache_beam/transforms/core.py", "DoFn invocation (core.py)"),
    ("transforms/parse.py", "parse_vote (validation)"),
    ("transforms/windowing.py", "key and sum (project code)"),
    ("transforms/records.py", "key and sum (project code)"),
)


def _area(filename: str, function: str) -> str:
    text = filename if filename != "~" else function
    for fragment, area in AREAS:
        if fragment in text:
            return area
    return "other: pipeline construction, pickling, typing, threads"


def profile_chain(events: int) -> dict:
    """cProfile of beam_chain over the first `events` messages: time by area and top functions."""
    profiler = cProfile.Profile()
    profiler.enable()
    beam_chain([])
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, function) -> (cc, calls, tottime, cumtime, callers)
    total = sum(entry[2] for entry in stats.values())
    areas: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, tottime, _, callers) in stats.items():
        if filename == "~" and callers:  # a built-in: its time goes to the areas of its callers
            for (caller_file, _, caller_function), edge in callers.items():
                areas[_area(caller_file, caller_function)] += edge[2]
        else:
            areas[_area(filename, function)] += tottime
    top = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:TOP_FUNCTIONS]
    return {
        "events": events,
        "profiled_seconds": round(total, 2),
        "areas": [
            {"area": area, "share": round(seconds / total, 3), "us_per_event": round(seconds / events * 1e6, 1)}
            for area, seconds in sorted(areas.items(), key=lambda item: item[1], reverse=True)
        ],
        "top_functions": [
            {"function": f"{Path(filename).name}:{line}({function})", "calls_per_event": round(calls / events, 2),
             "own_us_per_event": round(tottime / events * 1e6, 2)}
            for (filename, line, function), (_, calls, tottime, _, _) in top
        ],
    }


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """Every variant over the same messages (exactness checked), then the profile."""
    items = messages(sizes)
    set_feed([PubsubMessage(data, attributes) for data, attributes in items])
    results: dict[str, dict] = {}
    expected: Totals | None = None
    for name, variant in VARIANTS.items():
        with measured() as usage:
            totals = variant(items)
        expected = totals if expected is None else expected
        results[name] = {
            "events": len(items), "cpu_seconds": round(usage.cpu_s, 3), "wall_seconds": round(usage.wall_s, 3),
            "events_per_s_per_core": len(items) / usage.cpu_s, "exact": totals == expected,
        }
        assert results[name]["exact"], f"{name}: sums per post differ from plain_json's"
    baseline = results["plain_json"]["events_per_s_per_core"]
    for result in results.values():
        result["vs_plain_json"] = result["events_per_s_per_core"] / baseline
    set_feed([PubsubMessage(data, attributes) for data, attributes in items[:sizes.profile_events]])
    return {
        "workload": f"{len(items):,} events, Zipf {ZIPF} over {sizes.transform_posts:,} posts, "
                    f"{min(POOL, len(items)):,} distinct messages cycled",
        "runner": "FnApiRunner, in process, one worker",
        "variants": results,
        "profile": profile_chain(sizes.profile_events),
    }
