"""Erasure requests (`upvotes forget-user`): every vote of one user retracted, as vote states.

A retraction is a "none" state (schemas/vote_states.py) applied through the vote-state sink's own
path (spanner_store.votes.apply_all_vote_states), not a compensating delta: each one moves the
count the user's stored vote made, in that vote's hour, in the same read-write transaction that
writes the "none" row, so the exact reads, the hourly counts, the fold and the fresh top see an
ordinary vote-state change, and a stream applying the same user's events at the same time is
serialised with it on the Votes rows. And the "none" row is what a compensating delta could not
be: it is later than every vote it retracts, so an older event of that user arriving late (a
redelivery, a replay, a slow publisher) loses to it instead of counting again.

One request, one ID (the operator's --id or a random UUID), one forget time:

1. the request's audit row (Adjustments, Kind FORGET_USER, UserId the user, PostId "", AsOf the
   forget time, the counts it found to retract) is written first, in a blind commit of its own,
   before any retraction;
2. every vote of the user not already "none" gets the state "none" at the forget time, event_id
   "@forget/<ID>", counted in the forget time's hour.

A rerun of the same ID (after a crash, a timeout, or just again) reads the audit row back and
reuses its forget time, so it plans the same states: what an earlier run applied is "none"
already and is not planned again, the rest is applied now, and no count moves twice. It writes
no second audit row. The forget time is the clock's, or just after the user's newest stored vote
if that is later (an event time may run ahead of the clock by the contract's clock skew): every
vote stored when the request is first run is retracted. After it, a vote whose event time is
later than the forget time (one the user casts afterwards) counts again; a rerun keeps it.

Cost: point reads of the audit row (a first run reads it back after writing it), ONE key-range
read of the user's Votes rows (they share the key prefix (UserHash, UserId)), one blind commit,
and one read-write transaction per `rows_per_commit` of the user's votes, each reading and
writing only its own Votes rows and one delta row per post and hour. It follows that user's
votes, never the catalogue nor the other voters of the same posts.

What stays: the user's Votes rows, now "none", keep the user ID, post ID and forget time: the
ordering that makes a late event of the user lose needs them. The audit row keeps the user ID.
The delta rows carry no user ID; the unique-voter sketches keep a register set by a hash of it,
which no read turns back into the ID. Full erasure is the operator's next step, once no event of
the user can still arrive (the app publishes none for the account any more, and the retention of
the votes subscription and of the dead-letter topic has passed since): delete the user's Votes
rows, one key range (UserHash, UserId), which moves no count since "none" counts nothing (an
event of the user arriving after that would count again).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Iterable, NamedTuple

from schemas.counters import Counts
from schemas.records import HOUR_S, PostUser
from schemas.vote_states import NONE, LatestVote, counted
from spanner_store.moderation import FORGET_USER, Adjustment, adjustment_of, record
from spanner_store.tables import micros_timestamp, timestamp_micros
from spanner_store.votes import StoredVote, apply_all_vote_states, votes_of_user


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def forget_event_id(request_id: str) -> str:
    """The event_id of a request's "none" states: the same in every run of the request, so a
    rerun's state equals the first run's and is superseded by it, never applied twice."""
    return f"@forget/{request_id}"


def forget_time(votes: Iterable[StoredVote], now_us: int) -> int:
    """A new request's forget time (microseconds): now, or just after the newest vote if that is
    later, so that its "none" state is later than every vote stored. Pure."""
    return max([now_us, *(vote.voted_at_us + 1 for vote in votes if vote.vote != NONE)])


class Retractions(NamedTuple):
    """What a request does to one user's stored votes (plan_retractions)."""

    states: dict[PostUser, LatestVote]  # a "none" state per vote to retract
    counts: Counts  # what those votes counted, negated: the change they make, summed over posts
    kept: int  # votes later than the forget time: cast after it, they count


def plan_retractions(votes: Iterable[StoredVote], at_us: int, event_id: str) -> Retractions:
    """A "none" state at `at_us` for each vote that is not "none" and not later than it. A
    retraction stands for no event from the stream (events=0) and adds no voter. Pure."""
    hour = at_us // 1_000_000 // HOUR_S * HOUR_S
    retraction = LatestVote(NONE, at_us, event_id, hour, events=0, voted=False)
    states: dict[PostUser, LatestVote] = {}
    counts = Counts()
    kept = 0
    for vote in votes:
        if vote.vote == NONE:
            continue
        if vote.order > retraction.order:
            kept += 1
            continue
        states[PostUser(vote.post_id, vote.user_id)] = retraction
        counts = counts.plus(counted(vote.vote).negated())
    return Retractions(states, counts, kept)


class RequestIdInUse(ValueError):
    """The request ID names another adjustment, or a request to forget another user."""


class ForgetResult(NamedTuple):
    request: Adjustment  # the audit row, as the request's first run recorded it
    written: bool  # False: a rerun of the ID (its audit row was there), which reused its forget time
    retracted: int  # votes this run set to "none", moving their counts
    posts: int  # the posts of the votes this run planned to retract
    kept: int  # votes later than the forget time (cast after it): they count
    superseded: int  # planned retractions found later when applied (a vote, or a run of the same ID, racing)
    commits: int  # read-write transactions that applied retractions


def _recorded(database, request_id: str, user_id: str) -> Adjustment | None:
    request = adjustment_of(database, request_id)
    if request is not None and (request.kind, request.user_id) != (FORGET_USER, user_id):
        raise RequestIdInUse(f"ID {request_id!r} is already used by a {request.kind} of "
                             f"{request.user_id or request.post_id!r}: choose another ID")
    return request


def forget_user(database, request_id: str, user_id: str, reason: str, actor: str,
                clock: Callable[[], datetime] = utc_now, rows_per_commit: int = 1_000) -> ForgetResult:
    """Retracts every vote of `user_id` (see the module docstring); idempotent per `request_id`."""
    event_id = forget_event_id(request_id)
    request = _recorded(database, request_id, user_id)
    votes = votes_of_user(database, user_id)
    written = False
    if request is None:
        at_us = forget_time(votes, timestamp_micros(clock()))
        found = plan_retractions(votes, at_us, event_id).counts
        written = record(database, Adjustment(request_id, "", FORGET_USER, found, reason, actor,
                                              micros_timestamp(at_us), None, user_id))
        # Read back: this run's row with its commit time, or that of a run of the same ID racing it.
        request = _recorded(database, request_id, user_id)
    plan = plan_retractions(votes, timestamp_micros(request.as_of), event_id)
    totals = apply_all_vote_states(database, plan.states, rows_per_commit)
    return ForgetResult(request, written, totals.applied, len({key.post_id for key in plan.states}), plan.kept,
                        totals.superseded, totals.commits)
