"""The trending rankings by brute force, from a ledger of every vote (spanner_reads/trending.py is
checked against them): what the publisher knows, never what the database computed.

- `VoteLedger`: every vote as (post, event hour, counter, delta), from delta rows as they are
  written, plus each user's vote-state events, of which only the latest per (post, user) counts
  (schemas/vote_states.py's order, restated here: event time, then event_id, then the vote);
  restated too: an erasure (`forget`) turns each of the user's states at or before it into
  "none", and a suspension (`suspend`, until `restore`) makes a state of its users cast at or
  after its `since` count nothing (issue 46).
- `brute_hot`: every post's hot score at a moment, S = sum of net_h * 2^((h - T) / H) in
  60-digit decimal arithmetic with the weights of the issue (upvote +1, downvote -1, shares and
  views 0), ranked highest first, ties by post ID.
- `brute_window`: every post's upvotes in the event hours [first, last], those above 0 ranked.
- `assert_hot_answer`, `assert_window_answer`: an answer against them: every listed post at its
  true score and all-time counts, in the true order; a certified (`exact`) answer is the true
  top K (a hot answer of fewer than K posts: it holds every post scoring above 0, as
  spanner_reads/trending.py certifies; the 0 and negative posts it lists are those it read);
  and the bound holds for every post left out that would outrank the answer's K-th.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from typing import NamedTuple

from google.cloud import spanner

from schemas.counters import COLUMNS as COUNTER_COLUMNS
from schemas.counters import Counts
from schemas.hot_score import hot_score
from schemas.records import PostDelta
from spanner_store.tables import HOT_KEY, HOURLY, POSTS

HOUR_S = 3600
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# What one event of each counter adds to the hot score, as issue 36 states it.
WEIGHTS = {"upvotes": 1, "downvotes": -1, "shares": 0, "views": 0}
# A vote state's counter, and the rank that breaks a tie of time and event_id (none < up < down).
STATE_COUNTER = {"up": "upvotes", "down": "downvotes", "none": None}
STATE_RANK = {"none": 0, "up": 1, "down": 2}
PRECISION = 60
# Decimal values equal to this many digits are the same score (a cross-hour tie computed two ways).
SAME_DIGITS = 40
REL_TOL = 1e-9


class Entry(NamedTuple):
    post_id: str
    hour: int  # start of the event hour, epoch seconds
    counter: str  # a name of WEIGHTS
    delta: int


class VoteLedger:
    """Every vote written, as the publisher records it."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._posts: set[str] = set()  # every post voted on, even by votes that cancel out
        # (post, user) -> (at_us, event_id, rank, vote, hour) of the latest state seen
        self._states: dict[tuple[str, str], tuple[int, str, int, str, int]] = {}
        self._erasures: dict[str, tuple[int, str, int]] = {}  # user -> the newest erasure's (at_us, event_id, rank)
        self._suspensions: dict[str, tuple[frozenset[str], int | None]] = {}  # active: ID -> (users, since_us)

    def add(self, post_id: str, hour: int, counter: str, delta: int) -> None:
        assert counter in WEIGHTS and hour % HOUR_S == 0
        self._posts.add(post_id)
        if delta:
            self.entries.append(Entry(post_id, hour, counter, delta))

    def add_deltas(self, deltas: Iterable[PostDelta]) -> None:
        """The votes of delta rows (each counter of each row)."""
        for delta in deltas:
            for counter, value in delta.sums.counts._asdict().items():
                self.add(delta.post_id, delta.event_hour, counter, value)

    def add_state(self, post_id: str, user_id: str, vote: str, at_us: int, hour: int, event_id: str = "") -> None:
        """A vote-state event; whatever order they arrive in, only a user's latest counts."""
        mine = (at_us, event_id, STATE_RANK[vote], vote, hour)
        found = self._states.get((post_id, user_id))
        if found is None or mine[:3] > found[:3]:
            self._states[(post_id, user_id)] = mine

    def forget(self, user_id: str, at_us: int, event_id: str) -> None:
        """An erasure request: each state of the user at or before (at_us, event_id, "none") is
        "none", on every post, whenever it arrives."""
        erasure = (at_us, event_id, STATE_RANK["none"])
        self._erasures[user_id] = max(erasure, self._erasures.get(user_id, erasure))

    def suspend(self, suspension_id: str, users, since_us: int | None = None) -> None:
        """A suspension: while it holds, a state of these users cast at or after `since_us` (every
        one: None) counts nothing."""
        self._suspensions[suspension_id] = (frozenset(users), since_us)

    def restore(self, suspension_id: str) -> None:
        self._suspensions.pop(suspension_id, None)

    def counted_vote(self, post_id: str, user_id: str) -> tuple[str, int] | None:
        """The (counter, hour) a user's latest state on a post counts, or None: none, erased or suspended."""
        state = self._states.get((post_id, user_id))
        counter = None if state is None else STATE_COUNTER[state[3]]
        if state is None or counter is None:
            return None
        erasure = self._erasures.get(user_id)
        if erasure is not None and state[:3] <= erasure:
            return None
        for users, since in self._suspensions.values():
            if user_id in users and (since is None or since <= state[0]):
                return None
        return counter, state[4]

    def all_entries(self) -> list[Entry]:
        states = [
            Entry(post_id, counted[1], counted[0], 1)
            for post_id, user_id in self._states
            if (counted := self.counted_vote(post_id, user_id))
        ]
        return self.entries + states

    def posts(self) -> set[str]:
        return self._posts | {post_id for post_id, _ in self._states}

    def hours(self) -> dict[str, dict[int, dict[str, int]]]:
        """{post: {hour: {counter: net}}}: what each post got in each event hour."""
        hours: dict[str, dict[int, dict[str, int]]] = {post_id: {} for post_id in self.posts()}
        for post_id, hour, counter, delta in self.all_entries():
            cell = hours[post_id].setdefault(hour, defaultdict(int))
            cell[counter] += delta
        return hours

    def totals(self) -> dict[str, Counts]:
        """Every post's all-time counts."""
        sums: dict[str, dict[str, int]] = {post_id: defaultdict(int) for post_id in self.posts()}
        for post_id, _, counter, delta in self.all_entries():
            sums[post_id][counter] += delta
        return {post_id: Counts(**counts) for post_id, counts in sums.items()}


