"""Benchmark stream_reader: the local stream's Pub/Sub reader, what a SIGKILL of the stream loses
(nothing), and what that costs.

(a) Single-event messages (one vote each, `single_event_messages` of them over 100 posts),
published at once to a running `upvotes stream` (2 s windows), timed from the first publish
until every post's exact count equals the ledger (upvotes.devtools.race.race_pipeline): with Beam's
own DirectRunner reader (READER_ENV=beam: 10 messages per pull; given its best
configuration, the heartbeat it used to run with, an empty batch every 0.5 s, so that its
idle pulls return) and with the project's (local_runner/pubsub_reader.py: up to 1,000 messages per
bundle), same run, same emulators, each on fresh topics.

(b) A soak of SIGKILLs: `kill_rate` votes/s, three quarters in batches of 500 and a quarter as
single-event messages, while the stream is SIGKILLed `kills` times, each at a random moment
(0.5-6 s after the restarted stream counted its first votes) and restarted at once. Reported: the
votes lost and counted twice against the ledger of everything published (both 0 with the
message log, local_runner/exactly_once.py; before issue 47 one kill lost 3,000 of 60,500 votes),
and what each restart replayed.

(c) The cost of exactly once, same run: a burst of `cost_batched_votes` votes in batches of 500,
and one of `cost_single_messages` single-event messages, each raced from the first publish to
every post exact, by a stream that acknowledges on pull (LOG_ENV=off: what the local stream did
before issue 47) and by one with the message log, alternately, `cost_repeats` times each
(median). Per 1,000 votes: the stream process's CPU during the race, the Spanner commits and
mutations of the sinks (bench/metered_stream.py meters every commit of the stream process; the
heartbeat's are counted apart, it beats whether or not the log is on) and the votes/s.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from google.cloud import pubsub_v1

from bench.benchmark import Benchmark, table, target
from bench.measure import process_cpu_seconds
from bench.metered_stream import METER_FILE_ENV
from bench.stack import PacedPublisher, check_alive, lost_and_doubled, wait_until_ready, with_topics
from local_runner.pubsub_reader import LOG_ENV, READER_ENV
from schemas.contract import FORMAT_ATTRIBUTE, NDJSON, batch_messages, event_message
from spanner_reads.reads import exact_counts
from spanner_store.database import open_database
from upvotes.devtools import local_stream
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_message
from upvotes.devtools.race import race_pipeline
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, Workload, generate_events
from upvotes.resources import Resources

WINDOW_S = 2
RACE_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 180.0
HEARTBEAT_S = 0.5
READERS = {"beam": "Beam's DirectRunner reader (10 per pull, heartbeat)", "project": "local_runner/pubsub_reader.py"}


class Heartbeat(threading.Thread):
    """An empty batch (counted nowhere, dead-lettered nowhere) every HEARTBEAT_S: what kept Beam's
    reader from blocking 30 s in an idle pull."""

    def __init__(self, topic_path: str) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self._topic_path = topic_path
        self.stopping = threading.Event()

    def run(self) -> None:
        client = pubsub_v1.PublisherClient()
        try:
            while not self.stopping.wait(HEARTBEAT_S):
                publish_message(client, self._topic_path, b"\n", {FORMAT_ATTRIBUTE: NDJSON}).result(timeout=30)
        finally:
            client.stop()


def single_events(res: Resources, database, reader: str, messages: int, log_dir: Path) -> dict:
    stream_res = with_topics(res, f"single-{reader}")
    topic_path = stream_res.topic_path(stream_res.topic)
    log_path = log_dir / f"stream_reader_{reader}.log"
    env = {READER_ENV: "beam"} if reader == "beam" else {}
    heartbeat = Heartbeat(topic_path) if reader == "beam" else None
    process = local_stream.start(stream_res, WINDOW_S, log_path, env)
    try:
        if heartbeat:
            heartbeat.start()
        wait_until_ready(database, topic_path, process, log_path)
        workload = Workload(events=messages, posts=100, seed=31, post_prefix=f"single-{reader}-")
        race = race_pipeline(
            database,
            topic_path,
            workload,
            1,
            RACE_TIMEOUT_S,
            alive=lambda: check_alive(process, log_path),
            progress=False,
        )
        assert race is not None, f"{reader}: the counts did not match within {RACE_TIMEOUT_S:.0f} s; see {log_path}"
    finally:
        if heartbeat:
            heartbeat.stopping.set()
            heartbeat.join(timeout=30)
        local_stream.stop(process)
    return {
        "reader": READERS[reader],
        "messages": messages,
        "seconds": round(race.seconds, 2),
        "messages_per_s": round(messages / race.seconds, 1),
        "exact": True,
    }


class MixedLoad:
    """The soak's messages for two PacedPublishers: batches of DEFAULT_BATCH_SIZE and single-event
    messages from two workloads; the ledger holds every event handed out."""

    def __init__(self, votes: int) -> None:
        # Un-votes too: a vote counted twice and an un-vote lost both show (bench.stack.lost_and_doubled).
        self._batched = generate_events(Workload(events=votes, posts=200, seed=37, post_prefix="kill-b-"))
        self._single = generate_events(Workload(events=votes, posts=100, seed=38, post_prefix="kill-s-"))
        self.ledger = Ledger()
        self.messages = 0

    def next_batch(self):
        events = list(itertools.islice(self._batched, DEFAULT_BATCH_SIZE))
        [message] = batch_messages(events, DEFAULT_BATCH_SIZE)
        return self._handed_out(events, message.data, message.attributes)

    def next_single(self):
        event = next(self._single)
        data, attributes = event_message(event)
        return self._handed_out([event], data, attributes)

    def _handed_out(self, events: list[dict], data: bytes, attributes: dict):
        for event in events:
            self.ledger.add(event)
        self.messages += 1
        return data, attributes, None


def counted(database, ledger: Ledger) -> int:
    """Votes the database holds of the ledger's posts (a stream that counts makes it grow)."""
    return sum(sum(map(abs, t.counts)) for t in exact_counts(database, list(ledger.totals)))


