"""The fold following the change log (issue 22), case by case: every run here starts from a
cursor (a previous run's ChangesThrough), reads only the posts of the DeltaCommits rows after it
plus the posts that run skipped, and must stay exact: concurrent runs, a killed run, split
posts, skipped posts, moderation deltas, dead-letter replays and late writers.
(Why it is exact: spanner_writes/folding.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from schemas.counters import Counts
from schemas.records import FailedDelta, PostDelta
from spanner_reads.reads import exact_counts
from spanner_store.delta_commits import fold_cursor, read_changes
from spanner_store.tables import COUNTER_COLUMNS, POSTS, counts_at, post_key
from spanner_writes.deltas import write_deltas
from spanner_writes.folding import FoldOutcome, choose_snapshot
from spanner_writes.sinks import DELTA_ROWS
from tests.support.fold_runs import distinct_hour_deltas, run_fold
from transforms import fold_deltas
from upvotes.operations.dead_letters import DeadLetter, execute_replay, plan_replay
from upvotes.operations.moderation import adjust, current_hour, reset

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800


def gains(deltas: list[PostDelta]) -> dict[str, Counts]:
    total: dict[str, Counts] = {}
    for d in deltas:
        total[d.post_id] = total.get(d.post_id, Counts()).plus(d.sums.counts)
    return total


def folded(database, post_ids) -> dict[str, Counts]:
    keyset = spanner.KeySet(keys=[list(post_key(p)) for p in post_ids])
    with database.snapshot() as snapshot:
        return {
            row[0]: counts_at(row, 1)
            for row in snapshot.read(POSTS, columns=("PostId",) + COUNTER_COLUMNS, keyset=keyset)
        }


def exact(database, post_ids) -> dict[str, Counts]:
    return {t.post_id: t.counts for t in exact_counts(database, post_ids)}


def fold(stack, *args, **kwargs) -> FoldOutcome:
    """One run, which must follow the log (a cursor exists: see the `cursor` fixture)."""
    outcome = run_fold(stack, *args, **kwargs)
    assert outcome.full_scans == 0
    return outcome


@pytest.fixture(scope="module", autouse=True)
def cursor(stack) -> None:
    """The module's first run: no cursor yet, so it scans every post and records one."""
    assert run_fold(stack).full_scans == 1


def test_the_fold_reads_the_changed_posts_not_the_catalogue(stack, database) -> None:
    idle = [PostDelta.of(f"idle-{i}", HOUR, "i:0", upvotes=1, events=1) for i in range(400)]
    write_deltas(database, idle)
    fold(stack)  # 400 posts now sit folded, with nothing new
    changed = [PostDelta.of(f"changed-{i % 5}", HOUR, f"c:{i}", upvotes=1, events=1) for i in range(20)]
    write_deltas(database, changed)
    outcome = fold(stack)
    assert (outcome.posts_folded, outcome.deltas_folded) == (5, 20)
    # The cursor, 1 change row, 5 Posts rows, 20 index entries; none of the 400 idle posts.
    assert outcome.rows_read == 1 + 1 + 5 + 20
    assert fold(stack).rows_read == 1  # nothing changed: the cursor alone


def test_runs_that_overlap_in_time_fold_each_delta_once(stack, database) -> None:
    """Two runs from the same cursor, finishing in the opposite order of their snapshots (the
    later S first): deterministic, and the worst order for a cursor."""
    first = [
        PostDelta.of(f"overlap-{i % 10}", HOUR, f"o1:{i}", upvotes=1 + i % 3, shares=i % 2, events=1) for i in range(40)
    ]
    write_deltas(database, first)
    s1 = choose_snapshot(database)
    second = [PostDelta.of(f"overlap-{i % 10}", HOUR, f"o2:{i}", upvotes=2, shares=1, events=1) for i in range(30)]
    write_deltas(database, second)
    s2 = choose_snapshot(database)
    third = [PostDelta.of(f"overlap-{i % 10}", HOUR, f"o3:{i}", upvotes=5, events=1) for i in range(10)]
    write_deltas(database, third)

    later = fold(stack, s2)
    assert later.deltas_folded == 70
    earlier = fold(stack, s1)  # started from the same cursor: finds every post already past S1
    assert earlier.deltas_folded == 0 and earlier.posts_already_folded == 10
    with database.snapshot(multi_use=True) as snapshot:
        cursor = fold_cursor(snapshot)
        assert cursor is not None and cursor.changes_through == s2  # the larger ChangesThrough stays the cursor
    assert fold(stack).deltas_folded == 10
    want = gains(first + second + third)
    assert folded(database, want) == want == exact(database, want)


