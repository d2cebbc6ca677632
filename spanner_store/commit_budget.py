"""Cutting writes into commits within a mutation budget and a row cap: the one cutter of every
writer that batches (the delta sink's `plan_commits`, the vote-state sink's `plan_batches`).

A writer describes what a commit of its items costs as a `CommitCost`: a fixed part per commit
(its log rows), a part per item (its own row), and rows the items of one commit share, each
paid once per commit whichever items share it (a delta's parent Posts row; a vote state's delta
row per post and hour). From that one description come both the cost of a given commit
(`CommitCost.of`, what tests and the transactions check) and the cuts (`cut_within_budget`),
so the two cannot disagree. Pure: unit-tested without Spanner (tests/test_commit_budget.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Shared(Generic[T]):
    """A row the items of one commit share: one per distinct `key(item)`, costing `mutations`."""

    key: Callable[[T], Hashable]
    mutations: int


@dataclass(frozen=True)
class CommitCost(Generic[T]):
    """The mutations a commit of items of one kind costs (spanner_store/mutation_cost.py gives
    the per-row costs)."""

    per_commit: int
    per_item: int
    shared: tuple[Shared[T], ...] = ()

    @property
    def one_item(self) -> int:
        """What a commit of one item costs: the least any commit costs."""
        return self.per_commit + self.per_item + sum(share.mutations for share in self.shared)

    def of(self, items: Iterable[T]) -> int:
        """The mutations one commit of these items costs."""
        items = list(items)
        return (
            self.per_commit
            + len(items) * self.per_item
            + sum(len({share.key(item) for item in items}) * share.mutations for share in self.shared)
        )


def cut_within_budget(
    items: Iterable[T], cost: CommitCost[T], max_rows: int, max_mutations: int, what: str = "item"
) -> list[list[T]]:
    """Cuts `items`, in the order given, into commits of at most `max_rows` items and
    `max_mutations` mutations (`cost`), each as full as both limits allow. Raises ValueError when
    a commit of one item would break the budget (`what` names an item in the message)."""
    if cost.one_item > max_mutations:
        raise ValueError(f"max_mutations {max_mutations} cannot fit even one {what}")
    commits: list[list[T]] = []
    current: list[T] = []
    seen: list[set[Hashable]] = [set() for _ in cost.shared]
    spent = cost.per_commit
    for item in items:
        keys = [share.key(item) for share in cost.shared]
        extra = cost.per_item + sum(
            share.mutations for share, key, known in zip(cost.shared, keys, seen) if key not in known
        )
        if current and (len(current) >= max_rows or spent + extra > max_mutations):
            commits.append(current)
            current, seen, spent = [], [set() for _ in cost.shared], cost.per_commit
            extra = cost.one_item - cost.per_commit
        current.append(item)
        for key, known in zip(keys, seen):
            known.add(key)
        spent += extra
    if current:
        commits.append(current)
    return commits
