"""Benchmark hot_reads. `hot_read_callers` threads read the same hot post at a combined
target rate (each thread paced open-loop at rate / callers, never bursting to catch up),
for `hot_read_seconds` per point:

- baseline: `exact_counts` per request, what an app without the reader does (one strong
  snapshot, two Spanner reads, per viewer), at the lowest rate;
- library: one `CountsReader` (refresh 1 s, strong reads), at every rate;
- http: `upvotes serve` as a child process (the real command, its own interpreter, one
  uvicorn worker), called by the same paced threads through httpx keep-alive connections,
  at every rate. Its Spanner reads come from /healthz.

Reported per point: client reads/s achieved, Spanner reads/s issued, reads per refresh
interval, latency p50/p99. The target: Spanner reads/s stay at most 1 per post per refresh
interval per process while client reads/s grow 10x.
"""

from __future__ import annotations

import math
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from bench.benchmark import Benchmark, p50_p99_ms, table, target
from bench.measure import latency_summary
from bench.stack import fresh_database
from schemas.records import PostDelta
from spanner_reads.counts_reader import CountsReader
from spanner_reads.reads import exact_counts
from spanner_store.database import classic_sessions_for_concurrent_reads
from spanner_writes.deltas import write_deltas
from upvotes.resources import Resources

HOT_POST = "hot/read ☃"
HOT_UPVOTES = 12_345
REFRESH_S = 1.0
SERVE_START_TIMEOUT_S = 60.0


def paced_load(call: Callable[[int], object], rate: int, callers: int, seconds: float) -> dict:
    """`callers` threads calling `call(thread index)` at `rate` calls/s in all; latencies and rate achieved."""
    interval = callers / rate
    latencies: list[list[float]] = [[] for _ in range(callers)]
    errors = [0] * callers
    first_error: list[str] = []
    start_at = time.perf_counter() + 0.2
    end_at = start_at + seconds

    def worker(index: int) -> None:
        next_at = start_at + interval * index / callers
        while True:
            now = time.perf_counter()
            if now >= end_at:
                return
            if next_at > now:
                time.sleep(next_at - now)
            began = time.perf_counter()
            try:
                call(index)
                latencies[index].append(time.perf_counter() - began)
            except Exception as error:  # noqa: BLE001 - counted and reported
                errors[index] += 1
                first_error[:] = first_error or [f"{type(error).__name__}: {str(error)[:200]}"]
            next_at += interval
            next_at = max(next_at, time.perf_counter() - interval)  # fell behind: no burst to catch up

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = [s for per_thread in latencies for s in per_thread]
    elapsed = time.perf_counter() - start_at
    return {
        "target_reads_per_s": rate,
        "reads": len(samples),
        "errors": sum(errors),
        "first_error": first_error[0] if first_error else None,
        "reads_per_s": round(len(samples) / elapsed, 1),
        "latency": latency_summary(samples),
        "seconds": round(elapsed, 2),
    }


def _with_spanner_reads(point: dict, spanner_reads: int) -> dict:
    """Adds the Spanner reads issued (a read: one snapshot reading the post's row and its unfolded
    delta range), per second and per refresh interval begun during the point (the target is <= 1)."""
    intervals = math.ceil(point["seconds"] / REFRESH_S)
    return {
        **point,
        "spanner_reads": spanner_reads,
        "spanner_reads_per_s": round(spanner_reads / point["seconds"], 2),
        "spanner_reads_per_refresh": round(spanner_reads / intervals, 2),
    }


def library_point(database, rate: int, sizes: Sizes) -> dict:
    reader = CountsReader(database, refresh_s=REFRESH_S)
    answers = set()

    def read(_: int) -> None:
        answers.add(reader.get(HOT_POST).counts.upvotes)

    point = paced_load(read, rate, sizes.hot_read_callers, sizes.hot_read_seconds)
    return {**_with_spanner_reads(point, reader.spanner_reads), "exact": answers == {HOT_UPVOTES}}


