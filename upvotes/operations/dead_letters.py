"""The dead-letter topic's kept subscription: reading it without consuming it, and re-driving it.

Two sorts of dead letter share the topic (transforms/dead_letter.py writes them):

- what a sink could never write, as the sink's codec encodes it (spanner_writes/sinks.py, which
  declares every sink): JSON, with the sink's `kind` attribute (kind=delta_row: a PostDelta;
  kind=vote_states: a list of vote states);
- a rejected vote: the original bytes and attributes (a line of a batch message: the line alone,
  with its 1-based number in the `line` attribute), plus an `error` attribute.

All carry `error` = "<reason>: <detail>". Messages are pulled synchronously and held (not
acknowledged) while they are looked at, their ack deadlines extended for as long as a replay
holds them (`HeldLetters`); `release` hands them back at once (ack deadline 0), `acknowledge`
removes them. A replay acknowledges a dead letter only after its replay succeeded, and every
replay writes through the pipeline's own idempotent paths, so a replay that is run again, killed
between a write and its acknowledgement, or handed a letter redelivered after its deadline counts
each vote once:

- a sink's failed record is re-written by the replay its sink declares, through the sink's own
  path (a delta row keeps the key the pipeline gave it, so a second write finds it and writes
  nothing; each vote state is applied against the stored state, so a second application moves
  nothing);
- a rejected vote is replaced by its corrected line from a JSON-lines file, matched by the
  rejected line's own identity (`DeadLetter.identity`: the line's event_id, or "@<message
  ID>/<line>" for a line with none, which the correction then carries as its event_id). It is
  read as the stream reads a vote, under the stream's event-time policy, at the dead letter's
  publish time (`CorrectedLine.parsed`). A corrected delta event becomes one delta row
  ("@replay/<identity>"); a corrected vote-state event is applied through the vote-state sink's
  path. Either is written with a marker keyed by the identity alone, holding the correction's
  canonical text, in the same commit (upvotes/operations/replayed_corrections.py): a rerun whose correction equals
  the one written acknowledges its dead letter and writes nothing; one that differs (edited between
  a killed run and its rerun) is refused with both versions, its dead letter kept. Nothing is
  published to the votes topic, so no Pub/Sub or Dataflow deduplication (`id_label`) can drop a
  correction after its dead letter was acknowledged.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from google.api_core import exceptions

from schemas.contract import (
    DEFAULT_EVENT_TIME_POLICY,
    ERROR_ATTRIBUTE,
    EVENT_ID_ATTRIBUTE,
    KIND_ATTRIBUTE,
    LINE_ATTRIBUTE,
    EventTimePolicy,
    parse_vote,
)
from schemas.counters import NAME_OF, VOTER_CONTRACT_NAMES, Counts
from schemas.delta_ids import replay_delta_id
from schemas.records import CounterSums, PostDelta, PostUser, VoteEvent, VoteState
from schemas.vote_states import LatestVote
from schemas.voter_sketch import sketch_of
from spanner_writes.sinks import SINKS, FailedRecord, SinkDeclaration, sink_of_kind
from upvotes.operations.replayed_corrections import CorrectionMarker, apply_corrected_states, write_corrected_delta

LOG = logging.getLogger(__name__)
REJECTED_VOTE = "rejected_vote"
PULL_BATCH = 100
# A synchronous pull on an empty subscription waits for its whole deadline (the emulator and
# the service alike), so an empty pull costs this long; it ends the reading.
EMPTY_PULL_WAIT_S = 2.0


@dataclass(frozen=True)
class DeadLetter:
    ack_id: str
    message_id: str
    data: bytes
    attributes: dict[str, str]
    publish_time_s: float = 0.0  # when the pipeline dead-lettered it: the same on every delivery

    @property
    def sink(self) -> SinkDeclaration | None:
        """The sink that could not write what this dead letter holds; None: a rejected vote."""
        return sink_of_kind(self.attributes.get(KIND_ATTRIBUTE))

    @property
    def kind(self) -> str:
        return REJECTED_VOTE if self.sink is None else self.sink.codec.kind

    @property
    def error(self) -> str:
        return self.attributes.get(ERROR_ATTRIBUTE, "")

    @property
    def reason(self) -> str:
        return self.error.split(":", 1)[0] or "unknown"

    def failed(self) -> FailedRecord:
        """The failed record of a sink's dead letter, exactly as the sink failed to write it."""
        assert self.sink is not None, "a rejected vote holds no sink's record"
        return self.sink.codec.decode(self.data, self.attributes)

    @property
    def line(self) -> int | None:
        """The 1-based line of a rejected line of a batch (v2) message; None for a whole message."""
        line = self.attributes.get(LINE_ATTRIBUTE, "")
        return int(line) if line.isdigit() else None

    def event_id(self) -> str | None:
        """The rejected event's own event_id: the field of its JSON if readable, else (a whole v1
        message only) its attribute. A line of a batch never takes the batch's attribute: that is
        the batch's ID, shared by its other lines."""
        try:
            body = json.loads(self.data)
        except ValueError:
            body = None
        value = body.get("event_id") if isinstance(body, dict) else None
        if isinstance(value, str) and value:
            return value
        return self.attributes.get(EVENT_ID_ATTRIBUTE) or None if self.line is None else None

    def identity(self) -> str:
        """What a correction of this rejected vote is matched by, and what its replay is keyed by:
        its event_id, or "@<message ID>/<line>" (line 1 for a whole message) when it has none."""
        return self.event_id() or f"@{self.message_id}/{self.line or 1}"

    def summary(self) -> dict:
        rejected = self.kind == REJECTED_VOTE
        return {
            "message_id": self.message_id,
            "kind": self.kind,
            "reason": self.reason,
            "error": self.error,
            "event_id": self.event_id() if rejected else None,
            "line": self.line,
            "identity": self.identity() if rejected else None,
            "data": self.data[:300].decode("utf-8", "replace"),
        }


