"""Measuring helpers: percentiles, memory, CPU and wall time."""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(seconds: Sequence[float]) -> dict:
    """p50, p99 and max in milliseconds, and the number of samples."""
    return {
        "samples": len(seconds),
        "p50_ms": round(percentile(seconds, 50) * 1000, 2),
        "p99_ms": round(percentile(seconds, 99) * 1000, 2),
        "max_ms": round(max(seconds) * 1000, 2),
    }


def timed_calls(call: Callable[[], object], times: int, budget_s: float = math.inf, at_least: int = 5) -> list[float]:
    """Wall seconds of each of `times` calls, stopping early (after at least `at_least`
    calls) once `budget_s` seconds have been spent."""
    samples: list[float] = []
    spent = 0.0
    while len(samples) < times and (spent < budget_s or len(samples) < at_least):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
        spent += samples[-1]
    return samples


def peak_rss_mib() -> dict:
    """High-water resident set size of this process and of its waited-for children (MiB).

    ru_maxrss is in KiB on Linux. RUSAGE_CHILDREN is the largest of the children, here
    the streaming pipeline subprocess where a benchmark starts one.
    """
    return {
        "self_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "children_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    }


def current_rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    """A process's resident set size now (VmRSS), or its high-water mark (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def reset_peak_rss(pid: int | str = "self") -> None:
    """Resets a process's high-water RSS (VmHWM) to its current RSS (Linux: clear_refs 5), so
    that one phase of a long-lived process has a peak of its own."""
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as clear_refs:
        clear_refs.write("5")


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    """Wall and process CPU seconds of one `measured` block (CPU of every thread)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0


@contextmanager
def measured() -> Iterator[Usage]:
    usage = Usage()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield usage
    finally:
        usage.wall_s = time.perf_counter() - wall
        usage.cpu_s = time.process_time() - cpu


def loglog_exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope of the least-squares line through (log x, log y): y grows as x to this power."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
