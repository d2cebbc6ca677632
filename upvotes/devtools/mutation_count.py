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
them. The schema is parsed from posts.sql (schemas/ddl.py), so a new index is counted without
an edit here.

`commit_key_ranges` counts a second cost the emulator hides: on real Spanner a commit that
writes rows in many splits coordinates all of them (two-phase commit across participants),
so the distinct key ranges a commit writes are a proxy for its splits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from google.cloud.spanner_v1 import Mutation

from schemas.ddl import TableModel
from spanner_store.tables import key_range


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
        # A NULL_FILTERED index keyed on a column the write leaves out (nullable, as such keys
        # are): a new row has it NULL, so no entry, and an existing row keeps its entry as it is.
        unwritten_key = index.null_filtered and kind != "update" and not set(index.key) <= written
        for is_null in rows:
            has_entry = not (index.null_filtered and (unwritten_key or any(is_null[p] for p in key_positions)))
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
