"""Benchmark 1: one post receiving N votes, every approach against the same Spanner emulator.

(a) read-modify-write: one transaction per vote on a counter row; (b) sharded counters
with 10 and 100 shards, read-modify-write on a random shard; both with 4 writer threads
and our short jittered retry. (c) this project: votes from memory through ParseVotes ->
WindowAndSumVotes -> WriteDeltaRows on the FnApiRunner, then a fold; (c2) the same, end
to end through Pub/Sub with the streaming pipeline as a subprocess, whose DirectRunner
reader pulls at most 10 messages per bundle.

For each: votes/s absorbed, commits per 1,000 votes, transient retries (aborts), whether
the final count is exact (asserted), and the latency of reading the total.
"""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from bench.config import Sizes
from bench.feeds import RSS_SAMPLES, counter_values, emit_cycled, local_pipeline, set_cycled_feed
from bench.measure import latency_summary, measured, timed_calls
from bench.stack import (
    EXACT_READ_KIND, PacedPublisher, check_alive, run_fold, streaming_pipeline, upvotes_of, with_topics,
)
from schemas import post_hash
from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS, defaults
from transforms.parse import ParseVotes
from transforms.spanner_sink import WriteDeltaRows
from transforms.windowing import WindowAndSumVotes
from spanner_store.database import RetryPolicy, open_database, run_transaction, run_with_retries
from upvotes.provision import Resources
from upvotes.publishing import event_message, publish_messages
from upvotes.workload import Workload, generate_events

WRITER_THREADS = 4
# Short, jittered and patient: the emulator aborts every concurrent read-write transaction.
RMW_RETRY = RetryPolicy(attempts=500, first_delay_s=0.001, max_delay_s=0.05)
RMW_TABLE, RMW_COLUMNS = "BenchRmwCounters", ("CounterId", "Upvotes")
SHARDED_TABLE, SHARDED_COLUMNS = "BenchShardedCounters", ("CounterId", "Shard", "Upvotes")
SHARDED_SUM_SQL = "SELECT SUM(Upvotes) FROM BenchShardedCounters WHERE CounterId = @id"
CHAIN_POST, E2E_POST, FILLER_POST = "hot-chain", "hot-e2e", "e2e-filler"
MESSAGE_POOL = 1_000  # distinct pre-encoded messages the in-memory feed cycles through
RSS_SAMPLES_PER_RUN = 10
E2E_WINDOW_S = 2
FILLER_RATE = 10.0  # keeps the DirectRunner's synchronous pull from idling on its 30 s timeout
E2E_TIMEOUT_S = 300.0
READY_TIMEOUT_S = 180.0
DELTA_STATS_SQL = """SELECT COUNT(*), COUNT(DISTINCT CommittedAt) FROM PostDeltas
WHERE PostHash = @hash AND PostId = @post"""


def hot_messages(post_id: str, count: int, seed: int = 7) -> list[tuple[bytes, dict[str, str]]]:
    """`count` upvote messages (+1 each) for one post, as the publisher encodes them."""
    workload = Workload(events=count, posts=1, seed=seed, unvote_fraction=0.0, share_fraction=0.0,
                        start_time=datetime.now(timezone.utc))
    return [event_message({**event, "post_id": post_id}) for event in generate_events(workload)]


# --- (a) and (b): read-modify-write transactions --------------------------------------------

def _increment(table: str, columns: tuple[str, ...], key: list) -> Callable:
    """A transaction body: read the row, write it back one higher (creating it at 1)."""
    def work(transaction) -> None:
        rows = list(transaction.read(table, columns=columns, keyset=spanner.KeySet(keys=[key])))
        current = rows[0][-1] if rows else 0
        transaction.insert_or_update(table, columns=columns, values=[tuple(key) + (current + 1,)])
    return work


