"""Erasure requests (`upvotes forget-user`): every vote of one user retracted, now and in flight.

A retraction is a "none" state (schemas/vote_states.py) applied through the vote-state sink's own
path (spanner_writes.votes.apply_all_vote_states), not a compensating delta: each one moves the
count the user's stored vote made, in that vote's hour, in the same read-write transaction that
writes the "none" row, so the exact reads, the hourly counts, the fold and the fresh top see an
ordinary vote-state change, and a stream applying the same user's events at the same time is
serialised with it on the Votes rows.

One request, one ID (the operator's --id or a random UUID), one forget time F: the commit
timestamp of the request's record, Spanner's clock, which every reader agrees on:

1. the user's Votes rows are read: what they count is what the audit row records as found to
   retract, since every vote stored before the record is retracted whatever its own time (step 3),
   so no forget time is needed to count them (`counts_to_retract`);
2. ONE blind commit records the request, before anything is retracted: its audit row
   (Adjustments, Kind FORGET_USER, UserId the user, PostId "", AsOf and CreatedAt both the commit
   timestamp, the counts found) and its UserErasures row (the user, the ID, ForgottenThrough the
   commit timestamp), read back for F. From that commit on, every application of the user's states
   (the stream's sink, a dead-letter replay, a rerun) reads the erasure in its own transaction and
   turns a state at or before F into the request's "none" (schemas/vote_states.py `erased`): a vote
   still in flight when the request runs, in an open window, the subscription's backlog or a
   dead-letter batch, counts nothing when it arrives, on a post with no stored vote too;
3. the user's Votes rows are read again (after the commit, so every state applied before it is
   seen), and every vote stored before the request (AppliedAt before F) or at or before F gets the
   state "none", event_id "@forget/<ID>", at F, or just after the vote if the vote's own time is
   later (`plan_retractions`).

Why the commit timestamp, and not the operator's clock (as before issue 44): Spanner orders the
record and every transaction that applies the user's states by their commit timestamps (they read
the user's UserErasures rows, so they serialise with the record). A state applied before F is in
the rows step 3 reads and is retracted; a state applied after F saw the erasure. So "before the
request" means before F for every writer, whatever any machine's clock says. With the operator's
clock behind, votes in flight stamped between that clock and the commit counted; ahead, the user's
genuine votes cast after the request were silenced until the clock's time.

The bound on the forget time: F is the record's commit time, never the newest vote's. A vote whose
event time runs ahead of F (a publisher's clock ahead, by up to the contract's clock skew) and that
was stored before the record is retracted on its own post just after its own time, where only an
older event of the user on that post is silenced, which loses to that vote anyway; the user's votes
cast after the request, on every other post, count from F on. A vote published before the request
with a time ahead of F that has not arrived when the request runs counts as cast after it: the skew
bounds that window, and a second request (a new ID) once the backlog has drained retracts it.

A rerun of the same ID (after a crash, a timeout, or just again) reads the audit row back and
reuses its forget time and commit time, so it plans the same states: what an earlier run applied
is "none" already and is not planned again, the rest is applied now, and no count moves twice. A
vote applied after the request and later than F is the user's own later vote: a rerun keeps it.
A request recorded by an earlier version holds the operator's clock as its AsOf (and as its
erasure's ForgottenThrough): a rerun reuses that time and its CreatedAt as they are, as that
version did, and writes the erasure row of a request recorded before UserErasures existed.

Cost: point reads of the audit row, two key-range reads of the user's Votes rows (one for the
counts the audit row records, one after the record), one blind commit, and one read-write
transaction per `rows_per_commit` of the user's votes, each reading and writing only its own
Votes rows, the user's UserErasures and UserSuspensions rows and one delta row per post and hour.
It follows that user's votes, never the catalogue nor the other voters of the same posts.

What stays: the user's Votes rows, now "none", keep the user ID, post ID and forget time, and the
UserErasures row keeps the user ID and F: both are what makes a late event of the user lose. The
audit row keeps the user ID. The delta rows carry no user ID; the unique-voter sketches keep a
register set by a hash of it, which no read turns back into the ID. Full erasure is the
operator's next step, once no event of the user can still arrive (the app publishes none for the
account any more, and the retention of the votes subscription and of the dead-letter topic has
passed since): delete the user's Votes and UserErasures rows, one key range (UserHash, UserId)
each, which moves no count since "none" counts nothing (an event of the user arriving after that
would count again).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner

from schemas.counters import Counts, total
from schemas.records import PostUser, hour_of_us
from schemas.vote_states import NONE, Erasure, Hold, LatestVote
from spanner_reads.my_votes import votes_of_user
from spanner_store.database import commit_mutations, run_with_retries
from spanner_store.tables import USER_ERASURE_COLUMNS, USER_ERASURES, timestamp_micros, user_hash
from spanner_store.vote_rows import StoredVote, erasure, holds_of
from spanner_writes.votes import apply_all_vote_states
from upvotes.operations.moderation import FORGET_USER, Adjustment, adjustment_of, record


class Retractions(NamedTuple):
    """What a request does to one user's stored votes (plan_retractions)."""

    states: dict[PostUser, LatestVote]  # a "none" state per vote to retract
    counts: Counts  # what those votes counted, negated: the change they make, summed over posts
    kept: int  # votes later than the forget time: cast after it, they count


