"""The hot ranking (`upvotes top --by hot`, GET /v1/top?by=hot): what is viral now, by hot score,
exact and certified without a fold (docs/reading.md, "What is viral now"). It reads the way every
ranking does (spanner_reads/rankings/__init__.py).

The folded side is the Posts(HotKey DESC) index; an unread post has folded S <= F, the lowest of
the K+m read (0 when the index held fewer). Each candidate row adds at most
RiseThreshold * 2^(NewestHour / H) to S. The bound, F plus those, is summed in log2
(schemas/hot_score.py log2_sum). The HotKey of a post is that of its hourly rows (the fold
computes both in one transaction), so it is exactly the folded side of the score read here.

What guards that against writers that do not keep HotKey (issue 44): every post's HotKeyThrough,
the hourly watermark its key was computed at, is held to its hourly watermark by the database
(the HotKeyCurrent constraint, schemas/posts.sql), so a fold of an older version cannot fold a
fenced post's hourly rows without it (it skips the post, whose deltas the reads add); and the
answer is certified only once `hot_backfilled` says the current generation's backfill has fenced
every post, under the H read here (spanner_store/ranking_settings.py).

When the bounds leave the K-th uncertified, the read reads the commits in the way
(spanner_reads/fresh_side.py) and, when the folded side itself is, deeper into the index, within
its budget.

Cost: K+m index rows, one row per commit since the cursor, and the hourly rows of the posts
considered: none of it grows with the catalogue.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from google.cloud import spanner

from schemas.counters import Counts, total
from schemas.hot_score import HOUR_S, HotScore, hot_score, log2_of_rise, log2_sum
from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA, RESOLVE_POSTS, Resolver, commits_to_read, read_fresh_side
from spanner_reads.hourly import hours_of_posts
from spanner_reads.rankings.ranking import RankedPost, Ranking, RankingUnavailable, Tab, check_size, snapshot_of
from spanner_reads.rankings.trending_top import HOT, TrendingTop
from spanner_store.database import read_timestamp
from spanner_store.ranking_settings import read_settings
from spanner_store.tables import HOT_KEY, POSTS, POSTS_BY_HOT
from spanner_store.top_candidates import CommitCandidates

# log2 units: the bound's and the scores' rounding (a few ulps of ~41,000) is far below this.
LOG2_MARGIN = 1e-9


class HotRankingUnavailable(RankingUnavailable):
    """The database has no hot half-life recorded: it was provisioned before the hot ranking."""


def _rise_log2(commit: CommitCandidates, half_life_hours: float) -> float:
    """log2 of what a commit can have added to S of a post it does not list: +inf for a row from
    before the rise bounds (it bounds nothing), -inf for none."""
    if commit.rise_threshold is None:
        return math.inf
    return log2_of_rise(commit.rise_threshold, commit.newest_hour or 0, half_life_hours)


def _relative(log2_value: float, to_log2: float) -> float:
    """2^(log2_value - to_log2), +inf past a float's range."""
    exponent = log2_value - to_log2
    return 0.0 if exponent == -math.inf else (2.0**exponent if exponent < 1000 else math.inf)


