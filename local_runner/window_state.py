"""Frees the local DirectRunner's per-key state of windows that have fired and expired.

Why: Beam's Python BundleBasedDirectRunner (what `upvotes stream` runs locally) evaluates the
streaming GroupByKey with `_StreamingGroupAlsoByWindowEvaluator`, whose GeneralTriggerDriver
keeps, for every (key, window) it has ever seen, an entry in the key's window-ID map (global
state `window_ids`) and a per-window state dict (`tombstone`, `index`,
`nonspeculative_index`, trigger state) after the window's final pane fired; nothing ever
garbage-collects them. With FixedWindows and 32 shard keys (transforms/windowing.py) that is
32 more entries per window, forever, and each key's state is deep-copied for every bundle
(DirectStepContext.get_keyed_state) and its window map scanned linearly on every timer: under
a sustained load the process's memory grows without bound and every bundle gets slower
(measured on bench/hot_post.py's soak: see docs/benchmarks.md).

What: `ExpiringGroupAlsoByWindowEvaluator` is Beam's evaluator, which first sweeps the
runner's committed keyed state when each bundle starts, before the bundle copies any of it:
from every key it drops each window whose end plus the allowed lateness is behind the input
watermark and that has no buffered elements and no timer left (its state, its timers and
its window-ID entry), then drops keys left with no state at all. Such a window can never
produce output again: Beam's trigger driver itself drops any element for it as expired (the
same `input_watermark > window.end + allowed_lateness` test), and without elements or timers
nothing fires it. So the state is bounded by the windows still open, per key (a window entry
per key, not one per key and window ever seen: docs/benchmarks.md, "Measurements behind the code"). The
window holding a key's highest window ID stays until all of the key's windows can go, so
no ID is reused; a timer firing the watermark manager hands out twice, once for a window
already dropped, is skipped (for a window still there Beam's tombstone makes it a no-op).

How it is installed: `TransformEvaluatorRegistry._test_evaluators_overrides`, a class-level
map Beam's registry applies over its own evaluators when a pipeline starts. It and every
other name used here (the evaluator, `_StreamingGroupAlsoByWindow`, the state's `state`,
`timers` and `global_state` dicts, `MergeableStateAdapter.WINDOW_IDS`) are private Beam
APIs with no compatibility guarantee: this module is written against, and tested on, the
installed apache-beam 2.77.0 (TESTED_BEAM_VERSION; tests/test_local_runner.py fails if
its behaviour changes). If the names are absent, `install()` logs a warning and installs
nothing (the pipeline then runs with Beam's own evaluator, growing as before). Only the
local DirectRunner uses it: local_runner/streaming.py installs it for that runner
only, never for Dataflow, which garbage-collects window state itself.
"""

from __future__ import annotations

import logging
import os
from typing import Any, cast

import apache_beam as beam

TESTED_BEAM_VERSION = "2.77.0"
# Set to "off" to run with Beam's own evaluator (for a same-run comparison of the soak).
DISABLE_ENV = "UPVOTES_DIRECT_RUNNER_CLEANUP"

_LOG = logging.getLogger(__name__)

try:  # private Beam names; see the module docstring
    from apache_beam.runners.direct.direct_runner import _StreamingGroupAlsoByWindow
    from apache_beam.runners.direct.transform_evaluator import (
        TransformEvaluatorRegistry,
        _StreamingGroupAlsoByWindowEvaluator,
    )
    from apache_beam.runners.direct.util import KeyedWorkItem
    from apache_beam.transforms.trigger import GeneralTriggerDriver, MergeableStateAdapter

    _WINDOW_IDS_TAG = MergeableStateAdapter.WINDOW_IDS.tag
    _ELEMENTS_TAG = GeneralTriggerDriver.ELEMENTS.tag
    _OVERRIDES = TransformEvaluatorRegistry._test_evaluators_overrides
    if not isinstance(_OVERRIDES, dict):
        raise AttributeError("TransformEvaluatorRegistry._test_evaluators_overrides is not a dict")
    _MISSING: str | None = None
except (ImportError, AttributeError) as error:  # pragma: no cover - depends on the Beam version
    _MISSING = f"{type(error).__name__}: {error}"
    _StreamingGroupAlsoByWindowEvaluator = object  # type: ignore[assignment,misc]


def clear_expired_windows(state: Any, input_watermark: Any, allowed_lateness: Any) -> int:
    """Drops, from one key's DirectRunner state (an InMemoryUnmergedState), every window
    whose end plus `allowed_lateness` is behind `input_watermark` and that has no buffered
    elements and no timer left; returns how many it dropped.

    The window holding the highest window ID is kept unless every window goes (then the key's
    state is empty and the caller drops the key): Beam's MergeableStateAdapter numbers new
    windows from the highest ID it finds, so keeping it means no ID is ever reused within a
    key's state."""
    window_ids = state.global_state.get(_WINDOW_IDS_TAG)
    if not window_ids:
        return 0
    expired = [
        window
        for window, ids in window_ids.items()
        if input_watermark > window.end + allowed_lateness
        and not any(state.timers.get(i) or (state.state.get(i) or {}).get(_ELEMENTS_TAG) for i in ids)
    ]
    if not expired:
        return 0
    expired_ids = {i for window in expired for i in window_ids[window]}
    everything = len(expired) == len(window_ids) and set(state.state).union(state.timers) <= expired_ids
    if not everything:
        latest = max(window_ids, key=lambda window: max(window_ids[window]))
        expired = [window for window in expired if window != latest]
    for window in expired:
        for i in window_ids.pop(window):
            state.state.pop(i, None)
            state.timers.pop(i, None)
    if not window_ids:
        del state.global_state[_WINDOW_IDS_TAG]
    return len(expired)