def counts_to_retract(votes: Iterable[StoredVote], holds: Iterable[Hold] = ()) -> Counts:
    """What a request recorded after these votes were read retracts of them, negated and summed
    over posts: all of them, since plan_retractions retracts every vote stored before the record,
    whatever its time. What the audit row records, known before the record's commit fixes F: what
    each vote contributes now, given the user's `holds` (nothing while a suspension holds it out). Pure."""
    holds = tuple(holds)
    return total(vote.contribution(holds).negated() for vote in votes)


def plan_retractions(
    votes: Iterable[StoredVote], request: Erasure, recorded_at: datetime, holds: Iterable[Hold] = ()
) -> Retractions:
    """A "none" state for each vote that is not "none" and was stored before the request was
    recorded (`recorded_at`) or is no later than its erasure: at the forget time, or just after the
    vote's own time if that is later (a publisher's clock ahead), on that vote's post alone. A
    retraction stands for no event from the stream (events=0) and adds no voter; its count is what
    the vote contributes now, given the user's `holds`. Pure."""
    holds = tuple(holds)
    states: dict[PostUser, LatestVote] = {}
    counts = Counts()
    kept = 0
    for vote in votes:
        if vote.vote == NONE:
            continue
        if vote.order > request.order and (vote.applied_at is None or vote.applied_at > recorded_at):
            kept += 1  # the user's own vote, cast and applied after the request
            continue
        at_us = max(request.at_us, vote.voted_at_us + 1)
        states[PostUser(vote.post_id, vote.user_id)] = LatestVote(
            NONE, at_us, request.event_id, hour_of_us(at_us), 0, False
        )
        counts = counts.plus(vote.contribution(holds).negated())
    return Retractions(states, counts, kept)


def _holds_of_user(database, user_id: str) -> tuple[Hold, ...]:
    """The user's active suspensions, for the audit's figures (the retractions themselves read them
    in their own transactions)."""
    with database.snapshot() as snapshot:
        return holds_of(snapshot, [user_id]).get(user_id, ())


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
        raise RequestIdInUse(
            f"ID {request_id!r} is already used by a {request.kind} of "
            f"{request.user_id or request.post_id!r}: choose another ID"
        )
    return request


def _erasure_row(request_id: str, user_id: str, forgotten_through) -> tuple:
    """The request's UserErasures row; `forgotten_through` is spanner.COMMIT_TIMESTAMP when it is recorded."""
    return (user_hash(user_id), user_id, request_id, forgotten_through)


def _write_missing_erasure(database, request: Adjustment) -> None:
    """The erasure of a request recorded before UserErasures existed, written by its rerun with the
    request's own forget time. Inserted, never rewritten: a request that has its row keeps it."""
    assert request.user_id is not None  # a forget-user request's (_recorded checks it is the user's)
    row = _erasure_row(request.adjustment_id, request.user_id, request.as_of)
    try:
        run_with_retries(
            lambda: commit_mutations(
                database, lambda batch: batch.insert(USER_ERASURES, columns=USER_ERASURE_COLUMNS, values=[row])
            )
        )
    except exceptions.AlreadyExists:
        pass  # recorded with the request (or by an earlier rerun)


def forget_user(
    database, request_id: str, user_id: str, reason: str, actor: str, rows_per_commit: int = 1_000
) -> ForgetResult:
    """Retracts every vote of `user_id`, now and in flight, as of the commit timestamp of the
    request's record (see the module docstring); idempotent per `request_id`."""
    request = _recorded(database, request_id, user_id)
    holds = _holds_of_user(database, user_id)
    written = False
    if request is None:
        found = counts_to_retract(votes_of_user(database, user_id), holds)
        erasure_row = _erasure_row(request_id, user_id, spanner.COMMIT_TIMESTAMP)
        written = record(
            database,
            Adjustment(request_id, "", FORGET_USER, found, reason, actor, None, None, user_id),
            lambda batch: batch.insert(USER_ERASURES, columns=USER_ERASURE_COLUMNS, values=[erasure_row]),
            as_of_committed=True,
        )
        # Read back for F: this run's record with its commit time, or that of a run of the same ID racing it.
        request = _recorded(database, request_id, user_id)
        assert request is not None  # recorded: by this run, or by a run of the same ID racing it
    if not written:
        _write_missing_erasure(database, request)
    # Read after the record: every state applied before it is here, every one after it saw the erasure.
    assert request.as_of is not None and request.created_at is not None  # read back: its record's commit time
    plan = plan_retractions(
        votes_of_user(database, user_id),
        erasure(request_id, timestamp_micros(request.as_of)),
        request.created_at,
        holds,
    )
    totals = apply_all_vote_states(database, plan.states, rows_per_commit)
    return ForgetResult(
        request,
        written,
        totals.applied,
        len({key.post_id for key in plan.states}),
        plan.kept,
        totals.superseded,
        totals.commits,
    )
