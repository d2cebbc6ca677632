"""Benchmark stream_reader: the local stream's Pub/Sub reader, and what a SIGKILL of the stream loses.

(a) Single-event messages (one vote each, `single_event_messages` of them over 100 posts),
published at once to a running `upvotes stream` (2 s windows), timed from the first publish
until every post's exact count equals the ledger (upvotes.devtools.race.race_pipeline): with Beam's
own DirectRunner reader (READER_ENV=beam: 10 messages per pull; given its best
configuration, the heartbeat it used to run with, an empty batch every 0.5 s, so that its
idle pulls return) and with the project's (local_runner/pubsub_reader.py: up to 1,000 messages per
bundle), same run, same emulators, each on fresh topics.

(b) A SIGKILL of the stream (with the project's reader, which acknowledges on pull: docs/guarantees.md,
"Stopping a stream") under a steady batched load of `kill_rate` votes/s, halfway through
`kill_seconds`, then an immediate restart. Every message carries one marker upvote on a post
of its own, so each message is known counted or lost, with its publish time. Reported: the
messages and votes lost, the loss window (how long before the kill the lost messages were
published), and the votes counted twice (none expected: the dead run's acknowledged
messages are never delivered again, and the new run writes under a new writer generation).
"""
from __future__ import annotations

import itertools
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from google.cloud import pubsub_v1

from bench.benchmark import Benchmark, table, target
from bench.stack import PacedPublisher, check_alive, lost_and_doubled, upvotes_of, wait_until_ready, with_topics
from local_runner.pubsub_reader import READER_ENV
from schemas.contract import FORMAT_ATTRIBUTE, NDJSON, batch_messages
from spanner_store.database import open_database
from upvotes.devtools import local_stream
from upvotes.devtools.ledger import Ledger
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
                client.publish(self._topic_path, b"\n", **{FORMAT_ATTRIBUTE: NDJSON}).result(timeout=30)
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
        race = race_pipeline(database, topic_path, workload, 1, RACE_TIMEOUT_S,
                             alive=lambda: check_alive(process, log_path), progress=False)
        assert race is not None, f"{reader}: the counts did not match within {RACE_TIMEOUT_S:.0f} s; see {log_path}"
    finally:
        if heartbeat:
            heartbeat.stopping.set()
            heartbeat.join(timeout=30)
        local_stream.stop(process)
    return {"reader": READERS[reader], "messages": messages, "seconds": round(race.seconds, 2),
            "messages_per_s": round(messages / race.seconds, 1), "exact": True}


class MarkedBatches:
    """Batches of a steady workload for PacedPublisher, each with one marker upvote on a post of
    its own; the ledger holds every event handed out."""

    def __init__(self, votes: int) -> None:
        self._events = generate_events(Workload(events=votes, posts=200, seed=37, post_prefix="kill-",
                                                unvote_fraction=0.0))  # a lost vote only ever lowers a count
        self._count = itertools.count()
        self.ledger = Ledger()
        self.published: dict[str, tuple[float, int]] = {}  # marker post -> (publish time, votes in its batch)

    def next_message(self):
        marker = f"kill-m{next(self._count)}"
        events = list(itertools.islice(self._events, DEFAULT_BATCH_SIZE - 1))
        events.append({"post_id": marker, "counter": "upvotes", "delta": 1})
        [message] = batch_messages(events, DEFAULT_BATCH_SIZE)
        for event in events:
            self.ledger.add(event)

        def record(at: float) -> None:
            self.published[marker] = (at, len(events))
        return message.data, message.attributes, record


