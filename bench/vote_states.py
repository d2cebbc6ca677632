"""Benchmark vote_states: one vote per user (issue 29), in one run on one emulator.

Vote-state events ({"post_id", "user_id", "vote": "up" | "down" | "none", ...}; only each user's
latest state per post counts, schemas/vote_states.py) cannot be blind writes: the sink applies
each batch in a read-write transaction that reads the stored Votes rows and writes the later states
with the counts they move (transforms/vote_state_sink.py, spanner_writes/votes.py). The emulator runs
one read-write transaction at a time, so this measures what that costs instead of assuming it,
beside delta events of the same shape and read-modify-write, all in the same run:

(a) Read-modify-write at its best. bench/hot_post.py's sweep finds one hot row with 1 or 2 writer
    threads best on this emulator (more threads only add aborts; sharding cannot help when the
    emulator serialises every transaction), so those four configurations (1 and 2 threads, each
    with the client's own abort retry and our short jittered one) run for sizes.sweep_seconds each,
    and the best is the baseline.
(b) End to end, one `upvotes stream` subprocess (2 s windows, as the race's): a burst published
    through Pub/Sub in batches of 500, timed from the first publish until every post's exact count
    equals the ledger, on one viral post and on a Zipf spread (RACE_ZIPF over sizes.race.e2e_posts
    posts). Vote states with the generator's default mix (20% down votes, 20% flips, 10%
    duplicates, 10% out of order) from sizes.state_voters users; beside them delta events of the
    same shape (as many events, the same posts and spread, +1 upvotes each) through the same stream.
(c) The Spanner cost per 1,000 votes of each race, counted from the database: Votes rows (one per
    (post, user) stored: a state replaced in a later window writes its row again, so a floor; the
    distinct events are the ceiling), delta rows (beside `upvotes capacity`'s model of them), commits
    (one per distinct commit timestamp of the race's delta rows: every vote-state commit that moves a
    count writes delta rows), and mutations (index entries, parent keys and each commit's DeltaCommits
    and TopCandidates rows included).
(d) Pipeline state: what the window's merge (WindowAndMergeVoteStates) holds per (post, user), in
    Beam's accumulator coding (what Dataflow keeps in window state) and as Python objects (what the
    local DirectRunner holds), from a sample of the hot post's states merged as the pipeline does.
    It lives only while its window is open: the pane fires DISCARDING and the window's state goes
    (local_runner/window_state.py frees it on the DirectRunner; Dataflow garbage-collects it).
(e) Memory under a sustained hot-post state load, every voter new (the worst case for state that
    outlived its window): the stream's peak RSS after sizes.state_soak_short_s and
    sizes.state_soak_long_s, beside what the distinct (post, user) pairs would hold had their window
    state been kept. The load is SOAK_LOAD of the Votes rows per second (b)'s hot-post state race
    wrote, not of its votes: with every voter new nearly every vote is a row to write (the race's
    100,000 voters repeat, and its windows merge the repeats), and a load the emulator cannot apply
    piles up in Pub/Sub, so the stream pulls ever bigger bundles and its RSS follows the backlog
    instead of the state (measured: at 80% of the race's votes per second, 12,000/s, the lag grew
    by about 0.1 s a second, and the peak RSS with it; at 6,700/s both stayed flat).
(f) The count error: a steady state load (10% duplicates, 10% late, flips up -> down -> none) during
    which the stream is stopped with SIGTERM (it drains) and restarted at once on the same
    subscription; posts whose exact count differs from the ledger, and the summed absolute error.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import time
import tracemalloc
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from google.cloud.spanner_v1 import param_types

from bench.benchmark import Benchmark, emulator_cpu, table, target
from bench.config import FULL_RACE, QUICK_RACE, RACE_WINDOW_S, RACE_ZIPF, Race
from bench.hot_post import SOAK_LOAD
from bench.measure import current_rss_mib
from bench.spanner_cost import EmulatorCpu, delta_cost, spanner_cost
from bench.stack import LedgeredBatches, PacedPublisher, check_alive, upvotes_of, wait_until_ready, with_topics
from pipeline.params import STREAMING_PARAMS, defaults
from schemas.contract import DEFAULT_EVENT_TIME_POLICY, batch_messages, event_message
from spanner_store.database import open_database
from spanner_writes.deltas import MUTATIONS_PER_COMMIT
from spanner_writes.votes import MUTATIONS_PER_VOTE
from transforms.parse_and_sum import BundleSums
from transforms.vote_states import MergeLatestVotes
from upvotes.devtools import baseline_counters, local_stream
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_messages
from upvotes.devtools.race import BASELINE_SWEEP, race_pipeline, run_baseline
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, UPVOTES_ONLY, VoteStateWorkload, Workload, generate
from upvotes.operations.capacity_model import Popularity, expected_touched
from upvotes.resources import Resources

RMW_CANDIDATES = tuple(config for config in BASELINE_SWEEP if config.shards == 1 and config.threads <= 2)
E2E_TIMEOUT_S = 300.0
STATE_SAMPLE_EVENTS = 20_000  # hot-post states merged to measure the window state per (post, user)
SOAK_VOTERS = 10_000_000  # the soak's users: nearly every vote a new (post, user)
STOP_AT = 0.5  # of the stop test's load, when the SIGTERM falls
WARM_UP_POST = "vs-warm-up-state"
VOTES_ROWS_SQL = "SELECT COUNT(*) FROM Votes WHERE STARTS_WITH(PostId, @prefix)"
SHAPES = ("hot_post", "zipf")


# --- (a) read-modify-write at its best --------------------------------------------------------


def best_rmw(database, seconds: float) -> dict:
    """Each of RMW_CANDIDATES for `seconds` on a new counter; every run and the best one."""
    runs = []
    for config in RMW_CANDIDATES:
        counter = f"vs-rmw-{uuid.uuid4().hex[:8]}"
        with EmulatorCpu() as cpu:
            run = run_baseline(database, counter, config, seconds)
        assert run.exact, f"{config.label}: the counter does not equal the acknowledged votes"
        runs.append(
            {
                "config": config.label,
                "votes": run.votes,
                "seconds": round(run.seconds, 2),
                "votes_per_s": round(run.votes_per_s, 1),
                "aborts": run.aborts,
                "rows_per_1k_votes": 1000.0,
                **spanner_cost(
                    run.votes, run.votes, run.votes * baseline_counters.MUTATIONS_PER_INCREMENT, cpu.seconds
                ),
            }
        )
    return {
        "best": max(runs, key=lambda r: r["votes_per_s"]),
        "runs": runs,
        "candidates": "one hot row, 1 and 2 writer threads x {client retry, jittered retry} (hot_post's best "
        "on this emulator)",
    }


# --- the stream, restartable ------------------------------------------------------------------


class Stream:
    """`upvotes stream` on one subscription, started, stopped and restarted by the benchmark."""

    def __init__(self, res: Resources, log_dir: Path) -> None:
        self.res = res
        self.topic_path = res.topic_path(res.topic)
        self._log_dir = log_dir
        self.starts = 0
        self.process: subprocess.Popen | None = None
        self.log_path = log_dir / "vote_states_stream_0.log"  # each start logs to a file of its own

    def start(self) -> None:
        self.starts += 1
        self.log_path = self._log_dir / f"vote_states_stream_{self.starts}.log"
        self.process = local_stream.start(self.res, RACE_WINDOW_S, self.log_path)

    @property
    def started(self) -> subprocess.Popen:
        """Its process, once started."""
        assert self.process is not None, "the stream was never started"
        return self.process

    def stop(self) -> int:
        """SIGTERM (it drains); its exit code, 0 when drained."""
        return local_stream.stop(self.started)

    def alive(self) -> None:
        check_alive(self.started, self.log_path)

    def wait_ready(self, database) -> None:
        """A delta vote and a vote state each counted: both sinks are up and their sessions warm."""
        wait_until_ready(database, self.topic_path, self.started, self.log_path)
        state = {
            "post_id": WARM_UP_POST,
            "user_id": f"u-{uuid.uuid4().hex[:8]}",
            "vote": "up",
            "event_time": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
            "event_id": str(uuid.uuid4()),
        }
        before = upvotes_of(database, [WARM_UP_POST])[WARM_UP_POST]
        publish_messages(self.topic_path, [event_message(state)], progress=False)
        deadline = time.monotonic() + E2E_TIMEOUT_S
        while upvotes_of(database, [WARM_UP_POST])[WARM_UP_POST] <= before:
            self.alive()
            assert time.monotonic() < deadline, f"the stream applied no vote state; see {self.log_path}"
            time.sleep(0.25)


# --- (b) and (c): the races and their Spanner cost ----------------------------------------------


def workloads(sizes: Sizes, shape: str) -> dict[str, Workload | VoteStateWorkload]:
    """The race's two workloads of one shape: delta events (+1 upvotes) and vote states, the same
    number of events over the same posts and spread, from the same users."""
    posts = 1 if shape == "hot_post" else sizes.race.e2e_posts
    prefix = f"vs-{shape.replace('_', '')}-"
    return {
        "deltas": Workload(
            events=sizes.race.e2e_votes,
            posts=posts,
            zipf=RACE_ZIPF,
            seed=29,
            unvote_fraction=0.0,
            fractions=UPVOTES_ONLY,
            voters=sizes.state_voters,
            post_prefix=f"{prefix}d-",
        ),
        "states": VoteStateWorkload(
            events=sizes.race.e2e_votes,
            posts=posts,
            zipf=RACE_ZIPF,
            seed=29,
            voters=sizes.state_voters,
            post_prefix=f"{prefix}s-",
        ),
    }


def votes_rows(database, prefix: str) -> int:
    with database.snapshot() as snapshot:
        return list(
            snapshot.execute_sql(VOTES_ROWS_SQL, params={"prefix": prefix}, param_types={"prefix": param_types.STRING})
        )[0][0]


def race(database, stream: Stream, workload: Workload | VoteStateWorkload, rmw_votes_per_s: float) -> dict:
    """One burst, first publish -> every post exact, and what it cost Spanner (from the database)."""
    with EmulatorCpu() as cpu:
        result = race_pipeline(
            database, stream.topic_path, workload, DEFAULT_BATCH_SIZE, E2E_TIMEOUT_S, alive=stream.alive, progress=False
        )
    assert result is not None, (
        f"{workload.post_prefix}: counts not exact within {E2E_TIMEOUT_S:.0f} s; see {stream.log_path}"
    )
    votes = result.ledger.events
    cost = delta_cost(database, workload.post_prefix)
    stored = votes_rows(database, workload.post_prefix) if isinstance(workload, VoteStateWorkload) else 0
    commits = cost["sink_commits"]
    mutations = cost["sink_mutations"] + commits * MUTATIONS_PER_COMMIT + stored * MUTATIONS_PER_VOTE
    row = {
        "votes": votes,
        "posts": len(result.ledger.totals),
        "seconds": round(result.seconds, 3),
        "votes_per_s": round(result.votes_per_s, 1),
        "votes_per_s_vs_rmw": round(result.votes_per_s / rmw_votes_per_s, 2),
        "publish_seconds": round(result.report.seconds, 3),
        "messages": result.report.messages,
        "votes_rows": stored,
        "delta_rows": cost["delta_rows"],
        "commits": commits,
        "rows_per_1k_votes": round((stored + cost["delta_rows"]) / votes * 1000, 2),
        "votes_rows_per_1k_votes": round(stored / votes * 1000, 2),
        "delta_rows_per_1k_votes": round(cost["delta_rows"] / votes * 1000, 2),
        **spanner_cost(votes, commits, mutations, cpu.seconds),
        "exact": True,
    }
    if isinstance(workload, VoteStateWorkload):
        distinct = len({event["event_id"] for event in generate(workload)})
        row["votes_row_writes_ceiling_per_1k_votes"] = round(distinct / votes * 1000, 2)
        # `upvotes capacity`'s model: one delta row per post among a transaction's rows_per_commit states.
        rows_per_commit = defaults(STREAMING_PARAMS)["rows_per_commit"]
        touched = expected_touched(Popularity.zipf(workload.posts, workload.zipf), rows_per_commit)
        row["model_delta_rows_per_1k_votes"] = round(touched / rows_per_commit * 1000, 2)
    return row


# --- (d) the window's state per (post, user) ----------------------------------------------------


def window_state_bytes(workload: VoteStateWorkload) -> dict:
    """The first STATE_SAMPLE_EVENTS (at most) of `workload` parsed into bundles of 500 and merged as
    WindowAndMergeVoteStates merges them (MergeLatestVotes): the merged accumulator's size per
    (post, user), in Beam's accumulator coder and as Python objects (tracemalloc)."""
    events = min(STATE_SAMPLE_EVENTS, workload.events)
    messages = list(batch_messages(itertools.islice(generate(workload), events), DEFAULT_BATCH_SIZE))
    merge = MergeLatestVotes()
    gc.collect()
    tracemalloc.start()
    try:
        bundles = []
        for message in messages:
            bundle = BundleSums()
            bundle.add_message(message.data, message.attributes, time.time(), DEFAULT_EVENT_TIME_POLICY, lambda _: None)
            bundles += [element.value[1] for element in bundle.emit_states(time.time())]
        held = merge.merge_accumulators([merge.create_accumulator(), *bundles])
        del bundles, bundle
        gc.collect()
        python_bytes = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    coder = merge.get_accumulator_coder()
    return {
        "events": events,
        "keys": len(held),
        "coder": type(coder).__name__,
        "encoded_bytes_per_key": round(len(coder.encode(held)) / len(held), 1),
        "python_bytes_per_key": round(python_bytes / len(held), 1),
    }


