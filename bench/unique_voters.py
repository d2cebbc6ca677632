"""Benchmark unique_voters: unique voters (schemas/voter_sketch.py): error, bytes, write and fold cost, CPU.

Error: for each audience size (10 to 1,000,000 distinct voters), one post receives two
upvotes from each voter, in ndjson messages of 1,000 events, shuffled, through the
pipeline's own pure path: sum_message and BundleSums.emit per bundle of 10 messages (one
sketch per bundle), MergeSums per window of 5 bundles (one delta's sketch), and the fold's
union of every delta's sketch, then the estimate. The error is against the exact distinct
count (the ledger's definition). Every sketch built is measured in bytes.

Bytes per row and write/fold cost: one Zipf workload (1M-user pool) summed into deltas per
post, hour and window, written to two fresh databases, one with the sketches and one with
the same workload without user IDs (the run without sketches), then
each folded once as `upvotes fold` runs it. Reported: bytes of sketch per delta row, rows
and mutations per 1,000 votes, the time to write and to fold, each pair's ratio.

CPU: sum_message plus BundleSums.emit over the same batched messages with and without
user_id (best of 3 each, per vote), the chain's cost of recording voters.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.benchmark import Benchmark, table, target
from bench.stack import fresh_database, run_fold
from schemas.contract import FORMAT_ATTRIBUTE, NDJSON
from schemas.counters import Counts
from schemas.records import PostDelta, PostHour
from schemas.voter_sketch import LG_K, MAX_SKETCH_BYTES, estimate, union_of
from spanner_reads.reads import exact_counts
from spanner_store.database import run_with_retries
from spanner_writes.deltas import mutations_for, plan_commits, write_deltas
from transforms.parse_and_sum import BundleSums
from transforms.windowing import MergeSums, post_deltas
from upvotes.devtools.workload import Workload, generate_events
from upvotes.resources import Resources

ATTRIBUTES = {FORMAT_ATTRIBUTE: NDJSON}
EVENTS_PER_MESSAGE = 1_000
MESSAGES_PER_BUNDLE = 10
BUNDLES_PER_WINDOW = 5
VOTES_PER_VOTER = 2
HOUR = 1_795_312_800
PUBLISHED = HOUR + 60.0
ROWS_PER_COMMIT = 1_000
CPU_REPEATS = 3


def _batches(lines: list[bytes]) -> list[bytes]:
    """ndjson messages of EVENTS_PER_MESSAGE lines each."""
    return [b"\n".join(lines[i : i + EVENTS_PER_MESSAGE]) for i in range(0, len(lines), EVENTS_PER_MESSAGE)]


def _messages(events: list[dict]) -> list[bytes]:
    return _batches([orjson.dumps(e) for e in events])


def _bundle_sums(messages: list[bytes]) -> list[dict]:
    """Each bundle's emitted ShardSums, as ParseVotes hands them to the window combine."""
    emitted = []
    for first in range(0, len(messages), MESSAGES_PER_BUNDLE):
        bundle = BundleSums()
        for data in messages[first : first + MESSAGES_PER_BUNDLE]:
            bundle.add_message(data, ATTRIBUTES, PUBLISHED, None, lambda _: None)
        emitted += [value.value[1] for value in bundle.emit(PUBLISHED)]
    return emitted


def error_point(voters: int, seed: int) -> dict:
    """One post, `voters` distinct voters, VOTES_PER_VOTER upvotes each, through the pure path."""
    order = [v for v in range(voters) for _ in range(VOTES_PER_VOTER)]
    random.Random(seed).shuffle(order)
    lines = [b'{"post_id":"viral","counter":"upvotes","delta":1,"user_id":"user-%d-%d"}' % (seed, v) for v in order]
    shard_sums = _bundle_sums(_batches(lines))
    combine, key = MergeSums(), PostHour("viral", HOUR)
    delta_sketches = []
    for first in range(0, len(shard_sums), BUNDLES_PER_WINDOW):
        acc = combine.create_accumulator()
        for sums in shard_sums[first : first + BUNDLES_PER_WINDOW]:
            combine.add_input(acc, sums)
        sketch = combine.extract_output(acc)[key].voters
        assert sketch is not None  # every vote names its user
        delta_sketches.append(sketch)
    folded = union_of(delta_sketches)
    assert folded is not None  # the post has voters
    estimated = estimate(folded)
    return {
        "voters": voters,
        "votes": len(order),
        "deltas": len(delta_sketches),
        "estimate": estimated,
        "relative_error": abs(estimated - voters) / voters,
        "delta_sketch_bytes_mean": round(sum(map(len, delta_sketches)) / len(delta_sketches)),
        "folded_sketch_bytes": len(folded),
    }


