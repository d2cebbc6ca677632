"""Fresh top posts without a fold: the folded ranking plus recent risers, re-ranked by exact counts.

The PostsByUpvotes index is only as fresh as the last fold. To rank by exact counts
(folded plus unfolded) without scanning every post's unfolded deltas:

- Writing: every commit of delta rows (spanner_store.deltas.write_deltas) also inserts one
  TopCandidates row *in the same commit*: the posts with the largest upvote sums in that
  commit (at most CANDIDATES_PER_COMMIT) and Threshold, the largest upvote sum of any post
  of the commit that is not listed (0 if every post with a positive sum is listed). The
  row's key starts with a shard taken from a random ID, so these inserts spread over
  COMMIT_SHARDS key ranges and no single row or range takes every commit's write.
- Reading (`fresh_top`), in ONE read-only snapshot: the fold cursor (spanner_store.
  delta_commits.fold_cursor): C, the ChangesThrough of the finished run that vouches for the
  most, and the posts it skipped; the folded top K+m from the index; every candidate row
  committed after C (a seek per shard); then the exact counts of all those posts and of the
  skipped ones, ranked.

The guarantee. Let F be the lowest folded upvotes among the K+m folded posts read and
T the sum of the thresholds of the candidate rows read. Any post p not considered has
folded upvotes <= F (it is not in the folded top K+m of the same snapshot), and each of
its unfolded deltas was committed after C (the cursor run vouches that every delta committed
at or before C is folded, except those of the posts it skipped, which are considered; a run's
snapshot S is not that bound: a run that reached its budget vouches only up to its
ChangesThrough < S, see spanner_store/folding.py) in a commit whose candidate row does not
list p, so that delta adds at most that row's Threshold. Hence every post left out has exact upvotes <= F + T =: bound. The answer is
certified exact (`exact=True`) when the index held fewer than K+m posts (then every post
was considered) or when the K-th post's exact upvotes >= bound (ties at the boundary may be
broken either way). Otherwise the listed posts have their exact counts, and no post left
out has more than `bound` upvotes.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, NamedTuple

from google.cloud import spanner

from schemas import post_hash
from schemas.records import PostDelta, PostTotals
from spanner_store.delta_commits import fold_cursor
from spanner_store.reads import counts_in_snapshot, last_fold_snapshot, ranked_posts
from spanner_store.tables import COMMIT_SHARDS, TOP_CANDIDATES, commit_shard

# Posts listed per commit. A commit holds one bundle's deltas; listing its 16 biggest risers
# keeps the row small (at most 16 IDs of 128 characters) while the threshold stays 0 for
# any commit touching 16 posts or fewer.
CANDIDATES_PER_COMMIT = 16
# m: folded posts read beyond K, so that posts falling back can be replaced by the next ones.
DEFAULT_EXTRA = 20
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class CandidateRow(NamedTuple):
    """One commit's biggest risers and the bound on every other post of that commit."""

    post_ids: list[str]
    threshold: int


def commit_candidates(deltas: Iterable[PostDelta], limit: int = CANDIDATES_PER_COMMIT) -> CandidateRow:
    """The `limit` posts with the largest positive upvote sums in these deltas, and the largest
    sum of any post not listed (clipped at 0: a falling post cannot overtake anyone)."""
    sums: dict[str, int] = {}
    for delta in deltas:
        sums[delta.post_id] = sums.get(delta.post_id, 0) + delta.upvotes
    ranked = heapq.nsmallest(limit + 1, sums.items(), key=lambda item: (-item[1], item[0]))
    listed = [post_id for post_id, total in ranked[:limit] if total > 0]
    threshold = max(0, ranked[limit][1]) if len(ranked) > limit else 0
    return CandidateRow(listed, threshold)


def candidate_mutation_row(deltas: list[PostDelta], commit_id: str) -> tuple:
    """The TopCandidates row to insert in the same commit as `deltas` (TOP_CANDIDATE_COLUMNS),
    keyed by the commit's random ID (the one its DeltaCommits row has too)."""
    row = commit_candidates(deltas)
    return (commit_shard(commit_id), spanner.COMMIT_TIMESTAMP, commit_id, row.post_ids, row.threshold)


@dataclass(frozen=True)
class FreshTop:
    posts: list[PostTotals]  # exact counts, highest upvotes first
    as_of: datetime  # the snapshot every count was read at
    folded_through: datetime | None  # the newest finished fold's snapshot, None if never folded
    exact: bool  # certified: these are the top K by exact upvotes (see the module docstring)
    bound: int | None  # no post left out has more upvotes than this; None: every post was considered
    considered: int  # posts whose exact counts were read
    candidate_rows: int  # TopCandidates rows read (commits since the fold cursor)


def candidates_since(snapshot, since: datetime) -> tuple[set[str], int, int]:
    """Posts listed by candidate rows committed after `since`, the sum of those rows'
    thresholds, and how many rows that was. One key range per shard."""
    keyset = spanner.KeySet(ranges=[
        spanner.KeyRange(start_open=[shard, since], end_closed=[shard]) for shard in range(COMMIT_SHARDS)
    ])
    posts: set[str] = set()
    threshold_sum = rows = 0
    for post_ids, threshold in snapshot.read(TOP_CANDIDATES, columns=("PostIds", "Threshold"), keyset=keyset):
        posts.update(post_ids)
        threshold_sum += threshold
        rows += 1
    return posts, threshold_sum, rows


def read_timestamp(snapshot) -> datetime:
    """The timestamp a multi-use snapshot reads at, known once it has read."""
    return snapshot._transaction_read_timestamp  # noqa: SLF001 - the client keeps it here, with no public accessor


def fresh_top(database, k: int = 10, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0) -> FreshTop:
    """The top `k` posts by exact upvotes (see the module docstring), read in one snapshot,
    strong or `staleness_s` seconds old."""
    if k < 1 or extra < 0:
        raise ValueError("k must be at least 1 and extra at least 0")
    options = {"exact_staleness": timedelta(seconds=staleness_s)} if staleness_s > 0 else {}
    with database.snapshot(multi_use=True, **options) as snapshot:
        folded = ranked_posts(snapshot, k + extra)
        folded_through = last_fold_snapshot(snapshot)
        cursor = fold_cursor(snapshot)
        # No cursor: a database whose folds predate the change log; each of those scanned every post.
        since = cursor.changes_through if cursor else folded_through or EPOCH
        skipped = sorted(post.post_id for post in cursor.skipped) if cursor else []
        candidates, threshold_sum, rows = candidates_since(snapshot, since)
        considered = list(dict.fromkeys([p.post_id for p in folded] + sorted(candidates) + skipped))
        counts = counts_in_snapshot(snapshot, considered)
        as_of = read_timestamp(snapshot)
    # The index's own tie order (PostHash, PostId), so equal counts always come out the same way.
    ranked = sorted(counts, key=lambda t: (-t.upvotes, post_hash(t.post_id), t.post_id))[:k]
    complete = len(folded) < k + extra
    bound = None if complete else folded[-1].upvotes + threshold_sum
    exact = complete or (len(ranked) == k and ranked[-1].upvotes >= bound)
    return FreshTop(ranked, as_of, folded_through, exact, bound, len(considered), rows)
