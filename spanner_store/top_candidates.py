"""The TopCandidates table: each delta commit's biggest risers, so that the fresh top posts
(spanner_reads/rankings/all_time.py, which says why the guarantee holds) need no fold.

- Writing (the write side: spanner_writes.deltas.add_delta_writes, for every writer of delta
  rows): every commit of delta rows also inserts one TopCandidates row *in the same commit*:
  the posts with the largest upvote sums in that commit (at most CANDIDATES_PER_COMMIT) and
  Threshold, the largest upvote sum of any post of the commit that is not listed (0 if every
  post with a positive sum is listed). The row's key
  starts with a shard taken from the commit's random ID, so these inserts spread over
  COMMIT_SHARDS key ranges and no single row or range takes every commit's write.
- Reading (`candidates_since`): the rows committed after a time, a seek per shard, each with its
  key, which is also the key of its commit's DeltaCommits row (the commit's every post): a read
  that its bounds leave uncertified reads those rows (spanner_reads/fresh_side.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from google.cloud import spanner

from schemas.hot_score import rise_of
from schemas.records import PostDelta
from spanner_store.tables import TOP_CANDIDATE_COLUMNS, TOP_CANDIDATES, commit_shard, committed_after, hour_timestamp

# Posts listed per commit. A commit holds one bundle's deltas; listing its 16 biggest risers
# keeps the row small (at most 16 IDs of 128 characters) while the threshold stays 0 for
# any commit touching 16 posts or fewer.
CANDIDATES_PER_COMMIT = 16


class CandidateRow(NamedTuple):
    """One commit's biggest risers and the bounds on every other post of that commit."""

    post_ids: list[str]
    threshold: int  # the largest upvote sum of a post not listed (clipped at 0)
    # The largest rise (schemas/hot_score.py rise_of, per delta row, summed) of a post not listed,
    # and the newest event hour (epoch seconds) of the commit: the trending rankings' bound.
    rise_threshold: float = 0.0
    newest_hour: int | None = None


def commit_candidates(deltas: Iterable[PostDelta], limit: int = CANDIDATES_PER_COMMIT) -> CandidateRow:
    """The `limit` posts with the largest positive sums of the ranking counter in these deltas,
    the largest sum of any post not listed (clipped at 0: a falling post cannot overtake anyone),
    and for the trending rankings the largest rise of a post not listed and the newest event hour.

    A rise is clipped at 0 per delta row, not per post: a flip moves a vote from an old hour to a
    new one, which nets 0 upvotes but raises the hot score and a last-hours count."""
    deltas = list(deltas)
    sums: dict[str, int] = {}
    rises: dict[str, float] = {}
    for delta in deltas:
        sums[delta.post_id] = sums.get(delta.post_id, 0) + delta.sums.counts.upvotes
        rises[delta.post_id] = rises.get(delta.post_id, 0.0) + rise_of(delta.sums.counts)
    ranked = heapq.nsmallest(limit + 1, sums.items(), key=lambda item: (-item[1], item[0]))
    listed = [post_id for post_id, total in ranked[:limit] if total > 0]
    threshold = max(0, ranked[limit][1]) if len(ranked) > limit else 0
    unlisted = set(listed)
    rise_threshold = max((rise for post_id, rise in rises.items() if post_id not in unlisted), default=0.0)
    newest_hour = max((delta.event_hour for delta in deltas), default=None)
    return CandidateRow(listed, threshold, rise_threshold, newest_hour)


def candidate_mutation_row(deltas: list[PostDelta], commit_id: str) -> tuple:
    """The TopCandidates row to insert in the same commit as `deltas` (TOP_CANDIDATE_COLUMNS),
    keyed by the commit's random ID (the one its DeltaCommits row has too)."""
    row = commit_candidates(deltas)
    newest = None if row.newest_hour is None else hour_timestamp(row.newest_hour)
    return (
        commit_shard(commit_id),
        spanner.COMMIT_TIMESTAMP,
        commit_id,
        row.post_ids,
        row.threshold,
        row.rise_threshold,
        newest,
    )


class CommitCandidates(NamedTuple):
    """One TopCandidates row as a read finds it: one commit's listed risers, and its bounds on every
    other post of that commit."""

    shard: int
    committed_at: datetime
    commit_id: str  # its commit's random ID: the key of the commit's DeltaCommits row is the same
    post_ids: list[str]
    threshold: int  # the largest upvote sum of a post not listed
    rise_threshold: float | None  # the largest rise of a post not listed; None: a row from before the column
    newest_hour: int | None  # the newest event hour (epoch seconds) of the commit's rows


class Candidates(NamedTuple):
    """The candidate rows committed after some time (`candidates_since`), oldest first per shard."""

    commits: tuple[CommitCandidates, ...]

    @property
    def post_ids(self) -> set[str]:
        """Every post they list."""
        return {post_id for commit in self.commits for post_id in commit.post_ids}

    @property
    def rows(self) -> int:
        return len(self.commits)


def candidates_since(snapshot, since: datetime) -> Candidates:
    """The candidate rows committed after `since`. One key range per shard."""
    return Candidates(
        tuple(
            CommitCandidates(
                shard,
                committed_at,
                commit_id,
                post_ids,
                threshold,
                rise,
                None if newest is None else int(newest.timestamp()),
            )
            for shard, committed_at, commit_id, post_ids, threshold, rise, newest in snapshot.read(
                TOP_CANDIDATES, columns=TOP_CANDIDATE_COLUMNS, keyset=committed_after(since)
            )
        )
    )