def workload_deltas(sizes: Sizes, with_voters: bool) -> tuple[list[PostDelta], int]:
    """sizes.workload_votes over sizes.workload_posts posts, summed per post, hour and window
    (sizes.window_votes each: ten windows)."""
    workload = Workload(events=sizes.workload_votes, posts=sizes.workload_posts, seed=8)
    events = list(generate_events(workload))
    window = sizes.window_votes
    deltas: list[PostDelta] = []
    combine = MergeSums()
    for number, first in enumerate(range(0, len(events), window)):
        chunk = events[first : first + window]
        if not with_voters:
            chunk = [{k: v for k, v in e.items() if k != "user_id"} for e in chunk]
        acc = combine.create_accumulator()
        for sums in _bundle_sums(_messages(chunk)):
            combine.add_input(acc, sums)
        deltas += post_deltas(combine.extract_output(acc), f"uv:{number}:0")
    return deltas, len(events)


def write_and_fold(res: Resources, name: str, deltas: list[PostDelta], votes: int) -> dict:
    database, fresh = fresh_database(res, name)
    commits = plan_commits(deltas, ROWS_PER_COMMIT)
    start = time.perf_counter()
    for commit in commits:
        run_with_retries(lambda: write_deltas(database, commit))  # called at once
    write_s = time.perf_counter() - start
    fold = run_fold(fresh)
    sample = sorted({d.post_id for d in deltas})[:200]
    totals = exact_counts(database, sample, unique=True)
    want: dict[str, Counts] = {}
    for d in deltas:
        want[d.post_id] = want.get(d.post_id, Counts()).plus(d.sums.counts)
    return {
        "rows": len(deltas),
        "rows_per_1k_votes": round(1000 * len(deltas) / votes, 2),
        "mutations_per_1k_votes": round(1000 * sum(mutations_for(c) for c in commits) / votes, 1),
        "sketch_bytes_per_row": round(sum(len(d.sums.voters or b"") for d in deltas) / len(deltas), 1),
        "sketch_bytes_max": max(len(d.sums.voters or b"") for d in deltas),
        "write_s": round(write_s, 2),
        "fold_s": fold["seconds"],
        "exact": all(t.counts == want[t.post_id] for t in totals),
    }


