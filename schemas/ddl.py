"""The tables and indexes of a DDL file (default: posts.sql), as a model the code derives
what depends on the schema from: the mutation cost of each write (spanner_store/mutation_cost.py,
upvotes/devtools/mutation_count.py).

Parsed from the DDL itself, so a new column or index is counted without an edit elsewhere.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import schemas

_CREATE_TABLE = re.compile(r"^CREATE TABLE (\w+) \((.*)\) PRIMARY KEY \(([^)]*)\)", re.IGNORECASE)
_CREATE_INDEX = re.compile(
    r"^CREATE (?:UNIQUE )?(NULL_FILTERED )?INDEX (\w+) ON (\w+) \(([^)]*)\)(?: STORING \(([^)]*)\))?",
    re.IGNORECASE)


def _names(column_list: str) -> tuple[str, ...]:
    """"PostHash, EventHour DESC" -> ("PostHash", "EventHour")."""
    return tuple(part.split()[0] for part in column_list.split(",") if part.strip())


def _column_names(body: str) -> tuple[str, ...]:
    """The column names of a CREATE TABLE's body, in order (a column's type may hold commas:
    STRING(128) does not, but OPTIONS (a = b) and ARRAY<STRUCT<...>> could)."""
    names, depth, start = [], 0, 0
    for position, char in enumerate(body + ","):
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            part = body[start:position].strip()
            if part and not part.upper().startswith(("CONSTRAINT ", "FOREIGN KEY")):
                names.append(part.split()[0])
            start = position + 1
    return tuple(names)


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
    columns: tuple[str, ...] = ()  # every column, key included, in declared order


def schema_model(statements: Iterable[str] | None = None) -> dict[str, TableModel]:
    """Tables and their secondary indexes, from DDL statements (default: schemas/posts.sql)."""
    keys: dict[str, tuple[str, ...]] = {}
    columns: dict[str, tuple[str, ...]] = {}
    indexes: dict[str, list[IndexModel]] = {}
    for statement in schemas.ddl_statements() if statements is None else statements:
        statement = " ".join(statement.split())
        if table := _CREATE_TABLE.match(statement):
            keys[table.group(1)] = _names(table.group(3))
            columns[table.group(1)] = _column_names(table.group(2))
            indexes.setdefault(table.group(1), [])
        elif index := _CREATE_INDEX.match(statement):
            null_filtered, name, table_name, key_list, storing = index.groups()
            key = _names(key_list)
            entry = key + tuple(c for c in keys[table_name] if c not in key) + _names(storing or "")
            indexes.setdefault(table_name, []).append(IndexModel(name, table_name, key, entry, bool(null_filtered)))
    return {name: TableModel(name, key, tuple(indexes[name]), columns[name]) for name, key in keys.items()}