def baseline_point(database, rate: int, sizes: Sizes) -> dict:
    answers = set()

    def read(_: int) -> None:
        answers.add(exact_counts(database, [HOT_POST])[0].counts.upvotes)

    point = paced_load(read, rate, sizes.hot_read_callers, sizes.hot_read_seconds)
    return {**_with_spanner_reads(point, point["reads"]), "exact": answers == {HOT_UPVOTES}}


def start_serve(res: Resources, log_path: Path) -> tuple[subprocess.Popen, str]:
    """`upvotes serve` on a free loopback port, as a child process; returns it and its URL."""
    command = [
        sys.executable,
        "-m",
        "upvotes.cli",
        "serve",
        f"--project={res.project}",
        f"--instance={res.instance}",
        f"--database={res.database}",
        "--port=0",
        f"--refresh-seconds={REFRESH_S}",
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - the child writes to it until it stops
    # Reads only; a token of its own keeps serve from generating one into the user's .upvotes/serve-token.
    env = {**os.environ, "UPVOTES_WRITE_TOKEN": secrets.token_urlsafe(32)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
    assert process.stdout is not None  # stdout=PIPE
    line = process.stdout.readline()  # "upvotes serve: http://127.0.0.1:PORT/ ..." once it is about to listen
    if not line.startswith("upvotes serve: "):
        process.kill()
        raise RuntimeError(f"upvotes serve did not start; see {log_path}")
    return process, line.split()[2].rstrip("/")


def http_points(res: Resources, sizes: Sizes, log_dir: Path) -> list[dict]:
    process, url = start_serve(res, log_dir / "hot_reads_serve.log")
    try:
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("upvotes serve did not answer /healthz") from None
                time.sleep(0.1)
        points = []
        for rate in sizes.hot_read_rates:
            clients = [httpx.Client(base_url=url, timeout=10) for _ in range(sizes.hot_read_callers)]
            answers = set()
            path = f"/v1/posts/{quote(HOT_POST, safe='')}"

            def read(index: int) -> None:
                response = clients[index].get(path)
                response.raise_for_status()
                answers.add(response.json()["upvotes"])

            before = httpx.get(f"{url}/healthz").json()["spanner_reads"]
            point = paced_load(read, rate, sizes.hot_read_callers, sizes.hot_read_seconds)
            spanner_reads = httpx.get(f"{url}/healthz").json()["spanner_reads"] - before
            for client in clients:
                client.close()
            points.append({**_with_spanner_reads(point, spanner_reads), "exact": answers == {HOT_UPVOTES}})
        return points
    finally:
        process.terminate()
        process.wait(30)


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    classic_sessions_for_concurrent_reads()  # the baseline's 32 threads read at once
    database, hot_res = fresh_database(res, f"{res.database}-hr")
    write_deltas(database, [PostDelta.of(HOT_POST, 1_795_312_800, "hot:1", upvotes=HOT_UPVOTES, events=HOT_UPVOTES)])
    baseline = baseline_point(database, sizes.hot_read_rates[0], sizes)
    library = [library_point(database, rate, sizes) for rate in sizes.hot_read_rates]
    http = http_points(hot_res, sizes, log_dir)
    return {
        "callers": sizes.hot_read_callers,
        "refresh_s": REFRESH_S,
        "seconds_per_point": sizes.hot_read_seconds,
        "baseline_uncached": baseline,
        "library": library,
        "http": http,
        "exact": baseline["exact"] and all(p["exact"] for p in library + http),
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    hot_read_callers: int
    hot_read_rates: tuple[int, ...]  # combined target reads/s of the one hot post
    hot_read_seconds: float  # per point


FULL = Sizes(hot_read_callers=32, hot_read_rates=(1_000, 10_000), hot_read_seconds=5.0)
QUICK = Sizes(hot_read_callers=32, hot_read_rates=(1_000, 10_000), hot_read_seconds=1.0)


def targets(document: dict) -> list[dict]:
    reads = document["benchmarks"]["hot_reads"]
    lib_low, lib_high = reads["library"][0], reads["library"][-1]
    http_high = reads["http"][-1]
    growth = lib_high["reads_per_s"] / lib_low["reads_per_s"]
    per_refresh_max = max(p["spanner_reads_per_refresh"] for p in reads["library"] + reads["http"])
    return [
        target(
            f"Hot reads: Spanner reads/s flat (<= 1 per post per {reads['refresh_s']:g} s refresh) while "
            "client reads/s grow 10x",
            f"library: {lib_low['reads_per_s']:,.0f} -> {lib_high['reads_per_s']:,.0f} reads/s ({growth:.1f}x) with "
            f"{lib_low['spanner_reads_per_s']:.2f} -> {lib_high['spanner_reads_per_s']:.2f} Spanner reads/s; HTTP at "
            f"{http_high['reads_per_s']:,.0f} req/s: {http_high['spanner_reads_per_s']:.2f}; uncached baseline "
            f"{reads['baseline_uncached']['spanner_reads_per_s']:,.0f} Spanner reads/s",
            per_refresh_max <= 1.0 + 1e-9 and growth >= 9.0,
        ),
        _http_target(reads),
    ]


# `upvotes serve` over HTTP on the bench machine (2 cores, idle): it keeps up with the lowest rate
# and serves at least this much when asked for more. Committed full runs: 922-998 req/s, p50 4-6 ms
# at 1,000/s; 1,244-1,385 req/s at 10,000/s. Issue 37's report, 480 and 497 req/s with p50 59 ms,
# misses all three.
HTTP_HELD_SHARE = 0.9  # of the lowest target rate
HTTP_HELD_P50_MS = 20.0  # at the lowest target rate
HTTP_SATURATED_MIN = 900  # req/s at the highest target rate


def _http_target(reads: dict) -> dict:
    low, high = reads["http"][0], reads["http"][-1]
    held = (
        low["reads_per_s"] >= HTTP_HELD_SHARE * low["target_reads_per_s"]
        and low["latency"]["p50_ms"] <= HTTP_HELD_P50_MS
        and low["errors"] == 0
    )
    return target(
        f"Hot reads over HTTP: `upvotes serve` holds {low['target_reads_per_s']:,} req/s (>= "
        f"{HTTP_HELD_SHARE:.0%}, p50 <= {HTTP_HELD_P50_MS:g} ms) and serves >= {HTTP_SATURATED_MIN:,} req/s at "
        f"{high['target_reads_per_s']:,}/s",
        f"{low['target_reads_per_s']:,}/s: {low['reads_per_s']:,.0f} req/s, p50 / p99 {p50_p99_ms(low['latency'])} ms; "
        f"{high['target_reads_per_s']:,}/s: {high['reads_per_s']:,.0f} req/s, p50 / p99 "
        f"{p50_p99_ms(high['latency'])} ms",
        held and high["reads_per_s"] >= HTTP_SATURATED_MIN and high["errors"] == 0,
    )


def markdown(document: dict) -> list[str]:
    hr = document["benchmarks"]["hot_reads"]
    return [
        f"Hot reads: {hr['callers']} callers, one post, refresh {hr['refresh_s']:g} s",
        table(
            [
                "Reader",
                "Target reads/s",
                "Reads/s achieved",
                "Spanner reads/s",
                "x baseline Spanner reads/s",
                "Latency p50 / p99 ms",
                "Errors",
                "Exact",
            ],
            [
                [
                    label,
                    f"{p['target_reads_per_s']:,}",
                    f"{p['reads_per_s']:,.0f}",
                    f"{p['spanner_reads_per_s']:,.2f}",
                    f"{p['spanner_reads_per_s'] / hr['baseline_uncached']['spanner_reads_per_s']:.4f}",
                    p50_p99_ms(p["latency"]),
                    f"{p['errors']}",
                    "yes" if p["exact"] else "NO",
                ]
                for label, p in [("exact_counts per request (baseline)", hr["baseline_uncached"])]
                + [("CountsReader (library)", p) for p in hr["library"]]
                + [("upvotes serve (HTTP, httpx keep-alive)", p) for p in hr["http"]]
            ],
        ),
    ]


BENCHMARK = Benchmark(
    name="hot_reads",
    title="Reads of one hot post through CountsReader and upvotes serve against uncached reads",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
