"""The votes cast since a time, for `upvotes suspects` (the detection itself is pure:
upvotes/operations/suspect_rules.py).

The Votes table has no index by time (one would cost every vote state a mutation per column of
its entry, past the sink's budget), so the read follows the change log instead, in one strong
snapshot:

1. the DeltaCommits rows committed since `since` less the clock skew the event-time policy allows
   (a vote may claim a time up to that far ahead of its publication, so one cast at or after
   `since` was applied no earlier than that): one seek per shard, one row per commit since then,
   whatever the writer. The vote-state sink's rows list the users whose states they applied;
2. those users' Votes rows, one key range per user, USERS_PER_READ users a read: every stored
   vote of theirs, kept ones included, of which those cast at or after `since` (their VotedAt),
   up or down and not held out by a suspension, are the votes returned.

So its cost follows the commits since the window's start and the stored votes of the users who
voted in it, never the catalogue nor the users who did not vote. A vote state that moved no count
(the same vote again, or one a suspension holds out) writes no change-log row: such a user is only
read if another of their states moved a count in the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from schemas.contract import DEFAULT_EVENT_TIME_POLICY
from schemas.vote_states import NONE
from spanner_store.database import read_timestamp
from spanner_store.delta_commits import users_of_changes
from spanner_store.tables import VOTES, timestamp_micros, user_rows_range
from spanner_store.vote_rows import READ_COLUMNS, holds_of, stored

USERS_PER_READ = 2_000
DEFAULT_SKEW = timedelta(seconds=DEFAULT_EVENT_TIME_POLICY.max_clock_skew_s)


class CastVote(NamedTuple):
    """One stored vote as the detector sees it: a user's up or down on a post, at its event time."""

    user_id: str
    post_id: str
    vote: str  # "up" or "down"
    at_us: int  # microseconds since the epoch


class RecentVotes(NamedTuple):
    votes: list[CastVote]  # cast at or after `since`, up or down, counted (not held out)
    as_of: datetime  # the snapshot's timestamp
    commits_read: int  # DeltaCommits rows read
    users_read: int  # users whose Votes rows were read
    votes_rows_read: int  # Votes rows read (the users' whole history)

    @property
    def rows_read(self) -> int:
        return self.commits_read + self.votes_rows_read


def votes_since(database, since: datetime, skew: timedelta = DEFAULT_SKEW) -> RecentVotes:
    """Every counted up or down vote cast at or after `since`, read as the module docstring says."""
    since_us = timestamp_micros(since)
    votes: list[CastVote] = []
    rows = 0
    with database.snapshot(multi_use=True) as snapshot:
        users, commits = users_of_changes(snapshot, since - skew)
        ordered = sorted(users)
        for start in range(0, len(ordered), USERS_PER_READ):
            chunk = ordered[start : start + USERS_PER_READ]
            holds = holds_of(snapshot, chunk)  # a suspended user's votes count nothing: not evidence
            for row in snapshot.read(VOTES, columns=READ_COLUMNS, keyset=user_rows_range(*chunk)):
                rows += 1
                vote = stored(row)
                if vote.voted_at_us >= since_us and vote.vote != NONE and not vote.is_out(holds.get(vote.user_id, ())):
                    votes.append(CastVote(vote.user_id, vote.post_id, vote.vote, vote.voted_at_us))
        as_of = read_timestamp(snapshot)
    return RecentVotes(votes, as_of, commits, len(ordered), rows)
