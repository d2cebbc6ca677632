"""The Votes, UserErasures and UserSuspensions rows as both sides read them: a user's stored vote
state per post (`StoredVote`, with whether a suspension holds it out of the counts), the erasures
that put a floor under a user's votes, and the user's active suspensions (`holds_of`). The
vote-state sink (spanner_writes/votes.py) and the suspensions' passes (upvotes/operations/suspension_passes.py)
read them in the transaction that moves them; "my vote", erasure and suspension requests
(spanner_reads/my_votes.py, upvotes/operations/) read them in snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

from schemas.counters import Counts
from schemas.delta_ids import forget_event_id
from schemas.records import PostUser, hour_of_us
from schemas.vote_states import Erasure, Hold, VoteOrder, contributed, held_out, order_of
from spanner_store.database import read_rows
from spanner_store.key_sets import KeySet
from spanner_store.tables import (
    HELD_OUT,
    USER_ERASURE_COLUMNS,
    USER_ERASURES,
    USER_SUSPENSION_COLUMNS,
    USER_SUSPENSIONS,
    VOTES,
    micros_timestamp,
    timestamp_micros,
    user_rows_range,
    vote_key,
)

READ_COLUMNS = ("UserId", "PostId", "Vote", "VotedAt", "EventId", "EventHour", "AppliedAt", HELD_OUT)


def erasure(request_id: str, forgotten_through_us: int) -> Erasure:
    """The floor an erasure request (upvotes/operations/forget_user.py) puts under its user's votes."""
    return Erasure(forgotten_through_us, forget_event_id(request_id), hour_of_us(forgotten_through_us))


class StoredVote(NamedTuple):
    """One user's latest vote state on one post, as the Votes table holds it."""

    post_id: str
    user_id: str
    vote: str
    voted_at_us: int  # the event time it was chosen by, microseconds since the epoch
    event_id: str
    event_hour: int  # the hour (epoch seconds) its vote is counted in
    applied_at: datetime | None = None  # commit time of the write
    held_out: bool = False  # its HeldOut mark (issue 46): held out of the counts by a suspension of the user

    @property
    def order(self) -> VoteOrder:
        return order_of(self.vote, self.voted_at_us, self.event_id)

    def is_out(self, holds: Iterable[Hold] = ()) -> bool:
        """Whether it counts nothing now: marked, or covered by an applied hold of its user (`holds`)."""
        return held_out(self.vote, self.voted_at_us, self.held_out, holds)

    def contribution(self, holds: Iterable[Hold] = ()) -> Counts:
        """What this stored state adds to the counts now, given its user's holds: its vote's, or
        nothing while held out (schemas/vote_states.py `held_out`)."""
        return contributed(self.vote, self.is_out(holds))

    def to_json(self) -> dict:
        """What "my vote" answers (`upvotes read --user`, GET /v1/posts/{post}/votes/{user})."""
        return {
            "post_id": self.post_id,
            "user_id": self.user_id,
            "vote": self.vote,
            "voted_at": micros_timestamp(self.voted_at_us).isoformat(),
            "event_id": self.event_id or None,
            "applied_at": None if self.applied_at is None else self.applied_at.isoformat(),
        }


def stored(row) -> StoredVote:
    user_id, post_id, vote, voted_at, event_id, event_hour, applied_at, held_out = row
    return StoredVote(
        post_id,
        user_id,
        vote,
        timestamp_micros(voted_at),
        event_id,
        int(event_hour.timestamp()),
        applied_at,
        bool(held_out),
    )


def stored_votes(reader, keys: Iterable[PostUser]) -> dict[PostUser, StoredVote]:
    """The stored states of these keys (absent: never voted), read by `reader` (a transaction or a snapshot)."""
    keyset = KeySet(keys=[list(vote_key(key.post_id, key.user_id)) for key in keys])
    found = (
        stored(row)
        for row in read_rows(lambda retry: reader.read(VOTES, columns=READ_COLUMNS, keyset=keyset, retry=retry))
    )
    return {PostUser(vote.post_id, vote.user_id): vote for vote in found}