def sigkill_soak(res: Resources, database, sizes: Sizes, log_dir: Path) -> dict:
    stream_res = with_topics(res, "kill")
    topic_path = stream_res.topic_path(stream_res.topic)
    log_path = log_dir / "stream_reader_kill.log"
    rng = random.Random(47)
    load = MixedLoad(sizes.kill_rate * 600)
    publishers = [
        PacedPublisher(topic_path, load.next_batch, sizes.kill_rate * 0.75 / DEFAULT_BATCH_SIZE),
        PacedPublisher(topic_path, load.next_single, sizes.kill_rate * 0.25),
    ]
    process = local_stream.start(stream_res, WINDOW_S, log_path)
    kills = []
    started = time.monotonic()
    try:
        wait_until_ready(database, topic_path, process, log_path)
        for publisher in publishers:
            publisher.start()
        for _ in range(sizes.kills):
            before, deadline = counted(database, load.ledger), time.monotonic() + SETTLE_TIMEOUT_S
            while counted(database, load.ledger) <= before:  # the (re)started stream counts
                check_alive(process, log_path)
                assert time.monotonic() < deadline, f"the restarted stream counted nothing; see {log_path}"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.5, 6.0))
            kills.append(round(time.monotonic() - started, 1))
            assert local_stream.stop(process, signal.SIGKILL) == -signal.SIGKILL
            process = local_stream.start(stream_res, WINDOW_S, log_path, append=True)
        time.sleep(sizes.kill_tail_s)
    finally:
        for publisher in publishers:
            publisher.stop()
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while lost_and_doubled(database, load.ledger) != (0, 0) and time.monotonic() < deadline:
            check_alive(process, log_path)
            time.sleep(0.5)
        time.sleep(2 * WINDOW_S)  # a vote counted twice would show by now
        lost, doubled = lost_and_doubled(database, load.ledger)
    finally:
        assert local_stream.stop(process) == 0
    replays = [
        int(line.split("replaying ")[1].split(" pulls")[0].replace(",", ""))
        for line in log_path.read_text(errors="replace").splitlines()
        if "upvotes stream: replaying" in line
    ]
    return {
        "load_votes_per_s": sizes.kill_rate,
        "batch_size": DEFAULT_BATCH_SIZE,
        "window_s": WINDOW_S,
        "single_event_share": 0.25,
        "votes": load.ledger.events,
        "messages": load.messages,
        "kills": len(kills),
        "killed_at_s": kills,
        "pulls_replayed": replays,
        "seconds": round(time.monotonic() - started, 1),
        "votes_lost": lost,
        "votes_doubled": doubled,
    }


# --- (c) the cost of exactly once ------------------------------------------------------------

MODES = {"before": "acknowledged on pull (before issue 47)", "after": "message log (exactly once)"}
KINDS = {"batched": DEFAULT_BATCH_SIZE, "single": 1}


