"""CountsReader: exact counts for app servers, with reads that do not grow with viewers.

An exact read costs two Spanner reads on the post's split (the Posts row and the post's
unfolded delta range), so a viral post read by 10,000 viewers a second would be a read
hotspot. A CountsReader, one per process, answers from a per-process cache instead:

- Each post's count is read from Spanner at most once per `refresh_s` (per process),
  however many threads ask: the first caller to find a post missing or expired reads it
  (*single flight*); every concurrent caller for that post waits for that one read.
- `get_many` reads all the posts it has to load in one snapshot (one batched read).
- `staleness_s > 0` reads at an exact staleness (a snapshot that old, which any replica
  that has caught up can serve without asking the leader); 0 reads strong.
- Every answer carries `as_of`: the Spanner timestamp its snapshot read at. An answer is
  at most `staleness_s + refresh_s` (plus one read's duration) older than the moment it is
  returned.
- `get(post_id, unique=True)` adds the post's unique voters, from the same snapshot; those
  answers have a cache of their own, so plain reads never carry the sketches' bytes.
- `ranked(ranking, n, **parameters)` is any ranking of the registry (spanner_reads/rankings/),
  cached and single-flighted the same way, in one cache of rankings keyed by the ranking's name,
  n and its parameters: `top(n)` (all time), `hot_top(n)` and `window_top(n, hours)` (what is
  viral now) are the three of today.

The clock (monotonic seconds) is injectable, so tests move time instead of sleeping.
Thread-safe; meant for thread-pool servers (FastAPI runs plain `def` routes in threads).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, NamedTuple, TypeVar, cast

from schemas.counters import Counts
from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA
from spanner_reads.rankings import all_time, hot, last_hours
from spanner_reads.rankings.all_time import FreshTop
from spanner_reads.rankings.ranking import Page, RankedPage, Ranking
from spanner_reads.rankings.trending_top import TrendingTop
from spanner_reads.reads import counts_in_snapshot
from spanner_store.database import read_timestamp

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
DEFAULT_REFRESH_S = 1.0
DEFAULT_MAX_POSTS = 100_000  # cached posts per process; the least recently used go first


class PostCount(NamedTuple):
    """One post's exact counts (a PostTotals) and the Spanner timestamp they were read at."""

    post_id: str
    counts: Counts
    as_of: datetime
    unique_voters: int | None = None  # distinct upvoters, when asked for (schemas/voter_sketch.py)

    @classmethod
    def of(cls, totals: PostTotals, as_of: datetime) -> PostCount:
        return cls(totals.post_id, totals.counts, as_of, totals.unique_voters)

    @property
    def totals(self) -> PostTotals:
        return PostTotals(self.post_id, self.counts, self.unique_voters)

    def to_json(self) -> dict:
        """{"post_id", one field per counter, "as_of"[, "unique_voters"]}: what the service answers
        (PostTotals.to_json with the time)."""
        return self.totals.to_json(self.as_of)


@dataclass
class _Flight(Generic[T]):
    """One load in progress: the callers that find it wait for its result."""

    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class _SingleFlightCache(Generic[K, T]):
    """Values by key, each loaded at most once per `refresh_s`; loads of many keys are batched."""

    def __init__(self, refresh_s: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._refresh_s = refresh_s
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, tuple[float, T]] = OrderedDict()
        self._flights: dict[K, _Flight[T]] = {}

    def get_many(self, keys: list[K], load: Callable[[list[K]], dict[K, T]]) -> dict[K, T]:
        found: dict[K, T] = {}
        waiting: dict[K, _Flight[T]] = {}
        mine: dict[K, _Flight[T]] = {}
        with self._lock:
            now = self._clock()
            for key in dict.fromkeys(keys):
                entry = self._entries.get(key)
                if entry is not None and now - entry[0] < self._refresh_s:
                    self._entries.move_to_end(key)
                    found[key] = entry[1]
                elif key in self._flights:
                    waiting[key] = self._flights[key]
                else:
                    mine[key] = self._flights[key] = _Flight()
        if mine:
            self._load(mine, load)
        for key, flight in {**mine, **waiting}.items():
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            assert flight.value is not None  # loaded: _load sets it when the load did not fail
            found[key] = flight.value
        return found

    def _load(self, flights: dict[K, _Flight[T]], load: Callable[[list[K]], dict[K, T]]) -> None:
        try:
            values = load(list(flights))
            error = None
        except Exception as failure:  # noqa: BLE001 - handed to every waiter, then raised
            values, error = {}, failure
        with self._lock:
            now = self._clock()
            for key, flight in flights.items():
                del self._flights[key]
                if error is None:
                    flight.value = values[key]
                    self._entries[key] = (now, values[key])
                    self._entries.move_to_end(key)
                else:
                    flight.error = error
                flight.done.set()
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)


