"""Row writes added to a commit as one raw protobuf each, without the client's per-value copies.

Why: the client library's `Batch.insert` (and `insert_or_update`, `update`, and the same methods
of a read-write `Transaction`) turns every value into a proto-plus `Value` and every row into a
proto-plus `ListValue`, then copies them into the `Mutation.Write` message: per row, as much
CPU as the rest of the local stream's work on a single-vote message (issue 45's profile of
`upvotes stream`; docs/benchmarks.md, "Measurements behind the code").

What: `insert`, `insert_or_update` and `update` here take the client's arguments and append the
same `Mutation` the client would, built as one raw protobuf (each value encoded as
spanner_store/key_sets.py `encode_values` encodes a key's: strings and integers directly, anything
else through the client's own encoding) and wrapped without a copy. It is the same message:
tests/test_mutations.py holds its bytes to the client's for every kind of value the project writes.
`_mutations` is the client's private list of a batch's or a transaction's mutations (what `commit`
sends); that test fails if it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from google.cloud.spanner_v1.types import Mutation

from spanner_store.key_sets import encode_values


def _append(batch_or_transaction, kind: str, table: str, columns: Sequence[str], values: Iterable[Sequence]) -> None:
    raw = Mutation.pb()()
    write = getattr(raw, kind)
    write.table = table
    write.columns.extend(columns)
    for row in values:
        encode_values(row, write.values.add())
    batch_or_transaction._mutations.append(Mutation.wrap(raw))  # noqa: SLF001 - see the module docstring


def insert(batch_or_transaction, table: str, columns: Sequence[str], values: Iterable[Sequence]) -> None:
    """batch_or_transaction.insert(table, columns, values), built as one raw protobuf."""
    _append(batch_or_transaction, "insert", table, columns, values)


def insert_or_update(batch_or_transaction, table: str, columns: Sequence[str], values: Iterable[Sequence]) -> None:
    """batch_or_transaction.insert_or_update(table, columns, values), built as one raw protobuf."""
    _append(batch_or_transaction, "insert_or_update", table, columns, values)


def update(batch_or_transaction, table: str, columns: Sequence[str], values: Iterable[Sequence]) -> None:
    """batch_or_transaction.update(table, columns, values), built as one raw protobuf."""
    _append(batch_or_transaction, "update", table, columns, values)