def cost_run(res: Resources, database, mode: str, kind: str, sizes: Sizes, log_dir: Path, repeat: int) -> dict:
    tag = f"cost-{kind}-{mode}-{repeat}"
    stream_res = with_topics(res, tag)
    topic_path = stream_res.topic_path(stream_res.topic)
    log_path, meter_path = log_dir / f"stream_reader_{tag}.log", log_dir / f"stream_reader_{tag}.json"
    votes = sizes.cost_batched_votes if kind == "batched" else sizes.cost_single_messages
    env = {METER_FILE_ENV: str(meter_path), **({LOG_ENV: "off"} if mode == "before" else {})}
    process = local_stream.start(stream_res, WINDOW_S, log_path, env, wrapper=("bench.metered_stream",))
    try:
        wait_until_ready(database, topic_path, process, log_path)
        time.sleep(WINDOW_S)  # the warm-up's window written: the race's commits are its own
        began, cpu = time.time(), process_cpu_seconds(process.pid)
        race = race_pipeline(
            database,
            topic_path,
            Workload(events=votes, posts=100, seed=41, post_prefix=f"{tag}-"),
            KINDS[kind],
            RACE_TIMEOUT_S,
            alive=lambda: check_alive(process, log_path),
            progress=False,
        )
        assert race is not None, f"{tag}: the counts did not match within {RACE_TIMEOUT_S:.0f} s; see {log_path}"
        cpu, ended = process_cpu_seconds(process.pid) - cpu, time.time()
    finally:
        assert local_stream.stop(process) == 0
    commits = [
        (kind_, mutations)
        for at, kind_, mutations in json.loads(meter_path.read_text())["listed"]
        if began <= at <= ended
    ]
    per_1k = 1_000 / votes
    sink = [m for k, m in commits if k == "sink"]
    beats = [m for k, m in commits if k == "heartbeat"]
    return {
        "votes": votes,
        "seconds": round(race.seconds, 2),
        "votes_per_s": round(votes / race.seconds),
        "cpu_ms_per_1k_votes": round(cpu * 1_000 * per_1k, 1),
        "sink_commits_per_1k_votes": round(len(sink) * per_1k, 3),
        "sink_mutations_per_1k_votes": round(sum(sink) * per_1k, 1),
        "heartbeat_commits_per_s": round(len(beats) / max(race.seconds, 1e-9), 2),
        "heartbeat_mutations_per_1k_votes": round(sum(beats) * per_1k, 2),
    }


