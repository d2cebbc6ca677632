"""Moderation: audited compensating deltas (`upvotes adjust`) and resets to zero (`upvotes reset`);
the same audit table records each `upvotes forget-user` request (upvotes/operations/forget_user.py).

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
from typing import Callable, NamedTuple

from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from schemas.counters import Counts, total
from schemas.delta_ids import adjustment_delta_id
from schemas.records import CounterSums, PostDelta
from spanner_reads.hourly import HourCount, hourly_counts_in
from spanner_store.database import MUTATION_BUDGET, commit_mutations, read_timestamp, run_with_retries
from spanner_store.tables import (
    ADJUSTMENT_COLUMNS, ADJUSTMENTS, COUNTER_COLUMNS, POST_KEY_COLUMNS, POSTS, counts_at, post_key,
)
from spanner_writes.deltas import MUTATIONS_PER_COMMIT, MUTATIONS_PER_DELTA, MUTATIONS_PER_PARENT, add_delta_writes

ADJUST = "adjust"
RESET = "reset"
FORGET_USER = "forget_user"  # `upvotes forget-user` (upvotes/operations/forget_user.py): its request, no delta of its own
LIST_ADJUSTMENTS_SQL = f"""SELECT {", ".join(ADJUSTMENT_COLUMNS)}
FROM Adjustments ORDER BY CreatedAt DESC LIMIT @limit"""


# Delta rows one reset may write: the budget less the parent key, the audit row and the
# commit's DeltaCommits and TopCandidates rows.
MAX_HOUR_ROWS = (MUTATION_BUDGET - MUTATIONS_PER_PARENT - len(ADJUSTMENT_COLUMNS)
                 - MUTATIONS_PER_COMMIT) // MUTATIONS_PER_DELTA


class Adjustment(NamedTuple):
    adjustment_id: str
    post_id: str
    kind: str  # ADJUST, RESET or FORGET_USER
    counts: Counts  # the compensating change written, summed over its hours (forget-user: the votes it found)
    reason: str
    actor: str
    as_of: datetime | None  # a reset's snapshot S; a forget-user's forget time (its record's commit time)
    created_at: datetime | None  # commit time; None until read back
    user_id: str | None = None  # the user a forget-user retracted the votes of

    def row(self) -> tuple:
        """Its Adjustments row (ADJUSTMENT_COLUMNS)."""
        return (self.adjustment_id, self.post_id, self.kind, *self.counts, self.reason, self.actor, self.as_of,
                self.created_at, self.user_id)

    @classmethod
    def from_row(cls, row) -> Adjustment:
        after = 3 + len(COUNTER_COLUMNS)
        return cls(*row[:3], counts_at(row, 3), *row[after:])

    def to_json(self) -> dict:
        """Flat: one field per counter, times as RFC 3339 text (`upvotes adjust --list` prints it)."""
        return {"adjustment_id": self.adjustment_id, "post_id": self.post_id, "kind": self.kind,
                **self.counts._asdict(), "reason": self.reason, "actor": self.actor,
                "as_of": None if self.as_of is None else self.as_of.isoformat(),
                "created_at": None if self.created_at is None else self.created_at.isoformat(),
                "user_id": self.user_id}


class AdjustmentResult(NamedTuple):
    adjustment: Adjustment
    written: bool  # False: this ID was already written (a retry); nothing was added


def _commit(database, adjustment: Adjustment, hours: list[HourCount]) -> bool:
    """One blind commit: the delta rows (one per hour) with the commit's per-commit rows, as the
    sink writes them, and the audit row. False if the ID exists."""
    delta_id = adjustment_delta_id(adjustment.adjustment_id)
    deltas = [PostDelta(adjustment.post_id, int(h.hour.timestamp()), delta_id, CounterSums(h.counts))
              for h in hours if not h.counts.is_zero()]
    audit = adjustment._replace(created_at=spanner.COMMIT_TIMESTAMP)

    def write(batch) -> None:
        if deltas:
            add_delta_writes(batch, deltas)
        else:
            batch.insert_or_update(POSTS, columns=POST_KEY_COLUMNS, values=[post_key(adjustment.post_id)])
        batch.insert(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, values=[audit.row()])

    try:
        run_with_retries(lambda: commit_mutations(database, write))
        return True
    except exceptions.AlreadyExists:
        return False


def adjustment_of(database, adjustment_id: str) -> Adjustment | None:
    """The adjustment recorded under this ID (a point read); None: none yet."""
    with database.snapshot() as snapshot:
        rows = list(snapshot.read(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS,
                                  keyset=spanner.KeySet(keys=[[adjustment_id]])))
    return Adjustment.from_row(rows[0]) if rows else None


def record(database, adjustment: Adjustment, with_rows: Callable[[spanner.Batch], None] | None = None,
           as_of_committed: bool = False) -> bool:
    """Writes the audit row alone, or with the rows `with_rows` adds, in a blind commit of its own
    (forget-user records its request and its erasure before its first retraction). With
    `as_of_committed`, AsOf is the commit's timestamp, as CreatedAt is (forget-user's forget time:
    the clock every reader agrees on, read back once committed). False if the ID exists, and then
    nothing is written: an earlier run of the same request wrote it, or this one did when a retried
    commit's first attempt succeeded unseen."""
    stamped = adjustment._replace(created_at=spanner.COMMIT_TIMESTAMP)
    row = (stamped._replace(as_of=spanner.COMMIT_TIMESTAMP) if as_of_committed else stamped).row()

    def write(batch) -> None:
        batch.insert(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, values=[row])
        if with_rows is not None:
            with_rows(batch)
    try:
        run_with_retries(lambda: commit_mutations(database, write))
        return True
    except exceptions.AlreadyExists:
        return False


