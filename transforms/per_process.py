"""PerProcess: what a DoFn builds in setup() once per process, kept across the DoFn's copies.

Why: Beam's DirectRunner round-trips a DoFn through pickle and calls setup() and teardown() for
every bundle (`_ParDoEvaluator.start_bundle` in apache_beam/runners/direct/transform_evaluator.py),
so what setup() builds lasts one bundle there. The sinks' Spanner client, channel and session, and
their KnownPosts, were rebuilt for every bundle, so every commit upserted every parent Posts row
again (several times the commit's time on the emulator: docs/benchmarks.md, "Measurements behind the code"; in the
race, each window's last commits waited on them). Dataflow keeps a DoFn
instance across bundles, so there it only shares the client and KnownPosts among a worker's
threads, as the Spanner client recommends (one client per process; both are thread-safe).

Why not Beam's `apache_beam.utils.shared.Shared`: it holds weak references and keeps one object
alive per process, so the pipeline's two sinks would evict each other's between bundles. This
keeps strong references, to the objects of the MAX_KEPT most recently used handles.

A handle's key is made when the DoFn is constructed and pickled with it, so every copy of one
DoFn shares one object, and another pipeline (another construction) builds its own.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Enough for the DoFns of a few pipelines run one after another in one process (tests, benchmarks);
# the least recently used object beyond it is dropped (its next use builds it again).
MAX_KEPT = 16

_LOCK = threading.Lock()
_KEPT: OrderedDict[str, object] = OrderedDict()


class PerProcess(Generic[T]):
    """A handle on one T per process, built by the first `get` of any copy of the DoFn holding it."""

    def __init__(self) -> None:
        self._key = uuid.uuid4().hex

    def get(self, build: Callable[[], T]) -> T:
        """The object of this handle in this process, built by `build()` the first time."""
        with _LOCK:
            kept = _KEPT.get(self._key)
            if kept is None:
                kept = _KEPT[self._key] = build()
                while len(_KEPT) > MAX_KEPT:
                    _KEPT.popitem(last=False)
            else:
                _KEPT.move_to_end(self._key)
            return kept  # type: ignore[return-value]
