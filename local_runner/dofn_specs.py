"""Beam's look at each DoFn's state and timer specs, done once per DoFn class (or per instance, for
a DoFn holding a bound method) instead of on every call.

Why: Beam's `apache_beam.transforms.userstate.get_dofn_specs` walks every attribute of the DoFn
(`dir`) and inspects the signature of every method, and Beam calls it over and over:
- the local BundleBasedDirectRunner builds a DoFnRunner for every bundle of every ParDo, calling it
  three times on the way (`is_stateful_dofn` in the evaluator and in `DoFnSignature`, and
  `validate_stateful_dofn`), on a fresh copy of the DoFn each time: on single-vote messages, where
  the stream runs many small bundles, a tenth of the stream's worker thread;
- translating a pipeline's graph calls it about 1,300 times for one fold pipeline, most of the
  run's time on an empty database (both: docs/benchmarks.md, "Measurements behind the code").
The answer never changes: the specs are the defaults of the parameters of the DoFn's bound methods,
the same for every instance of a class, unless an instance holds bound methods of its own. Beam
looks only at bound methods (`types.MethodType`), so a DoFn built around a plain function
(`beam.Map(lambda ...)`: `CallableWrapperDoFn`, whose `process` is the function itself) has the
specs of its class; the DirectRunner unpickles a fresh one for every bundle processor, so a cache
per instance would miss every time. A DoFn that holds a bound method (built around one) is cached
per instance, weakly held.

What: `install()` puts `cached_dofn_specs` in place of Beam's function, in `userstate` and in the
DirectRunner's evaluator module, which imports it by name; `uninstall()` restores Beam's. Installed
with the other caches by local_runner/streaming.py's `install_beam_caches`, for the local
DirectRunner and the tests, never on Dataflow.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

from apache_beam.runners.direct import transform_evaluator
from apache_beam.transforms import userstate

Specs = tuple[set, set]  # (state specs, timer specs)

_BEAMS = userstate.get_dofn_specs
_BY_CLASS: dict[type, Specs] = {}
_BY_INSTANCE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(dofn: Any) -> Specs:
    if not any(isinstance(value, types.MethodType) for value in getattr(dofn, "__dict__", {}).values()):
        specs = _BY_CLASS.get(type(dofn))
        if specs is None:
            specs = _BY_CLASS[type(dofn)] = _BEAMS(dofn)
        return specs
    try:
        return _BY_INSTANCE[dofn]
    except KeyError:
        specs = _BY_INSTANCE[dofn] = _BEAMS(dofn)
        return specs


def cached_dofn_specs(dofn: Any) -> Specs:
    """userstate.get_dofn_specs(dofn), computed once per DoFn class (per instance for one holding a
    bound method)."""
    state_specs, timer_specs = _cached(dofn)
    return set(state_specs), set(timer_specs)  # callers may change the sets they are given


def install() -> None:
    userstate.get_dofn_specs = cached_dofn_specs
    transform_evaluator.get_dofn_specs = cached_dofn_specs


def uninstall() -> None:
    """Undoes install()."""
    userstate.get_dofn_specs = transform_evaluator.get_dofn_specs = _BEAMS
    _BY_CLASS.clear()
    _BY_INSTANCE.clear()


def installed() -> bool:
    return userstate.get_dofn_specs is cached_dofn_specs
