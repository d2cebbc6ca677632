"""A user's own votes, as applied so far: "my vote" on one post (`upvotes read --user`, the
service's private route), and every vote of one user (one key range, what an erasure request reads)."""

from __future__ import annotations

from schemas.records import PostUser
from spanner_store.tables import VOTES, user_rows_range
from spanner_store.vote_rows import READ_COLUMNS, StoredVote, stored, stored_votes


def vote_of(database, post_id: str, user_id: str) -> StoredVote | None:
    """One user's vote on one post ("my vote"), as applied so far (strong read); None: never voted."""
    with database.snapshot() as snapshot:
        return stored_votes(snapshot, [PostUser(post_id, user_id)]).get(PostUser(post_id, user_id))


def votes_of_user(database, user_id: str) -> list[StoredVote]:
    """Every vote state of one user, one key range: it costs that user's votes, not the catalogue."""
    with database.snapshot() as snapshot:
        return [stored(row) for row in snapshot.read(VOTES, columns=READ_COLUMNS, keyset=user_rows_range(user_id))]
