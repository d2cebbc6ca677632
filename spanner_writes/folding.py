"""The fold's Spanner side: its snapshot, its plan, its reads and its compare-and-set transactions.

`transforms.fold_deltas.FoldDeltas` runs one fold run as a Beam pipeline over these pieces:

1. `choose_snapshot`: a strong read fixes the snapshot timestamp S. Spanner guarantees no
   later commit gets a timestamp <= S, so "deltas committed in (watermark, S]" is a fixed set.
2. `plan_fold`: at S, the cursor (spanner_store.delta_commits.fold_cursor): the finished run
   with the largest ChangesThrough C, and the posts it skipped.
3. The candidates, the only posts the run reads:
   - following the log (a cursor exists): the posts of the DeltaCommits rows committed in
     (C, S] (`changed_post_ids`, one key range per shard, read in parallel on Dataflow), plus
     the cursor run's skipped posts. `read_candidates` then point-reads their watermarks at
     S and, as key ranges of the interleaved commit-time index, every delta committed after
     each watermark (a seek: old, folded deltas are never touched). The cost is one row per
     commit since C, one Posts row per changed post and one index entry per unfolded delta:
     it follows the votes, not the catalogue.
   - a full scan (no cursor: a fresh database or one migrated from before the change log;
     or `--full-scan`): `plan_partitions`/`read_partition`, a partitioned read of every
     post's watermark at S (with Data Boost when asked), then the same index ranges.
4. The transform sums them per post (and per event hour) into `PostFold`s.
5. `apply_folds`: the body of a short read-write transaction, many posts each, within a
   mutation budget (`fold_cost`). For each post: if its watermark is still the one the
   snapshot saw, add the sums and set the watermark to S (compare-and-set, so a delta is
   never folded twice). If another fold moved it to W < S in the meantime, the deltas in
   (W, S] are re-read inside the transaction and folded instead; if it is already >= S,
   nothing is done. A watermark never moves backwards and a fold killed between
   transactions is completed by the next run.
   A post with more unfolded event hours than fit the budget (a client's clock can spread
   its votes over any number of hours) is folded alone by `fold_post_in_steps`: its hourly
   rows in bounded steps of whole commits, each moving the post's own hourly watermark
   (HourlyFoldedThrough) compare-and-set, then its counters in one small transaction. Every
   commit stays under the budget whatever one post's deltas look like. A post whose fold
   fails with a non-transient error is skipped: the others are still folded.
   Every transaction that changes a post's hourly rows also writes its HotKey, from all of
   them, and every one that moves its hourly watermark writes HotKeyThrough with it (the
   database's HotKeyCurrent constraint rejects a move without it: that is how a fold of an
   older version, which writes neither, is kept from leaving a key the hot ranking trusts
   behind its rows; it skips the post, and this fold folds it).
6. `record_fold_run`: one FoldRuns row with S, the counts and ChangesThrough = S, and in the
   same commit one FoldRunSkippedPosts row per skipped post.

A run's work is bounded: it takes the change log's commits oldest first until their delta
rows reach its budget (`read_shard_changes`, --max-delta-rows-per-run), and records as its
ChangesThrough C_R the point up to which it took every commit of every shard: S_R, or less
when the budget left commits to the next run. Every read of a run is at S_R, and Spanner keeps
versions for an hour only (a read older than that fails with FAILED_PRECONDITION, which fails
the run: it is never taken for a post that cannot be folded), so the budget keeps a run well
within the hour (docs/how-it-works.md, "The fold").

Why following the log is exact. Claim(R) for a finished run R with ChangesThrough C_R: every
delta committed at or before C_R is folded (inside its post's aggregate), unless its post is
in R's skipped list. Proof, for a delta d of post p committed at t <= C_R, with P the cursor
run R started from (ChangesThrough C):
- t > C: d's commit inserted a DeltaCommits row listing p, in the same commit, so with the
  same timestamp t in (C, C_R] <= S_R; R's snapshot at S_R sees it and R took every commit of
  every shard in (C, C_R], so p is a candidate.
- t <= C: Claim(P) holds (induction on finished runs; a full scan proves it directly, every
  post being a candidate), so d was folded (watermarks never move backwards) or p is in P's
  skipped list, which R adds to its candidates.
A candidate is folded through S_R >= C_R by R (its deltas after its watermark, up to S_R, by the
compare-and-set above, or already by a concurrent fold whose S is later) or listed as skipped.
What this does not depend on: concurrent runs (each run's claim is about itself, and the
cursor is whichever finished run has the largest ChangesThrough: every finished run's claim
holds); killed runs (a run that dies writes no FoldRuns row, so the next run starts from an
older cursor and covers the dead run's range again; its completed transactions are
compare-and-set, so they are not folded twice); late writers (a commit whose timestamp is
after S_R, however late its writer's clock or commit, is after C_R, in the next run's range; one
at or before S_R is visible at S_R). Duplicate DeltaCommits rows (a retried write) only repeat a
candidate. The one requirement is on writers: every commit of PostDeltas rows carries its
DeltaCommits row. Every writer here does (spanner_writes.deltas.write_deltas, moderation); a
writer of an older version (before the log) does not, which is why a database without a
cursor is scanned in full, and why the stream is updated before the first fold (docs/operating.md,
"Migrating a database").
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1.database import BatchSnapshot

from schemas.counters import Counts
from schemas.records import CounterSums
from schemas.voter_sketch import union_of
from spanner_store.database import DEFAULT_RETRY, commit_mutations, read_timestamp, run_transaction, run_with_retries
from spanner_store.delta_commits import FoldCursor, SkippedPost, fold_cursor, read_changes
from spanner_store.hot_keys import hot_keys_of, read_post_hours
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import insert_cost, update_cost
from spanner_store.tables import (
    COMMIT_SHARDS,
    COUNTER_COLUMNS,
    DELTA_COMMIT_SUM_COLUMNS,
    DELTA_SUM_COLUMNS,
    FOLD_RUN_COLUMNS,
    FOLD_RUN_SKIPPED,
    FOLD_RUN_SKIPPED_COLUMNS,
    FOLD_RUNS,
    HOT_KEY,
    HOT_KEY_THROUGH,
    HOURLY,
    HOURLY_WATERMARK,
    HOURLY_WATERMARK_COLUMNS,
    HOURLY_WRITE_COLUMNS,
    POST_FOLD_COLUMNS,
    POSTS,
    VOTERS,
    WATERMARK_COLUMNS,
    PostKey,
    counts_at,
    hour_shard,
    post_key,
    sketch_column,
    sketch_value,
)
from spanner_store.unfolded import READ_CHUNK, hour_sums_of, hourly_watermark, read_unfolded

LOG = logging.getLogger(__name__)
# Per post its Posts row updated (its PostsByUpvotes and PostsByHot entries replaced), and per
# hour a PostHourlyCounts row (and its by-hour index entry): the fold's side of Spanner's 80,000-mutation commit limit, from the
# DDL (spanner_store/mutation_cost.py; a PostHourlyCounts row is new or replaced, the larger).
MUTATIONS_PER_POST = update_cost(POSTS, POST_FOLD_COLUMNS)
MUTATIONS_PER_HOUR = max(insert_cost(HOURLY, HOURLY_WRITE_COLUMNS), update_cost(HOURLY, HOURLY_WRITE_COLUMNS))
# The run's record: its FoldRuns row, and per skipped post a FoldRunSkippedPosts row (no index).
# A run skipping more posts than it may list in that one commit leaves ChangesThrough NULL:
# it vouches for nothing and the next run covers its range again (see the module docstring).
MAX_SKIPPED_LISTED = 1_000


class FoldKey(NamedTuple):
    """A post as one fold run saw it: its key and its watermark at the snapshot."""

    post_hash: int
    post_id: str
    seen_watermark: str  # the post's watermark in the snapshot, as watermark_text() gives it


def watermark_text(timestamp: datetime) -> str:
    """A Spanner timestamp's exact RFC 3339 text. Grouping keys must encode deterministically,
    which datetimes do not; the text keeps the nanoseconds a datetime would drop."""
    if hasattr(timestamp, "rfc3339"):
        return timestamp.rfc3339()
    return timestamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class PostFold:
    """Everything one post gains in this fold: what its unfolded deltas add up to, how many they
    are, and per event hour. The fold's transform sums it delta by delta before it knows the post
    (transforms/fold_deltas.py SumPostDeltas: `empty`, `add`, `merge`), then keys it (`keyed`)."""

    key: FoldKey | None  # None while it is being summed
    counts: Counts
    deltas: int
    hours: dict[datetime, CounterSums]
    voters: bytes | None = None  # union of the deltas' voter sketches

    @classmethod
    def empty(cls) -> PostFold:
        """The sum of no delta, to add to."""
        return cls(None, Counts(), 0, {})

    def add(self, hour: datetime, sums: CounterSums) -> None:
        """Adds one delta of event hour `hour`."""
        self.counts = self.counts.plus(sums.counts)
        self.deltas += 1
        add_hours(self.hours, [(hour, sums)])

    def merge(self, other: PostFold) -> None:
        """Adds another sum of the same post's deltas."""
        self.counts = self.counts.plus(other.counts)
        self.deltas += other.deltas
        add_hours(self.hours, other.hours.items())

    def keyed(self, key: FoldKey) -> PostFold:
        """The sum as the fold of post `key`. Every delta is in one of its hours: the post's
        voters are the hours' union."""
        voters = union_of(sums.voters for sums in self.hours.values())
        return PostFold(key, self.counts, self.deltas, self.hours, voters)


