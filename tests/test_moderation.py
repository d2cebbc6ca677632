"""Moderation on the emulator: `upvotes adjust` and `upvotes reset` keep exact counts, hourly
counts and the fold consistent, including a reset racing the streaming sink and a fold."""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

from google.cloud import spanner

from schemas.counters import Counts, total
from schemas.records import PostDelta
from spanner_reads.hourly import hourly_counts
from spanner_reads.reads import exact_counts
from spanner_store.database import run_with_retries
from spanner_store.tables import DELTAS, POSTS, post_key
from spanner_writes.deltas import write_deltas, write_new_deltas
from tests.support.fold_runs import run_fold as fold
from upvotes.cli import main
from upvotes.operations.moderation import current_hour

H1 = 1_795_312_800
H2 = H1 + 3600
DAY = datetime.fromtimestamp(H1 - 86_400, tz=timezone.utc)
RACE_DEADLINE_S = 120


def cli(stack, capsys, *args: str) -> list[dict]:
    assert main([args[0], "--project", stack.project, "--instance", stack.instance, "--database", stack.database,
                 *args[1:]]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def exact(database, post_id: str) -> tuple[int, int]:
    counts = exact_counts(database, [post_id])[0].counts
    return counts.upvotes, counts.shares


def folded(database, post_id: str) -> tuple[int, int]:
    with database.snapshot() as snapshot:
        rows = list(snapshot.read(POSTS, columns=("Upvotes", "Shares"), keyset=spanner.KeySet(keys=[list(post_key(post_id))])))
    return tuple(rows[0])


def hourly_total(database, post_id: str) -> tuple[int, int]:
    hours = hourly_counts(database, post_id, DAY)
    return sum(h.counts.upvotes for h in hours), sum(h.counts.shares for h in hours)


def test_adjust_is_audited_idempotent_per_id_and_survives_a_fold(stack, database, capsys) -> None:
    write_deltas(database, [PostDelta.of("brigaded", H1, "w:1:0", upvotes=500, shares=20, events=520)])
    (first,) = cli(stack, capsys, "adjust", "brigaded", "--upvotes", "-300", "--shares", "-5",
                   "--reason", "brigade from one ASN", "--id", "mod-1", "--actor", "alice")
    assert first["written_now"] and (first["kind"], first["upvotes"], first["shares"]) == ("adjust", -300, -5)
    assert exact(database, "brigaded") == (200, 15)
    hour_now = [h for h in hourly_counts(database, "brigaded", DAY) if h.hour == current_hour()]
    assert [(h.counts.upvotes, h.counts.shares) for h in hour_now] == [(-300, -5)]

    (again,) = cli(stack, capsys, "adjust", "brigaded", "--upvotes", "-300", "--shares", "-5",
                   "--reason", "brigade from one ASN", "--id", "mod-1", "--actor", "alice")
    assert not again["written_now"] and again["created_at"] == first["created_at"]
    assert exact(database, "brigaded") == (200, 15)  # the retry wrote nothing

    fold(stack)
    assert exact(database, "brigaded") == folded(database, "brigaded") == hourly_total(database, "brigaded") == (200, 15)
    listed = cli(stack, capsys, "adjust", "--list")
    assert {(a["adjustment_id"], a["actor"], a["reason"]) for a in listed} >= {("mod-1", "alice", "brigade from one ASN")}


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
        stack, database, capsys) -> None:
    post, stop, errors = "raced", threading.Event(), []

    def sink() -> None:  # the streaming sink's write path, one pane per commit
        try:
            for i in range(10_000):
                if stop.is_set():
                    return
                delta = PostDelta.of(post, H1 + 3600 * (i % 2), f"race:{i}:0", upvotes=1 + i % 3, shares=i % 2, events=1)
                run_with_retries(lambda d=delta: write_new_deltas(database, [d]))
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
        rows = list(snapshot.read(DELTAS, columns=("DeltaId", "Upvotes", "Shares", "CommittedAt"),
                                  keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=list(post_key(post)),
                                                                                 end_closed=list(post_key(post)))])))
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
    hours = [HourCount(start + timedelta(hours=i), Counts(upvotes=-(i + 1), shares=-i % 3))
             for i in range(MAX_HOUR_ROWS + 500)]
    rows = bounded_hours(hours)
    assert len(rows) == MAX_HOUR_ROWS
    assert total(h.counts for h in rows) == total(h.counts for h in hours)
    assert rows[1:] == hours[-(MAX_HOUR_ROWS - 1):]  # the newest hours keep their own row
    assert bounded_hours(hours[:10]) == hours[:10]
