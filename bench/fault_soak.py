"""Benchmark fault_soak: a fault soak. Every post must end exactly equal to the ledger.

A steady batched load (`fault_soak_rate` votes/s in batches of BATCH_SIZE, POSTS posts, user
IDs, shares and un-votes) runs for `fault_soak_seconds`: three quarters published straight to
Pub/Sub, one quarter POSTed to `upvotes serve` (ndjson batches, with a bearer write token).
Meanwhile, on a fixed schedule (scaled to the load's length):

- a fold (`upvotes fold`, a subprocess) is started every FOLD_EVERY_S and SIGKILLed 1.5-6 s in;
- the Spanner emulator is frozen (SIGSTOP) for FREEZE_S every FREEZE_EVERY_S, then SIGCONT;
- the stream (`upvotes stream`, 2 s windows) is stopped with SIGTERM (it drains) at 35% and
  70% of the load and started again at once;
- `upvotes serve` is stopped with SIGINT (Ctrl-C: it finishes the requests in flight) at 50%
  and started again on the same port; the HTTP publisher retries a batch only when its
  connection was refused or closed before a reply.

The ledger holds every event Pub/Sub or the service accepted. After the load: seconds until
every post's exact count equals the ledger, then a clean fold and the check again; lost and
doubled votes (per post and counter, the shortfall and the excess against the ledger).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from google.cloud import pubsub_v1

from bench.benchmark import Benchmark, table, target
from bench.stack import lost_and_doubled, run_fold, wait_until_ready, with_topics
from schemas.contract import batch_messages
from spanner_store.database import open_database
from upvotes.devtools import local_stream
from upvotes.devtools.emulators import PID_ENV_VARS, SPANNER, free_port
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import BATCH_SETTINGS
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import Workload, generate_events
from upvotes.resources import Resources

BATCH_SIZE = 500
POSTS = 300
HTTP_SHARE = 4  # every 4th batch goes through `upvotes serve`
WINDOW_S = 2
FOLD_EVERY_S = 12.0
FREEZE_EVERY_S = 25.0
FREEZE_S = 4.0
STREAM_STOPS = (0.35, 0.70)  # of the load's length
SERVE_RESTART = 0.5
SETTLE_TIMEOUT_S = 240.0
START_TIMEOUT_S = 120.0  # `upvotes serve`, until it answers its health check
PREFIX = "fault-"
SERVE_WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from upvotes.cli import main; sys.exit(main(sys.argv[1:]))"
)


class Load:
    """Publishes the batched load at a steady pace, in two lanes of their own: most batches to
    Pub/Sub, every HTTP_SHARE-th to the service (which may be down a while); each batch is
    counted in the ledger once it was accepted."""

    def __init__(self, topic_path: str, url: str, token: str, rate: int, seconds: float) -> None:
        events = generate_events(
            Workload(events=rate * int(seconds), posts=POSTS, zipf=1.1, seed=23, post_prefix=PREFIX, voters=50_000)
        )
        batches = [(message, events_of(message.data)) for message in batch_messages(events, BATCH_SIZE)]
        self._interval = BATCH_SIZE / rate
        self._topic_path, self._url, self._token = topic_path, url, token
        self.ledger = Ledger()
        self._lock = threading.Lock()
        self.http_batches = 0
        self.http_retries: dict[str, int] = {}  # by the error that made a batch go again
        self.errors: list[BaseException] = []
        lanes = {"pubsub": self._pubsub, "http": self._http}
        self._threads = [
            threading.Thread(
                target=self._lane,
                args=(
                    lanes[lane],
                    [(i, b) for i, b in enumerate(batches) if (i % HTTP_SHARE == HTTP_SHARE - 1) == (lane == "http")],
                ),
                daemon=True,
                name=f"load-{lane}",
            )
            for lane in lanes
        ]

    def run(self) -> None:
        """Publishes everything; returns once every batch is accepted (raises what failed)."""
        self._started = time.monotonic()
        for thread in self._threads:
            thread.start()
        for thread in self._threads:
            thread.join()
        if self.errors:
            raise self.errors[0]

    def _lane(self, send, batches: list) -> None:
        try:
            send(batches)
        except BaseException as error:  # noqa: BLE001 - raised by run()
            self.errors.append(error)

    def _pace(self, index: int) -> None:
        time.sleep(max(0.0, self._started + index * self._interval - time.monotonic()))

    def _pubsub(self, batches: list) -> None:
        client = pubsub_v1.PublisherClient(batch_settings=BATCH_SETTINGS)
        try:
            futures = []
            for index, (message, events) in batches:
                self._pace(index)
                futures.append((client.publish(self._topic_path, message.data, **message.attributes), events))
            for future, events in futures:
                future.result(timeout=120)
                self._count(events)
        finally:
            client.stop()

    def _http(self, batches: list) -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {self._token}"}) as http:
            for index, (message, events) in batches:
                self._pace(index)
                self._post(http, message.data, events)

    def _post(self, http: httpx.Client, body: bytes, events: list[dict]) -> None:
        """POSTs one batch until the service accepts it. Retried only when the service was down
        (connection refused) or closed the connection without a reply (a kept-alive connection
        reset, or closed, by a stopping service): a Ctrl-C'd service finishes every request it
        has read, and replies only after Pub/Sub accepted the batch, so such a batch was never
        published. A retry that published twice would show as doubled votes."""
        self.http_batches += 1
        while True:
            try:
                reply = http.post(
                    f"{self._url}/v1/votes", content=body, headers={"Content-Type": "application/x-ndjson"}
                )
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as error:
                self.http_retries[type(error).__name__] = self.http_retries.get(type(error).__name__, 0) + 1
                time.sleep(0.2)
                continue
            if reply.status_code != 202 or reply.json()["accepted"] != len(events):
                raise RuntimeError(f"upvotes serve answered {reply.status_code}: {reply.text[:300]}")
            self._count(events)
            return

    def _count(self, events: list[dict]) -> None:
        with self._lock:
            for event in events:
                self.ledger.add(event)


def events_of(data: bytes) -> list[dict]:
    import orjson

    return [orjson.loads(line) for line in data.split(b"\n") if line]


class Serve:
    """`upvotes serve` as a subprocess on a fixed port, with a write token; restartable."""

    def __init__(self, res: Resources, log_path: Path, token: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = log_path.with_suffix(".token")
        token_file.touch(mode=0o600)
        token_file.write_text(token + "\n", encoding="utf-8")
        # Ctrl-C's own handler, set explicitly: a process started from a non-interactive shell's
        # background job inherits SIGINT ignored, and Python then never installs it.
        self._command = [
            sys.executable,
            "-c",
            SERVE_WITH_CTRL_C,
            "serve",
            f"--project={res.project}",
            f"--instance={res.instance}",
            f"--database={res.database}",
            f"--topic={res.topic}",
            f"--port={self.port}",
            f"--token-file={token_file}",
        ]
        self._log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self._log_path, "ab") as log:
            self.process = subprocess.Popen(
                self._command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"upvotes serve did not start; see {self._log_path}")
            time.sleep(0.2)

    def stop(self) -> int:
        """Ctrl-C: the service stops accepting and finishes the requests it has."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


