"""The local stack the benchmarks share: bench tables, fresh databases, the streaming
pipeline as a subprocess, and paced publishing to Pub/Sub."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.publisher.futures import Future

from schemas.contract import batch_messages, event_message
from spanner_reads.reads import exact_counts
from spanner_store.database import open_database
from upvotes.devtools import baseline_counters, local_stream
from upvotes.devtools.emulators import ENV_VARS, PID_ENV_VARS, running_emulators
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import BATCH_SETTINGS, publish_messages
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, VoteStateWorkload, Workload, generate
from upvotes.operations.provision import provision, provision_spanner
from upvotes.resources import Resources

PROJECT = "bench-project"
INSTANCE = "bench"
READY_TIMEOUT_S = 180.0
WARM_UP_POST = "bench-warm-up"
EXACT_READ_KIND = "exact_counts: strong read-only snapshot, Posts row + index range of unfolded deltas"


def quiet(_: str) -> None:
    """A provisioning log that says nothing."""


def bench_resources(tag: str) -> Resources:
    """The bench database and a topic, subscription and dead-letter topic named after `tag`."""
    return Resources(
        project=PROJECT,
        instance=INSTANCE,
        database=f"bench-{tag}"[:30],
        topic=f"bench-{tag}",
        subscription=f"bench-{tag}-sub",
        dead_letter_topic=f"bench-{tag}-dl",
    )


def provision_bench(res: Resources) -> None:
    """Provisions `res` (topics, instance, the project's schema) and adds the baselines' table."""
    provision(res, log=quiet)
    baseline_counters.create_tables(open_database(res.project, res.instance, res.database))


def with_topics(res: Resources, tag: str) -> Resources:
    """The same database with new Pub/Sub topics and subscription of its own, provisioned.

    Named after the database (new in every run) so that no message left over from an
    earlier run on a reused emulator is ever pulled.
    """
    name = f"{res.database}-{tag}"
    fresh = replace(res, topic=name, subscription=f"{name}-sub", dead_letter_topic=f"{name}-dl")
    provision(fresh, log=quiet)
    return fresh


@contextlib.contextmanager
def fresh_emulators(log_dir: Path) -> Iterator[None]:
    """Emulators started for the block, not those the environment names, exported to this process
    (clients made in the block) and its children while it runs; the environment as it was after.
    For a benchmark that compares two runs each on emulators of its own: the Spanner emulator keeps
    every version and frees nothing, so a second run on the same emulator reads and writes slower."""
    names = (*ENV_VARS.values(), *PID_ENV_VARS.values())
    saved = {var: os.environ.pop(var, None) for var in names}
    try:
        with running_emulators(log_dir) as env:
            os.environ.update(env)
            yield
    finally:
        for var in names:
            os.environ.pop(var, None)
        os.environ.update({var: value for var, value in saved.items() if value is not None})


def fresh_database(res: Resources, name: str):
    """A new, empty database with the project's schema on the same instance; returns its handle."""
    fresh = replace(res, database=name[:30])
    provision_spanner(fresh, create_instance=False, instance_config="", log=quiet)
    return open_database(fresh.project, fresh.instance, fresh.database), fresh


def upvotes_of(database, post_ids: list[str]) -> dict[str, int]:
    """Exact upvote counts (spanner_reads.reads.exact_counts: one strong read-only snapshot)."""
    return {t.post_id: t.counts.upvotes for t in exact_counts(database, post_ids)}


def streaming_pipeline(res: Resources, window_seconds: int, log_path: Path):
    """`upvotes stream` on the DirectRunner for a block (upvotes.devtools.local_stream).

    Stopped and waited for on the way out, so its peak RSS shows in this process's
    RUSAGE_CHILDREN.
    """
    return local_stream.running(res, window_seconds, log_path)


def check_alive(process: subprocess.Popen, log_path: Path) -> None:
    if process.poll() is not None:
        raise RuntimeError(f"the streaming pipeline exited with code {process.returncode}; see {log_path}")


def wait_until_ready(
    database, topic_path: str, process: subprocess.Popen, log_path: Path, post: str = WARM_UP_POST
) -> None:
    """Publishes one upvote to `post` and waits until the streaming pipeline has counted it (its
    count grows: a stream started earlier on the same database may have counted one before)."""
    before = upvotes_of(database, [post])[post]
    publish_messages(topic_path, [event_message({"post_id": post, "counter": "upvotes", "delta": 1})], progress=False)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while upvotes_of(database, [post])[post] <= before:
        check_alive(process, log_path)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the pipeline counted nothing within {READY_TIMEOUT_S:.0f} s; see {log_path}")
        time.sleep(0.5)


class LedgeredBatches:
    """Batches of a workload's events for PacedPublisher; each batch's events go into the ledger when
    it is handed out, so the ledger holds exactly what was published."""

    def __init__(self, workload: Workload | VoteStateWorkload) -> None:
        self.ledger = Ledger()
        self._events = generate(workload)

    def next_message(self) -> tuple[bytes, dict, None]:
        events = list(itertools.islice(self._events, DEFAULT_BATCH_SIZE))
        [message] = batch_messages(events, DEFAULT_BATCH_SIZE)
        for event in events:
            self.ledger.add(event)
        return message.data, message.attributes, None


class PacedPublisher(threading.Thread):
    """Publishes `next_message()` at `rate` messages per second in the background until stopped.

    `next_message` returns (data, attributes, on_published): the callback, if any, gets
    the wall time just before the message was handed to the client (batching included
    in what follows). The rate can be changed while running.
    """

    def __init__(
        self,
        topic_path: str,
        next_message: Callable[[], tuple[bytes, dict, Callable[[float], None] | None]],
        rate: float,
    ) -> None:
        super().__init__(daemon=True)
        self._topic_path = topic_path
        self._next_message = next_message
        self.rate = rate
        self.published = 0
        self._stopping = threading.Event()
        self._client = pubsub_v1.PublisherClient(batch_settings=BATCH_SETTINGS)
        self._futures: list[Future] = []

    def run(self) -> None:
        due = time.monotonic()
        while not self._stopping.is_set():
            due += 1.0 / self.rate
            ahead = due - time.monotonic()
            if ahead > 0:
                self._stopping.wait(ahead)
            elif ahead < -0.5:
                due = time.monotonic()  # fell behind: keep the pace, don't burst
            data, attributes, on_published = self._next_message()
            if on_published is not None:
                on_published(time.time())
            self._futures.append(self._client.publish(self._topic_path, data, **attributes))
            self.published += 1

    def stop(self) -> None:
        """Stops publishing and waits until every message is accepted (raises if one failed)."""
        self._stopping.set()
        self.join()
        for future in self._futures:
            future.result(timeout=60)
        self._client.stop()


def lost_and_doubled(database, ledger: Ledger) -> tuple[int, int]:
    """Votes short of the ledger and votes over it, summed over posts and counters. (With
    un-votes in the ledger, a lost un-vote shows as one vote over.)"""
    lost = doubled = 0
    for mismatch in verify_totals(database, ledger.totals):
        gap = mismatch.actual - mismatch.expected
        doubled += max(0, gap)
        lost += max(0, -gap)
    return lost, doubled


def run_fold(res: Resources) -> dict:
    """One fold run exactly as `upvotes fold` runs it (pipeline.fold, BundleBasedDirectRunner).

    pipeline.fold.run returns only the outcome and the time; this also reads the fold's
    transient retries from the run's metrics.
    """
    from bench.feeds import counter_values
    from pipeline import fold

    start = time.perf_counter()
    result = fold.launch([f"--project={res.project}", f"--instance={res.instance}", f"--database={res.database}"])
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    outcome = fold.outcome_from_metrics(result)
    return {
        "seconds": seconds,
        "posts_folded": outcome.posts_folded,
        "deltas_folded": outcome.deltas_folded,
        "posts_split": outcome.posts_split,
        "posts_skipped": outcome.posts_skipped,
        "retries": counter_values(result, "FoldDeltas").get("transient_retries", 0),
    }
