"""Deprecated: "my vote" moved to spanner_reads.my_votes, StoredVote to spanner_store.vote_rows."""
from spanner_store.moved import forward

__getattr__ = forward(__name__, {"vote_of": "spanner_reads.my_votes", "votes_of_user": "spanner_reads.my_votes",
                                 "StoredVote": "spanner_store.vote_rows"})
