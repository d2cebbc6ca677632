"""The last N hours (`upvotes top --last 24h`, GET /v1/top?last=24h): the top posts by upvotes
counted in the last N event hours, exact and certified without a fold (docs/reading.md, "What is
viral now"). It reads the way every ranking does (spanner_reads/rankings/__init__.py).

The window is the N event hours ending with the snapshot's own hour. The folded side is a
threshold algorithm over the per-hour lists of the PostHourlyCountsByHour index (Fagin, Lotem and
Naor, PODS 2001, read in batched rounds): the top d rows of every hour of the window (of every
shard), an index seek each. A post not in an hour's list has at most that list's last upvotes in
that hour (0 when the list was not full: it holds every row of the hour), so an unread post has
at most their sum. Each candidate row adds at most its RiseThreshold, none newer than its
NewestHour (a row whose newest hour is before the window raised nothing in it). When that does
not certify the K-th, the read reads the commits in the way (spanner_reads/fresh_side.py); when
the lists' bound itself is, d grows fourfold and the lists are read again; rounds end when every
list is exhausted or at MAX_DEPTH. Hours sliding out of the window change the answer with no vote.

Cost: N * HOURLY_SHARDS lists of d rows, one row per commit since the cursor, and the hourly rows
of the posts considered: none of it grows with the catalogue.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import NamedTuple

from google.cloud import spanner

from schemas.counters import Counts
from schemas.hot_score import HOUR_S
from spanner_reads.fresh_side import DEFAULT_EXTRA, RESOLVE_POSTS, Resolver, commits_to_read, read_fresh_side
from spanner_reads.hourly import hours_of_posts
from spanner_reads.rankings.ranking import Parameter, RankedPost, Ranking, Tab, check_size, snapshot_of
from spanner_reads.rankings.trending_top import LAST, TrendingTop
from spanner_reads.reads import counts_in_snapshot
from spanner_store.database import read_timestamp
from spanner_store.tables import HOURLY, HOURLY_BY_HOUR, HOURLY_SHARDS, hour_timestamp
from spanner_store.top_candidates import CommitCandidates

MAX_HOURS = 720
MAX_DEPTH = 4_096  # rows per hour list in the last round of a window read

# The hour lists are read with the Read API, as index key ranges with a row limit: the index
# order is the ranking, so each is a seek of `limit` rows. (The emulator runs the same as SQL,
# ORDER BY and LIMIT included, as a scan of the whole index: docs/benchmarks.md, "Measurements
# behind the code".)


def check_hours(hours: int) -> None:
    if not 1 <= hours <= MAX_HOURS:
        raise ValueError(f"the window is 1 to {MAX_HOURS} hours, not {hours}")


def hours_of(text: str) -> int:
    """A window length as `Nh` (N hours) or `Nd` (N days), 1 to MAX_HOURS (720, 30 days) hours in
    all: "24h", "7d". ValueError with a readable reason otherwise (`--last` and `last=` take it)."""
    match = re.fullmatch(r"\s*([0-9]{1,6})\s*([hdHD])\s*", text)
    if match is None:
        raise ValueError(f"a window is N hours or N days, written like 24h or 7d, not {text[:40]!r}")
    hours = int(match[1]) * (24 if match[2].lower() == "d" else 1)
    if not 1 <= hours <= MAX_HOURS:
        raise ValueError(
            f"a window is 1 to {MAX_HOURS} hours ({MAX_HOURS // 24}d), not {text.strip()!r} ({hours} hours)"
        )
    return hours


def window_hours(as_of: datetime, hours: int) -> tuple[int, int]:
    """The first and last event hour (epoch seconds) of the `hours`-hour window ending with
    `as_of`'s own hour."""
    check_hours(hours)
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
            top = list(
                snapshot.read(
                    HOURLY,
                    columns=("PostId", "Upvotes"),
                    index=HOURLY_BY_HOUR,
                    limit=depth,
                    keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=prefix, end_closed=prefix)]),
                )
            )
            rows += len(top)
            seen += [post_id for post_id, _ in top]
            if len(top) == depth:
                exhausted = False
                per_hour[hour] = max(per_hour.get(hour, 0), top[-1][1], 0)
    return HourLists(list(dict.fromkeys(seen)), sum(per_hour.values()), exhausted, rows)


