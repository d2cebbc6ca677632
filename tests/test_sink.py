"""WriteDeltaRows against the real Spanner emulator, and its commit planning."""

from __future__ import annotations

import contextlib

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions
from google.cloud import spanner

from schemas.counters import Counts
from schemas.records import FailedDelta, PostDelta, PostTotals
from spanner_reads.reads import exact_counts
from spanner_store.database import SPANNER_MUTATION_LIMIT, is_transient
from spanner_store.tables import delta_key
from spanner_writes.deltas import (
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    KeyConflict,
    mutations_for,
    plan_commits,
    write_deltas,
    write_new_deltas,
)
from tests.support.faults import RETRYABLE_ERRORS, FlakyDatabase, dead_letters, inject
from transforms.spanner_sink import WriteDeltaRows, WriteDeltasFn

HOUR = 1_795_312_800


def deltas(n: int, posts: int, writer: str) -> list[PostDelta]:
    return [
        PostDelta.of(
            f"p-{i % posts}", HOUR + 3600 * (i % 2), f"{writer}:{i}:0", upvotes=1 + i % 3, shares=i % 2, events=1
        )
        for i in range(n)
    ]


def row_count(database, where: str = "") -> int:
    with database.snapshot() as snapshot:
        return list(snapshot.execute_sql(f"SELECT COUNT(*) FROM PostDeltas {where}"))[0][0]


# --- planning: pure --------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,posts,max_rows,max_mutations",
    [
        (0, 1, 10, 1000),
        (1, 1, 10, 1000),
        (2500, 7, 1000, 20_000),
        (2500, 2500, 1000, 20_000),
        (500, 500, 1000, MUTATIONS_PER_COMMIT + MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT),
        (999, 3, 7, 10_000),
    ],
)
def test_plan_commits_keeps_every_delta_once_in_key_order_within_both_limits(n, posts, max_rows, max_mutations) -> None:
    items = deltas(n, posts, "w")
    plan = plan_commits(items, max_rows, max_mutations)
    assert [d for commit in plan for d in commit] == sorted(items, key=delta_key)
    for commit in plan:
        assert 1 <= len(commit) <= max_rows
        assert mutations_for(commit) <= max_mutations
    assert all(mutations_for(c) <= SPANNER_MUTATION_LIMIT for c in plan_commits(deltas(10_000, 10_000, "w"), 100_000))


def test_plan_commits_counts_index_entries_and_parents() -> None:
    # Just enough for 1,000 deltas of one post in one commit.
    budget = 1000 * MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT + MUTATIONS_PER_COMMIT
    one_post = plan_commits(deltas(1000, 1, "w"), max_rows=10_000, max_mutations=budget)
    many_posts = plan_commits(deltas(1000, 1000, "w"), max_rows=10_000, max_mutations=budget)
    assert len(one_post) == 1 and len(many_posts) > 1  # each new parent row and its index entry cost mutations
    with pytest.raises(ValueError):
        plan_commits(deltas(1, 1, "w"), max_rows=10, max_mutations=MUTATIONS_PER_COMMIT + MUTATIONS_PER_DELTA)


# --- writing: on the emulator ------------------------------------------------------------


def write(stack, items: list[PostDelta]) -> None:
    with TestPipeline() as p:
        p | beam.Create(items) | WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=50)


def test_writing_the_same_batch_twice_leaves_one_copy(stack, database) -> None:
    items = deltas(120, 10, "twice")
    write(stack, items)
    write(stack, items)
    assert row_count(database, "WHERE STARTS_WITH(DeltaId, 'twice:')") == 120
    counts = {t.post_id: t.counts.upvotes for t in exact_counts(database, [f"p-{i}" for i in range(10)])}
    assert sum(counts.values()) >= sum(d.sums.counts.upvotes for d in items)


def test_deltas_for_a_post_without_a_posts_row_are_counted(stack, database) -> None:
    items = [PostDelta.of("brand-new-post", HOUR, "new:1:0", upvotes=5, shares=2, events=7)]
    write(stack, items)
    assert exact_counts(database, ["brand-new-post"])[0] == PostTotals("brand-new-post", Counts(upvotes=5, shares=2))


