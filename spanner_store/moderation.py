"""Moderation: audited compensating deltas (`upvotes adjust`) and resets to zero (`upvotes reset`).

Counts are never edited in place: a correction is one more delta row, so the exact reads,
the hourly reads and the fold treat it like any vote, and the streaming sink and the fold
never race with it on a row. Each correction is one blind commit holding its delta rows
(DeltaId "@adjust/<id>"), written as the sink writes its own (`deltas.add_delta_writes`, so
with the commit's DeltaCommits row for the fold and its TopCandidates row for the fresh top:
a large positive adjustment is a riser like any other), and its Adjustments audit row, keyed
by the adjustment's ID: a retry of the same ID fails on ALREADY_EXISTS and writes nothing twice.

A reset of post P as of snapshot S: a strong read-only snapshot fixes S and reads P's exact
count per event hour at S (the hourly rollup plus the unfolded deltas, as reads do); the
commit then writes, per hour, minus that hour's count. Every delta committed at or before S
is cancelled, every delta committed after S (a sink racing the reset) still counts, and a
fold before, during or after sees one more ordinary delta.

The commit stays within the mutation budget whatever the post's history: a post with more
hours than MAX_HOUR_ROWS has its oldest hours cancelled together, in one row of its oldest
hour (its total reads zero; those old hours then read their own counts, and the oldest one
minus theirs).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from spanner_store.database import MUTATION_BUDGET, commit_mutations, run_with_retries
from spanner_store.deltas import MUTATIONS_PER_COMMIT, MUTATIONS_PER_DELTA, MUTATIONS_PER_PARENT, add_delta_writes
from spanner_store.hourly import HourCount, hourly_counts_in
from spanner_store.tables import ADJUSTMENT_COLUMNS, ADJUSTMENTS, POST_KEY_COLUMNS, POSTS, adjustment_delta_id, post_key
from schemas.records import PostDelta

ADJUST = "adjust"
RESET = "reset"
LIST_ADJUSTMENTS_SQL = """SELECT AdjustmentId, PostId, Kind, Upvotes, Shares, Reason, Actor, AsOf, CreatedAt
FROM Adjustments ORDER BY CreatedAt DESC LIMIT @limit"""


# Delta rows one reset may write: the budget less the parent key, the audit row and the
# commit's DeltaCommits and TopCandidates rows.
MAX_HOUR_ROWS = (MUTATION_BUDGET - MUTATIONS_PER_PARENT - len(ADJUSTMENT_COLUMNS)
                 - MUTATIONS_PER_COMMIT) // MUTATIONS_PER_DELTA


class Adjustment(NamedTuple):
    adjustment_id: str
    post_id: str
    kind: str  # ADJUST or RESET
    upvotes: int  # the compensating change written, summed over its hours
    shares: int
    reason: str
    actor: str
    as_of: datetime | None  # a reset's snapshot S
    created_at: datetime | None  # commit time; None until read back


class AdjustmentResult(NamedTuple):
    adjustment: Adjustment
    written: bool  # False: this ID was already written (a retry); nothing was added


def _commit(database, adjustment: Adjustment, hours: list[HourCount]) -> bool:
    """One blind commit: the delta rows (one per hour) with the commit's per-commit rows, as the
    sink writes them, and the audit row. False if the ID exists."""
    delta_id = adjustment_delta_id(adjustment.adjustment_id)
    deltas = [PostDelta(adjustment.post_id, int(h.hour.timestamp()), delta_id, h.upvotes, h.shares, 0)
              for h in hours if h.upvotes or h.shares]
    audit = adjustment._replace(created_at=spanner.COMMIT_TIMESTAMP)

    def write(batch) -> None:
        if deltas:
            add_delta_writes(batch, deltas)
        else:
            batch.insert_or_update(POSTS, columns=POST_KEY_COLUMNS, values=[post_key(adjustment.post_id)])
        batch.insert(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, values=[tuple(audit)])

    try:
        run_with_retries(lambda: commit_mutations(database, write))
        return True
    except exceptions.AlreadyExists:
        return False


def _existing(database, adjustment_id: str) -> Adjustment | None:
    with database.snapshot() as snapshot:
        rows = list(snapshot.read(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS,
                                  keyset=spanner.KeySet(keys=[[adjustment_id]])))
    return Adjustment(*rows[0]) if rows else None


def _result(database, adjustment: Adjustment, hours: list[HourCount]) -> AdjustmentResult:
    if _commit(database, adjustment, hours):
        return AdjustmentResult(_existing(database, adjustment.adjustment_id), True)
    existing = _existing(database, adjustment.adjustment_id)
    if existing is None:
        raise RuntimeError(f"adjustment {adjustment.adjustment_id}: a delta row exists without its audit row")
    return AdjustmentResult(existing, False)


def adjust(database, adjustment_id: str, post_id: str, upvotes: int, shares: int, reason: str, actor: str,
           event_hour: datetime) -> AdjustmentResult:
    """Adds (upvotes, shares) to `post_id` in `event_hour`, audited; idempotent per adjustment_id."""
    adjustment = Adjustment(adjustment_id, post_id, ADJUST, upvotes, shares, reason, actor, None, None)
    return _result(database, adjustment, [HourCount(event_hour, upvotes, shares)])


def reset(database, adjustment_id: str, post_id: str, reason: str, actor: str) -> AdjustmentResult:
    """Sets `post_id` to zero as of a snapshot S (now): minus its exact count at S, per event hour."""
    with database.snapshot(multi_use=True) as snapshot:
        hours = hourly_counts_in(snapshot, post_id)
        as_of = snapshot._transaction_read_timestamp  # noqa: SLF001 - the client exposes it only here
    minus = bounded_hours([HourCount(h.hour, -h.upvotes, -h.shares) for h in hours if h.upvotes or h.shares])
    adjustment = Adjustment(adjustment_id, post_id, RESET, sum(h.upvotes for h in minus),
                            sum(h.shares for h in minus), reason, actor, as_of, None)
    return _result(database, adjustment, minus)


def bounded_hours(hours: list[HourCount], limit: int = MAX_HOUR_ROWS) -> list[HourCount]:
    """At most `limit` rows with the same sums: the oldest hours beyond it merged into the oldest."""
    hours = sorted(hours)
    if len(hours) <= limit:
        return hours
    merged = hours[:len(hours) - limit + 1]
    oldest = HourCount(merged[0].hour, sum(h.upvotes for h in merged), sum(h.shares for h in merged))
    return [oldest] + hours[len(merged):]


def list_adjustments(database, limit: int = 100) -> list[Adjustment]:
    """The newest adjustments first."""
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(LIST_ADJUSTMENTS_SQL, params={"limit": limit},
                                    param_types={"limit": param_types.INT64})
        return [Adjustment(*row) for row in rows]


def current_hour() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
