"""Beam's look at each DoFn's state and timer specs, done once per DoFn class (or per instance, for
DoFns built around a callable) instead of on every call.

Why: Beam's `apache_beam.transforms.userstate.get_dofn_specs` walks every attribute of the DoFn
(`dir`) and inspects the signature of every method, and Beam calls it over and over:
- the local BundleBasedDirectRunner builds a DoFnRunner for every bundle of every ParDo, calling it
  three times on the way (`is_stateful_dofn` in the evaluator and in `DoFnSignature`, and
  `validate_stateful_dofn`), on a fresh copy of the DoFn each time: on single-vote messages, where
  the stream runs many small bundles, a tenth of the stream's worker thread;
- translating a pipeline's graph calls it about 1,300 times for one fold pipeline, most of the
  run's time on an empty database (both: docs/benchmarks.md, "Measurements behind the code").
The answer never changes: the specs are the defaults of the methods' parameters, the same for
every instance of a DoFn class. The DoFns Beam builds around a callable (`beam.Map`, `FlatMap`,
`Filter`: CallableWrapperDoFn) take their `process` parameters from the callable, which differs
per instance: those are cached per instance, weakly held.

What: `install()` puts `cached_dofn_specs` in place of Beam's function, in `userstate` and in the
DirectRunner's evaluator module, which imports it by name; `uninstall()` restores Beam's. Installed
for the local DirectRunner (local_runner/streaming.py) and by the tests (tests/conftest.py), never
on Dataflow.
"""

from __future__ import annotations

import weakref
from typing import Any

from apache_beam.runners.direct import transform_evaluator
from apache_beam.transforms import core, userstate

Specs = tuple[set, set]  # (state specs, timer specs)

_BEAMS = userstate.get_dofn_specs
_BY_CLASS: dict[type, Specs] = {}
_BY_CALLABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(dofn: Any) -> Specs:
    if not isinstance(dofn, core.CallableWrapperDoFn):
        specs = _BY_CLASS.get(type(dofn))
        if specs is None:
            specs = _BY_CLASS[type(dofn)] = _BEAMS(dofn)
        return specs
    try:
        return _BY_CALLABLE[dofn]
    except KeyError:
        specs = _BY_CALLABLE[dofn] = _BEAMS(dofn)
        return specs


def cached_dofn_specs(dofn: Any) -> Specs:
    """userstate.get_dofn_specs(dofn), computed once per DoFn class (per instance for callables)."""
    state_specs, timer_specs = _cached(dofn)
    return set(state_specs), set(timer_specs)  # callers may change the sets they are given


def install() -> None:
    userstate.get_dofn_specs = cached_dofn_specs
    transform_evaluator.get_dofn_specs = cached_dofn_specs


def uninstall() -> None:
    """Undoes install()."""
    userstate.get_dofn_specs = transform_evaluator.get_dofn_specs = _BEAMS
    _BY_CLASS.clear()
    _BY_CALLABLE.clear()


def installed() -> bool:
    return userstate.get_dofn_specs is cached_dofn_specs
