"""The local DirectRunner's Pub/Sub reader, owned by the project: pulls of up to 1,000
messages, no 30 s idle stall, and a drain.

Why: Beam's own reader (`_PubSubReadEvaluator`, BundleBasedDirectRunner) pulls at most 10
messages per bundle, so with one vote per message the whole local pipeline is capped by its
per-bundle cost (docs/benchmarks.md, "Measurements behind the code"). On an idle
subscription its synchronous pull blocks for its 30 s timeout, holding the wall-clock
watermark, so the last window of a burst fired up to 30 s late (upvotes.devtools.local_stream used to
publish a heartbeat every 0.5 s against it). And it cannot stop cleanly: its watermark hold
is always "now", so the pipeline never ends and no open window fires before the process does.

What: `DrainablePubSubReadEvaluator`, evaluated once per bundle like Beam's:
- it pulls synchronously with `return_immediately`, again and again, until it has
  PULL_MAX_MESSAGES (1,000) or a pull comes back empty (the Pub/Sub emulator hands out at
  most 100 messages per pull whatever is asked);
- on an empty subscription it waits IDLE_WAIT_S for the drain signal instead of blocking in
  a pull (or less: it wakes just after each end of the pipeline's fixed windows, when told
  their length), then returns with its watermark hold at the current time, so the watermark
  keeps moving and windows fire on time without a heartbeat;
- it pulls through a client whose channel takes responses of any size: against the emulator
  the Pub/Sub client's channel keeps gRPC's 4 MB receive limit, which 100 batch messages of
  500 votes exceed (measured: "Received message larger than max (5258396 vs. 4194304)", after
  which the pipeline stopped reading); the client for Pub/Sub itself has no limit already;
- it emits each pull as ONE element, the list of its messages (as the pipeline reads them, with
  attributes; transforms/read_votes.py), each message's publish time in its `publish_time`: the
  DirectRunner's cost per element exceeded parsing a single-vote message;
- it stamps each pull with its ingestion time (the wall clock, never earlier than the pull's
  latest publish time: what ParseVotes windows by) as the element's timestamp;
- with the message log (the default; local_runner/exactly_once.py, local_runner/message_log.py)
  it acknowledges nothing when it pulls: a pull's new messages are logged with their stamp
  before they are emitted, held (their ack deadlines extended), and acknowledged once every
  step of the pipeline is past the end of their window (`committed_through`: everything derived
  from them is committed); a restart first replays what the log holds unfinished. Exactly once
  under a SIGKILL (docs/guarantees.md, "Stopping a stream", lists every crash point). With
  LOG_ENV=off (for same-run comparisons only) it acknowledges each pull before emitting it, as
  Beam's reader does: at-most-once, a SIGKILL loses what was pulled and not yet written;
- once `ReaderControl.drain()` is called it pulls nothing more, emits what its last pull got,
  asks not to be scheduled again and drops its watermark hold. With no hold and no pending
  input its output watermark is +infinity, which the runner propagates: every open window
  fires (as if the input had ended), the sink and the dead-letter writer finish their
  bundles, every watermark reaches +infinity and the runner ends the pipeline
  (`wait_until_finish` returns). local_runner/drain.py calls `drain()` on SIGINT and SIGTERM.

How it is installed: like local_runner/window_state.py, through
`TransformEvaluatorRegistry._test_evaluators_overrides`, keyed by `_DirectReadFromPubSub`
(what the DirectRunner replaces ReadFromPubSub with). Those names, `_PubSubReadEvaluator`,
`TransformResult` and the evaluation context's watermark manager (`committed_through_us`) are
private Beam APIs: this module is written against, and tested on, the apache-beam version
local_runner/window_state.py names (TESTED_BEAM_VERSION; tests/test_local_reader.py and
tests/test_exactly_once.py fail if they change). If they are absent, `install()` logs a
warning and returns None: the pipeline then runs with Beam's reader and cannot drain
(local_runner/drain.py says so when stopped). One local streaming
pipeline per process: the control is a class attribute, replaced by each `install()`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import apache_beam as beam
from apache_beam.runners.worker import statesampler
from apache_beam.utils.timestamp import Timestamp

from local_runner import metrics
from local_runner.exactly_once import ExactlyOnce
from local_runner.metrics import CounterTotals
from local_runner.window_state import private_api_usable

PULL_MAX_MESSAGES = 1000
# The watermark moves at least this often on an idle subscription; an empty pull to the local
# emulator costs about a millisecond. With the window length known (ReaderControl.window_seconds),
# an idle reader also wakes just after each window end, so that the window fires then.
IDLE_WAIT_S = 0.05
WAKE_AFTER_WINDOW_END_S = 0.001
PULL_TIMEOUT_S = 30.0
# Set to "beam" to run with Beam's own reader (for a same-run comparison in the benchmarks).
READER_ENV = "UPVOTES_DIRECT_RUNNER_READER"
# Set to "off" to acknowledge on pull, without the message log (for a same-run comparison in the
# benchmarks: at-most-once, a SIGKILL loses what was pulled and not yet written).
LOG_ENV = "UPVOTES_STREAM_LOG"

_LOG = logging.getLogger(__name__)

try:  # private Beam names; see the module docstring
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.runners.direct.direct_runner import _DirectReadFromPubSub
    from apache_beam.runners.direct.transform_evaluator import TransformEvaluatorRegistry, _PubSubReadEvaluator
    from apache_beam.runners.direct.util import TransformResult
    from apache_beam.runners.direct.watermark_manager import _TransformWatermarks
    from apache_beam.transforms.window import GlobalWindows

    _OVERRIDES = TransformEvaluatorRegistry._test_evaluators_overrides
    if not isinstance(_OVERRIDES, dict):
        raise AttributeError("TransformEvaluatorRegistry._test_evaluators_overrides is not a dict")
    if not hasattr(_PubSubReadEvaluator, "_get_subscriber_client"):
        raise AttributeError("_PubSubReadEvaluator._get_subscriber_client is missing")
    if not hasattr(_TransformWatermarks, "output_watermark"):
        raise AttributeError("_TransformWatermarks.output_watermark is missing")
    _MISSING: str | None = None
except (ImportError, AttributeError) as error:  # pragma: no cover - depends on the Beam version
    _MISSING = f"{type(error).__name__}: {error}"
    _PubSubReadEvaluator = object  # type: ignore[assignment,misc]


class ReaderControl:
    """What the reader shares with whoever stops it: the drain signal and what it pulled."""

    def __init__(self) -> None:
        self._drain = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        # Emitted into the pipeline so far: new and replayed messages (a redelivery of a message held
        # or finished is not emitted again, nor counted).
        self.messages = 0
        self.pulls = 0
        self._worker_sampler: Any = None  # the runner's worker thread's StateSampler
        self.window_seconds: float | None = None  # the pipeline's fixed windows, if it says
        # Holding and acknowledging with the message log (local_runner/exactly_once.py); None:
        # each pull is acknowledged when pulled (at-most-once).
        self.once: ExactlyOnce | None = None

    def idle_wait_s(self, now: float) -> float:
        """How long an idle reader waits before it returns (with its watermark hold at the time it
        wakes): IDLE_WAIT_S, or less, to wake just after the next window end."""
        if not self.window_seconds:
            return IDLE_WAIT_S
        next_end = (now // self.window_seconds + 1) * self.window_seconds
        return min(IDLE_WAIT_S, next_end - now + WAKE_AFTER_WINDOW_END_S)

    def drain(self) -> None:
        """Pull nothing more; let the watermark reach +infinity (see the module docstring)."""
        self._drain.set()

    @property
    def draining(self) -> bool:
        return self._drain.is_set()

    @property
    def stopped(self) -> bool:
        """Whether the reader has made its last pull and dropped its watermark hold."""
        return self._stopped.is_set()

    def wait_for_drain(self, seconds: float) -> bool:
        return self._drain.wait(seconds)

    def counters(self) -> CounterTotals | None:
        """The pipeline's user counters (local_runner/metrics.py: Beam's `result.metrics()`
        loses updates locally); None before the first bundle or if Beam keeps them elsewhere."""
        return None if self._worker_sampler is None else metrics.counters(self._worker_sampler)

    def add_pulled(self, messages: int, pulls: int) -> None:
        with self._lock:
            self.messages += messages
            self.pulls += pulls

    def mark_stopped(self) -> None:
        self._stopped.set()


def message_of(received: Any) -> tuple[Timestamp, PubsubMessage]:
    """(publish time, Beam's PubsubMessage) of a pulled message (a raw ReceivedMessage protobuf,
    as `pull_bundle` returns them), stamped as Beam's reader does without a timestamp attribute.

    Built from the protobuf's fields directly: Beam's `PubsubMessage._from_message` of the client's
    proto-plus message, and its publish time as a datetime, cost the stream a fifth of its time on
    single-vote messages (docs/benchmarks.md, "Measurements behind the code"). The message's publish_time is the Beam
    Timestamp it is stamped with."""
    message = received.message
    published = message.publish_time
    at = Timestamp(micros=published.seconds * 1_000_000 + published.nanos // 1_000)
    return at, PubsubMessage(message.data, dict(message.attributes), message.message_id, at, message.ordering_key)


_UNLIMITED_CLIENT: Any = None  # one per process: one local streaming pipeline per process


def subscriber_client() -> Any:
    """A subscriber client that takes pull responses of any size (module docstring)."""
    global _UNLIMITED_CLIENT
    if _UNLIMITED_CLIENT is None:
        import grpc
        from google.cloud import pubsub_v1
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

        emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
        _UNLIMITED_CLIENT = (
            pubsub_v1.SubscriberClient(
                transport=SubscriberGrpcTransport(
                    channel=grpc.insecure_channel(emulator, options=[("grpc.max_receive_message_length", -1)])
                )
            )
            if emulator
            else pubsub_v1.SubscriberClient()
        )
    return _UNLIMITED_CLIENT


def pull_bundle(subscription: str, acknowledge: bool = True) -> tuple[list, int]:
    """One bundle's pull: up to PULL_MAX_MESSAGES messages, pulled with return_immediately until
    a pull comes back empty, then, if `acknowledge`, acknowledged in one call; (the messages in
    pull order, as raw ReceivedMessage protobufs: the client's proto-plus wrappers cost more per
    message than the rest of the read, pulls)."""
    client = subscriber_client()
    received: list = []
    pulls = 0
    while len(received) < PULL_MAX_MESSAGES:
        response = client.pull(
            request={
                "subscription": subscription,
                "return_immediately": True,
                "max_messages": PULL_MAX_MESSAGES - len(received),
            },
            timeout=PULL_TIMEOUT_S,
        )
        pulls += 1
        messages = type(response).pb(response).received_messages
        if not messages:
            break
        received.extend(messages)
    if received and acknowledge:
        client.acknowledge(request={"subscription": subscription, "ack_ids": [m.ack_id for m in received]})
    return received, pulls


def ingestion_stamp_us(received: list) -> int:
    """The ingestion time of a pull acknowledged on pull: the wall clock, never earlier than its
    latest publish time (transforms/parse_and_sum.py `ingestion_time`)."""
    latest = max(m.message.publish_time.seconds * 1_000_000 + m.message.publish_time.nanos // 1_000 for m in received)
    return max(int(time.time() * 1_000_000), latest)


def committed_through_us(evaluation_context: Any) -> int:
    """The lowest output watermark of the pipeline's steps, in microseconds: every step has
    committed everything it derived from elements stamped before it.

    Why that means "written": a step's output watermark is the minimum of its input watermark,
    its own holds and, less one microsecond, the timestamps of the bundles pending for it
    (apache_beam/runners/direct/watermark_manager.py `refresh`); a window's pane is held back by
    its GroupByKey's watermark hold until it fires, then pending in the next steps as an
    element at the window's end less one microsecond; the sinks (and the dead-letter publisher)
    commit (publish) in their bundle, before it completes. So once the lowest watermark of all
    steps is at or past a window's end, every delta row, vote state and dead letter of that
    window is committed; and a dead letter a sink emits is re-windowed at the minimum timestamp,
    which holds its consumer until it is published."""
    watermarks = evaluation_context._watermark_manager._transform_to_watermarks.values()
    return min(tw.output_watermark for tw in watermarks).micros


class DrainablePubSubReadEvaluator(_PubSubReadEvaluator):
    """Beam's DirectRunner Pub/Sub read, with bigger pulls, no idle stall and a drain (see the
    module docstring). Subscription resolution and the client cache are Beam's."""

    control: ReaderControl = ReaderControl()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.source.timestamp_attribute:
            raise NotImplementedError("the local reader stamps messages with their publish time only")

    def _stamped_pulls(self, control: ReaderControl) -> list[tuple[int, list]]:
        """This bundle's pulls as (ingestion stamp in microseconds, raw messages): first the log's
        unfinished ones (once per run), then the new messages of up to PULL_MAX_MESSAGES pulled
        (acknowledged in one call only without the log)."""
        once = control.once
        pulls = [] if once is None or once.replayed else once.replay()
        received, calls = ([], 0) if control.draining else pull_bundle(self._sub_name, acknowledge=once is None)
        if received:
            stamped = (ingestion_stamp_us(received), received) if once is None else once.take(received)
            if stamped is not None:
                pulls.append(stamped)
        elif not pulls:
            control.wait_for_drain(control.idle_wait_s(time.time()))
        control.add_pulled(sum(len(messages) for _, messages in pulls), calls)
        return pulls

    def finish_bundle(self) -> TransformResult:
        control = self.control
        if control._worker_sampler is None:  # this runs on the runner's one worker thread
            control._worker_sampler = statesampler.get_current_tracker()
        pulls = self._stamped_pulls(control)
        if control.once is not None:  # acknowledge what is committed, extend what is held
            control.once.settle(committed_through_us(self._evaluation_context), draining=control.draining)
        bundles = []
        if pulls:
            bundle = self._evaluation_context.create_bundle(next(iter(self._outputs)))
            for stamp_us, received in pulls:
                if self.source.with_attributes:
                    # The whole pull as one element (transforms/read_votes.py says why), stamped with its
                    # ingestion time; each message keeps its publish time in `publish_time`.
                    bundle.output(
                        GlobalWindows.windowed_value(
                            [message for _, message in map(message_of, received)], timestamp=Timestamp(micros=stamp_us)
                        )
                    )
                else:
                    for timestamp, message in map(message_of, received):
                        bundle.output(GlobalWindows.windowed_value(message.data, timestamp=timestamp))
            bundles.append(bundle)
        if control.draining:
            if control.once is not None:
                control.once.hold_us(None)  # every window fires now: the log is synced first
            control.mark_stopped()
            # No bundle to be scheduled again, no hold: this step's watermark becomes +infinity.
            return TransformResult(self, bundles, [], None, {None: None})
        transform = self._applied_ptransform.transform
        assert transform is not None  # an applied transform
        # Its pipeline is None here (create_bundle does not read it): Beam's PBegin annotation is too narrow.
        begin = beam.pvalue.PBegin(transform.pipeline)  # type: ignore[arg-type]
        again = self._evaluation_context.create_bundle(begin)
        # Every later pull is stamped at or after this (the clock, the last stamp, the floor).
        hold = time.time_ns() // 1_000
        if control.once is not None:
            hold = control.once.hold_us(max(hold, control.once.next_stamp_floor_us))
        return TransformResult(self, bundles, [again], None, {None: Timestamp(micros=hold)})


def installed() -> bool:
    return _MISSING is None and _OVERRIDES.get(_DirectReadFromPubSub) is DrainablePubSubReadEvaluator


def install() -> ReaderControl | None:
    """Makes DirectRunner pipelines started from now on in this process read Pub/Sub with
    DrainablePubSubReadEvaluator; returns the control of the next such pipeline, or None when
    Beam's reader stays (private names absent, or READER_ENV=beam), with a warning."""
    if os.environ.get(READER_ENV, "").lower() == "beam":
        _LOG.warning("%s=beam: Beam's own Pub/Sub reader (10 messages per pull, no drain)", READER_ENV)
        uninstall()
        return None
    if not private_api_usable(
        "the local Pub/Sub reader", _MISSING, "Beam's reader pulls 10 messages at a time and cannot drain"
    ):
        return None
    DrainablePubSubReadEvaluator.control = ReaderControl()
    _OVERRIDES[_DirectReadFromPubSub] = DrainablePubSubReadEvaluator
    return DrainablePubSubReadEvaluator.control


def uninstall() -> None:
    """Undoes install()."""
    if installed():
        del _OVERRIDES[_DirectReadFromPubSub]