# An unfolded delta as a fold reads it: (CommittedAt, EventHour, its sums).
TimedDelta = tuple[datetime, datetime, CounterSums]


class FoldOutcome(NamedTuple):
    posts_folded: int = 0
    deltas_folded: int = 0
    posts_refolded: int = 0  # watermark moved by a concurrent fold; re-read in the transaction
    posts_already_folded: int = 0
    posts_split: int = 0  # too many hours for one commit: hourly rows folded in several steps
    posts_skipped: int = 0  # failed with a non-transient error, left unfolded for the next run
    # Counted by the read steps as metrics, so only in an outcome read back from them
    # (pipeline.fold.outcome_from_metrics): rows read to find and sum the work (the cursor,
    # DeltaCommits rows, Posts rows, delta index entries), and 1 if the run scanned every post.
    rows_read: int = 0
    full_scans: int = 0

    def plus(self, other: FoldOutcome) -> FoldOutcome:
        return FoldOutcome(*(a + b for a, b in zip(self, other)))


def choose_snapshot(database) -> datetime:
    """The timestamp of a fresh strong read: every delta committed at or before it is visible."""
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))
        return read_timestamp(snapshot)


def add_hours(into: dict[datetime, CounterSums], hours: Iterable[tuple[datetime, CounterSums]]) -> None:
    for hour, sums in hours:
        current = into.get(hour)
        into[hour] = sums if current is None else current.plus(sums)


