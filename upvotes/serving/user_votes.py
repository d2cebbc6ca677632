""" "My vote": one user's vote on one post, as GET /v1/posts/{post_id}/votes/{user_id} and
`upvotes read --user` answer it.

The answer always has the same fields, so a client reads `vote` without first asking whether
the user ever voted:

    {"post_id", "user_id", "vote": "up" | "down" | "none", "voted_at", "event_id", "applied_at"}

A user who never voted on the post answers "vote": "none" with `voted_at`, `event_id` and
`applied_at` null; a user who took a vote back answers "none" with the time of that event.
The vote is the one the stream has applied (the Votes table, spanner_writes/votes.py): a vote
just published shows once its window is written, a few seconds later.

No FastAPI here: the CLI imports this module without the `serve` extra.
"""

from __future__ import annotations

from typing import Protocol

from schemas.vote_states import NONE
from spanner_reads.my_votes import vote_of
from spanner_store.vote_rows import StoredVote


class VoteReader(Protocol):
    def vote_of(self, post_id: str, user_id: str) -> StoredVote | None:
        """The user's stored vote on the post; None when the user never voted on it."""


class SpannerVoteReader:
    """A VoteReader on one database: a strong point read per question, never cached, so a vote
    shows as soon as it is applied. It is cheap (one Votes row, keyed by user, so a viral
    post's voters spread over the key space) and private (only a write token or the user's own
    live-page session may ask), so no cache is needed to protect Spanner from viewers."""

    def __init__(self, database) -> None:
        self._database = database

    def vote_of(self, post_id: str, user_id: str) -> StoredVote | None:
        return vote_of(self._database, post_id, user_id)


def vote_json(post_id: str, user_id: str, stored: StoredVote | None) -> dict:
    """The answer for one user's vote on one post (see the module docstring)."""
    if stored is not None:
        return stored.to_json()
    return {
        "post_id": post_id,
        "user_id": user_id,
        "vote": NONE,
        "voted_at": None,
        "event_id": None,
        "applied_at": None,
    }
