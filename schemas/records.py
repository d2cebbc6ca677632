"""Typed, immutable records that flow between the transforms.

NamedTuples rather than dataclasses: they are immutable, typed, cheap to create (this is
the per-element path) and Beam pickles them compactly. Every count travels as one `Counts`
(schemas/counters.py), never as one field per counter.
"""

from __future__ import annotations

import base64
import warnings
from datetime import datetime
from typing import NamedTuple

from schemas.counters import NAMES, Counts
from schemas.vote_states import NONE, LatestVote
from schemas.voter_sketch import union_of

HOUR_S = 3600


def hour_of_us(at_us: int) -> int:
    """The start (epoch seconds) of the UTC hour holding a time in microseconds since the epoch."""
    return at_us // 1_000_000 // HOUR_S * HOUR_S


class VoteEvent(NamedTuple):
    """One accepted vote, as the event contract (schemas/vote_event.schema.json) defines it."""

    post_id: str
    counter: str  # one of schemas.counters.CONTRACT_NAMES
    delta: int
    event_hour: int  # start of the event's hour, epoch seconds (UTC)
    event_id: str | None = None
    user_id: str | None = None


class VoteState(NamedTuple):
    """One accepted vote-state event: where one user stands on one post, as of a time
    (schemas/vote_states.py). Carries no counter and no delta: the pipeline derives the change."""

    post_id: str
    user_id: str
    vote: str  # one of schemas.vote_states.VOTES
    at_us: int  # the event time, microseconds since the epoch, after the clock-skew policy
    event_hour: int  # start of the event's hour, epoch seconds (UTC)
    event_id: str | None = None

    def latest(self) -> LatestVote:
        """The event as the latest of one: what the pipeline merges and the sink applies."""
        return LatestVote(self.vote, self.at_us, self.event_id or "", self.event_hour, 1, self.vote != NONE)


class PostUser(NamedTuple):
    """The key of one user's vote state on one post."""

    post_id: str
    user_id: str


class Rejected(NamedTuple):
    """A message that could not be accepted, kept whole for the dead-letter topic."""

    data: bytes
    attributes: dict[str, str]
    error: str  # "<reason>: <detail>"; reason is one of schemas.contract.REASONS


class PostHour(NamedTuple):
    """The grouping key: one post, one event-time hour."""

    post_id: str
    event_hour: int


class CounterSums(NamedTuple):
    """The sums of some votes of one post and event hour: what each counter gained, how many
    votes that was, and who voted. The one record of a window's sums, from the bundle that
    first sums them (transforms/parse_and_sum.py) through the window combine
    (transforms/windowing.py) to the delta row (PostDelta.sums), and of the delta rows and
    hourly rows read back per hour (spanner_reads.reads.hour_sums_of, which reads no events:
    0) by the fold and the hourly reads."""

    counts: Counts = Counts()
    events: int = 0
    voters: bytes | None = None  # serialised sketch of the voters (schemas/voter_sketch.py); None: none

    def plus(self, other: CounterSums) -> CounterSums:
        """Both sums: the counts and the events added, the voter sketches unioned."""
        return CounterSums(
            self.counts.plus(other.counts), self.events + other.events, union_of((self.voters, other.voters))
        )


class PostDelta(NamedTuple):
    """One delta row for Spanner: the sums of one pane for one post and hour.

    delta_id is deterministic ("<writer>:<window start us>:<pane index>:..."), so writing the
    same pane twice hits the same primary key.
    """

    post_id: str
    event_hour: int
    delta_id: str
    sums: CounterSums

    @classmethod
    def of(
        cls,
        post_id: str,
        event_hour: int,
        delta_id: str,
        *,
        events: int = 0,
        voters: bytes | None = None,
        **counts: int,
    ) -> PostDelta:
        """A delta from counts by name (`upvotes=3`), as moderation, tests and benchmarks build one."""
        return cls(post_id, event_hour, delta_id, CounterSums(Counts(**counts), events, voters))

    def to_json(self) -> dict:
        """The delta as a flat JSON object (its dead-letter form), the sketch as base64 text."""
        voters = self.sums.voters
        return {
            "post_id": self.post_id,
            "event_hour": self.event_hour,
            "delta_id": self.delta_id,
            **self.sums.counts._asdict(),
            "events": self.sums.events,
            "voters": None if voters is None else base64.b64encode(voters).decode(),
        }

    @classmethod
    def from_json(cls, fields: dict) -> PostDelta:
        """to_json's inverse. A delta dead-lettered before sketches existed has no voters, one
        dead-lettered before a counter existed reads 0 of it."""
        voters = fields.get("voters")
        counts = Counts(**{name: fields[name] for name in NAMES if name in fields})
        return cls(
            fields["post_id"],
            fields["event_hour"],
            fields["delta_id"],
            CounterSums(counts, fields["events"], None if voters is None else base64.b64decode(voters)),
        )


class FailedDelta(NamedTuple):
    """A delta row that could never be written, with the reason, for the dead-letter topic."""

    delta: PostDelta
    error: str


class FailedVoteStates(NamedTuple):
    """Vote states whose batch could never be applied, with the reason, for the dead-letter topic:
    replayed through the same path once the cause is fixed (`upvotes dead-letters replay`)."""

    states: tuple[tuple[PostUser, LatestVote], ...]
    error: str

    def states_json(self) -> list[dict]:
        """The states as JSON objects (the dead letter's data)."""
        return [{"post_id": key.post_id, "user_id": key.user_id, **state._asdict()} for key, state in self.states]

    @staticmethod
    def states_from_json(items: list[dict]) -> dict[PostUser, LatestVote]:
        """states_json's inverse."""
        return {
            PostUser(item["post_id"], item["user_id"]): LatestVote(**{name: item[name] for name in LatestVote._fields})
            for item in items
        }


class PostTotals(NamedTuple):
    """An exact count as served to readers; with the post's unique voters (an estimate:
    schemas/voter_sketch.py) when asked for.

    Each counter is also an attribute (`totals.upvotes`, generated from schemas/counters.py), as
    it was before the counts moved into `counts`: deprecated, it warns "use .counts.<name>"."""

    post_id: str
    counts: Counts
    unique_voters: int | None = None

    def to_json(self, as_of: datetime | None = None) -> dict:
        """{"post_id", one field per counter[, "as_of"][, "unique_voters"]}: what `upvotes read`
        prints, and with `as_of` (the time the counts were read at) what the service answers
        (spanner_reads.counts_reader.PostCount)."""
        record = {"post_id": self.post_id, **self.counts._asdict()}
        if as_of is not None:
            record["as_of"] = as_of.isoformat()
        if self.unique_voters is not None:
            record["unique_voters"] = self.unique_voters
        return record


def _deprecated_counter(name: str) -> property:
    def read(totals: PostTotals) -> int:
        warnings.warn(f"PostTotals.{name} is deprecated: use .counts.{name}", DeprecationWarning, stacklevel=2)
        return getattr(totals.counts, name)

    return property(read, doc=f"Deprecated: use .counts.{name}.")


for _name in NAMES:
    if hasattr(PostTotals, _name):
        raise TypeError(f"counter {_name!r} collides with PostTotals.{_name}")
    setattr(PostTotals, _name, _deprecated_counter(_name))
del _name
