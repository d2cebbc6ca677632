"""The counters' declaration (schemas/counters.py) held to what it cannot generate: the DDL's
columns, the JSON Schema's enum, and a Counts pickled by a job that had fewer counters."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import schemas
from schemas import counters, statements_of
from schemas.counters import (
    COLUMNS,
    CONTRACT_NAMES,
    COUNTER_OF_VOTE,
    COUNTERS,
    NAMES,
    Counts,
    by_contract_name,
    one,
    total,
)
from schemas.ddl import schema_model, table_columns
from schemas.vote_states import VOTES

BEFORE = Path(__file__).parent / "fixtures" / "posts_before_issue_22.sql"


def definitions(statements: list[str]) -> dict[str, dict[str, str]]:
    return dict(filter(None, map(table_columns, statements)))


def test_every_table_that_keeps_counts_has_every_counter_column() -> None:
    tables = definitions(schemas.ddl_statements())
    keeping = {name: columns for name, columns in tables.items() if set(COLUMNS) & set(columns)}
    assert {"Posts", "PostDeltas", "PostHourlyCounts", "Adjustments", "TopPostsViewRows"} <= set(keeping)
    for name, columns in keeping.items():
        for column in COLUMNS:
            assert re.match(rf"{column} INT64 NOT NULL\b", columns.get(column, "")), f"{name}.{column}"


def test_every_index_storing_a_counter_stores_every_counter() -> None:
    """(An index keyed on one, like the per-hour lists by upvotes, need not store the others.)"""
    for table in schema_model().values():
        for index in table.indexes:
            stored = (set(index.entry) - set(index.key)) & set(COLUMNS)
            assert not stored or set(index.entry) >= set(COLUMNS), index.name


def test_a_counter_added_since_the_first_schema_can_be_added_to_a_database_with_rows() -> None:
    """`upvotes provision` adds a missing column (tests/test_migration.py): NOT NULL needs a DEFAULT."""
    before = definitions(statements_of(BEFORE.read_text(encoding="utf-8")))
    for name, columns in definitions(schemas.ddl_statements()).items():
        for column in COLUMNS:
            if column in columns and column not in before.get(name, {}):
                assert columns[column].endswith("DEFAULT (0)"), f"{name}.{column}: {columns[column]}"


def test_the_json_schema_names_every_counter_and_every_vote() -> None:
    properties = schemas.event_schema()["properties"]
    assert tuple(properties["counter"]["enum"]) == CONTRACT_NAMES
    assert tuple(properties["vote"]["enum"]) == VOTES


def test_each_vote_counts_on_one_counter_and_none_on_none() -> None:
    assert set(COUNTER_OF_VOTE.values()) <= set(NAMES) and len(set(COUNTER_OF_VOTE.values())) == len(COUNTER_OF_VOTE)
    assert VOTES[0] == "none" and set(VOTES) == {"none", *COUNTER_OF_VOTE}


def test_counts_add_by_name_and_pickle_by_name() -> None:
    assert NAMES == tuple(counter.name for counter in COUNTERS) and len(set(NAMES)) == len(NAMES)
    votes = [one(contract, 2) for contract in CONTRACT_NAMES] + [one(CONTRACT_NAMES[0], -1)]
    assert total(votes) == Counts(*(2 for _ in NAMES)).plus(Counts(**{NAMES[0]: -1}))
    assert by_contract_name({CONTRACT_NAMES[-1]: 5}) == Counts(**{NAMES[-1]: 5})
    assert total([]).is_zero() and Counts(3).negated() == Counts(-3)
    assert pickle.loads(pickle.dumps(total(votes))) == total(votes)


class _PickledByAnOlderJob:
    """Pickles as a Counts of a job that had only the first two counters (Counts.__reduce__)."""

    def __reduce__(self):
        return counters._counts_by_name, ({NAMES[0]: 5, NAMES[1]: 7},)


def test_counts_pickled_by_a_job_with_fewer_counters_read_the_new_ones_as_0() -> None:
    """A window still open when a job is updated in place to a version with one more counter."""
    read = pickle.loads(pickle.dumps(_PickledByAnOlderJob()))
    assert type(read) is Counts and read == Counts(5, 7) and read[2:] == (0,) * (len(NAMES) - 2)