def is_empty(state: Any) -> bool:
    """Whether a key's state holds nothing: no window state, timer or global state."""
    return not state.state and not state.timers and not state.global_state


class ExpiringGroupAlsoByWindowEvaluator(_StreamingGroupAlsoByWindowEvaluator):
    """Beam's streaming GroupAlsoByWindow evaluator, which first frees the state of expired
    windows and of keys left with none (see the module docstring)."""

    _disabled = False  # set (once, with a warning) if Beam's private attributes are absent

    def start_bundle(self) -> None:
        super().start_bundle()
        if type(self)._disabled:
            return
        try:
            self._collect_garbage()
        except AttributeError as error:  # another Beam version: run as Beam's own evaluator
            type(self)._disabled = True
            _LOG.warning("apache-beam %s: DirectRunner window-state cleanup disabled (%s)", beam.__version__, error)

    def process_element(self, element) -> None:
        """Beam's, minus timer firings for windows this evaluator dropped. Beam's watermark
        manager may hand the same timer out again before its first firing is committed;
        for a window still in the state that firing is a no-op (its tombstone), but for a
        dropped one Beam's trigger driver would raise ValueError("No window for ...")."""
        kwi = element.value
        if kwi.timer_firings:
            state = self._step_context.get_keyed_state(kwi.encoded_key)
            known = {i for ids in (state.global_state.get(_WINDOW_IDS_TAG) or {}).values() for i in ids}
            firings = [firing for firing in kwi.timer_firings if firing.window in known]
            if len(firings) < len(kwi.timer_firings):
                element = element.with_value(
                    KeyedWorkItem(kwi.encoded_key, timer_firings=firings, elements=kwi.elements)
                )
        super().process_element(element)

    def _collect_garbage(self) -> None:
        """Sweeps every key's committed state before this bundle copies any of it. This
        transform runs one bundle at a time (Beam executes GroupAlsoByWindow serially) and the
        previous bundle's state is committed before the next starts; the lock is the one
        Beam's watermark manager holds while it scans the keyed states for timers. Dropping
        state no window can use again is idempotent, so a failed bundle loses nothing."""
        watermarks = self._evaluation_context._watermark_manager.get_watermarks(self._applied_ptransform)
        lock = getattr(watermarks, "_lock", None)
        if lock is None:
            return
        # Beam types an applied transform's as an Optional[PTransform]: this evaluator's is the
        # _StreamingGroupAlsoByWindow it is registered for, which has a windowing.
        transform = cast("_StreamingGroupAlsoByWindow", self._applied_ptransform.transform)
        allowed_lateness = transform.windowing.allowed_lateness
        keyed_states = self._step_context.existing_keyed_state
        with lock:
            input_watermark = watermarks._input_watermark
            for key, state in list(keyed_states.items()):
                if key is None:
                    continue
                if clear_expired_windows(state, input_watermark, allowed_lateness):
                    self.keyed_holds[key] = state.get_earliest_hold()
                if is_empty(state):
                    del keyed_states[key]
                    self.keyed_holds[key] = None  # Beam's hold() forgets the key's hold


def is_local_runner(runner: object) -> bool:
    """Whether `runner` (an options value: a name or a runner) is Beam's Python DirectRunner."""
    name = runner if isinstance(runner, str) else type(runner).__name__
    return (name or "").rsplit(".", 1)[-1] in ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def private_api_usable(what: str, missing: str | None, without_it: str) -> bool:
    """Whether `what`, a hook into Beam's private DirectRunner API, can be installed: not if
    its names are absent (`missing` says which; a warning says what happens `without_it`);
    on a Beam version it was not tested on, yes, with a warning."""
    if missing is not None:
        _LOG.warning(
            "apache-beam %s: not installing %s (written for %s; its private API is absent: %s); %s",
            beam.__version__,
            what,
            TESTED_BEAM_VERSION,
            missing,
            without_it,
        )
        return False
    if beam.__version__ != TESTED_BEAM_VERSION:
        _LOG.warning(
            "apache-beam %s: %s was written for %s (private Beam API); installing it anyway",
            beam.__version__,
            what,
            TESTED_BEAM_VERSION,
        )
    return True


def installed() -> bool:
    return _MISSING is None and _OVERRIDES.get(_StreamingGroupAlsoByWindow) is ExpiringGroupAlsoByWindowEvaluator


def install() -> bool:
    """Makes DirectRunner pipelines started from now on in this process use
    ExpiringGroupAlsoByWindowEvaluator. Returns whether it is installed; when Beam's private
    names are absent, logs a warning and installs nothing; if DISABLE_ENV is "off", only
    logs that."""
    if os.environ.get(DISABLE_ENV, "").lower() == "off":
        _LOG.warning("%s=off: the DirectRunner keeps every fired window's state", DISABLE_ENV)
        return False
    if not private_api_usable("the DirectRunner window-state cleanup", _MISSING, "local state grows per window"):
        return False
    _OVERRIDES[_StreamingGroupAlsoByWindow] = ExpiringGroupAlsoByWindowEvaluator
    _LOG.info("DirectRunner: the state of fired, expired windows is freed (local_runner/window_state.py)")
    return True


def uninstall() -> None:
    """Undoes install() (for tests comparing with Beam's own evaluator)."""
    if _MISSING is None and installed():
        del _OVERRIDES[_StreamingGroupAlsoByWindow]