class HeldLetters:
    """Keeps the ack deadlines of the dead letters a command holds extended, so that none is
    redelivered (and replayed a second time by another run) while a long replay still holds it.
    A background thread extends every held letter's deadline to `deadline_s` every `every_s`
    seconds; a letter is let go once acknowledged or released. Use it as a context manager."""

    def __init__(self, subscriber, subscription: str, deadline_s: int = 60, every_s: float = 20.0) -> None:
        self._subscriber = subscriber
        self._subscription = subscription
        self._deadline_s = deadline_s
        self._every_s = every_s
        self._held: dict[str, None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._extend_until_stopped, name="dead-letter-leases", daemon=True)
        self.extensions = 0  # modify_ack_deadline calls made

    def __enter__(self) -> HeldLetters:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def hold(self, letters: Iterable[DeadLetter]) -> None:
        with self._lock:
            self._held.update(dict.fromkeys(letter.ack_id for letter in letters))

    def let_go(self, letters: Iterable[DeadLetter]) -> None:
        with self._lock:
            for letter in letters:
                self._held.pop(letter.ack_id, None)

    def _extend_until_stopped(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                ack_ids = list(self._held)
            for start in range(0, len(ack_ids), PULL_BATCH):
                try:
                    self._subscriber.modify_ack_deadline(
                        request={
                            "subscription": self._subscription,
                            "ack_ids": ack_ids[start : start + PULL_BATCH],
                            "ack_deadline_seconds": self._deadline_s,
                        }
                    )
                except exceptions.GoogleAPICallError as error:  # tried again at the next beat, well within the deadline
                    LOG.warning(
                        "could not extend the ack deadline of %d held dead letters: %s",
                        len(ack_ids[start : start + PULL_BATCH]),
                        error,
                    )
                    continue
                self.extensions += 1


def pull_dead_letters(
    subscriber,
    subscription: str,
    limit: int,
    reason: str | None = None,
    empty_wait_s: float = EMPTY_PULL_WAIT_S,
    held: HeldLetters | None = None,
) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """Pulls and holds up to `limit` dead letters (of `reason`, if given); returns (matching, others).
    Held messages are redelivered after the ack deadline unless released or acknowledged, or kept
    extended by `held` from the moment each is pulled."""
    matching: list[DeadLetter] = []
    others: list[DeadLetter] = []
    while len(matching) < limit:
        try:
            response = subscriber.pull(
                request={"subscription": subscription, "max_messages": min(PULL_BATCH, limit - len(matching))},
                timeout=empty_wait_s,
                retry=None,
            )
        except exceptions.DeadlineExceeded:
            break
        if not response.received_messages:
            break
        for received in response.received_messages:
            letter = DeadLetter(
                received.ack_id,
                received.message.message_id,
                bytes(received.message.data),
                dict(received.message.attributes),
                received.message.publish_time.timestamp(),
            )
            (matching if reason is None or letter.reason == reason else others).append(letter)
            if held is not None:
                held.hold([letter])
    return matching, others


def release(subscriber, subscription: str, letters: Sequence[DeadLetter]) -> None:
    """Hands held dead letters back for delivery at once (they stay on the subscription)."""
    if letters:
        subscriber.modify_ack_deadline(
            request={
                "subscription": subscription,
                "ack_ids": [letter.ack_id for letter in letters],
                "ack_deadline_seconds": 0,
            }
        )


def acknowledge(subscriber, subscription: str, letters: Sequence[DeadLetter]) -> None:
    if letters:
        subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [letter.ack_id for letter in letters]})


