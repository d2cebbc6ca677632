"""The seed's fourth approach, as a baseline to race against: a write-back cache on Redis.

App servers add each vote to one Redis hash (`record_votes`: one `HINCRBY live <counter>:<post>
<delta>` per vote, pipelined without MULTI/EXEC), and a flusher adds the hash's sums to Spanner
every window. A naive flusher (read the hash, write Spanner, delete the hash) loses every
increment that arrives between its read and its delete, and one that dies between its commit and
its delete adds the same sums again when it restarts. This one neither loses nor doubles:

1. RENAME (RENAMENX) the live hash to a staging key of a unique name (`<live>:flush:<uuid>`). Increments
   that follow start a new live hash, so the staging key never changes once renamed.
2. HGETALL the staging key.
3. One Spanner read-write transaction per part of at most POSTS_PER_COMMIT posts: if
   WriteBackFlushes holds (staging key, part), an earlier attempt applied it (a flusher killed
   after its commit, or a commit whose reply was lost): write nothing. Otherwise add the sums to
   WriteBackCounters and insert that log row, atomically.
4. DEL the staging key.
5. On start, and after any Redis error, first finish every staging key left over (SCAN).

A staging key's contents never change, so its parts are the same on every attempt. Spanner's
serializable transactions make this safe even with two flushers on one key.

What it cannot undo is Redis forgetting the RENAME. With AOF everysec a machine crash loses up to
the last second of the AOF; if that second holds a RENAME whose flush has committed, the reload
puts the flushed increments back in the live hash and the next flush adds them again: doubled
(bench/write_back.py measures it). AOF always fsyncs the RENAME before replying. On Redis 7.2+
the flusher waits for the RENAME's fsync (WAITAOF, `renames_wait_for_aof`) before it reads the
staging key; Redis 7.0 (Debian bookworm's) has no WAITAOF.

It is a baseline, not part of the product: the benchmarks run it (`python -m bench.write_back_cache`,
a process of its own so that it can be killed), never Dataflow. It needs the `bench` extra
(redis-py with hiredis). The tables are in schemas/baseline_counters.sql. It keeps two counters,
upvotes and shares (COUNTERS), whatever the system declares: a fixed baseline.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from google.cloud import spanner

from spanner_store.database import RetryPolicy, open_database, run_transaction, run_with_retries
from upvotes.devtools.workload import DEFAULT_FRACTIONS
from upvotes.resources import Resources

COUNTERS = ("upvotes", "shares")  # what this baseline counts, in COUNTER_COLUMNS order
# A generated workload for it: the default mix of the counters it keeps, nothing of the others.
WORKLOAD_FRACTIONS = {name: fraction if name in COUNTERS else 0.0 for name, fraction in DEFAULT_FRACTIONS.items()}
COUNTERS_TABLE = "WriteBackCounters"
FLUSHES_TABLE = "WriteBackFlushes"
COUNTER_COLUMNS = ("PostId", "Upvotes", "Shares")
FLUSH_COLUMNS = ("FlushId", "Part", "Posts", "FlushedAt")
# insert_or_update of a counter row's 3 columns; the log row's 4 (the tables have no index).
MUTATIONS_PER_POST = len(COUNTER_COLUMNS)
MUTATIONS_PER_FLUSH = len(FLUSH_COLUMNS)
# 5,000 posts per commit: 15,004 mutations, under the planners' 20,000 budget (Spanner's limit 80,000).
POSTS_PER_COMMIT = 5_000
AFTER_RENAME, AFTER_COMMIT = "after_rename", "after_commit"  # fault points: see Flusher
FAULT_POINTS = (AFTER_RENAME, AFTER_COMMIT)
LIVE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # no glob characters: SCAN matches staging keys by pattern
WAITAOF_SINCE = (7, 2)  # the first Redis with WAITAOF
# Only the flusher writes these tables; an abort comes from another transaction on the emulator.
RETRY = RetryPolicy(attempts=200, first_delay_s=0.005, max_delay_s=0.2)


def connect(socket_path: str):
    """A redis-py client on a unix socket that never resends a command by itself.

    redis-py retries a command or a whole pipeline after a connection error by default (10 times
    in 8.x). After a server crash that resends votes the dead server may already have applied
    and logged (counted twice once its AOF is reloaded), and a RENAME that may have happened.
    Here a failed batch is simply not acknowledged; the flusher recovers from its staging keys.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(unix_socket_path=socket_path, socket_timeout=10.0, retry=Retry(NoBackoff(), 0))


