"""`upvotes status` on the emulators: unfolded deltas before and after a fold, the exit status
as a probe, and the dead-letter backlog by reason."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud import pubsub_v1

from schemas.contract import event_message
from schemas.records import PostDelta, Rejected
from spanner_reads.health import DeltaHealth
from spanner_writes.deltas import write_deltas
from tests.support.fold_runs import run_fold as fold
from tests.support.polling import wait_until
from tests.support.resources import new_resources
from transforms.dead_letter import to_dead_letter
from upvotes.cli import main
from upvotes.devtools.publishing import publish_message
from upvotes.operations.provision import provision, provision_pubsub, provision_spanner
from upvotes.operations.status import Thresholds, problems, status_report

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800


def monitoring_point(end_s: int, value: float, double: bool = False):
    """A point of a Cloud Monitoring series, with the client's own types."""
    from google.cloud import monitoring_v3

    typed = monitoring_v3.TypedValue(double_value=value) if double else monitoring_v3.TypedValue(int64_value=int(value))
    return monitoring_v3.Point(interval=monitoring_v3.TimeInterval(end_time={"seconds": end_s}), value=typed)


class FakeMonitoring:
    """A monitoring_v3.MetricServiceClient (Cloud Monitoring has no emulator): records each
    request and answers with the series of the metric type its filter names."""

    def __init__(self, series: dict[str, list]):
        self.series = series
        self.requests: list[dict] = []

    def list_time_series(self, request):
        self.requests.append(request)
        return self.series.get(re.search(r'metric\.type = "([^"]+)"', request["filter"]).group(1), [])


def status(stack, capsys, *extra: str) -> tuple[int, dict]:
    code = main(
        [
            "status",
            "--project",
            stack.project,
            "--instance",
            stack.instance,
            "--database",
            stack.database,
            "--json",
            *extra,
        ]
    )
    return code, json.loads(capsys.readouterr().out)


def test_unfolded_deltas_before_a_fold_none_after_and_exit_3_on_a_stale_fold(stack, database, capsys) -> None:
    deltas = [
        PostDelta.of(f"status-{i % 7}", HOUR, f"status-w:{i}:0", upvotes=2, shares=1, events=3) for i in range(40)
    ]
    write_deltas(database, deltas)

    code, before = status(stack, capsys)
    assert before["unfolded_deltas"] == 40
    assert before["oldest_unfolded_age_s"] >= 0
    assert before["delta_rows_per_min"] == 4.0 and before["votes_per_min"] == 12.0  # 40 rows, 120 votes, 10 min
    assert before["dead_letter_backlog"] == {} and before["retention_days"] == 30  # provision recorded it
    assert 0 <= before["last_delta_commit_age_s"] < 60  # the commit above
    assert before["votes_backlog"]["oldest_unacked_age_s"] is None  # nothing waits
    assert before["watching"]["votes_subscription"] == stack.subscription_path(stack.subscription)
    assert code == 3 and before["problems"]  # never folded, with unfolded deltas

    fold(stack)
    code, after = status(stack, capsys)
    assert (after["unfolded_deltas"], after["oldest_unfolded_age_s"]) == (0, None)
    assert after["last_fold_age_s"] is not None and after["delta_rows_per_min"] == 4.0  # folded, still recent
    assert code == 0 and after["healthy"]
    # Nothing can be late on the emulators: the section says why, with no count, and is no problem.
    assert after["late_votes"]["count"] is None and after["late_votes"]["method"].startswith("not applicable")

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

    # With no dead-letter flag (as the README wrote it before issue 26): provision recorded the kept subscription.
    code, report = status(stack, capsys)
    assert report["dead_letter_backlog"] == {"rejected_vote/not_json": 1, "rejected_vote/not_object": 1}
    assert code == 3 and not report["healthy"]
    # Released, not consumed: a second look sees the same backlog; the flag still names it too.
    assert (
        status(stack, capsys, "--dead-letter-topic", stack.dead_letter_topic)[1]["dead_letter_backlog"]
        == report["dead_letter_backlog"]
    )


