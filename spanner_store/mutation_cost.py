"""What one row write costs against Spanner's mutation limit, derived from posts.sql.

Spanner counts a mutation per column written, plus one per column of each index entry the
write changes, plus one for each old entry an update of an index key removes (the rules:
upvotes/devtools/mutation_count.py, which counts whole commits in tests and benchmarks). The
writers plan their commits with these per-row costs; deriving them from the DDL means a new
counter column, stored in an index or not, is counted without an edit (hand-counted
constants would have undercounted it silently: the emulator does not enforce the limit).
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.ddl import TableModel, schema_model

SCHEMA = schema_model()


def _table(name: str) -> TableModel:
    return SCHEMA[name]


def insert_cost(table: str, columns: Sequence[str]) -> int:
    """An insert of one row writing `columns`: each column, and an entry in every index."""
    model = _table(table)
    return len(columns) + sum(len(index.entry) for index in model.indexes)


def new_row_cost(table: str) -> int:
    """An upsert that creates a row: every column (the ones not written take their defaults)
    and an entry in every index, the bound for an upsert of a row that may be new. A NULL_FILTERED
    index has none: its key columns are nullable without a default here (Posts.HotKey), so a new
    row is NULL there."""
    model = _table(table)
    return len(model.columns) + sum(len(index.entry) for index in model.indexes if not index.null_filtered)


def update_cost(table: str, columns: Sequence[str]) -> int:
    """An update (or upsert of an existing row) writing `columns`: each column, and for every
    index holding one of them, its entry rewritten and the old one removed."""
    model = _table(table)
    written = set(columns) - set(model.key)
    return len(columns) + sum(len(index.entry) + 1 for index in model.indexes if written & set(index.entry))
