"""Whether the streaming pipeline runs: what `upvotes status` reports beside the fold lag.

Two signs. Each local stream's heartbeat (`stream_heartbeats`): the StreamHeartbeats row
local_runner/heartbeat.py rewrites at least once per window, idle or not, with its window length;
`StreamHeartbeat.state` says "dead" once the row is DEAD_AFTER_WINDOWS of those windows old
(and the stream was not drained), so a dead stream is seen within three windows, and an idle one
never is. And when the stream last committed delta rows (`last_delta_commit`), which a Dataflow
job (no heartbeat row) and an idle stream alike show only as "a while ago".

Every delta commit also inserts one TopCandidates row in the same commit (spanner_store/
top_candidates.py), keyed (Shard, CommittedAt, ...), so the newest CommittedAt over the shards is
the last delta commit. Reading it costs what was committed recently, never the table: each
shard's key range after `now - lookback` is read (CommittedAt only), for lookbacks of a
minute, then ten, an hour, a day and the 30-day retention, stopping at the first that finds
a row. A live stream is found in the first minute's rows; a stream dead for a day costs the
rows of the day before it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from google.cloud import spanner

from spanner_store.database import read_timestamp
from spanner_store.tables import (
    DELTA_RETENTION_DAYS,
    STREAM_HEARTBEAT_COLUMNS,
    STREAM_HEARTBEATS,
    TOP_CANDIDATES,
    committed_after,
)

LOOKBACKS = (
    timedelta(minutes=1),
    timedelta(minutes=10),
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=DELTA_RETENTION_DAYS),
)


def last_delta_commit(snapshot, now: datetime) -> datetime | None:
    """The commit timestamp of the newest delta commit as of `snapshot` (read at `now`), or None
    if none is kept (never written, or older than the retention)."""
    for lookback in LOOKBACKS:
        since = now - lookback
        newest = max(
            (row[0] for row in snapshot.read(TOP_CANDIDATES, columns=("CommittedAt",), keyset=committed_after(since))),
            default=None,
        )
        if newest is not None:
            return newest
    return None


def read_last_delta_commit(database) -> tuple[datetime, datetime | None]:
    """(the strong read's timestamp, the last delta commit then)."""
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))  # starts the snapshot, fixing its timestamp
        read_at = read_timestamp(snapshot)
        return read_at, last_delta_commit(snapshot, read_at)


# A stream whose heartbeat is this many of its windows old has missed them: it is dead (killed,
# crashed, frozen), not idle: an idle stream beats too.
DEAD_AFTER_WINDOWS = 3
RUNNING, STOPPED, DEAD = "running", "stopped", "dead"


@dataclass(frozen=True)
class StreamHeartbeat:
    """One local stream's heartbeat row (schemas/posts.sql StreamHeartbeats), as of `read_at`."""

    subscription: str
    writer: str
    window_seconds: int
    host: str | None
    pid: int | None
    started_at: datetime | None
    alive_at: datetime
    stopped_at: datetime | None  # a drain ended it
    read_at: datetime = field(kw_only=True)  # not a column: when the row was read

    @property
    def age_s(self) -> float:
        return (self.read_at - self.alive_at).total_seconds()

    @property
    def missed_windows(self) -> int:
        return max(0, int(self.age_s // self.window_seconds))

    @property
    def state(self) -> str:
        """STOPPED (drained on purpose), DEAD (no beat for DEAD_AFTER_WINDOWS of its windows) or RUNNING."""
        if self.stopped_at is not None and self.stopped_at >= self.alive_at:
            return STOPPED
        return DEAD if self.age_s > DEAD_AFTER_WINDOWS * self.window_seconds else RUNNING


def stream_heartbeats(snapshot, read_at: datetime) -> list[StreamHeartbeat]:
    """Every stream's heartbeat row (one per subscription: a handful), by subscription."""
    rows = snapshot.read(STREAM_HEARTBEATS, columns=STREAM_HEARTBEAT_COLUMNS, keyset=spanner.KeySet(all_=True))
    return sorted((StreamHeartbeat(*row, read_at=read_at) for row in rows), key=lambda beat: beat.subscription)


def read_stream_heartbeats(database) -> tuple[datetime, list[StreamHeartbeat]]:
    """(the strong read's timestamp, every stream's heartbeat then)."""
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))  # starts the snapshot, fixing its timestamp
        read_at = read_timestamp(snapshot)
        return read_at, stream_heartbeats(snapshot, read_at)