# --- (e) the soak -------------------------------------------------------------------------------


def wait_exact(database, ledger: Ledger, stream: Stream, timeout_s: float) -> float | None:
    """Seconds until every post of `ledger` is exact (checked again two windows later, so a late
    double would show), or None if not within `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        stream.alive()
        if not verify_totals(database, ledger.totals):
            exact_after = time.monotonic() - started
            time.sleep(2 * RACE_WINDOW_S + 1)
            if not verify_totals(database, ledger.totals):
                return exact_after
        time.sleep(0.5)
    return None


def soak_workload(events: int) -> VoteStateWorkload:
    return VoteStateWorkload(events=events, posts=1, seed=31, voters=SOAK_VOTERS, post_prefix="vs-soak-")


def soak(database, stream: Stream, race_row: dict, sizes: Sizes, state_bytes: dict) -> dict:
    """A steady hot-post state load, every voter new, at SOAK_LOAD of the Votes rows per second of
    `race_row` (the hot-post state race; its stored rows, a floor of its writes) over the soak's own
    rows per vote (its distinct events, a ceiling); the stream's RSS along the way."""
    sample = soak_workload(STATE_SAMPLE_EVENTS)
    rows_per_vote = len({event["event_id"] for event in generate(sample)}) / sample.events
    race_rows_per_s = race_row["votes_per_s"] * race_row["votes_rows_per_1k_votes"] / 1000
    votes_per_s = SOAK_LOAD * race_rows_per_s / rows_per_vote
    workload = soak_workload(int(votes_per_s * (sizes.state_soak_long_s + 30)))
    source = LedgeredBatches(workload)
    publisher = PacedPublisher(stream.topic_path, source.next_message, votes_per_s / DEFAULT_BATCH_SIZE)
    samples, peak_short, started = [], None, time.monotonic()
    publisher.start()
    try:
        while (elapsed := time.monotonic() - started) < sizes.state_soak_long_s:
            stream.alive()
            samples.append(
                {
                    "second": round(elapsed, 1),
                    "rss_mib": round(current_rss_mib(stream.started.pid), 1),
                    "peak_mib": round(current_rss_mib(stream.started.pid, "VmHWM"), 1),
                }
            )
            if peak_short is None and elapsed >= sizes.state_soak_short_s:
                peak_short = samples[-1]["peak_mib"]
            time.sleep(1.0)
    finally:
        publisher.stop()
    peak_long = current_rss_mib(stream.started.pid, "VmHWM")
    exact_after = wait_exact(database, source.ledger, stream, max(E2E_TIMEOUT_S, sizes.state_soak_long_s))
    assert exact_after is not None, f"soak: the counts did not match the ledger; see {stream.log_path}"
    assert peak_short is not None  # read at state_soak_short_s, before state_soak_long_s
    pairs = votes_rows(database, workload.post_prefix)
    return {
        "votes_per_s": round(votes_per_s, 1),
        "load_of_race_votes_rows": SOAK_LOAD,
        "race_votes_rows_per_s": round(race_rows_per_s, 1),
        "rows_per_vote": round(rows_per_vote, 3),
        "of_race_votes_per_s": round(votes_per_s / race_row["votes_per_s"], 3),
        "votes": source.ledger.events,
        "posts": 1,
        "voters": SOAK_VOTERS,
        "short_s": sizes.state_soak_short_s,
        "long_s": sizes.state_soak_long_s,
        "peak_rss_after_short_mib": peak_short,
        "peak_rss_after_long_mib": round(peak_long, 1),
        "ratio_long_to_short": round(peak_long / peak_short, 3),
        "samples": samples,
        "exact": True,
        "seconds_to_exact_after_the_load": round(exact_after, 1),
        "distinct_pairs": pairs,
        "if_window_state_were_kept_mib": round(pairs * state_bytes["python_bytes_per_key"] / 2**20, 1),
    }