def backlog_by_reason(letters: Iterable[DeadLetter]) -> dict[str, int]:
    return dict(sorted(Counter(f"{letter.kind}/{letter.reason}" for letter in letters).items()))


@dataclass(frozen=True)
class CorrectedLine:
    """One line of a corrections file: the JSON of a vote the pipeline accepts, its event_id, and
    its line number in the file (what a refusal names)."""

    data: bytes
    event_id: str
    number: int

    def parsed(self, publish_time_s: float, policy: EventTimePolicy) -> VoteEvent | VoteState:
        """The vote, as the stream reads it in a message published at `publish_time_s`, under the
        stream's event-time policy: a delta event without an event_time, or with one further ahead
        of that time than the clock skew or older than the retention, is counted in that hour, and a
        vote state stamped that far ahead takes that time. A replay passes its dead letter's publish
        time: the stream stamps a rejected vote's dead letter as it parses the vote, so it is the
        vote's own arrival but for those seconds, and every delivery of the letter carries it, so a
        rerun in any hour (the replay's clock is never read) parses the same vote and writes the same
        correction."""
        vote = parse_vote(self.data, None, publish_time_s=publish_time_s, policy=policy)
        assert isinstance(vote, (VoteEvent, VoteState)), vote  # read_corrected_votes accepted it
        return vote


def read_corrected_votes(
    lines: Iterable[bytes], publish_time_s: float, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY
) -> dict[str, CorrectedLine]:
    """The corrected votes of a JSON-lines file by event_id (the identity of the dead letter each
    replaces); raises ValueError on a line the pipeline would reject again, one without an event_id
    to match it to its dead letter, or a second line for the same dead letter."""
    corrected: dict[str, CorrectedLine] = {}
    for number, line in enumerate(lines, 1):
        data = line.rstrip(b"\r\n")
        if not data.strip():
            continue
        vote = parse_vote(data, None, publish_time_s=publish_time_s, policy=policy)
        if not isinstance(vote, (VoteEvent, VoteState)):
            raise ValueError(f"line {number} would be rejected again: {vote.error}")
        if not vote.event_id:
            raise ValueError(
                f"line {number} has no event_id to match it to its dead letter (for a rejected line "
                "without one, the identity `dead-letters show` prints)"
            )
        if (first := corrected.get(vote.event_id)) is not None:
            raise ValueError(
                f"lines {first.number} and {number} both correct {vote.event_id!r}: one line per dead letter"
            )
        corrected[vote.event_id] = CorrectedLine(data, vote.event_id, number)
    return corrected


