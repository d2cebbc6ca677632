"""What is viral now: the hot ranking and the top posts of the last N hours, exact and certified
without a fold, at a cost that follows the votes (docs/reading.md, "Trending").

Both work like the all-time fresh top (spanner_reads/fresh_top.py), in ONE read-only snapshot:
the fold cursor C and the posts it skipped; the folded side from an index; every TopCandidates
row committed after C (a seek per shard); then the exact scores of every post those name, from
their hourly rows plus their unfolded deltas (spanner_reads/hourly.py hours_of_posts).

A post p not considered: its folded side is bounded by the index (below), and each of its
unfolded deltas was committed after C (C vouches for the rest; its skipped posts are
considered) in a commit whose candidate row does not list p, so that commit raised p by at
most the row's RiseThreshold votes (schemas/hot_score.py rise_of), none newer than the row's
NewestHour. The answer is certified (`exact`) when its K-th score beats the sum of both bounds
strictly, so a tie at the boundary is never certified the wrong way. A post without any vote
is in neither ranking (an answer with fewer than K posts lists every post that has one).

- Hot (`hot_top`): the folded side is the Posts(HotKey DESC) index; an unread post has folded
  S <= F, the lowest of the K+m read (0 when the index held fewer). Each candidate row adds at
  most RiseThreshold * 2^(NewestHour / H) to S. The bound, F plus those, is summed in log2
  (schemas/hot_score.py log2_sum). The HotKey of a post is that of its hourly rows (the fold
  computes both in one transaction), so it is exactly the folded side of the score read here.
  What guards that against writers that do not keep HotKey (issue 44): every post's
  HotKeyThrough, the hourly watermark its key was computed at, is held to its hourly watermark
  by the database (the HotKeyCurrent constraint, schemas/posts.sql), so a fold of an older
  version cannot fold a fenced post's hourly rows without it (it skips the post, whose deltas the
  reads add); and the answer is certified only once `hot_backfilled` says the current
  generation's backfill has fenced every post, under the H read here
  (spanner_store/ranking_settings.py).
- Last N hours (`window_top`): the window is the N event hours ending with the snapshot's own
  hour. The folded side is a threshold algorithm over the per-hour lists of the
  PostHourlyCountsByHour index (Fagin, Lotem and Naor, PODS 2001, read in batched rounds):
  the top d rows of every hour of the window (of every shard), an index seek each. A post not in an
  hour's list has at most that list's last upvotes in that hour (0 when the list was not full:
  it holds every row of the hour), so an unread post has at most their sum. When that does not
  certify the K-th, d grows fourfold and the lists are read again; rounds end when every list
  is exhausted or at MAX_DEPTH. Hours sliding out of the window change the answer with no vote.

Certified when it can be: when those bounds leave the K-th uncertified, the read reads what
decides it (spanner_reads/fresh_side.py): the posts of the commits whose rises stand in the way,
largest first (each post of a commit read is considered, so that commit bounds nothing any more),
and, when the folded side itself is in the way, deeper into the index (hot) or the hour lists
(last N hours), within its budget. A row from before the rise bounds bounds nothing until its
commit is read.

Cost: K+m index rows (hot) or N * HOURLY_SHARDS lists of d rows (last N hours), one row per
commit since the cursor, and the hourly rows of the posts considered: none of it grows with
the catalogue. An answer the bounds leave uncertified adds the DeltaCommits rows it reads and the
hourly rows of their posts, at most RESOLVE_POSTS posts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterable, NamedTuple

from google.cloud import spanner

from schemas.counters import Counts, total
from schemas.hot_score import HOUR_S, HotScore, hot_score, log2_of_rise, log2_sum
from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA, RESOLVE_POSTS, Resolver, commits_to_read, read_fresh_side
from spanner_reads.hourly import hours_of_posts
from spanner_reads.reads import counts_in_snapshot
from spanner_store.database import read_timestamp
from spanner_store.ranking_settings import read_settings
from spanner_store.tables import (
    HOT_KEY, HOURLY, HOURLY_BY_HOUR, HOURLY_SHARDS, POSTS, POSTS_BY_HOT, hour_timestamp,
)
from spanner_store.top_candidates import CommitCandidates

HOT = "hot"
LAST = "last"
MAX_HOURS = 720
MAX_DEPTH = 4_096  # rows per hour list in the last round of a window read
# log2 units: the bound's and the scores' rounding (a few ulps of ~41,000) is far below this.
LOG2_MARGIN = 1e-9

# Both folded sides are read with the Read API, as index key ranges with a row limit: the index
# order is the ranking, so each is a seek of `limit` rows. (The emulator runs the same as SQL,
# ORDER BY and LIMIT included, as a scan of the whole index: measured 59 s for the hour lists of
# 100,000 posts against a fraction of a second for these reads.)


class HotRankingUnavailable(RuntimeError):
    """The database has no hot half-life recorded: it was provisioned before the hot ranking."""


class RankedPost(NamedTuple):
    totals: PostTotals  # the post's exact all-time counts
    score: float  # what it is ranked by: its hot score at the snapshot, or its upvotes in the window


@dataclass(frozen=True)
class TrendingTop:
    by: str  # HOT or LAST
    posts: list[RankedPost]  # highest score first, ties by post ID
    as_of: datetime  # the snapshot every count was read at
    folded_through: datetime | None  # the newest finished fold's snapshot
    exact: bool  # certified: these are the top K by that score (see the module docstring)
    bound: float  # no post left out scores more than this (hot: at the snapshot; 0: none above 0; inf: unbounded)
    considered: int  # posts whose exact scores were read
    candidate_rows: int  # TopCandidates rows read
    rows_read: int  # index rows read for the folded side (and hourly rows read for the scores)
    half_life_hours: float | None = None  # hot: H
    hours: int | None = None  # last: N
    commits_read: int = 0  # commits whose every post was read, to certify the answer

    def to_json(self) -> dict:
        """The answer's header: how it was ranked and whether it is certified."""
        # An infinite bound (a commit that bounds nothing, past the read's budget) is not JSON: null.
        return {"by": self.by, "as_of": self.as_of.isoformat(), "exact": self.exact,
                "bound": self.bound if math.isfinite(self.bound) else None,
                "folded_through": None if self.folded_through is None else self.folded_through.isoformat(),
                "considered": self.considered, "candidate_rows": self.candidate_rows,
                "commits_read": self.commits_read,
                **({"half_life_hours": self.half_life_hours} if self.by == HOT else {"hours": self.hours})}