# --- (f) the count error across a stop ----------------------------------------------------------


@dataclass
class StopOutcome:
    exit_code: int
    drain_seconds: float
    drain_report: str | None
    restart_seconds: float  # from the end of the drain to the new stream's process started


def stop_and_restart(stream: Stream) -> StopOutcome:
    """SIGTERM (a drain, waited for), then a new stream on the same subscription at once."""
    signalled = time.monotonic()
    code = stream.stop()
    drained = time.monotonic()
    report = local_stream.drain_summary(stream.log_path)
    stream.start()
    return StopOutcome(code, round(drained - signalled, 1), report, round(time.monotonic() - drained, 3))


def count_error(database, stream: Stream, sizes: Sizes) -> dict:
    """A steady state load over the Zipf spread, with a SIGTERM and a restart in its middle."""
    workload = VoteStateWorkload(
        events=int(sizes.state_stop_rate * (sizes.state_stop_seconds + 10)),
        posts=sizes.race.e2e_posts,
        zipf=RACE_ZIPF,
        seed=37,
        voters=sizes.state_voters,
        duplicate_fraction=0.1,
        late_fraction=0.1,
        post_prefix="vs-stop-",
    )
    source = LedgeredBatches(workload)
    publisher = PacedPublisher(stream.topic_path, source.next_message, sizes.state_stop_rate / DEFAULT_BATCH_SIZE)
    started = time.monotonic()
    publisher.start()
    try:
        time.sleep(sizes.state_stop_seconds * STOP_AT)
        stop = stop_and_restart(stream)
        time.sleep(max(0.0, started + sizes.state_stop_seconds - time.monotonic()))
    finally:
        publisher.stop()
    exact_after = wait_exact(database, source.ledger, stream, E2E_TIMEOUT_S)
    mismatches = verify_totals(database, source.ledger.totals)
    return {
        "votes": source.ledger.events,
        "posts": len(source.ledger.totals),
        "votes_per_s": sizes.state_stop_rate,
        "load_seconds": sizes.state_stop_seconds,
        "sigterm_at_s": round(sizes.state_stop_seconds * STOP_AT, 1),
        "duplicate_fraction": workload.duplicate_fraction,
        "late_fraction": workload.late_fraction,
        "flip_fraction": workload.flip_fraction,
        "down_fraction": workload.down_fraction,
        "drain_exit_code": stop.exit_code,
        "drain_seconds": stop.drain_seconds,
        "drain_report": stop.drain_report,
        "restart_seconds": stop.restart_seconds,
        "seconds_to_exact_after_the_load": None if exact_after is None else round(exact_after, 1),
        "mismatching_posts": len({m.post_id for m in mismatches}),
        "absolute_error": sum(abs(m.actual - m.expected) for m in mismatches),
        "exact": not mismatches,
    }