def renames_wait_for_aof(client) -> bool:
    """Whether a flush waits for its RENAME to reach the AOF on disk (WAITAOF) before it goes on:
    on Redis 7.2+ with an AOF. Then a machine crash after the flush's commit cannot take the
    RENAME back; without it, under AOF everysec, it can (the module docstring)."""
    version = tuple(int(part) for part in client.info("server")["redis_version"].split(".")[:2])
    return version >= WAITAOF_SINCE and bool(client.info("persistence")["aof_enabled"])


def field(post_id: str, counter: str) -> str:
    """A vote's hash field: the counter first, as counters never contain ':' and post IDs may."""
    return f"{counter}:{post_id}"


def record_votes(client, live_key: str, events: Iterable[dict[str, Any]]) -> None:
    """One HINCRBY per vote, sent as one pipeline without MULTI/EXEC (the fastest way in); returns
    once Redis has answered every command, which is the votes' acknowledgement."""
    vote_commands(client, live_key, events).execute()


def vote_commands(client, live_key: str, events: Iterable[dict[str, Any]]):
    """record_votes' command pipeline, built and not sent (redis-py packs it as it sends)."""
    pipeline = client.pipeline(transaction=False)
    for event in events:
        pipeline.hincrby(live_key, field(event["post_id"], event["counter"]), event["delta"])
    return pipeline


Sums = dict[str, dict[str, int]]  # post_id -> {counter: sum}, every one of COUNTERS


def sums_of(hash_fields: dict[bytes, bytes]) -> Sums:
    """{post_id: {"upvotes": n, "shares": m}} from a staging hash's fields."""
    sums: Sums = {}
    for name, value in hash_fields.items():
        counter, post_id = name.decode("utf-8").split(":", 1)
        sums.setdefault(post_id, dict.fromkeys(COUNTERS, 0))[counter] += int(value)
    return sums


def apply_part(transaction, flush_id: str, part: int, sums: Sums) -> bool:
    """The body of one part's transaction: adds `sums` to the counters and logs (flush_id, part),
    unless the log already holds it. Returns whether it applied."""
    if list(transaction.read(FLUSHES_TABLE, columns=("FlushId",), keyset=spanner.KeySet(keys=[[flush_id, part]]))):
        return False
    posts = sorted(sums)
    current = _stored(transaction, posts)
    transaction.insert_or_update(
        COUNTERS_TABLE,
        columns=COUNTER_COLUMNS,
        values=[(post, *(current[post][counter] + sums[post][counter] for counter in COUNTERS)) for post in posts],
    )
    transaction.insert(
        FLUSHES_TABLE, columns=FLUSH_COLUMNS, values=[(flush_id, part, len(posts), spanner.COMMIT_TIMESTAMP)]
    )
    return True


def its_counters(totals: Mapping[str, Mapping[str, int]]) -> Sums:
    """Totals by post (a ledger's) as this baseline keeps them: its COUNTERS only."""
    return {post: {counter: sums.get(counter, 0) for counter in COUNTERS} for post, sums in totals.items()}


def totals(database, post_ids: Iterable[str]) -> Sums:
    """{post_id: {"upvotes": n, "shares": m}} as Spanner holds them (one strong read; unknown
    posts read as zeros). Votes still in Redis are not in it: this is the approach's exact read."""
    with database.snapshot() as snapshot:
        return _stored(snapshot, list(post_ids))