def test_unfolded_deltas_older_than_the_alert_threshold_cross_it_long_before_the_retention() -> None:
    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    health = DeltaHealth(
        read_at=now,
        posts_with_unfolded_deltas=1,
        last_fold_snapshot=now - timedelta(seconds=60),
        unfolded_deltas=1,
        oldest_unfolded_commit=now - timedelta(days=7, seconds=1),
        recent_delta_rows=0,
        recent_votes=0,
        recent_window=timedelta(minutes=10),
        rows_read=3,
        full_scan=False,
    )
    found = problems(status_report(health, None), Thresholds(max_fold_lag_s=1800))
    assert len(found) == 1 and "deleted 30 days after their commit" in found[0]
    assert status_report(health, None)["oldest_unfolded_share_of_retention"] == round(
        (7 * 86_400 + 1) / (30 * 86_400), 4
    )
    fresher = health.__class__(**{**health.__dict__, "oldest_unfolded_commit": now - timedelta(days=6)})
    assert problems(status_report(fresher, None), Thresholds(max_fold_lag_s=1800)) == []


def test_status_follows_the_change_log_and_agrees_with_a_full_scan(stack, database) -> None:
    from spanner_reads.health import delta_health

    write_deltas(database, [PostDelta.of(f"status-idle-{i}", HOUR, "idle:0", upvotes=1, events=1) for i in range(200)])
    fold(stack)  # folds them and records the cursor
    write_deltas(
        database, [PostDelta.of(f"status-new-{i % 6}", HOUR, f"new:{i}", upvotes=1, events=1) for i in range(18)]
    )
    write_deltas(
        database, [PostDelta.of(f"status-new-{i % 3}", HOUR, f"new2:{i}", upvotes=1, events=1) for i in range(12)]
    )
    log, scan = delta_health(database), delta_health(database, full_scan=True)
    assert (
        (log.unfolded_deltas, log.posts_with_unfolded_deltas)
        == (scan.unfolded_deltas, scan.posts_with_unfolded_deltas)
        == (30, 6)
    )
    assert log.oldest_unfolded_commit == scan.oldest_unfolded_commit is not None
    assert not log.full_scan and scan.full_scan
    # The cursor row and the newest fold's, the change rows of the last 10 minutes, the 6 posts
    # changed since the fold and their 30 unfolded deltas: not the 200 folded posts.
    assert log.rows_read < 100 < 200 < scan.rows_read
    assert (log.recent_delta_rows, log.recent_votes) == (scan.recent_delta_rows, scan.recent_votes)


def test_votes_waiting_unread_cross_the_backlog_threshold_and_stay_unread(emulator_env, capsys) -> None:
    """No stream runs: the votes subscription fills up. The peek sees the oldest vote's age, and
    releases what it saw (a second status sees the same vote)."""
    res = new_resources("backlog")
    provision(res, log=lambda _: None)
    publisher = pubsub_v1.PublisherClient()
    data, attributes = event_message({"post_id": "waiting", "counter": "upvotes", "delta": 1})
    publish_message(publisher, res.topic_path(res.topic), data, attributes).result(timeout=30)

    reports: list[tuple[int, dict]] = []  # each status peeks and releases: the vote stays unread

    def past_the_threshold() -> bool:
        reports.append(status(res, capsys, "--max-backlog-age-s", "1"))
        return reports[-1][0] == 3

    wait_until(past_the_threshold, 30, "the oldest vote to wait past the 1 s threshold")
    code, report = reports[-1]
    backlog = report["votes_backlog"]
    assert backlog["oldest_unacked_age_s"] >= 1 and backlog["messages_seen"] == 1 and "peek" in backlog["method"]
    assert code == 3 and any(
        p.startswith("votes wait unread") and "is the stream running?" in p for p in report["problems"]
    )
    assert report["last_delta_commit"] is None  # nothing was ever written
    code, again = status(res, capsys)  # the default threshold (300 s) is not crossed; the vote is still there
    assert code == 0 and again["votes_backlog"]["messages_seen"] == 1


