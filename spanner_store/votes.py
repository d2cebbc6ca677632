"""Deprecated (removed in 0.2.0, CHANGELOG.md): "my vote" moved to spanner_reads.my_votes,
StoredVote to spanner_store.vote_rows. Real imports, seen by the import contracts (.importlinter)."""

from spanner_reads import my_votes
from spanner_store import vote_rows
from spanner_store.moved import forward

__getattr__ = forward(__name__, {"vote_of": my_votes, "votes_of_user": my_votes, "StoredVote": vote_rows})
