"""Publishing vote events to Pub/Sub, with the ledger of what they must add up to.

Publishing goes through the client's batching (1,000 messages or 50 ms per batch, the
fastest setting measured against the emulator), keeps at most MAX_PENDING publish
futures alive so memory stays flat for any number of events, optionally paces to a
rate, and counts failed publishes instead of raising.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import orjson
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.publisher.futures import Future

# How events become messages is the contract's (schemas/contract.py); Message and batch_messages
# are imported here for publishing, not re-defined.
from schemas.contract import Message, batch_messages, event_attributes, parse_vote
from schemas.records import Rejected
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.progress import progress_bar
from upvotes.devtools.workload import (
    DEFAULT_BATCH_SIZE,
    RealTrafficWorkload,
    VoteStateWorkload,
    Workload,
    generate,
    invalid_payloads,
)

LOG = logging.getLogger(__name__)
BATCH_SETTINGS = pubsub_v1.types.BatchSettings(max_messages=1000, max_latency=0.05)
MAX_PENDING = 5000  # publish futures kept alive: five full client batches in flight
T = TypeVar("T")


@dataclass(frozen=True)
class PublishReport:
    """published: events in messages Pub/Sub accepted, invalid ones included; messages: how many
    messages carried them; invalid: deliberately invalid messages sent (publish_messages does not
    look inside messages and reports 0); failed: messages whose publish raised."""

    published: int
    invalid: int
    failed: int
    seconds: float
    messages: int = 0

    @property
    def events_per_s(self) -> float:
        return self.published / self.seconds if self.seconds > 0 else 0.0


class _Pacer:
    """Spaces events 1/rate apart on average, sleeping only once 2 ms ahead: smooth, no bursts."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = time.monotonic()

    def wait(self, events: int = 1) -> None:
        self._next += self._interval * events
        ahead = self._next - time.monotonic()
        if ahead > 0.002:
            time.sleep(ahead)
        elif ahead < -0.1:
            self._next -= ahead  # fell behind (a slow publish): resume the pace, don't burst to catch up


def publish_message(
    client: pubsub_v1.PublisherClient, topic_path: str, data: bytes, attributes: Mapping[str, str]
) -> Future:
    """`client.publish` of one message with these attributes (its `**attrs`)."""
    # mypy would also match **attributes to publish's ordering_key, retry and timeout.
    return client.publish(topic_path, data, **attributes)  # type: ignore[arg-type]


def publish_messages(
    topic_path: str,
    messages: Iterable[Message | tuple[bytes, dict[str, str]]],
    rate: float | None = None,
    total: int | None = None,
    progress: bool = True,
) -> PublishReport:
    """Publishes messages (a (data, attributes) pair is one event) and waits for every one;
    failures are counted, not raised. `rate` and `total` are in events."""
    if rate is not None and rate <= 0:
        raise ValueError("rate must be positive")
    client = pubsub_v1.PublisherClient(batch_settings=BATCH_SETTINGS)
    pacer = _Pacer(rate) if rate else None
    pending: deque[tuple[Future, int]] = deque()
    failed = failed_events = 0

    def settle_oldest() -> None:
        nonlocal failed, failed_events
        future, events = pending.popleft()
        error = future.exception()
        if error is not None:
            failed += 1
            failed_events += events
            if failed == 1:
                LOG.warning("publishing to %s failed (further failures are only counted): %s", topic_path, error)

    start = time.monotonic()
    sent = sent_events = 0
    try:
        with progress_bar(total, "publish", unit="events", enabled=progress) as bar:
            for message in messages:
                data, attributes = message[0], message[1]
                events = message[2] if len(message) > 2 else 1
                if pacer:
                    pacer.wait(events)
                pending.append((publish_message(client, topic_path, data, attributes), events))
                sent += 1
                sent_events += events
                bar.update(events)
                if len(pending) > MAX_PENDING:
                    settle_oldest()
            while pending:
                settle_oldest()
    finally:
        client.stop()
    return PublishReport(
        published=sent_events - failed_events,
        invalid=0,
        failed=failed,
        seconds=time.monotonic() - start,
        messages=sent - failed,
    )


def _interleave(items: Iterator[T], extras: list[T], count: int) -> Iterator[T]:
    """`items` (`count` of them) with `extras` spread evenly among them."""
    placed = 0
    for index, item in enumerate(items):
        while placed < len(extras) and (placed + 1) * count // (len(extras) + 1) <= index:
            yield extras[placed]
            placed += 1
        yield item
    yield from extras[placed:]


def publish_workload(
    topic_path: str,
    workload: Workload | VoteStateWorkload | RealTrafficWorkload,
    ledger_path: str | None = None,
    rate: float | None = None,
    progress: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    ledger: Ledger | None = None,
) -> tuple[PublishReport, Ledger]:
    """Publishes a generated workload in batches of `batch_size` events, its invalid messages
    (one each) spread evenly among them; the ledger of what was published, added to `ledger`
    when given (a workload published after another on the same posts)."""
    ledger = Ledger() if ledger is None else ledger

    def valid_events() -> Iterator[dict[str, Any]]:
        for event in generate(workload):
            ledger.add(event)
            yield event

    batches = batch_messages(valid_events(), batch_size)
    invalid = [Message(payload, {}) for payload in invalid_payloads(workload.invalid, workload.seed)]
    ledger.add_invalid(len(invalid))
    messages = _interleave(batches, invalid, -(-workload.events // batch_size))
    report = publish_messages(topic_path, messages, rate, workload.events + workload.invalid, progress)
    if ledger_path:
        ledger.save(ledger_path)
    return replace(report, invalid=len(invalid)), ledger


def publish_file(
    topic_path: str,
    path: str,
    ledger_path: str | None = None,
    rate: float | None = None,
    progress: bool = True,
) -> tuple[PublishReport, Ledger]:
    """Publishes each line of a JSON-lines file as it is, without its line break, one message each.

    Lines that parse_vote rejects are published too (they exercise the dead-letter path)
    and counted as invalid; accepted ones go into the ledger and get the attributes of
    schemas.contract.event_attributes (event_id, event_time). Empty lines are skipped: Pub/Sub refuses an empty message.
    """

    ledger = Ledger()

    def messages() -> Iterator[Message]:
        with open(path, "rb") as lines:
            for line in lines:
                data = line.rstrip(b"\r\n")
                if not data:
                    continue
                vote = parse_vote(data, None, publish_time_s=time.time())
                if not isinstance(vote, Rejected):
                    ledger.add_vote(vote)
                    yield Message(data, event_attributes(orjson.loads(data)))
                else:
                    ledger.add_invalid()
                    yield Message(data, {})

    with open(path, "rb") as lines:
        total = sum(1 for line in lines if line.rstrip(b"\r\n"))
    report = publish_messages(topic_path, messages(), rate, total, progress)
    if ledger_path:
        ledger.save(ledger_path)
    return replace(report, invalid=ledger.invalid), ledger
