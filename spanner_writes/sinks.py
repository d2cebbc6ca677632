"""The sinks, each declared once: its step, the counters it keeps, the record of what it could never
write, how that record travels on the dead-letter topic, and how it is replayed.

A sink is a step of the streaming pipeline that writes to Spanner and dead-letters what it can
never write: the delta rows sink (WriteDeltaRows, transforms/spanner_sink.py) and the vote-state
sink (ApplyVoteStates, transforms/vote_state_sink.py). The modules that handle every sink read
SINKS instead of naming each one: the buffered sinks' counters (transforms/buffered_sink.py), the
pipeline's wiring of the dead letters (pipeline/streaming.py), the dead-letter messages
(transforms/dead_letter.py), the drain report (local_runner/drain.py) and `upvotes dead-letters`
(upvotes/operations/dead_letters.py, upvotes/commands/dead_letters.py). The names, the messages
and the replay's output are a documented interface (docs/contract.md, templates/README.md): a
Dataflow update matches steps by name, the alerts and the drain read the counters, a dead letter
published by an earlier version must still replay, and scripts read the replay's report.

The parse's rejections are no sink's: a rejected message is dead-lettered with the bytes and
attributes it came with, and replaced by its correction, never re-written
(upvotes/operations/dead_letters.py).

Beam-free and light to import: the drain reads this module before `upvotes stream` imports Beam,
so that a Ctrl-C in those seconds finds its handler (local_runner/drain.py); the replays import the
Spanner client when they run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from schemas.contract import ERROR_ATTRIBUTE, KIND_ATTRIBUTE
from schemas.records import FailedDelta, FailedVoteStates, PostDelta

if TYPE_CHECKING:
    from google.cloud.spanner_v1.database import Database


class FailedRecord(Protocol):
    """What a sink could never write, with why: "<its declared reason>: <detail>"."""

    @property
    def error(self) -> str: ...


Failed = TypeVar("Failed", bound=FailedRecord)


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
class DeadLetterCodec(Generic[Failed]):
    """How a sink's failed record travels on the dead-letter topic, and back: the record's JSON is
    the message's data, the attribute `kind` names the sink and `error` gives the reason
    (transforms/dead_letter.py then keeps the message within Pub/Sub's limits)."""

    kind: str  # the `kind` attribute of the sink's dead letters
    to_json: Callable[[Failed], object]  # the record but its error, as JSON
    from_json: Callable[[Any, str], Failed]  # to_json's inverse (of json.loads' answer), given the error back

    def encode(self, failed: Failed) -> tuple[bytes, dict[str, str]]:
        """The dead letter's data and attributes."""
        return (
            json.dumps(self.to_json(failed)).encode("utf-8"),
            {KIND_ATTRIBUTE: self.kind, ERROR_ATTRIBUTE: failed.error},
        )

    def decode(self, data: bytes, attributes: Mapping[str, str]) -> Failed:
        """The failed record of a dead letter `encode` made, exactly as the sink failed to write it."""
        return self.from_json(json.loads(data), attributes.get(ERROR_ATTRIBUTE, ""))


@dataclass(frozen=True)
class SinkReplay(Generic[Failed]):
    """How `upvotes dead-letters replay` re-drives a sink's dead letter: through the sink's own
    idempotent path, so that a rerun, or a letter redelivered, writes nothing twice."""

    write: Callable[[Database, Failed], tuple[int, int]]  # with retries: (written now, found written before)
    counted_as: tuple[str, str]  # the replay report's fields for those two counts
    action: str  # what `--dry-run` says it would do with the record
    described: Callable[[Failed], dict]  # what `--dry-run` prints of the record


@dataclass(frozen=True)
class SinkDeclaration(Generic[Failed]):
    """One sink, declared once (see the module docstring)."""

    step: str  # its label in the streaming pipeline, and its counters' namespace
    metrics: SinkMetrics
    reason: str  # what its dead letters' errors start with ("<reason>: <detail>")
    failed: type[Failed]  # the record of what it could never write, which its `failed` output holds
    codec: DeadLetterCodec[Failed]
    replay: SinkReplay[Failed]


def _rewrite_delta(database: Database, failed: FailedDelta) -> tuple[int, int]:
    from spanner_store.database import run_with_retries  # the Spanner client: see the module docstring
    from spanner_writes.deltas import write_new_deltas

    # Its key is the one the pipeline gave it: a second write finds it and writes nothing.
    result = run_with_retries(lambda: write_new_deltas(database, [failed.delta]))
    return result.written, result.already_written


def _apply_states(database: Database, failed: FailedVoteStates) -> tuple[int, int]:
    from spanner_writes.votes import apply_all_vote_states  # the Spanner client: see the module docstring

    # Each is applied against the stored state: a second application moves nothing.
    totals = apply_all_vote_states(database, dict(failed.states))
    return totals.applied, totals.superseded


DELTA_ROWS: SinkDeclaration[FailedDelta] = SinkDeclaration(
    step="WriteDeltaRows",
    metrics=SinkMetrics(dead_lettered="rows_dead_lettered", delta_rows_written="rows_written"),
    reason="spanner_write_failed",
    failed=FailedDelta,
    codec=DeadLetterCodec(
        kind="delta_row",
        to_json=lambda failed: failed.delta.to_json(),
        from_json=lambda delta, error: FailedDelta(PostDelta.from_json(delta), error),
    ),
    replay=SinkReplay(
        write=_rewrite_delta,
        counted_as=("deltas_written", "deltas_already_written"),
        action="rewrite_delta",
        described=lambda failed: {"delta": failed.delta.to_json()},
    ),
)
VOTE_STATES: SinkDeclaration[FailedVoteStates] = SinkDeclaration(
    step="ApplyVoteStates",
    metrics=SinkMetrics(dead_lettered="states_dead_lettered", delta_rows_written="delta_rows_written"),
    reason="spanner_apply_failed",
    failed=FailedVoteStates,
    codec=DeadLetterCodec(
        kind="vote_states",
        to_json=FailedVoteStates.states_json,
        from_json=lambda states, error: FailedVoteStates(
            tuple(FailedVoteStates.states_from_json(states).items()), error
        ),
    ),
    replay=SinkReplay(
        write=_apply_states,
        counted_as=("states_applied", "states_already_applied"),
        action="apply_vote_states",
        described=lambda failed: {"states": len(failed.states)},
    ),
)
# In this order the pipeline hands their dead letters to PublishDeadLetters, whose steps are
# labelled by position (a sink is added at the end, or an in-place update finds other steps), and
# the replay re-drives them and reports its counts.
SINKS: tuple[SinkDeclaration, ...] = (DELTA_ROWS, VOTE_STATES)
_BY_FAILED = {sink.failed: sink for sink in SINKS}
_BY_KIND = {sink.codec.kind: sink for sink in SINKS}
if any(
    len(set(names)) < len(names)
    for names in (
        [sink.step for sink in SINKS],
        [sink.failed for sink in SINKS],
        [sink.codec.kind for sink in SINKS],
        [name for sink in SINKS for name in sink.replay.counted_as],
    )
):
    raise TypeError("two sinks declare the same step, failed record, dead-letter kind or replay count")


def sink_of(failed: FailedRecord) -> SinkDeclaration:
    """The sink whose failed record this is."""
    return _BY_FAILED[type(failed)]


def sink_of_kind(kind: str | None) -> SinkDeclaration | None:
    """The sink whose dead letters carry this `kind` attribute; None: no sink's (a rejected message)."""
    return None if kind is None else _BY_KIND.get(kind)
