"""Typed, immutable records that flow between the transforms.

NamedTuples rather than dataclasses: they are immutable, typed, cheap to create (this is
the per-element path) and Beam pickles them compactly.
"""
from __future__ import annotations

import base64
from typing import NamedTuple

UPVOTES = "upvotes"
SHARES = "shares"
COUNTERS = (UPVOTES, SHARES)
HOUR_S = 3600


class VoteEvent(NamedTuple):
    """One accepted vote, as the event contract (schemas/vote_event.schema.json) defines it."""

    post_id: str
    counter: str  # UPVOTES or SHARES
    delta: int
    event_hour: int  # start of the event's hour, epoch seconds (UTC)
    event_id: str | None = None
    user_id: str | None = None


class Rejected(NamedTuple):
    """A message that could not be accepted, kept whole for the dead-letter topic."""

    data: bytes
    attributes: dict[str, str]
    error: str  # "<reason>: <detail>"; reason is one of transforms.parse.REASONS


class PostHour(NamedTuple):
    """The grouping key: one post, one event-time hour."""

    post_id: str
    event_hour: int


class CounterSums(NamedTuple):
    """Net change of both counters over some votes, and how many votes that was."""

    upvotes: int = 0
    shares: int = 0
    events: int = 0
    voters: bytes | None = None  # serialised sketch of the upvoters (schemas/voter_sketch.py)


class PostDelta(NamedTuple):
    """One delta row for Spanner: the sums of one pane for one post and hour.

    delta_id is deterministic ("<writer>:<window start us>:<pane index>"), so writing the
    same pane twice hits the same primary key.
    """

    post_id: str
    event_hour: int
    delta_id: str
    upvotes: int
    shares: int
    events: int
    voters: bytes | None = None  # sketch of the pane's upvoters; None: no voter recorded

    def to_json(self) -> dict:
        """The delta as a JSON object (its dead-letter form), the sketch as base64 text."""
        return {**self._asdict(), "voters": None if self.voters is None else base64.b64encode(self.voters).decode()}

    @classmethod
    def from_json(cls, fields: dict) -> "PostDelta":
        """to_json's inverse; a delta dead-lettered before sketches existed has no voters."""
        voters = fields.get("voters")
        return cls(**{**fields, "voters": None if voters is None else base64.b64decode(voters)})


class FailedDelta(NamedTuple):
    """A delta row that could never be written, with the reason, for the dead-letter topic."""

    delta: PostDelta
    error: str


class PostTotals(NamedTuple):
    """An exact count as served to readers."""

    post_id: str
    upvotes: int
    shares: int


class UniqueTotals(NamedTuple):
    """An exact count with the post's unique voters (an estimate: schemas/voter_sketch.py)."""

    post_id: str
    upvotes: int
    shares: int
    unique_voters: int
