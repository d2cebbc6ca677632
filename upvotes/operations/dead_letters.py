"""The dead-letter topic's kept subscription: reading it without consuming it, and re-driving it.

Three kinds of dead letter share the topic (transforms/dead_letter.py writes them):

- a delta row the sink could never write: JSON of a PostDelta, attribute kind=delta_row;
- a batch of vote states the vote-state sink could never apply: a JSON list, kind=vote_states;
- a rejected vote: the original bytes and attributes, plus an `error` attribute.

Both carry `error` = "<reason>: <detail>". Messages are pulled synchronously and held (not
acknowledged) while they are looked at; `release` hands them back at once (ack deadline 0),
`acknowledge` removes them. A replay acknowledges a dead letter only after its replay
succeeded:

- a delta row is re-written through the sink's own idempotent path
  (spanner_store.deltas.write_new_deltas): its key is the one the pipeline gave it, so
  replaying it twice, or after an unseen success, writes it once;
- vote states are applied through the vote-state sink's own path
  (spanner_store.votes.apply_all_vote_states): each is applied against the stored state, so a
  replay twice, or after an unseen success, moves each count once;
- a rejected vote is replaced by its corrected line from a JSON-lines file, matched by
  event_id, and published to the votes topic. Only lines whose rejected original is still
  held are published, so running the same replay twice publishes nothing the second time.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from google.api_core import exceptions

from schemas.contract import ERROR_ATTRIBUTE, EVENT_ID_ATTRIBUTE, parse_vote
from schemas.records import FailedVoteStates, PostDelta, PostUser, VoteEvent, VoteState
from schemas.vote_states import LatestVote
from transforms.dead_letter import DELTA_ROW, KIND_ATTRIBUTE, VOTE_STATES
from upvotes.devtools.publishing import event_message

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

    @property
    def kind(self) -> str:
        kind = self.attributes.get(KIND_ATTRIBUTE)
        return kind if kind in (DELTA_ROW, VOTE_STATES) else REJECTED_VOTE

    @property
    def error(self) -> str:
        return self.attributes.get(ERROR_ATTRIBUTE, "")

    @property
    def reason(self) -> str:
        return self.error.split(":", 1)[0] or "unknown"

    def failed_delta(self) -> PostDelta:
        """The delta row of a kind=delta_row dead letter, exactly as the sink tried to write it."""
        return PostDelta.from_json(json.loads(self.data))

    def failed_states(self) -> dict[PostUser, LatestVote]:
        """The vote states of a kind=vote_states dead letter, exactly as the sink tried to apply them."""
        return FailedVoteStates.states_from_json(json.loads(self.data))

    def event_id(self) -> str | None:
        """The event_id of a rejected vote: its attribute, or the field of its JSON if readable."""
        if self.attributes.get(EVENT_ID_ATTRIBUTE):
            return self.attributes[EVENT_ID_ATTRIBUTE]
        try:
            body = json.loads(self.data)
        except ValueError:
            return None
        value = body.get("event_id") if isinstance(body, dict) else None
        return value if isinstance(value, str) and value else None

    def summary(self) -> dict:
        return {"message_id": self.message_id, "kind": self.kind, "reason": self.reason, "error": self.error,
                "event_id": self.event_id() if self.kind == REJECTED_VOTE else None,
                "data": self.data[:300].decode("utf-8", "replace")}


def pull_dead_letters(subscriber, subscription: str, limit: int, reason: str | None = None,
                      empty_wait_s: float = EMPTY_PULL_WAIT_S) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """Pulls and holds up to `limit` dead letters (of `reason`, if given); returns (matching, others).
    Held messages are redelivered after the ack deadline unless released or acknowledged."""
    matching: list[DeadLetter] = []
    others: list[DeadLetter] = []
    while len(matching) < limit:
        try:
            response = subscriber.pull(
                request={"subscription": subscription, "max_messages": min(PULL_BATCH, limit - len(matching))},
                timeout=empty_wait_s, retry=None)
        except exceptions.DeadlineExceeded:
            break
        if not response.received_messages:
            break
        for received in response.received_messages:
            letter = DeadLetter(received.ack_id, received.message.message_id, bytes(received.message.data),
                                dict(received.message.attributes))
            (matching if reason is None or letter.reason == reason else others).append(letter)
    return matching, others


def release(subscriber, subscription: str, letters: Sequence[DeadLetter]) -> None:
    """Hands held dead letters back for delivery at once (they stay on the subscription)."""
    if letters:
        subscriber.modify_ack_deadline(request={"subscription": subscription, "ack_ids": [l.ack_id for l in letters],
                                                "ack_deadline_seconds": 0})


def acknowledge(subscriber, subscription: str, letters: Sequence[DeadLetter]) -> None:
    if letters:
        subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [l.ack_id for l in letters]})


def backlog_by_reason(letters: Iterable[DeadLetter]) -> dict[str, int]:
    return dict(sorted(Counter(f"{l.kind}/{l.reason}" for l in letters).items()))


@dataclass(frozen=True)
class CorrectedVote:
    data: bytes
    attributes: dict[str, str]
    event_id: str


def read_corrected_votes(lines: Iterable[bytes], publish_time_s: float) -> dict[str, CorrectedVote]:
    """The corrected votes of a JSON-lines file by event_id; raises ValueError on a line the
    pipeline would reject again, or one without an event_id to match it to its dead letter."""
    corrected: dict[str, CorrectedVote] = {}
    for number, line in enumerate(lines, 1):
        data = line.rstrip(b"\r\n")
        if not data.strip():
            continue
        vote = parse_vote(data, None, publish_time_s=publish_time_s)
        if not isinstance(vote, (VoteEvent, VoteState)):
            raise ValueError(f"line {number} would be rejected again: {vote.error}")
        if not vote.event_id:
            raise ValueError(f"line {number} has no event_id to match it to its dead letter")
        message, attributes = event_message(json.loads(data))  # as `upvotes publish` sends a vote
        corrected[vote.event_id] = CorrectedVote(message, attributes, vote.event_id)
    return corrected


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay does with the dead letters it holds."""

    deltas: list[tuple[DeadLetter, PostDelta]] = field(default_factory=list)  # re-write, then acknowledge
    states: list[tuple[DeadLetter, dict[PostUser, LatestVote]]] = field(default_factory=list)  # apply, then acknowledge
    votes: list[tuple[DeadLetter, CorrectedVote]] = field(default_factory=list)  # publish, then acknowledge
    left: list[DeadLetter] = field(default_factory=list)  # no replay for these: released, kept


