"""Moderation on the emulator: `upvotes adjust` and `upvotes reset` keep exact counts, hourly
counts and the fold consistent, including a reset racing the streaming sink and a fold."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud import spanner

from schemas.counters import Counts, total
from schemas.records import PostDelta
from spanner_reads.hourly import hourly_counts
from spanner_reads.reads import exact_counts
from spanner_reads.trending import hot_top
from spanner_store.database import run_with_retries
from spanner_store.tables import DELTAS, HOT_KEY, POSTS, post_key
from spanner_writes.deltas import write_deltas, write_new_deltas
from tests.support.faults import FlakyDatabase
from tests.support.fold_runs import run_fold as fold
from upvotes.cli import main
from upvotes.operations.moderation import MAX_HOUR_ROWS, ResetSnapshotGone, adjustment_of, current_hour, reset

H1 = 1_795_312_800
H2 = H1 + 3600
DAY = datetime.fromtimestamp(H1 - 86_400, tz=timezone.utc)
RACE_DEADLINE_S = 120


def cli(stack, capsys, *args: str) -> list[dict]:
    assert (
        main(
            [args[0], "--project", stack.project, "--instance", stack.instance, "--database", stack.database, *args[1:]]
        )
        == 0
    )
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def exact(database, post_id: str) -> tuple[int, int]:
    counts = exact_counts(database, [post_id])[0].counts
    return counts.upvotes, counts.shares


def folded(database, post_id: str) -> tuple[int, int]:
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.read(POSTS, columns=("Upvotes", "Shares"), keyset=spanner.KeySet(keys=[list(post_key(post_id))]))
        )
    return tuple(rows[0])


def hourly_total(database, post_id: str) -> tuple[int, int]:
    hours = hourly_counts(database, post_id, DAY)
    return sum(h.counts.upvotes for h in hours), sum(h.counts.shares for h in hours)


def test_adjust_is_audited_idempotent_per_id_and_survives_a_fold(stack, database, capsys) -> None:
    write_deltas(database, [PostDelta.of("brigaded", H1, "w:1:0", upvotes=500, shares=20, events=520)])
    (first,) = cli(
        stack,
        capsys,
        "adjust",
        "brigaded",
        "--upvotes",
        "-300",
        "--shares",
        "-5",
        "--reason",
        "brigade from one ASN",
        "--id",
        "mod-1",
        "--actor",
        "alice",
    )
    assert first["written_now"] and (first["kind"], first["upvotes"], first["shares"]) == ("adjust", -300, -5)
    assert exact(database, "brigaded") == (200, 15)
    hour_now = [h for h in hourly_counts(database, "brigaded", DAY) if h.hour == current_hour()]
    assert [(h.counts.upvotes, h.counts.shares) for h in hour_now] == [(-300, -5)]

    (again,) = cli(
        stack,
        capsys,
        "adjust",
        "brigaded",
        "--upvotes",
        "-300",
        "--shares",
        "-5",
        "--reason",
        "brigade from one ASN",
        "--id",
        "mod-1",
        "--actor",
        "alice",
    )
    assert not again["written_now"] and again["created_at"] == first["created_at"]
    assert exact(database, "brigaded") == (200, 15)  # the retry wrote nothing

    fold(stack)
    assert (
        exact(database, "brigaded") == folded(database, "brigaded") == hourly_total(database, "brigaded") == (200, 15)
    )
    listed = cli(stack, capsys, "adjust", "--list")
    assert {(a["adjustment_id"], a["actor"], a["reason"]) for a in listed} >= {
        ("mod-1", "alice", "brigade from one ASN")
    }


def test_reset_zeroes_every_hour_as_of_its_snapshot_and_later_votes_count(stack, database, capsys) -> None:
    write_deltas(database, [PostDelta.of("to-reset", H1, "w:2:0", upvotes=40, shares=4, events=44)])
    fold(stack)  # part of the count folded, part not
    write_deltas(database, [PostDelta.of("to-reset", H2, "w:3:0", upvotes=7, shares=1, events=8)])

    (reset,) = cli(stack, capsys, "reset", "to-reset", "--reason", "spam post", "--id", "reset-1", "--actor", "bob")
    assert (reset["kind"], reset["upvotes"], reset["shares"]) == ("reset", -47, -5) and reset["as_of"]
    assert exact(database, "to-reset") == (0, 0)
    assert [h.counts for h in hourly_counts(database, "to-reset", DAY)] == [Counts(), Counts()]

    write_deltas(database, [PostDelta.of("to-reset", H2, "w:4:0", upvotes=3, events=3)])  # after S: counts
    assert exact(database, "to-reset") == (3, 0)
    fold(stack)
    assert exact(database, "to-reset") == folded(database, "to-reset") == hourly_total(database, "to-reset") == (3, 0)
    (again,) = cli(stack, capsys, "reset", "to-reset", "--reason", "spam post", "--id", "reset-1", "--actor", "bob")
    assert not again["written_now"] and exact(database, "to-reset") == (3, 0)  # a retried reset adds nothing


def test_a_reset_racing_the_streaming_sink_and_a_fold_cancels_exactly_what_was_committed_before_it(
    stack, database, capsys
) -> None:
    post, stop, errors = "raced", threading.Event(), []

    def sink() -> None:  # the streaming sink's write path, one pane per commit
        try:
            for i in range(10_000):
                if stop.is_set():
                    return
                delta = PostDelta.of(
                    post, H1 + 3600 * (i % 2), f"race:{i}:0", upvotes=1 + i % 3, shares=i % 2, events=1
                )
                run_with_retries(lambda: write_new_deltas(database, [delta]))  # called at once
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def folds() -> None:
        try:
            while not stop.is_set():
                fold(stack)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=sink), threading.Thread(target=folds)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + RACE_DEADLINE_S
    while not errors and exact(database, post)[0] < 30 and time.monotonic() < deadline:
        pass  # polling: until the sink has committed some panes
    (reset,) = cli(stack, capsys, "reset", post, "--reason", "race", "--id", "reset-race", "--actor", "ci")
    written_after = exact(database, post)
    while not errors and exact(database, post) == written_after and time.monotonic() < deadline:
        pass  # polling: until the sink commits again after the reset
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)

    # Expected from the raw delta rows: every sink delta committed after S, nothing before.
    as_of = datetime.fromisoformat(reset["as_of"])
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.read(
                DELTAS,
                columns=("DeltaId", "Upvotes", "Shares", "CommittedAt"),
                keyset=spanner.KeySet(
                    ranges=[spanner.KeyRange(start_closed=list(post_key(post)), end_closed=list(post_key(post)))]
                ),
            )
        )
    sink_rows = [r for r in rows if r[0].startswith("race:")]
    before = [r for r in sink_rows if r[3] <= as_of]
    after = [r for r in sink_rows if r[3] > as_of]
    assert before and after  # the reset really landed mid-stream
    assert (-reset["upvotes"], -reset["shares"]) == (sum(r[1] for r in before), sum(r[2] for r in before))
    expected = (sum(r[1] for r in after), sum(r[2] for r in after))
    assert exact(database, post) == hourly_total(database, post) == expected
    fold(stack)
    assert exact(database, post) == folded(database, post) == hourly_total(database, post) == expected


def test_a_reset_of_a_post_with_more_hours_than_one_commit_holds_stays_within_the_budget() -> None:
    from datetime import datetime, timedelta, timezone

    from spanner_reads.hourly import HourCount
    from upvotes.operations.moderation import MAX_HOUR_ROWS, bounded_hours

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    hours = [
        HourCount(start + timedelta(hours=i), Counts(upvotes=-(i + 1), shares=-i % 3))
        for i in range(MAX_HOUR_ROWS + 500)
    ]
    rows = bounded_hours(hours)
    assert len(rows) == MAX_HOUR_ROWS
    assert total(h.counts for h in rows) == total(h.counts for h in hours)
    assert rows[1:] == hours[-(MAX_HOUR_ROWS - 1) :]  # the newest hours keep their own row
    assert bounded_hours(hours[:10]) == hours[:10]


def test_a_split_reset_writes_every_hour_back_in_commits_within_the_limit_each_moving_zero() -> None:
    from spanner_reads.hourly import HourCount
    from upvotes.operations.moderation import bounded_hours, split_reset

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    hours = [HourCount(start + timedelta(hours=i), Counts(upvotes=-(i + 1), downvotes=-(i % 2))) for i in range(25)]
    commits = split_reset(hours, limit=6)
    assert commits[0] == bounded_hours(hours, 6) and [len(c) for c in commits] == [6, 6, 6, 6, 5]
    assert all(total(h.counts for h in commit) == Counts() for commit in commits[1:])  # the total stays at 0
    by_hour: dict[datetime, Counts] = {}
    for h in (h for commit in commits for h in commit):
        by_hour[h.hour] = by_hour.get(h.hour, Counts()).plus(h.counts)
    assert by_hour == {h.hour: h.counts for h in hours}  # every hour, exactly its own
    assert split_reset(hours[:6], limit=6) == [hours[:6]]


def hours_of_votes(post_id: str, hours: int, writer: str) -> list[PostDelta]:
    """One delta per event hour, `hours` of them ending in the current hour, each with upvotes (and
    some downvotes): every hour weighs differently in the hot score."""
    newest = int(current_hour().timestamp())
    return [
        PostDelta.of(
            post_id,
            newest - 3600 * (hours - 1 - i),
            f"{writer}:{i}:0",
            upvotes=1 + i % 3,
            downvotes=i % 2,
            events=1 + i % 3 + i % 2,
        )
        for i in range(hours)
    ]


def write_in_commits(database, deltas: list[PostDelta]) -> None:
    for start in range(0, len(deltas), 500):
        write_deltas(database, deltas[start : start + 500])


def hour_counts(database, post_id: str) -> list[Counts]:
    return [h.counts for h in hourly_counts(database, post_id, datetime(2000, 1, 1, tzinfo=timezone.utc))]


def hot_scores(database) -> dict[str, float]:
    """Every post's hot score, as the hot ranking reads it (the module's few posts are all considered)."""
    return {post.totals.post_id: post.score for post in hot_top(database, 100).posts}


def hot_key(database, post_id: str) -> float | None:
    with database.snapshot() as snapshot:
        return list(snapshot.read(POSTS, columns=(HOT_KEY,), keyset=spanner.KeySet(keys=[list(post_key(post_id))])))[0][
            0
        ]


def adjustment_rows(database, adjustment_id: str) -> int:
    with database.snapshot() as snapshot:
        return list(
            snapshot.execute_sql(
                "SELECT COUNT(*) FROM PostDeltas WHERE DeltaId = @whole OR STARTS_WITH(DeltaId, @part)",
                params={"whole": f"@adjust/{adjustment_id}", "part": f"@adjust/{adjustment_id}/"},
                param_types={"whole": spanner.param_types.STRING, "part": spanner.param_types.STRING},
            )
        )[0][0]


def test_a_reset_of_more_hours_than_one_commit_holds_zeroes_every_hour_and_the_hot_score(
    stack, database, capsys
) -> None:
    """Issue 44, item 9: its oldest hours used to be cancelled together in the oldest hour, leaving the
    total 0 but a small positive hot score (each hour weighs differently) that ranked the post above
    every post at 0 or below. Now every hour reads 0, the hot ranking scores it 0, folded or not."""
    post = "many-hours"
    deltas = hours_of_votes(post, MAX_HOUR_ROWS + 93, "many")
    write_in_commits(database, deltas[:600])
    fold(stack)  # part of the hours folded, part not
    write_in_commits(database, deltas[600:])

    (result,) = cli(stack, capsys, "reset", post, "--reason", "spam post", "--id", "reset-many", "--actor", "bob")
    assert exact(database, post) == (0, 0)
    assert hour_counts(database, post) == [Counts()] * len(deltas)
    assert hot_scores(database)[post] == 0.0
    assert result["written_now"] and result["commits"] == 2
    fold(stack)
    assert hour_counts(database, post) == [Counts()] * len(deltas)
    assert hot_key(database, post) == 0.0 and hot_scores(database)[post] == 0.0


def test_a_reset_crashed_between_its_commits_is_finished_by_a_rerun_moving_nothing_twice(database) -> None:
    """25 hours at 6 rows per commit: the first commit (the audit row, the 5 newest hours and the other
    20 cancelled together in the oldest) and 4 that move those 19 hours' share from the oldest hour
    into their own (zero in total each). The process dies before the third; a vote commits; a rerun
    by ID reads the hours at the reset's snapshot and writes what is missing, nothing twice; a rerun
    of the finished reset reads nothing, however late."""
    post = "crashed-reset"
    deltas = hours_of_votes(post, 25, "crashed")
    write_deltas(database, deltas)
    crashing = FlakyDatabase(
        database, fail_commits={3}, error=lambda message: RuntimeError(f"injected: the process died ({message})")
    )
    with pytest.raises(RuntimeError, match="the process died"):
        reset(crashing, "reset-crash", post, "spam", "bob", max_hour_rows=6)
    assert exact(database, post) == (0, 0)  # each commit keeps the total at 0
    assert adjustment_rows(database, "reset-crash") == 6 + 6

    later = PostDelta.of(post, deltas[3].event_hour, "after:1:0", upvotes=2, events=2)  # committed after S: counts
    write_deltas(database, [later])
    rerun = reset(database, "reset-crash", post, "spam", "bob", max_hour_rows=7)  # the recorded split is kept
    assert (rerun.written, rerun.commits) == (False, 3)
    assert rerun.adjustment == adjustment_of(database, "reset-crash") and rerun.adjustment.split_rows is None
    assert exact(database, post) == (2, 0)
    assert hour_counts(database, post) == [Counts(upvotes=2) if i == 3 else Counts() for i in range(25)]
    assert adjustment_rows(database, "reset-crash") == 6 + 4 * 6 - 1  # the last part moves 4 hours

    a_day_later = FlakyDatabase(
        database, version_retention=timedelta(hours=1), clock=lambda: datetime.now(timezone.utc) + timedelta(days=1)
    )
    again = reset(a_day_later, "reset-crash", post, "spam", "bob", max_hour_rows=6)
    assert (again.written, again.commits, a_day_later.injected.too_old) == (False, 0, 0)
    assert hour_counts(database, post)[3] == Counts(upvotes=2)


def test_a_rerun_of_an_unfinished_reset_after_its_snapshot_is_gone_fails_saying_what_to_do(database) -> None:
    """The hours at S are readable for Spanner's version retention (an hour): a rerun later than that
    cannot know what the remaining commits move, and fails before writing anything instead of
    guessing."""
    post = "late-rerun"
    write_deltas(database, hours_of_votes(post, 12, "late"))
    crashing = FlakyDatabase(
        database, fail_commits={2}, error=lambda message: RuntimeError(f"injected: the process died ({message})")
    )
    with pytest.raises(RuntimeError, match="the process died"):
        reset(crashing, "reset-late", post, "spam", "bob", max_hour_rows=6)
    written = adjustment_rows(database, "reset-late")

    two_hours_later = FlakyDatabase(
        database, version_retention=timedelta(hours=1), clock=lambda: datetime.now(timezone.utc) + timedelta(hours=2)
    )
    with pytest.raises(ResetSnapshotGone, match="run a new reset of the post with another --id"):
        reset(two_hours_later, "reset-late", post, "spam", "bob")
    assert two_hours_later.injected.too_old == 1 and adjustment_rows(database, "reset-late") == written
