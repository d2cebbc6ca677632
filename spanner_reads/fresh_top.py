"""Fresh top posts without a fold: the folded ranking plus recent risers, re-ranked by exact counts.

The PostsByUpvotes index is only as fresh as the last fold. To rank by exact counts
(folded plus unfolded) without scanning every post's unfolded deltas:

- Writing: every commit of delta rows also inserts one TopCandidates row *in the same
  commit* (spanner_store/top_candidates.py): the posts with the largest upvote sums in that
  commit and Threshold, the largest upvote sum of any post of the commit that is not listed.
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
ChangesThrough < S, see spanner_writes/folding.py) in a commit whose candidate row does not
list p, so that delta adds at most that row's Threshold. Hence every post left out has exact upvotes <= F + T =: bound. The answer is
certified exact (`exact=True`) when the index held fewer than K+m posts (then every post
was considered) or when the K-th post's exact upvotes >= bound (ties at the boundary may be
broken either way). Otherwise the listed posts have their exact counts, and no post left
out has more than `bound` upvotes.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from schemas import post_hash
from schemas.records import PostTotals
from spanner_reads.reads import counts_in_snapshot, last_fold_snapshot, ranked_posts
from spanner_store.database import read_timestamp
from spanner_store.delta_commits import fold_cursor
from spanner_store.top_candidates import candidates_since

# m: folded posts read beyond K, so that posts falling back can be replaced by the next ones.
DEFAULT_EXTRA = 20
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class FreshTop:
    posts: list[PostTotals]  # exact counts, highest upvotes first
    as_of: datetime  # the snapshot every count was read at
    folded_through: datetime | None  # the newest finished fold's snapshot, None if never folded
    exact: bool  # certified: these are the top K by exact upvotes (see the module docstring)
    bound: int | None  # no post left out has more upvotes than this; None: every post was considered
    considered: int  # posts whose exact counts were read
    candidate_rows: int  # TopCandidates rows read (commits since the fold cursor)


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
        candidates = candidates_since(snapshot, since)
        considered = list(dict.fromkeys([p.post_id for p in folded] + sorted(candidates.post_ids) + skipped))
        counts = counts_in_snapshot(snapshot, considered)
        as_of = read_timestamp(snapshot)
    # The index's own tie order (PostHash, PostId), so equal counts always come out the same way.
    ranked = sorted(counts, key=lambda t: (-t.counts.upvotes, post_hash(t.post_id), t.post_id))[:k]
    complete = len(folded) < k + extra
    bound = None if complete else folded[-1].counts.upvotes + candidates.threshold_sum
    exact = complete or (len(ranked) == k and ranked[-1].counts.upvotes >= bound)
    return FreshTop(ranked, as_of, folded_through, exact, bound, len(considered), candidates.rows)