def epoch_hours(moment: datetime) -> Decimal:
    """`moment` in hours since 1970, exactly (to its microsecond)."""
    micros = (moment.astimezone(timezone.utc) - EPOCH) // _MICROSECOND
    return Decimal(micros) / Decimal(HOUR_S * 1_000_000)


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - EPOCH


class Scored(NamedTuple):
    post_id: str
    value: Decimal  # the exact score, rounded to SAME_DIGITS digits: equal values are ties
    score: float


def hot_values(ledger: VoteLedger, half_life_hours: float, at: datetime) -> dict[str, Scored]:
    """Every post's hot score at `at`: sum over its hours of net_h * 2^((h - at) / H)."""
    now = epoch_hours(at)
    scored = {}
    with localcontext() as context:
        context.prec = PRECISION
        half_life = Decimal(half_life_hours)
        for post_id, hours in ledger.hours().items():
            terms = []
            for hour in sorted(hours):
                net = sum(WEIGHTS[counter] * n for counter, n in hours[hour].items())
                if net:
                    terms.append(net * Decimal(2) ** ((Decimal(hour) / HOUR_S - now) / half_life))
            value = sum(terms, Decimal(0))
            # Terms that cancel (2 votes at h and a downvote at h + H) leave rounding noise: 0.
            if terms and abs(value) <= max(map(abs, terms)) * Decimal(10) ** -SAME_DIGITS:
                value = Decimal(0)
            scored[post_id] = Scored(post_id, _rounded(value), float(value))
    return scored


def _rounded(value: Decimal) -> Decimal:
    with localcontext() as context:
        context.prec = SAME_DIGITS
        return +value


def brute_hot(ledger: VoteLedger, half_life_hours: float, at: datetime) -> list[Scored]:
    """Every post of the ledger, highest hot score first (positive, then 0, then the smallest
    loss first), ties by post ID."""
    return sorted(hot_values(ledger, half_life_hours, at).values(), key=lambda s: (-s.value, s.post_id))