def _snapshot(database, staleness_s: float):
    options = {"exact_staleness": timedelta(seconds=staleness_s)} if staleness_s > 0 else {}
    return database.snapshot(multi_use=True, **options)


def _check(k: int, extra: int, hours: int = 1) -> None:
    if k < 1 or extra < 0:
        raise ValueError("k must be at least 1 and extra at least 0")
    if not 1 <= hours <= MAX_HOURS:
        raise ValueError(f"the window is 1 to {MAX_HOURS} hours, not {hours}")


def _rise_log2(commit: CommitCandidates, half_life_hours: float) -> float:
    """log2 of what a commit can have added to S of a post it does not list: +inf for a row from
    before the rise bounds (it bounds nothing), -inf for none."""
    if commit.rise_threshold is None:
        return math.inf
    return log2_of_rise(commit.rise_threshold, commit.newest_hour or 0, half_life_hours)


def _relative(log2_value: float, to_log2: float) -> float:
    """2^(log2_value - to_log2), +inf past a float's range."""
    exponent = log2_value - to_log2
    return 0.0 if exponent == -math.inf else (2.0 ** exponent if exponent < 1000 else math.inf)


def hot_top(database, k: int = 10, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0,
            resolve_posts: int = RESOLVE_POSTS) -> TrendingTop:
    """The top `k` posts by hot score, certified when possible (see the module docstring), adding
    at most `resolve_posts` posts to certify it (spanner_reads/fresh_side.py)."""
    _check(k, extra)
    with _snapshot(database, staleness_s) as snapshot:
        settings = read_settings(snapshot)
        half_life = settings.half_life_hours
        if half_life is None:
            raise HotRankingUnavailable("this database has no hot half-life recorded: run `upvotes provision` "
                                        "to add the hot ranking (it backfills every post's score)")
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
            bound_log2 = (math.inf if any(r == math.inf for _, r in rises)
                          else log2_sum([folded_log2] + [r for _, r in rises]))
            kth = scores[ranked[-1]] if len(ranked) == k else None
            beats = kth is not None and kth.sign > 0 and kth.log2 > bound_log2 + LOG2_MARGIN
            # Fewer than k posts with a score at all: certified when nothing else can have risen above 0.
            everything = len(ranked) < k and lowest is None and bound_log2 == -math.inf
            exact = settings.backfilled and (beats or everything)
            if exact or not settings.backfilled or (kth is not None and kth.sign <= 0):
                break
            # What the open commits may still add, relative to the K-th: below 1 (less a margin) certifies.
            room = -1.0 if kth is None else 2.0 ** -LOG2_MARGIN - _relative(folded_log2, kth.log2)
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
    return TrendingTop(HOT, [RankedPost(totals[p], scores[p].at(as_of, half_life)) for p in ranked], as_of,
                       side.folded_through, exact, bound, len(hours), side.candidates.rows,
                       folded_rows + sum(map(len, hours.values())), half_life_hours=half_life,
                       commits_read=resolver.commits_read)


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
    return [(post_id, HotScore.from_key(key)) for post_id, key in snapshot.read(
        POSTS, columns=("PostId", HOT_KEY), keyset=keyset, index=POSTS_BY_HOT, limit=limit)]


