"""PostTotals (what spanner_reads.reads.exact_counts returns) and PostCount (what a CountsReader
answers): one JSON form, and the per-counter attributes of before the counts moved into `counts`,
kept working with a DeprecationWarning. Pure: no emulator."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timezone

import pytest

from schemas.counters import NAMES, Counts
from schemas.records import PostTotals
from spanner_reads.counts_reader import PostCount

AS_OF = datetime(2026, 11, 26, 3, 0, 1, 250_000, tzinfo=timezone.utc)
COUNTS = Counts(**{name: 10 * (i + 1) for i, name in enumerate(NAMES)})


@pytest.mark.parametrize("name", NAMES)
def test_every_counter_is_still_an_attribute_that_warns_and_names_its_replacement(name) -> None:
    totals = PostTotals("p-1", COUNTS)
    with pytest.warns(DeprecationWarning, match=rf"use \.counts\.{name}$"):
        value = getattr(totals, name)
    assert value == getattr(totals.counts, name)


def test_the_warning_points_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PostTotals("p-1", COUNTS).upvotes  # type: ignore[attr-defined]  # noqa: B018 - the deprecated read is the test
    assert [w.filename for w in caught] == [__file__]


def test_the_fields_and_the_tuple_are_unchanged() -> None:
    totals = PostTotals("p-1", COUNTS, 3)
    assert PostTotals._fields == ("post_id", "counts", "unique_voters")
    assert tuple(totals) == ("p-1", COUNTS, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert totals.counts.upvotes == 10 and totals.post_id == "p-1"  # the current attributes never warn


def test_the_json_of_a_count_and_of_a_count_with_its_time_are_one_form() -> None:
    counters = ", ".join(f'"{name}": {10 * (i + 1)}' for i, name in enumerate(NAMES))
    assert json.dumps(PostTotals("p-1", COUNTS).to_json()) == f'{{"post_id": "p-1", {counters}}}'
    assert json.dumps(PostTotals("p-1", COUNTS, 7).to_json()) == f'{{"post_id": "p-1", {counters}, "unique_voters": 7}}'
    stamped = f'"as_of": "{AS_OF.isoformat()}"'
    assert json.dumps(PostCount("p-1", COUNTS, AS_OF).to_json()) == f'{{"post_id": "p-1", {counters}, {stamped}}}'
    count = PostCount.of(PostTotals("p-1", COUNTS, 7), AS_OF)
    assert count == PostCount("p-1", COUNTS, AS_OF, 7) and count.totals == PostTotals("p-1", COUNTS, 7)
    assert json.dumps(count.to_json()) == f'{{"post_id": "p-1", {counters}, {stamped}, "unique_voters": 7}}'