def window_upvotes(ledger: VoteLedger, first: int, last: int) -> dict[str, int]:
    """Every post's upvotes counted in the event hours [first, last] (epoch seconds)."""
    upvotes = {post_id: 0 for post_id in ledger.posts()}
    for post_id, hour, counter, delta in ledger.all_entries():
        if counter == "upvotes" and first <= hour <= last:
            upvotes[post_id] += delta
    return upvotes


def brute_window(ledger: VoteLedger, first: int, last: int) -> list[tuple[str, int]]:
    """The posts with upvotes in [first, last], most first, ties by post ID."""
    upvotes = window_upvotes(ledger, first, last)
    return sorted(((p, n) for p, n in upvotes.items() if n > 0), key=lambda item: (-item[1], item[0]))


def window_of(moment: datetime, hours: int) -> tuple[int, int]:
    """The first and last event hour of the `hours` hours ending with `moment`'s own hour."""
    last = int(moment.timestamp()) // HOUR_S * HOUR_S
    return last - (hours - 1) * HOUR_S, last


def _close(actual: float, expected: float) -> bool:
    return math.isclose(actual, expected, rel_tol=REL_TOL, abs_tol=0.0)


def assert_hot_answer(answer, ledger: VoteLedger, half_life_hours: float, k: int, what: str = "") -> None:
    """`answer` (spanner_reads.trending.TrendingTop, by hot) against the brute force at its own
    snapshot time. See the module docstring."""
    truth = hot_values(ledger, half_life_hours, answer.as_of)
    totals = ledger.totals()
    listed = [p.totals.post_id for p in answer.posts]
    ranked = sorted(truth.values(), key=lambda s: (-s.value, s.post_id))  # brute_hot
    context = (
        f"{what}: answer {[(p.totals.post_id, p.score) for p in answer.posts]} exact={answer.exact} "
        f"bound={answer.bound}; truth {[(s.post_id, s.score) for s in ranked[: k + 5]]}"
    )
    assert len(listed) <= k and len(set(listed)) == len(listed), context
    for post in answer.posts:
        true = truth[post.totals.post_id]
        assert _close(post.score, true.score), (
            f"{post.totals.post_id} scored {post.score}, truly {true.score}; {context}"
        )
        assert post.totals.counts == totals[post.totals.post_id], f"{post.totals.post_id} counts; {context}"
    assert listed == sorted(listed, key=lambda p: (-truth[p].value, p)), f"listed out of order; {context}"
    if answer.exact:
        if len(listed) == k:
            assert listed == [s.post_id for s in ranked[:k]], f"certified but wrong; {context}"
        else:
            # Fewer than K: certified to hold every post with a positive score (the rest, 0 or
            # below, are the posts it read).
            assert [p for p in listed if truth[p].value > 0] == [s.post_id for s in ranked if s.value > 0], (
                f"certified short answer misses a positive post; {context}"
            )
    # The bound: no post left out that would outrank the answer's K-th (any post left out of a
    # shorter answer) scores more.
    for scored in ranked:
        if scored.post_id in listed:
            continue
        if len(listed) == k and (-scored.value, scored.post_id) > (-truth[listed[-1]].value, listed[-1]):
            continue
        assert scored.score <= answer.bound * (1 + REL_TOL), (
            f"{scored.post_id} left out at {scored.score} > bound {answer.bound}; {context}"
        )


def assert_window_answer(answer, ledger: VoteLedger, k: int, first: int, last: int, what: str = "") -> None:
    """`answer` (by the last N hours, the window [first, last]) against the brute force."""
    upvotes = window_upvotes(ledger, first, last)
    totals = ledger.totals()
    listed = [p.totals.post_id for p in answer.posts]
    ranked = brute_window(ledger, first, last)
    context = (
        f"{what}: answer {[(p.totals.post_id, p.score) for p in answer.posts]} exact={answer.exact} "
        f"bound={answer.bound}; truth {ranked[: k + 5]}"
    )
    assert len(listed) <= k and len(set(listed)) == len(listed), context
    for post in answer.posts:
        assert post.score == upvotes[post.totals.post_id] > 0, f"{post.totals.post_id}; {context}"
        assert post.totals.counts == totals[post.totals.post_id], f"{post.totals.post_id} counts; {context}"
    assert listed == sorted(listed, key=lambda p: (-upvotes[p], p)), f"listed out of order; {context}"
    if answer.exact:
        assert listed == [p for p, _ in ranked[:k]], f"certified but wrong; {context}"
    for post_id, n in ranked:
        if post_id in listed or len(listed) == k and (-n, post_id) > (-upvotes[listed[-1]], listed[-1]):
            continue
        assert n <= answer.bound, f"{post_id} left out with {n} > bound {answer.bound}; {context}"


