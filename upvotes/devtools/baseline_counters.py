"""The baselines: read-modify-write counters and sharded counters, on the same database.

Each vote is one read-write transaction that reads a counter row and writes it back one
higher: the approach the blind-write design replaces (solution 1 of
spanner-high-throughput-writes.txt), and its sharded variant (sharded-counters.txt), where a
vote updates one of N rows of the counter at random and a read sums them. They exist to be
measured against, in the benchmarks and in `upvotes demo`.
"""

from __future__ import annotations

from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

import schemas
from spanner_store.database import OPERATION_TIMEOUT_S

TABLE = "BaselineCounters"
COLUMNS = ("CounterId", "Shard", "Upvotes")
# One insert_or_update of the row's 3 columns; the table has no index.
MUTATIONS_PER_INCREMENT = len(COLUMNS)
TOTAL_SQL = "SELECT COALESCE(SUM(Upvotes), 0) FROM BaselineCounters WHERE CounterId = @counter"


def create_tables(database) -> None:
    """Adds the baseline table to an existing database, unless it is there already."""
    database.reload()
    if not any(f"TABLE {TABLE} " in statement for statement in database.ddl_statements):
        database.update_ddl(schemas.ddl_statements(schemas.BASELINE_DDL_FILE)).result(OPERATION_TIMEOUT_S)


def increment(transaction, counter: str, shard: int = 0) -> None:
    """The body of one vote's transaction: read the shard's row, write it back one higher."""
    key = [counter, shard]
    rows = list(transaction.read(TABLE, columns=COLUMNS, keyset=spanner.KeySet(keys=[key])))
    current = rows[0][2] if rows else 0
    transaction.insert_or_update(TABLE, columns=COLUMNS, values=[(counter, shard, current + 1)])


def total(database, counter: str) -> int:
    """The counter's value: the sum of its shards, in one strong read."""
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(TOTAL_SQL, params={"counter": counter}, param_types={"counter": param_types.STRING})
        return list(rows)[0][0]
