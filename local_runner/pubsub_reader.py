"""The local DirectRunner's Pub/Sub reader, owned by the project: pulls of up to 1,000
messages, no 30 s idle stall, and a drain.

Why: Beam's own reader (`_PubSubReadEvaluator`, BundleBasedDirectRunner) pulls at most 10
messages per bundle, so with one vote per message the whole local pipeline is capped by its
per-bundle cost (measured: about 90 single-vote messages/s reached the counts). On an idle
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
- it acknowledges what it pulled in one call before emitting it, as Beam's reader does
  (at-most-once: docs/guarantees.md, "Stopping a stream", says why, and what a SIGKILL loses);
- once `ReaderControl.drain()` is called it pulls nothing more, emits what its last pull got,
  asks not to be scheduled again and drops its watermark hold. With no hold and no pending
  input its output watermark is +infinity, which the runner propagates: every open window
  fires (as if the input had ended), the sink and the dead-letter writer finish their
  bundles, every watermark reaches +infinity and the runner ends the pipeline
  (`wait_until_finish` returns). local_runner/drain.py calls `drain()` on SIGINT and SIGTERM.

How it is installed: like local_runner/window_state.py, through
`TransformEvaluatorRegistry._test_evaluators_overrides`, keyed by `_DirectReadFromPubSub`
(what the DirectRunner replaces ReadFromPubSub with). Those names, `_PubSubReadEvaluator`
and `TransformResult` are private Beam APIs: this module is written against, and tested on,
the apache-beam version local_runner/window_state.py names (TESTED_BEAM_VERSION;
tests/test_local_reader.py fails if they change). If they are absent, `install()` logs a
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

_LOG = logging.getLogger(__name__)

try:  # private Beam names; see the module docstring
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.runners.direct.direct_runner import _DirectReadFromPubSub
    from apache_beam.runners.direct.transform_evaluator import TransformEvaluatorRegistry, _PubSubReadEvaluator
    from apache_beam.runners.direct.util import TransformResult
    from apache_beam.transforms.window import GlobalWindows

    _OVERRIDES = TransformEvaluatorRegistry._test_evaluators_overrides
    if not isinstance(_OVERRIDES, dict):
        raise AttributeError("TransformEvaluatorRegistry._test_evaluators_overrides is not a dict")
    if not hasattr(_PubSubReadEvaluator, "_get_subscriber_client"):
        raise AttributeError("_PubSubReadEvaluator._get_subscriber_client is missing")
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
        self.messages = 0  # pulled (and acknowledged) so far
        self.pulls = 0
        self._worker_sampler: Any = None  # the runner's worker thread's StateSampler
        self.window_seconds: float | None = None  # the pipeline's fixed windows, if it says

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


def message_of(received: Any) -> tuple[Timestamp, "PubsubMessage"]:
    """(publish time, Beam's PubsubMessage) of a pulled message (a raw ReceivedMessage protobuf,
    as `pull_bundle` returns them), stamped as Beam's reader does without a timestamp attribute.

    Built from the protobuf's fields directly: Beam's `PubsubMessage._from_message` of the client's
    proto-plus message, and its publish time as a datetime, cost about 180 us per message (20%
    of the local stream's time on single-vote messages, py-spy); this costs about 20 us. The
    message's publish_time is the Beam Timestamp it is stamped with."""
    message = received.message
    published = message.publish_time
    at = Timestamp(micros=published.seconds * 1_000_000 + published.nanos // 1_000)
    return at, PubsubMessage(message.data, dict(message.attributes), message.message_id, at, message.ordering_key)


_UNLIMITED_CLIENT: Any = None  # one per process: one local streaming pipeline per process


def subscriber_client() -> Any:
    """A subscriber client that takes pull responses of any size (module docstring)."""
    global _UNLIMITED_CLIENT
    if _UNLIMITED_CLIENT is None:
        from google.cloud import pubsub_v1
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
        import grpc

        emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
        _UNLIMITED_CLIENT = pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(
            channel=grpc.insecure_channel(emulator, options=[("grpc.max_receive_message_length", -1)])
        )) if emulator else pubsub_v1.SubscriberClient()
    return _UNLIMITED_CLIENT


def pull_bundle(subscription: str) -> tuple[list, int]:
    """One bundle's pull: up to PULL_MAX_MESSAGES messages, pulled with return_immediately until
    a pull comes back empty, then acknowledged in one call; (the messages in pull order, as raw
    ReceivedMessage protobufs: the client's proto-plus wrappers cost more per message than the
    rest of the read, pulls)."""
    client = subscriber_client()
    received: list = []
    pulls = 0
    while len(received) < PULL_MAX_MESSAGES:
        response = client.pull(request={"subscription": subscription, "return_immediately": True,
                                        "max_messages": PULL_MAX_MESSAGES - len(received)}, timeout=PULL_TIMEOUT_S)
        pulls += 1
        messages = type(response).pb(response).received_messages
        if not messages:
            break
        received.extend(messages)
    if received:
        client.acknowledge(request={"subscription": subscription, "ack_ids": [m.ack_id for m in received]})
    return received, pulls


class DrainablePubSubReadEvaluator(_PubSubReadEvaluator):  # type: ignore[misc,valid-type]
    """Beam's DirectRunner Pub/Sub read, with bigger pulls, no idle stall and a drain (see the
    module docstring). Subscription resolution and the client cache are Beam's."""

    control: ReaderControl = ReaderControl()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.source.timestamp_attribute:
            raise NotImplementedError("the local reader stamps messages with their publish time only")

    def _pull(self) -> list:
        """Up to PULL_MAX_MESSAGES messages, acknowledged (one call), in pull order."""
        received, pulls = pull_bundle(self._sub_name)
        self.control.add_pulled(len(received), pulls)
        return received

    def finish_bundle(self) -> TransformResult:
        control = self.control
        if control._worker_sampler is None:  # this runs on the runner's one worker thread
            control._worker_sampler = statesampler.get_current_tracker()
        received = [] if control.draining else self._pull()
        if not received:
            control.wait_for_drain(control.idle_wait_s(time.time()))
        bundles = []
        if received:
            bundle = self._evaluation_context.create_bundle(next(iter(self._outputs)))
            if self.source.with_attributes:
                # The whole pull as one element (transforms/read_votes.py says why), stamped with its
                # latest publish time; each message keeps its own in `publish_time`.
                stamped = list(map(message_of, received))
                bundle.output(GlobalWindows.windowed_value([message for _, message in stamped],
                                                           timestamp=max(at for at, _ in stamped)))
            else:
                for timestamp, message in map(message_of, received):
                    bundle.output(GlobalWindows.windowed_value(message.data, timestamp=timestamp))
            bundles.append(bundle)
        if control.draining:
            control.mark_stopped()
            # No bundle to be scheduled again, no hold: this step's watermark becomes +infinity.
            return TransformResult(self, bundles, [], None, {None: None})
        again = self._evaluation_context.create_bundle(beam.pvalue.PBegin(self._applied_ptransform.transform.pipeline))
        return TransformResult(self, bundles, [again], None, {None: Timestamp.of(time.time())})


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
    if not private_api_usable("the local Pub/Sub reader", _MISSING,
                              "Beam's reader pulls 10 messages at a time and cannot drain"):
        return None
    DrainablePubSubReadEvaluator.control = ReaderControl()
    _OVERRIDES[_DirectReadFromPubSub] = DrainablePubSubReadEvaluator
    return DrainablePubSubReadEvaluator.control


def uninstall() -> None:
    """Undoes install()."""
    if installed():
        del _OVERRIDES[_DirectReadFromPubSub]
