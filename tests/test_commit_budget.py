"""The one budgeted cutter (spanner_store/commit_budget.py), pure: no emulator. The writers' own
plans (plan_commits, plan_batches) are tested with their costs in tests/test_sink.py and
tests/test_vote_states.py."""

from __future__ import annotations

import random

import pytest

from spanner_store.commit_budget import CommitCost, Shared, cut_within_budget

# An item is (post, hour): 3 mutations of its own, 5 per distinct post, 2 per distinct (post, hour),
# 7 per commit.
COST: CommitCost[tuple[str, int]] = CommitCost(7, 3, (Shared(lambda item: item[0], 5), Shared(lambda item: item, 2)))


def items(n: int, posts: int, hours: int, seed: int = 1) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(f"p{rng.randrange(posts)}", rng.randrange(hours)) for _ in range(n)]


def test_the_cost_of_a_commit_pays_each_shared_row_once() -> None:
    assert COST.of([]) == 7
    assert COST.of([("a", 1)]) == COST.one_item == 7 + 3 + 5 + 2
    assert COST.of([("a", 1), ("a", 1), ("a", 2), ("b", 1)]) == 7 + 4 * 3 + 2 * 5 + 3 * 2


@pytest.mark.parametrize(
    "n,posts,hours,max_rows,max_mutations",
    [
        (0, 1, 1, 10, 100),
        (1, 1, 1, 10, 17),
        (500, 3, 4, 1_000, 200),
        (500, 500, 1, 7, 10_000),
        (2_000, 40, 6, 50, 400),
        (300, 1, 1, 1_000, 17),
    ],
)
def test_every_item_once_in_order_each_commit_within_both_limits(n, posts, hours, max_rows, max_mutations) -> None:
    given = items(n, posts, hours)
    commits = cut_within_budget(given, COST, max_rows, max_mutations)
    assert [item for commit in commits for item in commit] == given
    assert all(1 <= len(commit) <= max_rows and COST.of(commit) <= max_mutations for commit in commits)


@pytest.mark.parametrize("max_rows,max_mutations", [(10, 150), (1_000, 150), (25, 10_000), (3, 40)])
def test_each_commit_is_as_full_as_the_limits_allow(max_rows, max_mutations) -> None:
    """A commit is only cut when the next item would break a limit."""
    given = items(400, 20, 3, seed=5)
    commits = cut_within_budget(given, COST, max_rows, max_mutations)
    for commit, following in zip(commits, commits[1:]):
        grown = commit + following[:1]
        assert len(grown) > max_rows or COST.of(grown) > max_mutations


def test_a_budget_that_fits_no_single_item_is_refused_even_before_any_item() -> None:
    with pytest.raises(ValueError, match="cannot fit even one post"):
        cut_within_budget([], COST, 10, COST.one_item - 1, "post")
    assert cut_within_budget([], COST, 10, COST.one_item) == []


def test_without_shared_rows_only_the_row_cap_and_the_per_item_cost_cut() -> None:
    flat: CommitCost[int] = CommitCost(per_commit=1, per_item=10)
    assert cut_within_budget(range(7), flat, max_rows=3, max_mutations=1_000) == [[0, 1, 2], [3, 4, 5], [6]]
    assert cut_within_budget(range(7), flat, max_rows=100, max_mutations=21) == [[0, 1], [2, 3], [4, 5], [6]]
