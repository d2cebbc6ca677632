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
count per event hour at S (the hourly rollup plus the unfolded deltas, as reads do); its
commits then write, per hour, minus that hour's count. Every delta committed at or before S
is cancelled, every delta committed after S (a sink racing the reset) still counts, and a
fold before, during or after sees more ordinary deltas.

Every commit stays within the mutation budget whatever the post's history, and every hour reads
zero once the reset is done, so its hot score (schemas/hot_score.py: each hour weighs 2^(h / H),
each differently) is exactly 0 and so is every last-N-hours count. A post with at most
MAX_HOUR_ROWS hours is reset in one commit (its rows and its audit row). A post with more is split
(`split_reset`, at most `max_hour_rows` rows a commit):

1. the first commit holds the audit row, a row for each of the newest `max_hour_rows - 1` hours,
   and one row in the oldest hour cancelling all the older hours together. From it on the total,
   and every hour but those older ones, reads zero (on the real budget the newest 906 hours: no
   last-N-hours window, at most 720 hours up to now, reaches an older one); the audit row records
   the split (SplitRows);
2. each later commit moves a group of those older hours' share out of the oldest hour into their
   own: plus the group's sum in the oldest hour, minus each hour's count in its hour, under a
   DeltaId of its own ("@adjust/<id>/<part>"). It changes the total by zero; the last one also
   clears SplitRows.

Crash points, and what a rerun by ID (the same --id) does:

- before the first commit: nothing is written; a rerun is a new reset, with its own S;
- after any commit, before the next (a crash, a kill, an error): the total reads zero, and the
  older hours not yet moved read their own counts, the oldest hour minus theirs (a nonzero hot
  score until the reset is finished). A rerun finds the audit row with SplitRows set, reads the
  post's hours at its S (AsOf), plans the same commits from them and SplitRows, and writes each
  later commit again: one already written collides with its own rows (ALREADY_EXISTS) and writes
  nothing, so nothing moves twice;
- a commit that succeeded but answered an error (ambiguous): its retry collides the same way;
- a finished reset, or one in a single commit: SplitRows is NULL, and a rerun reads nothing more.

The hours at S can be read for Spanner's version retention (an hour, version_retention_period):
a rerun of an unfinished reset later than that cannot know what its remaining commits move, and
fails (ResetSnapshotGone) before writing anything, saying what to do, instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.batch import Batch

from schemas.counters import Counts, total
from schemas.delta_ids import adjustment_delta_id, reset_part_delta_id
from schemas.records import CounterSums, PostDelta
from spanner_reads.hourly import HourCount, hourly_counts_in
from spanner_store.database import MUTATION_BUDGET, commit_mutations, read_timestamp, run_with_retries
from spanner_store.tables import (
    ADJUSTMENT_COLUMNS,
    ADJUSTMENT_SPLIT_COLUMNS,
    ADJUSTMENTS,
    COUNTER_COLUMNS,
    POST_KEY_COLUMNS,
    POSTS,
    counts_at,
    post_key,
)
from spanner_writes.deltas import MUTATIONS_PER_COMMIT, MUTATIONS_PER_DELTA, MUTATIONS_PER_PARENT, add_delta_writes
from spanner_writes.folding import outlived_snapshot

ADJUST = "adjust"
RESET = "reset"
FORGET_USER = (
    "forget_user"  # `upvotes forget-user` (upvotes/operations/forget_user.py): its request, no delta of its own
)
LIST_ADJUSTMENTS_SQL = f"""SELECT {", ".join(ADJUSTMENT_COLUMNS)}
FROM Adjustments ORDER BY CreatedAt DESC LIMIT @limit"""


