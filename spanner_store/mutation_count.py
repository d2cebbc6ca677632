"""How many mutations Spanner counts for one commit, derived from the schema's DDL.

Real Spanner rejects a commit of more than 80,000 mutations; the emulator does not check,
so the tests and the benchmark count every commit themselves with this model of
Spanner's documented rules (cloud.google.com/spanner/quotas, "Mutations per commit,
including indexes"):

- insert, update, insert_or_update, replace: one per column written, per row (key
  columns are always written);
- delete: one per key or key range;
- every secondary index entry the write changes adds one per column of the entry (its
  key columns, the table's key columns not already in it, and its STORING columns). An
  update or upsert that writes an index key column may also remove the old entry: one more.
  A deleted row removes its entry from every index of the table: one per index per row.
  A NULL_FILTERED index has no entry for a row with a NULL index key column.

Range and whole-table deletes of an indexed table cannot be counted without reading the
rows, so they are reported as unbounded (`math.inf`): code in this project must not build
them. The schema is parsed from posts.sql, so a new index is counted without an edit here.

`commit_key_ranges` counts a second cost the emulator hides: on real Spanner a commit that
writes rows in many splits coordinates all of them (two-phase commit across participants),
so the distinct key ranges a commit writes are a proxy for its splits.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from google.cloud.spanner_v1 import Mutation

import schemas
from spanner_store.tables import key_range

_CREATE_TABLE = re.compile(r"^CREATE TABLE (\w+) \((.*)\) PRIMARY KEY \(([^)]*)\)", re.IGNORECASE)
_CREATE_INDEX = re.compile(
    r"^CREATE (?:UNIQUE )?(NULL_FILTERED )?INDEX (\w+) ON (\w+) \(([^)]*)\)(?: STORING \(([^)]*)\))?",
    re.IGNORECASE)
_ALTER_ADD_COLUMN = re.compile(r"^ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)


def _names(column_list: str) -> tuple[str, ...]:
    """"PostHash, EventHour DESC" -> ("PostHash", "EventHour")."""
    return tuple(part.split()[0] for part in column_list.split(",") if part.strip())


@dataclass(frozen=True)
class IndexModel:
    name: str
    table: str
    key: tuple[str, ...]  # the index's own key columns
    entry: tuple[str, ...]  # every column an entry holds: its key, the table key, STORING
    null_filtered: bool


@dataclass(frozen=True)
class TableModel:
    name: str
    key: tuple[str, ...]
    indexes: tuple[IndexModel, ...]


def schema_model(statements: Iterable[str] | None = None) -> dict[str, TableModel]:
    """Tables and their secondary indexes, from DDL statements (default: schemas/posts.sql)."""
    keys: dict[str, tuple[str, ...]] = {}
    indexes: dict[str, list[IndexModel]] = {}
    for statement in schemas.ddl_statements() if statements is None else statements:
        statement = " ".join(statement.split())
        if table := _CREATE_TABLE.match(statement):
            keys[table.group(1)] = _names(table.group(3))
            indexes.setdefault(table.group(1), [])
        elif index := _CREATE_INDEX.match(statement):
            null_filtered, name, table_name, key_list, storing = index.groups()
            key = _names(key_list)
            entry = key + tuple(c for c in keys[table_name] if c not in key) + _names(storing or "")
            indexes.setdefault(table_name, []).append(IndexModel(name, table_name, key, entry, bool(null_filtered)))
    return {name: TableModel(name, key, tuple(indexes[name])) for name, key in keys.items()}


def _write_cost(kind: str, table: TableModel, columns: Sequence[str], rows: Sequence[Sequence[bool]]) -> int:
    """Mutations of one write; `rows` tells, per row and column, whether the value is NULL."""
    written = set(columns)
    cost = len(columns) * len(rows)
    for index in table.indexes:
        # An update of columns the index does not hold leaves its entry alone; an upsert
        # may create the row, and so its entry, whatever it writes.
        if kind == "update" and not written & (set(index.entry) - set(table.key)):
            continue
        removes_old = kind == "replace" or (kind != "insert" and bool(written & set(index.key)))
        key_positions = [columns.index(c) for c in index.key if c in written]
        for is_null in rows:
            has_entry = not (index.null_filtered and any(is_null[p] for p in key_positions))
            cost += (len(index.entry) if has_entry else 0) + (1 if removes_old else 0)
    return cost


def commit_mutation_count(mutations: Iterable[Mutation], model: Mapping[str, TableModel]) -> float:
    """Mutations Spanner counts for a commit of these client mutations (math.inf: unbounded)."""
    total: float = 0
    for mutation in mutations:
        pb = Mutation.pb(mutation)
        kind = pb.WhichOneof("operation")
        if kind == "delete":
            table = model[pb.delete.table]
            key_set = pb.delete.key_set
            if table.indexes and (key_set.all_ or len(key_set.ranges)):
                return math.inf
            rows = len(key_set.keys) + len(key_set.ranges) + (1 if key_set.all_ else 0)
            total += rows * (1 + len(table.indexes))
            continue
        write = getattr(pb, kind)
        nulls = [[value.WhichOneof("kind") == "null_value" for value in row.values] for row in write.values]
        total += _write_cost(kind, model[write.table], list(write.columns), nulls)
    return total


_POST_HASH = "PostHash"


def commit_key_ranges(mutations: Iterable[Mutation], model: Mapping[str, TableModel]) -> int:
    """Distinct key ranges this commit writes, a proxy for the splits it touches: for the tables
    led by PostHash (Posts and its interleaved children, which live in their parent's split),
    tables.key_range of the row; for any other table, a range of its own per leading key value."""
    ranges: set = set()
    for mutation in mutations:
        pb = Mutation.pb(mutation)
        kind = pb.WhichOneof("operation")
        if kind == "delete":
            table = pb.delete.table
            leading = [key.values[0] for key in pb.delete.key_set.keys]
            leading += [(r.start_closed or r.start_open).values[0] for r in pb.delete.key_set.ranges]
        else:
            write = getattr(pb, kind)
            table = write.table
            position = list(write.columns).index(model[table].key[0])
            leading = [row.values[position] for row in write.values]
        for value in leading:
            if model[table].key[0] == _POST_HASH:
                ranges.add(key_range(int(value.string_value)))
            else:
                ranges.add((table, value.SerializeToString()))
    return len(ranges)
