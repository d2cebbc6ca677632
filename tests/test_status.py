"""`upvotes status` on the emulators: unfolded deltas before and after a fold, the exit status
as a probe, and the dead-letter backlog by reason."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from google.cloud import pubsub_v1

from schemas.records import PostDelta, Rejected
from spanner_store.deltas import write_deltas
from spanner_store.health import DeltaHealth
from transforms.dead_letter import to_dead_letter
from upvotes.cli import main
from upvotes.status import Thresholds, problems, status_report
from tests.folding import run_fold as fold

HOUR = 1_795_312_800


def status(stack, capsys, *extra: str) -> tuple[int, dict]:
    code = main(["status", "--project", stack.project, "--instance", stack.instance, "--database", stack.database,
                 "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_unfolded_deltas_before_a_fold_none_after_and_exit_3_on_a_stale_fold(stack, database, capsys) -> None:
    deltas = [PostDelta(f"status-{i % 7}", HOUR, f"status-w:{i}:0", 2, 1, 3) for i in range(40)]
    write_deltas(database, deltas)

    code, before = status(stack, capsys)
    assert before["unfolded_deltas"] == 40
    assert before["oldest_unfolded_age_s"] >= 0
    assert before["delta_rows_per_min"] == 4.0 and before["votes_per_min"] == 12.0  # 40 rows, 120 votes, 10 min
    assert before["dead_letter_backlog"] is None and before["retention_days"] == 30
    assert code == 3 and before["problems"]  # never folded, with unfolded deltas

    fold(stack)
    code, after = status(stack, capsys)
    assert (after["unfolded_deltas"], after["oldest_unfolded_age_s"]) == (0, None)
    assert after["last_fold_age_s"] is not None and after["delta_rows_per_min"] == 4.0  # folded, still recent
    assert code == 0 and after["healthy"]

    code, stale = status(stack, capsys, "--max-fold-lag-s", "0.001")
    assert code == 3 and not stale["healthy"]
    assert any("last fold finished" in p for p in stale["problems"])


def test_dead_letters_make_status_unhealthy_and_are_counted_by_reason(stack, capsys) -> None:
    publisher = pubsub_v1.PublisherClient()
    topic = f"projects/{stack.project}/topics/{stack.dead_letter_topic}"
    for data in (b"{not json", b"[1]"):
        reason = "not_json" if data.startswith(b"{") else "not_object"
        message = to_dead_letter(Rejected(data, {}, f"{reason}: test"))
        publisher.publish(topic, message.data, **message.attributes).result(timeout=30)

    code, report = status(stack, capsys, "--dead-letter-topic", stack.dead_letter_topic)
    assert report["dead_letter_backlog"] == {"rejected_vote/not_json": 1, "rejected_vote/not_object": 1}
    assert code == 3
    # Released, not consumed: a second look sees the same backlog.
    assert status(stack, capsys, "--dead-letter-topic", stack.dead_letter_topic)[1]["dead_letter_backlog"] == \
        report["dead_letter_backlog"]


def test_unfolded_deltas_older_than_a_tenth_of_the_retention_cross_a_threshold() -> None:
    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    health = DeltaHealth(read_at=now, posts_with_unfolded_deltas=1, last_fold_snapshot=now - timedelta(seconds=60),
                         unfolded_deltas=1, oldest_unfolded_commit=now - timedelta(days=3, seconds=1),
                         recent_delta_rows=0, recent_votes=0, recent_window=timedelta(minutes=10), rows_read=3,
                         full_scan=False)
    found = problems(status_report(health, None), Thresholds(max_fold_lag_s=1800))
    assert len(found) == 1 and "1/10 of the 30-day retention" in found[0]
    fresher = health.__class__(**{**health.__dict__, "oldest_unfolded_commit": now - timedelta(days=2)})
    assert problems(status_report(fresher, None), Thresholds(max_fold_lag_s=1800)) == []


def test_status_follows_the_change_log_and_agrees_with_a_full_scan(stack, database) -> None:
    from spanner_store.health import delta_health

    write_deltas(database, [PostDelta(f"status-idle-{i}", HOUR, "idle:0", 1, 0, 1) for i in range(200)])
    fold(stack)  # folds them and records the cursor
    write_deltas(database, [PostDelta(f"status-new-{i % 6}", HOUR, f"new:{i}", 1, 0, 1) for i in range(18)])
    write_deltas(database, [PostDelta(f"status-new-{i % 3}", HOUR, f"new2:{i}", 1, 0, 1) for i in range(12)])
    log, scan = delta_health(database), delta_health(database, full_scan=True)
    assert (log.unfolded_deltas, log.posts_with_unfolded_deltas) == (scan.unfolded_deltas,
                                                                     scan.posts_with_unfolded_deltas) == (30, 6)
    assert log.oldest_unfolded_commit == scan.oldest_unfolded_commit is not None
    assert not log.full_scan and scan.full_scan
    # The cursor row and the newest fold's, the change rows of the last 10 minutes, the 6 posts
    # changed since the fold and their 30 unfolded deltas: not the 200 folded posts.
    assert log.rows_read < 100 < 200 < scan.rows_read
    assert (log.recent_delta_rows, log.recent_votes) == (scan.recent_delta_rows, scan.recent_votes)
