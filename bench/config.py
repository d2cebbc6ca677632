"""Sizes shared by benchmarks: the race's burst, and a run's collection of every benchmark's sizes.

Each benchmark's own sizes (full run, about 45 minutes on 2 cores in all, and the --quick smoke
run) are a frozen dataclass `Sizes` in its module, with module-level FULL and QUICK."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from upvotes.devtools.workload import Workload


@dataclass(frozen=True)
class Race:
    """The race's viral burst (hot_post's end to end, write_back's race, vote_states' races): the
    same for every approach that takes votes through a buffer, so that their rates compare."""

    e2e_votes: int  # end to end through Pub/Sub (or the cache), a viral burst
    e2e_posts: int


FULL_RACE = Race(e2e_votes=100_000, e2e_posts=1_000)
QUICK_RACE = Race(e2e_votes=10_000, e2e_posts=200)


@dataclass(frozen=True)
class RunSizes:
    """A run's sizes: each benchmark's own (its module's `Sizes`), by benchmark name; `as_dict`
    goes into the results as they ran. bench.registry.run_sizes builds it."""

    name: str  # "full" or "quick"
    benchmarks: Mapping[str, Any]

    def __getitem__(self, benchmark: str) -> Any:
        return self.benchmarks[benchmark]

    def as_dict(self) -> dict:
        return {"name": self.name, **{name: asdict(sizes) for name, sizes in self.benchmarks.items()}}


# The race's viral burst, the same for every approach that takes votes through a buffer
# (bench/hot_post.py's end to end, bench/write_back.py): RACE_WINDOW_S is the pipeline's window
# there and the write-back flusher's interval, so that their freshness compares.
RACE_WINDOW_S = 2
RACE_ZIPF = 1.2
# A viral burst's votes are stamped as they are cast: within the second before the burst is sent,
# one event hour (two across the turn of an hour). Workload's default two-hour span would give each
# post two or three delta rows per window, which live votes do not.
LIVE_SPAN_MS = 1_000


def race_workload(race: Race, prefix: str, fractions: Mapping[str, float] | None = None) -> Workload:
    """race.e2e_votes live votes (LIVE_SPAN_MS) over race.e2e_posts posts named <prefix><rank>, Zipf
    RACE_ZIPF; `fractions` as Workload's (None: the default mix)."""
    return Workload(
        events=race.e2e_votes,
        posts=race.e2e_posts,
        zipf=RACE_ZIPF,
        seed=13,
        post_prefix=prefix,
        fractions=fractions or {},
        span_ms=LIVE_SPAN_MS,
    )
