"""The local streaming DirectRunner's user counters, read where they really are.

Why: in Beam 2.77 the BundleBasedDirectRunner loses every user metric update of a step after
that step's first bundle. Its `TransformExecutor.call` makes a new MetricsContainer per bundle
and asks the worker thread's StateSampler for the step's scoped states with it, but the
sampler caches scoped states by step and state name (`StateSampler._states_by_name`), so from
the second bundle on the step's code updates the *first* bundle's container, which was
committed when that bundle ended, and the fresh container committed each time is empty
(measured: 3,000 messages through a counting DoFn in three bundles, `result.metrics()`
committed 1,000). A batch pipeline, one bundle per step, does not show it; a stream does.

What: the first container of each step is therefore the one that holds every update ever
made by the step's code. `counters(sampler)` sums, per (namespace, name), the counters of the
distinct containers the worker's sampler has cached. local_runner/pubsub_reader.py hands over the
worker's sampler (it runs on the worker thread); local_runner/drain.py reports from it.

`StateSampler._states_by_name` and `ScopedState.metrics_container` are private Beam names
(tested on local_runner/window_state.py's TESTED_BEAM_VERSION by tests/test_local_reader.py,
which fails if Beam's metrics start to add up, or the names go). Without them, `counters`
returns None and the caller falls back to `result.metrics()`.
"""

from __future__ import annotations

from typing import Any

CounterTotals = dict[tuple[str, str], int]


def counters(sampler: Any) -> CounterTotals | None:
    """Every user counter of the steps run on `sampler`'s worker thread, by (namespace, name);
    None if the sampler does not keep its scoped states where Beam 2.77 does."""
    states = getattr(sampler, "_states_by_name", None)
    if not isinstance(states, dict):
        return None
    for _ in range(5):  # the worker thread may add a step's states or cells while this reads
        try:
            return _totals(list(states.values()))
        except RuntimeError:
            continue
    return None


def _totals(scoped_states: list) -> CounterTotals:
    containers = {id(c): c for c in (getattr(s, "metrics_container", None) for s in scoped_states) if c is not None}
    totals: CounterTotals = {}
    for container in containers.values():
        for key, value in container.get_cumulative().counters.items():
            name = (key.metric.namespace, key.metric.name)
            totals[name] = totals.get(name, 0) + value
    return totals
