"""Benchmark write_amplification: Spanner rows written per million votes, against the lower bound. No Spanner.

A synthetic stream: `amplification_votes` votes over `amplification_posts` posts (Zipf
1.1), arriving at `arrival_rate` per second; each vote's ingestion timestamp is its
arrival time (assigned here, so windows are what a live stream would get), its event hour
that of arrival minus a client delay (exponential, mean 2 s), the stream starting 5 s
before an hour boundary so that some posts get deltas for two hours. Votes are 70% +1
upvotes, 20% +1 shares and 10% -1 upvotes, like upvotes.devtools.workload's.

The lower bound is the number of distinct (post, event hour, window) groups whose votes
do not cancel out: the sink cannot write fewer delta rows without losing the hourly
split or the window. The real WindowAndSumVotes (as WindowAndSumVotes uses it, with its
trigger) runs over every vote of 1 in `pipeline_sample` posts, chosen by post_hash;
its PostDelta count must equal the sample's lower bound, and its sums the sample's sums.
The full stream's figures are then the lower bound plus the parent-row upserts the sink
adds (a key-only Posts write per post in a commit, planned with plan_commits, one bundle per
window, except the posts its KnownPosts holds: spanner_writes/known_posts.py). Beside them, the delta rows `upvotes capacity`'s model
(upvotes.operations.capacity_model) expects of the same stream, and their ratio to the counted ones.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
from apache_beam.transforms.window import TimestampedValue

from bench.benchmark import Benchmark, table
from bench.feeds import collect, emit_feed, local_pipeline, set_feed, take_collected
from bench.measure import measured
from pipeline.params import STREAMING_PARAMS, defaults
from schemas import post_hash
from schemas.counters import Counts
from schemas.delta_ids import SUM_SHARDS, pane_delta_id, sum_shard
from schemas.records import HOUR_S, CounterSums, PostDelta, PostHour
from spanner_writes.deltas import plan_commits
from spanner_writes.known_posts import KnownPosts
from transforms.windowing import WindowAndSumVotes
from upvotes.operations.capacity_model import Popularity, stream_delta_rows
from upvotes.operations.capacity_model import Workload as CapacityWorkload
from upvotes.resources import Resources

ZIPF = 1.1
CLIENT_DELAY_MEAN_S = 2.0
HOUR_BOUNDARY = 1_795_316_400  # an exact hour (epoch seconds)
STREAM_START = HOUR_BOUNDARY - 5
WINDOWS_SWEPT = (2, 10, 60)
# The stream's own mix, and the capacity model's (which otherwise takes the generated workloads').
SHARE_FRACTION = 0.2
UNVOTE_FRACTION = 0.1
# (arrival time, post, event hour, counts)
Vote = tuple[float, str, int, Counts]
Group = tuple[str, int, int]  # (post, event hour, window start)


def simulated_stream(sizes: Sizes, zipf: float = ZIPF) -> list[Vote]:
    rng = random.Random(11)
    posts = sizes.amplification_posts
    weights = list(itertools.accumulate(rank**-zipf for rank in range(1, posts + 1)))
    ranks = rng.choices(range(1, posts + 1), cum_weights=weights, k=sizes.amplification_votes)
    votes: list[Vote] = []
    for index, rank in enumerate(ranks):
        arrival = STREAM_START + index / sizes.arrival_rate
        hour = int(arrival - rng.expovariate(1 / CLIENT_DELAY_MEAN_S)) // HOUR_S * HOUR_S
        kind = rng.random()
        counts = (
            Counts(shares=1)
            if kind < SHARE_FRACTION
            else Counts(upvotes=-1)
            if kind < SHARE_FRACTION + UNVOTE_FRACTION
            else Counts(upvotes=1)
        )
        votes.append((arrival, f"p-{rank}", hour, counts))
    return votes


def group_sums(votes: list[Vote], window_s: int) -> dict[Group, Counts]:
    """Sums per (post, hour, window), groups that cancel out left out: what the sink must write."""
    sums: dict[Group, Counts] = defaultdict(Counts)
    for arrival, post, hour, counts in votes:
        group = (post, hour, int(arrival) // window_s * window_s)
        sums[group] = sums[group].plus(counts)
    return {group: counts for group, counts in sums.items() if not counts.is_zero()}


def per_post(rows) -> dict[str, Counts]:
    totals: dict[str, Counts] = defaultdict(Counts)
    for post, counts in rows:
        totals[post] = totals[post].plus(counts)
    return {post: counts for post, counts in totals.items() if not counts.is_zero()}


def sum_per_window(votes: list[Vote], window_s: int) -> list[PostDelta]:
    """The real WindowAndSumVotes over the votes, each timestamped with its arrival time."""
    set_feed(
        [
            TimestampedValue((sum_shard(post), {PostHour(post, hour): CounterSums(counts, 1)}), arrival)
            for arrival, post, hour, counts in votes
        ]
    )
    take_collected()
    pipeline = local_pipeline()
    (
        pipeline
        | "Start" >> beam.Impulse()
        | "Votes" >> beam.FlatMap(emit_feed)
        | "WindowAndSumVotes" >> WindowAndSumVotes("bench", window_s)
        | "Collect" >> beam.Map(collect)
    )
    pipeline.run().wait_until_finish()
    return take_collected()


def parent_upserts(groups: dict[Group, Counts], window_s: int) -> int:
    """Key-only Posts rows the sink writes beside the deltas: one per post in a commit, except
    the posts its KnownPosts holds (one sink instance, windows in order)."""
    by_window: dict[int, list[PostDelta]] = defaultdict(list)
    for (post, hour, start), counts in groups.items():
        pane = pane_delta_id("bench", start * 1_000_000, 0, (start + window_s) * 1_000_000, SUM_SHARDS)
        by_window[start].append(PostDelta(post, hour, pane, CounterSums(counts)))
    known, upserts = KnownPosts(), 0
    for _, deltas in sorted(by_window.items()):
        for commit in plan_commits(deltas, defaults(STREAMING_PARAMS)["rows_per_commit"]):
            posts = {d.post_id for d in commit}
            upserts += len(posts - known.among(posts))
            known.add(posts)
    return upserts


def model_delta_rows(sizes: Sizes, window_s: int, zipf: float = ZIPF) -> float:
    """The delta rows `upvotes capacity`'s model expects of this stream (a test and the
    results compare them with the counted ones)."""
    workload = CapacityWorkload(
        votes_per_s=sizes.arrival_rate,
        posts=sizes.amplification_posts,
        zipf=zipf,
        window_s=window_s,
        client_delay_mean_s=CLIENT_DELAY_MEAN_S,
        unvote_fraction=UNVOTE_FRACTION,
        other_fraction=SHARE_FRACTION,
    )
    return stream_delta_rows(
        Popularity.zipf(sizes.amplification_posts, zipf),
        workload,
        STREAM_START,
        sizes.amplification_votes / sizes.arrival_rate,
    )


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """The stream, its lower bound, the real WindowAndSumVotes over the sample, the sink's rows."""
    votes = simulated_stream(sizes)
    window_s = defaults(STREAMING_PARAMS)["window_seconds"]
    groups = group_sums(votes, window_s)
    sample = [v for v in votes if post_hash(v[1]) % sizes.pipeline_sample == 0]
    sample_groups = group_sums(sample, window_s)
    with measured() as usage:
        deltas = sum_per_window(sample, window_s)
    exact = per_post((d.post_id, d.sums.counts) for d in deltas) == per_post((v[1], v[3]) for v in sample)
    assert exact, "WindowAndSumVotes's sums differ from the votes' sums"
    assert len(deltas) == len(sample_groups), (
        f"WindowAndSumVotes wrote {len(deltas)} deltas for {len(sample_groups)} (post, hour, window) groups"
    )
    parents = parent_upserts(groups, window_s)
    model_rows = model_delta_rows(sizes, window_s)
    per_million = 1_000_000 / len(votes)
    return {
        "workload": f"{len(votes):,} votes, Zipf {ZIPF} over {sizes.amplification_posts:,} posts, "
        f"{sizes.arrival_rate:,}/s for {len(votes) / sizes.arrival_rate:.0f} s, {window_s} s windows",
        "votes": len(votes),
        "distinct_posts": len({v[1] for v in votes}),
        "window_s": window_s,
        "lower_bound_groups": len(groups),
        "delta_rows": len(groups),
        "model_delta_rows": round(model_rows),
        "model_vs_delta_rows": model_rows / len(groups),
        "parent_upserts": parents,
        "rows_written": len(groups) + parents,
        "rows_per_1m_votes": (len(groups) + parents) * per_million,
        "delta_rows_per_1m_votes": len(groups) * per_million,
        "delta_rows_vs_lower_bound": len(deltas) / len(sample_groups),
        "rows_written_vs_lower_bound": (len(groups) + parents) / len(groups),
        "rmw_rows_per_1m_votes": 1_000_000,
        "pipeline_sample": {
            "posts": f"1 in {sizes.pipeline_sample} by post_hash",
            "votes": len(sample),
            "lower_bound_groups": len(sample_groups),
            "pipeline_deltas": len(deltas),
            "exact": exact,
            "cpu_seconds": round(usage.cpu_s, 2),
            "wall_seconds": round(usage.wall_s, 2),
        },
        "window_sweep": [
            {"window_s": w, "lower_bound_groups": len(g), "delta_rows_per_1m_votes": len(g) * per_million}
            for w, g in ((w, group_sums(votes, w)) for w in WINDOWS_SWEPT)
        ],
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    amplification_votes: int
    amplification_posts: int
    arrival_rate: int  # votes per second of simulated ingestion time
    pipeline_sample: int  # the real WindowAndSumVotes runs over 1 in this many posts


FULL = Sizes(amplification_votes=1_000_000, amplification_posts=100_000, arrival_rate=50_000, pipeline_sample=10)
QUICK = Sizes(amplification_votes=100_000, amplification_posts=10_000, arrival_rate=5_000, pipeline_sample=10)


def markdown(document: dict) -> list[str]:
    wa = document["benchmarks"]["write_amplification"]
    sample = wa["pipeline_sample"]
    return [
        f"Write amplification ({wa['workload']})",
        table(
            ["Figure", "Rows", "Per 1M votes"],
            [
                [
                    "Lower bound: (post, hour, window) groups",
                    f"{wa['lower_bound_groups']:,}",
                    f"{wa['delta_rows_per_1m_votes']:,.0f}",
                ],
                ["Delta rows (WindowAndSumVotes)", f"{wa['delta_rows']:,}", f"{wa['delta_rows_per_1m_votes']:,.0f}"],
                *(
                    [
                        [
                            f"Delta rows by `upvotes capacity`'s model (x{wa['model_vs_delta_rows']:.3f} of counted)",
                            f"{wa['model_delta_rows']:,}",
                            "",
                        ]
                    ]
                    if "model_delta_rows" in wa
                    else []
                ),
                ["+ parent key upserts (a post's first commit; KnownPosts)", f"{wa['parent_upserts']:,}", ""],
                ["Rows written in all", f"{wa['rows_written']:,}", f"{wa['rows_per_1m_votes']:,.0f}"],
                ["Read-modify-write (one row write per vote)", "", f"{wa['rmw_rows_per_1m_votes']:,}"],
            ]
            + [
                [
                    f"Lower bound with {w['window_s']} s windows",
                    f"{w['lower_bound_groups']:,}",
                    f"{w['delta_rows_per_1m_votes']:,.0f}",
                ]
                for w in wa["window_sweep"]
            ],
        ),
        f"WindowAndSumVotes on the FnApiRunner over {sample['posts']} ({sample['votes']:,} votes): "
        f"{sample['pipeline_deltas']:,} deltas for {sample['lower_bound_groups']:,} groups "
        f"(ratio {wa['delta_rows_vs_lower_bound']:.3f}), sums exact.",
    ]


def chart(document: dict) -> list:
    wa = document["benchmarks"]["write_amplification"]

    def rows_by_window(ax) -> None:
        sweep = wa["window_sweep"]
        ax.bar(
            [f"{w['window_s']} s" for w in sweep] + ["RMW"],
            [w["delta_rows_per_1m_votes"] for w in sweep] + [wa["rmw_rows_per_1m_votes"]],
            color="tab:purple",
        )
        ax.set_yscale("log")
        ax.set_title("write_amplification: delta rows per 1M votes, by window length")

    return [rows_by_window]


BENCHMARK = Benchmark(
    name="write_amplification",
    title="Spanner rows written per million votes, against the lower bound",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    chart=chart,
)
