"""Dead-letter re-drive on the emulators: a delta row dead-lettered by an injected permanent
failure is replayed twice and counted once, and so is a batch of vote states; a rejected vote, a
whole message or one line of a batch, is replaced by its corrected line, matched by the line's own
identity and counted once whatever crashes and reruns; nothing is acknowledged before its replay
succeeded, and a long replay keeps what it holds."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions
from google.cloud import pubsub_v1

from schemas.contract import DEFAULT_EVENT_TIME_POLICY, parse_message
from schemas.counters import Counts
from schemas.records import FailedVoteStates, PostDelta, PostUser, Rejected, VoteEvent
from schemas.vote_states import LatestVote
from schemas.voter_sketch import sketch_of
from spanner_reads.hourly import hourly_counts
from spanner_reads.reads import exact_counts
from spanner_writes.deltas import write_new_deltas
from spanner_writes.votes import apply_all_vote_states
from tests.support.event_times import rfc3339
from tests.support.polling import assert_stays, wait_until
from transforms.dead_letter import PublishDeadLetters, to_dead_letter
from transforms.spanner_sink import WriteDeltaRows
from upvotes.cli import main
from upvotes.operations import dead_letters as dead_letter_operations
from upvotes.operations.dead_letters import (
    HeldLetters,
    correction_delta,
    execute_replay,
    plan_replay,
    pull_dead_letters,
    read_corrected_votes,
    release,
    write_corrected,
)

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800


def kept(stack) -> str:
    return f"projects/{stack.project}/subscriptions/{stack.dead_letter_subscription_id}"


def dead_letters(stack, capsys, action: str, *extra: str) -> list[dict]:
    code = main(
        ["dead-letters", action, "--project", stack.project, "--dead-letter-topic", stack.dead_letter_topic, *extra]
    )
    assert code == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_dead_lettered_delta_replayed_twice_is_counted_once(stack, database, flaky_sink, capsys) -> None:
    created = flaky_sink(fail_before=1.0, error=exceptions.PermissionDenied)  # permanent: never retried
    deltas = [
        PostDelta.of(
            f"dl-{i}",
            HOUR,
            f"dl-writer:{i}:0",
            upvotes=3 + i,
            shares=1,
            events=4 + i,
            voters=sketch_of([f"v{i}", "both"]),
        )
        for i in range(3)
    ]
    with TestPipeline() as p:
        failed = p | beam.Create(deltas) | WriteDeltaRows(stack.project, stack.instance, stack.database, 10)
        (failed,) | PublishDeadLetters(f"projects/{stack.project}/topics/{stack.dead_letter_topic}")
    assert sum(f.injected_before for f in created) >= 1
    assert [t.counts.upvotes for t in exact_counts(database, [d.post_id for d in deltas])] == [0, 0, 0]

    shown = dead_letters(stack, capsys, "show")
    assert shown[0] == {"backlog_by_reason": {"delta_row/spanner_write_failed": 3}, "shown": 3}
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 3  # show acknowledges nothing

    dry = dead_letters(stack, capsys, "replay", "--instance", stack.instance, "--database", stack.database, "--dry-run")
    assert sorted(d["delta"]["post_id"] for d in dry) == ["dl-0", "dl-1", "dl-2"]
    assert [t.counts.upvotes for t in exact_counts(database, ["dl-0"])] == [0]

    # First replay: the rows are written, but the acknowledgement is lost (the replaying
    # process died before it), so the dead letters come back.
    subscriber = pubsub_v1.SubscriberClient()
    held, _ = pull_dead_letters(subscriber, kept(stack), 10)
    report, still_held = execute_replay(
        plan_replay(held, {}),
        lambda sink, failed: sink.replay.write(database, failed),
        lambda correction: None,
        ack=lambda letters: None,
    )
    assert report.replayed["deltas_written"] == 3
    release(subscriber, kept(stack), held)

    # Second replay, through the command: the same rows collide, nothing is added, all acknowledged.
    (second,) = dead_letters(stack, capsys, "replay", "--instance", stack.instance, "--database", stack.database)
    assert (second["deltas_written"], second["deltas_already_written"], second["acknowledged"]) == (0, 3, 3)
    assert [t.counts.upvotes for t in exact_counts(database, [d.post_id for d in deltas])] == [3, 4, 5]
    assert [t.unique_voters for t in exact_counts(database, [d.post_id for d in deltas], unique=True)] == [2, 2, 2]
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 0


def publish_dead_letters(stack, data: bytes, attributes: dict[str, str]) -> None:
    """What the pipeline dead-letters for one message: its parse (the contract), each Rejected as
    transforms/dead_letter.py publishes it."""
    publisher = pubsub_v1.PublisherClient()
    for result in parse_message(data, attributes, publish_time_s=HOUR):
        if isinstance(result, Rejected):
            message = to_dead_letter(result)
            publisher.publish(
                f"projects/{stack.project}/topics/{stack.dead_letter_topic}", message.data, **message.attributes
            ).result(timeout=30)


def test_a_rejected_vote_is_replaced_by_its_corrected_line_once(stack, database, capsys, tmp_path) -> None:
    publish_dead_letters(
        stack,
        b'{"post_id": "fixed-post", "counter": "upvotes", "delta": "one", "event_id": "e-fix-1"}',
        {"event_id": "e-fix-1"},
    )
    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text(
        '{"post_id": "fixed-post", "counter": "upvotes", "delta": 1, "event_id": "e-fix-1", "user_id": "fixer"}\n'
    )
    replay = ["replay", "--instance", stack.instance, "--database", stack.database, "--corrected-votes", str(corrected)]

    (first,) = dead_letters(stack, capsys, *replay)
    assert (first["corrections_written"], first["acknowledged"], first["votes_published"]) == (1, 1, 0)
    (counted,) = exact_counts(database, ["fixed-post"], unique=True)
    assert (counted.counts, counted.unique_voters) == (Counts(upvotes=1), 1)

    (again,) = dead_letters(stack, capsys, *replay)  # its dead letter is gone: nothing to replace
    assert (again["corrections_written"], again["acknowledged"]) == (0, 0)
    assert exact_counts(database, ["fixed-post"])[0].counts == Counts(upvotes=1)


def test_two_bad_lines_of_a_batch_replayed_twice_with_a_crash_before_the_ack_each_count_once(
    stack, database, capsys, tmp_path
) -> None:
    """A batch (v2) of three lines, two of them bad: each bad line is its own dead letter, shown and
    matched by its own event_id (never the batch's). The first replay is killed between writing the
    first correction and acknowledging it; the rerun writes the other and only acknowledges the
    first; a third run finds nothing. Each correction counts once, the good line once, and nothing
    stays on the subscription. (A line with no event_id is matched by "@<message ID>/<line>".)"""
    batch = b"\n".join(
        [
            b'{"post_id": "batch-post", "counter": "upvotes", "delta": 1, "event_id": "line-1"}',
            b'{"post_id": "batch-post", "counter": "upvotes", "delta": "2", "event_id": "line-2"}',
            b'{"post_id": "batch-post", "counter": "likes", "delta": 1, "event_id": "line-3"}',
            b'{"post_id": "batch-post", "counter": "upvotes", "delta": 0}',
        ]
    )
    publish_dead_letters(stack, batch, {"format": "ndjson", "event_id": "the-batch"})
    shown = dead_letters(stack, capsys, "show")[1:]
    assert sorted((s["line"], s["event_id"], s["identity"].startswith("@")) for s in shown) == [
        (2, "line-2", False),
        (3, "line-3", False),
        (4, None, True),
    ]
    no_id = next(s for s in shown if s["line"] == 4)
    assert no_id["identity"] == f"@{no_id['message_id']}/4"

    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text(
        '{"post_id": "batch-post", "counter": "upvotes", "delta": 2, "event_id": "line-2"}\n'
        '{"post_id": "batch-post", "counter": "upvotes", "delta": 30, "event_id": "line-3"}\n'
        f'{{"post_id": "batch-post", "counter": "shares", "delta": 1, "event_id": "{no_id["identity"]}"}}\n'
    )
    corrections = read_corrected_votes(corrected.read_bytes().splitlines(), publish_time_s=HOUR)

    subscriber = pubsub_v1.SubscriberClient()
    held, _ = pull_dead_letters(subscriber, kept(stack), 10)

    def crash_on_the_first_ack(letters) -> None:
        raise KeyboardInterrupt("injected: the replay died after its first write, before its acknowledgement")

    write = lambda correction: write_corrected(database, correction)  # noqa: E731 - the command's own path
    with pytest.raises(KeyboardInterrupt):
        execute_replay(plan_replay(held, corrections), lambda sink, failed: (0, 0), write, ack=crash_on_the_first_ack)
    release(subscriber, kept(stack), held)  # what the command's `finally` does (or the deadline, on a kill)
    assert sum(exact_counts(database, ["batch-post"])[0].counts) == 2  # one correction is in

    replay = ["replay", "--instance", stack.instance, "--database", stack.database, "--corrected-votes", str(corrected)]
    (second,) = dead_letters(stack, capsys, *replay)
    assert (second["corrections_written"], second["corrections_already_written"], second["acknowledged"]) == (2, 1, 3)
    (third,) = dead_letters(stack, capsys, *replay)
    assert (third["corrections_written"], third["acknowledged"]) == (0, 0)
    assert exact_counts(database, ["batch-post"])[0].counts == Counts(upvotes=2 + 30, shares=1)
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 0


def test_a_long_replay_extends_what_it_holds_so_nothing_is_redelivered(stack) -> None:
    """A subscription whose ack deadline (10 s, Pub/Sub's least) is shorter than the replay: held
    letters are extended, so a second reader gets nothing while the first holds them; once let go
    without an acknowledgement they come back."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = f"projects/{stack.project}/topics/{stack.dead_letter_topic}-slow"
    short = f"projects/{stack.project}/subscriptions/{stack.dead_letter_topic}-slow"
    publisher.create_topic(request={"name": topic})
    subscriber.create_subscription(request={"name": short, "ack_deadline_seconds": 10, "topic": topic})
    try:
        message = to_dead_letter(Rejected(b"not json", {"event_id": "slow-1"}, "not_json: test"))
        publisher.publish(topic, message.data, **message.attributes).result(timeout=30)
        with HeldLetters(subscriber, short, deadline_s=10, every_s=1.0) as leases:
            held, _ = pull_dead_letters(subscriber, short, 10, held=leases)
            assert [letter.identity() for letter in held] == ["slow-1"]
            assert_stays(lambda: not pull_dead_letters(subscriber, short, 10)[0], 13, "no redelivery while held")
            assert leases.extensions >= 10
        wait_until(lambda: pull_dead_letters(subscriber, short, 10)[0], 30, "the letter back after its deadline")
    finally:
        subscriber.delete_subscription(request={"subscription": short})
        publisher.delete_topic(request={"topic": topic})


def test_a_corrected_line_that_would_be_rejected_again_is_refused(stack, capsys, tmp_path) -> None:
    corrected = tmp_path / "still-bad.jsonl"
    corrected.write_text('{"post_id": "x", "counter": "likes", "delta": 1, "event_id": "e-2"}\n')
    code = main(
        [
            "dead-letters",
            "replay",
            "--project",
            stack.project,
            "--dead-letter-topic",
            stack.dead_letter_topic,
            "--instance",
            stack.instance,
            "--database",
            stack.database,
            "--corrected-votes",
            str(corrected),
        ]
    )
    assert code == 2 and "would be rejected again" in capsys.readouterr().err


def test_dead_lettered_vote_states_replayed_twice_move_each_count_once(stack, database, capsys) -> None:
    """A batch the vote-state sink could never apply (transforms/vote_state_sink.py) is applied by the
    replay through the sink's own path; a second replay (its acknowledgement lost) changes nothing."""
    states = (
        (PostUser("dl-states", "a"), LatestVote("up", 1, "e1", HOUR, 2, True)),
        (PostUser("dl-states", "b"), LatestVote("down", 1, "e2", HOUR, 1, True)),
    )
    message = to_dead_letter(FailedVoteStates(states, "spanner_apply_failed: test"))
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(
        f"projects/{stack.project}/topics/{stack.dead_letter_topic}", message.data, **message.attributes
    ).result(timeout=30)
    assert dead_letters(stack, capsys, "show")[0]["backlog_by_reason"] == {"vote_states/spanner_apply_failed": 1}

    subscriber = pubsub_v1.SubscriberClient()
    held, _ = pull_dead_letters(subscriber, kept(stack), 10)
    report, _ = execute_replay(
        plan_replay(held, {}),
        lambda sink, failed: sink.replay.write(database, failed),
        lambda correction: None,
        ack=lambda letters: None,
    )  # applied, but the ack is lost
    assert (report.replayed["states_applied"], report.replayed["states_already_applied"]) == (2, 0)
    release(subscriber, kept(stack), held)

    (second,) = dead_letters(stack, capsys, "replay", "--instance", stack.instance, "--database", stack.database)
    assert (second["states_applied"], second["states_already_applied"], second["acknowledged"]) == (0, 2, 1)
    assert exact_counts(database, ["dl-states"])[0].counts == Counts(upvotes=1, downvotes=1)


def replay_corrections(stack, capsys, corrected, *extra: str) -> tuple[int, list[dict], str]:
    """`dead-letters replay --corrected-votes`, whatever it ends with: (exit status, its JSON lines, stderr)."""
    code = main(
        [
            "dead-letters",
            "replay",
            "--project",
            stack.project,
            "--dead-letter-topic",
            stack.dead_letter_topic,
            "--instance",
            stack.instance,
            "--database",
            stack.database,
            "--corrected-votes",
            str(corrected),
            *extra,
        ]
    )
    out = capsys.readouterr()
    return code, [json.loads(line) for line in out.out.splitlines()], out.err


def killed_before_its_ack(stack, capsys, monkeypatch, corrected) -> None:
    """A replay killed between its write and its acknowledgement: what it held goes back unacknowledged
    (the command's `finally`, or the ack deadline after a SIGKILL)."""

    def killed(*_) -> None:
        raise KeyboardInterrupt("injected: killed after the write, before the acknowledgement")

    with monkeypatch.context() as patched:
        patched.setattr(dead_letter_operations, "acknowledge", killed)
        assert replay_corrections(stack, capsys, corrected)[0] == 130


def hour_start(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s // 3600 * 3600, tz=timezone.utc)


def hours_counted(database, post_id: str) -> dict[datetime, Counts]:
    return {
        hour.hour: hour.counts
        for hour in hourly_counts(database, post_id, since=datetime(1, 1, 1, tzinfo=timezone.utc))
    }


def test_a_correction_stamped_far_ahead_counts_in_the_hour_the_stream_would_count_it(
    stack, database, capsys, tmp_path
) -> None:
    """Issue 44: a replay parsed corrections without the stream's event-time policy, so a corrected
    delta event stamped 2099 was written in hour 2099 (leading the hot ranking for decades) and a
    corrected vote state stamped 2099 beat every later vote of its user. Now a correction is read as
    the stream reads a vote, at its dead letter's publish time: both count in that hour, and the
    user's later vote wins."""
    before = time.time()
    publish_dead_letters(
        stack, b'{"post_id": "future-post", "counter": "upvotes", "delta": "1", "event_id": "e-future"}', {}
    )
    publish_dead_letters(
        stack,
        b'{"post_id": "future-post", "user_id": "u-ahead", "vote": "upp", '
        b'"event_time": "2099-01-01T00:00:00Z", "event_id": "e-future-state"}',
        {},
    )
    after = time.time()
    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text(
        '{"post_id": "future-post", "counter": "upvotes", "delta": 1, "event_time": "2099-01-01T00:00:00Z", '
        '"event_id": "e-future"}\n'
        '{"post_id": "future-post", "user_id": "u-ahead", "vote": "up", "event_time": "2099-01-01T00:00:00Z", '
        '"event_id": "e-future-state"}\n'
    )
    code, (report,), _ = replay_corrections(stack, capsys, corrected)
    assert (code, report["corrections_written"], report["acknowledged"]) == (0, 2, 2)
    # Both in the hour the dead letters were published in (an hour may have turned while publishing).
    counted = hours_counted(database, "future-post")
    assert counted in ({hour_start(before): Counts(upvotes=2)}, {hour_start(after): Counts(upvotes=2)}), counted

    # The user takes the vote back a minute later, as the stream's sink applies it.
    later_s = after + 60
    apply_all_vote_states(
        database,
        {
            PostUser("future-post", "u-ahead"): LatestVote(
                "none", int(later_s * 1_000_000), "e-later", int(later_s) // 3600 * 3600, 1, False
            )
        },
    )
    assert exact_counts(database, ["future-post"])[0].counts == Counts(upvotes=1)


def test_the_replay_takes_the_streams_clock_skew_flag(stack, database, capsys, tmp_path) -> None:
    """`--max-clock-skew-seconds` of the stream, with its default (3600): a correction 2 hours ahead of
    its dead letter counts in the letter's hour by default, and keeps its own under 3 hours."""
    before = time.time()
    publish_dead_letters(
        stack, b'{"post_id": "skewed-post", "counter": "upvotes", "delta": "1", "event_id": "e-skew"}', {}
    )
    after = time.time()
    ahead = datetime.now(timezone.utc) + timedelta(hours=2)
    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text(
        json.dumps(
            {
                "post_id": "skewed-post",
                "counter": "upvotes",
                "delta": 1,
                "event_time": rfc3339(ahead),
                "event_id": "e-skew",
            }
        )
        + "\n"
    )
    code, (dry,), _ = replay_corrections(stack, capsys, corrected, "--dry-run")
    assert code == 0 and dry["delta"]["event_hour"] in (int(before) // 3600 * 3600, int(after) // 3600 * 3600)
    code, (report,), _ = replay_corrections(stack, capsys, corrected, "--max-clock-skew-seconds", "10800")
    assert (code, report["corrections_written"], report["acknowledged"]) == (0, 1, 1)
    assert hours_counted(database, "skewed-post") == {hour_start(ahead.timestamp()): Counts(upvotes=1)}


def test_a_correction_edited_between_a_killed_replay_and_its_rerun_counts_once_and_is_refused(
    stack, database, capsys, tmp_path, monkeypatch
) -> None:
    """Issue 44: a corrected delta event was keyed (post, event hour, identity). Run 1 wrote it and
    was killed before the acknowledgement; the operator fixed its time and reran, as the docs say:
    no row under the new hour's key, so the vote counted twice. Edited in value only, it collided
    with the first row and was reported already written: the fix dropped in silence. Now the
    identity alone keys it: both reruns are refused, naming the line and both versions, and keep the
    dead letter; the original restored, the rerun acknowledges it and writes nothing."""
    publish_dead_letters(
        stack, b'{"post_id": "edited-post", "counter": "upvotes", "delta": "1", "event_id": "e-edit"}', {}
    )
    now = datetime.now(timezone.utc)
    first, edited = now - timedelta(hours=15), now - timedelta(hours=6)
    corrected = tmp_path / "corrected.jsonl"

    def correct(event_time: datetime, delta: int = 1) -> None:  # line 2: the file's own numbering
        corrected.write_text(
            "\n"
            + json.dumps(
                {
                    "post_id": "edited-post",
                    "counter": "upvotes",
                    "delta": delta,
                    "event_time": rfc3339(event_time),
                    "event_id": "e-edit",
                }
            )
            + "\n"
        )

    correct(first)
    killed_before_its_ack(stack, capsys, monkeypatch, corrected)
    assert hours_counted(database, "edited-post") == {hour_start(first.timestamp()): Counts(upvotes=1)}

    correct(edited)  # another hour
    code, (report,), err = replay_corrections(stack, capsys, corrected)
    assert hours_counted(database, "edited-post") == {hour_start(first.timestamp()): Counts(upvotes=1)}  # once
    assert (code, report["corrections_written"], report["corrections_already_written"], report["acknowledged"]) == (
        1,
        0,
        0,
        0,
    )
    (refusal,) = report["corrections_refused"]
    assert refusal in err and "corrected line 2 (identity 'e-edit')" in refusal
    assert f'"event_hour":"{hour_start(first.timestamp()):%Y-%m-%dT%H}:00:00Z"' in refusal  # written
    assert f'"event_hour":"{hour_start(edited.timestamp()):%Y-%m-%dT%H}:00:00Z"' in refusal  # this line

    correct(first, delta=5)  # the same post and hour, another value
    code, (report,), err = replay_corrections(stack, capsys, corrected)
    assert (code, report["corrections_already_written"], report["acknowledged"]) == (1, 0, 0)
    (refusal,) = report["corrections_refused"]
    assert '"delta":1' in refusal and '"delta":5' in refusal and refusal in err
    assert exact_counts(database, ["edited-post"])[0].counts == Counts(upvotes=1)

    correct(first)  # the correction written, restored
    (report,) = dead_letters(
        stack,
        capsys,
        "replay",
        "--instance",
        stack.instance,
        "--database",
        stack.database,
        "--corrected-votes",
        str(corrected),
    )
    assert (
        report["corrections_written"],
        report["corrections_already_written"],
        report["acknowledged"],
        report["corrections_refused"],
    ) == (0, 1, 1, [])
    assert exact_counts(database, ["edited-post"])[0].counts == Counts(upvotes=1)
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 0


def test_a_vote_state_correction_edited_between_runs_is_refused_and_counted_once(
    stack, database, capsys, tmp_path, monkeypatch
) -> None:
    """The same for a corrected vote-state event: run 1 applies "up" and is killed before the ack; the
    rerun says "down" at the same time (a later-ranked vote, which the sink would apply as a flip):
    refused, the user counted once, as "up"; the original restored, acknowledged."""
    publish_dead_letters(
        stack,
        b'{"post_id": "edited-state", "user_id": "u-e", "vote": "upp", '
        b'"event_time": "2026-11-27T01:02:03Z", "event_id": "e-state-edit"}',
        {},
    )
    voted = datetime.now(timezone.utc) - timedelta(hours=2)
    corrected = tmp_path / "corrected.jsonl"

    def correct(vote: str) -> None:
        corrected.write_text(
            json.dumps(
                {
                    "post_id": "edited-state",
                    "user_id": "u-e",
                    "vote": vote,
                    "event_time": rfc3339(voted),
                    "event_id": "e-state-edit",
                }
            )
            + "\n"
        )

    correct("up")
    killed_before_its_ack(stack, capsys, monkeypatch, corrected)
    assert exact_counts(database, ["edited-state"])[0].counts == Counts(upvotes=1)

    correct("down")
    code, (report,), err = replay_corrections(stack, capsys, corrected)
    assert exact_counts(database, ["edited-state"])[0].counts == Counts(upvotes=1)
    (refusal,) = report["corrections_refused"]
    assert (code, report["corrections_written"], report["acknowledged"]) == (1, 0, 0) and refusal in err
    assert "corrected line 1 (identity 'e-state-edit')" in refusal and '"vote":"up"' in refusal
    assert '"vote":"down"' in refusal

    correct("up")
    (report,) = dead_letters(
        stack,
        capsys,
        "replay",
        "--instance",
        stack.instance,
        "--database",
        stack.database,
        "--corrected-votes",
        str(corrected),
    )
    assert (report["corrections_written"], report["corrections_already_written"], report["acknowledged"]) == (0, 1, 1)
    assert exact_counts(database, ["edited-state"])[0].counts == Counts(upvotes=1)
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 0


def test_a_correction_a_replay_wrote_before_markers_existed_is_acknowledged_once(
    stack, database, capsys, tmp_path
) -> None:
    """A replay of the previous version wrote the delta row ("@replay/<identity>") without a marker
    and was killed before its acknowledgement: the rerun's row collides with it and is taken as
    written, as that version took it, instead of failing the letter forever."""
    publish_dead_letters(
        stack, b'{"post_id": "legacy-post", "counter": "upvotes", "delta": "1", "event_id": "e-old"}', {}
    )
    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text(
        json.dumps(
            {
                "post_id": "legacy-post",
                "counter": "upvotes",
                "delta": 1,
                "event_id": "e-old",
                "event_time": rfc3339(datetime.now(timezone.utc) - timedelta(hours=3)),
            }
        )
        + "\n"
    )
    (line,) = read_corrected_votes(corrected.read_bytes().splitlines(), time.time()).values()
    parsed = line.parsed(time.time(), DEFAULT_EVENT_TIME_POLICY)
    assert isinstance(parsed, VoteEvent), parsed
    write_new_deltas(database, [correction_delta(parsed, "e-old")])

    code, (report,), _ = replay_corrections(stack, capsys, corrected)
    assert (code, report["corrections_written"], report["corrections_already_written"], report["acknowledged"]) == (
        0,
        0,
        1,
        1,
    )
    assert exact_counts(database, ["legacy-post"])[0].counts == Counts(upvotes=1)


def test_two_lines_for_one_dead_letter_are_refused() -> None:
    lines = [
        b'{"post_id": "p", "counter": "upvotes", "delta": 1, "event_id": "e-twice"}',
        b"",
        b'{"post_id": "p", "counter": "upvotes", "delta": 2, "event_id": "e-twice"}',
    ]
    with pytest.raises(ValueError, match="lines 1 and 3 both correct 'e-twice'"):
        read_corrected_votes(lines, publish_time_s=HOUR)


def test_a_clean_streaming_build_warns_of_no_mixed_windows(monkeypatch, caplog) -> None:
    """`upvotes stream` builds its graph without Beam's "All input pcollections must have the same
    window": the dead letters of the parse (global window) and of the sinks (fixed windows) are
    re-windowed into one windowing before PublishDeadLetters flattens them."""
    import logging

    from apache_beam.options.pipeline_options import StandardOptions

    from pipeline import streaming
    from pipeline.options import StreamingOptions, pipeline_options
    from pipeline.params import STREAMING_PARAMS
    from spanner_writes.writers import WriterClaim

    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    options = pipeline_options(
        ["--project=build-project"] + [f"--{p.flag}={p.example}" for p in STREAMING_PARAMS], streaming=True
    )
    assert options.view_as(StandardOptions).streaming
    with caplog.at_level(logging.WARNING):
        streaming.build(
            beam.Pipeline(options=options),
            options.view_as(StreamingOptions).validated(),
            WriterClaim("job", 3, "job#g3", 2),
            project="build-project",
            deduplicate=False,
        )
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