def _hammer(database, votes: int, table: str, columns: tuple[str, ...], key_for_vote: Callable[[], list]) -> dict:
    """`votes` read-modify-write transactions from WRITER_THREADS threads; counts retries."""
    retries = [0]
    lock = threading.Lock()

    def on_retry(_: Exception) -> None:
        with lock:
            retries[0] += 1

    def worker(count: int) -> None:
        for _ in range(count):
            body = _increment(table, columns, key_for_vote())
            run_with_retries(lambda: run_transaction(database, body), RMW_RETRY, on_retry)

    shares = [votes // WRITER_THREADS + (1 if i < votes % WRITER_THREADS else 0) for i in range(WRITER_THREADS)]
    with measured() as usage, ThreadPoolExecutor(WRITER_THREADS) as pool:
        for future in [pool.submit(worker, share) for share in shares]:
            future.result()
    return {
        "votes": votes, "seconds": round(usage.wall_s, 3), "votes_per_s": votes / usage.wall_s,
        "commits": votes, "commits_per_1k_votes": 1000.0, "retries": retries[0], "threads": WRITER_THREADS,
    }


def read_modify_write(database, votes: int) -> tuple[dict, Callable[[], int]]:
    counter = "rmw-hot"
    result = _hammer(database, votes, RMW_TABLE, RMW_COLUMNS, lambda: [counter])

    def read() -> int:
        with database.snapshot() as snapshot:
            rows = list(snapshot.read(RMW_TABLE, columns=RMW_COLUMNS, keyset=spanner.KeySet(keys=[[counter]])))
        return rows[0][1]

    result["read_kind"] = "strong read of one row"
    return result, read


def sharded(database, votes: int, shards: int) -> tuple[dict, Callable[[], int]]:
    counter = f"sharded{shards}-hot"
    result = _hammer(database, votes, SHARDED_TABLE, SHARDED_COLUMNS, lambda: [counter, random.randrange(shards)])

    def read() -> int:
        with database.snapshot() as snapshot:
            rows = list(snapshot.execute_sql(SHARDED_SUM_SQL, params={"id": counter},
                                             param_types={"id": param_types.STRING}))
        return rows[0][0]

    result.update(shards=shards, read_kind=f"strong read: SUM over {shards} shard rows")
    return result, read


# --- (c) the chain and sink, fed from memory --------------------------------------------------

def chain_and_sink(res: Resources, database, votes: int) -> tuple[dict, Callable[[], int]]:
    """ParseVotes -> WindowAndSumVotes -> WriteDeltaRows over `votes` in-memory votes, then a fold."""
    pool = [PubsubMessage(data, attributes) for data, attributes in hot_messages(CHAIN_POST, MESSAGE_POOL)]
    set_cycled_feed(pool, votes, RSS_SAMPLES_PER_RUN)
    pipeline = local_pipeline()
    parsed = pipeline | "Start" >> beam.Impulse() | "Votes" >> beam.FlatMap(emit_cycled) | "ParseVotes" >> ParseVotes()
    (parsed.votes
     | "WindowAndSumVotes" >> WindowAndSumVotes(f"bench-{int(time.time())}", defaults(STREAMING_PARAMS)["window_seconds"])
     | "WriteDeltaRows" >> WriteDeltaRows(res.project, res.instance, res.database,
                                                 defaults(STREAMING_PARAMS)["rows_per_commit"]))
    with measured() as usage:
        result = pipeline.run()
        result.wait_until_finish()
    sink = counter_values(result, "WriteDeltaRows")
    before_fold = upvotes_of(database, [CHAIN_POST])[CHAIN_POST]
    fold = run_fold(res)
    after_fold = upvotes_of(database, [CHAIN_POST])[CHAIN_POST]
    assert before_fold == votes and after_fold == votes, (
        f"chain and sink: {before_fold} before the fold, {after_fold} after, expected {votes}")
    fold_commits = -(-fold["posts_folded"] // defaults(FOLD_PARAMS)["posts_per_commit"]) + 1  # fold transactions + FoldRuns row
    commits = sink.get("commits", 0)
    samples = list(RSS_SAMPLES)
    memory = {
        "samples": [{"votes": n, "rss_mib": round(rss, 1)} for n, rss in samples],
        "n_votes": samples[0][0], "rss_at_n_mib": round(samples[0][1], 1),
        "ten_n_votes": samples[-1][0], "rss_at_10n_mib": round(samples[-1][1], 1),
        "ratio_10n_to_n": round(samples[-1][1] / samples[0][1], 3),
        "mib_per_100k_votes": round((samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0]) * 100_000, 2),
    }
    return {
        "votes": votes, "seconds": round(usage.wall_s, 3), "cpu_seconds": round(usage.cpu_s, 3),
        "votes_per_s": votes / usage.wall_s, "runner": "FnApiRunner (batch; windows on ingestion time)",
        "commits": commits, "commits_per_1k_votes": commits / votes * 1000,
        "commits_per_1k_votes_with_fold": (commits + fold_commits) / votes * 1000,
        "delta_rows": sink.get("rows_written", 0),
        "retries": sink.get("transient_retries", 0) + fold["retries"],
        "fold": fold, "count_before_fold": before_fold, "count_after_fold": after_fold,
        "read_kind": EXACT_READ_KIND,
        "memory": memory,
    }, lambda: upvotes_of(database, [CHAIN_POST])[CHAIN_POST]


# --- (c2) end to end through Pub/Sub -----------------------------------------------------------

def _wait_for(database, post: str, done: Callable[[int], bool], timeout_s: float, process, log_path: Path) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        check_alive(process, log_path)
        count = upvotes_of(database, [post])[post]
        if done(count):
            return count
        if time.monotonic() > deadline:
            raise TimeoutError(f"{post}: count {count} after {timeout_s:.0f} s; see {log_path}")
        time.sleep(0.2)


def end_to_end(res: Resources, database, votes: int, log_dir: Path) -> tuple[dict, Callable[[], int]]:
    """Publishes `votes` to Pub/Sub as fast as the client goes; seconds until the count is exact."""
    stream_res = with_topics(res, "e2e")
    topic_path = stream_res.topic_path(stream_res.topic)
    filler_message = event_message({"post_id": FILLER_POST, "counter": "upvotes", "delta": 1})
    filler = PacedPublisher(topic_path, lambda: (*filler_message, None), FILLER_RATE)
    log_path = log_dir / "hot_post_stream.log"
    messages = hot_messages(E2E_POST, votes)
    filler.start()
    try:
        with streaming_pipeline(stream_res, E2E_WINDOW_S, log_path) as process:
            _wait_for(database, FILLER_POST, lambda n: n > 0, READY_TIMEOUT_S, process, log_path)
            start = time.monotonic()
            report = publish_messages(topic_path, messages, progress=False)
            publish_s = time.monotonic() - start
            count = _wait_for(database, E2E_POST, lambda n: n >= votes, E2E_TIMEOUT_S, process, log_path)
            seconds = time.monotonic() - start
            time.sleep(2 * E2E_WINDOW_S + 1)  # a duplicate would show up within two windows
            settled = upvotes_of(database, [E2E_POST])[E2E_POST]
    finally:
        filler.stop()
    assert report.failed == 0 and count == votes and settled == votes, (
        f"end to end: {report.failed} failed publishes; count {count}, then {settled}, expected {votes}")
    with database.snapshot() as snapshot:
        rows, commits = list(snapshot.execute_sql(
            DELTA_STATS_SQL, params={"hash": post_hash(E2E_POST), "post": E2E_POST},
            param_types={"hash": param_types.INT64, "post": param_types.STRING}))[0]
    return {
        "votes": votes, "seconds": round(seconds, 3), "votes_per_s": votes / seconds,
        "publish_seconds": round(publish_s, 3), "window_s": E2E_WINDOW_S,
        "runner": "BundleBasedDirectRunner (streaming subprocess)",
        "cap": "the DirectRunner's Pub/Sub reader pulls at most 10 messages per bundle",
        "commits": commits, "commits_per_1k_votes": commits / votes * 1000, "delta_rows": rows,
        "retries": None, "retries_note": "inside the subprocess; not observable from here",
        "filler_votes_per_s": FILLER_RATE,
        "read_kind": EXACT_READ_KIND,
    }, lambda: upvotes_of(database, [E2E_POST])[E2E_POST]


# --- the benchmark -------------------------------------------------------------------------

def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """Every approach in turn on the bench database, then the interleaved total reads."""
    database = open_database(res.project, res.instance, res.database)
    approaches: dict[str, dict] = {}
    readers: dict[str, Callable[[], int]] = {}
    for name, measure in (
        ("rmw", lambda: read_modify_write(database, sizes.baseline_votes)),
        ("sharded_10", lambda: sharded(database, sizes.baseline_votes, 10)),
        ("sharded_100", lambda: sharded(database, sizes.baseline_votes, 100)),
        ("chain_sink", lambda: chain_and_sink(res, database, sizes.chain_votes)),
        ("e2e_pubsub", lambda: end_to_end(res, database, sizes.e2e_votes, log_dir)),
    ):
        approaches[name], readers[name] = measure()
    # Reads last and interleaved, so every approach sees the same database (strong reads on
    # the emulator slow down as commits accumulate).
    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(sizes.reads):
        for name, read in readers.items():
            samples[name] += timed_calls(read, 1)
    for name, result in approaches.items():
        final = readers[name]()
        result["final_count"] = final
        result["exact"] = final == result["votes"]
        assert result["exact"], f"{name}: final count {final}, expected {result['votes']}"
        result["read_latency"] = latency_summary(samples[name])
    rmw = approaches["rmw"]
    for result in approaches.values():
        result["votes_per_s_vs_rmw"] = result["votes_per_s"] / rmw["votes_per_s"]
        result["commits_per_1k_vs_rmw"] = result["commits_per_1k_votes"] / rmw["commits_per_1k_votes"]
    return {"approaches": approaches, "memory": approaches["chain_sink"]["memory"]}
