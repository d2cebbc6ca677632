"""`upvotes lint-schema`: find write hotspots in Cloud Spanner DDL before they reach production.

Spanner splits a table (and every index, which is a table under the hood) into key
ranges served by different servers. If new rows always get a key larger (or smaller)
than every existing key, all inserts land on the last split and one server does all the
work. The rules below come from Spanner's schema design best practices:

- ``monotonic-first-key`` (error): a table that is not interleaved in a parent has a
  monotonic first primary-key part. Interleaved tables are exempt: their key starts with
  the parent's key, so their rows are spread under the parent rows.
- ``monotonic-index-first-column`` (error): an index that is not interleaved
  (no ``, INTERLEAVE IN Parent``) has a monotonic first column. Interleaved indexes are
  fine: their entries live under their parent rows, and a single parent rarely gets
  thousands of new entries a second.
- ``timestamp-key-not-desc`` (warning): a timestamp key part after the first one (of a
  table's primary key or of an index) is not ``DESC``. Descending order keeps the newest
  rows at the top, so "history up to X ago" reads start there instead of seeking.
  Commit-timestamp columns are exempt: Spanner documents ascending as the right order
  for "everything committed after T" reads, which is what they are indexed for.

What counts as monotonic (deliberately conservative, to keep findings believable):

- a ``TIMESTAMP`` or ``DATE`` column, including commit timestamps
  (``allow_commit_timestamp = true``);
- an ``INT64`` whose name contains one of the words in SEQUENTIAL_WORDS, such as
  ``LastAccessTimestamp`` or ``EventSeq`` (names are split at CamelCase and ``_``).
  Plain ids like ``UserId`` or ``ShardId`` are not flagged: the linter cannot tell a
  counter from a hash or a random id, and both fixes in Spanner's guide key by them;
- an ``INT64`` fed by an identity column, ``AUTO_INCREMENT`` or a sequence is never
  flagged: Spanner sequences are bit-reversed, which is the recommended fix;
- a column whose type is unknown (not defined in the files linted) is judged by its
  name alone; ``STRING`` and other types are never flagged.

The parser understands just enough GoogleSQL DDL for this: ``;``-separated statements,
``--`` and ``/* */`` comments, any keyword case, ``CREATE TABLE`` and
``CREATE [UNIQUE] [NULL_FILTERED] INDEX``. Other statements are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

TIME_TYPES = frozenset({"TIMESTAMP", "DATE"})
TIME_WORDS = frozenset({"timestamp", "time", "date", "datetime"})
SEQUENTIAL_WORDS = TIME_WORDS | {"seq", "sequence", "counter", "order"}
# Column definitions containing these are filled from a (bit-reversed) Spanner sequence.
SEQUENCE_DEFAULTS = re.compile(r"\b(IDENTITY|AUTO_INCREMENT|GET_NEXT_SEQUENCE_VALUE|BIT_REVERSED_POSITIVE)\b", re.I)
COMMIT_TIMESTAMP = re.compile(r"\ballow_commit_timestamp\s*=\s*true\b", re.I)

NAME = r"`?([\w.]+)`?"
CREATE_TABLE = re.compile(rf"\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{NAME}\s*\(", re.I)
CREATE_INDEX = re.compile(
    rf"\s*CREATE\s+(?:UNIQUE\s+)?(?:NULL_FILTERED\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?{NAME}\s+ON\s+{NAME}\s*\(",
    re.I,
)
PRIMARY_KEY = re.compile(r"\s*PRIMARY\s+KEY\s*\(", re.I)
INTERLEAVE = re.compile(r"\bINTERLEAVE\s+IN\b", re.I)
COLUMN = re.compile(rf"\s*{NAME}\s+(\w+)")
KEY_PART = re.compile(rf"\s*{NAME}(?:\s+(ASC|DESC))?\s*$", re.I)
# Table elements that are constraints, not columns.
NOT_COLUMNS = frozenset({"CONSTRAINT", "FOREIGN", "CHECK", "PRIMARY", "SYNONYM"})
# Comments are blanked and string contents masked, so that a ';', '(' or ',' inside
# them cannot confuse the statement splitting below, while every offset stays the same.
COMMENT_OR_STRING = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", re.S)


@dataclass(frozen=True)
class Finding:
    """One rule violation, pointing at the offending key part."""

    rule: str
    severity: str  # "error" or "warning"
    path: str
    line: int
    message: str
    fix: str

    def format(self) -> str:
        return f"{self.path}:{self.line}: {self.severity} [{self.rule}] {self.message} Fix: {self.fix}"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # base type in upper case: "INT64", "STRING", "TIMESTAMP", ...
    commit_timestamp: bool
    from_sequence: bool


@dataclass(frozen=True)
class KeyPart:
    name: str
    descending: bool
    line: int


@dataclass(frozen=True)
class Table:
    name: str
    columns: dict[str, Column]  # by lower-case name: Spanner names are case-insensitive
    key: list[KeyPart]
    interleaved: bool


@dataclass(frozen=True)
class Index:
    name: str
    table: str
    key: list[KeyPart]
    interleaved: bool


@dataclass(frozen=True)
class Schema:
    tables: dict[str, Table]  # by lower-case name
    indexes: list[Index]


def parse_ddl(text: str) -> Schema:
    """Reads the tables and indexes of a DDL text; other statements are skipped."""
    masked = COMMENT_OR_STRING.sub(_mask, text)
    tables: dict[str, Table] = {}
    indexes: list[Index] = []
    start = 0
    for statement in masked.split(";"):
        end = start + len(statement)
        if match := CREATE_TABLE.match(masked, start, end):
            table = _parse_table(masked, match, end)
            tables[table.name.lower()] = table
        elif match := CREATE_INDEX.match(masked, start, end):
            key_end = _closing_paren(masked, match.end() - 1, end)
            indexes.append(
                Index(
                    name=match.group(1),
                    table=match.group(2),
                    key=_key_parts(masked, match.end(), key_end),
                    interleaved=bool(INTERLEAVE.search(masked, key_end, end)),
                )
            )
        start = end + 1  # past the ';'
    return Schema(tables, indexes)


def lint_ddl(text: str, path: str = "<ddl>") -> list[Finding]:
    """Lints one DDL text; indexes may refer to tables defined anywhere in it."""
    schema = parse_ddl(text)
    return _check(schema, path, schema.tables)


def lint_files(paths: list[str], out: TextIO) -> int:
    """Lints the files together (an index may use a table from another file), prints the
    findings and a summary to `out`, and returns the exit code: 1 if any error, else 0."""
    schemas: dict[str, Schema] = {}
    unreadable = 0
    for path in paths:
        try:
            schemas[path] = parse_ddl(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            print(f"{path}: error: cannot read schema file: {reason}", file=out)
            unreadable += 1
    all_tables = {name: table for schema in schemas.values() for name, table in schema.tables.items()}
    findings = [finding for path, schema in schemas.items() for finding in _check(schema, path, all_tables)]
    for finding in findings:
        print(finding.format(), file=out)
    found_errors = sum(finding.severity == "error" for finding in findings)
    errors, warnings = unreadable + found_errors, len(findings) - found_errors
    print(f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')} in {_plural(len(paths), 'file')}", file=out)
    return 1 if errors else 0


def _check(schema: Schema, path: str, tables: dict[str, Table]) -> list[Finding]:
    findings: list[Finding] = []
    for table in schema.tables.values():
        if table.key and not table.interleaved:
            first = table.key[0]
            if reason := _monotonic_reason(first.name, table.columns.get(first.name.lower())):
                findings.append(
                    Finding(
                        "monotonic-first-key",
                        "error",
                        path,
                        first.line,
                        f"table {table.name}: first primary-key part {first.name} is {reason}, so every "
                        "insert lands at the end of the key space, on one split (a write hotspot).",
                        f"move {first.name} after a well-spread key part (swap the key order), prepend a "
                        "shard column (ShardId = hash(key) % N), or key by a UUID or a bit-reversed sequence.",
                    )
                )
        findings += _descending_findings(f"table {table.name}", table.key, table.columns, path)
    for index in schema.indexes:
        indexed = tables.get(index.table.lower())
        columns = indexed.columns if indexed else {}
        if index.key and not index.interleaved:
            first = index.key[0]
            if reason := _monotonic_reason(first.name, columns.get(first.name.lower())):
                findings.append(
                    Finding(
                        "monotonic-index-first-column",
                        "error",
                        path,
                        first.line,
                        f"index {index.name} is not interleaved and its first column {first.name} is "
                        f"{reason}; an index is a table keyed by its columns, so every insert updates "
                        "the end of its key space, on one split (a write hotspot).",
                        "interleave the index in a parent table (start its key with that table's key "
                        f"columns and add ', INTERLEAVE IN {index.table}' or an ancestor) so entries spread "
                        "under parent rows, or lead it with a shard column (ShardId = hash(key) % N).",
                    )
                )
        findings += _descending_findings(f"index {index.name}", index.key, columns, path)
    return sorted(findings, key=lambda finding: finding.line)


def _descending_findings(owner: str, key: list[KeyPart], columns: dict[str, Column], path: str) -> list[Finding]:
    """timestamp-key-not-desc for every key part after the first (the first is rule 1's business)."""
    return [
        Finding(
            "timestamp-key-not-desc",
            "warning",
            path,
            part.line,
            f"{owner}: timestamp key part {part.name} is ascending.",
            f"declare it {part.name} DESC so newest-first history reads start at the top.",
        )
        for part in key[1:]
        if not part.descending and _is_timestamp(part.name, columns.get(part.name.lower()))
    ]


def _monotonic_reason(name: str, column: Column | None) -> str | None:
    """Why the values of this key part only grow (or only shrink), or None if they do not."""
    if column is None:
        return "named like a time or sequence value (type unknown)" if _words(name) & SEQUENTIAL_WORDS else None
    if column.from_sequence:
        return None
    if column.commit_timestamp:
        return "a commit timestamp (allow_commit_timestamp = true)"
    if column.type in TIME_TYPES:
        return f"a {column.type}"
    if column.type == "INT64" and _words(name) & SEQUENTIAL_WORDS:
        return "an INT64 named like a time or sequence value"
    return None


def _is_timestamp(name: str, column: Column | None) -> bool:
    if column is None:
        return bool(_words(name) & TIME_WORDS)
    if column.commit_timestamp:
        return False
    return column.type in TIME_TYPES or (column.type == "INT64" and bool(_words(name) & TIME_WORDS))


def _words(name: str) -> set[str]:
    """Lower-case words of an identifier: "LastAccessTimestamp" -> {"last", "access", "timestamp"}."""
    return {word.lower() for word in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)}


