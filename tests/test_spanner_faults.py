"""What the emulator hides, injected: the sink, the fold and the writer claim against a Spanner
that aborts, answers ambiguously, forgets old versions and interleaves (tests/support/faults.py).

Each schedule is drawn from a seed, so a failure names the seed that reproduces it. The
assertions are the guarantees, whatever the schedule: totals are exact, nothing is skipped
without a record, and every ambiguous commit resolves to exactly once.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions
from google.cloud import spanner

from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads.fresh_top import fresh_top
from spanner_store.database import RetryPolicy, commit_mutations, open_database, run_transaction, run_with_retries
from spanner_store.delta_commits import fold_cursor
from spanner_store.tables import (
    COMMIT_SHARDS,
    COUNTER_COLUMNS,
    POST_KEY_COLUMNS,
    POSTS,
    commit_shard,
    counts_at,
    post_key,
)
from spanner_writes import deltas as deltas_module
from spanner_writes.deltas import write_deltas
from spanner_writes.writers import claim_generation
from tests.support.faults import DEFAULT_VERSION_RETENTION, FlakyDatabase, Injected
from tests.support.fold_runs import distinct_hour_deltas, run_fold
from tests.support.resources import new_resources
from transforms import fold_deltas, spanner_sink
from transforms.spanner_sink import WriteDeltaRows
from upvotes.devtools.verification import verify_totals
from upvotes.operations.moderation import adjust, current_hour
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800
SEEDS = range(6)


def schedule(seed: int) -> dict:
    """A random fault schedule: every kind of fault, at rates drawn from the seed."""
    rng = random.Random(seed)
    return {
        "fail_before": rng.uniform(0.05, 0.3),
        "fail_after": rng.uniform(0.05, 0.3),
        "abort_read": rng.uniform(0.05, 0.3),
        "abort_commit": rng.uniform(0.05, 0.3),
        "ambiguous_commit": rng.uniform(0.05, 0.3),
        "seed": seed,
    }


def expected_totals(deltas: list[PostDelta]) -> dict[str, dict[str, int]]:
    totals: dict[str, Counts] = {}
    for d in deltas:
        totals[d.post_id] = totals.get(d.post_id, Counts()).plus(d.sums.counts)
    return {post: counts._asdict() for post, counts in totals.items()}


@pytest.fixture
def misbehaving(monkeypatch):
    """Makes the modules named open FlakyDatabase(real database, **settings); returns the shared
    injection counts. The DirectRunner runs DoFns in this process, and their setup() calls the
    module-global `open_database`, so patching the module is enough (the counts prove it)."""

    def install(modules, **settings) -> Injected:
        injected = Injected()
        opened = []
        for module in modules:
            real_open = module.open_database

            def flaky_open(project, instance, database, real_open=real_open):
                opened.append(1)
                return FlakyDatabase(
                    real_open(project, instance, database),
                    injected=injected,
                    **{**settings, "seed": settings.get("seed", 0) * 100 + len(opened)},
                )

            monkeypatch.setattr(module, "open_database", flaky_open)
        return injected

    return install


@pytest.mark.parametrize("seed", SEEDS)
def test_the_sink_under_a_random_fault_schedule_writes_every_delta_exactly_once(
    stack, database, misbehaving, seed
) -> None:
    rng = random.Random(seed)
    deltas = [
        PostDelta.of(
            f"sink-{seed}-{rng.randrange(9)}",
            HOUR + 3600 * rng.randrange(3),
            f"w{seed}:{i}:0",
            upvotes=rng.randrange(-2, 9),
            shares=rng.randrange(3),
            events=1,
        )
        for i in range(150)
    ]
    settings = schedule(seed)
    injected = misbehaving([spanner_sink], **{**settings, "error": exceptions.DeadlineExceeded})
    pipeline = TestPipeline()
    (
        pipeline
        | beam.Create(deltas, reshuffle=False)
        | WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=10)
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "WriteDeltaRows"
    }

    assert injected.before + injected.after > 0, f"seed {seed}: no fault was injected"
    # An ambiguous commit (DEADLINE_EXCEEDED after success) resolves to exactly once: its rows
    # are found already written on the retry, and nothing is written twice.
    assert counters["rows_written"] + counters.get("rows_already_written", 0) == len(deltas)
    if injected.after:
        assert counters.get("rows_already_written", 0) >= 1
    assert verify_totals(database, expected_totals(deltas)) == [], f"seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
def test_writer_claims_under_aborts_and_ambiguous_commits_never_share_a_generation(stack, seed) -> None:
    """A fresh launch must never get a generation an earlier launch of the name holds, even when
    its claim commits unseen and is retried (it then takes the next one: a gap, never a repeat),
    and even when another launch claims between its attempts."""
    real = open_database(stack.project, stack.instance, stack.database)
    name = f"claims-{seed}"
    claimed: list[int] = []

    def racing_launch(number: int) -> None:
        if number % 3 == 0:  # another launch of the same name, between this one's attempts
            claimed.append(claim_generation(real, name, update=False).generation)

    flaky = FlakyDatabase(real, **schedule(seed), before_transaction=racing_launch)
    for _ in range(8):
        claim = run_with_retries(
            lambda: claim_generation(flaky, name, update=False),
            RetryPolicy(attempts=40, first_delay_s=0.001, max_delay_s=0.01),
        )
        claimed.append(claim.generation)
        kept = run_with_retries(
            lambda: claim_generation(flaky, name, update=True),
            RetryPolicy(attempts=40, first_delay_s=0.001, max_delay_s=0.01),
        )
        assert kept.generation >= claim.generation  # an update keeps the newest generation
    assert flaky.injected.read_aborts + flaky.injected.commit_aborts + flaky.injected.ambiguous > 0
    assert len(claimed) == len(set(claimed)), f"seed {seed}: a generation was handed out twice: {claimed}"


# --- the fold ----------------------------------------------------------------------------------


@pytest.fixture
def fresh(emulator_env):
    """A database of its own, with a first (full-scan) fold run already recorded: a cursor."""
    resources = new_resources("pf")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    database = open_database(resources.project, resources.instance, resources.database)
    assert run_fold(resources).full_scans == 1
    return resources, database


def cursor_of(database):
    with database.snapshot(multi_use=True) as snapshot:
        return fold_cursor(snapshot)


def folded_totals(database, post_ids) -> dict[str, dict[str, int]]:
    keyset = spanner.KeySet(keys=[list(post_key(p)) for p in post_ids])
    with database.snapshot() as snapshot:
        return {
            row[0]: counts_at(row, 1)._asdict()
            for row in snapshot.read(POSTS, columns=("PostId",) + COUNTER_COLUMNS, keyset=keyset)
        }


def ids_in_shard_zero():
    """Commit IDs (new_commit_id) whose DeltaCommits rows all land in shard 0."""
    while True:
        commit_id = str(uuid.uuid4())
        if commit_shard(commit_id) == 0:
            yield commit_id


def test_a_run_takes_commits_up_to_its_budget_and_the_next_runs_take_the_rest(fresh, monkeypatch) -> None:
    """3 commits of 10 delta rows, all in shard 0; a budget of 10 rows per shard lets each run take
    one commit, and vouch (ChangesThrough) only up to it: the next run takes the next commit."""
    resources, database = fresh
    commit_ids = ids_in_shard_zero()
    monkeypatch.setattr(deltas_module, "new_commit_id", lambda: next(commit_ids))
    commits = [
        [
            PostDelta.of(f"budget-{c}-{i}", HOUR, f"b:{c}:{i}", upvotes=1 + i % 3, shares=i % 2, events=1)
            for i in range(10)
        ]
        for c in range(3)
    ]
    for commit in commits:
        write_deltas(database, commit)
    everything = [d for commit in commits for d in commit]
    folded = []
    for _ in range(len(commits) + 1):
        before = cursor_of(database)
        folded.append(run_fold(resources, max_delta_rows=10 * COMMIT_SHARDS).deltas_folded)
        assert verify_totals(database, expected_totals(everything)) == []  # exact at every step
        assert cursor_of(database).changes_through > before.changes_through
    assert folded == [10, 10, 10, 0]
    assert folded_totals(database, expected_totals(everything)) == expected_totals(everything)


CLOCK_OFFSET = [timedelta(0)]  # how far the misbehaving database's clock is ahead
REAL_TO_POST_FOLD = fold_deltas._to_post_fold


def two_hours_pass_before_the_folds(keyed):
    """fold_deltas._to_post_fold, after which the clock is two hours ahead. It runs once every
    candidate is read and summed (a GroupByKey before it) and before any fold is applied. A
    module-level function, so the pipeline pickles it by reference and shares CLOCK_OFFSET."""
    CLOCK_OFFSET[0] = timedelta(hours=2)
    return REAL_TO_POST_FOLD(keyed)


def test_a_run_that_outlives_its_snapshot_fails_instead_of_skipping_a_post(fresh, monkeypatch) -> None:
    """Spanner keeps versions for an hour: a read at the run's snapshot after that is rejected.
    Here the clock jumps two hours between reading the candidates and applying the folds, so
    the split post's second read at S (fold_post_in_steps) is too old. Before, the run took that
    for a post that cannot be folded, skipped it and recorded S as covering everything."""
    resources, database = fresh
    for start in range(0, 4_000, 1_000):
        write_deltas(database, distinct_hour_deltas("outlived", 4_000, "o")[start : start + 1_000])
    others = [PostDelta.of(f"outlived-other-{i}", HOUR, f"oo:{i}", upvotes=2, shares=1, events=1) for i in range(20)]
    write_deltas(database, others)
    cursor_before = cursor_of(database)
    CLOCK_OFFSET[0] = timedelta(0)
    real_open = fold_deltas.open_database
    monkeypatch.setattr(
        fold_deltas,
        "open_database",
        lambda *where: FlakyDatabase(
            real_open(*where),
            version_retention=DEFAULT_VERSION_RETENTION,
            clock=lambda: datetime.now(timezone.utc) + CLOCK_OFFSET[0],
        ),
    )
    monkeypatch.setattr(fold_deltas, "_to_post_fold", two_hours_pass_before_the_folds)
    with pytest.raises(Exception, match="older than Spanner keeps versions"):
        run_fold(resources, posts_per_commit=50)
    monkeypatch.undo()
    assert CLOCK_OFFSET[0] == timedelta(hours=2)  # the jump happened, inside the run
    assert cursor_of(database) == cursor_before  # the failed run vouched for nothing
    outcome = run_fold(resources)
    assert outcome.posts_skipped == 0 and outcome.posts_split == 1
    everything = distinct_hour_deltas("outlived", 4_000, "o") + others
    assert folded_totals(database, expected_totals(everything)) == expected_totals(everything)


def test_a_skipped_post_is_still_ranked_by_the_fresh_top(fresh, monkeypatch) -> None:
    """The skipped post's deltas are older than the run's snapshot, so no candidate row after it
    names the post: before, the fresh top certified a ranking without it."""
    resources, database = fresh
    write_deltas(database, [PostDelta.of(f"ranked-{i}", HOUR, f"r:{i}", upvotes=10 + i, events=1) for i in range(10)])
    write_deltas(database, [PostDelta.of("stuck", HOUR, "s:0", upvotes=1_000, events=1)])
    real_apply = fold_deltas.apply_folds

    def cannot_fold_stuck(transaction, folds, snapshot_at):
        if any(f.key.post_id == "stuck" for f in folds):
            raise ValueError("this post cannot be folded")
        return real_apply(transaction, folds, snapshot_at)

    monkeypatch.setattr(fold_deltas, "apply_folds", cannot_fold_stuck)
    assert run_fold(resources).posts_skipped == 1
    monkeypatch.undo()
    assert [p.post_id for p in cursor_of(database).skipped] == ["stuck"]  # recorded, per post
    top = fresh_top(database, k=3, extra=2)
    assert [p.post_id for p in top.posts] == ["stuck", "ranked-9", "ranked-8"]
    assert top.posts[0].counts.upvotes == 1_000 and top.exact


def test_a_large_moderation_adjustment_is_a_riser_of_the_fresh_top(fresh) -> None:
    resources, database = fresh
    write_deltas(database, [PostDelta.of(f"leader-{i}", HOUR, f"l:{i}", upvotes=10 + i, events=1) for i in range(10)])
    run_fold(resources)
    adjust(database, "boost-1", "boosted", Counts(upvotes=5_000), "restore votes lost upstream", "test", current_hour())
    top = fresh_top(database, k=3, extra=2)
    assert [p.post_id for p in top.posts][:1] == ["boosted"] and top.exact


def test_a_fold_whose_compare_and_set_runs_after_another_whole_fold_and_sink_commits_stays_exact(
    fresh, emulator_env, monkeypatch
) -> None:
    """An order the emulator's one-at-a-time transactions never produce by themselves: fold A
    takes its snapshot and reads, then, before its first compare-and-set, sink commits land, a
    whole fold B runs (another process, a later snapshot) and more sink commits land."""
    resources, database = fresh
    first = [PostDelta.of(f"race-{i}", HOUR, f"a:{i}", upvotes=2, shares=1, events=1) for i in range(30)]
    during = [PostDelta.of(f"race-{i}", HOUR, f"b:{i}", upvotes=1, events=1) for i in range(0, 30, 2)]
    after_b = [PostDelta.of(f"race-{i}", HOUR, f"c:{i}", upvotes=5, events=1) for i in range(0, 30, 3)]
    write_deltas(database, first)
    argv = [
        sys.executable,
        "-m",
        "pipeline.fold",
        f"--project={resources.project}",
        f"--instance={resources.instance}",
        f"--database={resources.database}",
    ]

    def b_runs_between_a_snapshot_and_a_compare_and_set(transaction: int) -> None:
        if transaction == 1:
            write_deltas(database, during)
            done = subprocess.run(argv, env={**os.environ, **emulator_env}, capture_output=True, timeout=300)
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            write_deltas(database, after_b)

    real_open = fold_deltas.open_database
    monkeypatch.setattr(
        fold_deltas,
        "open_database",
        lambda *where: FlakyDatabase(
            real_open(*where), before_transaction=b_runs_between_a_snapshot_and_a_compare_and_set
        ),
    )
    a = run_fold(resources)
    monkeypatch.undo()
    # B folded everything up to its later snapshot: A's compare-and-sets find the posts done.
    assert a.deltas_folded == 0 and a.posts_already_folded == 30
    everything = first + during + after_b
    assert verify_totals(database, expected_totals(everything)) == []
    assert run_fold(resources).deltas_folded == len(after_b)  # only what came after B's snapshot
    assert folded_totals(database, expected_totals(everything)) == expected_totals(everything)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_folds_under_a_random_fault_schedule_stay_exact_and_skip_nothing(fresh, misbehaving, monkeypatch, seed) -> None:
    """Aborted reads and commits, ambiguous commits of the compare-and-set transactions and of the
    FoldRuns record, between sink commits: every run either finishes or fails whole, the totals
    are exact after each, and an ambiguous compare-and-set counts its posts once."""
    resources, database = fresh
    rng = random.Random(seed)
    injected = misbehaving([fold_deltas], **schedule(seed))
    written: list[PostDelta] = []
    for batch in range(3):
        deltas = [
            PostDelta.of(
                f"sched-{seed}-{rng.randrange(25)}",
                HOUR + 3600 * rng.randrange(2),
                f"s{seed}:{batch}:{i}",
                upvotes=rng.randrange(1, 6),
                shares=rng.randrange(2),
                events=1,
            )
            for i in range(60)
        ]
        write_deltas(database, deltas)
        written += deltas
        try:
            outcome = run_fold(resources, posts_per_commit=5)
        except Exception as error:  # noqa: BLE001 - a run failing whole is allowed; its work is redone
            assert "injected" in str(error), error
        else:
            assert outcome.posts_skipped == 0  # no fault here is a post's own: nothing skipped
        assert verify_totals(database, expected_totals(written)) == [], f"seed {seed}"
    assert injected.read_aborts + injected.commit_aborts + injected.ambiguous + injected.after > 0
    monkeypatch.undo()  # the faults end; one clean run folds whatever failed runs left
    run_fold(resources)
    assert folded_totals(database, expected_totals(written)) == expected_totals(written)


# --- a transaction that fails ------------------------------------------------------------------


def test_a_transaction_whose_work_fails_with_an_api_error_is_rolled_back_and_blocks_no_writer(
    emulator_env,
) -> None:
    """The client rolls back a transaction whose work raised, unless the error is an API error (a
    table the schema lacks, as for a sink waiting on `upvotes provision`): that one stays open
    with its locks. On the emulator every other writer then aborts behind it ("aborted due to
    active transaction"), which made a migration test flaky. run_transaction rolls it back, so a
    writer on other sessions (its own client) commits at once, with no retry."""
    resources = new_resources("rb")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    failing = open_database(resources.project, resources.instance, resources.database)
    other = open_database(resources.project, resources.instance, resources.database)

    def read_then_fail(transaction) -> None:
        list(transaction.execute_sql("SELECT COUNT(*) FROM Posts"))  # begins the transaction
        list(transaction.execute_sql("SELECT COUNT(*) FROM NoSuchTable"))

    for _ in range(3):
        with pytest.raises(exceptions.GoogleAPICallError, match="NoSuchTable"):
            run_transaction(failing, read_then_fail)
        post_id = f"rb-{uuid.uuid4()}"
        commit_mutations(other, lambda batch: batch.insert(POSTS, columns=POST_KEY_COLUMNS, values=[post_key(post_id)]))
        assert folded_totals(other, [post_id]) == {post_id: Counts()._asdict()}
