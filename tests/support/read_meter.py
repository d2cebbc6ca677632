"""The real database, counting the rows each table's reads return and the SQL queries run: what a
test of an operation's cost asserts (it reads this user's rows, not the catalogue's)."""

from __future__ import annotations

import contextlib
from collections import Counter


class ReadMeter:
    """The real database, counting the rows each table's reads return and the SQL queries run."""

    def __init__(self, database) -> None:
        self._database = database
        self.rows: Counter[str] = Counter()
        self.queries = 0

    def __getattr__(self, name):
        return getattr(self._database, name)

    @contextlib.contextmanager
    def snapshot(self, **kwargs):
        with self._database.snapshot(**kwargs) as snapshot:
            yield _MeteredReads(snapshot, self)

    def run_in_transaction(self, work, *args, **kwargs):
        return self._database.run_in_transaction(
            lambda transaction, *a, **kw: work(_MeteredReads(transaction, self), *a, **kw), *args, **kwargs
        )


class _MeteredReads:
    def __init__(self, reader, meter: ReadMeter) -> None:
        self._reader = reader
        self._meter = meter

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def read(self, table: str, *args, **kwargs) -> list:
        rows = list(self._reader.read(table, *args, **kwargs))
        self._meter.rows[table] += len(rows)
        return rows

    def execute_sql(self, *args, **kwargs):
        self._meter.queries += 1
        return self._reader.execute_sql(*args, **kwargs)
