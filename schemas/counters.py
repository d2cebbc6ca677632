"""The counters, declared once: every part of the system that keeps, carries or shows a count
follows COUNTERS.

A counter is a number per post that vote events change by a delta. Each is declared with:

- `name`: its field in `Counts` and its key in every output (JSON lines, HTTP, the ledger)
  and flag (`upvotes adjust --shares`);
- `contract_name`: the event's "counter" value (schemas/vote_event.schema.json);
- `column`: its Spanner column, the same name in every table and index that keeps counts
  (schemas/posts.sql);
- `records_voters`: whether an event of it with a positive delta and a user_id makes that
  user one of the post's unique voters (schemas/voter_sketch.py);
- `noun`: one event of it ("share"), for `upvotes publish --<noun>-fraction`;
- `generated_fraction`: its share of the events `upvotes publish` generates unless told
  otherwise (the ranking counter, upvotes, takes the rest, un-votes included);
- `vote`: the value of a vote-state event (schemas/vote_states.py) that this counter counts
  the users of: the post's upvotes include every user whose latest vote is "up", its
  downvotes every user whose latest vote is "down". None: no vote state counts here.
- `hot_weight`: what one of its events adds to the post's hot score (schemas/hot_score.py)
  before the decay: an upvote +1, a downvote -1, shares and views 0 unless declared otherwise.

Generated from it: `Counts`, the typed sums every accumulator uses (no positional slots);
the column lists and the mutation costs of every write (spanner_store/tables.py,
spanner_store/mutation_cost.py); the contract's check of the counter field; every output's
fields; the adjust and publish flags.

Adding a counter is one entry here, plus what a test holds to it: its column in
schemas/posts.sql, in every table and index that keeps counts, declared
`INT64 NOT NULL DEFAULT (0)` so that `upvotes provision` can add it to a database that already
has rows (and so that rows an older writer adds read 0); and its contract name in the JSON
Schema's enum.

`Counts` pickles by field name, not by position: a record pickled by a job that had fewer
counters (a window still open when the job is updated in place to a version with one more)
reads back with the new counter at 0.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar


@dataclass(frozen=True)
class Counter:
    name: str
    contract_name: str
    column: str
    records_voters: bool
    noun: str
    generated_fraction: float
    vote: str | None = None
    hot_weight: float = 0.0


COUNTERS: tuple[Counter, ...] = (
    Counter(
        name="upvotes",
        contract_name="upvotes",
        column="Upvotes",
        records_voters=True,
        noun="upvote",
        generated_fraction=0.0,
        vote="up",
        hot_weight=1.0,
    ),
    Counter(
        name="downvotes",
        contract_name="downvotes",
        column="Downvotes",
        records_voters=True,
        noun="downvote",
        generated_fraction=0.0,
        vote="down",
        hot_weight=-1.0,
    ),
    Counter(
        name="shares",
        contract_name="shares",
        column="Shares",
        records_voters=False,
        noun="share",
        generated_fraction=0.2,
    ),
    Counter(
        name="views", contract_name="views", column="Views", records_voters=False, noun="view", generated_fraction=0.0
    ),
)

NAMES: tuple[str, ...] = tuple(counter.name for counter in COUNTERS)
CONTRACT_NAMES: tuple[str, ...] = tuple(counter.contract_name for counter in COUNTERS)
COLUMNS: tuple[str, ...] = tuple(counter.column for counter in COUNTERS)
# The counter posts are ranked by (the PostsByUpvotes index, `upvotes top`, the fresh-top
# candidates); un-votes are negative deltas of it.
RANKING = COUNTERS[0]
# The contract names whose events name a voter (schemas/voter_sketch.py).
VOTER_CONTRACT_NAMES = frozenset(counter.contract_name for counter in COUNTERS if counter.records_voters)
# Per counter, in Counts order: what one event adds to the hot score (schemas/hot_score.py).
HOT_WEIGHTS: tuple[float, ...] = tuple(counter.hot_weight for counter in COUNTERS)
NAME_OF = {counter.contract_name: counter.name for counter in COUNTERS}  # contract name -> name
# Vote-state values -> the counter each counts (schemas/vote_states.py adds "none", which counts nowhere).
COUNTER_OF_VOTE = {counter.vote: counter.name for counter in COUNTERS if counter.vote is not None}


if TYPE_CHECKING:
    from typing_extensions import Self

    class _CountFields(tuple[int, ...]):
        """What a type checker can know of the namedtuple below, whose fields are NAMES: an int
        per counter, by position or by name."""

        _fields: ClassVar[tuple[str, ...]]

        def __new__(cls, *values: int, **by_name: int) -> Self: ...
        def __getattr__(self, name: str) -> int: ...
        def _asdict(self) -> dict[str, int]: ...
        def _replace(self, **by_name: int) -> Self: ...
else:
    _CountFields = namedtuple("Counts", NAMES, defaults=(0,) * len(NAMES))


class Counts(_CountFields):
    """One integer per counter, in COUNTERS order, each 0 unless given. Immutable."""

    __slots__ = ()

    def plus(self, other: Counts) -> Counts:
        return Counts(*map(operator.add, self, other))

    def negated(self) -> Counts:
        return Counts(*(-value for value in self))

    def is_zero(self) -> bool:
        return not any(self)

    def __reduce__(self):
        return _counts_by_name, (self._asdict(),)


def _counts_by_name(values: Mapping[str, int]) -> Counts:
    """Unpickles Counts by field name; a counter the pickling job did not have is 0."""
    return Counts(**{name: value for name, value in values.items() if name in NAMES})


def one(contract_name: str, delta: int) -> Counts:
    """The Counts of one event: `delta` on its counter."""
    return Counts(**{NAME_OF[contract_name]: delta})


def by_contract_name(values: Mapping[str, int]) -> Counts:
    """Counts from {contract name: value}; missing counters are 0."""
    return Counts(**{NAME_OF[name]: value for name, value in values.items()})


def total(counts: Iterable[Counts]) -> Counts:
    result = Counts()
    for value in counts:
        result = result.plus(value)
    return result
