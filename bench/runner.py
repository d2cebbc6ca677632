"""Runs every benchmark on emulators of its own, each in a process of its own, and reports.

A process per benchmark (multiprocessing "spawn") makes each benchmark's peak RSS its own
(ru_maxrss only ever grows) and keeps one benchmark's imports, threads and garbage out of
the next one's CPU measurements. Emulators per benchmark (started, provisioned and stopped
around it, about 6 s) keep what one benchmark wrote out of the next one's figures: the
Spanner emulator keeps every version of every row and frees nothing, so in one full run on
shared emulators the last benchmark (trending, seeding 1,000,000 posts) ran on an emulator
holding the earlier ones' tens of millions of votes, and its commits timed out. Each finished
benchmark's result is also written to logs/run-in-progress.json, so that a failure late in a
run loses only the benchmark that failed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
import traceback
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import schemas
from bench import report
from bench.config import RunSizes
from bench.machine import machine_info
from bench.measure import peak_rss_mib
from bench.registry import BENCHMARKS, benchmark, run_sizes
from bench.stack import bench_resources, provision_bench
from upvotes.devtools.commit_meter import CommitMeter, metering_commits
from upvotes.devtools.emulators import ENV_VARS, PID_ENV_VARS, running_emulators
from upvotes.resources import Resources

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
IN_PROGRESS_NAME = "run-in-progress.json"  # in the logs directory: the results so far of the run going on


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def _run_benchmark(name: str, sizes: Any, res: Resources, log_dir: Path) -> dict:
    """In the benchmark's own process: runs it with its own `sizes`, adds its time and peak RSS."""
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    run_it = benchmark(name).run
    start = time.perf_counter()
    # Every commit this benchmark's process builds, counted as Spanner counts it (the
    # streaming pipeline's child processes are not: commit_sizes covers the sink in-process).
    with metering_commits(CommitMeter(extra_ddl=tuple(schemas.ddl_statements(schemas.BASELINE_DDL_FILE)))) as meter:
        try:
            result = run_it(sizes, res, log_dir)
        except Exception:  # noqa: BLE001 - a client error may not pickle back to the parent: send its text
            raise RuntimeError(f"benchmark {name} failed:\n{traceback.format_exc()}") from None
    result["seconds"] = round(time.perf_counter() - start, 1)
    result["largest_commit_mutations"] = int(meter.largest)
    result["peak_rss"] = peak_rss_mib()
    return result


def run_isolated(name: str, sizes: Any, res: Resources, log_dir: Path) -> dict:
    """`_run_benchmark` in a fresh spawned process; its exceptions are raised here."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_run_benchmark, name, sizes, res, log_dir).result()


def run_on_own_emulators(name: str, sizes: Any, log_dir: Path) -> dict:
    """`run_isolated` on emulators started for it (or the ones the environment names, reused,
    as `running_emulators` does) and a database provisioned for it."""
    inherited = {var: os.environ.get(var) for var in (*ENV_VARS.values(), *PID_ENV_VARS.values())}
    try:
        with running_emulators(log_dir, say) as env:
            os.environ.update(env)
            res = bench_resources(uuid.uuid4().hex[:8])
            say(f"provisioning {res.instance}/{res.database}")
            provision_bench(res)
            return run_isolated(name, sizes, res, log_dir)
    finally:  # the next benchmark starts emulators of its own, not these (stopped by now)
        for var, value in inherited.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def _earlier_results(out_dir: Path, sizes: RunSizes, fresh: dict) -> dict:
    """The latest.json a partial run updates: it must exist and be of the same size."""
    path = out_dir / report.JSON_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run every benchmark once before --only")
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if earlier["sizes"]["name"] != sizes.name:
        raise ValueError(f"{path} holds a {earlier['sizes']['name']} run; --only needs one of size {sizes.name}")
    return {**earlier, "machine": fresh["machine"]}


def run(quick: bool, out_dir: Path, only: tuple[str, ...] = ()) -> dict:
    """Every benchmark (or `only` these, replacing their results in the existing latest.json of
    the same size), then latest.json, latest.md, latest.png and the markdown tables on stdout."""
    sizes = run_sizes("quick" if quick else "full")
    out_dir.mkdir(parents=True, exist_ok=True)
    log_dir = out_dir / "logs"
    started = time.perf_counter()
    document: dict = {"machine": machine_info(), "sizes": sizes.as_dict(), "benchmarks": {}}
    if only:
        document = _earlier_results(out_dir, sizes, document)
    # A classic session pool: the default multiplexed sessions break concurrent
    # read-write transactions on the emulator.
    os.environ["GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW"] = "false"
    log_dir.mkdir(parents=True, exist_ok=True)
    for name in only or BENCHMARKS:
        say(f"{name} ...")
        result = run_on_own_emulators(name, sizes[name], log_dir)
        document["benchmarks"][name] = result
        (log_dir / IN_PROGRESS_NAME).write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
        say(f"{name}: {result['seconds']:.0f} s, peak RSS {result['peak_rss']['self_mib']:.0f} MiB")
    document["total_seconds"] = round(time.perf_counter() - started, 1)
    if only:
        document["partial_runs"] = document.get("partial_runs", []) + [
            {"benchmarks": list(only), "date": document["machine"]["date"]}
        ]
    document["largest_commit_mutations"] = max(b["largest_commit_mutations"] for b in document["benchmarks"].values())
    say(
        f"largest commit of the run: {document['largest_commit_mutations']:,} mutations "
        f"(Spanner's limit 80,000; the planners' budget 20,000)"
    )
    document["machine"]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    document["targets"] = report.evaluate_targets(document)
    report.write(document, out_dir)
    print(report.markdown(document), flush=True)
    say(
        f"wrote {out_dir / report.JSON_NAME}, {out_dir / report.MARKDOWN_NAME} and {out_dir / report.PNG_NAME} in {document['total_seconds']:.0f} s"
    )
    return document