def key_of(fold: PostFold) -> FoldKey:
    """A keyed fold's key (`PostFold.keyed`): the folds a transaction applies are all keyed."""
    assert fold.key is not None, "an unkeyed PostFold"
    return fold.key


def fold_cost(fold: PostFold) -> int:
    return MUTATIONS_PER_POST + MUTATIONS_PER_HOUR * len(fold.hours)


def apply_folds(transaction, folds: list[PostFold], snapshot_at: datetime) -> FoldOutcome:
    """The body of one fold transaction (see the module docstring, step 4).

    The counters (under FoldedThrough) and the hourly rows (under HourlyFoldedThrough,
    which may be ahead after a split fold, `fold_post_in_steps`) are each compare-and-set
    on their own watermark, and both end at S. The post's HotKey is recomputed whenever its
    hourly rows change, in the same transaction (`_add_to_hourly`), and HotKeyThrough follows
    the hourly watermark (`_key_through`), as the HotKeyCurrent constraint demands of every
    write that moves it. Whatever the watermarks are, the hours written are a subset of the
    fold's own: both watermarks are at or after the one the snapshot saw, so `fold_cost`
    bounds the commit.
    """
    keys = [[key.post_hash, key.post_id] for key in map(key_of, folds)]
    current = {
        (row[0], row[1]): row for row in transaction.read(POSTS, columns=POST_FOLD_COLUMNS, keyset=KeySet(keys=keys))
    }
    outcome = FoldOutcome()
    post_rows, fences, hour_gains = [], {}, {}
    for fold in folds:
        post_hash, post_id, seen = key_of(fold)
        row = current[(post_hash, post_id)]
        counts = counts_at(row, 2)
        watermark, stored_hourly_mark, voters, _, key_through = row[2 + len(COUNTER_COLUMNS) :]
        voters = sketch_value(voters)
        hourly_mark = hourly_watermark(watermark, stored_hourly_mark)
        if watermark >= snapshot_at:
            outcome = outcome.plus(FoldOutcome(posts_already_folded=1))
            continue
        hours_done = hourly_mark >= snapshot_at  # a split fold already folded the hourly rows
        if watermark_text(watermark) == seen and (hours_done or watermark_text(hourly_mark) == seen):
            gain, deltas, gain_voters = fold.counts, fold.deltas, fold.voters
            hours = {} if hours_done else fold.hours
            outcome = outcome.plus(FoldOutcome(posts_folded=1, deltas_folded=deltas))
        else:
            gain, deltas, hours, gain_voters = _refold(
                transaction, post_hash, post_id, watermark, hourly_mark, snapshot_at
            )
            outcome = outcome.plus(
                FoldOutcome(posts_folded=1, deltas_folded=deltas, posts_refolded=int(watermark_text(watermark) != seen))
            )
        row = {
            "PostHash": post_hash,
            "PostId": post_id,
            **dict(zip(COUNTER_COLUMNS, counts.plus(gain))),
            "FoldedThrough": snapshot_at,
        }
        # Each column written costs a mutation: leave out what keeps its value. A NULL hourly
        # watermark means "the same as FoldedThrough", which it stays at S.
        if not (stored_hourly_mark is None and hourly_mark <= snapshot_at):
            row[HOURLY_WATERMARK] = max(hourly_mark, snapshot_at)
        if gain_voters is not None:
            row[VOTERS] = sketch_column(union_of((voters, gain_voters)))
        post_rows.append(row)
        fences[(post_hash, post_id)] = (key_through, max(hourly_mark, snapshot_at))
        for hour, sums in hours.items():
            hour_gains[(post_hash, post_id, hour)] = sums
    new_keys = _add_to_hourly(transaction, hour_gains)
    for row in post_rows:
        post = (row["PostHash"], row["PostId"])
        changed = post in new_keys  # its hourly rows changed: so did its score
        if changed:
            row[HOT_KEY] = new_keys[post]
        stored, hourly_mark = fences[post]
        through = _key_through(stored, hourly_mark, new_keys.get(post), changed)
        if not (stored is None and through is None):  # a NULL that stays NULL is left out
            row[HOT_KEY_THROUGH] = through
    _update_by_columns(transaction, POSTS, post_rows)
    return outcome


