"""The documented names of modules that moved (CHANGELOG.md) still import from their old paths,
each with a DeprecationWarning naming the new one, and are the very same objects."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    ("spanner_store.reads", "exact_counts"): "spanner_reads.reads",
    ("spanner_store.reads", "top_posts"): "spanner_reads.reads",
    ("spanner_store.reads", "verify_totals"): "upvotes.devtools.verification",
    ("spanner_store.counts_reader", "CountsReader"): "spanner_reads.counts_reader",
    ("spanner_store.votes", "vote_of"): "spanner_reads.my_votes",
    ("spanner_store.votes", "StoredVote"): "spanner_store.vote_rows",
    ("spanner_reads.trending", "hot_top"): "spanner_reads.rankings.hot",
    ("spanner_reads.trending", "HotRankingUnavailable"): "spanner_reads.rankings.hot",
    ("spanner_reads.trending", "window_top"): "spanner_reads.rankings.last_hours",
    ("spanner_reads.trending", "TrendingTop"): "spanner_reads.rankings.trending_top",
    ("spanner_reads.trending", "RankedPost"): "spanner_reads.rankings.ranking",
    ("spanner_reads.fresh_top", "fresh_top"): "spanner_reads.rankings.all_time",
    ("spanner_reads.fresh_top", "FreshTop"): "spanner_reads.rankings.all_time",
    ("spanner_reads.fresh_top", "DEFAULT_EXTRA"): "spanner_reads.fresh_side",
}


@pytest.mark.parametrize(("old", "name"), list(MOVED))
def test_an_old_path_still_imports_and_warns_with_the_new_one(old: str, name: str) -> None:
    new = MOVED[old, name]
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} is deprecated: import it from {new}"):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)


def test_a_name_that_never_was_there_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'write_deltas'"):
        importlib.import_module("spanner_store.reads").write_deltas  # noqa: B018


def test_every_forwarder_imports_its_new_modules_where_the_import_contracts_see_them() -> None:
    # .importlinter names the forwarders that reach up a layer; an import by name inside a function
    # (importlib) would hide them from it.
    import grimp

    graph = grimp.build_graph("spanner_store", "spanner_reads", "upvotes")
    for (old, _name), new in MOVED.items():
        assert new in graph.find_modules_directly_imported_by(old), (old, new)