# --- the benchmark ------------------------------------------------------------------------------


def _races(database, stream: Stream, sizes: Sizes, rmw_votes_per_s: float) -> dict[str, dict[str, dict]]:
    """Each shape's delta race, then its state race (a strong read on the emulator slows as commits
    accumulate, so the states race on the busier database)."""
    races = {}
    for shape in SHAPES:
        races[shape] = {
            kind: race(database, stream, workload, rmw_votes_per_s)
            for kind, workload in workloads(sizes, shape).items()
        }
        deltas, states = races[shape]["deltas"], races[shape]["states"]
        states["vs_deltas"] = {
            name: round(states[name] / deltas[name], 3) if deltas[name] else None
            for name in ("votes_per_s", "rows_per_1k_votes", "commits_per_1k_votes", "mutations_per_1k_votes")
        }
    return races


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    database = open_database(res.project, res.instance, res.database)
    rmw = best_rmw(database, sizes.sweep_seconds)
    states = workloads(sizes, "hot_post")["states"]
    assert isinstance(states, VoteStateWorkload)
    state_bytes = window_state_bytes(states)
    stream = Stream(with_topics(res, "vs"), log_dir)
    stream.start()
    try:
        stream.wait_ready(database)
        races = _races(database, stream, sizes, rmw["best"]["votes_per_s"])
        hot = races["hot_post"]["states"]
        state_bytes["held_at_the_hot_post_rate_mib"] = round(
            hot["votes_per_s"] * RACE_WINDOW_S * state_bytes["python_bytes_per_key"] / 2**20, 2
        )
        soaked = soak(database, stream, hot, sizes, state_bytes)
        error = count_error(database, stream, sizes)
    finally:
        final_exit_code = stream.stop()
    return {
        "rmw": rmw,
        "races": races,
        "window_s": RACE_WINDOW_S,
        "batch_size": DEFAULT_BATCH_SIZE,
        "voters": sizes.state_voters,
        "zipf": RACE_ZIPF,
        "window_state": state_bytes,
        "soak": soaked,
        "count_error": error,
        "final_exit_code": final_exit_code,
        "runner": "BundleBasedDirectRunner (`upvotes stream` subprocess), the project's Pub/Sub reader",
    }