def cpu_per_vote(sizes: Sizes) -> dict:
    events = list(generate_events(Workload(events=sizes.cpu_votes, posts=sizes.cpu_posts, seed=9)))
    with_ids = _messages(events)
    without_ids = _messages([{k: v for k, v in e.items() if k != "user_id"} for e in events])

    def best_us(messages: list[bytes]) -> float:
        best = float("inf")
        for _ in range(CPU_REPEATS):
            start = time.process_time()
            _bundle_sums(messages)
            best = min(best, time.process_time() - start)
        return 1e6 * best / len(events)

    plain, voters = best_us(without_ids), best_us(with_ids)
    return {
        "votes": len(events),
        "us_per_vote_without_user_ids": round(plain, 3),
        "us_per_vote_with_voters": round(voters, 3),
        "added_us_per_vote": round(voters - plain, 3),
        "ratio": round(voters / plain, 3),
    }


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    largest = sizes.largest_audience
    audiences = [n for n in (10, 100, 1_000, 10_000, 100_000, 1_000_000) if n <= largest]
    errors = [error_point(n, seed) for seed, n in enumerate(audiences)]
    tag = res.database[-8:]
    sketched_deltas, votes = workload_deltas(sizes, with_voters=True)
    plain_deltas, _ = workload_deltas(sizes, with_voters=False)
    with_sketches = write_and_fold(res, f"uv-s-{tag}", sketched_deltas, votes)
    without = write_and_fold(res, f"uv-p-{tag}", plain_deltas, votes)
    return {
        "lg_k": LG_K,
        "max_sketch_bytes": MAX_SKETCH_BYTES,
        "errors": errors,
        "workload_votes": votes,
        "with_sketches": with_sketches,
        "without_sketches": without,
        "ratios": {
            name: round(with_sketches[name] / without[name], 3) if without[name] else None
            for name in ("rows_per_1k_votes", "mutations_per_1k_votes", "write_s", "fold_s")
        },
        "cpu": cpu_per_vote(sizes),
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    largest_audience: int  # distinct voters of the largest error point (10, 100, ... up to this)
    workload_votes: int  # the write-and-fold workload, with sketches and without ...
    workload_posts: int
    window_votes: int  # ... summed per post, hour and window of this many votes
    cpu_votes: int  # the chain's parse-and-sum CPU per vote, over this many votes ...
    cpu_posts: int


FULL = Sizes(
    largest_audience=1_000_000,
    workload_votes=100_000,
    workload_posts=1_000,
    window_votes=10_000,
    cpu_votes=500_000,
    cpu_posts=1_000,
)
QUICK = Sizes(
    largest_audience=100_000,
    workload_votes=10_000,
    workload_posts=100,
    window_votes=1_000,
    cpu_votes=5_000,
    cpu_posts=1_000,
)


def targets(document: dict) -> list[dict]:
    uv = document["benchmarks"]["unique_voters"]
    largest, small = uv["errors"][-1], [p for p in uv["errors"] if p["voters"] <= 1_000]
    return [
        target(
            "Unique voters within 2% at the largest audience (1,000,000 distinct voters in the full run), "
            "exact or near-exact up to 1,000",
            f"{largest['relative_error']:.2%} at {largest['voters']:,} ({largest['deltas']} delta sketches unioned); "
            f"up to 1,000: max {max(p['relative_error'] for p in small):.2%}",
            largest["relative_error"] <= 0.02 and all(p["relative_error"] <= 0.005 for p in small),
        )
    ]


def markdown(document: dict) -> list[str]:
    uv = document["benchmarks"]["unique_voters"]
    ws, wo, cpu = uv["with_sketches"], uv["without_sketches"], uv["cpu"]
    return [
        f"Unique voters (HyperLogLog, lg_k {uv['lg_k']}, at most {uv['max_sketch_bytes']:,} bytes)",
        table(
            [
                "Distinct voters",
                "Upvotes",
                "Delta sketches",
                "Estimate",
                "Relative error",
                "Bytes per delta sketch (mean)",
                "Folded sketch bytes",
            ],
            [
                [
                    f"{p['voters']:,}",
                    f"{p['votes']:,}",
                    f"{p['deltas']}",
                    f"{p['estimate']:,}",
                    f"{p['relative_error']:.2%}",
                    f"{p['delta_sketch_bytes_mean']:,}",
                    f"{p['folded_sketch_bytes']:,}",
                ]
                for p in uv["errors"]
            ],
        ),
        f"Same {uv['workload_votes']:,}-vote Zipf workload, with sketches and without (user IDs removed), same run:",
        table(
            [
                "",
                "Delta rows / 1k votes",
                "Mutations / 1k votes",
                "Sketch bytes per row (mean / max)",
                "Write s",
                "Fold s",
                "Exact",
            ],
            [
                [
                    label,
                    f"{r['rows_per_1k_votes']:.1f}",
                    f"{r['mutations_per_1k_votes']:,.0f}",
                    f"{r['sketch_bytes_per_row']:,.0f} / {r['sketch_bytes_max']:,}",
                    f"{r['write_s']:.2f}",
                    f"{r['fold_s']:.2f}",
                    "yes" if r["exact"] else "NO",
                ]
                for label, r in (("with sketches", ws), ("without", wo))
            ]
            + [
                ["ratio"]
                + [
                    f"{uv['ratios'][k]:.3f}" if uv["ratios"][k] is not None else "-"
                    for k in ("rows_per_1k_votes", "mutations_per_1k_votes")
                ]
                + ["-"]
                + [f"{uv['ratios'][k]:.3f}" if uv["ratios"][k] is not None else "-" for k in ("write_s", "fold_s")]
                + ["-"]
            ],
        ),
        f"CPU of the chain's parse-and-sum per vote: {cpu['us_per_vote_with_voters']:.2f} µs recording voters "
        f"vs {cpu['us_per_vote_without_user_ids']:.2f} µs without user IDs (+{cpu['added_us_per_vote']:.2f} µs, "
        f"{cpu['ratio']:.2f}x; best of 3 over {cpu['votes']:,} votes).",
    ]


BENCHMARK = Benchmark(
    name="unique_voters",
    title="Unique-voter sketches: error, bytes, write and fold cost, CPU per vote",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
