"""The sinks, each declared once: its step, the counters it keeps and the reason its dead letters give.

A sink is a step of the streaming pipeline that writes to Spanner and dead-letters what it can
never write: the delta rows sink (WriteDeltaRows, transforms/spanner_sink.py) and the vote-state
sink (ApplyVoteStates, transforms/vote_state_sink.py). The modules that handle every sink read
SINKS instead of naming each one: the buffered sinks' counters (transforms/buffered_sink.py) and
the drain report (local_runner/drain.py). The names are a documented interface (docs/contract.md,
templates/README.md): a Dataflow update matches steps by name, and the alerts and the drain read
the counters.

Beam-free and light to import: the drain reads this module before `upvotes stream` imports Beam,
so that a Ctrl-C in those seconds finds its handler (local_runner/drain.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SinkMetrics:
    """The names of the counters a sink keeps, in its step's namespace, that other modules read:
    the buffered sinks' skeleton keeps all but `delta_rows_written` (transforms/buffered_sink.py
    SinkCounters), the drain report sums them over the sinks, the alerts watch some
    (templates/monitoring). A counter that nothing but its sink reads (WriteDeltaRows/
    rows_already_written, ApplyVoteStates/states_applied) is named beside it, in the same namespace."""

    dead_lettered: str  # the items (rows, vote states) of the batches dead-lettered
    delta_rows_written: str  # the delta rows it committed
    commits: str = "commits"  # batches applied
    transient_retries: str = "transient_retries"
    schema_waits: str = "schema_waits"  # waits for a migration
    events_written: str = "events_written"  # the events the applied batches stand for
    events_dead_lettered: str = "events_dead_lettered"  # the events the dead-lettered batches stand for


@dataclass(frozen=True)
class SinkDeclaration:
    """One sink, declared once (see the module docstring)."""

    step: str  # its label in the streaming pipeline, and its counters' namespace
    metrics: SinkMetrics
    reason: str  # what its dead letters' errors start with ("<reason>: <detail>")


DELTA_ROWS = SinkDeclaration(
    step="WriteDeltaRows",
    metrics=SinkMetrics(dead_lettered="rows_dead_lettered", delta_rows_written="rows_written"),
    reason="spanner_write_failed",
)
VOTE_STATES = SinkDeclaration(
    step="ApplyVoteStates",
    metrics=SinkMetrics(dead_lettered="states_dead_lettered", delta_rows_written="delta_rows_written"),
    reason="spanner_apply_failed",
)
SINKS: tuple[SinkDeclaration, ...] = (DELTA_ROWS, VOTE_STATES)

if len({sink.step for sink in SINKS}) < len(SINKS):
    raise TypeError("two sinks declare the same step: their counters would add up in one namespace")