def test_what_status_cannot_check_is_a_problem_never_healthy(emulator_env, capsys) -> None:
    """A database provisioned without a record of its subscriptions (as before issue 23)."""
    res = new_resources("unwatched")
    provision_pubsub(res, log=lambda _: None)
    provision_spanner(res, create_instance=False, instance_config="", log=lambda _: None)
    code, report = status(res, capsys)
    assert code == 3 and not report["healthy"]
    assert report["dead_letter_backlog"] is None and report["votes_backlog"] is None
    assert sum(p.startswith("not checked: no ") for p in report["problems"]) == 2
    # Named by flags, both are checked.
    code, named = status(
        res, capsys, "--dead-letter-topic", res.dead_letter_topic, "--votes-subscription", res.subscription
    )
    assert code == 0 and named["dead_letter_backlog"] == {} and named["votes_backlog"]["messages_seen"] == 0
    # A subscription that does not exist cannot be read: a problem.
    code, missing = status(
        res, capsys, "--dead-letter-topic", res.dead_letter_topic, "--votes-subscription", "nope-sub"
    )
    assert code == 3 and any("could not be read" in p for p in missing["problems"])


def test_the_last_delta_commit_is_found_however_long_ago(database) -> None:
    """It reads the newest TopCandidates rows within a minute, then wider windows."""
    from spanner_reads.liveness import last_delta_commit
    from spanner_store.tables import TOP_CANDIDATE_COLUMNS, TOP_CANDIDATES

    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))
        now = snapshot._transaction_read_timestamp
        existing = last_delta_commit(snapshot, now)
    two_hours_ago = now - timedelta(hours=2)
    with database.batch() as batch:
        batch.insert(
            TOP_CANDIDATES, columns=TOP_CANDIDATE_COLUMNS, values=[(3, two_hours_ago, "old-commit", [], 0, 0.0, None)]
        )
    with database.snapshot(multi_use=True) as snapshot:
        list(snapshot.execute_sql("SELECT 1"))
        found = last_delta_commit(snapshot, snapshot._transaction_read_timestamp)
    assert found == (existing if existing and existing > two_hours_ago else two_hours_ago)


def test_the_monitoring_backlog_reads_the_newest_sample_of_the_metric() -> None:
    """Google Cloud's path (no emulator for Cloud Monitoring): the request it makes, and how it
    reads the answer, with the client's own types."""
    from google.cloud import monitoring_v3

    from upvotes.operations.backlog import METRIC, MONITORING, BacklogUnknown, monitoring_backlog

    def Client(series):
        return FakeMonitoring({METRIC: series})

    point = monitoring_point
    client = Client([monitoring_v3.TimeSeries(points=[point(1_000_060, 420), point(1_000_000, 360)])])
    backlog = monitoring_backlog(client, "projects/my-project/subscriptions/votes-sub", now_s=1_000_100)
    assert backlog.oldest_unacked_age_s == 420 and backlog.method == MONITORING
    assert backlog.as_of.timestamp() == 1_000_060
    [request] = client.requests
    assert request["name"] == "projects/my-project"
    assert f'metric.type = "{METRIC}"' in request["filter"]
    assert 'resource.labels.subscription_id = "votes-sub"' in request["filter"]
    assert request["interval"].start_time.timestamp() == 1_000_100 - 600
    with pytest.raises(BacklogUnknown, match="no .* sample"):
        monitoring_backlog(Client([]), "projects/my-project/subscriptions/votes-sub")
    with pytest.raises(BacklogUnknown, match="not a subscription path"):
        monitoring_backlog(Client([]), 'projects/my-project/subscriptions/x" OR "1')


def counter_series(name: str, *values: float, start_s: int = 1_000_000):
    """A Beam counter as Dataflow exports it: a gauge of its running total, a sample a minute,
    newest first as Monitoring returns them."""
    from google.cloud import monitoring_v3

    points = [monitoring_point(start_s + 60 * i, value, double=True) for i, value in enumerate(values)]
    return monitoring_v3.TimeSeries(
        metric={"type": "dataflow.googleapis.com/job/user_counter", "labels": {"metric_name": name}},
        points=points[::-1],
    )


