"""Versioned top-posts views: stable pages for readers, small writes for the publisher.

`upvotes top` ranks straight from the PostsByUpvotes index, so a reader paging through
the ranking while a fold commits sees posts move between pages: page 2 can repeat a post
of page 1 or skip one. A *view* here is a published, immutable ranking (the top K by
folded upvotes) with a version number. A reader pins a version (the active one when it
starts) and reads every page of that version, however many newer versions appear
meanwhile (the pattern of spanner-static-views.txt).

Tables (schemas/posts.sql), all under the view's name, so a view's rows live together
and nothing appends at the end of a table's key space:

- ``TopPostsActiveVersion`` (ViewName): the active version, the publisher's lease
  (PendingVersion, PendingOwner, PendingUntil) and ExpiredThrough, the newest version
  that has expired. Versions ExpiredThrough < v <= Version are readable.
- ``TopPostsVersions`` (ViewName, Version): when each version was published, when it
  expires, its size and what publishing it wrote.
- ``TopPostsViewRows`` (ViewName, Rank, ValidSince): a ranked row belongs to versions
  ValidSince <= v < InvalidSince (InvalidSince NULL: still current). Consecutive versions
  share every row that did not change, so a version costs only its changes.

Publishing (`publish_top_view`), one publisher per view at a time:

1. Lease: one transaction claims the view (PendingVersion = active + 1, an owner ID and a
   lease deadline). Another publisher holding an unexpired lease makes this one raise
   PublishInProgress; an expired lease (a crashed publisher) is taken over.
2. Rank: one snapshot reads the top K by exact upvotes (spanner_reads/rankings/all_time.py:
   the folded index plus every commit since the fold, ties broken by the index's own key order,
   so a ranking is deterministic), whether that ranking is certified and its bound, and the
   newest fold's snapshot, which tells readers how fresh the ranking is. A view of another
   ranking without a parameter (spanner_reads/rankings/: `by="hot"`, view "top-hot" by default)
   takes its top K instead, exact at the snapshot. Rows hold each post's exact counts. A
   ranking that is not certified is not published (NotCertified) unless the publisher allows
   it (`allow_uncertified`); the version records either way whether it was (Certified, Bound),
   and every page says so.
3. Diff: the stored rows still valid at the active version are compared rank by rank
   with the new ranking. A rank whose (post, counts) is unchanged is kept as it
   is; a changed one gets a new row (ValidSince = new version) and its old row is retired
   (InvalidSince = new version). Rows a crashed publisher left for the same version number
   are reused when right and undone when not, so a retry after a crash converges.
4. Write: the changes go in transactions of at most `batch_rows` rows, each of which
   first re-checks the lease (a publisher whose lease was taken over stops before writing
   anything) and extends it. None of these writes is visible to a reader of the active
   version: new rows have ValidSince above it, retired rows have InvalidSince above it.
5. Switch: one short transaction checks that the active version is still the one diffed
   against and the lease is still ours, then sets the active version, records the new
   version and gives the previous one ExpiresAt = now + keep_versions_for_s. Readers who
   look up the active version see the old complete set before this commit and the new
   complete set after it, never a mix.
6. Expire: versions whose ExpiresAt has passed (the oldest first, contiguously) are
   marked expired by raising ExpiredThrough in one transaction; then their version records
   and every row no live version can see (InvalidSince <= ExpiredThrough + 1, found through
   the null-filtered TopPostsViewRowsByInvalidSince index) are deleted in batches of
   `batch_rows`. A reader's snapshot checks ExpiredThrough before reading rows, and rows
   are deleted only after it moved, so a reader sees a whole version or "expired".

A publication whose ranking and certification equal the active version's writes nothing and
publishes no new version (it still runs step 6).

Reading (`read_top_page`): one read-only snapshot reads the active row (the active
version, or checks that the asked-for version is published and not expired), the
version's record and the page: ranks (page-1)*size+1 .. page*size, one key-range seek on
(ViewName, Rank) filtered by ValidSince <= v < InvalidSince. Every version has exactly one
row per rank, so pages of a version partition its ranking: no duplicates, no gaps.

Costs: a rank's row changes when its post or that post's counts change, so a post
climbing from rank 50 to rank 10 rewrites ranks 10..50 (every post in between moved down
one), while counts changing without reordering rewrite one row each. A page read scans
page_size rows per kept version (retired rows of unexpired versions share the key range).
The diff reads the view's stored rows that are not yet retired, scanning the view's key
range (K rows per kept version). Each row write is at most 7 cells plus one index entry
of 4, so a batch of 100 rows stays about 70 times under Spanner's 80,000-mutation commit
limit.

Clocks: ExpiresAt and the lease deadline are written from the publisher's clock and
compared with the reader's or the next publisher's; seconds of skew do not matter for
retention measured in minutes to hours.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from schemas.counters import Counts
from spanner_reads import rankings
from spanner_store.database import MUTATION_BUDGET, commit_mutations, run_transaction, run_with_retries
from spanner_store.mutation_cost import insert_cost, update_cost
from spanner_store.tables import (
    COUNTER_COLUMNS,
    VIEW_ACTIVE,
    VIEW_ACTIVE_COLUMNS,
    VIEW_LEASE_COLUMNS,
    VIEW_RETIRE_COLUMNS,
    VIEW_ROW_COLUMNS,
    VIEW_ROWS,
    VIEW_VERSION_COLUMNS,
    VIEW_VERSIONS,
    counts_at,
)

Clock = Callable[[], datetime]

UPVOTES = rankings.DEFAULT
# What a view can rank by: every ranking without a parameter (spanner_reads.rankings.BY_CHOICES),
# each in a view of its own by default, named for it.
RANKINGS = rankings.BY_CHOICES
DEFAULT_VIEWS = {by: f"top-{by}" for by in RANKINGS}  # {"upvotes": "top-upvotes", "hot": "top-hot"}
DEFAULT_VIEW = DEFAULT_VIEWS[UPVOTES]
DEFAULT_K = 100
DEFAULT_BATCH_ROWS = 100
# A row upsert (its cells, its index entry and the removal of the old entry, from the DDL:
# spanner_store/mutation_cost.py) costs more than a delete (1 plus 1 for its entry). Larger
# asked-for batches are cut to this, so a commit stays within the mutation budget whatever
# --batch-rows says.
MUTATIONS_PER_VIEW_ROW = max(insert_cost(VIEW_ROWS, VIEW_ROW_COLUMNS), update_cost(VIEW_ROWS, VIEW_ROW_COLUMNS))
MAX_BATCH_ROWS = MUTATION_BUDGET // MUTATIONS_PER_VIEW_ROW
DEFAULT_KEEP_VERSIONS_S = 3600.0
# A publisher renews its lease with every batch; one that stops for this long is
# presumed dead and the next publisher takes the view over.
DEFAULT_LEASE_S = 300.0

# Every row still valid at the active version (@base), plus rows a crashed publisher
# wrote for the next version. Rows retired at or before @base are not needed.
# (Column names come from schemas/counters.py, never input.)
STORED_ROWS_SQL = f"""SELECT Rank, ValidSince, InvalidSince, PostId, {", ".join(COUNTER_COLUMNS)}
FROM TopPostsViewRows
WHERE ViewName = @view AND (InvalidSince IS NULL OR InvalidSince > @base)"""

PAGE_SQL = f"""SELECT Rank, PostId, {", ".join(COUNTER_COLUMNS)}
FROM TopPostsViewRows
WHERE ViewName = @view AND Rank BETWEEN @first AND @last
  AND ValidSince <= @version AND (InvalidSince IS NULL OR InvalidSince > @version)
