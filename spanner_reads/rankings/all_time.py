"""The all-time ranking, by exact upvotes (the default: `upvotes top`, GET /v1/top): fresh
without a fold, the folded ranking plus recent risers, re-ranked by exact counts.

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
broken either way).

When the bound is in the way, the read reads what decides it (spanner_reads/fresh_side.py): the
posts of the commits whose thresholds are largest, until the thresholds left are within what the
K-th beats (each post of a commit read is then considered, so that commit bounds nothing), and the
folded side deeper when F itself is, all within its budget. Otherwise the listed posts have their
exact counts, and no post left out has more than `bound` upvotes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from schemas import post_hash
from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA, RESOLVE_POSTS, Resolver, commits_to_read, read_fresh_side
from spanner_reads.rankings.ranking import RankedPost, Ranking, Tab, check_size, snapshot_of
from spanner_reads.reads import counts_in_snapshot, ranked_posts
from spanner_store.database import read_timestamp

UPVOTES = "upvotes"


@dataclass(frozen=True)
class FreshTop:
    posts: list[PostTotals]  # exact counts, highest upvotes first
    as_of: datetime  # the snapshot every count was read at
    folded_through: datetime | None  # the newest finished fold's snapshot, None if never folded
    exact: bool  # certified: these are the top K by exact upvotes (see the module docstring)
    bound: int | None  # no post left out has more upvotes than this; None: every post was considered
    considered: int  # posts whose exact counts were read
    candidate_rows: int  # TopCandidates rows read (commits since the fold cursor)
    commits_read: int = 0  # commits whose every post was read, to certify the answer

    @property
    def ranked(self) -> list[RankedPost]:
        """The posts as every ranking lists them, each scored by its upvotes."""
        return [RankedPost(post, post.counts.upvotes) for post in self.posts]

    def to_json(self) -> dict:
        """The answer's header: as of when, and whether it is certified."""
        return {
            "as_of": self.as_of.isoformat(),
            "exact": self.exact,
            "bound": self.bound,
            "folded_through": None if self.folded_through is None else self.folded_through.isoformat(),
        }


def _order(totals: PostTotals) -> tuple:
    """The index's own tie order (PostHash, PostId), so equal counts always come out the same way."""
    return (-totals.counts.upvotes, post_hash(totals.post_id), totals.post_id)


def fresh_top(
    database, k: int = 10, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0, resolve_posts: int = RESOLVE_POSTS
) -> FreshTop:
    """The top `k` posts by exact upvotes (see the module docstring), read in one snapshot,
    strong or `staleness_s` seconds old, adding at most `resolve_posts` posts to certify it."""
    check_size(k, extra)
    with snapshot_of(database, staleness_s) as snapshot:
        side = read_fresh_side(snapshot)
        resolver = Resolver(snapshot, side.candidates, resolve_posts)
        counts: dict[str, PostTotals] = {}

        def consider(post_ids: Iterable[str]) -> None:
            new = [p for p in dict.fromkeys(post_ids) if p not in counts]
            counts.update((t.post_id, t) for t in counts_in_snapshot(snapshot, new))

        limit = k + extra
        folded = ranked_posts(snapshot, limit)
        consider([p.post_id for p in folded] + sorted(side.candidates.post_ids) + side.skipped)
        while True:
            ranked = sorted(counts.values(), key=_order)[:k]
            complete = len(folded) < limit  # the index held fewer: every post was considered
            floor = None if complete else folded[-1].counts.upvotes
            bound = None if floor is None else floor + sum(c.threshold for c in resolver.open_commits)
            exact = bound is None or (len(ranked) == k and ranked[-1].counts.upvotes >= bound)
            if exact:
                break
            assert floor is not None  # else bound is None: exact
            room = ranked[-1].counts.upvotes - floor if len(ranked) == k else -1
            if room < 0:  # the folded side itself is in the way: read deeper into the index
                if not resolver.spend(3 * limit):
                    break
                limit *= 4
                folded = ranked_posts(snapshot, limit)
                consider(p.post_id for p in folded)
                continue
            added = resolver.read(
                commits_to_read(
                    [(c.commit_id, c.threshold) for c in resolver.open_commits if c.threshold > 0], room, strict=False
                ),
                counts,
            )
            if added is None:
                break
            consider(added)
        as_of = read_timestamp(snapshot)
    return FreshTop(
        ranked, as_of, side.folded_through, exact, bound, len(counts), side.candidates.rows, resolver.commits_read
    )


class AllTime(Ranking[FreshTop]):
    """By all-time exact upvotes: what `upvotes top` and GET /v1/top list without --by."""

    name = UPVOTES
    help = "all-time exact upvotes"
    tab = Tab("all", "All time", "n=10")

    def read(self, database, k: int, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0) -> FreshTop:
        return fresh_top(database, k, extra, staleness_s)

    def title(self, page: FreshTop) -> str:
        return "upvotes"

    def bound_text(self, page: FreshTop) -> str:
        return f"up to {page.bound:,}"

    def line_header(self, page: FreshTop) -> dict:
        """Its lines predate "by" and "bound" and keep the fields they had."""
        return {key: value for key, value in page.to_json().items() if key in ("as_of", "exact", "folded_through")}


RANKING = AllTime()
