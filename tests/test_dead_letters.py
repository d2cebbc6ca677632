"""Dead-letter re-drive on the emulators: a delta row dead-lettered by an injected permanent
failure is replayed twice and counted once, and so is a batch of vote states; a rejected vote is
replaced by its corrected line, published once; nothing is acknowledged before its replay succeeded."""
from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions
from google.cloud import pubsub_v1

from schemas.counters import Counts
from schemas.records import FailedVoteStates, PostDelta, PostUser, Rejected
from schemas.vote_states import LatestVote
from schemas.voter_sketch import sketch_of
from spanner_store.deltas import write_new_deltas
from spanner_store.reads import exact_counts
from spanner_store.votes import apply_all_vote_states
from transforms.dead_letter import PublishDeadLetters, to_dead_letter
from transforms.spanner_sink import WriteDeltaRows
from upvotes.cli import main
from upvotes.operations.dead_letters import execute_replay, plan_replay, pull_dead_letters, release

HOUR = 1_795_312_800


def kept(stack) -> str:
    return f"projects/{stack.project}/subscriptions/{stack.dead_letter_subscription_id}"


def dead_letters(stack, capsys, action: str, *extra: str) -> list[dict]:
    code = main(["dead-letters", action, "--project", stack.project, "--dead-letter-topic", stack.dead_letter_topic,
                 *extra])
    assert code == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_dead_lettered_delta_replayed_twice_is_counted_once(stack, database, flaky_sink, capsys) -> None:
    created = flaky_sink(fail_before=1.0, error=exceptions.PermissionDenied)  # permanent: never retried
    deltas = [PostDelta.of(f"dl-{i}", HOUR, f"dl-writer:{i}:0", upvotes=3 + i, shares=1, events=4 + i, voters=sketch_of([f"v{i}", "both"]))
              for i in range(3)]
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
    report, still_held = execute_replay(plan_replay(held, {}), lambda d: tuple(write_new_deltas(database, [d])),
                                        lambda states: (0, 0),
                                        lambda v: None, ack=lambda letters: None)
    assert report.deltas_written == 3
    release(subscriber, kept(stack), held)

    # Second replay, through the command: the same rows collide, nothing is added, all acknowledged.
    (second,) = dead_letters(stack, capsys, "replay", "--instance", stack.instance, "--database", stack.database)
    assert (second["deltas_written"], second["deltas_already_written"], second["acknowledged"]) == (0, 3, 3)
    assert [t.counts.upvotes for t in exact_counts(database, [d.post_id for d in deltas])] == [3, 4, 5]
    assert [t.unique_voters for t in exact_counts(database, [d.post_id for d in deltas], unique=True)] == [2, 2, 2]
    assert dead_letters(stack, capsys, "show")[0]["shown"] == 0


def test_a_rejected_vote_is_replaced_by_its_corrected_line_once(stack, capsys, tmp_path) -> None:
    publisher = pubsub_v1.PublisherClient()
    bad = b'{"post_id": "fixed-post", "counter": "upvotes", "delta": "one", "event_id": "e-fix-1"}'
    message = to_dead_letter(Rejected(bad, {"event_id": "e-fix-1"}, "bad_field: delta is not an integer"))
    publisher.publish(f"projects/{stack.project}/topics/{stack.dead_letter_topic}", message.data,
                      **message.attributes).result(timeout=30)
    corrected = tmp_path / "corrected.jsonl"
    corrected.write_text('{"post_id": "fixed-post", "counter": "upvotes", "delta": 1, "event_id": "e-fix-1"}\n')
    votes_sub = f"projects/{stack.project}/subscriptions/{stack.subscription}"
    subscriber = pubsub_v1.SubscriberClient()

    replay = ["replay", "--instance", stack.instance, "--database", stack.database,
              "--corrected-votes", str(corrected), "--topic", stack.topic]
    (first,) = dead_letters(stack, capsys, *replay)
    assert (first["votes_published"], first["acknowledged"]) == (1, 1)
    received = subscriber.pull(request={"subscription": votes_sub, "max_messages": 10}, timeout=30).received_messages
    assert [json.loads(r.message.data)["delta"] for r in received] == [1]
    assert received[0].message.attributes["event_id"] == "e-fix-1"
    subscriber.acknowledge(request={"subscription": votes_sub, "ack_ids": [r.ack_id for r in received]})

    (again,) = dead_letters(stack, capsys, *replay)  # its dead letter is gone: nothing to replace
    assert (again["votes_published"], again["acknowledged"]) == (0, 0)


def test_a_corrected_line_that_would_be_rejected_again_is_refused(stack, capsys, tmp_path) -> None:
    corrected = tmp_path / "still-bad.jsonl"
    corrected.write_text('{"post_id": "x", "counter": "likes", "delta": 1, "event_id": "e-2"}\n')
    code = main(["dead-letters", "replay", "--project", stack.project, "--dead-letter-topic", stack.dead_letter_topic,
                 "--instance", stack.instance, "--database", stack.database, "--corrected-votes", str(corrected),
                 "--topic", stack.topic])
    assert code == 2 and "would be rejected again" in capsys.readouterr().err


def test_dead_lettered_vote_states_replayed_twice_move_each_count_once(stack, database, capsys) -> None:
    """A batch the vote-state sink could never apply (transforms/vote_state_sink.py) is applied by the
    replay through the sink's own path; a second replay (its acknowledgement lost) changes nothing."""
    states = ((PostUser("dl-states", "a"), LatestVote("up", 1, "e1", HOUR, 2, True)),
              (PostUser("dl-states", "b"), LatestVote("down", 1, "e2", HOUR, 1, True)))
    message = to_dead_letter(FailedVoteStates(states, "spanner_apply_failed: test"))
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(f"projects/{stack.project}/topics/{stack.dead_letter_topic}", message.data,
                      **message.attributes).result(timeout=30)
    assert dead_letters(stack, capsys, "show")[0]["backlog_by_reason"] == {"vote_states/spanner_apply_failed": 1}

    subscriber = pubsub_v1.SubscriberClient()
    held, _ = pull_dead_letters(subscriber, kept(stack), 10)
    report, _ = execute_replay(plan_replay(held, {}), lambda d: (0, 0),
                               lambda s: tuple(apply_all_vote_states(database, s))[:2], lambda v: None,
                               ack=lambda letters: None)  # applied, but the acknowledgement is lost
    assert (report.states_applied, report.states_already_applied) == (2, 0)
    release(subscriber, kept(stack), held)

    (second,) = dead_letters(stack, capsys, "replay", "--instance", stack.instance, "--database", stack.database)
    assert (second["states_applied"], second["states_already_applied"], second["acknowledged"]) == (0, 2, 1)
    assert exact_counts(database, ["dl-states"])[0].counts == Counts(upvotes=1, downvotes=1)