def test_the_late_votes_are_the_increase_of_the_lateness_counters_of_the_streaming_job() -> None:
    """Google Cloud's path, with a fake MetricServiceClient: the request, and the increase of each
    counter over the lookback (a drop is a restart from zero)."""
    from google.cloud import monitoring_v3

    from upvotes.operations.late_votes import (
        LOOKBACK_S,
        METRIC,
        MONITORING,
        WITNESS,
        LateVotesUnknown,
        monitoring_late_votes,
    )

    client = FakeMonitoring(
        {
            METRIC: [
                counter_series("late_events", 5, 5, 8),  # +3
                counter_series("late_events", 4, 1, 3),  # another series: restarted, +1 +2
                counter_series("stamped_ahead_of_worker_clock", 0, 2),
            ]
        }
    )
    late = monitoring_late_votes(client, "my-project", "upvotes-streaming", now_s=1_000_200)
    assert late.by_counter == {"WindowAndSumVotes/late_events": 6, "ParseVotes/stamped_ahead_of_worker_clock": 2}
    assert (late.count, late.method, late.lookback_s) == (8, MONITORING, LOOKBACK_S)
    assert late.as_of is not None and late.as_of.timestamp() == 1_000_120  # the newest sample
    [request] = client.requests  # samples of the counters: no need for the witness
    assert request["name"] == "projects/my-project"
    assert f'metric.type = "{METRIC}"' in request["filter"]
    assert 'resource.labels.job_name = "upvotes-streaming"' in request["filter"]
    assert 'metric.labels.metric_name = one_of("late_events", "stamped_ahead_of_worker_clock")' in request["filter"]
    assert request["interval"].start_time.timestamp() == 1_000_200 - LOOKBACK_S
    assert request["interval"].end_time.timestamp() == 1_000_200

    # A Beam counter exists only once incremented: a healthy job has none, and its own metric says it runs.
    running = FakeMonitoring({WITNESS: [monitoring_v3.TimeSeries(points=[monitoring_point(1_000_060, 3600)])]})
    late = monitoring_late_votes(running, "my-project", "upvotes-streaming", now_s=1_000_100)
    assert late.count == 0 and late.by_counter is not None and set(late.by_counter.values()) == {0}
    assert [f'metric.type = "{WITNESS}"' in r["filter"] for r in running.requests] == [False, True]
    # Nothing at all: a check that could not be made, never zero.
    with pytest.raises(LateVotesUnknown, match="no .* sample of the Dataflow job upvotes-streaming"):
        monitoring_late_votes(FakeMonitoring({}), "my-project", "upvotes-streaming")
    # The filter holds nothing but names.
    with pytest.raises(LateVotesUnknown, match="not a Dataflow job name"):
        monitoring_late_votes(FakeMonitoring({}), "my-project", 'x" OR "1')
    with pytest.raises(LateVotesUnknown, match="not a project ID"):
        monitoring_late_votes(FakeMonitoring({}), 'my-project" OR "1', "upvotes-streaming")


@pytest.fixture
def google_cloud_monitoring(monkeypatch):
    """`upvotes status` as on Google Cloud for the late votes (the emulators serve the rest):
    Monitoring is a FakeMonitoring the test fills."""
    from google.cloud import monitoring_v3

    from upvotes.operations import late_votes

    client = FakeMonitoring({})
    monkeypatch.setattr(late_votes, "on_emulators", lambda: False)
    monkeypatch.setattr(monitoring_v3, "MetricServiceClient", lambda: client)
    return client


def test_late_votes_past_the_threshold_exit_3_and_unreadable_counters_are_a_problem(
    stack, capsys, google_cloud_monitoring
) -> None:
    from upvotes.operations.late_votes import METRIC

    now_s = int(datetime.now(timezone.utc).timestamp())
    google_cloud_monitoring.series[METRIC] = [counter_series("late_events", 10, 14, start_s=now_s - 120)]
    code, report = status(stack, capsys, "--streaming-job", "stream-x")
    assert report["late_votes"]["count"] == 4 and report["late_votes"]["streaming_job"] == "stream-x"
    assert "projects/" + stack.project == google_cloud_monitoring.requests[-1]["name"]
    [problem] = [p for p in report["problems"] if "arrived late" in p]
    assert code == 3 and problem.startswith(
        "4 votes arrived late in the last 600 s of the streaming job stream-x (WindowAndSumVotes/late_events=4, "
    )
    assert "threshold 0" in problem and "clock synchronisation" in problem
    code, tolerated = status(stack, capsys, "--streaming-job", "stream-x", "--max-late-votes", "4")
    assert tolerated["late_votes"]["count"] == 4
    assert not any("arrived late" in p or "lateness" in p for p in tolerated["problems"])

    google_cloud_monitoring.series.clear()  # no sample: the job does not run under that name
    code, unknown = status(stack, capsys, "--streaming-job", "stream-x")
    assert code == 3 and unknown["late_votes"] is None
    assert any(
        p.startswith("not checked: the lateness counters of the streaming job stream-x could not be read: no ")
        for p in unknown["problems"]
    )
    with pytest.raises(SystemExit):  # a name argparse refuses never reaches a filter
        status(stack, capsys, "--streaming-job", 'x" OR "1')
    assert "not a Dataflow job name" in capsys.readouterr().err