ORDER BY Rank"""

VERSIONS_SQL = "SELECT Version, ExpiresAt FROM TopPostsVersions WHERE ViewName = @view ORDER BY Version"

# "InvalidSince <= @through" never matches NULL, so the null-filtered index answers it
# exactly; the emulator cannot prove that and wants the hint, which Cloud Spanner ignores.
EXPIRED_ROWS_SQL = """@{spanner_emulator.disable_query_null_filtered_index_check=true}
SELECT Rank, ValidSince
FROM TopPostsViewRows@{FORCE_INDEX=TopPostsViewRowsByInvalidSince}
WHERE ViewName = @view AND InvalidSince <= @through"""


# --- errors -------------------------------------------------------------------------------


class ViewError(Exception):
    """Base class of this module's errors."""


class NoActiveVersion(ViewError, LookupError):
    """The view has never been published."""


class VersionNotAvailable(ViewError, LookupError):
    """The asked-for version was never published, or has expired."""


class PublishInProgress(ViewError):
    """Another publisher holds the view's lease."""


class LeaseLost(ViewError):
    """This publisher's lease was taken over (it was presumed dead) or the view moved on."""


class NotCertified(ViewError):
    """The ranking could not be certified: nothing was published (unless allowed: `allow_uncertified`)."""


# --- results ------------------------------------------------------------------------------


