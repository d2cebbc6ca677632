"""The hot score's arithmetic (schemas/hot_score.py), pure: each property its docstring claims,
against values computed here (directly, or by tests/support/trending_ledger.py's 60-digit brute
force), never against the module's own output alone."""

from __future__ import annotations

import itertools
import math
import random
import struct
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from schemas.counters import Counts
from schemas.hot_score import (
    HOUR_S,
    KEY_OFFSET,
    ZERO,
    HotScore,
    hot_net,
    hot_score,
    log2_of_rise,
    log2_sum,
    rise_of,
)
from schemas.records import PostDelta
from tests.support.trending_ledger import VoteLedger, brute_hot

HOUR_2026 = int(datetime(2026, 11, 22, 13, tzinfo=timezone.utc).timestamp())
HOUR_2126 = int(datetime(2126, 11, 22, 13, tzinfo=timezone.utc).timestamp())
MOMENT_2026 = datetime(2026, 11, 22, 14, 30, tzinfo=timezone.utc)


def bits(value: float) -> bytes:
    return struct.pack(">d", value)


def hours_of(cells: dict[int, Counts]) -> list[tuple[int, Counts]]:
    return list(cells.items())


def random_hours(rng: random.Random, base: int, span: int, n: int, big: bool = False) -> dict[int, Counts]:
    """n distinct event hours within `span` hours before `base`, with random counts of every counter."""
    hours = rng.sample(range(span), n)
    top = 10**15 if big else 50
    return {
        base - HOUR_S * h: Counts(
            upvotes=rng.randint(-top, top),
            downvotes=rng.randint(-top // 5, top),
            shares=rng.randint(0, 9),
            views=rng.randint(0, 9),
        )
        for h in hours
    }


# --- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_the_same_hours_in_any_order_give_identical_key_bits(seed: int) -> None:
    """Large nets that nearly cancel (a viral post's votes, then as many un-votes), where a plain
    float sum of the terms gives different bits in different orders."""
    rng = random.Random(seed)
    half_life = 12.0
    cells = random_hours(rng, HOUR_2026 - HOUR_S, 400, 12, big=True)
    weighted = math.fsum(hot_net(c) * 2.0 ** ((h - HOUR_2026) / HOUR_S / half_life) for h, c in cells.items())
    cells[HOUR_2026] = Counts(downvotes=round(weighted) + rng.randint(-50, 50))
    items = hours_of(cells)
    expected = bits(hot_score(items, half_life).key)
    naive = set()
    for _ in range(40):
        rng.shuffle(items)
        assert bits(hot_score(items, half_life).key) == expected
        naive.add(sum(hot_net(c) * 2.0 ** ((h - HOUR_2026) / HOUR_S / half_life) for h, c in items))
    assert len(naive) > 1  # the orders tried would give a plain sum different values


def test_the_order_of_the_terms_matters_to_a_plain_sum_but_not_to_the_score() -> None:
    """The case the determinism claim is about: nets whose naive float sum depends on the order."""
    half_life = 1000.0
    cells = {
        HOUR_2026: Counts(upvotes=10**16),
        HOUR_2026 - HOUR_S: Counts(upvotes=3),
        HOUR_2026 - 2 * HOUR_S: Counts(downvotes=10**16),
        HOUR_2026 - 3 * HOUR_S: Counts(upvotes=5),
    }
    terms = [(hot_net(c)) * 2.0 ** ((h - HOUR_2026) / HOUR_S / half_life) for h, c in cells.items()]
    naive = {sum(order) for order in itertools.permutations(terms)}
    assert len(naive) > 1  # a plain sum would give different bits in different orders
    keys = {bits(hot_score(list(order), half_life).key) for order in itertools.permutations(cells.items())}
    assert len(keys) == 1
    # And the one value is the exactly rounded one: math.fsum of the terms, whatever their order.
    exact = HotScore.from_key(hot_score(cells.items(), half_life).key)
    assert exact.sign == 1
    assert exact.log2 == pytest.approx(HOUR_2026 / HOUR_S / half_life + math.log2(math.fsum(terms)), abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_splitting_an_hours_counts_over_deltas_and_summing_first_gives_the_same_key(seed: int) -> None:
    """However the votes of an hour were cut into delta rows (bundles, windows, panes, retries),
    and whichever of those rows a fold has moved into the hourly rows, the read sums them per
    hour: the key is the same bits."""
    rng = random.Random(100 + seed)
    cells = random_hours(rng, HOUR_2026, 60, 8)
    whole = bits(hot_score(cells.items(), 12.0).key)
    for _ in range(10):
        deltas = []  # each hour's counts cut into 1 to 5 delta rows
        for hour, counts in cells.items():
            cuts = rng.randint(1, 5)
            parts = [Counts(*(rng.randint(-20, 20) for _ in counts)) for _ in range(cuts - 1)]
            last = counts
            for part in parts:
                last = last.plus(part.negated())
            deltas += [(hour, part) for part in parts + [last]]
        rng.shuffle(deltas)
        folded = rng.randint(0, len(deltas))  # the first `folded` rows are in PostHourlyCounts
        hourly: dict[int, Counts] = {}
        for hour, part in deltas[:folded]:
            hourly[hour] = hourly.get(hour, Counts()).plus(part)
        read = dict(hourly)
        for hour, part in deltas[folded:]:
            read[hour] = read.get(hour, Counts()).plus(part)
        assert bits(hot_score(read.items(), 12.0).key) == whole


def test_hours_that_add_nothing_to_the_net_change_nothing() -> None:
    cells = {HOUR_2026: Counts(upvotes=7, downvotes=2), HOUR_2026 - 5 * HOUR_S: Counts(upvotes=3)}
    key = bits(hot_score(cells.items(), 12.0).key)
    more = {
        **cells,
        HOUR_2026 + HOUR_S: Counts(shares=40, views=900),  # weight 0
        HOUR_2026 - HOUR_S: Counts(upvotes=4, downvotes=4),
    }  # cancels within its hour
    assert bits(hot_score(more.items(), 12.0).key) == key


# --- no overflow, no loss of order, for a century -----------------------------------------------


@pytest.mark.parametrize("half_life", [1.0, 12.0])
def test_votes_in_2126_neither_overflow_nor_lose_their_order(half_life: float) -> None:
    hours_since_1970 = HOUR_2126 // HOUR_S
    with pytest.raises(OverflowError):  # S itself is far past the largest float
        2.0 ** (hours_since_1970 / half_life)
    one = hot_score([(HOUR_2126, Counts(upvotes=1))], half_life)
    assert one.sign == 1 and math.isfinite(one.key)
    assert one.log2 == pytest.approx(hours_since_1970 / half_life, abs=1e-9)
    moment = datetime.fromtimestamp(HOUR_2126, timezone.utc)
    assert one.at(moment, half_life) == pytest.approx(1.0, rel=1e-9)  # a vote now counts 1
    assert one.at(moment + timedelta(hours=half_life), half_life) == pytest.approx(0.5, rel=1e-9)

    n = 10**9
    a = hot_score([(HOUR_2126, Counts(upvotes=n))], half_life)
    b = hot_score([(HOUR_2126, Counts(upvotes=n + 1))], half_life)  # a vote apart, in a billion
    c = hot_score([(HOUR_2126, Counts(upvotes=n)), (HOUR_2126 - HOUR_S, Counts(upvotes=1))], half_life)
    d = hot_score([(HOUR_2126, Counts(upvotes=n, downvotes=1))], half_life)
    assert d.key < a.key < c.key < b.key  # c's extra vote is an hour old: worth less than b's
    assert [s.order() for s in (b, c, a, d)] == sorted(s.order() for s in (b, c, a, d))
    for score in (a, b, c, d):
        assert HotScore.from_key(score.key) == score
    assert a.at(moment, half_life) == pytest.approx(n, rel=1e-9)
    # log2 of a 2126 score at H = 1 has a step of 2.3e-10: 0.16 of a vote in a billion.
    assert b.at(moment, half_life) - a.at(moment, half_life) == pytest.approx(1.0, abs=0.35)


def test_a_century_of_hours_in_one_post_stays_finite_and_exact() -> None:
    """One vote a week from 2026 to 2126 (5,218 hours): the newest weigh, the oldest underflow."""
    cells = {HOUR_2126 - HOUR_S * 24 * 7 * week: Counts(upvotes=1) for week in range(5218)}
    for half_life in (1.0, 12.0, 9999.0):
        score = hot_score(cells.items(), half_life)
        assert score.sign == 1 and math.isfinite(score.key)
        moment = datetime.fromtimestamp(HOUR_2126, timezone.utc)
        # The geometric series of one vote a week: sum of 2^(-168 w / H).
        ratio = 2.0 ** (-168 / half_life)
        expected = (1 - ratio**5218) / (1 - ratio)
        assert score.at(moment, half_life) == pytest.approx(expected, rel=1e-9)


# --- the order: positive, then 0, then the smallest loss first; ties by post ID -----------------


def test_scores_at_or_below_zero_rank_below_every_positive_one_in_the_stated_order() -> None:
    h = HOUR_2026
    posts = {
        "big": {h: Counts(upvotes=500)},
        # 1 vote 1,000 half-lives before the others' hours (H = 1): positive, if tiny.
        "faint": {h - 1000 * HOUR_S: Counts(upvotes=1)},
        "no-votes": {h: Counts(shares=50, views=1000)},
        "cancelled": {h: Counts(upvotes=3, downvotes=3)},
        # 2 upvotes at h - H and a downvote at h: 2 * 1/2 - 1 = 0 exactly.
        "cancelled-across-hours": {h - HOUR_S: Counts(upvotes=2), h: Counts(downvotes=1)},
        "small-loss": {h - 30 * HOUR_S: Counts(downvotes=1)},
        "loss": {h: Counts(downvotes=1)},
        "big-loss": {h: Counts(downvotes=5, upvotes=1)},
        "mixed-positive": {h - HOUR_S: Counts(downvotes=3), h: Counts(upvotes=2)},  # 2 - 3/2 > 0
    }
    scores = {post: hot_score(cells.items(), 1.0) for post, cells in posts.items()}
    expected = [
        "big",
        "mixed-positive",
        "faint",
        "cancelled",
        "cancelled-across-hours",
        "no-votes",
        "small-loss",
        "loss",
        "big-loss",
    ]
    assert sorted(scores, key=lambda p: (*scores[p].order(), p)) == expected
    assert sorted(scores, key=lambda p: (-scores[p].key, p)) == expected  # the index's order, the same
    assert [p for p in expected if scores[p] == ZERO] == ["cancelled", "cancelled-across-hours", "no-votes"]
    assert all(scores[p].key > 0 for p in expected[:3]) and all(scores[p].key < 0 for p in expected[-3:])

    ledger = VoteLedger()
    for post, cells in posts.items():
        for hour, counts in cells.items():
            ledger.add_deltas([_delta(post, hour, counts)])
    assert [s.post_id for s in brute_hot(ledger, 1.0, MOMENT_2026)] == expected


def test_ties_are_broken_by_post_id_however_the_tie_is_made() -> None:
    h = HOUR_2026
    posts = {
        "t-c": [(h, Counts(upvotes=4))],
        "t-a": [(h, Counts(upvotes=6, downvotes=2))],
        "t-d": [(h, Counts(upvotes=2)), (h - 12 * HOUR_S, Counts(upvotes=4))],  # 2 + 4/2: 4 at H = 12
        "t-b": [(h + 12 * HOUR_S, Counts(upvotes=2))],  # 2 * 2 = 4 at hour h's weight
        "u-hi": [(h, Counts(upvotes=5))],
        "u-lo": [(h, Counts(upvotes=3))],
    }
    scores = {post: hot_score(cells, 12.0) for post, cells in posts.items()}
    read_order = sorted(scores, key=lambda p: (*scores[p].order(), p))  # spanner_reads/trending.py's sort
    assert read_order == ["u-hi", "t-a", "t-b", "t-c", "t-d", "u-lo"]
    ledger = VoteLedger()
    for post, cells in posts.items():
        ledger.add_deltas(_delta(post, hour, counts) for hour, counts in cells)
    assert [s.post_id for s in brute_hot(ledger, 12.0, MOMENT_2026)] == read_order


# --- the decay ------------------------------------------------------------------------------------


@pytest.mark.parametrize("half_life", [1.0, 5.5, 12.0])
def test_at_halves_every_half_life(half_life: float) -> None:
    rng = random.Random(int(half_life * 10))
    for _ in range(20):
        cells = random_hours(rng, HOUR_2026, 100, 6)
        score = hot_score(cells.items(), half_life)
        if score.sign == 0:
            continue
        start = MOMENT_2026 + timedelta(minutes=rng.randint(0, 600))
        now = score.at(start, half_life)
        # Independently: sum of net_h * 2^((h - T) / H).
        t = start.timestamp() / HOUR_S
        direct = math.fsum(hot_net(c) * 2.0 ** ((hour / HOUR_S - t) / half_life) for hour, c in cells.items())
        assert now == pytest.approx(direct, rel=1e-9)
        for periods in (1, 2, 5):
            later = score.at(start + timedelta(hours=half_life * periods), half_life)
            assert later == pytest.approx(now / 2**periods, rel=1e-12)


def test_a_vote_counts_one_in_its_own_hour_and_half_one_half_life_later() -> None:
    score = hot_score([(HOUR_2026, Counts(upvotes=3, downvotes=1))], 12.0)
    vote_time = datetime.fromtimestamp(HOUR_2026, timezone.utc)
    assert score.at(vote_time, 12.0) == pytest.approx(2.0, rel=1e-12)
    assert score.at(vote_time + timedelta(hours=12), 12.0) == pytest.approx(1.0, rel=1e-12)
    loss = hot_score([(HOUR_2026, Counts(downvotes=4))], 12.0)
    assert loss.at(vote_time + timedelta(hours=24), 12.0) == pytest.approx(-1.0, rel=1e-12)
    assert ZERO.at(vote_time, 12.0) == 0.0


# --- the pieces of the bound ----------------------------------------------------------------------


def test_log2_sum_equals_a_direct_sum_for_small_values() -> None:
    assert log2_sum([]) == -math.inf and log2_sum([-math.inf, -math.inf]) == -math.inf
    assert log2_sum([0.0, 0.0]) == 1.0
    assert log2_sum([3.0, 3.0, 4.0]) == 5.0
    assert log2_sum([-math.inf, 2.0]) == 2.0
    assert log2_sum([1e6, 1e6]) == 1e6 + 1  # no overflow where 2^v would
    rng = random.Random(7)
    for _ in range(200):
        values = [rng.choice([rng.randint(1, 1000), rng.uniform(0.001, 50.0)]) for _ in range(rng.randint(1, 8))]
        assert 2.0 ** log2_sum([math.log2(v) for v in values]) == pytest.approx(math.fsum(values), rel=1e-12)
        # Shifted by a century of half-lives, it is the same sum, shifted.
        shift = 114_000.0
        assert log2_sum([math.log2(v) + shift for v in values]) == pytest.approx(
            math.log2(math.fsum(values)) + shift, abs=1e-9
        )


@pytest.mark.parametrize(
    "counts, rise",
    [
        (Counts(upvotes=3), 3.0),
        (Counts(downvotes=2), 0.0),
        (Counts(upvotes=-4), 0.0),
        (Counts(shares=10, views=5), 0.0),
        (Counts(upvotes=2, downvotes=5), 2.0),  # nets -3, but its upvotes lift a last-hours count
        (Counts(upvotes=-1, downvotes=-3), 2.0),  # a flip away from down: the net rises by 2
        (Counts(upvotes=5, downvotes=-1, shares=3), 6.0),
        (Counts(), 0.0),
    ],
)
def test_rise_of(counts: Counts, rise: float) -> None:
    assert rise_of(counts) == rise


@pytest.mark.parametrize("seed", range(5))
def test_log2_of_rise_bounds_what_those_votes_add(seed: int) -> None:
    """What `rise` votes (clipped at 0, row by row) counted at or before `newest` add to S is at
    most 2^log2_of_rise: the bound of a post a read did not consider."""
    rng = random.Random(seed)
    for half_life in (1.0, 12.0):
        rows = [
            (HOUR_2026 - HOUR_S * rng.randint(0, 48), Counts(upvotes=rng.randint(-5, 9), downvotes=rng.randint(-4, 6)))
            for _ in range(6)
        ]
        newest = max(hour for hour, _ in rows)
        rise = math.fsum(rise_of(c) for _, c in rows)
        per_hour: dict[int, Counts] = {}
        for hour, counts in rows:
            per_hour[hour] = per_hour.get(hour, Counts()).plus(counts)
        added = hot_score(per_hour.items(), half_life)
        if added.sign > 0:
            assert added.log2 <= log2_of_rise(rise, newest, half_life) + 1e-12
        exact = math.fsum(hot_net(c) * 2.0 ** ((h - newest) / HOUR_S / half_life) for h, c in rows)
        assert exact <= rise + 1e-9
    assert log2_of_rise(0.0, HOUR_2026, 12.0) == -math.inf
    assert log2_of_rise(4.0, HOUR_2026, 12.0) == pytest.approx(HOUR_2026 / HOUR_S / 12.0 + 2.0, abs=1e-9)


def test_the_key_is_one_ordered_value_and_round_trips() -> None:
    assert ZERO.key == 0.0 and HotScore.from_key(None) == ZERO and HotScore.from_key(0.0) == ZERO
    rng = random.Random(3)
    scores = [hot_score(random_hours(rng, HOUR_2026, 200, 5).items(), 12.0) for _ in range(50)]
    for score in scores:
        assert HotScore.from_key(score.key) == score
        assert score.key == 0.0 or abs(score.key) > KEY_OFFSET - 1076  # every positive above 0, every negative below
    assert sorted(scores, key=lambda s: -s.key) == sorted(scores, key=HotScore.order)


def _delta(post_id: str, hour: int, counts: Counts) -> PostDelta:
    counters: dict[str, Any] = counts._asdict()  # PostDelta.of's keywords, by counter
    return PostDelta.of(post_id, hour, "d", **counters)