class CountsReader:
    """Exact counts and fresh top posts for app servers (see the module docstring).

    `spanner_reads` counts the snapshots this reader has opened: one per batched load of
    counts, one per load of a top-n ranking (all time, hot or last N hours).
    """

    def __init__(
        self,
        database,
        staleness_s: float = 0.0,
        refresh_s: float = DEFAULT_REFRESH_S,
        max_posts: int = DEFAULT_MAX_POSTS,
        top_extra: int = DEFAULT_EXTRA,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if staleness_s < 0 or refresh_s < 0 or max_posts < 1:
            raise ValueError("staleness_s and refresh_s must be >= 0 and max_posts >= 1")
        self._database = database
        self.staleness_s = staleness_s
        self.refresh_s = refresh_s
        self._top_extra = top_extra
        self._counts: _SingleFlightCache[str, PostCount] = _SingleFlightCache(refresh_s, max_posts, clock)
        self._unique_counts: _SingleFlightCache[str, PostCount] = _SingleFlightCache(refresh_s, max_posts, clock)
        # Every ranking, keyed (name, n, its parameters).
        self._tops: _SingleFlightCache[Hashable, RankedPage] = _SingleFlightCache(refresh_s, 64, clock)
        self._reads_lock = threading.Lock()
        self.spanner_reads = 0

    def get(self, post_id: str, unique: bool = False) -> PostCount:
        """One post's exact counts (and with `unique` its unique voters); a post never voted
        on reads as zeros."""
        return self.get_many([post_id], unique)[0]

    def get_many(self, post_ids: Iterable[str], unique: bool = False) -> list[PostCount]:
        """Exact counts of these posts, in the order asked (duplicates answered once each)."""
        wanted = list(post_ids)
        if unique:
            found = self._unique_counts.get_many(wanted, lambda keys: self._load_counts(keys, unique=True))
        else:
            found = self._counts.get_many(wanted, self._load_counts)
        return [found[p] for p in wanted]

    def ranked(self, ranking: Ranking[Page], n: int = 10, **parameters: Any) -> Page:
        """The top `n` posts of `ranking` (one of spanner_reads.rankings.RANKINGS), with whether
        it is certified: from the cache, or read once for every concurrent caller (one snapshot).
        Bad parameters are refused (ValueError) before they take a cache entry; a read that fails
        (HotRankingUnavailable: run `upvotes provision`) is not cached."""
        ranking.check(**parameters)
        key = (ranking.name, n, *sorted(parameters.items()))

        def load(keys: list[Hashable]) -> dict[Hashable, RankedPage]:
            self._count_read()
            return {keys[0]: ranking.read(self._database, n, self._top_extra, self.staleness_s, **parameters)}

        return cast(Page, self._tops.get_many([key], load)[key])  # the entry under its key is its page

    def top(self, n: int = 10) -> FreshTop:
        """The top `n` posts by exact upvotes, with whether the ranking is certified exact."""
        return self.ranked(all_time.RANKING, n)

    def hot_top(self, n: int = 10) -> TrendingTop:
        """The top `n` posts by hot score (spanner_reads.rankings.hot.hot_top), with whether the
        ranking is certified. Raises HotRankingUnavailable when the database has no half-life
        recorded (run `upvotes provision`); that is not cached."""
        return self.ranked(hot.RANKING, n)

    def window_top(self, n: int = 10, hours: int = 24) -> TrendingTop:
        """The top `n` posts by upvotes in the last `hours` event hours (1 to MAX_HOURS;
        spanner_reads.rankings.last_hours.window_top), with whether the ranking is certified."""
        return self.ranked(last_hours.RANKING, n, hours=hours)

    def _snapshot(self):
        self._count_read()
        if self.staleness_s > 0:
            return self._database.snapshot(multi_use=True, exact_staleness=timedelta(seconds=self.staleness_s))
        return self._database.snapshot(multi_use=True)

    def _count_read(self) -> None:
        with self._reads_lock:
            self.spanner_reads += 1

    def _load_counts(self, post_ids: list[str], unique: bool = False) -> dict[str, PostCount]:
        with self._snapshot() as snapshot:
            totals = counts_in_snapshot(snapshot, post_ids, unique)
            as_of = read_timestamp(snapshot)
        return {t.post_id: PostCount.of(t, as_of) for t in totals}