class ViewRow(NamedTuple):
    rank: int
    post_id: str
    counts: Counts

    def to_json(self) -> dict:
        return {"rank": self.rank, "post_id": self.post_id, **self.counts._asdict()}


@dataclass(frozen=True)
class TopPage:
    view: str
    version: int
    page: int
    page_size: int
    ranked_rows: int  # rows in the whole version (at most K)
    created_at: datetime  # when the version became active
    folded_through: datetime | None  # the newest fold when it was ranked: the ranking's age
    rows: list[ViewRow]
    certified: bool | None = None  # the ranking was certified when published; None: not recorded (older versions)
    bound: float | None = None  # the most a post left out may score; None: every post considered, or not recorded

    @property
    def pages(self) -> int:
        return -(-self.ranked_rows // self.page_size)


@dataclass(frozen=True)
class ViewVersion:
    view: str
    version: int  # the active version after the call
    previous_version: int | None
    published: bool  # False: the ranking was unchanged, no version was published
    ranked_rows: int  # rows in the new version (K, or fewer posts)
    rows_written: int  # rows of the new version that are not shared with the previous one
    rows_retired: int  # rows of the previous version not in the new one
    rows_repaired: int  # extra writes undoing a crashed publisher's leftovers
    full_rewrite_rows: int  # what writing the whole version would have cost: ranked_rows
    transactions: int  # read-write transactions committed, lease and switch included
    versions_expired: int
    rows_deleted: int
    seconds: float
    certified: bool = True  # the active version's ranking was certified when ranked
    bound: float | None = None  # the most a post left out of it may score; None: every post considered


Ranked = tuple[str, Counts]  # one rank's content: (post_id, its counts)


class StoredRow(NamedTuple):
    rank: int
    valid_since: int
    invalid_since: int | None
    post_id: str
    counts: Counts

    @property
    def content(self) -> Ranked:
        return (self.post_id, self.counts)


# --- planning: a pure function of the stored rows and the new ranking ----------------------


@dataclass
class Plan:
    upserts: list[tuple]  # full VIEW_ROW_COLUMNS rows
    updates: list[tuple]  # VIEW_RETIRE_COLUMNS rows: retirements and undone retirements
    deletes: list[tuple]  # (ViewName, Rank, ValidSince) keys of a crashed publisher's rows
    rows_written: int = 0
    rows_retired: int = 0
    rows_repaired: int = 0

    def operations(self) -> list[tuple[str, tuple]]:
        return (
            [("upsert", r) for r in self.upserts]
            + [("update", r) for r in self.updates]
            + [("delete", k) for k in self.deletes]
        )


def plan_version(view: str, stored: Iterable[StoredRow], ranking: list[Ranked], base: int, new: int) -> Plan:
    """The writes that turn the rows valid at version `base` into version `new`.

    `ranking` is the new version's (post_id, counts), best first. `stored` holds
    the rows valid at `base` (InvalidSince NULL, or `new` if a crashed publisher already
    retired them) and rows with ValidSince = `new` that such a publisher left.
    """
    live: dict[int, StoredRow] = {}
    leftover: dict[int, StoredRow] = {}
    for row in stored:
        if row.valid_since == new:
            leftover[row.rank] = row
        elif row.valid_since <= base and (row.invalid_since is None or row.invalid_since > base):
            live[row.rank] = row
    wanted = {rank: (post_id, counts) for rank, (post_id, counts) in enumerate(ranking, 1)}
    plan = Plan([], [], [])
    for rank in sorted(set(live) | set(leftover) | set(wanted)):
        want, old, left = wanted.get(rank), live.get(rank), leftover.get(rank)
        if old is not None and old.content == want:
            if old.invalid_since is not None:  # retired by a crashed attempt: undo
                plan.updates.append((view, rank, old.valid_since, None))
                plan.rows_repaired += 1
            if left is not None:
                plan.deletes.append((view, rank, left.valid_since))
                plan.rows_repaired += 1
            continue
        if old is not None:
            plan.rows_retired += 1
            if old.invalid_since != new:
                plan.updates.append((view, rank, old.valid_since, new))
        if want is not None:
            plan.rows_written += 1
            if left is None or left.content != want or left.invalid_since is not None:
                plan.upserts.append((view, rank, new, None, want[0], *want[1]))
        elif left is not None:
            plan.deletes.append((view, rank, left.valid_since))
            plan.rows_repaired += 1
    return plan


# --- publishing ---------------------------------------------------------------------------


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _read_active(transaction, view: str) -> tuple | None:
    rows = list(transaction.read(VIEW_ACTIVE, columns=VIEW_ACTIVE_COLUMNS, keyset=spanner.KeySet(keys=[[view]])))
    return tuple(rows[0]) if rows else None


def _acquire(database, view: str, owner: str, lease_s: float, clock: Clock) -> tuple[int, int]:
    """Claims the view for `owner`; returns (active version or 0, the version to publish)."""

    def work(transaction) -> tuple[int, int]:
        now = clock()
        row = _read_active(transaction, view)
        if row is None:
            transaction.insert(
                VIEW_ACTIVE,
                columns=VIEW_ACTIVE_COLUMNS,
                values=[(view, None, 0, 1, owner, now + timedelta(seconds=lease_s))],
            )
            return 0, 1
        _, active, _, pending, pending_owner, pending_until = row
        if pending_owner is not None and pending_owner != owner and pending_until is not None and pending_until > now:
            raise PublishInProgress(
                f"view {view}: version {pending} is being published by {pending_owner} "
                f"(lease until {pending_until.isoformat()})"
            )
        base = active or 0
        transaction.update(
            VIEW_ACTIVE, columns=VIEW_LEASE_COLUMNS, values=[(view, base + 1, owner, now + timedelta(seconds=lease_s))]
        )
        return base, base + 1

    return run_with_retries(lambda: run_transaction(database, work))


def _check_lease(transaction, view: str, owner: str, base: int, new: int) -> None:
    row = _read_active(transaction, view)
    if row is None or (row[1] or 0) != base or row[3] != new or row[4] != owner:
        raise LeaseLost(f"view {view}: the lease on version {new} is no longer held by {owner}")


def _release(database, view: str, owner: str) -> None:
    """Best effort, after a failure: lets the next publisher start without waiting for the lease."""

    def work(transaction) -> None:
        row = _read_active(transaction, view)
        if row is not None and row[4] == owner:
            transaction.update(VIEW_ACTIVE, columns=VIEW_LEASE_COLUMNS, values=[(view, None, None, None)])

    try:
        run_with_retries(lambda: run_transaction(database, work))
    except Exception:  # noqa: BLE001 - the lease expires on its own
        pass


def _param_types(params: dict) -> dict:
    types = {}
    for name, value in params.items():
        types[name] = param_types.STRING if isinstance(value, str) else param_types.INT64
    return types


def _query(snapshot, sql: str, **params):
    return snapshot.execute_sql(sql, params=params, param_types=_param_types(params))


class Ranking(NamedTuple):
    """What a publication publishes: the ranking, its age and whether it is certified."""

    rows: list[Ranked]
    folded_through: datetime | None
    certified: bool
    bound: float | None


def _rank(database, k: int, by: str) -> Ranking:
    page = rankings.RANKINGS[by].read(database, k)
    return Ranking(
        [(post.totals.post_id, post.totals.counts) for post in page.ranked],
        page.folded_through,
        page.exact,
        None if page.bound is None else float(page.bound),
    )


def _certified(database, view: str, version: int) -> bool | None:
    """Whether a published version's ranking was certified; None: not recorded, or no such version."""
    with database.snapshot() as snapshot:
        rows = list(snapshot.read(VIEW_VERSIONS, columns=("Certified",), keyset=spanner.KeySet(keys=[[view, version]])))
    return rows[0][0] if rows else None


def _stored_rows(database, view: str, base: int) -> list[StoredRow]:
    with database.snapshot() as snapshot:
        return [
            StoredRow._make([*row[:4], counts_at(row, 4)])
            for row in _query(snapshot, STORED_ROWS_SQL, view=view, base=base)
        ]


def _write_batch(
    transaction,
    view: str,
    owner: str,
    base: int,
    new: int,
    lease_s: float,
    operations: list[tuple[str, tuple]],
    clock: Clock,
) -> None:
    _check_lease(transaction, view, owner, base, new)
    upserts = [values for kind, values in operations if kind == "upsert"]
    updates = [values for kind, values in operations if kind == "update"]
    deletes = [list(key) for kind, key in operations if kind == "delete"]
    if upserts:
        transaction.insert_or_update(VIEW_ROWS, columns=VIEW_ROW_COLUMNS, values=upserts)
    if updates:
        transaction.update(VIEW_ROWS, columns=VIEW_RETIRE_COLUMNS, values=updates)
    if deletes:
        transaction.delete(VIEW_ROWS, spanner.KeySet(keys=deletes))
    transaction.update(
        VIEW_ACTIVE, columns=("ViewName", "PendingUntil"), values=[(view, clock() + timedelta(seconds=lease_s))]
    )


def _switch(
    transaction,
    view: str,
    owner: str,
    base: int,
    new: int,
    plan: Plan,
    ranking: Ranking,
    keep_versions_for_s: float,
    clock: Clock,
) -> None:
    _check_lease(transaction, view, owner, base, new)
    transaction.update(
        VIEW_ACTIVE,
        columns=("ViewName", "Version", "VersionCreatedAt", "PendingVersion", "PendingOwner", "PendingUntil"),
        values=[(view, new, spanner.COMMIT_TIMESTAMP, None, None, None)],
    )
    transaction.insert_or_update(
        VIEW_VERSIONS,
        columns=VIEW_VERSION_COLUMNS,
        values=[
            (
                view,
                new,
                spanner.COMMIT_TIMESTAMP,
                None,
                len(ranking.rows),
                plan.rows_written,
                plan.rows_retired,
                ranking.folded_through,
                ranking.certified,
                ranking.bound,
            )
        ],
    )
    if base:
        transaction.update(
            VIEW_VERSIONS,
            columns=("ViewName", "Version", "ExpiresAt"),
            values=[(view, base, clock() + timedelta(seconds=keep_versions_for_s))],
        )


def publish_top_view(
    database,
    k: int = DEFAULT_K,
    view: str = DEFAULT_VIEW,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    keep_versions_for_s: float = DEFAULT_KEEP_VERSIONS_S,
    lease_s: float = DEFAULT_LEASE_S,
    progress: Callable[[str, int], None] | None = None,
    clock: Clock = utc_now,
    by: str = UPVOTES,
    allow_uncertified: bool = False,
) -> ViewVersion:
    """Publishes the current top `k` by `by` (one of RANKINGS) as a new version of `view` (see the
    module docstring). Give each ranking a view of its own: DEFAULT_VIEWS names them.

    A ranking that is not certified raises NotCertified and publishes nothing, unless
    `allow_uncertified`: then the version records that it is not, and its pages say so.

    `progress(stage, n)` is called after each committed step: ("lease", new version),
    ("batch", rows written so far), ("switch", new version), ("expire", rows deleted).
    `clock` gives the time leases and expiries are measured by (tests move it).
    """
    if k < 1 or batch_rows < 1:
        raise ValueError("k and batch_rows must be at least 1")
    if by not in RANKINGS:
        raise ValueError(f"a view ranks by one of {', '.join(RANKINGS)}, not {by!r}")
    batch_rows = min(batch_rows, MAX_BATCH_ROWS)
    started = time.monotonic()
    report = progress or (lambda stage, n: None)
    owner = str(uuid.uuid4())
    base, new = _acquire(database, view, owner, lease_s, clock)
    transactions = 1
    report("lease", new)
    try:
        ranking = _rank(database, k, by)
        if not (ranking.certified or allow_uncertified):
            raise NotCertified(
                f"view {view}: the top {k} by {by} is not certified (a post left out may score up to "
                f"{ranking.bound:,.4g}): nothing published. Publish again after the next fold, or pass "
                "--allow-uncertified to publish it marked as not certified"
            )
        plan = plan_version(view, _stored_rows(database, view, base), ranking.rows, base, new)
        operations = plan.operations()
        # Unchanged ranking: nothing to publish (a crashed attempt's leftovers, if any, stay
        # invisible and are reconciled by the next publication, which reuses the number). A
        # ranking certified now whose version was not (or the other way) is a new version.
        changed = plan.rows_written > 0 or plan.rows_retired > 0
        published = changed or base == 0 or _certified(database, view, base) != ranking.certified
        if published:
            for start in range(0, len(operations), batch_rows):
                batch = operations[start : start + batch_rows]
                run_with_retries(
                    lambda: run_transaction(  # called here: `batch` is this batch
                        database, lambda txn: _write_batch(txn, view, owner, base, new, lease_s, batch, clock)
                    )
                )
                transactions += 1
                report("batch", start + len(batch))
            run_with_retries(
                lambda: run_transaction(
                    database,
                    lambda txn: _switch(txn, view, owner, base, new, plan, ranking, keep_versions_for_s, clock),
                )
            )
            transactions += 1
            report("switch", new)
        else:
            _release(database, view, owner)
            transactions += 1
    except Exception:
        _release(database, view, owner)
        raise
    versions_expired, rows_deleted, gc_transactions = expire_versions(database, view, batch_rows, clock)
    report("expire", rows_deleted)
    return ViewVersion(
        view=view,
        version=new if published else base,
        previous_version=base or None,
        published=published,
        ranked_rows=len(ranking.rows),
        rows_written=plan.rows_written if published else 0,
        rows_retired=plan.rows_retired if published else 0,
        rows_repaired=plan.rows_repaired if published else 0,
        full_rewrite_rows=len(ranking.rows),
        transactions=transactions + gc_transactions,
        versions_expired=versions_expired,
        rows_deleted=rows_deleted,
        seconds=round(time.monotonic() - started, 3),
        certified=ranking.certified,
        bound=ranking.bound,
    )


def expire_versions(
    database, view: str = DEFAULT_VIEW, batch_rows: int = DEFAULT_BATCH_ROWS, clock: Clock = utc_now
) -> tuple[int, int, int]:
    """Expires the oldest versions whose ExpiresAt has passed and deletes what only they used.

    Returns (versions newly expired, rows deleted, transactions). Safe to run concurrently
    with readers, publishers and itself: ExpiredThrough only grows, deletes are idempotent.
    """
    batch_rows = min(batch_rows, MAX_BATCH_ROWS)
    now = clock()
    with database.snapshot(multi_use=True) as snapshot:
        active = list(
            snapshot.read(VIEW_ACTIVE, columns=("Version", "ExpiredThrough"), keyset=spanner.KeySet(keys=[[view]]))
        )
        if not active:
            return 0, 0, 0
        expired_through = active[0][1]
        through = expired_through
        for version, expires_at in _query(snapshot, VERSIONS_SQL, view=view):
            if version <= through:
                continue
            if expires_at is None or expires_at > now:
                break
            through = version
    transactions = 0
    if through > expired_through:

        def raise_watermark(transaction) -> int:
            active = _read_active(transaction, view)
            assert active is not None  # seen above, and a view's row is never deleted
            current = active[2]
            if through > current:
                transaction.update(VIEW_ACTIVE, columns=("ViewName", "ExpiredThrough"), values=[(view, through)])
            return max(through, current)

        expired_through = run_with_retries(lambda: run_transaction(database, raise_watermark))
        transactions += 1
    with database.snapshot(multi_use=True) as snapshot:
        old_versions = [
            (view, v)
            for (v,) in _query(
                snapshot,
                "SELECT Version FROM TopPostsVersions WHERE ViewName = @view AND Version <= @through",
                view=view,
                through=expired_through,
            )
        ]
        # A row valid through version InvalidSince - 1 <= expired_through is seen by no live version.
        old_rows = [
            (view, rank, valid_since)
            for rank, valid_since in _query(snapshot, EXPIRED_ROWS_SQL, view=view, through=expired_through + 1)
        ]
    for table, keys in ((VIEW_VERSIONS, old_versions), (VIEW_ROWS, old_rows)):
        for start in range(0, len(keys), batch_rows):
            chunk = [list(key) for key in keys[start : start + batch_rows]]
            run_with_retries(
                lambda: commit_mutations(  # called here: `table` and `chunk` are these
                    database, lambda batch: batch.delete(table, spanner.KeySet(keys=chunk))
                )
            )
            transactions += 1
    return len(old_versions), len(old_rows), transactions


# --- reading ------------------------------------------------------------------------------


def read_top_page(
    database, version: int | None, page: int, page_size: int, view: str = DEFAULT_VIEW, clock: Clock = utc_now
) -> TopPage:
    """Page `page` (from 1) of `version` (None: the active one), read in one snapshot."""
    if page < 1 or page_size < 1:
        raise ValueError("page and page_size must be at least 1")
    with database.snapshot(multi_use=True) as snapshot:
        active = list(
            snapshot.read(VIEW_ACTIVE, columns=("Version", "ExpiredThrough"), keyset=spanner.KeySet(keys=[[view]]))
        )
        if not active or active[0][0] is None:
            raise NoActiveVersion(f"view {view} has no published version yet (run `upvotes publish-top-view`)")
        active_version, expired_through = active[0]
        wanted = active_version if version is None else version
        if wanted > active_version or wanted <= expired_through:
            raise VersionNotAvailable(
                f"view {view} has no version {wanted}: readable versions are {expired_through + 1}..{active_version}"
            )
        meta = list(
            snapshot.read(
                VIEW_VERSIONS,
                columns=("CreatedAt", "ExpiresAt", "RankedRows", "FoldedThrough", "Certified", "Bound"),
                keyset=spanner.KeySet(keys=[[view, wanted]]),
            )
        )
        if not meta:
            raise VersionNotAvailable(f"view {view} has no version {wanted}")
        created_at, expires_at, ranked_rows, folded_through, certified, bound = meta[0]
        if expires_at is not None and expires_at <= clock():
            raise VersionNotAvailable(f"view {view}: version {wanted} expired at {expires_at.isoformat()}")
        first = (page - 1) * page_size + 1
        rows = [
            ViewRow(row[0], row[1], counts_at(row, 2))
            for row in _query(snapshot, PAGE_SQL, view=view, version=wanted, first=first, last=first + page_size - 1)
        ]
    return TopPage(view, wanted, page, page_size, ranked_rows, created_at, folded_through, rows, certified, bound)
