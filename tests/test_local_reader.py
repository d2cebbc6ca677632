"""local_runner/pubsub_reader.py and local_runner/metrics.py on the real Pub/Sub emulator, in
this process's BundleBasedDirectRunner: pulls of up to 1,000 messages, all acknowledged; a
drain that fires every open window and ends the pipeline; windows firing on an idle
subscription; the user counters Beam's own `result.metrics()` loses.

These tests are also the fence around the private Beam API the two modules use: they fail if
Beam's DirectRunner changes underneath them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import trigger, window
from google.api_core import exceptions
from google.cloud import pubsub_v1

from local_runner import pubsub_reader
from local_runner.pubsub_reader import IDLE_WAIT_S, PULL_MAX_MESSAGES, WAKE_AFTER_WINDOW_END_S, ReaderControl
from tests.support.polling import wait_until
from tests.support.resources import PROJECT

_BUNDLES: list[int] = []  # the element count of every bundle RecordBundles saw
_OUTPUT: list = []  # what a pipeline emitted (this process runs it)


def _collect(element) -> None:
    _OUTPUT.append(element)


class RecordBundles(beam.DoFn):
    def start_bundle(self) -> None:
        self._n = 0

    def process(self, message):
        self._n += 1
        Metrics.counter("test", "messages").inc()
        yield message

    def finish_bundle(self) -> None:
        _BUNDLES.append(self._n)


@pytest.fixture
def reader() -> Iterator[ReaderControl]:
    control = pubsub_reader.install()
    assert control is not None and pubsub_reader.installed()
    try:
        yield control
    finally:
        pubsub_reader.uninstall()


@pytest.fixture
def subscription(emulator_env) -> tuple[str, str]:
    """A new topic and subscription: (topic path, subscription path)."""
    tag = uuid.uuid4().hex[:8]
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic, sub = (
        publisher.topic_path(PROJECT, f"reader-{tag}"),
        subscriber.subscription_path(PROJECT, f"reader-{tag}-sub"),
    )
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, "ack_deadline_seconds": 60})
    subscriber.close()
    return topic, sub


def publish(topic: str, count: int, data: Callable[[int], bytes] = lambda i: b"%d" % i) -> None:
    publisher = pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(max_messages=1000))
    for future in [publisher.publish(topic, data(i)) for i in range(count)]:
        future.result(timeout=60)


def streaming_pipeline() -> beam.Pipeline:
    options = PipelineOptions([f"--project={PROJECT}"], runner="BundleBasedDirectRunner")
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(options=options)


def finish(result, timeout_s: float = 60) -> None:
    """wait_until_finish, but failing the test instead of hanging it."""
    waiter = threading.Thread(target=result.wait_until_finish, daemon=True)
    waiter.start()
    waiter.join(timeout_s)
    assert not waiter.is_alive(), f"the pipeline did not end within {timeout_s:.0f} s of the drain"


def remaining(subscription: str) -> int:
    subscriber = pubsub_v1.SubscriberClient()
    try:
        response = subscriber.pull(
            request={"subscription": subscription, "max_messages": 1000, "return_immediately": True}, timeout=30
        )
        return len(response.received_messages)
    finally:
        subscriber.close()


def read_and_drain(reader, sub: str, count: int):
    """Runs a pipeline recording its bundles (_BUNDLES) until `count` messages are read, then
    drains it; its result."""
    _BUNDLES.clear()
    pipeline = streaming_pipeline()
    pipeline | beam.io.ReadFromPubSub(subscription=sub) | beam.ParDo(RecordBundles())
    result = pipeline.run()
    wait_until(lambda: sum(_BUNDLES) >= count, 60, f"{count:,} messages to be read", poll_s=0.1)
    reader.drain()
    finish(result)
    return result


def test_pulls_of_more_than_grpcs_4_mb_default_are_read_whole(reader, subscription):
    """250 messages of 52 kB: one emulator pull of 100 is 5.2 MB, past the 4 MB the Pub/Sub
    client's emulator channel accepts. Before, that pull failed ("Received message larger than
    max") and the pipeline stopped reading: `make demo`'s burst of 500-vote messages hit it."""
    topic, sub = subscription
    publish(topic, 250, lambda i: b"%06d" % i + b"x" * 52_000)
    read_and_drain(reader, sub, 250)
    assert sum(_BUNDLES) == 250 == reader.messages and remaining(sub) == 0


def test_bundles_of_up_to_1000_messages_every_one_acknowledged_and_counted(reader, subscription):
    topic, sub = subscription
    publish(topic, 2_500)
    result = read_and_drain(reader, sub, 2_500)

    assert sum(_BUNDLES) == 2_500 == reader.messages
    assert max(_BUNDLES) == PULL_MAX_MESSAGES  # not Beam's 10
    assert reader.pulls >= 25  # the emulator hands out at most 100 per pull
    assert remaining(sub) == 0  # every message was acknowledged

    # Beam's own metrics keep only each step's first bundle (local_runner/metrics.py): if
    # this starts to fail, Beam fixed it and the workaround must go.
    [beam_count] = [c.committed for c in result.metrics().query()["counters"] if c.key.metric.name == "messages"]
    assert beam_count == _BUNDLES[0] < 2_500
    assert reader.counters()[("test", "messages")] == 2_500