# --- sizes and report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    sweep_seconds: float  # per read-modify-write configuration, as hot_post's sweep
    race: Race  # each race's events, on one post and over race.e2e_posts posts, as hot_post's burst
    state_voters: int  # the users a race's vote states come from
    state_soak_short_s: int  # the stream's peak RSS under a steady hot-post state load after this long ...
    state_soak_long_s: int  # ... and after this long
    state_stop_rate: int  # votes/s of the state load a SIGTERM and a restart of the stream fall in
    state_stop_seconds: float


FULL = Sizes(
    sweep_seconds=4.0,
    race=FULL_RACE,
    state_voters=100_000,
    state_soak_short_s=60,
    state_soak_long_s=180,
    state_stop_rate=2_000,
    state_stop_seconds=30.0,
)
QUICK = Sizes(
    sweep_seconds=0.5,
    race=QUICK_RACE,
    state_voters=10_000,
    state_soak_short_s=2,
    state_soak_long_s=6,
    state_stop_rate=1_000,
    state_stop_seconds=8.0,
)

VOTE_STATE_SHAPES = {"hot_post": "one viral post", "zipf": "Zipf spread"}
VOTE_STATE_KINDS = {"deltas": "delta events (+1)", "states": "vote states"}


def targets(document: dict) -> list[dict]:
    vs = document["benchmarks"]["vote_states"]
    rmw, races, error, soak = vs["rmw"]["best"], vs["races"], vs["count_error"], vs["soak"]
    return [
        target(
            "Vote states end to end (first publish -> every post exact) >= 10x the best read-modify-write of "
            "the same run, on one viral post and on a Zipf spread",
            "; ".join(
                f"{VOTE_STATE_SHAPES[shape]}: {r['states']['votes_per_s']:,.0f} votes/s = "
                f"{r['states']['votes_per_s_vs_rmw']:.1f}x (delta events {r['deltas']['votes_per_s']:,.0f}/s)"
                for shape, r in races.items()
            )
            + f"; best RMW {rmw['votes_per_s']:,.0f}/s ({rmw['config']})",
            min(r["states"]["votes_per_s_vs_rmw"] for r in races.values()) >= 10,
        ),
        target(
            "Vote-state count error 0 with 10% duplicates, 10% late events, flips and a SIGTERM + restart of "
            "the stream mid-load",
            f"{error['mismatching_posts']} of {error['posts']} posts off, summed absolute error "
            f"{error['absolute_error']:,} over {error['votes']:,} votes; drained in {error['drain_seconds']:.1f} s "
            f"(exit {error['drain_exit_code']})",
            error["exact"] and error["drain_exit_code"] == 0,
        ),
        target(
            f"Memory flat under a hot-post vote-state load: stream peak RSS after {soak['long_s']} s / after "
            f"{soak['short_s']} s <= 1.1",
            f"{soak['peak_rss_after_long_mib']:.0f} / {soak['peak_rss_after_short_mib']:.0f} MiB = "
            f"{soak['ratio_long_to_short']:.3f} at {soak['votes_per_s']:,.0f} votes/s ({soak['votes']:,} votes, "
            f"{soak['distinct_pairs']:,} (post, user) pairs, exact)",
            soak["ratio_long_to_short"] <= 1.1,
        ),
    ]