@pytest.mark.parametrize("fail_before,fail_after", [(0.5, 0.0), (0.0, 0.5), (0.3, 0.3)])
def test_injected_aborts_are_retried_and_unseen_successes_are_not_counted_twice(
    stack, database, fail_before, fail_after
) -> None:
    writer = f"flaky{int(fail_before * 10)}{int(fail_after * 10)}"
    items = [PostDelta.of(f"flaky-{writer}-{i % 5}", HOUR, f"{writer}:{i}:0", upvotes=1, events=1) for i in range(200)]
    flaky = FlakyDatabase(database, fail_before=fail_before, fail_after=fail_after, seed=7)
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=20)
    fn.setup()
    inject(fn, flaky)  # the real emulator database, with faults injected around its commits
    fn.start_bundle()
    failed = [out for d in items for out in fn.process(d)] + list(fn.finish_bundle())
    assert failed == []
    assert flaky.injected_before + flaky.injected_after > 0
    totals = exact_counts(database, [f"flaky-{writer}-{i}" for i in range(5)])
    assert [t.counts.upvotes for t in totals] == [40] * 5


def test_rows_that_can_never_be_written_go_to_the_failed_output(stack, database) -> None:
    bad = PostDelta.of("x" * 129, HOUR, "bad:1:0", upvotes=1, events=1)  # longer than the STRING(128) key column
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=1000)
    fn.setup()
    fn.start_bundle()
    outputs = list(fn.process(bad)) + list(fn.finish_bundle())
    assert len(outputs) == 1 and outputs[0].tag == WriteDeltasFn.FAILED
    assert outputs[0].value.value.delta == bad
    assert "spanner_write_failed" in outputs[0].value.value.error


def dead_letters_of_bundle(fn: WriteDeltasFn, items: list[PostDelta]) -> list[FailedDelta]:
    """One bundle through the sink's DoFn; returns what it dead-lettered."""
    fn.start_bundle()
    return dead_letters([out for d in items for out in fn.process(d)] + list(fn.finish_bundle()), fn.FAILED)


@pytest.mark.parametrize("name", RETRYABLE_ERRORS)
def test_an_error_a_retry_fixes_on_one_commit_writes_every_row_and_dead_letters_none(stack, database, name) -> None:
    """RESOURCE_EXHAUSTED (an overloaded Spanner), a reset stream, CANCELLED and a lost session on the
    second of five commits: the commit is retried, nothing goes to the dead letters."""
    writer = f"retried-{name.lower()}"
    items = [PostDelta.of(f"{writer}-{i % 5}", HOUR, f"{writer}:{i}:0", upvotes=1, events=1) for i in range(100)]
    flaky = FlakyDatabase(database, error=RETRYABLE_ERRORS[name], fail_commits={2})
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=20)
    fn.setup()
    inject(fn, flaky)
    assert dead_letters_of_bundle(fn, items) == []
    assert flaky.injected_before == 1
    assert row_count(database, f"WHERE STARTS_WITH(DeltaId, '{writer}:')") == 100
    assert [t.counts.upvotes for t in exact_counts(database, [f"{writer}-{i}" for i in range(5)])] == [20] * 5


def test_a_permanent_error_on_one_commit_dead_letters_that_commit_only(stack, database) -> None:
    writer = "permanent"
    items = [PostDelta.of(f"{writer}-{i % 5}", HOUR, f"{writer}:{i}:0", upvotes=1, events=1) for i in range(100)]
    flaky = FlakyDatabase(database, error=exceptions.InvalidArgument, fail_commits={2})
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=20)
    fn.setup()
    inject(fn, flaky)
    failed = dead_letters_of_bundle(fn, items)
    assert len(failed) == 20 and all(f.error.startswith("spanner_write_failed: 400 injected") for f in failed)
    assert flaky.injected.commits == 5  # not retried
    assert row_count(database, f"WHERE STARTS_WITH(DeltaId, '{writer}:')") == 80
    dead = {f.delta.delta_id for f in failed}
    with database.snapshot() as snapshot:
        stored = {
            row[0]
            for row in snapshot.execute_sql(
                "SELECT DeltaId FROM PostDeltas WHERE STARTS_WITH(DeltaId, @writer)",
                params={"writer": f"{writer}:"},
                param_types={"writer": spanner.param_types.STRING},
            )
        }
    assert not dead & stored and len(dead | stored) == 100