def window_hours(as_of: datetime, hours: int) -> tuple[int, int]:
    """The first and last event hour (epoch seconds) of the `hours`-hour window ending with
    `as_of`'s own hour."""
    _check(1, 0, hours)
    last = int(as_of.timestamp()) // HOUR_S * HOUR_S
    return last - (hours - 1) * HOUR_S, last


class HourLists(NamedTuple):
    """One round of the threshold algorithm's sorted access: the posts seen, and what any post
    not seen in an hour can have had in it, summed over the window's hours."""

    seen: list[str]
    bound: int
    exhausted: bool  # every list held fewer than `depth` rows: every folded row was seen
    rows: int


def read_hour_lists(snapshot, first: int, last: int, depth: int) -> HourLists:
    """The top `depth` rows of every hour of [first, last] in every shard: one index seek each."""
    per_hour: dict[int, int] = {}
    seen: list[str] = []
    exhausted, rows = True, 0
    for hour in range(first, last + 1, HOUR_S):
        for shard in range(HOURLY_SHARDS):
            prefix = [shard, hour_timestamp(hour)]
            top = list(snapshot.read(HOURLY, columns=("PostId", "Upvotes"), index=HOURLY_BY_HOUR, limit=depth,
                                     keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=prefix,
                                                                                    end_closed=prefix)])))
            rows += len(top)
            seen += [post_id for post_id, _ in top]
            if len(top) == depth:
                exhausted = False
                per_hour[hour] = max(per_hour.get(hour, 0), top[-1][1], 0)
    return HourLists(list(dict.fromkeys(seen)), sum(per_hour.values()), exhausted, rows)


def window_top(database, k: int = 10, hours: int = 24, extra: int = DEFAULT_EXTRA,
               staleness_s: float = 0.0, clock: Callable[[datetime], datetime] | None = None,
               resolve_posts: int = RESOLVE_POSTS) -> TrendingTop:
    """The top `k` posts by upvotes counted in the last `hours` event hours, certified when
    possible (see the module docstring), adding at most `resolve_posts` posts to certify it
    (spanner_reads/fresh_side.py). Posts with no upvote in the window are not listed.
    `clock` maps the snapshot's time to the moment whose window is read (tests move it)."""
    _check(k, extra, hours)
    with _snapshot(database, staleness_s) as snapshot:
        side = read_fresh_side(snapshot)
        resolver = Resolver(snapshot, side.candidates, resolve_posts)
        as_of = read_timestamp(snapshot)
        first, last = window_hours(clock(as_of) if clock else as_of, hours)
        scored: dict[str, dict[int, Counts]] = {}

        def consider(post_ids: Iterable[str]) -> None:
            scored.update(hours_of_posts(snapshot, [p for p in dict.fromkeys(post_ids) if p not in scored],
                                         first, last))

        depth = k + extra
        lists = read_hour_lists(snapshot, first, last, depth)
        rows = lists.rows
        consider(lists.seen + sorted(side.candidates.post_ids) + side.skipped)
        while True:
            window = {p: sum(c.upvotes for c in h.values()) for p, h in scored.items()}
            ranked = sorted((p for p in window if window[p] > 0), key=lambda p: (-window[p], p))[:k]
            # A candidate row whose newest hour is before the window raised nothing in it; one from
            # before the rise bounds bounds nothing.
            rises = [(c.commit_id, math.inf if c.rise_threshold is None else c.rise_threshold)
                     for c in resolver.open_commits
                     if c.rise_threshold is None or (c.rise_threshold > 0 and c.newest_hour >= first)]
            bound = lists.bound + sum(r for _, r in rises)
            beats = len(ranked) == k and window[ranked[-1]] > bound
            # Fewer than k posts with upvotes in the window: certified when no other post can have any.
            everything = len(ranked) < k and bound == 0
            if beats or everything:
                break
            # The commits to read: those whose rises keep the rest above what the K-th beats once
            # the lists' bound is taken; with fewer than K posts, every one (once the lists are read
            # whole). When the lists' bound is itself in the way, no commit can help.
            room = window[ranked[-1]] - lists.bound if len(ranked) == k else -1.0
            useful = room > 0 if len(ranked) == k else lists.bound == 0
            added = resolver.read(commits_to_read(rises, room, strict=True), scored) if useful else None
            if added is not None:
                consider(added)
                continue
            if lists.exhausted or depth >= MAX_DEPTH:  # nothing more to read: not certified
                break
            depth *= 4  # the hour lists are in the way (or the commits could not be read): read deeper
            lists = read_hour_lists(snapshot, first, last, depth)
            rows += lists.rows
            consider(lists.seen)
        totals = {t.post_id: t for t in counts_in_snapshot(snapshot, ranked)}
    return TrendingTop(LAST, [RankedPost(totals[p], window[p]) for p in ranked], as_of, side.folded_through,
                       beats or everything, bound, len(scored), side.candidates.rows, rows, hours=hours,
                       commits_read=resolver.commits_read)
