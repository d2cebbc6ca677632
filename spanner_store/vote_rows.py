"""The Votes and UserErasures rows as both sides read them: a user's stored vote state per post
(`StoredVote`), and the erasures that put a floor under a user's votes. The vote-state sink
(spanner_writes/votes.py) reads them in the transaction that moves them; "my vote" and erasure
requests (spanner_reads/my_votes.py, upvotes/operations/forget_user.py) read them in snapshots."""
from __future__ import annotations

from datetime import datetime
from typing import Iterable, NamedTuple

from schemas.delta_ids import forget_event_id
from schemas.records import PostUser, hour_of_us
from schemas.vote_states import Erasure, VoteOrder, order_of
from spanner_store.key_sets import KeySet
from spanner_store.tables import (
    USER_ERASURE_COLUMNS, USER_ERASURES, VOTES, micros_timestamp, timestamp_micros, user_rows_range, vote_key,
)

READ_COLUMNS = ("UserId", "PostId", "Vote", "VotedAt", "EventId", "EventHour", "AppliedAt")


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

    @property
    def order(self) -> VoteOrder:
        return order_of(self.vote, self.voted_at_us, self.event_id)

    def to_json(self) -> dict:
        """What "my vote" answers (`upvotes read --user`, GET /v1/posts/{post}/votes/{user})."""
        return {"post_id": self.post_id, "user_id": self.user_id, "vote": self.vote,
                "voted_at": micros_timestamp(self.voted_at_us).isoformat(), "event_id": self.event_id or None,
                "applied_at": None if self.applied_at is None else self.applied_at.isoformat()}


def stored(row) -> StoredVote:
    user_id, post_id, vote, voted_at, event_id, event_hour, applied_at = row
    return StoredVote(post_id, user_id, vote, timestamp_micros(voted_at), event_id, int(event_hour.timestamp()),
                      applied_at)


def stored_votes(reader, keys: Iterable[PostUser]) -> dict[PostUser, StoredVote]:
    """The stored states of these keys (absent: never voted), read by `reader` (a transaction or a snapshot)."""
    keyset = KeySet(keys=[list(vote_key(key.post_id, key.user_id)) for key in keys])
    found = (stored(row) for row in reader.read(VOTES, columns=READ_COLUMNS, keyset=keyset))
    return {PostUser(vote.post_id, vote.user_id): vote for vote in found}


def erasures_of(reader, user_ids: Iterable[str]) -> dict[str, Erasure]:
    """The newest erasure of each of these users that has one (one key range per user), read by
    `reader` (a transaction or a snapshot)."""
    user_ids = sorted(set(user_ids))
    newest: dict[str, Erasure] = {}
    if not user_ids:
        return newest
    for _, user_id, request_id, through in reader.read(USER_ERASURES, columns=USER_ERASURE_COLUMNS,
                                                       keyset=user_rows_range(*user_ids)):
        found = erasure(request_id, timestamp_micros(through))
        if user_id not in newest or found.order > newest[user_id].order:
            newest[user_id] = found
    return newest