# Delta rows one commit of a reset may write: the budget less the parent key, the audit row (the
# first commit inserts it; the last of a split one updates two of its columns) and the commit's
# DeltaCommits and TopCandidates rows.
MAX_HOUR_ROWS = (
    MUTATION_BUDGET - MUTATIONS_PER_PARENT - len(ADJUSTMENT_COLUMNS) - MUTATIONS_PER_COMMIT
) // MUTATIONS_PER_DELTA


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
    split_rows: int | None = None  # a reset not yet fully written: the rows per commit it is split by

    def row(self) -> tuple:
        """Its Adjustments row (ADJUSTMENT_COLUMNS)."""
        return self._row(self.as_of, self.created_at)

    def committed_row(self, as_of_committed: bool = False) -> tuple:
        """Its row to write: CreatedAt, and with `as_of_committed` AsOf, the commit's timestamp
        (spanner.COMMIT_TIMESTAMP, the placeholder Spanner fills in)."""
        return self._row(spanner.COMMIT_TIMESTAMP if as_of_committed else self.as_of, spanner.COMMIT_TIMESTAMP)

    def _row(self, as_of: datetime | str | None, created_at: datetime | str | None) -> tuple:
        return (
            self.adjustment_id,
            self.post_id,
            self.kind,
            *self.counts,
            self.reason,
            self.actor,
            as_of,
            created_at,
            self.user_id,
            self.split_rows,
        )

    @classmethod
    def from_row(cls, row) -> Adjustment:
        after = 3 + len(COUNTER_COLUMNS)
        return cls._make([*row[:3], counts_at(row, 3), *row[after:]])

    def to_json(self) -> dict:
        """Flat: one field per counter, times as RFC 3339 text (`upvotes adjust --list` prints it)."""
        return {
            "adjustment_id": self.adjustment_id,
            "post_id": self.post_id,
            "kind": self.kind,
            **self.counts._asdict(),
            "reason": self.reason,
            "actor": self.actor,
            "as_of": None if self.as_of is None else self.as_of.isoformat(),
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "user_id": self.user_id,
            "split_rows": self.split_rows,
        }


class AdjustmentResult(NamedTuple):
    adjustment: Adjustment
    written: bool  # False: this ID was already written (a retry); its first commit was not made again
    commits: int  # commits this run made (a reset split in several: those a rerun finished)


class ResetSnapshotGone(RuntimeError):
    """An unfinished reset's rerun, later than Spanner keeps the versions its remaining commits
    are computed from (its snapshot's hourly counts)."""


def _blind_commit(database, post_id: str, deltas: list[PostDelta], also: Callable[[Batch], None]) -> bool:
    """One blind commit: the delta rows with the commit's per-commit rows, as the sink writes them
    (or the post's key alone, for none), and what `also` adds. False if a row of it exists."""

    def write(batch) -> None:
        if deltas:
            add_delta_writes(batch, deltas)
        else:
            batch.insert_or_update(POSTS, columns=POST_KEY_COLUMNS, values=[post_key(post_id)])
        also(batch)

    try:
        run_with_retries(lambda: commit_mutations(database, write))
        return True
    except exceptions.AlreadyExists:
        return False


def _hour_deltas(post_id: str, hours: list[HourCount], delta_id: str) -> list[PostDelta]:
    return [
        PostDelta(post_id, int(h.hour.timestamp()), delta_id, CounterSums(h.counts))
        for h in hours
        if not h.counts.is_zero()
    ]


def _commit(database, adjustment: Adjustment, hours: list[HourCount]) -> bool:
    """The adjustment's (first) commit: its delta rows (one per hour) and its audit row. False if the ID exists."""
    audit = adjustment.committed_row()
    return _blind_commit(
        database,
        adjustment.post_id,
        _hour_deltas(adjustment.post_id, hours, adjustment_delta_id(adjustment.adjustment_id)),
        lambda batch: batch.insert(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, values=[audit]),
    )


