"""The benchmarks `python -m bench` runs, in this order: the order of latest.md's sections and
latest.png's panels. Adding a benchmark is a module defining `BENCHMARK` (bench/benchmark.py)
and one line here."""

from __future__ import annotations

import importlib

from bench.benchmark import Benchmark
from bench.config import RunSizes

BENCHMARKS = (
    "hot_post",
    "transform_cost",
    "write_amplification",
    "fold_scaling",
    "freshness",
    "hot_reads",
    "commit_sizes",
    "unique_voters",
    "write_back",
    "catalogue_cost",
    "stream_reader",
    "real_traffic",
    "fault_soak",
    "vote_states",
    "trending",
    "suspensions",
)


def benchmark(name: str) -> Benchmark:
    """The registered benchmark called `name` (imported on demand: the modules import Beam)."""
    if name not in BENCHMARKS:
        raise KeyError(f"unknown benchmark {name}; choose from {', '.join(BENCHMARKS)}")
    return importlib.import_module(f"bench.{name}").BENCHMARK


def benchmarks() -> list[Benchmark]:
    return [benchmark(name) for name in BENCHMARKS]


def run_sizes(run_name: str) -> RunSizes:
    """Every benchmark's sizes for the run called `run_name` ("full" or "quick")."""
    return RunSizes(run_name, {b.name: b.sizes(run_name) for b in benchmarks()})
