"""local_runner/window_state.py: the DirectRunner's streaming GroupAlsoByWindow state stays bounded
by the open windows while fixed windows advance, and the sums stay exact.

Each pipeline is the shape of transforms/windowing.py (FixedWindows, AfterWatermark,
DISCARDING, a combine per key) on the BundleBasedDirectRunner, driven by a TestStream
across many windows; afterwards the runner's keyed state of the GroupAlsoByWindow step is
counted (what grew in Beam's evaluator: each key's window-ID map and per-window state).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import DirectPipelineResult, _StreamingGroupAlsoByWindow
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

from local_runner import window_state

WINDOW_S = 10
KEYS = 8
_OUTPUT: list = []  # what run_windows' pipeline emitted


def _collect(element) -> None:
    _OUTPUT.append(element)


@pytest.fixture
def cleanup() -> Iterator[None]:
    assert window_state.install()
    try:
        yield
    finally:
        window_state.uninstall()


@pytest.fixture
def beam_own() -> Iterator[None]:
    was = window_state.installed()
    window_state.uninstall()
    try:
        yield
    finally:
        if was:
            window_state.install()


def _values(key: int, w: int) -> list[int]:
    return list(range(1, 1 + (key + w) % 4))  # 0 to 3 values: some keys skip some windows


def run_windows(windows: int, moving_keys: bool = False) -> dict[str, int]:
    """Runs `windows` fixed windows of sums per key; asserts each window's sums exactly and
    returns what the GroupAlsoByWindow step's keyed state holds at the end. With
    `moving_keys`, each window has keys of its own (none ever comes back)."""

    def key_of(key: int, w: int) -> int:
        return key + (w * KEYS if moving_keys else 0)

    stream = TestStream()
    expected = []
    for w in range(windows):
        elements = []
        for key in range(KEYS):
            values = _values(key, w)
            elements += [
                window.TimestampedValue((key_of(key, w), v), w * WINDOW_S + 1 + i) for i, v in enumerate(values)
            ]
            if values:
                expected.append((key_of(key, w), w, sum(values)))
        # In two bundles, so that a window's elements wait in its state across bundles.
        stream.add_elements(elements[::2])
        stream.advance_watermark_to(w * WINDOW_S + 5)
        stream.add_elements(elements[1::2])
        stream.advance_watermark_to(w * WINDOW_S + WINDOW_S + 1)
    stream.advance_watermark_to_infinity()

    options = PipelineOptions([], runner="BundleBasedDirectRunner")
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    sums = (
        pipeline
        | stream
        | beam.WindowInto(
            window.FixedWindows(WINDOW_S),
            trigger=trigger.AfterWatermark(),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | "Sum" >> beam.CombinePerKey(sum)
        | beam.Map(lambda kv, win=beam.DoFn.WindowParam: (kv[0], int(win.start) // WINDOW_S, kv[1]))
    )
    assert_that(sums, equal_to(expected))
    # assert_that passes silently if its own (also overridden) GroupByKey never fires, so the
    # output is also collected here: the BundleBasedDirectRunner runs in this process.
    _OUTPUT.clear()
    sums | beam.Map(_collect)
    result = pipeline.run()
    result.wait_until_finish()
    assert sorted(_OUTPUT) == sorted(expected)

    assert isinstance(result, DirectPipelineResult)
    [keyed] = [
        states
        for applied, states in result._evaluation_context._transform_keyed_states.items()
        if isinstance(applied.transform, _StreamingGroupAlsoByWindow) and applied.full_label.startswith("Sum/")
    ]
    states = [state for key, state in keyed.items() if key is not None]
    return {
        "keys": len(states),
        "windows": sum(len(state.global_state.get("window_ids", {})) for state in states),
        "window_states": sum(len(state.state) for state in states),
        "timers": sum(len(state.timers) for state in states),
    }


def test_beam_own_evaluator_keeps_every_fired_window(beam_own):
    """What the override is for (if Beam ever frees this itself, the override can go)."""
    short, long = run_windows(5), run_windows(25)
    assert long["windows"] > short["windows"] * 4
    assert long["window_states"] > short["window_states"] * 4


def test_state_of_fired_expired_windows_is_freed(cleanup):
    short, long = run_windows(5), run_windows(25)
    # At most the last window (fired at the final watermark, no bundle after it) per key.
    assert long["windows"] <= KEYS and long["window_states"] <= KEYS, long
    assert long == short
    assert long["timers"] == 0


def test_keys_with_no_state_left_are_dropped(cleanup):
    state = run_windows(20, moving_keys=True)
    # Only the keys of the last window or two (those no later bundle has swept) remain,
    # of the 160 keys seen.
    assert state["keys"] <= 2 * KEYS, state
    assert state["windows"] <= 2 * KEYS, state


def test_clear_expired_windows_keeps_what_may_still_fire():
    from apache_beam.transforms.trigger import InMemoryUnmergedState, MergeableStateAdapter
    from apache_beam.utils.timestamp import Duration, Timestamp

    fired, pending, buffered, open_ = (window.IntervalWindow(s, s + 10) for s in (0, 10, 20, 100))
    state = InMemoryUnmergedState()
    state.set_global_state(MergeableStateAdapter.WINDOW_IDS, {fired: [1], pending: [2], buffered: [3], open_: [4]})
    state.state[1]["tombstone"].append(1)
    state.timers[2][("trigger", "WATERMARK", "")] = Timestamp(20)
    state.state[3]["elements"].append("v")
    state.state[4]["elements"].append("v")

    # Not expired while its end plus the allowed lateness is not behind the watermark.
    assert window_state.clear_expired_windows(state, Timestamp(50), Duration(45)) == 0
    assert window_state.clear_expired_windows(state, Timestamp(10), Duration(0)) == 0
    assert window_state.clear_expired_windows(state, Timestamp(50), Duration(0)) == 1
    assert set(state.global_state["window_ids"]) == {pending, buffered, open_}
    assert 1 not in state.state and {2, 3, 4} <= set(state.state) | set(state.timers)


def test_clear_expired_windows_never_lets_a_window_id_be_reused():
    """Beam numbers a key's new windows from the highest ID in its state: that window stays
    until every window of the key can go, and then the whole key's state goes."""
    from apache_beam.transforms.trigger import InMemoryUnmergedState, MergeableStateAdapter
    from apache_beam.utils.timestamp import Duration, Timestamp

    first, second, latest = (window.IntervalWindow(s, s + 10) for s in (0, 10, 20))
    state = InMemoryUnmergedState()
    state.set_global_state(MergeableStateAdapter.WINDOW_IDS, {first: [1], latest: [7], second: [3]})
    for i in (1, 3, 7):
        state.state[i]["tombstone"].append(1)
    state.state[3]["elements"].append("v")  # the second window may still fire

    assert window_state.clear_expired_windows(state, Timestamp(100), Duration(0)) == 1
    assert set(state.global_state["window_ids"]) == {second, latest}

    state.state[3].pop("elements")
    assert window_state.clear_expired_windows(state, Timestamp(100), Duration(0)) == 2
    assert window_state.is_empty(state)


def test_install_falls_back_without_beams_private_api(monkeypatch, caplog, beam_own):
    monkeypatch.setattr(window_state, "_MISSING", "AttributeError: gone")
    with caplog.at_level(logging.WARNING, logger=window_state.__name__):
        assert window_state.install() is False
    assert "not installing" in caplog.text
    monkeypatch.undo()
    assert not window_state.installed()


def test_only_the_local_runner_gets_it():
    assert window_state.is_local_runner("BundleBasedDirectRunner")
    assert window_state.is_local_runner("DirectRunner")
    assert not window_state.is_local_runner("DataflowRunner")
    assert not window_state.is_local_runner(None)