def _result(database, adjustment: Adjustment, hours: list[HourCount]) -> AdjustmentResult:
    if _commit(database, adjustment, hours):
        return AdjustmentResult(adjustment_of(database, adjustment.adjustment_id), True)
    existing = adjustment_of(database, adjustment.adjustment_id)
    if existing is None:
        raise RuntimeError(f"adjustment {adjustment.adjustment_id}: a delta row exists without its audit row")
    return AdjustmentResult(existing, False)


def adjust(database, adjustment_id: str, post_id: str, counts: Counts, reason: str, actor: str,
           event_hour: datetime) -> AdjustmentResult:
    """Adds `counts` to `post_id` in `event_hour`, audited; idempotent per adjustment_id."""
    adjustment = Adjustment(adjustment_id, post_id, ADJUST, counts, reason, actor, None, None)
    return _result(database, adjustment, [HourCount(event_hour, counts)])


def reset(database, adjustment_id: str, post_id: str, reason: str, actor: str) -> AdjustmentResult:
    """Sets `post_id` to zero as of a snapshot S (now): minus its exact count at S, per event hour."""
    with database.snapshot(multi_use=True) as snapshot:
        hours = hourly_counts_in(snapshot, post_id)
        as_of = read_timestamp(snapshot)
    minus = bounded_hours([HourCount(h.hour, h.counts.negated()) for h in hours if not h.counts.is_zero()])
    adjustment = Adjustment(adjustment_id, post_id, RESET, total(h.counts for h in minus), reason, actor, as_of, None)
    return _result(database, adjustment, minus)


def bounded_hours(hours: list[HourCount], limit: int = MAX_HOUR_ROWS) -> list[HourCount]:
    """At most `limit` rows with the same sums: the oldest hours beyond it merged into the oldest."""
    hours = sorted(hours)
    if len(hours) <= limit:
        return hours
    merged = hours[:len(hours) - limit + 1]
    oldest = HourCount(merged[0].hour, total(h.counts for h in merged))
    return [oldest] + hours[len(merged):]


def list_adjustments(database, limit: int = 100) -> list[Adjustment]:
    """The newest adjustments first."""
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(LIST_ADJUSTMENTS_SQL, params={"limit": limit},
                                    param_types={"limit": param_types.INT64})
        return [Adjustment.from_row(row) for row in rows]


def current_hour() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
