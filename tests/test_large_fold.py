"""Posts too large for one commit (issue 15): folded exactly, in bounded commits, with reads
exact at every step, and a post that cannot be folded never blocks the others.

Deltas are written straight with spanner_writes.deltas.write_deltas (the sink's own commit),
in batches under Spanner's limit, so the sizes stay affordable on a small machine. Every
commit here goes through the suite's mutation meter (tests/conftest.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.cloud import spanner

import schemas
from schemas.counters import Counts, total
from schemas.ddl import check_constraints, schema_model, table_columns
from schemas.records import CounterSums, PostDelta
from schemas.voter_sketch import sketch_of
from spanner_reads.hourly import hourly_counts
from spanner_reads.reads import exact_counts
from spanner_store.database import (
    MUTATION_BUDGET,
    SPANNER_MUTATION_LIMIT,
    commit_mutations,
    open_database,
    run_transaction,
)
from spanner_store.tables import delta_key, post_key
from spanner_writes.deltas import MUTATIONS_PER_DELTA, write_deltas
from spanner_writes.folding import (
    MUTATIONS_PER_HOUR,
    MUTATIONS_PER_POST,
    HourlyStep,
    apply_hourly_step,
    choose_snapshot,
    plan_hourly_steps,
    read_post_for_steps,
)
from tests.support.fold_runs import HOUR_2001, distinct_hour_deltas
from tests.support.fold_runs import run_fold as fold
from tests.support.resources import new_resources
from upvotes.operations.provision import provision_spanner

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Sizes from the costs, as large as each property needs: a post whose hourly rows would take twice
# Spanner's commit limit in one commit, and one with ten commits' worth of delta rows (many read
# chunks). Both were fixed before (20,000 hours, 100,000 deltas), for the same properties.
MANY_HOURS = 2 * SPANNER_MUTATION_LIMIT // MUTATIONS_PER_HOUR
MANY_DELTAS = 10 * (SPANNER_MUTATION_LIMIT // MUTATIONS_PER_DELTA)


def t(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def write_in_batches(database, deltas: list[PostDelta], per_commit: int) -> None:
    for start in range(0, len(deltas), per_commit):
        write_deltas(database, deltas[start : start + per_commit])


def hours_of(database, post_id: str) -> dict[int, Counts]:
    return {int(h.hour.timestamp()): h.counts for h in hourly_counts(database, post_id, EPOCH)}


def expected_hours(deltas: list[PostDelta]) -> dict[int, Counts]:
    hours: dict[int, Counts] = {}
    for d in deltas:
        hours[d.event_hour] = hours.get(d.event_hour, Counts()).plus(d.sums.counts)
    return hours


def totals(database, post_id: str) -> Counts:
    (found,) = exact_counts(database, [post_id])
    return found.counts


# --- planning the steps (pure) --------------------------------------------------------------


def test_steps_keep_whole_commits_bound_their_hours_and_end_at_the_snapshot() -> None:
    one = CounterSums(Counts(upvotes=1))
    rows = [(t(c), t(3600 * h), one) for c, h in [(1, 1), (1, 2), (2, 3), (3, 3), (3, 4), (4, 5), (4, 6), (4, 7)]]
    steps = plan_hourly_steps(reversed(rows), after=t(0), snapshot_at=t(10), max_hours=3)
    assert [(s.after, s.through) for s in steps] == [(t(0), t(2)), (t(2), t(3)), (t(3), t(10))]
    assert [len(s.rows) for s in steps] == [3, 2, 3]
    # One commit with more hours than the bound is a step of its own, never split.
    wide = [(t(1), t(3600 * h), one) for h in range(10)] + [(t(2), t(0), one)]
    assert [len(s.rows) for s in plan_hourly_steps(wide, t(0), t(10), max_hours=3)] == [10, 1]
    assert plan_hourly_steps([], t(0), t(10), 3) == [HourlyStep(t(0), t(10), [])]


def test_the_fold_cost_constants_cover_what_the_ddl_counts() -> None:
    model = schema_model()
    assert MUTATIONS_PER_HOUR >= 5 + sum(len(i.entry) for i in model["PostHourlyCounts"].indexes)
    posts = model["Posts"]
    # An update of every Posts column: 6 cells, and each index entry rewritten plus the old one removed.
    assert MUTATIONS_PER_POST >= 6 + sum(len(i.entry) + 1 for i in posts.indexes)


def test_the_delta_retention_is_the_ddl_row_deletion_policy() -> None:
    assert schemas.delta_retention_days() == 30
    assert any("PostDeltas" in s and "INTERVAL 30 DAY" in s for s in schemas.ddl_statements())


# --- on the emulator --------------------------------------------------------------------------


def test_a_post_with_more_hours_than_one_commit_can_hold_is_folded_exactly_in_bounded_commits(
    stack, database, commit_meter
) -> None:
    deltas = distinct_hour_deltas("clock-many", MANY_HOURS, "a")
    write_in_batches(database, deltas, per_commit=1_000)
    small = [PostDelta.of(f"clock-small-{n}", HOUR_2001, f"s:{n}", upvotes=2, shares=1, events=1) for n in range(5)]
    write_deltas(database, small)
    want = expected_hours(deltas)
    want_totals = total(d.sums.counts for d in deltas)
    assert totals(database, "clock-many") == want_totals and hours_of(database, "clock-many") == want

    commit_meter.reset()
    outcome = fold(stack)
    assert outcome.posts_split == 1 and outcome.posts_skipped == 0
    assert outcome.deltas_folded == MANY_HOURS + len(small) and outcome.posts_folded == 6
    # Their hourly rows in one commit would be twice Spanner's limit; each step is bounded.
    assert 0 < commit_meter.largest <= MUTATION_BUDGET
    assert commit_meter.commits >= MANY_HOURS * MUTATIONS_PER_HOUR // MUTATION_BUDGET + 1

    assert totals(database, "clock-many") == want_totals
    assert hours_of(database, "clock-many") == want
    assert {p: totals(database, p) for p in (d.post_id for d in small)} == {
        d.post_id: Counts(upvotes=2, shares=1) for d in small
    }
    with database.snapshot() as snapshot:
        rows = list(snapshot.execute_sql("SELECT COUNT(*) FROM PostHourlyCounts WHERE PostId = 'clock-many'"))
    assert rows == [[MANY_HOURS]]
    # Nothing left: a second fold folds nothing.
    assert fold(stack).deltas_folded == 0


def test_a_fold_killed_half_way_through_a_large_post_leaves_reads_exact_and_is_completed(stack, database) -> None:
    first = distinct_hour_deltas("killed", 12_000, "k1")
    write_in_batches(database, first, per_commit=1_000)
    snapshot_at = choose_snapshot(database)
    key = post_key("killed")
    after, rows = read_post_for_steps(database, *key, snapshot_at)
    steps = plan_hourly_steps(rows, after, snapshot_at, max_hours=(MUTATION_BUDGET - MUTATIONS_PER_POST) // 5)
    assert len(steps) >= 3
    # The killed fold: its first two steps committed, then nothing.
    for step in steps[:2]:
        run_transaction(database, lambda txn, s=step: apply_hourly_step(txn, *key, s))
    # Its hourly watermark is ahead of the counters' now; both reads stay exact.
    want_totals = total(d.sums.counts for d in first)
    assert totals(database, "killed") == want_totals
    assert hours_of(database, "killed") == expected_hours(first)
    with database.snapshot() as snapshot:
        ((hourly_through, folded_through),) = list(
            snapshot.read(
                "Posts", columns=("HourlyFoldedThrough", "FoldedThrough"), keyset=spanner.KeySet(keys=[list(key)])
            )
        )
    assert hourly_through == steps[1].through and folded_through == EPOCH

    # More votes arrive, then the next fold run completes the post exactly.
    more = distinct_hour_deltas("killed", 12_100, "k2")[11_950:]
    write_deltas(database, more)
    outcome = fold(stack)
    assert outcome.posts_skipped == 0 and outcome.deltas_folded == len(first) + len(more)
    every = first + more
    assert totals(database, "killed") == total(d.sums.counts for d in every)
    assert hours_of(database, "killed") == expected_hours(every)


def test_a_post_with_ten_commits_of_unfolded_deltas_is_folded_exactly(stack, database, commit_meter) -> None:
    deltas = [
        PostDelta.of("hot-many", HOUR_2001 + 3600 * (i % 3), f"h:{i}", upvotes=1, shares=i % 2, events=1)
        for i in range(MANY_DELTAS)
    ]
    # Big commits, each under Spanner's limit whatever the counters cost (about 3/4 of it).
    write_in_batches(database, deltas, per_commit=3 * SPANNER_MUTATION_LIMIT // 4 // MUTATIONS_PER_DELTA)
    commit_meter.reset()
    outcome = fold(stack)
    assert outcome.deltas_folded == MANY_DELTAS and outcome.posts_skipped == 0
    assert commit_meter.largest <= MUTATION_BUDGET
    assert totals(database, "hot-many") == Counts(upvotes=MANY_DELTAS, shares=MANY_DELTAS // 2)
    assert hours_of(database, "hot-many") == expected_hours(deltas)


def test_a_post_that_cannot_be_folded_does_not_stop_the_others(stack, database) -> None:
    # Two deltas at INT64's maximum: their sum cannot be stored, so this post's fold fails
    # with a non-transient error (not a mock: the emulator rejects the value).
    biggest = 2**63 - 1
    write_deltas(database, [PostDelta.of("overflow", HOUR_2001, f"o:{i}", upvotes=biggest, events=1) for i in range(2)])
    others = [PostDelta.of(f"fine-{n}", HOUR_2001, f"f:{n}", upvotes=3, shares=1, events=1) for n in range(20)]
    write_deltas(database, others)

    outcome = fold(stack, posts_per_commit=500)
    assert outcome.posts_skipped == 1
    assert {p: totals(database, p) for p in (d.post_id for d in others)} == {
        d.post_id: Counts(upvotes=3, shares=1) for d in others
    }
    with database.snapshot(multi_use=True) as snapshot:
        folded = dict(snapshot.execute_sql("SELECT PostId, Upvotes FROM Posts WHERE STARTS_WITH(PostId, 'fine-')"))
        skipped_runs = list(snapshot.execute_sql("SELECT PostsSkipped FROM FoldRuns WHERE PostsSkipped > 0"))
        (watermark,) = list(snapshot.execute_sql("SELECT FoldedThrough FROM Posts WHERE PostId = 'overflow'"))
    assert folded == {d.post_id: 3 for d in others}  # folded, not only read exactly
    assert skipped_runs == [[1]]
    assert watermark == [EPOCH]  # the skipped post stays unfolded, its reads exact
    assert totals(database, "overflow") == Counts(upvotes=2 * biggest)


def test_provision_adds_the_new_columns_to_an_existing_database(stack) -> None:
    res = new_resources("old")
    # Without HotKey's fence either: its constraint names HourlyFoldedThrough.
    posts = next(s for s in schemas.ddl_statements() if s.startswith("CREATE TABLE Posts "))
    columns, constraints = table_columns(posts), check_constraints(posts)
    assert columns is not None and constraints is not None
    fence = (columns[1]["HotKeyThrough"], constraints[1]["HotKeyCurrent"])
    old_ddl = [
        s.replace(f" {fence[0]},", "")
        .replace(f" {fence[1]},", "")
        .replace(" HourlyFoldedThrough TIMESTAMP,", "")
        .replace(" PostsSkipped INT64,", "")
        .replace(" Voters BYTES(MAX),", "")
        .replace(", Voters)", ")")
        for s in schemas.ddl_statements()
    ]
    assert old_ddl != schemas.ddl_statements()
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=old_ddl).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    old = PostDelta.of("before-migration", HOUR_2001, "b:1", upvotes=1, events=1)

    def write_old(batch) -> None:
        batch.insert("Posts", columns=("PostHash", "PostId"), values=[post_key(old.post_id)])
        batch.insert(
            "PostDeltas",
            columns=("PostHash", "PostId", "EventHour", "DeltaId", "Upvotes", "Shares", "Events", "CommittedAt"),
            values=[delta_key(old) + (1, 0, 1, spanner.COMMIT_TIMESTAMP)],
        )

    commit_mutations(database, write_old)

    logged: list[str] = []
    provision_spanner(res, False, "unused", logged.append)
    assert "added   column Posts.HourlyFoldedThrough TIMESTAMP" in logged
    assert "added   column FoldRuns.PostsSkipped INT64" in logged
    assert {
        "added   column Posts.Voters BYTES(MAX)",
        "added   column PostDeltas.Voters BYTES(MAX)",
        "added   column PostHourlyCounts.Voters BYTES(MAX)",
        "added   stored column PostDeltasByCommit.Voters",
    } <= set(logged)
    with database.snapshot() as snapshot:
        assert list(snapshot.execute_sql("SELECT HourlyFoldedThrough, Voters FROM Posts")) == [[None, None]]
    # The existing row reads as before (NULL: hourly rows in step with FoldedThrough; no
    # sketch: no voters recorded), and rows with sketches join it.
    assert hourly_counts(database, "before-migration", EPOCH, unique=True)[0][1:] == (Counts(upvotes=1), 0)
    assert exact_counts(database, ["before-migration"], unique=True)[0].unique_voters == 0
    write_deltas(
        database, [PostDelta.of(old.post_id, HOUR_2001, "b:2", upvotes=2, events=2, voters=sketch_of(["u1", "u2"]))]
    )
    assert exact_counts(database, [old.post_id], unique=True)[0][1:] == (Counts(upvotes=3), 2)
    fold(res)
    assert exact_counts(database, [old.post_id], unique=True)[0][1:] == (Counts(upvotes=3), 2)
    assert hourly_counts(database, old.post_id, EPOCH, unique=True)[0][1:] == (Counts(upvotes=3), 2)
    again: list[str] = []
    provision_spanner(res, False, "unused", again.append)
    assert not [line for line in again if line.startswith(("added", "created"))]