def assert_top_answer(answer, ledger: VoteLedger, k: int, what: str = "") -> None:
    """`answer` (spanner_reads.fresh_top.FreshTop, the all-time top by upvotes) against the ledger:
    every listed post at its true counts, highest upvotes first; a certified answer is the true top
    K by upvotes (ties at the K-th place may go either way); the bound above every post left out."""
    totals = ledger.totals()
    listed = [p.post_id for p in answer.posts]
    upvotes = {post_id: counts.upvotes for post_id, counts in totals.items()}
    ranked = sorted(upvotes.items(), key=lambda item: (-item[1], item[0]))
    context = (
        f"{what}: answer {[(p.post_id, p.counts.upvotes) for p in answer.posts]} exact={answer.exact} "
        f"bound={answer.bound}; truth {ranked[: k + 5]}"
    )
    assert len(listed) <= k and len(set(listed)) == len(listed), context
    for post in answer.posts:
        assert post.counts == totals.get(post.post_id, Counts()), f"{post.post_id} counts; {context}"
    assert [upvotes.get(p, 0) for p in listed] == sorted((upvotes.get(p, 0) for p in listed), reverse=True), context
    if answer.exact:
        values = [upvotes.get(p, 0) for p in listed]
        assert values == [n for _, n in ranked[: len(listed)]], f"certified but wrong; {context}"
        assert not listed or all(n <= values[-1] for p, n in ranked if p not in listed), (
            f"certified but a post left out beats it; {context}"
        )
    if answer.bound is not None:
        for post_id, n in ranked:
            if post_id not in listed and (len(listed) < k or n > upvotes.get(listed[-1], 0)):
                assert n <= answer.bound, f"{post_id} left out with {n} > bound {answer.bound}; {context}"


def keys_and_hours(database) -> tuple[dict[str, float | None], dict[str, dict[int, Counts]]]:
    """Every Posts.HotKey and every PostHourlyCounts row, read directly, in one snapshot."""
    with database.snapshot(multi_use=True) as snapshot:
        keys = dict(snapshot.read(POSTS, columns=("PostId", HOT_KEY), keyset=spanner.KeySet(all_=True)))
        hours: dict[str, dict[int, Counts]] = {}
        for post_id, hour, *counts in snapshot.read(
            HOURLY, columns=("PostId", "EventHour") + COUNTER_COLUMNS, keyset=spanner.KeySet(all_=True)
        ):
            hours.setdefault(post_id, {})[int(hour.timestamp())] = Counts(*counts)
    return keys, hours


def stale_keys(database, half_life_hours: float) -> dict[str, float | None]:
    """The posts whose HotKey is not the score of their hourly rows under `half_life_hours`
    (NULL with none), with their key."""
    keys, hours = keys_and_hours(database)
    return {
        post_id: key
        for post_id, key in keys.items()
        if key != (hot_score(hours[post_id].items(), half_life_hours).key if post_id in hours else None)
    }


def unfenced(database) -> dict[str, tuple]:
    """The posts whose HotKeyThrough is not their hourly watermark, with (HotKeyThrough,
    FoldedThrough, HourlyFoldedThrough)."""
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.read(
                POSTS,
                columns=("PostId", "HotKeyThrough", "FoldedThrough", "HourlyFoldedThrough"),
                keyset=spanner.KeySet(all_=True),
            )
        )
    return {
        post_id: (through, folded, hourly)
        for post_id, through, folded, hourly in rows
        if through is None or through != (folded if hourly is None else hourly)
    }
