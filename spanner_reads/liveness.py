"""When the streaming pipeline last committed delta rows: what `upvotes status` reports beside
the fold lag, so that a stream that stopped writing is visible.

Every delta commit also inserts one TopCandidates row in the same commit (spanner_store/
top_candidates.py), keyed (Shard, CommittedAt, ...), so the newest CommittedAt over the shards is
the last delta commit. Reading it costs what was committed recently, never the table: each
shard's key range after `now - lookback` is read (CommittedAt only), for lookbacks of a
minute, then ten, an hour, a day and the 30-day retention, stopping at the first that finds
a row. A live stream is found in the first minute's rows; a stream dead for a day costs the
rows of the day before it stopped.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from spanner_store.database import read_timestamp
from spanner_store.tables import DELTA_RETENTION_DAYS, TOP_CANDIDATES, committed_after

LOOKBACKS = (timedelta(minutes=1), timedelta(minutes=10), timedelta(hours=1), timedelta(days=1),
             timedelta(days=DELTA_RETENTION_DAYS))


def last_delta_commit(snapshot, now: datetime) -> datetime | None:
    """The commit timestamp of the newest delta commit as of `snapshot` (read at `now`), or None
    if none is kept (never written, or older than the retention)."""
    for lookback in LOOKBACKS:
        since = now - lookback
        newest = max((row[0] for row in snapshot.read(TOP_CANDIDATES, columns=("CommittedAt",),
                                                      keyset=committed_after(since))),
                     default=None)
        if newest is not None:
            return newest
    return None


def read_last_delta_commit(database) -> tuple[datetime, datetime | None]:
    """(the strong read's timestamp, the last delta commit then)."""
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))  # starts the snapshot, fixing its timestamp
        read_at = read_timestamp(snapshot)
        return read_at, last_delta_commit(snapshot, read_at)
