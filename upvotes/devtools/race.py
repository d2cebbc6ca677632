"""The race: this design against read-modify-write, on one machine and one emulator.

`run_baseline` hammers one hot counter with read-modify-write transactions (or sharded
counters) for a fixed time, from some writer threads, with either the client's own abort
retry or our short jittered one; `BASELINE_SWEEP` is every configuration the benchmark
tries, and the best one of each approach is its baseline. `race_pipeline` publishes a viral
burst through Pub/Sub, in batches, to a running streaming pipeline and times publish ->
every post's exact count equal to the ledger. `upvotes demo` and the benchmarks run both.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

from spanner_store.database import RetryPolicy, run_transaction, run_with_retries
from upvotes.devtools import baseline_counters
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.progress import progress_bar
from upvotes.devtools.publishing import PublishReport, publish_workload
from upvotes.devtools.verification import wait_until_exact
from upvotes.devtools.workload import RealTrafficWorkload, VoteStateWorkload, Workload

CLIENT_RETRY, JITTERED_RETRY = "client", "jittered"
# Short, jittered and patient: the emulator aborts every concurrent read-write transaction at
# once, and the client's own backoff after such an abort is seconds long.
SHORT_RETRY = RetryPolicy(attempts=500, first_delay_s=0.001, max_delay_s=0.05)


@dataclass(frozen=True)
class BaselineConfig:
    shards: int  # 1: plain read-modify-write
    threads: int
    retry: str  # CLIENT_RETRY or JITTERED_RETRY

    @property
    def approach(self) -> str:
        return "rmw" if self.shards == 1 else f"sharded_{self.shards}"

    @property
    def label(self) -> str:
        return f"{self.approach}, {self.threads} thread{'s' if self.threads > 1 else ''}, {self.retry} retry"


BASELINE_SWEEP = tuple(
    BaselineConfig(shards, threads, retry)
    for shards, threads, retry in product((1, 10, 100), (1, 2, 4, 8), (CLIENT_RETRY, JITTERED_RETRY))
)


@dataclass(frozen=True)
class BaselineRun:
    config: BaselineConfig
    votes: int  # committed increments, each acknowledged to its writer
    seconds: float
    attempts: int  # transaction bodies run: commits plus aborted attempts
    exact: bool  # the counter read back equals the acknowledged increments

    @property
    def votes_per_s(self) -> float:
        return self.votes / self.seconds if self.seconds else 0.0

    @property
    def aborts(self) -> int:
        return self.attempts - self.votes


def run_baseline(database, counter: str, config: BaselineConfig, seconds: float, seed: int = 0) -> BaselineRun:
    """Votes on `counter` from `config.threads` threads for about `seconds`; one transaction each.

    `counter` must be new: the run checks the counter ends at exactly what was acknowledged.
    """
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    tally = {"votes": 0, "attempts": 0}

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        votes = attempts = 0

        def body(transaction) -> None:
            nonlocal attempts
            attempts += 1
            baseline_counters.increment(transaction, counter, rng.randrange(config.shards))

        while time.monotonic() < deadline:
            if config.retry == CLIENT_RETRY:
                database.run_in_transaction(body)
            else:
                run_with_retries(lambda: run_transaction(database, body), SHORT_RETRY)
            votes += 1
        with lock:
            tally["votes"] += votes
            tally["attempts"] += attempts

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(config.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    exact = baseline_counters.total(database, counter) == tally["votes"]
    return BaselineRun(config, tally["votes"], elapsed, tally["attempts"], exact)


@dataclass(frozen=True)
class PipelineRace:
    report: PublishReport  # what was published: events, messages, seconds
    ledger: Ledger  # of this race's events, and of any published before it on the same posts
    seconds: float  # from the first publish to every post's exact count equal to the ledger

    @property
    def votes_per_s(self) -> float:
        """This race's valid events per second."""
        return (self.report.published - self.report.invalid) / self.seconds if self.seconds else 0.0


def race_pipeline(
    database,
    topic_path: str,
    workload: Workload | VoteStateWorkload | RealTrafficWorkload,
    batch_size: int,
    timeout_s: float,
    alive: Callable[[], None] = lambda: None,
    progress: bool = True,
    ledger: Ledger | None = None,
) -> PipelineRace | None:
    """Publishes `workload` to a running pipeline; None if the counts do not all match in time.

    `alive` is called between polls and should raise if the pipeline died. With `ledger` (of
    events published before, which the counts already match), the workload's events are added to
    it and every post of both must match (verification.wait_until_exact: a sample of the posts not
    matching yet per poll, then every post in one read).
    """
    started = time.monotonic()
    report, ledger = publish_workload(
        topic_path, workload, rate=None, progress=progress, batch_size=batch_size, ledger=ledger
    )
    posts = len(ledger.totals)
    with progress_bar(posts, "posts whose exact count matches the ledger", unit="posts", enabled=progress) as bar:
        shown = 0

        def matched(count: int) -> None:
            nonlocal shown
            bar.update(max(0, count - shown))
            shown = max(shown, count)

        if (
            wait_until_exact(database, ledger.totals, started + timeout_s - time.monotonic(), alive, matched=matched)
            is None
        ):
            return None
    return PipelineRace(report, ledger, time.monotonic() - started)