class Faults(threading.Thread):
    """Injects the faults of the module docstring on schedule, while the load runs; counts them."""

    def __init__(
        self, res: Resources, seconds: float, stream_log: Path, serve: Serve, env: dict[str, str], log_dir: Path
    ) -> None:
        super().__init__(daemon=True, name="faults")
        self._res, self._seconds, self._stream_log, self._serve = res, seconds, stream_log, serve
        self._env, self._log_dir = env, log_dir
        self._random = random.Random(7)
        pid = os.environ.get(PID_ENV_VARS[SPANNER])
        self._spanner_pid = int(pid) if pid else None
        self.stream = local_stream.start(self._res, WINDOW_S, self._stream_log, self._env, append=True)
        self.counts = {
            "folds_killed": 0,
            "folds_finished_before_the_kill": 0,
            "spanner_freezes": 0,
            "stream_sigterms": 0,
            "serve_restarts": 0,
        }
        self.drains: list[dict] = []
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        """Each kind of fault on its own schedule, in a thread of its own (so they overlap)."""
        schedules = {
            "fold": _times(FOLD_EVERY_S / 2, FOLD_EVERY_S, self._seconds),
            "freeze": _times(FREEZE_EVERY_S / 2, FREEZE_EVERY_S, self._seconds) if self._spanner_pid else [],
            "stream": [share * self._seconds for share in STREAM_STOPS],
            "serve": [SERVE_RESTART * self._seconds],
        }
        started = time.monotonic()
        threads = [
            threading.Thread(target=self._inject, args=(kind, times, started), daemon=True, name=f"fault-{kind}")
            for kind, times in schedules.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _inject(self, kind: str, times: list[float], started: float) -> None:
        try:
            for at in times:
                if self._stopping.wait(max(0.0, started + at - time.monotonic())):
                    return
                getattr(self, f"_inject_{kind}")()
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            self.error = error

    def stop(self) -> None:
        """No new fault from now on; waits for those under way."""
        self._stopping.set()
        self.join(timeout=180)

    def _inject_fold(self) -> None:
        fold = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "upvotes.cli",
                "fold",
                f"--project={self._res.project}",
                f"--instance={self._res.instance}",
                f"--database={self._res.database}",
            ],
            env={**os.environ, **self._env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(self._random.uniform(1.5, 6.0))
        if fold.poll() is None:
            os.killpg(fold.pid, signal.SIGKILL)
            self.counts["folds_killed"] += 1
        else:
            self.counts["folds_finished_before_the_kill"] += 1
        fold.wait()

    def _inject_freeze(self) -> None:
        pid = self._spanner_pid
        assert pid is not None  # freezes are planned only with the emulator's pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.counts["spanner_freezes"] += 1

    def _inject_stream(self) -> None:
        stopping = time.monotonic()
        code = local_stream.stop(self.stream, signal.SIGTERM)
        if code != 0:
            raise RuntimeError(f"the stream exited with {code} on SIGTERM, not 0 (drained); see {self._stream_log}")
        self.drains.append(
            {"seconds": round(time.monotonic() - stopping, 1), "report": local_stream.drain_summary(self._stream_log)}
        )
        self.counts["stream_sigterms"] += 1
        self.stream = local_stream.start(self._res, WINDOW_S, self._stream_log, self._env, append=True)

    def _inject_serve(self) -> None:
        self._serve.stop()
        self._serve.start()
        self.counts["serve_restarts"] += 1


def _times(first: float, every: float, until: float) -> list[float]:
    times, t = [], first
    while t < until:
        times.append(t)
        t += every
    return times


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    database = open_database(res.project, res.instance, res.database)
    soak_res = with_topics(res, "faults")
    stream_log, serve_log = log_dir / "fault_soak_stream.log", log_dir / "fault_soak_serve.log"
    env = {k: os.environ[k] for k in ("SPANNER_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST") if k in os.environ}
    token = os.urandom(16).hex()
    serve = Serve(soak_res, serve_log, token)
    serve.start()
    faults = Faults(soak_res, sizes.fault_soak_seconds, stream_log, serve, env, log_dir)
    load = Load(soak_res.topic_path(soak_res.topic), serve.url, token, sizes.fault_soak_rate, sizes.fault_soak_seconds)
    try:
        wait_until_ready(database, soak_res.topic_path(soak_res.topic), faults.stream, stream_log)
        started = time.monotonic()
        faults.start()
        try:
            load.run()
        finally:
            load_seconds = time.monotonic() - started
            faults.stop()
        if faults.error is not None:
            raise faults.error
        ledger = load.ledger
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while verify_totals(database, ledger.totals) and time.monotonic() < deadline:
            if faults.stream.poll() is not None:
                raise RuntimeError(f"the stream exited with {faults.stream.returncode}; see {stream_log}")
            time.sleep(0.5)
        to_exact = time.monotonic() - started - load_seconds
        lost, doubled = lost_and_doubled(database, ledger)
        final_code = local_stream.stop(faults.stream, signal.SIGTERM)
        fold = run_fold(soak_res)
        lost_after_fold, doubled_after_fold = lost_and_doubled(database, ledger)
    finally:
        if faults.stream.poll() is None:
            local_stream.stop(faults.stream)
        if serve.process is not None and serve.process.poll() is None:
            serve.stop()
    exact = lost == doubled == lost_after_fold == doubled_after_fold == 0
    return {
        "load": {
            "votes_per_s": sizes.fault_soak_rate,
            "seconds": round(load_seconds, 1),
            "batch_size": BATCH_SIZE,
            "posts": POSTS,
            "http_share": 1 / HTTP_SHARE,
            "window_s": WINDOW_S,
        },
        "votes": ledger.events,
        "batches_via_serve": load.http_batches,
        "serve_retries": load.http_retries,
        "faults": faults.counts,
        "faults_injected": sum(faults.counts.values()),
        "spanner_freeze_injected": faults._spanner_pid is not None,
        "drains": faults.drains,
        "final_stop_exit_code": final_code,
        "seconds_to_exact_after_the_load": round(to_exact, 1) if not (lost or doubled) else None,
        "lost": lost,
        "doubled": doubled,
        "lost_after_fold": lost_after_fold,
        "doubled_after_fold": doubled_after_fold,
        "clean_fold_deltas": fold["deltas_folded"],
        "exact": exact,
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    fault_soak_rate: int  # votes/s, batched
    fault_soak_seconds: int


FULL = Sizes(fault_soak_rate=2_000, fault_soak_seconds=120)
QUICK = Sizes(fault_soak_rate=1_000, fault_soak_seconds=20)


def targets(document: dict) -> list[dict]:
    fs = document["benchmarks"]["fault_soak"]
    kinds = {k: v for k, v in fs["faults"].items() if k != "folds_finished_before_the_kill"}
    return [
        target(
            "Fault soak: every post equal to the ledger (0 lost / 0 doubled) with folds killed, Spanner frozen, "
            "the stream SIGTERMed and restarted, and `upvotes serve` restarted",
            f"{fs['votes']:,} votes, {fs['faults_injected']} faults ("
            + ", ".join(f"{k} {v}" for k, v in kinds.items())
            + f"); lost {fs['lost']}, doubled {fs['doubled']}; "
            + (
                "exact " + f"{fs['seconds_to_exact_after_the_load']:.0f} s after the load"
                if fs["exact"]
                else "NOT exact"
            ),
            fs["exact"] and all(kinds.values()) and fs["final_stop_exit_code"] == 0,
        )
    ]


def markdown(document: dict) -> list[str]:
    fs = document["benchmarks"]["fault_soak"]
    load = fs["load"]
    return [
        f"Fault soak: {load['votes_per_s']:,} votes/s for {load['seconds']:.0f} s in batches of "
        f"{load['batch_size']} ({load['http_share']:.0%} through `upvotes serve`), {load['posts']} posts",
        table(
            [
                "Faults injected",
                "Votes",
                "Lost",
                "Doubled",
                "Seconds to exact after the load",
                "After a clean fold",
                "Stream drains (s, signal to exit)",
            ],
            [
                [
                    ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fs["faults"].items()),
                    f"{fs['votes']:,}",
                    f"{fs['lost']}",
                    f"{fs['doubled']}",
                    "-"
                    if fs["seconds_to_exact_after_the_load"] is None
                    else f"{fs['seconds_to_exact_after_the_load']:.1f}",
                    f"lost {fs['lost_after_fold']}, doubled {fs['doubled_after_fold']}",
                    ", ".join(f"{d['seconds']:.1f}" for d in fs["drains"]),
                ]
            ],
        ),
    ]


BENCHMARK = Benchmark(
    name="fault_soak",
    title="A fault soak: folds killed, Spanner frozen, the stream and the service restarted",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