def test_a_drain_fires_every_open_window_and_ends_the_pipeline(reader, subscription):
    """An hour-long window would fire in an hour; after drain() it fires at once, whole."""
    topic, sub = subscription
    _OUTPUT.clear()
    pipeline = streaming_pipeline()
    (
        pipeline
        | beam.io.ReadFromPubSub(subscription=sub)
        | beam.Map(lambda data: (int(data) % 3, 1))
        | beam.WindowInto(
            window.FixedWindows(3600),
            trigger=trigger.AfterWatermark(),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.CombinePerKey(sum)
        | beam.Map(_collect)
    )
    result = pipeline.run()
    publish(topic, 300)
    wait_until(lambda: reader.messages >= 300, 60, "300 messages to be pulled", poll_s=0.1)
    assert _OUTPUT == []  # the window is open
    reader.drain()
    started = time.monotonic()
    finish(result)
    assert sorted(_OUTPUT) == [(0, 100), (1, 100), (2, 100)]
    assert reader.stopped
    print(
        f"\ndrain: the hour-long window fired and the pipeline ended {time.monotonic() - started:.1f} s after drain()"
    )


def test_windows_fire_on_an_idle_subscription_without_a_heartbeat(reader, subscription):
    """Beam's reader blocks 30 s in a pull on an idle subscription, holding the watermark; this
    one returns at once and waits for the drain signal instead."""
    topic, sub = subscription
    _OUTPUT.clear()
    pipeline = streaming_pipeline()
    (
        pipeline
        | beam.io.ReadFromPubSub(subscription=sub)
        | beam.Map(lambda _: ("all", 1))
        # Stamped on arrival (the publish time may be behind the reader's watermark).
        | beam.Map(lambda kv: window.TimestampedValue(kv, time.time()))
        | beam.WindowInto(
            window.FixedWindows(1),
            trigger=trigger.AfterWatermark(),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.CombinePerKey(sum)
        | beam.Map(_collect)
    )
    result = pipeline.run()
    try:
        wait_until(lambda: reader.pulls > 0, 60, "the first pull", poll_s=0.1)
        publish(topic, 5)
        published = time.monotonic()
        took = wait_until(
            lambda: sum(n for _, n in _OUTPUT) == 5, 10, "the window to fire with no message after it", poll_s=0.1
        )
    finally:
        reader.drain()
        finish(result)
    print(f"\nidle subscription: the 1 s window fired {took:.1f} s after the last publish")
    assert time.monotonic() - published < 10


def test_install_falls_back_without_beams_private_api(monkeypatch, caplog):
    monkeypatch.setattr(pubsub_reader, "_MISSING", "AttributeError: gone")
    with caplog.at_level(logging.WARNING, logger=pubsub_reader.__name__):
        assert pubsub_reader.install() is None
    assert "cannot drain" in caplog.text
    monkeypatch.undo()
    assert not pubsub_reader.installed()


def test_beams_reader_on_request(monkeypatch, caplog, reader):
    monkeypatch.setenv(pubsub_reader.READER_ENV, "beam")
    with caplog.at_level(logging.WARNING, logger=pubsub_reader.__name__):
        assert pubsub_reader.install() is None
    assert not pubsub_reader.installed() and "no drain" in caplog.text


def test_the_reader_refuses_a_timestamp_attribute(reader, subscription):
    _, sub = subscription
    pipeline = streaming_pipeline()
    pipeline | beam.io.ReadFromPubSub(subscription=sub, timestamp_attribute="ts")
    with pytest.raises(Exception, match="publish time only"):
        pipeline.run().wait_until_finish()


def test_a_pull_error_is_raised_not_swallowed(reader, emulator_env):
    """A subscription that does not exist fails the pipeline (nothing pulled, nothing acknowledged)."""
    pipeline = streaming_pipeline()
    pipeline | beam.io.ReadFromPubSub(subscription=f"projects/{PROJECT}/subscriptions/missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(exceptions.NotFound):
        pipeline.run().wait_until_finish()


def test_an_idle_reader_wakes_just_after_each_window_end_when_it_knows_the_windows() -> None:
    control = ReaderControl()
    assert control.idle_wait_s(100.0) == IDLE_WAIT_S  # windows unknown: the plain idle wait
    control.window_seconds = 2
    assert control.idle_wait_s(101.99) == pytest.approx(0.01 + WAKE_AFTER_WINDOW_END_S)
    assert control.idle_wait_s(100.5) == IDLE_WAIT_S  # the next end is further than the plain wait
    for now in (99.0, 101.9999, 102.0, 102.03):
        assert 0 < control.idle_wait_s(now) <= IDLE_WAIT_S
        woken = now + control.idle_wait_s(now)
        # Never sleeping through a window end by more than the wake margin.
        assert woken - (now // 2 + 1) * 2 <= WAKE_AFTER_WINDOW_END_S + 1e-9
