"""The hot score: what is viral now, as one number per post that only its own votes move.

A vote counted in event hour h (hours since 1970-01-01 UTC, the fixed epoch h0) weighs
w * 2^(h / H): w its counter's `hot_weight` (schemas/counters.py: an upvote +1, a downvote -1,
shares and views 0) and H the half-life in hours, fixed per database (`hotHalfLifeHours`).
A post's score is the sum over its votes, S(p) = sum_h net_h * 2^(h / H), with net_h the
weighted net of its exact counts in hour h (the hourly counts). Its hot score at time T is
2^(-T / H) * S(p): a vote now counts 1, a vote H hours old 1/2. The factor 2^(-T / H) is
the same for every post, so the order by hot at any T is the order by S: nothing is
re-ranked when time passes, and a vote only ever moves its own post.

The arithmetic (each property is tested in tests/test_hot_score.py):

- No overflow, for any number of years: S itself is not stored (2^(h / H) passes the
  largest float within weeks). The score is kept as its sign and log2|S|, computed as
  E / H + log2|m| with E the newest hour of a nonzero net and m = sum_h net_h * 2^((h - E) / H):
  every term has |2^((h - E) / H)| <= 1, so m stays a count-sized float, and log2|S| grows by
  1 per H hours (about 41,000 in 2026 at H = 12, 114,600 in 2126 at H = 12, and 1.4 million in
  2126 at H = 1, where a float's step is 2.3e-10: still an exact order for scores a
  billionth apart). Terms older than about 1,000 half-lives before E underflow to 0: they
  weigh less than 2^-1000 of a newer vote.
- Deterministic: m is `math.fsum` of the terms, the correctly rounded sum of the exact
  terms, whatever their order, and each term depends only on (net_h, h - E). So the same votes
  give the same bits whatever the bundles, windows, retries, arrival order and fold schedule:
  the fold computes it from the post's hourly rows (all of them, in one transaction), the
  reads from the same rows plus the unfolded deltas, and both get the same key.
- One ordered column, `HotScore.key`: sign * (log2|S| + KEY_OFFSET) (0 for S = 0), so that
  Posts(HotKey DESC) is the ranking. KEY_OFFSET exceeds the smallest log2|m| a float can
  hold (-1075), so every positive score ranks above 0 and every negative one below.
- Order: positive scores, highest first; then a score of 0; then negative scores, the
  smallest loss first (S descending throughout). Ties are broken by post ID.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import NamedTuple

from schemas.counters import HOT_WEIGHTS, Counts

HOUR_S = 3600
DEFAULT_HALF_LIFE_HOURS = 12.0
KEY_OFFSET = 2048.0  # > 1075, the magnitude of log2 of the smallest float


def hot_net(counts: Counts) -> float:
    """The weighted net of some counts: what they add to the score before the decay."""
    return math.fsum(weight * value for weight, value in zip(HOT_WEIGHTS, counts) if weight)


def rise_of(counts: Counts) -> float:
    """What these counts can raise a ranking by, at most, before the decay: the larger of their
    positive hot net and their upvotes (the last-hours ranking's counter), 0 when neither rises."""
    return max(0.0, hot_net(counts), float(counts.upvotes))


class HotScore(NamedTuple):
    """S(p) as its sign and log2|S| (see the module docstring)."""

    sign: int  # 1, 0 or -1
    log2: float  # log2|S|, S in votes weighted 2^(hours since 1970 / H); 0.0 when sign is 0

    @property
    def key(self) -> float:
        """The one ordered value stored in Posts.HotKey: S descending is key descending."""
        return self.sign * (self.log2 + KEY_OFFSET)

    @classmethod
    def from_key(cls, key: float | None) -> HotScore:
        """`key`'s inverse; NULL (a post never folded) is a score of 0."""
        if not key:
            return ZERO
        return cls(1 if key > 0 else -1, abs(key) - KEY_OFFSET)

    def at(self, moment: datetime, half_life_hours: float) -> float:
        """The hot score at `moment`: 2^(-T / H) * S, in votes of that moment (a vote then counts 1)."""
        if self.sign == 0:
            return 0.0
        exponent = self.log2 - _hours(moment) / half_life_hours
        return self.sign * (2.0**exponent if exponent < 1024 else math.inf)

    def order(self) -> tuple[int, float]:
        """A sort key, ascending for S descending (ties: append the post ID)."""
        return (-self.sign, -self.sign * self.log2)


ZERO = HotScore(0, 0.0)


def hot_score(hours: Iterable[tuple[int, Counts]], half_life_hours: float) -> HotScore:
    """The score of a post from its exact counts per event hour ((hour start in epoch seconds,
    Counts) pairs, each hour once). Deterministic: see the module docstring."""
    nets = [(hour // HOUR_S, net) for hour, counts in hours if (net := hot_net(counts))]
    if not nets:
        return ZERO
    newest = max(hour for hour, _ in nets)
    m = math.fsum(net * 2.0 ** ((hour - newest) / half_life_hours) for hour, net in nets)
    if m == 0:
        return ZERO
    return HotScore(1 if m > 0 else -1, newest / half_life_hours + math.log2(abs(m)))


def log2_of_rise(rise: float, newest_hour_s: int, half_life_hours: float) -> float:
    """log2 of the most that `rise` votes counted at or before `newest_hour_s` can add to S
    (-inf for none): the bound a fresh read gives a post it did not read (spanner_reads/rankings/hot.py)."""
    if rise <= 0:
        return -math.inf
    return newest_hour_s // HOUR_S / half_life_hours + math.log2(rise)


def log2_sum(values: Iterable[float]) -> float:
    """log2 of the sum of 2^v over `values` (-inf for none), without overflow."""
    values = [v for v in values if v != -math.inf]
    if not values:
        return -math.inf
    top = max(values)
    return top + math.log2(math.fsum(2.0 ** (v - top) for v in values))


def _hours(moment: datetime) -> float:
    moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
    return moment.timestamp() / HOUR_S