def sigkill(res: Resources, database, sizes: Sizes, log_dir: Path) -> dict:
    stream_res = with_topics(res, "kill")
    topic_path = stream_res.topic_path(stream_res.topic)
    log_path = log_dir / "stream_reader_kill.log"
    source = MarkedBatches(sizes.kill_rate * (sizes.kill_seconds + 60))
    publisher = PacedPublisher(topic_path, source.next_message, sizes.kill_rate / DEFAULT_BATCH_SIZE)
    process = local_stream.start(stream_res, WINDOW_S, log_path)
    try:
        wait_until_ready(database, topic_path, process, log_path)
        publisher.start()
        time.sleep(sizes.kill_seconds / 2)
        killed_at = time.time()
        assert local_stream.stop(process, signal.SIGKILL) == -signal.SIGKILL
        process = local_stream.start(stream_res, WINDOW_S, log_path, append=True)
        time.sleep(sizes.kill_seconds / 2)
    finally:
        publisher.stop()
    try:
        markers = dict(source.published)
        after_kill = [post for post, (at, _) in markers.items() if at > killed_at]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        # Everything published after the kill is counted by the new run; then a few windows more.
        while not all(upvotes_of(database, after_kill).values()):
            check_alive(process, log_path)
            assert time.monotonic() < deadline, f"the restarted stream did not count the new votes; see {log_path}"
            time.sleep(0.5)
        time.sleep(3 * WINDOW_S)
        counts = upvotes_of(database, list(markers))
        lost_votes, doubled = lost_and_doubled(database, source.ledger)
    finally:
        assert local_stream.stop(process) == 0
    lost = {post: markers[post] for post, count in counts.items() if count == 0}
    before_kill = [killed_at - at for at, _ in lost.values()]
    return {
        "load_votes_per_s": sizes.kill_rate, "batch_size": DEFAULT_BATCH_SIZE, "window_s": WINDOW_S,
        "votes": source.ledger.events, "messages": len(markers),
        "messages_lost": len(lost), "votes_lost": lost_votes,
        "votes_in_lost_messages": sum(votes for _, votes in lost.values()),
        "votes_doubled": doubled, "markers_counted_twice": sum(1 for c in counts.values() if c > 1),
        "loss_window_s": {"published_before_kill_min": round(min(before_kill), 2) if lost else None,
                          "published_before_kill_max": round(max(before_kill), 2) if lost else None},
    }


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    database = open_database(res.project, res.instance, res.database)
    readers = {reader: single_events(res, database, reader, sizes.single_event_messages, log_dir) for reader in READERS}
    return {
        "single_events": readers,
        "speedup": round(readers["project"]["messages_per_s"] / readers["beam"]["messages_per_s"], 2),
        "sigkill": sigkill(res, database, sizes, log_dir),
        "exact": all(r["exact"] for r in readers.values()),
    }


# --- sizes and report ------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    single_event_messages: int  # one vote each, through Beam's reader and the project's
    kill_rate: int  # votes/s of the steady batched load a SIGKILL hits
    kill_seconds: int


FULL = Sizes(single_event_messages=4_200, kill_rate=2_000, kill_seconds=30)
QUICK = Sizes(single_event_messages=800, kill_rate=1_000, kill_seconds=5)


def targets(document: dict) -> list[dict]:
    sr = document["benchmarks"]["stream_reader"]
    single, kill = sr["single_events"], sr["sigkill"]
    return [
        target("Local reader: single-event messages reach the counts >= 3x as fast as with Beam's DirectRunner "
               "reader, same run",
               f"{single['project']['messages_per_s']:,.0f} vs {single['beam']['messages_per_s']:,.0f} messages/s "
               f"({sr['speedup']:.1f}x), {single['project']['messages']:,} messages, exact",
               sr["speedup"] >= 3 and sr["exact"]),
        target("SIGKILL of the stream under load: nothing counted twice (at-most-once; the loss is measured)",
               f"{kill['votes_lost']:,} of {kill['votes']:,} votes lost ({kill['messages_lost']} messages), "
               f"{kill['votes_doubled']} doubled",
               kill["votes_doubled"] == 0 and kill["markers_counted_twice"] == 0),
    ]


def markdown(document: dict) -> list[str]:
    sr = document["benchmarks"]["stream_reader"]
    kill = sr["sigkill"]
    window = kill["loss_window_s"]
    return [f"The local stream's Pub/Sub reader (single-event messages, {sr['single_events']['project']['messages']:,})",
            table(["Reader", "Seconds, first publish to exact", "Messages/s", "Exact"],
                  [[r["reader"], f"{r['seconds']:.1f}", f"{r['messages_per_s']:,.0f}", "yes" if r["exact"] else "NO"]
                   for r in sr["single_events"].values()]),
            f"SIGKILL of the stream under {kill['load_votes_per_s']:,} votes/s (batches of {kill['batch_size']}, "
            f"{kill['window_s']} s windows), restarted at once: {kill['messages_lost']} of {kill['messages']} messages "
            f"({kill['votes_lost']:,} of {kill['votes']:,} votes) lost"
            + (f", published {window['published_before_kill_min']:.1f}-{window['published_before_kill_max']:.1f} s "
               "before the kill" if kill["messages_lost"] else "")
            + f"; {kill['votes_doubled']} votes counted twice."]


BENCHMARK = Benchmark(
    name="stream_reader", title="The local stream's Pub/Sub reader, and what a SIGKILL of the stream loses",
    full=FULL, quick=QUICK, run=run, markdown=markdown, targets=targets)