def _parse_table(masked: str, match: re.Match[str], end: int) -> Table:
    """The CREATE TABLE statement that `match` starts and that ends at offset `end`."""
    columns_end = _closing_paren(masked, match.end() - 1, end)
    columns: dict[str, Column] = {}
    for begin, column_end in _split_commas(masked, match.end(), columns_end):
        definition = masked[begin:column_end]
        column = COLUMN.match(definition)
        if column and column.group(1).upper() not in NOT_COLUMNS:
            columns[column.group(1).lower()] = Column(
                name=column.group(1),
                type=column.group(2).upper(),
                commit_timestamp=bool(COMMIT_TIMESTAMP.search(definition)),
                from_sequence=bool(SEQUENCE_DEFAULTS.search(definition)),
            )
    key: list[KeyPart] = []
    tail_start = columns_end + 1
    if primary_key := PRIMARY_KEY.match(masked, tail_start, end):
        tail_start = _closing_paren(masked, primary_key.end() - 1, end)
        key = _key_parts(masked, primary_key.end(), tail_start)
    return Table(match.group(1), columns, key, interleaved=bool(INTERLEAVE.search(masked, tail_start, end)))


def _key_parts(masked: str, begin: int, end: int) -> list[KeyPart]:
    """The key parts between two offsets, e.g. "PostHash, EventHour DESC"."""
    parts: list[KeyPart] = []
    for part_begin, part_end in _split_commas(masked, begin, end):
        if part := KEY_PART.match(masked[part_begin:part_end]):
            line = masked.count("\n", 0, part_begin + part.start(1)) + 1
            parts.append(KeyPart(part.group(1), (part.group(2) or "").upper() == "DESC", line))
    return parts


def _split_commas(masked: str, begin: int, end: int) -> list[tuple[int, int]]:
    """Spans between the commas at parenthesis depth 0; blank spans (a trailing comma) are dropped."""
    spans: list[tuple[int, int]] = []
    depth = 0
    for offset in range(begin, end + 1):
        char = masked[offset] if offset < end else ","  # a virtual comma closes the last span
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            if masked[begin:offset].strip():
                spans.append((begin, offset))
            begin = offset + 1
    return spans


def _closing_paren(masked: str, opening: int, end: int) -> int:
    """Offset of the ')' matching the '(' at `opening`, or `end` if it is missing."""
    depth = 0
    for offset in range(opening, end):
        depth += {"(": 1, ")": -1}.get(masked[offset], 0)
        if depth == 0:
            return offset
    return end


def _mask(match: re.Match[str]) -> str:
    """Blanks a comment, or keeps a string's quotes around filler, keeping line breaks."""
    text = match.group()
    if text[0] in "'\"":
        return text[0] + re.sub(r"[^\n]", "x", text[1:-1]) + text[-1]
    return re.sub(r"[^\n]", " ", text)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
