"""In-memory sources and sinks for pipelines on the in-process FnApiRunner.

Feeding `beam.Create` a big list costs about 170 us per element (it pickles and
compresses the list), so pipelines here start with `Impulse` and a `FlatMap` over one of
these module-level feeds. Beam pickles these functions by reference (module and name),
and the FnApiRunner runs them in this process, so they see the lists set here. Only one
pipeline runs at a time in a benchmark process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from bench.measure import current_rss_mib

_FEED: list[Any] = []
_REPEAT = {"total": 0, "sample_every": 0}
_COLLECTED: list[Any] = []
RSS_SAMPLES: list[tuple[int, float]] = []  # (elements emitted so far, RSS MiB)


def set_feed(elements: list[Any]) -> None:
    """The elements `emit_feed` yields, in order."""
    _FEED[:] = elements


def set_cycled_feed(pool: list[Any], total: int, samples: int) -> None:
    """`emit_cycled` yields `total` elements cycling through `pool`, sampling RSS `samples` times."""
    _FEED[:] = pool
    _REPEAT.update(total=total, sample_every=max(1, total // samples))
    RSS_SAMPLES.clear()


def emit_feed(_: bytes) -> list[Any]:
    return _FEED


def emit_slice(bounds: tuple[int, int]) -> list[Any]:
    """The feed's elements from `start` to `stop` (set_feed): a stream of these bounds, one per
    bundle, reads the feed in bundles of that size."""
    start, stop = bounds
    return _FEED[start:stop]


def emit_cycled(_: bytes) -> Iterator[Any]:
    """Yields lazily, so nothing but the pool is held: memory reflects the pipeline alone."""
    pool, total, every = _FEED, _REPEAT["total"], _REPEAT["sample_every"]
    size = len(pool)
    for index in range(total):
        if index and index % every == 0:
            RSS_SAMPLES.append((index, current_rss_mib()))
        yield pool[index % size]
    RSS_SAMPLES.append((total, current_rss_mib()))


def collect(element: Any) -> None:
    _COLLECTED.append(element)


def take_collected() -> list[Any]:
    """What `collect` received since the last call, and forgets it."""
    taken = list(_COLLECTED)
    _COLLECTED.clear()
    return taken


def local_pipeline() -> beam.Pipeline:
    """A batch pipeline on the FnApiRunner, what the DirectRunner runs batch pipelines on
    (it would first try to download the Prism runner, which fails offline)."""
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions([]))


def counter_values(result, namespace: str) -> dict[str, int]:
    """A finished pipeline's committed counters in one metrics namespace."""
    return {
        c.key.metric.name: c.committed or 0
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == namespace
    }