def test_a_killed_run_leaves_no_cursor_and_the_next_run_covers_its_range(stack, database, monkeypatch) -> None:
    before = [PostDelta.of(f"killed-{i}", HOUR, f"k1:{i}", upvotes=3, shares=1, events=1) for i in range(30)]
    write_deltas(database, before)
    applied: list[int] = []
    real = fold_deltas.apply_folds

    def dies_after_one_transaction(transaction, folds, snapshot_at):
        if applied:
            raise AssertionError("worker killed")  # not skippable: the run fails, as a killed worker's does
        applied.append(len(folds))
        return real(transaction, folds, snapshot_at)

    monkeypatch.setattr(fold_deltas, "apply_folds", dies_after_one_transaction)
    with database.snapshot(multi_use=True) as snapshot:
        cursor_before = fold_cursor(snapshot)
    with pytest.raises(Exception, match="worker killed"):
        run_fold(stack, posts_per_commit=10)
    monkeypatch.undo()
    assert len(applied) == 1  # one transaction (the posts of one key range) committed
    with database.snapshot(multi_use=True) as snapshot:
        assert fold_cursor(snapshot) == cursor_before  # the dead run recorded nothing
    assert exact(database, gains(before)) == gains(before)  # partly folded is still exact

    after = [PostDelta.of(f"killed-{i}", HOUR, f"k2:{i}", upvotes=1, events=1) for i in range(0, 30, 3)]
    write_deltas(database, after)
    outcome = fold(stack)
    assert outcome.deltas_folded == 30 + 10 - applied[0]  # all but the dead run's committed ones
    want = gains(before + after)
    assert folded(database, want) == want == exact(database, want)


def test_a_split_post_is_found_through_the_log_and_folded_in_bounded_steps(stack, database, commit_meter) -> None:
    deltas = distinct_hour_deltas("split-log", 4_000, "s")
    for start in range(0, len(deltas), 1_000):
        write_deltas(database, deltas[start : start + 1_000])
    commit_meter.reset()
    outcome = fold(stack)
    assert outcome.posts_split == 1 and outcome.deltas_folded == 4_000
    want = gains(deltas)
    assert folded(database, want) == want == exact(database, want)


def test_a_skipped_post_is_folded_by_the_next_run_without_a_new_delta(stack, database, monkeypatch) -> None:
    deltas = [
        PostDelta.of(p, HOUR, f"sk:{p}", upvotes=4, shares=2, events=1) for p in ("skip-me", "skip-not-1", "skip-not-2")
    ]
    write_deltas(database, deltas)
    real = fold_deltas.apply_folds

    def rejects_one_post(transaction, folds, snapshot_at):
        if any(f.key.post_id == "skip-me" for f in folds):
            raise exceptions.InvalidArgument("injected: this post cannot be folded now")
        return real(transaction, folds, snapshot_at)

    monkeypatch.setattr(fold_deltas, "apply_folds", rejects_one_post)
    outcome = fold(stack)
    monkeypatch.undo()
    assert outcome.posts_skipped == 1 and outcome.posts_folded == 2
    with database.snapshot(multi_use=True) as snapshot:
        cursor = fold_cursor(snapshot)
        assert cursor is not None
        assert [p.post_id for p in cursor.skipped] == ["skip-me"] and "injected" in cursor.skipped[0].error
        assert not list(read_changes(snapshot, cursor.changes_through))  # nothing new names it
    assert folded(database, ["skip-me"]) == {"skip-me": Counts()}
    assert exact(database, ["skip-me"]) == {"skip-me": Counts(upvotes=4, shares=2)}

    again = fold(stack)  # from the cursor's skipped list alone
    assert (again.posts_folded, again.deltas_folded, again.posts_skipped) == (1, 1, 0)
    assert folded(database, ["skip-me"]) == {"skip-me": Counts(upvotes=4, shares=2)}
    with database.snapshot(multi_use=True) as snapshot:
        cursor = fold_cursor(snapshot)
        assert cursor is not None and cursor.skipped == ()
    assert fold(stack).deltas_folded == 0


