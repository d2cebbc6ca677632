"""local_runner/message_log.py and local_runner/exactly_once.py: the local stream's message log
alone, and what the reader holds and acknowledges against the real Pub/Sub emulator: a replay
with the recorded stamps, redeliveries in any order never processed twice, finished messages
acknowledged again, ack deadlines extended while held. The whole stream killed at each step is
tests/test_exactly_once.py's.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest
from google.cloud import pubsub_v1
from google.pubsub_v1.types import PubsubMessage, ReceivedMessage

from local_runner.exactly_once import ExactlyOnce, publish_us
from local_runner.message_log import (
    ACKED_KEPT_S,
    UNACKED_KEPT_S,
    LogBusy,
    LogMismatch,
    MessageLog,
    Writer,
    log_path,
    window_end_us,
)
from local_runner.pubsub_reader import pull_bundle
from tests.support.polling import wait_until
from tests.support.resources import PROJECT

WRITER = Writer("local-abc", 3, 2)
WINDOW_S = 2


def test_a_pull_survives_the_process_and_a_finished_window_leaves(tmp_path) -> None:
    path = log_path(tmp_path, "projects/p/subscriptions/s", "projects/p/instances/i/databases/d")
    assert path.name.startswith("d.s-") and path.suffix == ".sqlite"
    log = MessageLog(path)
    assert log.unfinished() is None
    log.start_run(WRITER, WINDOW_S, 32)
    log.record_pull(1_000_001, 2_000_000, b"first")
    log.record_pull(2_500_000, 4_000_000, b"second")
    log.close()  # as a kill would leave it: each commit is on disk

    log = MessageLog(path)
    unfinished = log.unfinished()
    assert unfinished is not None
    assert (
        unfinished.pulls,
        unfinished.windows,
        unfinished.writer,
        unfinished.window_seconds,
        unfinished.shards,
        unfinished.last_window_end_us,
    ) == (2, 2, WRITER, WINDOW_S, 32, 4_000_000)
    assert [p.payload for p in log.pulls()] == [b"first", b"second"]
    log.finish_windows(2_000_000, acked=["1@10"], unacked=["2@10"], now=100.0)
    assert [p.stamp_us for p in log.pulls()] == [2_500_000]
    assert log.finished(["1@10", "2@10", "3@10", "1@99"]) == {"1@10": True, "2@10": False}
    log.mark_acked(["2@10"], 101.0)
    assert log.finished(["2@10"]) == {"2@10": True}
    log.finish_windows(4_000_000, acked=[], unacked=["3@10"], now=100.0)
    assert log.unfinished() is None and log.counts() == {"pulls": 0, "done_acked": 2, "done_unacked": 1, "segments": 0}
    log.close()


def test_a_pull_whose_payload_a_power_cut_tore_is_dropped_when_the_log_opens(tmp_path) -> None:
    """Its row may reach the disk before its payload (SQLite syncs at a checkpoint of its own); such
    a pull was never synced, so nothing was written from it, nor acknowledged: Pub/Sub redelivers it."""
    log = MessageLog(tmp_path / "log.sqlite")
    log.start_run(WRITER, WINDOW_S, 32)
    log.record_pull(1_000_001, 2_000_000, b"kept" * 100)
    log.record_pull(1_500_000, 2_000_000, b"torn" * 100)
    log.record_pull(2_500_000, 4_000_000, b"lost" * 100)
    log.close()
    with open(tmp_path / "log.segments" / "2000000.seg", "r+b") as segment:
        segment.truncate(450)  # the second payload cut short
    (tmp_path / "log.segments" / "4000000.seg").write_bytes(b"\0" * 400)  # the third never written (zeros)
    log = MessageLog(tmp_path / "log.sqlite")
    assert log.dropped == 2 and [p.payload for p in log.pulls()] == [b"kept" * 100]
    assert log.counts()["segments"] == 1
    log.close()


def test_done_messages_are_kept_long_enough_to_recognise_a_redelivery(tmp_path) -> None:
    log = MessageLog(tmp_path / "log.sqlite")
    log.finish_windows(1, acked=["1@10"], unacked=["2@10"], now=0.0)
    assert log.prune(ACKED_KEPT_S - 1) == 0
    assert log.prune(ACKED_KEPT_S + 1, force=True) == 1  # an acknowledged one, long enough after
    assert log.finished(["1@10", "2@10"]) == {"2@10": False}  # kept until its redelivery is acknowledged
    assert log.prune(UNACKED_KEPT_S + 1, force=True) == 1  # or longer than Pub/Sub keeps a message
    log.close()


def test_a_log_of_version_1_opens_and_its_bare_ids_match_until_they_expire(tmp_path) -> None:
    """Version 1 kept finished messages by ID alone. Opened by this code, its rows still recognise
    a redelivery of what it finished (any publish time, as version 1 did) until they are pruned;
    what this code finishes is matched by ID and publish time."""
    log = MessageLog(tmp_path / "log.sqlite")
    log.finish_windows(1, acked=["7"], unacked=["8"], now=0.0)  # bare IDs, as version 1 wrote them
    log._db.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    log.close()
    log = MessageLog(tmp_path / "log.sqlite")
    assert log._meta()["version"] == "2"
    log.finish_windows(1, acked=["9@10"], unacked=[], now=0.0)
    assert log.finished(["7@5", "8@6", "9@10", "9@11"]) == {"7@5": True, "8@6": False, "9@10": True}
    log.mark_acked(["8@6"], ACKED_KEPT_S)
    assert log.finished(["8@6"]) == {"8@6": True}
    assert log.prune(ACKED_KEPT_S + 1, force=True) == 2  # 7 and 9@10; 8 was acknowledged later
    assert log.finished(["8@1", "7@5"]) == {"8@1": True}
    assert log.prune(2 * ACKED_KEPT_S + 1, force=True) == 1
    assert log.finished(["8@1", "7@5", "9@10"]) == {}
    log.close()


def test_one_process_per_log_and_unfinished_windows_replayed_only_under_their_settings(tmp_path) -> None:
    log = MessageLog(tmp_path / "log.sqlite")
    with pytest.raises(LogBusy, match="one `upvotes stream` per subscription"):
        MessageLog(tmp_path / "log.sqlite")
    log.start_run(WRITER, WINDOW_S, 32)
    log.record_pull(1, window_end_us(1, WINDOW_S), b"x")
    for writer, window_s, shards in (
        (Writer("local-abc", 4, 2), WINDOW_S, 32),
        (WRITER, 5, 32),
        (WRITER, WINDOW_S, 64),
    ):
        with pytest.raises(LogMismatch):
            log.start_run(writer, window_s, shards)
    log.start_run(WRITER, WINDOW_S, 32)
    log.finish_windows(2**62, [], [], 0.0)
    log.start_run(Writer("local-def", 1, 2), 10, 32)  # nothing unfinished: any settings
    log.close()
    MessageLog(tmp_path / "log.sqlite").close()  # the lock went with the log


class RecordingSubscriber:
    """Records acknowledgements (no Pub/Sub: the messages are built by hand)."""

    def __init__(self) -> None:
        self.acked: list[str] = []

    def acknowledge(self, request: dict) -> None:
        self.acked.extend(request["ack_ids"])

    def modify_ack_deadline(self, request: dict) -> None:
        pass


def received(message_id: str, publish_s: int, ack_id: str):
    """A raw ReceivedMessage protobuf, as the reader pulls them."""
    message = PubsubMessage.pb()(data=b"{}", message_id=message_id)
    message.publish_time.FromSeconds(publish_s)
    return ReceivedMessage.pb()(ack_id=ack_id, message=message)


def test_a_restarted_emulators_reused_message_id_is_a_new_message_and_a_redelivery_is_not(tmp_path) -> None:
    """A restarted Pub/Sub emulator numbers its messages from 1 again: a new message with the ID of
    one the log finished (a later publish time) is processed, where the ID alone dropped it
    (acknowledged as a redelivery, its votes lost); a redelivery (same ID and publish time) is not."""
    subscriber = RecordingSubscriber()
    log = MessageLog(tmp_path / "log.sqlite")
    once = ExactlyOnce(log, subscriber, "projects/p/subscriptions/s", WINDOW_S)
    first = once.take([received("1", 1_000, "a1"), received("2", 1_000, "a2")])
    assert first is not None
    once.settle(2**62)
    assert subscriber.acked == ["a1", "a2"] and log.counts()["done_acked"] == 2

    again = once.take([received("1", 1_000, "b1"), received("1", 2_000, "c1"), received("2", 2_000, "c2")])
    assert again is not None
    assert [(m.message.message_id, m.message.publish_time.seconds) for m in again[1]] == [("1", 2_000), ("2", 2_000)]
    assert once.counters.redeliveries_finished == 1 and subscriber.acked[2:] == ["b1"]
    once.settle(2**62)
    assert sorted(subscriber.acked[3:]) == ["c1", "c2"] and log.counts()["done_acked"] == 4
    log.close()


def test_window_ends_are_the_pipelines_fixed_windows() -> None:
    assert window_end_us(0, 2) == 2_000_000
    assert window_end_us(1_999_999, 2) == 2_000_000
    assert window_end_us(2_000_000, 2) == 4_000_000


# --- holding and acknowledging, on the Pub/Sub emulator ----------------------------------------


@pytest.fixture
def subscription(emulator_env):
    """A new topic and a subscription with a 10 s ack deadline: (publisher, topic, subscriber, subscription)."""
    tag = uuid.uuid4().hex[:8]
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic, sub = publisher.topic_path(PROJECT, f"log-{tag}"), subscriber.subscription_path(PROJECT, f"log-{tag}-sub")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, "ack_deadline_seconds": 10})
    yield publisher, topic, subscriber, sub
    subscriber.close()


def publish(publisher, topic: str, count: int, tag: str) -> None:
    for future in [publisher.publish(topic, f"{tag}{i}".encode()) for i in range(count)]:
        future.result(timeout=60)


def pull_all(sub: str, count: int) -> list:
    received: list = []

    def more() -> bool:
        received.extend(pull_bundle(sub, acknowledge=False)[0])
        return len(received) >= count

    wait_until(more, 30, f"{count} messages to be pulled", poll_s=0.2)
    return received


def test_a_replay_keeps_the_stamps_and_redeliveries_in_any_order_are_held_then_acknowledged(
    subscription, tmp_path
) -> None:
    publisher, topic, subscriber, sub = subscription
    publish(publisher, topic, 30, "m")
    log = MessageLog(tmp_path / "log.sqlite")
    log.start_run(WRITER, WINDOW_S, 32)
    once = ExactlyOnce(log, subscriber, sub, WINDOW_S, ack_deadline_s=10)
    received = pull_all(sub, 30)
    first = once.take(received[:20])
    second = once.take(received[20:])
    assert first is not None and second is not None
    stamp_us, messages = first
    assert stamp_us >= max(map(publish_us, received[:20])) and second[0] > stamp_us
    assert once.take(received) is None and once.counters.redeliveries_held == 30  # held: never twice
    log.close()  # killed: nothing acknowledged, the log keeps both pulls

    # The redeliveries come whenever the dead run's deadlines end (here at once), in any order.
    subscriber.modify_ack_deadline(
        request={"subscription": sub, "ack_ids": [m.ack_id for m in received], "ack_deadline_seconds": 0}
    )
    log = MessageLog(tmp_path / "log.sqlite")
    unfinished = log.unfinished()
    assert unfinished is not None
    restarted = ExactlyOnce(log, subscriber, sub, WINDOW_S, floor_us=unfinished.last_window_end_us, ack_deadline_s=10)
    replayed = restarted.replay()
    assert [(stamp, [m.message.message_id for m in batch]) for stamp, batch in replayed] == [
        (stamp_us, [m.message.message_id for m in messages]),
        (second[0], [m.message.message_id for m in second[1]]),
    ]
    redelivered = pull_all(sub, 30)
    random.Random(7).shuffle(redelivered)
    for start in range(0, 30, 7):
        assert restarted.take(redelivered[start : start + 7]) is None  # held with the replay, not processed
    assert restarted.next_stamp_floor_us >= unfinished.last_window_end_us
    restarted.settle(second[0] // 1_000_000 * 1_000_000 + 10 * WINDOW_S * 1_000_000)  # every window written
    assert restarted.counters.acknowledged == 30 and restarted.holding == 0
    assert log.unfinished() is None and log.counts()["done_acked"] == 30
    assert pull_bundle(sub, acknowledge=False)[0] == []  # acknowledged with the redeliveries' ack IDs
    log.close()


def test_a_finished_message_redelivered_is_acknowledged_again_and_not_processed(subscription, tmp_path) -> None:
    publisher, topic, subscriber, sub = subscription
    publish(publisher, topic, 5, "f")
    log = MessageLog(tmp_path / "log.sqlite")
    once = ExactlyOnce(log, subscriber, sub, WINDOW_S, ack_deadline_s=10)
    received = pull_all(sub, 5)
    once.take(received)
    log.close()  # killed after the window was written, before its acknowledgement
    subscriber.modify_ack_deadline(
        request={"subscription": sub, "ack_ids": [m.ack_id for m in received], "ack_deadline_seconds": 0}
    )
    log = MessageLog(tmp_path / "log.sqlite")
    restarted = ExactlyOnce(log, subscriber, sub, WINDOW_S, ack_deadline_s=10)
    restarted.replay()
    restarted.settle(2**62)  # the replay finds the window written before the redeliveries come
    assert log.counts() == {"pulls": 0, "done_acked": 0, "done_unacked": 5, "segments": 0}
    assert restarted.take(pull_all(sub, 5)) is None
    assert restarted.counters.redeliveries_finished == 5 and log.counts()["done_acked"] == 5
    assert pull_bundle(sub, acknowledge=False)[0] == []
    log.close()


def test_held_messages_ack_deadlines_are_extended(subscription, tmp_path) -> None:
    """Two windows held past the subscription's 10 s deadline: the one whose deadline was extended
    is not redelivered, the other is (and is held, not processed)."""
    publisher, topic, subscriber, sub = subscription
    publish(publisher, topic, 10, "e")
    clock, monotonic = [time.time()], [0.0]
    log = MessageLog(tmp_path / "log.sqlite")
    once = ExactlyOnce(
        log, subscriber, sub, WINDOW_S, ack_deadline_s=10, clock=lambda: clock[0], monotonic=lambda: monotonic[0]
    )
    received = pull_all(sub, 10)
    once.take(received[:5])  # due in 5 s (half the deadline)
    clock[0] += 2 * WINDOW_S
    monotonic[0] = 100.0
    once.take(received[5:])  # another window, due much later
    monotonic[0] = 6.0
    once.settle(0)  # nothing written yet; the first window's deadlines are due
    assert once.counters.extended == 5
    time.sleep(11)
    redelivered = pull_bundle(sub, acknowledge=False)[0]
    assert sorted(m.message.message_id for m in redelivered) == sorted(m.message.message_id for m in received[5:])
    assert once.take(redelivered) is None and once.holding == 10
    once.settle(2**62)
    assert once.counters.acknowledged == 10 and pull_bundle(sub, acknowledge=False)[0] == []
    log.close()