class DuplicateRacing:
    """The real database, where a duplicate execution of the same bundle (Dataflow may run a bundle
    twice at once) commits its own rows right after this sink's existence read: between the read that
    found which keys exist and the write of the others."""

    def __init__(self, database, duplicate_writes: list[PostDelta]) -> None:
        self._database = database
        self._duplicate_writes = duplicate_writes
        self.raced = False

    def __getattr__(self, name):
        return getattr(self._database, name)

    @contextlib.contextmanager
    def snapshot(self, **kwargs):
        with self._database.snapshot(**kwargs) as snapshot:
            yield snapshot
        if not self.raced:
            self.raced = True
            write_deltas(self._database, self._duplicate_writes)


def test_a_duplicate_execution_racing_the_existence_read_is_already_written_not_dead_lettered(stack, database) -> None:
    """Issue 44, item 9: the bundle's first half is written (by a duplicate execution); this
    execution's commit collides, it reads which keys exist, and the duplicate commits the second
    half just then: the second write collides too. Identical rows are success, counted as already
    written, and every vote counts once."""
    writer = "dup-race"
    items = [PostDelta.of(f"{writer}-{i % 4}", HOUR, f"{writer}:{i}:0", upvotes=1, events=1) for i in range(20)]
    write_deltas(database, items[:10])
    racing = DuplicateRacing(database, items[10:])
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=50)
    fn.setup()
    inject(fn, racing)
    assert dead_letters_of_bundle(fn, items) == []
    assert racing.raced and row_count(database, f"WHERE STARTS_WITH(DeltaId, '{writer}:')") == 20
    assert [t.counts.upvotes for t in exact_counts(database, [f"{writer}-{i}" for i in range(4)])] == [5] * 4


def test_a_different_row_under_the_same_key_is_a_conflict_dead_lettered_with_its_reason(stack, database) -> None:
    """A row stored under one of the bundle's keys with other counts is not "already written": the
    bundle's row goes to the dead letters saying so, whether it was there before the first write or
    committed in the race after the existence read; every other row is written or found written."""
    writer = "dup-conflict"
    items = [PostDelta.of(f"{writer}-{i % 4}", HOUR, f"{writer}:{i}:0", upvotes=1, events=1) for i in range(20)]
    stored_before = items[3]._replace(sums=items[3].sums._replace(counts=Counts(upvotes=7)))
    racing_row = items[15]._replace(sums=items[15].sums._replace(counts=Counts(upvotes=9)))
    write_deltas(database, [*items[:3], stored_before, *items[4:10]])
    racing = DuplicateRacing(database, [*items[10:15], racing_row, *items[16:]])
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=50)
    fn.setup()
    inject(fn, racing)
    failed = dead_letters_of_bundle(fn, items)
    assert sorted(f.delta.delta_id for f in failed) == sorted([items[3].delta_id, items[15].delta_id])
    assert all(f.error.startswith("spanner_write_failed: key conflict") for f in failed), failed
    assert row_count(database, f"WHERE STARTS_WITH(DeltaId, '{writer}:')") == 20
    # The stored rows stand: 18 of the bundle's, and the two different ones.
    assert sum(t.counts.upvotes for t in exact_counts(database, [f"{writer}-{i}" for i in range(4)])) == 18 + 7 + 9


def test_a_different_row_written_again_alone_is_a_key_conflict_a_replay_keeps_its_dead_letter_for(database) -> None:
    """What `upvotes dead-letters replay` meets when it writes such a dead letter's row again
    (write_new_deltas on that row alone): an ALREADY_EXISTS that no retry fixes, so the replay counts
    it failed and keeps the letter, instead of taking it for already written; the stored row stands."""
    stored = PostDelta.of("conflicted", HOUR, "conflict:1:0", upvotes=3, events=3)
    write_deltas(database, [stored])
    with pytest.raises(KeyConflict) as raised:
        write_new_deltas(database, [stored._replace(sums=stored.sums._replace(counts=Counts(upvotes=4)))])
    assert isinstance(raised.value, exceptions.AlreadyExists) and not is_transient(raised.value)
    assert raised.value.result == (0, 0) and "key conflict" in str(raised.value)
    assert write_new_deltas(database, [stored]) == (0, 1)  # the same row again: already written
    assert exact_counts(database, ["conflicted"])[0].counts == Counts(upvotes=3)