def test_moderation_deltas_are_in_the_log(stack, database) -> None:
    write_deltas(database, [PostDelta.of("moderated", HOUR, "m:0", upvotes=100, shares=10, events=110)])
    fold(stack)
    adjust(database, "mod-log-1", "moderated", Counts(upvotes=-40, shares=-2), "brigade", "alice", current_hour())
    assert fold(stack).deltas_folded == 1
    assert folded(database, ["moderated"]) == {"moderated": Counts(upvotes=60, shares=8)}
    reset(database, "mod-log-2", "moderated", "spam", "bob")
    assert fold(stack).deltas_folded >= 1
    assert folded(database, ["moderated"]) == {"moderated": Counts()} == exact(database, ["moderated"])


def test_a_dead_letter_replay_after_a_fold_is_in_the_log_and_counted_once(stack, database) -> None:
    written = [PostDelta.of("replayed", HOUR, f"r:{i}:0", upvotes=2, events=2) for i in range(3)]
    write_deltas(database, written)
    fold(stack)
    never_written = PostDelta.of("replayed", HOUR, "r:9:0", upvotes=5, shares=1, events=5)
    letters = [
        DeadLetter(
            f"ack-{d.delta_id}",
            f"m-{d.delta_id}",
            *DELTA_ROWS.codec.encode(FailedDelta(d, "spanner_write_failed: test")),
        )
        for d in (written[0], never_written)
    ]  # one already in Spanner, one not
    report, still_held = execute_replay(
        plan_replay(letters, {}),
        lambda sink, failed: sink.replay.write(database, failed),
        lambda correction: None,
        ack=lambda held: None,
    )
    assert (report.replayed["deltas_written"], report.replayed["deltas_already_written"]) == (1, 1)
    assert still_held == []
    assert fold(stack).deltas_folded == 1
    assert folded(database, ["replayed"]) == {"replayed": Counts(upvotes=11, shares=1)} == exact(database, ["replayed"])


def test_a_commit_after_the_snapshot_is_left_to_the_next_run_whatever_its_event_time(stack, database) -> None:
    snapshot_at = choose_snapshot(database)
    # Committed after S (Spanner's commit timestamps are after every earlier snapshot), by a writer
    # whose votes carry an event time weeks old: the log orders by commit, not by event time.
    weeks_ago = int((datetime.now(timezone.utc) - timedelta(days=25)).timestamp()) // 3600 * 3600
    late = [
        PostDelta.of("late-writer", weeks_ago, "late:0", upvotes=7, events=7),
        PostDelta.of("late-writer", HOUR, "late:1", upvotes=1, shares=1, events=1),
    ]
    write_deltas(database, late)
    run = fold(stack, snapshot_at)  # a run whose S was chosen before the late commit
    assert folded(database, ["late-writer"]) == {"late-writer": Counts()}
    assert run.deltas_folded == 0
    assert fold(stack).deltas_folded == 2  # (S, now] of the next run holds it
    assert (
        folded(database, ["late-writer"])
        == {"late-writer": Counts(upvotes=8, shares=1)}
        == exact(database, ["late-writer"])
    )
