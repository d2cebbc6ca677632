"""TrendingTop: the answer of the rankings of what is viral now, the hot score
(spanner_reads/rankings/hot.py) and the upvotes of the last N hours (last_hours.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from spanner_reads.rankings.ranking import RankedPost

HOT = "hot"
LAST = "last"


@dataclass(frozen=True)
class TrendingTop:
    by: str  # HOT or LAST
    posts: list[RankedPost]  # highest score first, ties by post ID
    as_of: datetime  # the snapshot every count was read at
    folded_through: datetime | None  # the newest finished fold's snapshot
    exact: bool  # certified: these are the top K by that score (see spanner_reads/rankings/__init__.py)
    bound: float  # no post left out scores more than this (hot: at the snapshot; 0: none above 0; inf: unbounded)
    considered: int  # posts whose exact scores were read
    candidate_rows: int  # TopCandidates rows read
    rows_read: int  # index rows read for the folded side (and hourly rows read for the scores)
    half_life_hours: float | None = None  # hot: H
    hours: int | None = None  # last: N
    commits_read: int = 0  # commits whose every post was read, to certify the answer

    @property
    def ranked(self) -> list[RankedPost]:
        """The posts, as every ranking lists them."""
        return self.posts

    def to_json(self) -> dict:
        """The answer's header: how it was ranked and whether it is certified."""
        # An infinite bound (a commit that bounds nothing, past the read's budget) is not JSON: null.
        return {
            "by": self.by,
            "as_of": self.as_of.isoformat(),
            "exact": self.exact,
            "bound": self.bound if math.isfinite(self.bound) else None,
            "folded_through": None if self.folded_through is None else self.folded_through.isoformat(),
            "considered": self.considered,
            "candidate_rows": self.candidate_rows,
            "commits_read": self.commits_read,
            **({"half_life_hours": self.half_life_hours} if self.by == HOT else {"hours": self.hours}),
        }
