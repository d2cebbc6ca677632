"""latest.json, latest.md and latest.png from the registered benchmarks' own reports.

Each benchmark module reports itself (bench/benchmark.py: its markdown section, its targets, its
chart panels); this module knows none of their keys. It only iterates over the registered
benchmarks whose results are in the document, in registry order, and adds what spans them all:
the run's header, time, peak RSS and largest commit per benchmark, and the targets' table.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.benchmark import heading, table
from bench.registry import benchmarks

JSON_NAME = "latest.json"
PNG_NAME = "latest.png"
MARKDOWN_NAME = "latest.md"  # the tables, as printed: what bench/README.md and docs/benchmarks.md show
PANELS_PER_ROW = 4


def _present(document: dict) -> list:
    return [b for b in benchmarks() if b.name in document["benchmarks"]]


def evaluate_targets(document: dict) -> list[dict]:
    """Each benchmark's targets with what was measured, in registry order; nothing here asserts."""
    return [t for b in _present(document) for t in b.targets(document)]


def markdown(document: dict) -> str:
    m, bench = document["machine"], document["benchmarks"]
    parts = [
        f"## Benchmark results ({document['sizes']['name']} run)",
        f"{m['date']} on {m['nproc']} x {m['cpu_model']}, Python {m['python']}, Beam {m['apache_beam']}, "
        f"google-cloud-spanner {m['google_cloud_spanner']}; load average {m['load_average_1m']} before, "
        f"{m['load_average_1m_after']} after; {document['total_seconds']:.0f} s in all.",
    ]
    for b in _present(document):
        section = b.markdown(document)
        if section:
            parts += [heading(b.name, section[0]), *section[1:]]
    parts += [
        "### Time, peak RSS and largest commit per benchmark (each in its own process)",
        table(
            ["Benchmark", "Seconds", "Peak RSS MiB", "Subprocess peak RSS MiB", "Largest commit (mutations)"],
            [
                [
                    name,
                    f"{b['seconds']:.0f}",
                    f"{b['peak_rss']['self_mib']:.0f}",
                    f"{b['peak_rss']['children_mib']:.0f}" if b["peak_rss"]["children_mib"] else "-",
                    f"{b['largest_commit_mutations']:,}" if "largest_commit_mutations" in b else "-",
                ]
                for name, b in bench.items()
            ],
        ),
    ]
    parts += [
        "### Targets",
        table(
            ["Target", "Measured", "Met"],
            [[t["target"], t["measured"], "met" if t["met"] else "NOT met"] for t in document["targets"]],
        ),
    ]
    return "\n\n".join(parts) + "\n"


# --- files ------------------------------------------------------------------------------


def write(document: dict, out_dir: Path) -> None:
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out_dir / MARKDOWN_NAME).write_text(markdown(document) + "\n", encoding="utf-8")
    plot(document, out_dir / PNG_NAME)


def plot(document: dict, path: Path) -> None:
    """Every benchmark's panels, PANELS_PER_ROW to a row, in registry order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [panel for b in _present(document) for panel in b.chart(document)]
    rows = max(1, math.ceil(len(panels) / PANELS_PER_ROW))
    fig, axes = plt.subplots(rows, PANELS_PER_ROW, figsize=(22, 5 * rows), squeeze=False)
    m = document["machine"]
    fig.suptitle(
        f"Upvote counter benchmarks, {document['sizes']['name']} run, {m['date']}, "
        f"{m['nproc']} x {m['cpu_model']}, Beam {m['apache_beam']}"
    )
    for ax, panel in zip(axes.flat, panels):
        panel(ax)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