def _commit_part(database, reset_: Adjustment, part: int, hours: list[HourCount], last: bool) -> bool:
    """A later commit of a split reset, under its part's DeltaId; the last one also clears the audit
    row's SplitRows. False if that part is written already (its rows collide)."""

    def finish(batch) -> None:
        if last:
            batch.update(ADJUSTMENTS, columns=ADJUSTMENT_SPLIT_COLUMNS, values=[(reset_.adjustment_id, None)])

    return _blind_commit(
        database,
        reset_.post_id,
        _hour_deltas(reset_.post_id, hours, reset_part_delta_id(reset_.adjustment_id, part)),
        finish,
    )


def adjustment_of(database, adjustment_id: str) -> Adjustment | None:
    """The adjustment recorded under this ID (a point read); None: none yet."""
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.read(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, keyset=spanner.KeySet(keys=[[adjustment_id]]))
        )
    return Adjustment.from_row(rows[0]) if rows else None


def record(
    database, adjustment: Adjustment, with_rows: Callable[[Batch], None] | None = None, as_of_committed: bool = False
) -> bool:
    """Writes the audit row alone, or with the rows `with_rows` adds, in a blind commit of its own
    (forget-user records its request and its erasure before its first retraction). With
    `as_of_committed`, AsOf is the commit's timestamp, as CreatedAt is (forget-user's forget time:
    the clock every reader agrees on, read back once committed). False if the ID exists, and then
    nothing is written: an earlier run of the same request wrote it, or this one did when a retried
    commit's first attempt succeeded unseen."""
    row = adjustment.committed_row(as_of_committed)

    def write(batch) -> None:
        batch.insert(ADJUSTMENTS, columns=ADJUSTMENT_COLUMNS, values=[row])
        if with_rows is not None:
            with_rows(batch)

    try:
        run_with_retries(lambda: commit_mutations(database, write))
        return True
    except exceptions.AlreadyExists:
        return False


def _recorded(database, adjustment_id: str) -> Adjustment:
    existing = adjustment_of(database, adjustment_id)
    if existing is None:
        raise RuntimeError(f"adjustment {adjustment_id}: a delta row exists without its audit row")
    return existing


def adjust(
    database, adjustment_id: str, post_id: str, counts: Counts, reason: str, actor: str, event_hour: datetime
) -> AdjustmentResult:
    """Adds `counts` to `post_id` in `event_hour`, audited; idempotent per adjustment_id."""
    adjustment = Adjustment(adjustment_id, post_id, ADJUST, counts, reason, actor, None, None)
    written = _commit(database, adjustment, [HourCount(event_hour, counts)])
    return AdjustmentResult(_recorded(database, adjustment_id), written, int(written))


def _reset_minus(hours: list[HourCount]) -> list[HourCount]:
    """What cancels these hourly counts: minus each nonzero hour's."""
    return [HourCount(h.hour, h.counts.negated()) for h in hours if not h.counts.is_zero()]


def reset(
    database, adjustment_id: str, post_id: str, reason: str, actor: str, max_hour_rows: int = MAX_HOUR_ROWS
) -> AdjustmentResult:
    """Sets `post_id` to zero as of a snapshot S (now): minus its exact count at S in every event
    hour, in commits of at most `max_hour_rows` hour rows (see the module docstring). Idempotent per
    adjustment_id: a rerun finishes an unfinished reset as it was split, and writes nothing twice."""
    recorded = adjustment_of(database, adjustment_id)
    if recorded is not None:
        finished, made = _finish(database, recorded, None)
        return AdjustmentResult(finished, False, made)
    with database.snapshot(multi_use=True) as snapshot:
        hours = hourly_counts_in(snapshot, post_id)
        as_of = read_timestamp(snapshot)
    minus = _reset_minus(hours)
    commits = split_reset(minus, max_hour_rows)
    adjustment = Adjustment(
        adjustment_id,
        post_id,
        RESET,
        total(h.counts for h in minus),
        reason,
        actor,
        as_of,
        None,
        split_rows=max_hour_rows if len(commits) > 1 else None,
    )
    written = _commit(database, adjustment, commits[0])
    # Its own record's split, or that of a run of the same ID racing it (then read at that one's S).
    recorded = _recorded(database, adjustment_id)
    finished, made = _finish(database, recorded, commits if recorded.as_of == as_of else None)
    return AdjustmentResult(finished, written, made + int(written))


