"""Benchmark freshness: time from publish to visible in exact_counts, under a steady publish rate.

The streaming pipeline runs as a subprocess (DirectRunner, `fresh_window_s` windows) while
a background publisher sends `fresh_rate` events per second (Zipf 1.1 over 1,000 posts;
WARMUP_RATE until the pipeline has counted its first marker, so no backlog is measured).
Every 1/MARKERS_PER_S seconds one of those events is a marker: a single upvote on a post
of its own. A poller reads the outstanding markers with exact_counts every POLL_S
seconds; a marker's latency runs from just before it is handed to the publisher client
(client batching included) to the end of the first read that sees it. Each marker must
read exactly 1. The subprocess's RSS is sampled while the load runs.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.benchmark import Benchmark, table, target
from bench.measure import current_rss_mib, latency_summary, peak_rss_mib
from bench.stack import PacedPublisher, check_alive, streaming_pipeline, upvotes_of, with_topics
from schemas.contract import event_message
from spanner_store.database import open_database
from upvotes.devtools.workload import Workload, generate_events
from upvotes.resources import Resources

MARKERS_PER_S = 2
POLL_S = 0.05
WARMUP_TIMEOUT_S = 180.0
SETTLE_TIMEOUT_S = 90.0
WARMUP_POST = "fresh-warmup"
WARMUP_RATE = 10  # events/s until the pipeline counts: no backlog when the measurement starts
BACKGROUND_POSTS = 1_000


class MarkerSource:
    """The publisher's messages: background events, and every `every`-th one a marker."""

    def __init__(self, rate: int, events: int) -> None:
        self._background = generate_events(Workload(events=events, posts=BACKGROUND_POSTS, zipf=1.1, seed=5))
        self._every = max(1, rate // MARKERS_PER_S)  # at the measured rate; warm-up markers are sparser
        self._count = itertools.count()
        self._lock = threading.Lock()
        self.measuring = False
        self.published: dict[str, float] = {}  # marker post -> wall time just before publish

    def next_message(self) -> tuple[bytes, dict, Callable[[float], None] | None]:
        index = next(self._count)
        if index % self._every:
            return (*event_message(next(self._background)), None)
        post = f"fresh-{index}" if self.measuring else WARMUP_POST
        data, attributes = event_message({"post_id": post, "counter": "upvotes", "delta": 1})
        return data, attributes, lambda at: self._record(post, at)

    def _record(self, post: str, at: float) -> None:
        if post != WARMUP_POST:
            with self._lock:
                self.published[post] = at

    def markers(self) -> dict[str, float]:
        with self._lock:
            return dict(self.published)


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """Warm up at WARMUP_RATE, then markers under the full rate; latencies and memory."""
    database = open_database(res.project, res.instance, res.database)
    stream_res = with_topics(res, "fresh")
    log_path = log_dir / "freshness_stream.log"
    source = MarkerSource(sizes.fresh_rate, sizes.fresh_rate * (sizes.fresh_seconds + 600))
    publisher = PacedPublisher(stream_res.topic_path(stream_res.topic), source.next_message, WARMUP_RATE)
    latencies: dict[str, float] = {}
    inexact: dict[str, int] = {}
    rss: list[tuple[float, float]] = []  # (seconds into the measurement, subprocess RSS MiB)
    publisher.start()
    try:
        with streaming_pipeline(stream_res, sizes.fresh_window_s, log_path) as process:
            deadline = time.monotonic() + WARMUP_TIMEOUT_S
            while upvotes_of(database, [WARMUP_POST])[WARMUP_POST] == 0:
                check_alive(process, log_path)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the streaming pipeline counted nothing in {WARMUP_TIMEOUT_S:.0f} s; see {log_path}"
                    )
                time.sleep(0.2)
            source.measuring = True
            publisher.rate = sizes.fresh_rate
            start = time.monotonic()
            stop_marking = start + sizes.fresh_seconds
            deadline = stop_marking + SETTLE_TIMEOUT_S
            next_rss = start
            while time.monotonic() < deadline:
                check_alive(process, log_path)
                now = time.monotonic()
                if now >= stop_marking and source.measuring:
                    source.measuring = False
                if now >= next_rss and source.measuring:
                    rss.append((now - start, current_rss_mib(process.pid)))
                    next_rss += 1.0
                markers = source.markers()
                outstanding = [post for post in markers if post not in latencies]
                if not outstanding and not source.measuring:
                    break
                if outstanding:
                    counts = upvotes_of(database, outstanding)
                    seen = time.time()
                    for post, count in counts.items():
                        if count:
                            latencies[post] = seen - markers[post]
                            if count != 1:
                                inexact[post] = count
                time.sleep(POLL_S)
    finally:
        publisher.stop()
    published = source.markers()
    missing = sorted(set(published) - set(latencies))
    assert not missing, f"{len(missing)} markers never became visible, e.g. {missing[:3]}; see {log_path}"
    assert not inexact, f"markers counted more than once: {dict(list(inexact.items())[:3])}"
    summary = latency_summary(list(latencies.values()))
    first_publish = min(published.values())
    first, last = rss[max(0, len(rss) // 10 - 1)], rss[-1]
    return {
        "rate_events_per_s": sizes.fresh_rate,
        "load_seconds": sizes.fresh_seconds,
        "window_s": sizes.fresh_window_s,
        "events_published": publisher.published,
        "markers": len(published),
        "exact": True,
        "latency": summary,
        "series": [
            {"published_at_s": round(published[post] - first_publish, 2), "latency_s": round(latency, 3)}
            for post, latency in sorted(latencies.items(), key=lambda item: published[item[0]])
        ],
        "target_s": 2 * sizes.fresh_window_s + 1,
        "measured_by": f"exact_counts polled every {POLL_S * 1000:.0f} ms; time to the end of the first read that sees the marker",
        "stream_memory": {
            "samples": [{"second": round(t, 1), "rss_mib": round(m, 1)} for t, m in rss],
            "rss_at_tenth_mib": round(first[1], 1),
            "rss_at_end_mib": round(last[1], 1),
            "ratio_end_to_tenth": round(last[1] / first[1], 3),
        },
        "stream_peak_rss": peak_rss_mib()["children_mib"],
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    fresh_rate: int  # events per second
    fresh_seconds: int
    fresh_window_s: int


FULL = Sizes(fresh_rate=100, fresh_seconds=60, fresh_window_s=2)
QUICK = Sizes(fresh_rate=100, fresh_seconds=6, fresh_window_s=2)


def targets(document: dict) -> list[dict]:
    fresh = document["benchmarks"]["freshness"]
    return [
        target(
            f"Freshness p99 <= 2 windows + 1 s ({fresh['target_s']} s)",
            f"p99 {fresh['latency']['p99_ms'] / 1000:.1f} s, p50 {fresh['latency']['p50_ms'] / 1000:.1f} s "
            f"at {fresh['rate_events_per_s']} events/s",
            fresh["latency"]["p99_ms"] / 1000 <= fresh["target_s"],
        )
    ]


def markdown(document: dict) -> list[str]:
    fr = document["benchmarks"]["freshness"]
    return [
        f"Freshness (streaming subprocess, {fr['window_s']} s windows)",
        table(
            ["Events/s", "Seconds", "Markers", "p50 s", "p99 s", "Max s", "Target s"],
            [
                [
                    f"{fr['rate_events_per_s']}",
                    f"{fr['load_seconds']}",
                    f"{fr['markers']}",
                    f"{fr['latency']['p50_ms'] / 1000:.2f}",
                    f"{fr['latency']['p99_ms'] / 1000:.2f}",
                    f"{fr['latency']['max_ms'] / 1000:.2f}",
                    f"{fr['target_s']}",
                ]
            ],
        ),
    ]


def chart(document: dict) -> list:
    fr = document["benchmarks"]["freshness"]

    def latency(ax) -> None:
        ax.plot([s["published_at_s"] for s in fr["series"]], [s["latency_s"] for s in fr["series"]], ".")
        ax.axhline(fr["target_s"], color="red", linestyle="--", label="target: 2 windows + 1 s")
        ax.set_xlabel("published at (s)")
        ax.set_ylabel("publish to visible (s)")
        ax.set_title(f"freshness: at {fr['rate_events_per_s']} events/s")
        ax.legend()

    return [latency]


BENCHMARK = Benchmark(
    name="freshness",
    title="Publish-to-visible latency under a steady publish rate",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
    chart=chart,
)