def median_run(runs: list[dict]) -> dict:
    """The run of median time (an odd number of runs: the middle one), with every run's seconds and
    CPU, and the median CPU (of its own: the runs' CPU and time need not rank alike)."""
    ordered = sorted(runs, key=lambda run: run["seconds"])
    cpu = sorted(run["cpu_ms_per_1k_votes"] for run in runs)
    return {
        **ordered[len(ordered) // 2],
        "all_seconds": [run["seconds"] for run in runs],
        "all_cpu_ms_per_1k_votes": [run["cpu_ms_per_1k_votes"] for run in runs],
        "median_cpu_ms_per_1k_votes": cpu[len(cpu) // 2],
    }


def cost(res: Resources, database, sizes: Sizes, log_dir: Path) -> dict:
    runs: dict[str, dict[str, list[dict]]] = {kind: {mode: [] for mode in MODES} for kind in KINDS}
    for repeat in range(sizes.cost_repeats):
        for kind in KINDS:
            for mode in MODES if repeat % 2 == 0 else reversed(MODES):  # alternately first
                runs[kind][mode].append(cost_run(res, database, mode, kind, sizes, log_dir, repeat))
    result = {}
    for kind, by_mode in runs.items():
        before, after = median_run(by_mode["before"]), median_run(by_mode["after"])
        result[kind] = {
            "before": before,
            "after": after,
            "time_per_vote_change": round(after["seconds"] / before["seconds"] - 1, 3),
            "cpu_per_vote_change": round(
                after["median_cpu_ms_per_1k_votes"] / before["median_cpu_ms_per_1k_votes"] - 1, 3
            ),
        }
    return result


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    database = open_database(res.project, res.instance, res.database)
    readers = {reader: single_events(res, database, reader, sizes.single_event_messages, log_dir) for reader in READERS}
    soak = sigkill_soak(res, database, sizes, log_dir)
    return {
        "single_events": readers,
        "speedup": round(readers["project"]["messages_per_s"] / readers["beam"]["messages_per_s"], 2),
        "sigkill": soak,
        "cost": cost(res, database, sizes, log_dir),
        "exact": all(r["exact"] for r in readers.values()) and soak["votes_lost"] == soak["votes_doubled"] == 0,
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    single_event_messages: int  # one vote each, through Beam's reader and the project's
    kill_rate: int  # votes/s of the soak's mixed load
    kills: int  # SIGKILLs of the soak, each at a random moment
    kill_tail_s: float  # the load goes on this long after the last restart
    cost_batched_votes: int
    cost_single_messages: int
    cost_repeats: int  # runs of each (kind, mode) for the cost's medians


FULL = Sizes(
    single_event_messages=4_200,
    kill_rate=2_000,
    kills=5,
    kill_tail_s=10.0,
    cost_batched_votes=300_000,
    cost_single_messages=8_000,
    cost_repeats=3,
)
QUICK = Sizes(
    single_event_messages=800,
    kill_rate=1_000,
    kills=2,
    kill_tail_s=3.0,
    cost_batched_votes=20_000,
    cost_single_messages=800,
    cost_repeats=1,
)
# Issue 47's budget for exactly once: time per vote, same run.
TIME_BUDGET = {"batched": 0.10, "single": 0.25}


def targets(document: dict) -> list[dict]:
    sr = document["benchmarks"]["stream_reader"]
    single, kill = sr["single_events"], sr["sigkill"]
    found = [
        target(
            "Local reader: single-event messages reach the counts >= 3x as fast as with Beam's DirectRunner "
            "reader, same run",
            f"{single['project']['messages_per_s']:,.0f} vs {single['beam']['messages_per_s']:,.0f} messages/s "
            f"({sr['speedup']:.1f}x), {single['project']['messages']:,} messages, exact",
            sr["speedup"] >= 3 and sr["exact"],
        ),
        target(
            f"SIGKILL soak of the stream ({kill['kills']} kills at random moments under {kill['load_votes_per_s']:,} "
            "votes/s, batches and single events): 0 lost, 0 doubled",
            f"{kill['votes_lost']:,} of {kill['votes']:,} votes lost, {kill['votes_doubled']} doubled; pulls "
            f"replayed per restart: {kill['pulls_replayed']}",
            kill["votes_lost"] == 0 and kill["votes_doubled"] == 0,
        ),
    ]
    if "cost" in sr:
        cost_ = sr["cost"]
        found.append(
            target(
                "Exactly once costs at most +10% time per vote on batches of 500, +25% on single-event messages, same run",
                "; ".join(
                    f"{kind} {cost_[kind]['time_per_vote_change']:+.1%} (CPU {cost_[kind]['cpu_per_vote_change']:+.1%})"
                    for kind in KINDS
                ),
                all(cost_[kind]["time_per_vote_change"] <= TIME_BUDGET[kind] for kind in KINDS),
            )
        )
    return found


def markdown(document: dict) -> list[str]:
    sr = document["benchmarks"]["stream_reader"]
    kill = sr["sigkill"]
    parts = [
        f"The local stream's Pub/Sub reader (single-event messages, {sr['single_events']['project']['messages']:,}), "
        "a soak of SIGKILLs, and the cost of exactly once",
        table(
            ["Reader", "Seconds, first publish to exact", "Messages/s", "Exact"],
            [
                [r["reader"], f"{r['seconds']:.1f}", f"{r['messages_per_s']:,.0f}", "yes" if r["exact"] else "NO"]
                for r in sr["single_events"].values()
            ],
        ),
        f"SIGKILL soak: {kill['load_votes_per_s']:,} votes/s ({1 - kill['single_event_share']:.0%} in batches of "
        f"{kill['batch_size']}, {kill['single_event_share']:.0%} as single-event messages, {kill['window_s']} s "
        f"windows), the stream SIGKILLed {kill['kills']} times at random moments ({', '.join(map(str, kill['killed_at_s']))} "
        f"s) and restarted at once: {kill['votes_lost']:,} of {kill['votes']:,} votes lost, {kill['votes_doubled']:,} "
        f"counted twice ({kill['messages']:,} messages; pulls replayed by each restart: {kill['pulls_replayed']}).",
    ]
    if "cost" in sr:
        rows = []
        for kind, by_mode in sr["cost"].items():
            for mode, label in MODES.items():
                r = by_mode[mode]
                rows.append(
                    [
                        f"{kind} ({r['votes']:,} votes)",
                        label,
                        f"{r['votes_per_s']:,}",
                        f"{r['seconds']:.2f} ({', '.join(f'{s:.2f}' for s in r['all_seconds'])})",
                        f"{r['median_cpu_ms_per_1k_votes']:,.1f} ({', '.join(f'{c:,.1f}' for c in r['all_cpu_ms_per_1k_votes'])})",
                        f"{r['sink_commits_per_1k_votes']:.3f}",
                        f"{r['sink_mutations_per_1k_votes']:,.1f}",
                        f"{r['heartbeat_commits_per_s']:.2f}",
                    ]
                )
        parts += [
            table(
                [
                    "Burst",
                    "Stream",
                    "Votes/s",
                    "Seconds to exact, median (each run)",
                    "Stream CPU ms / 1,000 votes, median (each run)",
                    "Sink commits / 1,000 votes",
                    "Sink mutations / 1,000 votes",
                    "Heartbeats / s",
                ],
                rows,
            ),
            "Change, message log against acknowledged on pull: "
            + "; ".join(
                f"{kind} time per vote {c['time_per_vote_change']:+.1%}, CPU per vote {c['cpu_per_vote_change']:+.1%}"
                for kind, c in sr["cost"].items()
            )
            + ".",
        ]
    return parts


BENCHMARK = Benchmark(
    name="stream_reader",
    title="The local stream's Pub/Sub reader, a soak of SIGKILLs, and the cost of exactly once",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
