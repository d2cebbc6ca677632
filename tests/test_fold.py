"""The fold on the real Spanner emulator: exact, idempotent, safe when concurrent or killed."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import apache_beam as beam
import pytest
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

import schemas
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads.reads import exact_counts
from spanner_store.tables import COUNTER_COLUMNS, counts_at
from spanner_store.unfolded import READ_CHUNK, read_unfolded
from spanner_writes.deltas import write_deltas
from spanner_writes.folding import FoldKey, FoldPlan, PostFold, choose_snapshot, watermark_text
from tests.support.faults import FlakyDatabase, inject
from tests.support.fold_runs import run_fold as fold
from transforms import fold_deltas
from transforms.fold_deltas import _ApplyFoldsFn

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800


def add_deltas(database, prefix: str, posts: int, per_post: int, tag: str) -> dict[str, Counts]:
    """Commits per_post deltas to each post; returns what each post gained."""
    items = [
        PostDelta.of(
            f"{prefix}-{p}", HOUR + 3600 * (i % 2), f"{tag}:{p}:{i}", upvotes=1 + i % 4, shares=i % 2, events=1
        )
        for p in range(posts)
        for i in range(per_post)
    ]
    for start in range(0, len(items), 500):
        write_deltas(database, items[start : start + 500])
    gained: dict[str, Counts] = {}
    for d in items:
        gained[d.post_id] = gained.get(d.post_id, Counts()).plus(d.sums.counts)
    return gained


def posts_rows(database, prefix: str) -> dict[str, tuple[Counts, datetime]]:
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(
            f"SELECT PostId, FoldedThrough, {', '.join(COUNTER_COLUMNS)} FROM Posts WHERE STARTS_WITH(PostId, @prefix)",
            params={"prefix": prefix + "-"},
            param_types={"prefix": param_types.STRING},
        )
        return {r[0]: (counts_at(r, 2), r[1]) for r in rows}


def folded_counts(database, prefix: str) -> dict[str, Counts]:
    return {post: counts for post, (counts, _) in posts_rows(database, prefix).items()}


def expected_from(*gains: dict[str, Counts]) -> dict[str, Counts]:
    total: dict[str, Counts] = {}
    for gain in gains:
        for post, counts in gain.items():
            total[post] = total.get(post, Counts()).plus(counts)
    return total


def exact(database, posts) -> dict[str, Counts]:
    return {t.post_id: t.counts for t in exact_counts(database, posts)}


def test_fold_takes_deltas_up_to_the_snapshot_and_reads_stay_exact(stack, database) -> None:
    before = add_deltas(database, "exact", posts=20, per_post=5, tag="before")
    snapshot_at = choose_snapshot(database)
    after = add_deltas(database, "exact", posts=20, per_post=3, tag="after")

    outcome = fold(stack, snapshot_at)
    assert (outcome.posts_folded, outcome.deltas_folded) == (20, 100)
    rows = posts_rows(database, "exact")
    assert {p: counts for p, (counts, _) in rows.items()} == before  # deltas after S stay unfolded
    assert {wm for *_, wm in rows.values()} == {snapshot_at}
    assert exact(database, before) == expected_from(before, after)  # folded + unfolded

    outcome = fold(stack)
    assert outcome.deltas_folded == 60
    rows = posts_rows(database, "exact")
    assert {p: counts for p, (counts, _) in rows.items()} == expected_from(before, after)
    assert exact(database, before) == expected_from(before, after)


def test_one_run_folds_every_post_however_many_there_are(stack, database) -> None:
    posts = READ_CHUNK * 2 + 100  # more posts than one chunk of the partition reader
    gained = add_deltas(database, "many", posts=posts, per_post=1, tag="m")
    outcome = fold(stack)
    assert outcome.posts_folded >= posts and outcome.deltas_folded >= posts
    assert fold(stack).posts_folded == 0
    assert folded_counts(database, "many") == gained


def test_hourly_rollup_matches_the_folded_deltas(stack, database) -> None:
    gained = add_deltas(database, "hourly", posts=3, per_post=6, tag="h")
    fold(stack)
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.execute_sql(
                f"SELECT PostId, COUNT(*), {', '.join(f'SUM({c})' for c in COUNTER_COLUMNS)} FROM PostHourlyCounts "
                "WHERE STARTS_WITH(PostId, 'hourly-') GROUP BY PostId"
            )
        )
    assert {r[0]: counts_at(r, 2) for r in rows} == gained
    assert {r[1] for r in rows} == {2}  # two event hours per post


def test_a_second_fold_changes_nothing(stack, database) -> None:
    gained = add_deltas(database, "idem", posts=10, per_post=4, tag="i")
    fold(stack)
    first = posts_rows(database, "idem")
    outcome = fold(stack)
    assert outcome.posts_folded == 0 and outcome.deltas_folded == 0
    assert posts_rows(database, "idem") == first
    assert exact(database, gained) == gained


def test_a_fold_killed_between_transactions_is_completed_by_the_next_run(stack, database) -> None:
    gained = add_deltas(database, "killed", posts=30, per_post=2, tag="k")
    snapshot_at = choose_snapshot(database)
    never_folded = watermark_text(datetime(1970, 1, 1, tzinfo=timezone.utc))
    folds = [PostFold(FoldKey(schemas.post_hash(p), p, never_folded), counts, 2, {}) for p, counts in gained.items()]
    # The first transaction (10 posts) commits, then the worker dies: the other 20 are never applied.
    fn = _ApplyFoldsFn(stack.project, stack.instance, stack.database, posts_per_commit=10)
    fn.setup()

    def worker_dies(transaction: int) -> None:
        if transaction == 2:
            raise SystemExit("the worker dies before its second transaction")

    inject(fn, FlakyDatabase(fn._database, before_transaction=worker_dies))
    fn.start_bundle()
    with pytest.raises(SystemExit):
        list(fn.process((0, folds), FoldPlan(snapshot_at, None, False)))
    half = posts_rows(database, "killed")
    assert sum(1 for *_, wm in half.values() if wm == snapshot_at) == 10
    assert exact(database, gained) == gained  # partly folded is still exact

    outcome = fold(stack)
    assert outcome.posts_folded == 20  # the 10 folded through S have no newer deltas
    assert exact(database, gained) == gained
    assert folded_counts(database, "killed") == gained


def fold_runs_since(database, since: datetime) -> list[tuple]:
    """(SnapshotAt, DeltasFolded, ChangesThrough) of the runs finished after `since`."""
    with database.snapshot() as snapshot:
        return [
            tuple(row)
            for row in snapshot.execute_sql(
                "SELECT SnapshotAt, DeltasFolded, ChangesThrough FROM FoldRuns WHERE FinishedAt > @since",
                params={"since": since},
                param_types={"since": param_types.TIMESTAMP},
            )
        ]


def test_two_concurrent_folds_end_as_one_would(stack, database, emulator_env) -> None:
    """What the design guarantees, whatever the two runs' timing: every delta folded by exactly one
    of them, each post's watermark at one of their snapshots, and nothing left for a third run.
    (Which snapshot a post ends at is timing: a post the first run folds before the second run's
    snapshot has nothing left for the second run, and keeps the first run's watermark.)"""
    fold(stack)  # earlier tests' deltas, so that the two runs below see only these
    started = choose_snapshot(database)
    gained = add_deltas(database, "race", posts=200, per_post=3, tag="r")
    argv = [
        sys.executable,
        "-m",
        "pipeline.fold",
        f"--project={stack.project}",
        f"--instance={stack.instance}",
        f"--database={stack.database}",
        "--posts-per-commit=20",
    ]
    env = {**os.environ, **emulator_env}
    folds = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    for process in folds:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err.decode()[-2000:]
    rows = posts_rows(database, "race")
    assert {p: counts for p, (counts, _) in rows.items()} == gained  # no delta folded twice or lost
    runs = fold_runs_since(database, started)
    assert len(runs) == 2 and sum(deltas for _, deltas, _ in runs) == 600  # each delta folded by one run
    assert all(changes_through == snapshot_at for snapshot_at, _, changes_through in runs)
    assert {wm for *_, wm in rows.values()} <= {snapshot_at for snapshot_at, _, _ in runs}
    assert fold(stack).deltas_folded == 0
    assert exact(database, gained) == gained


def test_reads_touch_only_unfolded_deltas_however_many_old_ones_are_kept(stack, database) -> None:
    """Key-range reads of the commit-time index return, and so touch, only unfolded deltas."""
    add_deltas(database, "old", posts=2, per_post=1500, tag="old")
    fold(stack)
    new = add_deltas(database, "old", posts=2, per_post=4, tag="new")
    with database.snapshot(multi_use=True) as snapshot:
        watermarks = {
            (h, p): wm
            for h, p, wm in snapshot.read(
                "Posts",
                columns=("PostHash", "PostId", "FoldedThrough"),
                keyset=spanner.KeySet(keys=[[schemas.post_hash(p), p] for p in new]),
            )
        }
        touched = list(read_unfolded(snapshot, watermarks, ("PostId", "Upvotes")))
    assert len(touched) == 8  # of 3,008 delta rows kept for these posts
    assert exact(database, new) == expected_from(
        new, {p: Counts(upvotes=sum(1 + i % 4 for i in range(1500)), shares=750) for p in new}
    )


def recomputed_from_the_root(pcoll: beam.PCollection, label: str) -> beam.PCollection | None:
    """`pcoll` computed again, as a runner re-evaluating a side input would: its chain of
    single-input steps re-applied from its Impulse under `label`. None for any other PCollection
    (a GroupByKey or a side input on the way: the runner is taken to keep those)."""
    producer = pcoll.producer
    assert producer is not None  # a PCollection of a pipeline
    if isinstance(producer.transform, beam.Impulse):
        return pcoll.pipeline | f"{label}/Impulse" >> beam.Impulse()
    if producer.side_inputs or len(producer.main_inputs) != 1 or not isinstance(producer.transform, beam.ParDo):
        return None
    [source] = producer.main_inputs.values()
    assert isinstance(source, beam.PCollection)  # a ParDo's input
    again = recomputed_from_the_root(source, label)
    return None if again is None else again | f"{label}/{producer.full_label}" >> producer.transform


def test_one_snapshot_for_every_read_apply_and_the_cursor_when_a_runner_reevaluates_side_inputs(
    stack, database, monkeypatch
) -> None:
    """Issue 34, item 6. A runner may evaluate a side input again, and a step that chooses "now"
    then picks a later S. Simulated: each singleton side input of the fold built from its Impulse
    alone is computed again, and a vote on a new post commits before every choice of S. Before
    the fix the reads and applies took S from one such input and the cursor from the plan: the
    folded watermarks differed from the run's SnapshotAt, and a vote committed between the two
    was vouched for by ChangesThrough but never read, so no later run folded it."""
    fold(stack)  # earlier tests' deltas, and a cursor: this run follows the log
    gained = add_deltas(database, "reeval", posts=10, per_post=2, tag="r")
    late: dict[str, Counts] = {}

    def a_vote_then_now(db) -> datetime:
        post = f"reeval-late-{len(late)}"
        late[post] = add_deltas(db, post, posts=1, per_post=1, tag="late")[f"{post}-0"]
        return choose_snapshot(db)

    labels = iter(range(1_000))

    class Reevaluated(beam.pvalue.AsSingleton):
        """AsSingleton as a runner that evaluates the side input again would serve it."""

        def __init__(self, pcoll, *args, **kwargs) -> None:
            again = recomputed_from_the_root(pcoll, f"Reevaluated{next(labels)}")
            super().__init__(pcoll if again is None else again, *args, **kwargs)

    started = choose_snapshot(database)
    with monkeypatch.context() as patch:
        patch.setattr(fold_deltas, "choose_snapshot", a_vote_then_now)
        patch.setattr(beam.pvalue, "AsSingleton", Reevaluated)
        fold(stack)
    assert len(late) >= 2  # S was chosen more than once
    [(snapshot_at, _, changes_through)] = fold_runs_since(database, started)
    assert changes_through == snapshot_at
    assert {wm for _, wm in posts_rows(database, "reeval").values() if wm > started} == {snapshot_at}
    late_posts = {f"{post}-0": counts for post, counts in late.items()}
    fold(stack)  # a run from that cursor: what the first one vouched for, it must have folded
    assert folded_counts(database, "reeval") == expected_from(gained, late_posts)
    assert exact(database, gained | late_posts) == expected_from(gained, late_posts)
