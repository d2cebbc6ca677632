"""Benchmark 8: unique voters (schemas/voter_sketch.py): error, bytes, write and fold cost, CPU.

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
from pathlib import Path

import orjson

from bench.config import Sizes
from bench.stack import fresh_database, run_fold
from schemas.contract import FORMAT_ATTRIBUTE, NDJSON
from schemas.counters import Counts
from schemas.records import PostDelta, PostHour
from schemas.voter_sketch import LG_K, MAX_SKETCH_BYTES, estimate, union_of
from spanner_store.database import run_with_retries
from spanner_store.deltas import mutations_for, plan_commits, write_deltas
from spanner_store.reads import exact_counts
from transforms.parse_and_sum import BundleSums
from transforms.windowing import MergeSums, post_deltas
from upvotes.devtools.provision import Resources
from upvotes.devtools.workload import Workload, generate_events

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
    return [b"\n".join(lines[i:i + EVENTS_PER_MESSAGE]) for i in range(0, len(lines), EVENTS_PER_MESSAGE)]


def _messages(events: list[dict]) -> list[bytes]:
    return _batches([orjson.dumps(e) for e in events])


def _bundle_sums(messages: list[bytes]) -> list[dict]:
    """Each bundle's emitted ShardSums, as ParseVotes hands them to the window combine."""
    emitted = []
    for first in range(0, len(messages), MESSAGES_PER_BUNDLE):
        bundle = BundleSums()
        for data in messages[first:first + MESSAGES_PER_BUNDLE]:
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
        for sums in shard_sums[first:first + BUNDLES_PER_WINDOW]:
            combine.add_input(acc, sums)
        delta_sketches.append(combine.extract_output(acc)[key].voters)
    folded = union_of(delta_sketches)
    estimated = estimate(folded)
    return {"voters": voters, "votes": len(order), "deltas": len(delta_sketches), "estimate": estimated,
            "relative_error": abs(estimated - voters) / voters,
            "delta_sketch_bytes_mean": round(sum(map(len, delta_sketches)) / len(delta_sketches)),
            "folded_sketch_bytes": len(folded)}


def workload_deltas(sizes: Sizes, with_voters: bool) -> tuple[list[PostDelta], int]:
    """A tenth of the amplification workload over a hundredth of its posts, summed per post,
    hour and window (a fifth of a second of arrival_rate: ten windows)."""
    workload = Workload(events=sizes.amplification_votes // 10, posts=sizes.amplification_posts // 100, seed=8)
    events = list(generate_events(workload))
    window = sizes.arrival_rate // 5
    deltas: list[PostDelta] = []
    combine = MergeSums()
    for number, first in enumerate(range(0, len(events), window)):
        chunk = events[first:first + window]
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
        run_with_retries(lambda c=commit: write_deltas(database, c))
    write_s = time.perf_counter() - start
    fold = run_fold(fresh)
    sample = sorted({d.post_id for d in deltas})[:200]
    totals = exact_counts(database, sample, unique=True)
    want: dict[str, Counts] = {}
    for d in deltas:
        want[d.post_id] = want.get(d.post_id, Counts()).plus(d.sums.counts)
    return {
        "rows": len(deltas), "rows_per_1k_votes": round(1000 * len(deltas) / votes, 2),
        "mutations_per_1k_votes": round(1000 * sum(mutations_for(c) for c in commits) / votes, 1),
        "sketch_bytes_per_row": round(sum(len(d.sums.voters or b"") for d in deltas) / len(deltas), 1),
        "sketch_bytes_max": max(len(d.sums.voters or b"") for d in deltas),
        "write_s": round(write_s, 2), "fold_s": fold["seconds"],
        "exact": all(t.counts == want[t.post_id] for t in totals),
    }


def cpu_per_vote(sizes: Sizes) -> dict:
    events = list(generate_events(Workload(events=sizes.transform_events // 4, posts=sizes.transform_posts, seed=9)))
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
    return {"votes": len(events), "us_per_vote_without_user_ids": round(plain, 3),
            "us_per_vote_with_voters": round(voters, 3), "added_us_per_vote": round(voters - plain, 3),
            "ratio": round(voters / plain, 3)}


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    largest = 1_000_000 if sizes.name == "full" else 100_000
    audiences = [n for n in (10, 100, 1_000, 10_000, 100_000, 1_000_000) if n <= largest]
    errors = [error_point(n, seed) for seed, n in enumerate(audiences)]
    tag = res.database[-8:]
    sketched_deltas, votes = workload_deltas(sizes, with_voters=True)
    plain_deltas, _ = workload_deltas(sizes, with_voters=False)
    with_sketches = write_and_fold(res, f"uv-s-{tag}", sketched_deltas, votes)
    without = write_and_fold(res, f"uv-p-{tag}", plain_deltas, votes)
    return {
        "lg_k": LG_K, "max_sketch_bytes": MAX_SKETCH_BYTES, "errors": errors,
        "workload_votes": votes, "with_sketches": with_sketches, "without_sketches": without,
        "ratios": {name: round(with_sketches[name] / without[name], 3) if without[name] else None
                   for name in ("rows_per_1k_votes", "mutations_per_1k_votes", "write_s", "fold_s")},
        "cpu": cpu_per_vote(sizes),
    }