def _key_through(
    stored: datetime | None, hourly_mark: datetime, new_key: float | None, rows_changed: bool
) -> datetime | None:
    """A post's HotKeyThrough once a fold transaction leaves its hourly watermark at
    `hourly_mark`: set, the HotKeyCurrent constraint (schemas/posts.sql) holds it to that
    watermark. When the transaction changed the post's hourly rows, the key written is the score
    of all of them (`_add_to_hourly`): fenced at the watermark, unless the database has no
    half-life recorded yet (no key): then NULL, unfenced, for the backfill `upvotes provision`
    runs once it records one. Rows unchanged keep the key as current as it was: fenced if it
    was, NULL (a row not yet backfilled) if not."""
    if rows_changed:
        return None if new_key is None else hourly_mark
    return None if stored is None else hourly_mark


def _update_by_columns(transaction, table: str, rows: list[dict]) -> None:
    """Updates rows given as {column: value}, one mutation per set of columns written."""
    groups: dict[tuple[str, ...], list[tuple]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(tuple(row.values()))
    for columns, values in groups.items():
        transaction.update(table, columns=columns, values=values)


def _add_to_hourly(transaction, hour_gains: dict) -> dict[PostKey, float | None]:
    """Adds {(post hash, post id, hour): CounterSums} to PostHourlyCounts (read, then upsert), and
    returns each of these posts' new HotKey, from all of its hourly rows (schemas/hot_score.py:
    deterministic, so it is the key a read computes from the same rows; None while the database
    has no half-life recorded).

    Every hourly row of the posts is read, not only the hours written: the score is a function of
    all of them. That is one key range per post, its hours, within the post's own split."""
    if not hour_gains:
        return {}
    hours = read_post_hours(transaction, {key[:2] for key in hour_gains})
    rows = []
    for (post_hash, post_id, hour), gain in hour_gains.items():
        total = hours[(post_hash, post_id)].get(hour, CounterSums()).plus(gain)
        hours[(post_hash, post_id)][hour] = total
        rows.append((post_hash, post_id, hour, *total.counts, sketch_column(total.voters), hour_shard(post_hash)))
    transaction.insert_or_update(HOURLY, columns=HOURLY_WRITE_COLUMNS, values=rows)
    return hot_keys_of(transaction, hours)


def _refold(transaction, post_hash: int, post_id: str, after: datetime, hours_after: datetime, through: datetime):
    """Inside the fold transaction: the sums of one post's deltas committed in (after, through],
    and per hour those committed in (hours_after, through] (hours_after >= after)."""
    hours: dict[datetime, CounterSums] = {}
    gain, deltas = Counts(), 0
    sketches = []
    for committed_at, hour, sums in _timed_deltas(
        read_unfolded(transaction, {(post_hash, post_id): after}, DELTA_COMMIT_SUM_COLUMNS, through)
    ):
        if committed_at > hours_after:
            add_hours(hours, [(hour, sums)])
        gain, deltas = gain.plus(sums.counts), deltas + 1
        sketches.append(sums.voters)
    return gain, deltas, hours, union_of(sketches)


def _timed_deltas(rows: Iterable) -> list[TimedDelta]:
    """Rows of DELTA_COMMIT_SUM_COLUMNS as (CommittedAt, EventHour, sums)."""
    return [(row[0], *hour_sums_of(row[1:])) for row in rows]


class HourlyStep(NamedTuple):
    """One bounded step of a split fold: the hourly rows of deltas committed in (after, through]."""

    after: datetime
    through: datetime
    rows: list[TimedDelta]  # those deltas


def plan_hourly_steps(
    rows: Iterable[TimedDelta], after: datetime, snapshot_at: datetime, max_hours: int
) -> list[HourlyStep]:
    """Splits a post's unfolded (CommittedAt, hour, sums) deltas into steps of whole
    commits touching at most `max_hours` event hours each; the last step ends at S.

    A step never splits one commit's deltas (a watermark is a commit timestamp), so a single
    commit with more hours than `max_hours` is a step of its own: at most 5,000 deltas fit
    one commit of the sink (18 mutations each), so such a step stays under 6 x 5,000 hourly
    cells, far below Spanner's limit. Pure: unit-tested without Spanner.
    """
    ordered = sorted(rows, key=lambda row: row[0])
    steps: list[HourlyStep] = []
    start = after
    current: list[TimedDelta] = []
    hours: set[datetime] = set()
    for _committed_at, same_commit in itertools.groupby(ordered, key=lambda row: row[0]):
        group = list(same_commit)
        group_hours = {row[1] for row in group}
        if current and len(hours | group_hours) > max_hours:
            steps.append(HourlyStep(start, current[-1][0], current))
            start, current, hours = current[-1][0], [], set()
        current.extend(group)
        hours |= group_hours
    steps.append(HourlyStep(start, snapshot_at, current))
    return steps


def apply_hourly_step(transaction, post_hash: int, post_id: str, step: HourlyStep) -> int:
    """One split-fold step: adds the deltas committed in (hourly watermark, step.through] to the
    post's hourly rows and moves its hourly watermark to step.through, compare-and-set: a
    watermark already there (a concurrent or earlier fold) makes it a no-op. Returns hours written."""
    rows = list(
        transaction.read(
            POSTS,
            columns=("FoldedThrough", HOURLY_WATERMARK, HOT_KEY, HOT_KEY_THROUGH),
            keyset=spanner.KeySet(keys=[[post_hash, post_id]]),
        )
    )
    folded_through, hourly_mark, hot_key, key_through = rows[0]
    hourly_mark = hourly_watermark(folded_through, hourly_mark)
    if hourly_mark >= step.through:
        return 0
    # The watermark only grows and the previous step left it at step.after or later, so
    # these rows are a subset of the step's own: the commit stays within its bound.
    hours: dict[datetime, CounterSums] = {}
    add_hours(hours, [(hour, sums) for committed_at, hour, sums in step.rows if committed_at > hourly_mark])
    post = (post_hash, post_id)
    new_keys = _add_to_hourly(transaction, {(post_hash, post_id, hour): sums for hour, sums in hours.items()})
    transaction.update(
        POSTS,
        columns=HOURLY_WATERMARK_COLUMNS,
        values=[
            (
                post_hash,
                post_id,
                step.through,
                new_keys.get(post, hot_key),
                _key_through(key_through, step.through, new_keys.get(post), post in new_keys),
            )
        ],
    )
    return len(hours)


def read_post_for_steps(
    database, post_hash: int, post_id: str, snapshot_at: datetime
) -> tuple[datetime, list[TimedDelta]]:
    """At S: the post's hourly watermark and its deltas committed after it (with commit times)."""
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        rows = list(
            snapshot.read(
                POSTS, columns=("FoldedThrough", HOURLY_WATERMARK), keyset=spanner.KeySet(keys=[[post_hash, post_id]])
            )
        )
        after = hourly_watermark(*rows[0])
        return after, _timed_deltas(read_unfolded(snapshot, {(post_hash, post_id): after}, DELTA_COMMIT_SUM_COLUMNS))


def fold_post_in_steps(
    database,
    fold: PostFold,
    snapshot_at: datetime,
    max_mutations: int,
    on_retry: Callable[[Exception], None] | None = None,
) -> FoldOutcome:
    """Folds one post whose unfolded hours do not fit one commit: its hourly rows in bounded
    steps under its hourly watermark (`plan_hourly_steps`, `apply_hourly_step`), then its
    counters in one small transaction (`apply_folds`, which finds the hourly rows done).

    Reads stay exact at every step: totals use FoldedThrough and the hourly reads use
    HourlyFoldedThrough, and each moves in the same transaction as the sums it covers. A
    fold killed between steps leaves the hourly watermark ahead; the next run continues
    from it.
    """
    post_hash, post_id, _ = key_of(fold)
    max_hours = max(1, (max_mutations - MUTATIONS_PER_POST) // MUTATIONS_PER_HOUR)
    after, rows = read_post_for_steps(database, post_hash, post_id, snapshot_at)
    for step in plan_hourly_steps(rows, after, snapshot_at, max_hours):
        run_with_retries(
            lambda: run_transaction(  # called here: `step` is this step's
                database, lambda txn: apply_hourly_step(txn, post_hash, post_id, step)
            ),
            DEFAULT_RETRY,
            on_retry,
        )
    outcome = run_with_retries(
        lambda: run_transaction(database, lambda txn: apply_folds(txn, [fold], snapshot_at)), DEFAULT_RETRY, on_retry
    )
    return outcome.plus(FoldOutcome(posts_split=1))


class FoldPlan(NamedTuple):
    """What one run reads, fixed at its snapshot S (`plan_fold`)."""

    snapshot_at: datetime
    cursor: FoldCursor | None  # the run it starts from; None: no run has a ChangesThrough yet
    full_scan: bool  # read every post (no cursor, or asked for) instead of following the log
    max_delta_rows: int = 1_000_000  # the run's budget: delta rows of the commits it takes (`read_shard_changes`)

    @property
    def candidates_from_skips(self) -> list[str]:
        """The cursor run's skipped posts: candidates whatever the log says."""
        return [] if self.cursor is None else [post.post_id for post in self.cursor.skipped]


def plan_fold(database, snapshot_at: datetime, full_scan: bool, max_delta_rows: int) -> tuple[FoldPlan, int]:
    """The run's plan at S, and the rows read to make it."""
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        cursor = fold_cursor(snapshot)
    rows = 0 if cursor is None else 1 + len(cursor.skipped)
    return FoldPlan(snapshot_at, cursor, full_scan or cursor is None, max_delta_rows), rows


class ShardChanges(NamedTuple):
    """What a run takes from one shard of the change log."""

    post_ids: list[str]  # the posts of the commits taken
    through: datetime  # every commit of the shard at or before this, and after the cursor, was taken


def read_shard_changes(database, plan: FoldPlan, shard: int, count_rows: Callable[[int], None]) -> ShardChanges:
    """One shard's DeltaCommits rows committed in (cursor, S], read at S, oldest first, until their
    delta rows reach the shard's share of the run's budget (whole commit timestamps only; at
    least one). The run then vouches only up to the smallest `through` of its shards, its
    ChangesThrough: the commits of every shard up to it were all taken (module docstring)."""
    assert plan.cursor is not None  # a run without one is a full scan, which reads no shard
    budget = -(-plan.max_delta_rows // COMMIT_SHARDS)
    post_ids: list[str] = []
    taken, through = 0, plan.snapshot_at
    previous = through  # the last commit time taken
    with database.snapshot(read_timestamp=plan.snapshot_at) as snapshot:
        # The Read API yields rows in key order (Shard, CommittedAt, CommitId): oldest first.
        changes = itertools.groupby(
            read_changes(snapshot, plan.cursor.changes_through, shard), key=lambda change: change.committed_at
        )
        for committed_at, same_commit in changes:
            same_time = list(same_commit)
            count_rows(len(same_time))
            rows = sum(change.delta_rows for change in same_time)
            if taken and taken + rows > budget:
                through = previous
                break
            taken += rows
            previous = committed_at
            for change in same_time:
                post_ids.extend(change.post_ids)
    return ShardChanges(post_ids, through)


def _unfolded_of(
    snapshot, watermarks: dict[PostKey, datetime], count_rows: Callable[[int], None]
) -> Iterator[tuple[FoldKey, tuple[datetime, CounterSums]]]:
    """(FoldKey, (hour, sums)) for each delta committed after its post's watermark."""
    for row in read_unfolded(snapshot, watermarks, ("PostHash", "PostId") + DELTA_SUM_COLUMNS):
        count_rows(1)
        h, p = row[:2]
        yield FoldKey(h, p, watermark_text(watermarks[(h, p)])), hour_sums_of(row[2:])


def read_candidates(
    database, post_ids: Iterable[str], snapshot_at: datetime, count_rows: Callable[[int], None]
) -> Iterator[tuple[FoldKey, tuple[datetime, CounterSums]]]:
    """At S, these posts' watermarks (point reads, READ_CHUNK posts per read) and their unfolded deltas."""
    keys = iter(sorted({post_key(p) for p in post_ids}))
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        while chunk := list(itertools.islice(keys, READ_CHUNK)):
            watermarks = {
                (h, p): wm
                for h, p, wm in snapshot.read(
                    POSTS, columns=WATERMARK_COLUMNS, keyset=KeySet(keys=[list(k) for k in chunk])
                )
            }
            count_rows(len(watermarks))
            yield from _unfolded_of(snapshot, watermarks, count_rows)


def plan_partitions(database, snapshot_at: datetime, data_boost: bool) -> Iterator[tuple[dict, dict]]:
    """(BatchSnapshot handle, partition) pairs of a partitioned read of every post's watermark at S.
    With `data_boost`, the partitions run on Spanner Data Boost's independent compute instead of
    the instance's nodes, so a full scan does not compete with serving."""
    batch_snapshot = database.batch_snapshot(read_timestamp=snapshot_at)
    handle = batch_snapshot.to_dict()
    for partition in batch_snapshot.generate_read_batches(
        POSTS, columns=WATERMARK_COLUMNS, keyset=spanner.KeySet(all_=True), data_boost_enabled=data_boost
    ):
        yield handle, partition


def read_partition(
    database, handle: dict, partition: dict, snapshot_at: datetime, count_rows: Callable[[int], None]
) -> Iterator[tuple[FoldKey, tuple[datetime, CounterSums]]]:
    """One partition of Posts -> (FoldKey, (hour, sums)) for each unfolded delta,
    read as index ranges, READ_CHUNK posts per read, at exactly the same snapshot S."""
    # One iterator for the whole partition: every iter() of the client's result set starts
    # over and drops the rows the previous one had buffered.
    posts = iter(BatchSnapshot.from_dict(database, handle).process_read_batch(partition))
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        while chunk := {(h, p): wm for h, p, wm in itertools.islice(posts, READ_CHUNK)}:
            count_rows(len(chunk))
            yield from _unfolded_of(snapshot, chunk, count_rows)


# How long Spanner keeps old versions (the database's version_retention_period, 1 hour by
# default): every read a run makes is at its snapshot S, so a run must end within it.
VERSION_RETENTION = timedelta(hours=1)


def outlived_snapshot(error: Exception, snapshot_at: datetime, now: datetime | None = None) -> bool:
    """Whether `error` is Spanner rejecting a read at S because versions that old are gone:
    FAILED_PRECONDITION, saying so ("maximum timestamp staleness" on the emulator) or with S
    older than the default retention (Spanner's wording may change; the emulator also uses
    FAILED_PRECONDITION for values it cannot store, which are a post's own problem)."""
    if not isinstance(error, exceptions.FailedPrecondition):
        return False
    now = now or datetime.now(timezone.utc)
    return "staleness" in str(error).lower() or now - snapshot_at >= VERSION_RETENTION


def oldest_unfolded_commit(
    database, plan: FoldPlan, skipped: list[SkippedPost], changes_through: datetime | None
) -> tuple[datetime | None, datetime | None]:
    """After a run, in a strong read: the commit time of the oldest delta the run left unfolded,
    and the read's time. That is the oldest unfolded delta of its skipped posts, or the first
    commit past its ChangesThrough when its budget left commits to the next run (an upper bound
    on the age: that commit's posts may have been folded with others). (None, None) when the run
    left nothing behind."""
    cut_short = changes_through is not None and changes_through < plan.snapshot_at
    if not skipped and not cut_short:
        return None, None
    keys = sorted({(post.post_hash, post.post_id) for post in skipped})
    with database.snapshot(multi_use=True) as snapshot:
        watermarks = {
            (h, p): wm
            for h, p, wm in snapshot.read(POSTS, columns=WATERMARK_COLUMNS, keyset=KeySet(keys=[list(k) for k in keys]))
        }
        commits = [committed_at for (committed_at,) in read_unfolded(snapshot, watermarks, ("CommittedAt",))]
        if cut_short:
            assert changes_through is not None  # cut_short says so
            commits += [
                change.committed_at
                for shard in range(COMMIT_SHARDS)
                for change in itertools.islice(read_changes(snapshot, changes_through, shard), 1)
            ]
        return min(commits, default=None), read_timestamp(snapshot)


def record_fold_run(
    database,
    plan: FoldPlan,
    outcome: FoldOutcome,
    skipped: list[SkippedPost],
    handle: dict | None,
    changes_through: datetime | None = None,
) -> None:
    """Writes the FoldRuns row and its skipped posts in one commit, then ends the partitioned read's
    session. ChangesThrough is S, or less when the run's budget left commits to the next run
    (`changes_through`, the smallest of its shards'). A run with more skipped posts than
    MAX_SKIPPED_LISTED records ChangesThrough NULL and lists none: it is not a cursor, so the
    next run covers its range again."""
    fold_id = str(uuid.uuid4())
    listed = sorted({(p.post_hash, p.post_id): p for p in skipped}.values())
    vouches = len(listed) <= MAX_SKIPPED_LISTED
    if not vouches:
        LOG.error(
            "%d posts skipped, more than the %d a run lists: this run is not a cursor, the next "
            "one reads its range again",
            len(listed),
            MAX_SKIPPED_LISTED,
        )
    through = plan.snapshot_at if changes_through is None else min(changes_through, plan.snapshot_at)
    row = (
        fold_id,
        plan.snapshot_at,
        outcome.posts_folded,
        outcome.deltas_folded,
        spanner.COMMIT_TIMESTAMP,
        outcome.posts_skipped,
        through if vouches else None,
    )
    skipped_rows = [(fold_id, p.post_hash, p.post_id, p.error[:1024]) for p in listed] if vouches else []

    def write(batch) -> None:
        batch.insert(FOLD_RUNS, columns=FOLD_RUN_COLUMNS, values=[row])
        if skipped_rows:
            batch.insert(FOLD_RUN_SKIPPED, columns=FOLD_RUN_SKIPPED_COLUMNS, values=skipped_rows)

    try:
        run_with_retries(lambda: commit_mutations(database, write))
    except exceptions.AlreadyExists:
        # A retry of a commit that succeeded unseen (the ambiguous commit real Spanner can give):
        # the row of this fold_id is there, written once.
        pass
    if handle is not None:
        BatchSnapshot.from_dict(database, handle).close()