def correction_delta(vote: VoteEvent, identity: str) -> PostDelta:
    """The delta row a corrected delta event becomes: the sums the pipeline would give it alone,
    keyed by the identity of the dead letter it replaces."""
    voters = (
        sketch_of([vote.user_id]) if vote.delta > 0 and vote.user_id and vote.counter in VOTER_CONTRACT_NAMES else None
    )
    counts = Counts(**{NAME_OF[vote.counter]: vote.delta})
    return PostDelta(vote.post_id, vote.event_hour, replay_delta_id(identity), CounterSums(counts, 1, voters))


def correction_states(vote: VoteState) -> dict[PostUser, LatestVote]:
    """The vote state a corrected vote-state event applies, as the vote-state sink would apply it."""
    return {PostUser(vote.post_id, vote.user_id): vote.latest()}


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _utc_text(epoch_us: int) -> str:
    """A time in microseconds since the epoch in RFC 3339, UTC (exact: no float in between)."""
    return (_EPOCH + timedelta(microseconds=epoch_us)).isoformat().replace("+00:00", "Z")


def correction_text(vote: VoteEvent | VoteState) -> str:
    """A corrected vote's canonical text: every field its replay writes from, as counted (after the
    event-time policy), keys sorted, times in RFC 3339, so that two corrections are the same
    correction exactly when they count the same, and an operator reads both versions of a refused
    rerun. A vote state's time is its `event_time` as ordered (microseconds)."""
    fields = vote._asdict()
    fields["event_hour"] = _utc_text(vote.event_hour * 1_000_000)
    if isinstance(vote, VoteState):
        fields["event_time"] = _utc_text(fields.pop("at_us"))
    return json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class Correction(NamedTuple):
    """A rejected vote's corrected line as a replay writes it: the vote as the stream counts it,
    and the dead letter's identity, which keys the write (its marker and its delta row)."""

    line: CorrectedLine
    identity: str
    vote: VoteEvent | VoteState

    @property
    def text(self) -> str:
        return correction_text(self.vote)

    @property
    def marker(self) -> CorrectionMarker:
        return CorrectionMarker(self.identity, self.text)

    def write(self) -> PostDelta | dict[PostUser, LatestVote]:
        """What it writes: a delta row (a delta event) or a vote state to apply."""
        return (
            correction_delta(self.vote, self.identity)
            if isinstance(self.vote, VoteEvent)
            else correction_states(self.vote)
        )

    def refusal(self, written: str) -> str:
        """Why its rerun is refused: the line, its identity, and both versions."""
        return (
            f"corrected line {self.line.number} (identity {self.identity!r}) differs from the correction an "
            f"earlier replay wrote for its dead letter; nothing written, dead letter kept. Written: {written}; "
            f"this line: {self.text}"
        )


def write_corrected(database, correction: Correction) -> str | None:
    """One attempt to write a correction with its marker, in one commit (upvotes/operations/replayed_corrections.py):
    None when written now, else the correction an earlier replay recorded for its identity."""
    write = correction.write()
    if isinstance(write, PostDelta):
        return write_corrected_delta(database, write, correction.marker)
    return apply_corrected_states(database, write, correction.marker)


class SinkLetter(NamedTuple):
    """A sink's dead letter and the failed record it holds (DeadLetter.failed)."""

    letter: DeadLetter
    sink: SinkDeclaration
    failed: FailedRecord


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay does with the dead letters it holds: each is written, then acknowledged."""

    # What the sinks could not write, re-written through each sink's replay, sink by sink in the
    # registry's order (spanner_writes/sinks.py).
    failed: list[SinkLetter] = field(default_factory=list)
    corrections: list[tuple[DeadLetter, Correction]] = field(
        default_factory=list
    )  # rejected votes replaced by their corrections: a delta row or a vote state
    left: list[DeadLetter] = field(default_factory=list)  # no replay for these: released, kept


def plan_replay(
    letters: Iterable[DeadLetter],
    corrected: dict[str, CorrectedLine],
    policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY,
) -> ReplayPlan:
    """Each held dead letter's replay; a correction is read under `policy` (the stream's, from the
    same flags) at its dead letter's publish time (CorrectedLine.parsed)."""
    plan = ReplayPlan()
    for letter in letters:
        if letter.sink is not None:
            plan.failed.append(SinkLetter(letter, letter.sink, letter.failed()))
        elif (line := corrected.get(letter.identity())) is not None:
            plan.corrections.append(
                (letter, Correction(line, letter.identity(), line.parsed(letter.publish_time_s, policy)))
            )
        else:
            plan.left.append(letter)
    plan.failed.sort(key=lambda held: SINKS.index(held.sink))
    return plan


