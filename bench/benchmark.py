"""What a benchmark module exports, and the small markdown helpers its report uses.

Every module that `python -m bench` runs (bench/registry.py lists them) defines `BENCHMARK`, a
`Benchmark`: its name, its sizes (a frozen dataclass of its own, one value for the full run and
one for the --quick smoke run), how it runs, and how it reports: its markdown section, its
targets and its chart panels. bench/report.py only iterates over the registered benchmarks; it
knows none of their keys.

A section is named after its benchmark: the report puts an anchor `<a id="NAME"></a>` before the
section's heading `### NAME: ...`, so README.md, bench/README.md and docs/ cite "the `NAME`
section of bench/results/latest.md" (results/latest.md#NAME), never a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upvotes.resources import Resources

# One panel of the results figure: draws into the matplotlib Axes it is given.
Panel = Callable[[Any], None]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark, as the runner and the report see it.

    `run(sizes, res, log_dir)` runs it (in a process of its own) with `full` or `quick` and returns
    its results, a JSON-able dict (bench/results/latest.json's `benchmarks.NAME`). The report
    calls `markdown`, `targets` and `chart` with the whole results document, only when this
    benchmark's results are in it; each may read another benchmark's results when they are there
    too (write_back's section compares with hot_post's baselines).

    - `markdown(document)`: the section's parts, joined by blank lines; the first is the heading's
      text after `### NAME: ` (the report writes the anchor and that prefix). [] for no section.
    - `targets(document)`: each target with what was measured (`target()`); nothing asserts.
    - `chart(document)`: the section's panels of latest.png, four to a row, in registry order.
    """

    name: str
    title: str  # one line: what it measures
    full: Any  # its sizes for the full run ...
    quick: Any  # ... and for `python -m bench --quick`
    run: Callable[[Any, Resources, Path], dict]
    markdown: Callable[[dict], list[str]]
    targets: Callable[[dict], list[dict]] = lambda document: []
    chart: Callable[[dict], list[Panel]] = lambda document: []

    def sizes(self, run_name: str) -> Any:
        """Its sizes for the run called `run_name` ("full" or "quick")."""
        return {"full": self.full, "quick": self.quick}[run_name]


def heading(name: str, text: str) -> str:
    """A section's anchor and heading: named after its benchmark, never numbered."""
    return f'<a id="{name}"></a>\n\n### {name}: {text}'


def target(text: str, measured: str, met: bool) -> dict:
    return {"target": text, "measured": measured, "met": met}


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def p50_p99_ms(summary: dict) -> str:
    """A latency summary's p50 / p99 in milliseconds."""
    return f"{summary['p50_ms']:,.1f} / {summary['p99_ms']:,.1f}"


def p50_p99_s(summary: dict) -> str:
    """A latency summary's p50 / p99 in seconds."""
    return f"{summary['p50_ms'] / 1000:.2f} / {summary['p99_ms'] / 1000:.2f}"


def emulator_cpu(row: dict) -> str:
    """Emulator CPU seconds per 1,000 votes, or n/a when the emulator's process was not found."""
    return "n/a" if row["emulator_cpu_s_per_1k_votes"] is None else f"{row['emulator_cpu_s_per_1k_votes']:.3g}"