def _bounds_window(commit: CommitCandidates, first: int) -> bool:
    """Whether a candidate row's rise bound counts for the window that starts at hour `first`."""
    if commit.rise_threshold is None:
        return True
    if commit.rise_threshold > 0:
        assert commit.newest_hour is not None  # a positive rise is some delta row's, which has an hour
        return commit.newest_hour >= first
    return False


def window_top(
    database,
    k: int = 10,
    hours: int = 24,
    extra: int = DEFAULT_EXTRA,
    staleness_s: float = 0.0,
    clock: Callable[[datetime], datetime] | None = None,
    resolve_posts: int = RESOLVE_POSTS,
) -> TrendingTop:
    """The top `k` posts by upvotes counted in the last `hours` event hours, certified when
    possible (see the module docstring), adding at most `resolve_posts` posts to certify it
    (spanner_reads/fresh_side.py). Posts with no upvote in the window are not listed.
    `clock` maps the snapshot's time to the moment whose window is read (tests move it)."""
    check_size(k, extra)
    check_hours(hours)
    with snapshot_of(database, staleness_s) as snapshot:
        side = read_fresh_side(snapshot)
        resolver = Resolver(snapshot, side.candidates, resolve_posts)
        as_of = read_timestamp(snapshot)
        first, last = window_hours(clock(as_of) if clock else as_of, hours)
        scored: dict[str, dict[int, Counts]] = {}

        def consider(post_ids: Iterable[str]) -> None:
            scored.update(
                hours_of_posts(snapshot, [p for p in dict.fromkeys(post_ids) if p not in scored], first, last)
            )

        depth = k + extra
        lists = read_hour_lists(snapshot, first, last, depth)
        rows = lists.rows
        consider(lists.seen + sorted(side.candidates.post_ids) + side.skipped)
        while True:
            window = {p: sum(c.upvotes for c in h.values()) for p, h in scored.items()}
            ranked = sorted((p for p in window if window[p] > 0), key=lambda p: (-window[p], p))[:k]
            # A candidate row whose newest hour is before the window raised nothing in it; one from
            # before the rise bounds bounds nothing.
            rises = [
                (c.commit_id, math.inf if c.rise_threshold is None else c.rise_threshold)
                for c in resolver.open_commits
                if _bounds_window(c, first)
            ]
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
    return TrendingTop(
        LAST,
        [RankedPost(totals[p], window[p]) for p in ranked],
        as_of,
        side.folded_through,
        beats or everything,
        bound,
        len(scored),
        side.candidates.rows,
        rows,
        hours=hours,
        commits_read=resolver.commits_read,
    )


class LastHours(Ranking[TrendingTop]):
    """By upvotes in the last N event hours, chosen by its window (`--last 24h`, `last=24h`)."""

    name = LAST
    help = "upvotes in the last N event hours"
    parameter = Parameter(
        "last",
        "hours",
        "Nh|Nd",
        hours_of,
        f"rank by upvotes counted in the last N event hours, written Nh or Nd (24h, 7d; at most {MAX_HOURS}h), "
        "the hour now included",
        by="upvotes",
        ranks="upvotes in the window",
    )
    score_field = "window_upvotes"
    tab = Tab(
        "last",
        "Last 24 h",
        "last=24h&n=10",
        "upvotes, 24 h",
        "upvotes in the last {hours} h and ",
        " upvotes in the window",
    )

    def read(
        self, database, k: int, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0, *, hours: int
    ) -> TrendingTop:
        return window_top(database, k, hours, extra, staleness_s)

    def check(self, *, hours: int) -> None:
        check_hours(hours)

    def score(self, post: RankedPost) -> int:
        return int(post.score)

    def title(self, page: TrendingTop) -> str:
        return f"upvotes in the last {page.hours} h"

    def bound_text(self, page: TrendingTop) -> str:
        return f"up to {page.bound:,.0f} upvotes in the window"

    def line_fields(self, page: TrendingTop, post: RankedPost) -> dict:
        return {"last_hours": page.hours, "window_upvotes": int(post.score)}

    def score_label(self, page: TrendingTop) -> str:
        return f"last {page.hours}h"


RANKING = LastHours()
