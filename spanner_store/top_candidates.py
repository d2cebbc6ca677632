"""The TopCandidates table: each delta commit's biggest risers, so that the fresh top posts
(spanner_reads/fresh_top.py, which says why the guarantee holds) need no fold.

- Writing (the write side: spanner_writes.deltas.add_delta_writes, for every writer of delta
  rows): every commit of delta rows also inserts one TopCandidates row *in the same commit*:
  the posts with the largest upvote sums in that commit (at most CANDIDATES_PER_COMMIT) and
  Threshold, the largest upvote sum of any post of the commit that is not listed (0 if every
  post with a positive sum is listed). The row's key
  starts with a shard taken from the commit's random ID, so these inserts spread over
  COMMIT_SHARDS key ranges and no single row or range takes every commit's write.
- Reading (`candidates_since`): the rows committed after a time, a seek per shard.
"""
from __future__ import annotations

import heapq
from datetime import datetime
from typing import Iterable, NamedTuple

from google.cloud import spanner

from schemas.records import PostDelta
from spanner_store.tables import TOP_CANDIDATES, commit_shard, committed_after

# Posts listed per commit. A commit holds one bundle's deltas; listing its 16 biggest risers
# keeps the row small (at most 16 IDs of 128 characters) while the threshold stays 0 for
# any commit touching 16 posts or fewer.
CANDIDATES_PER_COMMIT = 16


class CandidateRow(NamedTuple):
    """One commit's biggest risers and the bound on every other post of that commit."""

    post_ids: list[str]
    threshold: int


def commit_candidates(deltas: Iterable[PostDelta], limit: int = CANDIDATES_PER_COMMIT) -> CandidateRow:
    """The `limit` posts with the largest positive sums of the ranking counter in these deltas,
    and the largest sum of any post not listed (clipped at 0: a falling post cannot overtake anyone)."""
    sums: dict[str, int] = {}
    for delta in deltas:
        sums[delta.post_id] = sums.get(delta.post_id, 0) + delta.sums.counts.upvotes
    ranked = heapq.nsmallest(limit + 1, sums.items(), key=lambda item: (-item[1], item[0]))
    listed = [post_id for post_id, total in ranked[:limit] if total > 0]
    threshold = max(0, ranked[limit][1]) if len(ranked) > limit else 0
    return CandidateRow(listed, threshold)


def candidate_mutation_row(deltas: list[PostDelta], commit_id: str) -> tuple:
    """The TopCandidates row to insert in the same commit as `deltas` (TOP_CANDIDATE_COLUMNS),
    keyed by the commit's random ID (the one its DeltaCommits row has too)."""
    row = commit_candidates(deltas)
    return (commit_shard(commit_id), spanner.COMMIT_TIMESTAMP, commit_id, row.post_ids, row.threshold)


def candidates_since(snapshot, since: datetime) -> tuple[set[str], int, int]:
    """Posts listed by candidate rows committed after `since`, the sum of those rows'
    thresholds, and how many rows that was. One key range per shard."""
    posts: set[str] = set()
    threshold_sum = rows = 0
    for post_ids, threshold in snapshot.read(TOP_CANDIDATES, columns=("PostIds", "Threshold"),
                                             keyset=committed_after(since)):
        posts.update(post_ids)
        threshold_sum += threshold
        rows += 1
    return posts, threshold_sum, rows