def test_late_votes_are_not_applicable_on_the_emulators_and_no_problem(stack, capsys) -> None:
    code, report = status(stack, capsys)
    assert report["late_votes"] == {
        "streaming_job": None,
        "count": None,
        "by_counter": None,
        "lookback_s": None,
        "as_of": None,
        "method": report["late_votes"]["method"],
    }
    assert "no Cloud Monitoring" in report["late_votes"]["method"] and "wall clock" in report["late_votes"]["method"]
    # Other tests' dead letters may make this stack unhealthy, never its late votes.
    assert not any("arrived late" in p or "lateness" in p for p in report["problems"])


def test_a_dead_stream_is_flagged_within_three_windows_and_an_idle_one_never(streaming_stack, capsys) -> None:
    """The plain `upvotes status` (issue 47): a local stream beats its heartbeat at least once per
    window, idle or not, so an idle stream is running and a SIGKILLed one is dead, exit 3, with when
    it was last alive, within 3 windows of its death (2 s windows here)."""
    import signal
    import time

    from spanner_reads.liveness import DEAD_AFTER_WINDOWS
    from upvotes.devtools import local_stream

    res, _, start, log = streaming_stack
    window_s = 2
    stream = start()

    def beat() -> dict | None:
        streams = status(res, capsys)[1]["streams"]
        return streams[0] if streams else None

    wait_until(lambda: (beat() or {}).get("state") == "running", 120, "the stream's first heartbeat", stream, log)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < (DEAD_AFTER_WINDOWS + 1) * window_s:  # idle for 4 windows: never dead
        code, report = status(res, capsys)
        [stream_report] = report["streams"]
        assert stream_report["state"] == "running" and stream_report["window_s"] == window_s, stream_report
        assert code == 0 and report["healthy"], report["problems"]
    assert local_stream.stop(stream, signal.SIGKILL) == -signal.SIGKILL
    killed_at = time.time()
    reports: list[tuple[int, dict]] = []

    def flagged() -> bool:
        reports.append(status(res, capsys))
        return reports[-1][0] == 3

    took = wait_until(flagged, 30, "status to flag the dead stream", poll_s=0.2)
    code, report = reports[-1]
    [dead] = report["streams"]
    last_alive = datetime.fromisoformat(dead["last_alive"]).timestamp()
    # It beat until it died (every half window: 1 s), so flagging it once its last beat is 3 windows
    # old flags it within 3 windows of its death, whenever status runs.
    assert killed_at - 2 < last_alive <= killed_at
    assert dead["state"] == "dead" and dead["missed_windows"] >= DEAD_AFTER_WINDOWS
    for _, earlier in reports[:-1]:  # not before its last beat is 3 windows old
        [stream_report] = earlier["streams"]
        assert stream_report["state"] == "running" and stream_report["last_alive_age_s"] <= 3 * window_s
    [problem] = report["problems"]
    assert (
        problem.startswith(
            f"the stream reading {res.subscription_path(res.subscription)} is dead: no heartbeat "
            f"for {dead['missed_windows']} of its 2 s windows"
        )
        and dead["last_alive"] in problem
    )
    assert took <= DEAD_AFTER_WINDOWS * window_s + 10, took  # a status's own time, on a loaded machine, aside
    print(f"\ndead stream flagged {took:.1f} s after its SIGKILL (last alive {killed_at - last_alive:.1f} s before it)")