def markdown(document: dict) -> list[str]:
    vs = document["benchmarks"]["vote_states"]
    rmw, state, soak, error = vs["rmw"]["best"], vs["window_state"], vs["soak"], vs["count_error"]
    rows = [
        [
            f"Read-modify-write, best of {len(vs['rmw']['runs'])} ({rmw['config']})",
            "one row",
            f"{rmw['votes']:,}",
            f"{rmw['votes_per_s']:,.0f}",
            "1.0",
            "-",
            "1,000 (counter rows)",
            "-",
            f"{rmw['commits_per_1k_votes']:,.0f}",
            f"{rmw['mutations_per_1k_votes']:,.0f}",
            emulator_cpu(rmw),
            "yes",
        ]
    ]
    for shape, races in vs["races"].items():
        for kind, r in races.items():
            versus = r.get("vs_deltas", {}).get("votes_per_s")
            rows.append(
                [
                    VOTE_STATE_KINDS[kind],
                    VOTE_STATE_SHAPES[shape] + ("" if r["posts"] == 1 else f" ({r['posts']:,} posts)"),
                    f"{r['votes']:,}",
                    f"{r['votes_per_s']:,.0f}",
                    f"{r['votes_per_s_vs_rmw']:.1f}",
                    "1.0" if versus is None else f"{versus:.2f}",
                    f"{r['votes_rows_per_1k_votes']:,.0f}"
                    + (f" (writes <= {r['votes_row_writes_ceiling_per_1k_votes']:,.0f})" if kind == "states" else ""),
                    f"{r['delta_rows_per_1k_votes']:,.1f}",
                    f"{r['commits_per_1k_votes']:.2f}",
                    f"{r['mutations_per_1k_votes']:,.0f}",
                    emulator_cpu(r),
                    "yes" if r["exact"] else "NO",
                ]
            )
    return [
        f"One vote per user: vote-state events beside delta events, same stream, same run "
        f"({vs['window_s']} s windows, batches of {vs['batch_size']}, {vs['voters']:,} voters)",
        table(
            [
                "Events",
                "Shape",
                "Votes",
                "Votes/s, first publish -> exact",
                "x best RMW",
                "x delta events",
                "Votes rows / 1k votes",
                "Delta rows / 1k votes",
                "Commits / 1k votes",
                "Mutations / 1k votes",
                "Emulator CPU s / 1k votes",
                "Exact",
            ],
            rows,
        ),
        "Votes rows: the (post, user) rows stored; a state replaced in a later window writes its row again, so the "
        "writes lie between that and the distinct events (in brackets). Commits: one per distinct commit timestamp "
        "of the race's delta rows. Mutations: index entries, parent keys and each commit's DeltaCommits and "
        "TopCandidates rows included. Vote-state delta rows per 1k votes by `upvotes capacity`'s model (one per post "
        "among a transaction's states): "
        + "; ".join(
            f"{VOTE_STATE_SHAPES[shape]} {races['states']['model_delta_rows_per_1k_votes']:,.1f} (measured "
            f"{races['states']['delta_rows_per_1k_votes']:,.1f})"
            for shape, races in vs["races"].items()
        )
        + " (the burst packs two event hours into seconds, so a transaction also moves counts between hours).",
        f"Pipeline state per (post, user), what WindowAndMergeVoteStates holds while its window is open: "
        f"{state['encoded_bytes_per_key']:,.0f} bytes in Beam's accumulator coding ({state['coder']}), "
        f"{state['python_bytes_per_key']:,.0f} bytes as Python objects on the DirectRunner (over {state['keys']:,} keys "
        f"merged from {state['events']:,} hot-post states); at the hot-post state rate about "
        f"{state['held_at_the_hot_post_rate_mib']:.1f} MiB per open window, freed when it fires. "
        f"Under a steady hot-post state load of {soak['votes_per_s']:,.0f} votes/s, every voter new "
        f"({soak['load_of_race_votes_rows']:.0%} of the {soak['race_votes_rows_per_s']:,.0f} Votes rows/s the hot-post "
        f"race stored, at {soak['rows_per_vote']:.2f} rows per vote: {soak['of_race_votes_per_s']:.0%} of its votes/s): "
        f"the stream's peak RSS {soak['peak_rss_after_short_mib']:.0f} MiB after "
        f"{soak['short_s']} s, {soak['peak_rss_after_long_mib']:.0f} MiB after {soak['long_s']} s (ratio "
        f"{soak['ratio_long_to_short']:.3f}); its {soak['distinct_pairs']:,} (post, user) pairs would have held "
        f"{soak['if_window_state_were_kept_mib']:,.0f} MiB had their window state been kept; exact "
        f"{soak['seconds_to_exact_after_the_load']:.0f} s after the load.",
        f"Count error: {error['votes_per_s']:,} vote states/s for {error['load_seconds']:g} s over {error['posts']:,} "
        f"posts ({error['duplicate_fraction']:.0%} duplicates, {error['late_fraction']:.0%} late, "
        f"{error['flip_fraction']:.0%} flips up -> down -> none), the stream SIGTERMed at {error['sigterm_at_s']:g} s and "
        "restarted at once on the same subscription:",
        table(
            [
                "Votes",
                "Drain s (exit code)",
                "Seconds to exact after the load",
                "Mismatching posts",
                "Summed absolute error",
            ],
            [
                [
                    f"{error['votes']:,}",
                    f"{error['drain_seconds']:.1f} ({error['drain_exit_code']})",
                    "not exact"
                    if error["seconds_to_exact_after_the_load"] is None
                    else f"{error['seconds_to_exact_after_the_load']:.1f}",
                    f"{error['mismatching_posts']}",
                    f"{error['absolute_error']:,}",
                ]
            ],
        ),
    ]