def hot_top(
    database, k: int = 10, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0, resolve_posts: int = RESOLVE_POSTS
) -> TrendingTop:
    """The top `k` posts by hot score, certified when possible (see the module docstring), adding
    at most `resolve_posts` posts to certify it (spanner_reads/fresh_side.py)."""
    check_size(k, extra)
    with snapshot_of(database, staleness_s) as snapshot:
        settings = read_settings(snapshot)
        half_life = settings.half_life_hours
        if half_life is None:
            raise HotRankingUnavailable(
                "this database has no hot half-life recorded: run `upvotes provision` "
                "to add the hot ranking (it backfills every post's score)"
            )
        side = read_fresh_side(snapshot)
        resolver = Resolver(snapshot, side.candidates, resolve_posts)
        hours: dict[str, dict[int, Counts]] = {}
        scores: dict[str, HotScore] = {}

        def consider(post_ids: Iterable[str]) -> None:
            new = [p for p in dict.fromkeys(post_ids) if p not in hours]
            hours.update(hours_of_posts(snapshot, new))
            scores.update((p, hot_score(hours[p].items(), half_life)) for p in new)

        limit = k + extra
        folded = top_of_hot_index(snapshot, limit, half_life)
        consider([p for p, _ in folded] + sorted(side.candidates.post_ids) + side.skipped)
        folded_rows = len(folded)
        while True:
            ranked = sorted(scores, key=lambda p: (*scores[p].order(), p))[:k]
            # F: the lowest folded score read, when the index held more; a post below 0 adds nothing.
            lowest = folded[-1][1] if len(folded) == limit else None
            folded_log2 = lowest.log2 if lowest is not None and lowest.sign > 0 else -math.inf
            rises = [(c.commit_id, _rise_log2(c, half_life)) for c in resolver.open_commits]
            bound_log2 = (
                math.inf if any(r == math.inf for _, r in rises) else log2_sum([folded_log2] + [r for _, r in rises])
            )
            kth = scores[ranked[-1]] if len(ranked) == k else None
            beats = kth is not None and kth.sign > 0 and kth.log2 > bound_log2 + LOG2_MARGIN
            # Fewer than k posts with a score at all: certified when nothing else can have risen above 0.
            everything = len(ranked) < k and lowest is None and bound_log2 == -math.inf
            exact = settings.backfilled and (beats or everything)
            if exact or not settings.backfilled or (kth is not None and kth.sign <= 0):
                break
            # What the open commits may still add, relative to the K-th: below 1 (less a margin) certifies.
            room = -1.0 if kth is None else 2.0**-LOG2_MARGIN - _relative(folded_log2, kth.log2)
            if kth is not None and room <= 0:  # the folded side itself is in the way: read deeper
                if lowest is None or not resolver.spend(3 * limit):
                    break
                limit *= 4
                folded = top_of_hot_index(snapshot, limit, half_life)
                folded_rows += len(folded)
                consider(p for p, _ in folded)
                continue
            weights = [(c, _relative(r, kth.log2) if kth is not None else 1.0) for c, r in rises if r > -math.inf]
            added = resolver.read(commits_to_read(weights, room, strict=True), hours)
            if added is None:
                break
            consider(added)
        as_of = read_timestamp(snapshot)
    bound = 0.0 if bound_log2 == -math.inf else HotScore(1, bound_log2).at(as_of, half_life)
    # Every hour of each post was read: their sum is its exact all-time counts.
    totals = {p: PostTotals(p, total(hours[p].values())) for p in ranked}
    return TrendingTop(
        HOT,
        [RankedPost(totals[p], scores[p].at(as_of, half_life)) for p in ranked],
        as_of,
        side.folded_through,
        exact,
        bound,
        len(hours),
        side.candidates.rows,
        folded_rows + sum(map(len, hours.values())),
        half_life_hours=half_life,
        commits_read=resolver.commits_read,
    )


# Where a read of the hot index's top starts: scores of at least one vote now, then a millionth
# of one (20 half-lives older), then the whole index.
HOT_FLOORS_LOG2 = (0.0, -20.0)


def top_of_hot_index(snapshot, limit: int, half_life_hours: float) -> list[tuple[str, HotScore]]:
    """The first `limit` rows of PostsByHot (the highest folded scores), read in `snapshot`.

    Read as a range bounded from the top, widened until it holds `limit` rows: the emulator reads
    a whole index range before it applies a row limit (2.2 s for the unbounded range at 1,000,000
    posts in bench/trending.py), while a bounded range costs its own rows. Cloud Spanner seeks
    either way."""
    now = read_timestamp(snapshot)  # the snapshot has read (its settings): its time is fixed
    for floor in HOT_FLOORS_LOG2:
        lowest_key = HotScore(1, now.timestamp() / HOUR_S / half_life_hours + floor).key
        rows = _hot_rows(snapshot, spanner.KeySet(ranges=[spanner.KeyRange(end_closed=[lowest_key])]), limit)
        if len(rows) == limit:
            return rows
    return _hot_rows(snapshot, spanner.KeySet(all_=True), limit)


def _hot_rows(snapshot, keyset: spanner.KeySet, limit: int) -> list[tuple[str, HotScore]]:
    return [
        (post_id, HotScore.from_key(key))
        for post_id, key in snapshot.read(
            POSTS, columns=("PostId", HOT_KEY), keyset=keyset, index=POSTS_BY_HOT, limit=limit
        )
    ]


class Hot(Ranking[TrendingTop]):
    """By hot score: upvotes minus downvotes, each weighing half as much every half-life."""

    name = HOT
    help = (
        "hot score: upvotes minus downvotes, each weighing half as much every half-life (the database's, "
        "set by provision)"
    )
    score_field = "hot"
    tab = Tab(
        "hot", "Hot", "by=hot&n=10", "hot score", "hot scores (half-life {half_life_hours} h) and ", " (hot score)"
    )

    def read(self, database, k: int, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0) -> TrendingTop:
        return hot_top(database, k, extra, staleness_s)

    def title(self, page: TrendingTop) -> str:
        return f"hot score (half-life {page.half_life_hours:g} h)"

    def bound_text(self, page: TrendingTop) -> str:
        return f"a hot score up to {page.bound:,.4g}"

    def line_fields(self, page: TrendingTop, post: RankedPost) -> dict:
        return {"hot": post.score, "half_life_hours": page.half_life_hours}


RANKING = Hot()