def _stored(reader, post_ids: list[str]) -> Sums:
    """The stored sums of these posts, read in a transaction or snapshot (unknown posts: zeros)."""
    stored = {post: dict.fromkeys(COUNTERS, 0) for post in post_ids}
    for post, *values in reader.read(
        COUNTERS_TABLE, columns=COUNTER_COLUMNS, keyset=spanner.KeySet(keys=[[post] for post in post_ids])
    ):
        stored[post] = dict(zip(COUNTERS, values))
    return stored


@dataclass(frozen=True)
class FlushOutcome:
    """One staging key finished: how many posts, in how many parts, how many parts it applied
    (the others were in the flush log already), and whether an earlier run had left it. Its
    stages, for the race's breakdown: `started_at` (wall clock, before the RENAME), then
    `read_s` (RENAME, its WAITAOF, HGETALL), `sum_s` (the hash's fields to sums) and
    `commit_s` (the Spanner transactions); `seconds` is read_s's HGETALL to the DEL."""

    flush_id: str
    posts: int
    parts: int
    parts_applied: int
    leftover: bool
    seconds: float
    started_at: float = 0.0
    read_s: float = 0.0
    sum_s: float = 0.0
    commit_s: float = 0.0


class Flusher:
    """Moves one live hash's sums to Spanner (see the module docstring).

    `fault(point, flush_number)` is called at AFTER_RENAME (the staging key exists, nothing read
    yet) and at AFTER_COMMIT (every part committed, the staging key not yet deleted) with the
    number of the flush in this process (1, 2, ...; 0 for a leftover): the benchmarks and tests
    kill the process there.
    """

    def __init__(
        self,
        client,
        database,
        live_key: str,
        fault: Callable[[str, int], None] = lambda *_: None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        if not LIVE_KEY.fullmatch(live_key):
            raise ValueError(f"live key {live_key!r}: use 1-64 letters, digits, '_', '.' or '-'")
        self._client = client
        self._database = database
        self.live_key = live_key
        self._fault = fault
        self._new_id = new_id
        self.flushes = 0
        self.waits_for_aof = renames_wait_for_aof(client)

    def finish_leftovers(self) -> list[FlushOutcome]:
        """Finishes every staging key an earlier run (or a failed flush) left behind."""
        keys = sorted(self._client.scan_iter(match=f"{self.live_key}:flush:*", count=1000))
        return [self._finish(key.decode("utf-8"), leftover=True, number=0) for key in keys]

    def flush(self) -> FlushOutcome | None:
        """One flush of the live hash; None if it holds nothing."""
        import redis

        staging = f"{self.live_key}:flush:{self._new_id()}"
        started_at, started = time.time(), time.monotonic()
        try:
            # RENAMENX: never overwrite a staging key, whatever happens (its name is new anyway).
            if not self._client.renamenx(self.live_key, staging):
                raise RuntimeError(f"staging key {staging} exists already")
        except redis.ResponseError as error:
            if "no such key" in str(error).lower():
                return None
            raise
        if self.waits_for_aof:
            self._client.execute_command("WAITAOF", 1, 0, 0)  # the RENAME on the local disk; no timeout
        self.flushes += 1
        self._fault(AFTER_RENAME, self.flushes)
        return self._finish(
            staging, leftover=False, number=self.flushes, started_at=started_at, renamed_s=time.monotonic() - started
        )

    def _finish(
        self, staging: str, leftover: bool, number: int, started_at: float | None = None, renamed_s: float = 0.0
    ) -> FlushOutcome:
        started_at = time.time() if started_at is None else started_at
        started = time.monotonic()
        hash_fields = self._client.hgetall(staging)
        read = time.monotonic()
        sums = sums_of(hash_fields)
        summed = time.monotonic()
        posts = sorted(sums)
        parts = [posts[i : i + POSTS_PER_COMMIT] for i in range(0, len(posts), POSTS_PER_COMMIT)]
        applied = 0
        for part, part_posts in enumerate(parts):
            part_sums = {post: sums[post] for post in part_posts}
            applied += run_with_retries(
                lambda: run_transaction(
                    self._database, lambda transaction: apply_part(transaction, staging, part, part_sums)
                ),
                RETRY,
            )
        committed = time.monotonic()
        self._fault(AFTER_COMMIT, number)
        self._client.delete(staging)
        return FlushOutcome(
            staging,
            len(posts),
            len(parts),
            applied,
            leftover,
            round(time.monotonic() - started, 4),
            round(started_at, 4),
            round(renamed_s + read - started, 4),
            round(summed - read, 4),
            round(committed - summed, 4),
        )


def run(
    flusher: Flusher, interval_s: float, stopping: threading.Event, log: Callable[[dict], None] = lambda _: None
) -> None:
    """Finishes leftovers, then flushes every `interval_s` until `stopping` is set, then once more.
    The beat is the pipeline's fixed windows': wall-clock multiples of `interval_s`, so that a race
    started at a given phase meets a flush and a window end at the same moment. A Redis error (the
    server restarting) is logged and the next beat first finishes leftovers again; a Spanner error
    that outlasts RETRY ends the run."""
    import redis

    recover, next_beat = True, time.time()
    while True:
        stop = stopping.wait(max(0.0, next_beat - time.time()))
        next_beat = (time.time() // interval_s + 1) * interval_s
        try:
            if recover:
                for outcome in flusher.finish_leftovers():
                    log(asdict(outcome))
                recover = False
            flushed = flusher.flush()
            if flushed is not None:
                log(asdict(flushed))
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as error:
            log({"redis_error": f"{type(error).__name__}: {error}"})
            recover = True
        if stop:
            return


def start_process(
    socket_path: str,
    live_key: str,
    res: Resources,
    interval_s: float,
    log_path: Path,
    kill_at: str | None = None,
    kill_on_flush: int = 1,
) -> subprocess.Popen:
    """`python -m bench.write_back_cache` as a child process (a group of its own), its JSON lines
    appended to `log_path`; with `kill_at`, it SIGKILLs itself at that fault point."""
    command = [
        sys.executable,
        "-m",
        "bench.write_back_cache",
        f"--socket={socket_path}",
        f"--live-key={live_key}",
        f"--project={res.project}",
        f"--instance={res.instance}",
        f"--database={res.database}",
        f"--interval-seconds={interval_s}",
    ]
    if kill_at:
        command += [f"--kill-at={kill_at}", f"--kill-on-flush={kill_on_flush}"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def log_records(log_path: Path) -> list[dict]:
    """The JSON lines of a flusher's log (anything else in it, such as a traceback, is skipped)."""
    records = []
    for line in log_path.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.write_back_cache`: the flusher as a process of its own, one JSON line per flush."""
    parser = argparse.ArgumentParser(prog="python -m bench.write_back_cache", description=main.__doc__)
    parser.add_argument("--socket", required=True, help="redis-server's unix socket")
    parser.add_argument("--live-key", required=True, help="the hash the app servers increment")
    parser.add_argument("--project", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument(
        "--interval-seconds",
        type=float,
        required=True,
        help="time between flushes: the pipeline's window, for comparable freshness",
    )
    parser.add_argument("--kill-at", choices=FAULT_POINTS, help="SIGKILL this process at this fault point ...")
    parser.add_argument("--kill-on-flush", type=int, default=1, help="... of this flush (1 is the first)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    def fault(point: str, number: int) -> None:
        if point == args.kill_at and number == args.kill_on_flush:
            print(json.dumps({"killed_at": point, "flush": number}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    flusher = Flusher(
        connect(args.socket), open_database(args.project, args.instance, args.database), args.live_key, fault
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # a last flush, then exit 0
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    run(flusher, args.interval_seconds, stopping, lambda record: print(json.dumps(record), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