# What moving a stored vote in or out of the counts needs of it (upvotes/operations/suspension_passes.py):
# fewer columns than READ_COLUMNS, for reads of a ring's every vote (the client decodes each value,
# a timestamp slowest: measured, most of a pass's client time). VotedAt only when a suspension of
# the users holds out the votes since a time.
MOVE_COLUMNS = ("UserId", "PostId", "Vote", "EventHour", HELD_OUT)


def votes_to_move(reader, keyset, with_times: bool = True, retry=None) -> Iterator[StoredVote]:
    """The stored votes of `keyset` (key ranges of users, or keys), with MOVE_COLUMNS only (no
    event_id, no applied_at; without `with_times`, voted_at_us 0), read by `reader` (a transaction
    or a snapshot), with the client's `retry` unless one is given (spanner_store.database.read_rows)."""
    columns = MOVE_COLUMNS + (("VotedAt",) if with_times else ())
    options = {} if retry is None else {"retry": retry}
    for row in reader.read(VOTES, columns=columns, keyset=keyset, **options):
        voted_at = timestamp_micros(row[5]) if with_times else 0
        yield StoredVote(row[1], row[0], row[2], voted_at, "", int(row[3].timestamp()), None, bool(row[4]))


def erasures_of(reader, user_ids: Iterable[str]) -> dict[str, Erasure]:
    """The newest erasure of each of these users that has one (one key range per user), read by
    `reader` (a transaction or a snapshot)."""
    user_ids = sorted(set(user_ids))
    newest: dict[str, Erasure] = {}
    if not user_ids:
        return newest
    for _, user_id, request_id, through in read_rows(
        lambda retry: reader.read(
            USER_ERASURES, columns=USER_ERASURE_COLUMNS, keyset=user_rows_range(*user_ids), retry=retry
        )
    ):
        found = erasure(request_id, timestamp_micros(through))
        if user_id not in newest or found.order > newest[user_id].order:
            newest[user_id] = found
    return newest


class UserSuspension(NamedTuple):
    """One UserSuspensions row: a suspension of one user, active until restored."""

    user_id: str
    suspension_id: str
    since: datetime | None  # votes cast at or after it are held out; None: every vote
    restored_at: datetime | None  # None: active
    applied: bool = False  # a pass moved every vote it covers out at once (only while active)

    @property
    def hold(self) -> Hold:
        return Hold(self.suspension_id, None if self.since is None else timestamp_micros(self.since), self.applied)


def suspensions_of(reader, user_ids: Iterable[str]) -> list[UserSuspension]:
    """Every suspension row of these users, active or restored (one key range per user), read by
    `reader` (a transaction or a snapshot)."""
    user_ids = sorted(set(user_ids))
    if not user_ids:
        return []
    return [
        UserSuspension(user_id, suspension_id, since, restored_at, bool(applied))
        for _, user_id, suspension_id, since, restored_at, applied in read_rows(
            lambda retry: reader.read(
                USER_SUSPENSIONS, columns=USER_SUSPENSION_COLUMNS, keyset=user_rows_range(*user_ids), retry=retry
            )
        )
    ]


def holds_of(reader, user_ids: Iterable[str]) -> dict[str, tuple[Hold, ...]]:
    """The active suspensions of each of these users that has one (schemas/vote_states.py `held`
    says which of a user's votes they hold out, `held_out` which count nothing now), read by
    `reader` (a transaction or a snapshot)."""
    holds: dict[str, list[Hold]] = {}
    for row in suspensions_of(reader, user_ids):
        if row.restored_at is None:
            holds.setdefault(row.user_id, []).append(row.hold)
    return {user_id: tuple(found) for user_id, found in holds.items()}