def chart(document: dict) -> list:
    """A row of the figure: rates, Spanner cost, the soak, and the counts."""
    vs = document["benchmarks"]["vote_states"]
    shapes = list(vs["races"])
    rmw = vs["rmw"]["best"]
    soak = vs["soak"]

    def bars(metric: str, title: str):
        def panel(ax) -> None:
            width = 0.38
            for offset, (kind, colour) in zip(
                (-width / 2, width / 2), (("deltas", "tab:blue"), ("states", "tab:green"))
            ):
                drawn = ax.bar(
                    [i + offset for i in range(len(shapes))],
                    [vs["races"][s][kind][metric] for s in shapes],
                    width,
                    label=VOTE_STATE_KINDS[kind],
                    color=colour,
                )
                ax.bar_label(drawn, fmt="%.0f", fontsize=8)
            ax.axhline(rmw[metric], color="red", linestyle="--", label=f"best RMW ({rmw[metric]:,.0f})")
            highest = max(rmw[metric], *(vs["races"][s][kind][metric] for s in shapes for kind in VOTE_STATE_KINDS))
            if metric == "votes_per_s":
                ax.axhline(10 * rmw[metric], color="grey", linestyle=":", label="10x best RMW")
                ax.set_ylim(top=1.4 * max(highest, 10 * rmw[metric]))
            else:
                ax.set_yscale("log")
                ax.set_ylim(top=30 * highest)
            ax.set_xticks(range(len(shapes)), [VOTE_STATE_SHAPES[s] for s in shapes])
            ax.set_title(title)
            ax.legend(fontsize=8, loc="upper center", ncols=2)

        return panel

    def memory(ax) -> None:
        ax.plot([s["second"] for s in soak["samples"]], [s["rss_mib"] for s in soak["samples"]], "-", label="RSS")
        ax.plot(
            [s["second"] for s in soak["samples"]], [s["peak_mib"] for s in soak["samples"]], "--", label="peak RSS"
        )
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds of steady hot-post vote-state load")
        ax.set_ylabel("MiB")
        ax.set_title(f"vote_states: memory: stream at {soak['votes_per_s']:,.0f} vote states/s")
        ax.legend()

    def counts(ax) -> None:
        error, state = vs["count_error"], vs["window_state"]
        ax.axis("off")
        ax.set_title("vote_states: window state and count error")
        ax.text(
            0.0,
            0.9,
            "\n".join(
                [
                    f"Window state per (post, user): {state['encoded_bytes_per_key']:,.0f} B encoded,",
                    f"{state['python_bytes_per_key']:,.0f} B as Python objects; freed when the window fires",
                    f"Soak: {soak['distinct_pairs']:,} pairs would hold {soak['if_window_state_were_kept_mib']:,.0f} MiB if kept;",
                    f"peak RSS {soak['peak_rss_after_short_mib']:.0f} -> {soak['peak_rss_after_long_mib']:.0f} MiB",
                    f"SIGTERM + restart under {error['votes_per_s']:,} states/s ({error['duplicate_fraction']:.0%} duplicates,",
                    f"{error['late_fraction']:.0%} late, flips): {error['mismatching_posts']} posts off, "
                    f"absolute error {error['absolute_error']:,}",
                ]
            ),
            va="top",
            fontsize=10,
            family="monospace",
        )

    return [
        bars("votes_per_s", "vote_states: votes/s, first publish -> exact"),
        bars("mutations_per_1k_votes", "vote_states: Spanner mutations per 1,000 votes"),
        memory,
        counts,
    ]


BENCHMARK = Benchmark(
    name="vote_states",
    title="One vote per user: vote-state events beside delta events and read-modify-write",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
    chart=chart,
)