def _finish(database, recorded: Adjustment, commits: list[list[HourCount]] | None) -> tuple[Adjustment, int]:
    """The later commits of a split reset that are not written yet, from `commits` as planned or,
    without them, planned again from the post's hours at the reset's snapshot; returns the audit row
    as it then stands and how many commits this made."""
    if recorded.kind != RESET or recorded.split_rows is None:
        return recorded, 0  # nothing left to write: one commit, or a finished split
    if commits is None:
        commits = split_reset(_reset_minus(_hours_at_snapshot(database, recorded)), recorded.split_rows)
    made = sum(
        _commit_part(database, recorded, part, hours, last=part == len(commits))
        for part, hours in enumerate(commits[1:], start=2)
    )
    return _recorded(database, recorded.adjustment_id), made


def _hours_at_snapshot(database, recorded: Adjustment) -> list[HourCount]:
    """The post's exact hourly counts at the reset's snapshot S (its AsOf), as its first run read them."""
    assert recorded.as_of is not None  # a reset records its snapshot
    try:
        with database.snapshot(read_timestamp=recorded.as_of, multi_use=True) as snapshot:
            return hourly_counts_in(snapshot, recorded.post_id)
    except exceptions.FailedPrecondition as error:
        if not outlived_snapshot(error, recorded.as_of):
            raise
        raise ResetSnapshotGone(
            f"reset {recorded.adjustment_id} of {recorded.post_id!r} is unfinished (split in commits of "
            f"{recorded.split_rows} rows; its total reads 0, some old hours do not), and what its remaining "
            f"commits move is the post's hourly counts at its snapshot {recorded.as_of.isoformat()}, older than "
            "Spanner keeps versions (an hour). Nothing was written. To zero every hour, run a new reset of the "
            "post with another --id (it also cancels the votes committed since that snapshot)"
        ) from None


def split_reset(hours: list[HourCount], limit: int = MAX_HOUR_ROWS) -> list[list[HourCount]]:
    """The rows of each commit of a reset whose compensating count per hour is `hours` (one per
    hour), at most `limit` rows a commit: the first bounded_hours' (the oldest hours beyond the
    limit cancelled together in the oldest one), then, per group of `limit - 1` of those older
    hours but the oldest, minus the group's sum in the oldest hour and each hour's own. Every
    commit after the first sums to zero, and all of them to `hours`, hour by hour. Pure."""
    if limit < 2:
        raise ValueError("a reset needs at least 2 rows per commit: an hour's and the oldest hour's")
    hours = sorted(hours)
    first = bounded_hours(hours, limit)
    older = hours[1 : len(hours) - len(first) + 1]  # the hours cancelled in the oldest one, but the oldest itself
    groups = (older[start : start + limit - 1] for start in range(0, len(older), limit - 1))
    return [first] + [[HourCount(hours[0].hour, total(h.counts for h in group).negated()), *group] for group in groups]


def bounded_hours(hours: list[HourCount], limit: int = MAX_HOUR_ROWS) -> list[HourCount]:
    """At most `limit` rows with the same sums: the oldest hours beyond it merged into the oldest
    (a split reset's first commit; `split_reset` moves them back into their own hours)."""
    hours = sorted(hours)
    if len(hours) <= limit:
        return hours
    merged = hours[: len(hours) - limit + 1]
    oldest = HourCount(merged[0].hour, total(h.counts for h in merged))
    return [oldest] + hours[len(merged) :]


def list_adjustments(database, limit: int = 100) -> list[Adjustment]:
    """The newest adjustments first."""
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(
            LIST_ADJUSTMENTS_SQL, params={"limit": limit}, param_types={"limit": param_types.INT64}
        )
        return [Adjustment.from_row(row) for row in rows]


def current_hour() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