@dataclass(frozen=True)
class ReplayReport:
    # Each sink's two counts, written now and found written before, by the names its replay
    # declares (SinkReplay.counted_as: deltas_written, deltas_already_written, states_applied, ...).
    replayed: dict[str, int]
    corrections_written: int  # corrected votes replayed now: a delta row written, or a vote state applied (or
    # superseded by the user's stored later vote, as the sink would find it)
    corrections_already_written: int  # the same corrections an earlier run (killed before its acknowledgement) wrote
    acknowledged: int
    left: int
    failed: list[str]  # "<message id>: <error>" of replays that failed; those stay on the subscription
    # Corrections that differ from the one an earlier run wrote for their dead letter (Correction.refusal):
    # nothing written, and their dead letters stay on the subscription.
    corrections_refused: list[str]

    def to_json(self) -> dict:
        """What `dead-letters replay` prints: each sink's counts, then the rest; `votes_published` is
        kept for scripts that read it: corrections are written, never published (deprecated, always
        0; see CHANGELOG.md)."""
        fields = dict(self.__dict__)
        return {**fields.pop("replayed"), **fields, "votes_published": 0}


class _Refused(Exception):
    """A correction whose dead letter an earlier replay wrote another correction for."""


_CORRECTIONS_COUNTED_AS = ("corrections_written", "corrections_already_written")


def execute_replay(
    plan: ReplayPlan,
    replay_failed: Callable[[SinkDeclaration, FailedRecord], tuple[int, int]],
    write_correction: Callable[[Correction], str | None],
    ack: Callable[[list[DeadLetter]], None],
) -> tuple[ReplayReport, list[DeadLetter]]:
    """Replays each dead letter and acknowledges it right after its replay succeeded; returns the
    report and the dead letters still held (failed, refused or left), for the caller to release.
    `replay_failed` re-writes a sink's failed record (the command: the sink's SinkReplay.write) and
    returns (written or applied, already there); `write_correction` the correction recorded for its
    identity before it (upvotes/operations/replayed_corrections.py), None if none: the same as this
    one, it was already written; another, this one is refused."""

    def replay_correction(correction: Correction) -> tuple[int, int]:
        written = write_correction(correction)
        if written is not None and written != correction.text:
            raise _Refused(correction.refusal(written))
        return (1, 0) if written is None else (0, 1)

    replays = [
        (held.letter, lambda held=held: replay_failed(held.sink, held.failed), held.sink.replay.counted_as)
        for held in plan.failed
    ]
    replays += [
        (letter, lambda correction=correction: replay_correction(correction), _CORRECTIONS_COUNTED_AS)
        for letter, correction in plan.corrections
    ]
    counts = dict.fromkeys(
        [name for sink in SINKS for name in sink.replay.counted_as] + list(_CORRECTIONS_COUNTED_AS), 0
    )
    acked = 0
    failed: list[str] = []
    refused: list[str] = []
    still_held: list[DeadLetter] = list(plan.left)
    for letter, replay, (written_now, written_before) in replays:
        try:
            new, existing = replay()
        except exceptions.GoogleAPICallError as error:
            failed.append(f"{letter.message_id}: {error}")
            still_held.append(letter)
            continue
        except _Refused as refusal:
            refused.append(str(refusal))
            still_held.append(letter)
            continue
        counts[written_now] += new
        counts[written_before] += existing
        ack([letter])
        acked += 1
    corrections_written, corrections_already_written = (counts.pop(name) for name in _CORRECTIONS_COUNTED_AS)
    return ReplayReport(
        counts, corrections_written, corrections_already_written, acked, len(plan.left), failed, refused
    ), still_held
