"""The rankings of posts, one module each, and the registry every surface iterates over.

| Ranking | Module | Chosen by | Its answer |
| --- | --- | --- | --- |
| all time, by exact upvotes (the default) | all_time.py | `--by upvotes`, `by=upvotes`, or nothing | FreshTop |
| hot score | hot.py | `--by hot`, `by=hot` | TrendingTop |
| upvotes in the last N hours | last_hours.py | `--last 24h`, `last=24h` | TrendingTop |

Each implements `Ranking` (ranking.py): its name, its parameter if it has one, a read that returns
the top posts with their certification, and how the surfaces name it. `upvotes top` (and its
`--watch` table), GET /v1/top, the live page's tabs, CountsReader.ranked and the versioned views
(`publish-top-view --by`) iterate over RANKINGS: a new ranking is a module here and its line below.

How every ranking reads, in ONE read-only snapshot: the folded side (the top K+m of an index the
fold keeps, or the per-hour lists of the last N hours) and the side no fold has reached yet, read
the same way by all (spanner_reads/fresh_side.py): the fold cursor C, the posts it skipped, and
every TopCandidates row committed after C; then the exact scores of every post those name. A
post p not considered: its folded side is bounded by what the index read leaves below it, and
each of its unfolded deltas was committed after C (C vouches for the rest; its skipped posts are
considered) in a commit whose candidate row does not list p, so that commit raised p by at most
the row's bound (Threshold in upvotes, RiseThreshold for the trending rankings). The answer is
certified (`exact`) when its K-th beats the sum of both bounds (strictly for the trending
rankings, so a tie at the boundary is never certified the wrong way). When those bounds leave the
K-th uncertified, the read reads what decides it, within its budget: the posts of the commits
whose bounds stand in the way (fresh_side.Resolver), and deeper into the folded side when that is
what stands in the way. A post without any vote is in no trending ranking (an answer with fewer
than K posts lists every post that has one). None of the reads grows with the catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanner_reads.rankings import all_time, hot, last_hours
from spanner_reads.rankings.ranking import Parameter, Ranking

RANKINGS: dict[str, Ranking] = {
    ranking.name: ranking for ranking in (all_time.RANKING, hot.RANKING, last_hours.RANKING)
}
DEFAULT = all_time.RANKING.name  # the ranking asked for without --by or a parameter
# What --by and by= name; each of the others is chosen by its parameter (--last, last=).
BY_CHOICES = tuple(name for name, ranking in RANKINGS.items() if ranking.parameter is None)
PARAMETERS = tuple(ranking.parameter for ranking in RANKINGS.values() if ranking.parameter is not None)


class NotBoth(ValueError):
    """A ranking's parameter asked for with something no one ranking answers with it: another `by`
    (`other` is ("by", its name)) or another ranking's parameter ((its name, None))."""

    def __init__(self, parameter: Parameter, other: tuple[str, str | None]) -> None:
        name, value = other
        super().__init__(f"{parameter.name} ranks by {parameter.ranks}: not with {name}{f'={value}' if value else ''}")
        self.parameter = parameter
        self.other = other


def choose(by: str | None, given: Mapping[str, Any]) -> tuple[Ranking, dict[str, Any]]:
    """The ranking a request asks for, with its read's keyword arguments: the ranking whose
    parameter is given (`given` maps parameter names to values, None when not given), else `by`,
    else DEFAULT. A parameter's ranking ranks by what its `by` ranks by, within its window, so
    `by` may name that one too (by=upvotes&last=24h); NotBoth for any other."""
    asked: list[tuple[Ranking, Parameter]] = []
    for ranking in RANKINGS.values():
        if ranking.parameter is not None and given.get(ranking.parameter.name) is not None:
            asked.append((ranking, ranking.parameter))
    if not asked:
        return RANKINGS[by or DEFAULT], {}
    (ranking, parameter), *others = asked
    if others:
        raise NotBoth(parameter, (others[0][1].name, None))
    if by is not None and by != parameter.by:
        raise NotBoth(parameter, ("by", by))
    return ranking, {parameter.keyword: given[parameter.name]}
