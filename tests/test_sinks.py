"""spanner_writes/sinks.py: every sink declared once, and what reads the declarations: each test
iterates the registry, so that a sink added to it is held to the same checks. No emulator."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from local_runner import drain
from spanner_writes.sinks import DELTA_ROWS, SINKS, VOTE_STATES
from transforms.buffered_sink import SinkCounters

REPO = Path(__file__).resolve().parents[1]
# The modules that handle every sink: they read the registry and name none.
READERS = ("local_runner/drain.py",)


def test_the_declared_names_are_the_documented_ones() -> None:
    """Step and counter names are an interface (docs/contract.md, templates/README.md, the alerts):
    a Dataflow update matches steps by name."""
    assert [(sink.step, sink.reason) for sink in SINKS] == [
        ("WriteDeltaRows", "spanner_write_failed"), ("ApplyVoteStates", "spanner_apply_failed")]
    assert (DELTA_ROWS.metrics.dead_lettered, DELTA_ROWS.metrics.delta_rows_written) == (
        "rows_dead_lettered", "rows_written")
    assert (VOTE_STATES.metrics.dead_lettered, VOTE_STATES.metrics.delta_rows_written) == (
        "states_dead_lettered", "delta_rows_written")


@pytest.mark.parametrize("sink", SINKS, ids=lambda sink: sink.step)
def test_a_sinks_counters_are_named_as_it_declares_in_its_steps_namespace(sink) -> None:
    counters = SinkCounters.of(sink)
    names = sink.metrics
    assert {field: (counter.metric_name.namespace, counter.metric_name.name)
            for field, counter in counters._asdict().items()} == {
        "commits": (sink.step, names.commits), "transient_retries": (sink.step, names.transient_retries),
        "schema_waits": (sink.step, names.schema_waits), "dead_lettered": (sink.step, names.dead_lettered),
        "events_written": (sink.step, names.events_written),
        "events_dead_lettered": (sink.step, names.events_dead_lettered)}


def test_the_drain_report_sums_each_counter_over_every_declared_sink() -> None:
    counters = {("ParseVotes", "rejected_not_json"): 1}
    for weight, sink in enumerate(SINKS, 1):
        names = sink.metrics
        counters |= {(sink.step, names.events_written): 1000 * weight,
                     (sink.step, names.events_dead_lettered): 100 * weight,
                     (sink.step, names.delta_rows_written): 10 * weight, (sink.step, names.dead_lettered): weight}
    total = sum(range(1, len(SINKS) + 1))
    progress = drain.progress_of(SimpleNamespace(counters=lambda: counters, messages=0), None)
    assert (progress.votes_written, progress.votes_dead_lettered, progress.delta_rows, progress.dead_letters) == (
        1000 * total, 100 * total, 10 * total, total + 1)


@pytest.mark.parametrize("reader", READERS)
def test_the_modules_that_handle_every_sink_name_none(reader: str) -> None:
    source = (REPO / reader).read_text(encoding="utf-8")
    for sink in SINKS:
        assert f'"{sink.step}"' not in source and f'"{sink.metrics.dead_lettered}"' not in source