def plan_replay(letters: Iterable[DeadLetter], corrected: dict[str, CorrectedVote]) -> ReplayPlan:
    plan = ReplayPlan()
    for letter in letters:
        if letter.kind == DELTA_ROW:
            plan.deltas.append((letter, letter.failed_delta()))
        elif letter.kind == VOTE_STATES:
            plan.states.append((letter, letter.failed_states()))
        elif (event_id := letter.event_id()) is not None and event_id in corrected:
            plan.votes.append((letter, corrected[event_id]))
        else:
            plan.left.append(letter)
    return plan


@dataclass(frozen=True)
class ReplayReport:
    deltas_written: int
    deltas_already_written: int
    states_applied: int
    states_already_applied: int
    votes_published: int
    acknowledged: int
    left: int
    failed: list[str]  # "<message id>: <error>" of replays that failed; those stay on the subscription


def execute_replay(plan: ReplayPlan, write_delta: Callable[[PostDelta], tuple[int, int]],
                   apply_states: Callable[[dict[PostUser, LatestVote]], tuple[int, int]],
                   publish_vote: Callable[[CorrectedVote], None],
                   ack: Callable[[list[DeadLetter]], None]) -> tuple[ReplayReport, list[DeadLetter]]:
    """Replays each dead letter and acknowledges it right after its replay succeeded; returns the
    report and the dead letters still held (failed or left), for the caller to release.
    `write_delta` and `apply_states` return (written or applied, already there)."""
    totals = {"deltas": [0, 0], "states": [0, 0]}
    published = acked = 0
    failed: list[str] = []
    still_held: list[DeadLetter] = list(plan.left)
    for kind, replays, replay in (("deltas", plan.deltas, write_delta), ("states", plan.states, apply_states)):
        for letter, item in replays:
            try:
                new, existing = replay(item)
            except exceptions.GoogleAPICallError as error:
                failed.append(f"{letter.message_id}: {error}")
                still_held.append(letter)
                continue
            totals[kind][0] += new
            totals[kind][1] += existing
            ack([letter])
            acked += 1
    for letter, vote in plan.votes:
        try:
            publish_vote(vote)
        except exceptions.GoogleAPICallError as error:
            failed.append(f"{letter.message_id}: {error}")
            still_held.append(letter)
            continue
        published += 1
        ack([letter])
        acked += 1
    return ReplayReport(*totals["deltas"], *totals["states"], published, acked, len(plan.left), failed), still_held
