"""The one reader of DDL statements (default: posts.sql): the objects they create, each
table's columns with their definitions (and defaults) and its CHECK constraints, each index's
stored columns, and a model of tables and indexes the code derives what depends on the schema
from: the mutation cost of each write (spanner_store/mutation_cost.py,
upvotes/devtools/mutation_count.py) and the migration `upvotes provision` applies
(upvotes/operations/provision.py).

Parsed from the DDL itself, so a new column or index is counted without an edit elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import schemas

_CREATE_TABLE = re.compile(r"^CREATE TABLE (\w+) \((.*)\) PRIMARY KEY \(([^)]*)\)", re.IGNORECASE)
_CREATE_INDEX = re.compile(
    r"^CREATE (?:UNIQUE )?(NULL_FILTERED )?INDEX (\w+) ON (\w+) \(([^)]*)\)(?: STORING \(([^)]*)\))?", re.IGNORECASE
)


def _names(column_list: str) -> tuple[str, ...]:
    """ "PostHash, EventHour DESC" -> ("PostHash", "EventHour")."""
    return tuple(part.split()[0] for part in column_list.split(",") if part.strip())


_DDL_OBJECT = re.compile(r"^CREATE\s+(?:UNIQUE\s+)?(?:NULL_FILTERED\s+)?(TABLE|INDEX)\s+(\w+)", re.IGNORECASE)


def ddl_object_name(statement: str) -> str | None:
    """`TABLE Posts` / `INDEX PostsByUpvotes` for a CREATE statement, else None."""
    match = _DDL_OBJECT.match(statement.strip())
    return f"{match.group(1).upper()} {match.group(2)}" if match else None


def _top_level_parts(text: str) -> list[str]:
    """`a INT64, b STRING(1) OPTIONS (x = y)` split at commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _table_elements(statement: str) -> tuple[str, list[str]] | None:
    """(table, its elements: column definitions and constraints) of a CREATE TABLE statement, else None."""
    name = ddl_object_name(statement)
    if name is None or not name.startswith("TABLE "):
        return None
    text = " ".join(statement.split())
    start, depth = text.index("("), 0
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    return name.split()[1], _top_level_parts(text[start + 1 : end])


def table_columns(statement: str) -> tuple[str, dict[str, str]] | None:
    """(table, {column: its definition}) of a CREATE TABLE statement, else None."""
    elements = _table_elements(statement)
    if elements is None:
        return None
    table, parts = elements
    return table, {
        part.split()[0]: part for part in parts if not part.upper().startswith(("CONSTRAINT ", "FOREIGN KEY"))
    }


_CHECK = re.compile(r"^CONSTRAINT\s+(\w+)\s+CHECK\s*\(", re.IGNORECASE)


def check_constraints(statement: str) -> tuple[str, dict[str, str]] | None:
    """(table, {constraint: its definition}) of the named CHECK constraints of a CREATE TABLE
    statement, else None. Spanner gives its own DDL back as `CHECK(`, posts.sql has `CHECK (`:
    constraints are matched by name."""
    elements = _table_elements(statement)
    if elements is None:
        return None
    table, parts = elements
    return table, {match.group(1): part for part in parts if (match := _CHECK.match(part))}


_DEFAULT = re.compile(r"\sDEFAULT\s*\(", re.IGNORECASE)


def column_default(definition: str) -> tuple[str, str] | None:
    """A column definition split at its DEFAULT: (the definition without it, the default's
    expression), `HotKeyThrough TIMESTAMP DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z")` ->
    (`HotKeyThrough TIMESTAMP`, `(TIMESTAMP "1970-01-01T00:00:00Z")`); None without a DEFAULT."""
    match = _DEFAULT.search(definition)
    if match is None:
        return None
    depth = 0
    for end in range(match.end() - 1, len(definition)):
        depth += {"(": 1, ")": -1}.get(definition[end], 0)
        if depth == 0:
            break
    expression = definition[match.end() - 1 : end + 1]
    return " ".join((definition[: match.start()] + definition[end + 1 :]).split()), expression


_NOT_NULL = re.compile(r"\bNOT\s+NULL\b", re.IGNORECASE)


def nullable(definition: str) -> bool:
    """Whether a column definition allows NULL."""
    return _NOT_NULL.search(definition) is None


_OPTIONS = re.compile(r"\bOPTIONS\s*\(([^)]*)\)", re.IGNORECASE)


def column_options(definition: str) -> dict[str, str]:
    """{option: value} of a column definition's OPTIONS (...), as written but for spacing (and the
    names' case): `X TIMESTAMP OPTIONS (allow_commit_timestamp = true)` gives
    {"allow_commit_timestamp": "true"}; the database's own DDL spells the same on several lines."""
    match = _OPTIONS.search(definition)
    if match is None:
        return {}
    pairs = (part.split("=", 1) for part in _top_level_parts(match.group(1)))
    return {name.strip().lower(): " ".join(value.split()) for name, value in pairs}


_STORING = re.compile(r"\bSTORING\s*\(([^)]*)\)", re.IGNORECASE)


def stored_columns(statement: str) -> tuple[str, list[str]] | None:
    """(index, its STORING columns) of a CREATE INDEX statement, else None."""
    name = ddl_object_name(statement)
    if name is None or not name.startswith("INDEX "):
        return None
    match = _STORING.search(statement)
    return name.split()[1], [c.strip() for c in match.group(1).split(",")] if match else []


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
            definition = table_columns(statement)
            assert definition is not None  # _CREATE_TABLE matched: a CREATE TABLE statement
            columns[table.group(1)] = tuple(definition[1])
            indexes.setdefault(table.group(1), [])
        elif index := _CREATE_INDEX.match(statement):
            null_filtered, name, table_name, key_list, storing = index.groups()
            key = _names(key_list)
            entry = key + tuple(c for c in keys[table_name] if c not in key) + _names(storing or "")
            indexes.setdefault(table_name, []).append(IndexModel(name, table_name, key, entry, bool(null_filtered)))
    return {name: TableModel(name, key, tuple(indexes[name]), columns[name]) for name, key in keys.items()}
