"""What the local reader holds, and when it acknowledges: exactly once under a kill.

The reader (local_runner/pubsub_reader.py) pulls without acknowledging and hands each pull here
(`take`), which

1. drops what it already has: a redelivery of a message it holds (its newer ack ID is kept: the
   older one expired), or of a finished one (acknowledged again at once, never processed twice),
   each known by its `delivery_key`;
2. stamps the rest with their ingestion time: the wall clock, never earlier than the latest
   publish time among them (transforms/parse_and_sum.py `ingestion_time`), than the previous
   stamp, or than the end of the last window a dead run left unfinished (`floor_us`), so a
   live message never shares a window with a replayed one;
3. records them in the message log (local_runner/message_log.py) with that stamp, and only then
   lets the reader emit them, stamped so (ParseVotes windows them by it); the log is forced to
   the disk before the reader's watermark hold passes the end of their window (`hold_us`), so
   before any row derived from them can be written;
4. holds their ack IDs under the window the stamp falls in, extending their ack deadlines while
   it holds them (`settle`: every half deadline, to EXTEND_TO_S).

`settle(done_through_us)` is called by the reader after each bundle with the lowest output
watermark of the pipeline's steps: every step at or past a window's end has committed all it
derived from that window's pulls (the sinks' delta rows and vote states, the dead letters
published; local_runner/pubsub_reader.py `committed_through` says why). Those windows'
messages are acknowledged (one call), then their pulls leave the log and their IDs are kept as
done, in one transaction.

A restart (`replay`) first emits the log's unfinished pulls, each with its recorded stamp, under
the writer that wrote them (local_runner/streaming.py keeps its generation and key format): every
pane of an unfinished window is recomputed from the same messages with the same stamps, so its
delta keys and contents are the ones already written, which the sink finds and does not write
again (spanner_writes/deltas.py `write_new_deltas`); vote states are applied against the stored
ones, so applying them again moves nothing. Their redeliveries, whenever they come and in any
order, are held with them or acknowledged, never processed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from google.pubsub_v1.types import PullResponse

from local_runner.message_log import MessageLog, window_end_us

_LOG = logging.getLogger(__name__)
_PULL_RESPONSE = PullResponse.pb()  # the raw protobuf class: the proto-plus wrappers cost per message
# Held messages' ack deadlines are set this far ahead each time they are extended (Pub/Sub allows
# up to 600 s), when half of what is left of the previous one has passed.
EXTEND_TO_S = 60
# When a drain starts the reader is not scheduled again, and the last windows are acknowledged
# only once the pipeline has ended: their deadlines are extended this far, longer than any drain.
EXTEND_FOR_DRAIN_S = 600
ACK_CHUNK = 1000  # ack IDs per acknowledge or modify_ack_deadline call


def publish_us(received: Any) -> int:
    published = received.message.publish_time
    return published.seconds * 1_000_000 + published.nanos // 1_000


def delivery_key(received: Any) -> str:
    """What names one published message across its redeliveries: its ID and its publish time (a
    redelivery keeps both). The ID alone is not enough: a restarted Pub/Sub emulator numbers its
    messages from 1 again, and a new message taken for a finished one would be dropped."""
    return f"{received.message.message_id}@{publish_us(received)}"


@dataclass
class HeldWindow:
    """The messages of one window, held unacknowledged until the window is committed."""

    due: float  # (monotonic) when their ack deadlines must next be extended
    ack_ids: dict[str, str | None] = field(default_factory=dict)  # delivery key -> ack ID (None: replayed)


@dataclass
class OnceCounters:
    held: int = 0  # messages held now
    replayed_pulls: int = 0
    replayed_messages: int = 0
    redeliveries_held: int = 0  # redeliveries of held messages, not processed again
    redeliveries_finished: int = 0  # redeliveries of finished messages, acknowledged again
    acknowledged: int = 0
    extended: int = 0  # ack deadlines extended
    ack_failures: int = 0  # acknowledgements that could not be sent (their redelivery is acknowledged)


class ExactlyOnce:
    """The reader's holding and acknowledging (see the module docstring). Used by the runner's one
    worker thread while the pipeline runs, and by the main thread once it has ended (`finish`)."""

    def __init__(
        self,
        log: MessageLog,
        subscriber: Any,
        subscription: str,
        window_seconds: int,
        floor_us: int = 0,
        ack_deadline_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self._subscriber = subscriber
        self._subscription = subscription
        self._window_seconds = window_seconds
        self._floor_us = floor_us
        self._ack_deadline_s = ack_deadline_s
        self._clock = clock
        self._monotonic = monotonic
        self._last_stamp_us = 0
        self._unsynced_end_us: int | None = None  # the first window end with a pull not yet synced
        self._held: dict[int, HeldWindow] = {}  # window end (us) -> its messages
        self._window_of: dict[str, int] = {}  # delivery key -> its window's end
        self.counters = OnceCounters()
        self.replayed = False

    @property
    def holding(self) -> int:
        return len(self._window_of)

    @property
    def next_stamp_floor_us(self) -> int:
        """No pull is stamped earlier from now on: the reader's watermark hold."""
        return max(self._floor_us, self._last_stamp_us + 1)

    # --- pulls -----------------------------------------------------------------------------

    def replay(self) -> list[tuple[int, list]]:
        """The log's unfinished pulls, (stamp, ReceivedMessage protobufs) in stamp order, now held;
        once per run, before anything new is pulled."""
        pulls = []
        for pull in self.log.pulls():
            messages = list(_PULL_RESPONSE.FromString(pull.payload).received_messages)
            window = self._held.setdefault(pull.window_end_us, HeldWindow(due=float("inf")))
            for received in messages:
                key = delivery_key(received)
                window.ack_ids[key] = None
                self._window_of[key] = pull.window_end_us
            self._last_stamp_us = max(self._last_stamp_us, pull.stamp_us)
            pulls.append((pull.stamp_us, messages))
            self.counters.replayed_pulls += 1
            self.counters.replayed_messages += len(messages)
        self.counters.held = self.holding
        self.replayed = True
        return pulls

    def take(self, received: Iterable) -> tuple[int, list] | None:
        """Of one pull (raw ReceivedMessage protobufs, unacknowledged), the new messages, logged
        and held: (their ingestion stamp in microseconds, the messages), or None if none is new."""
        fresh: dict[str, Any] = {}
        for message in received:
            key = delivery_key(message)
            end = self._window_of.get(key)
            if end is not None:  # held: this is a redelivery; its ack ID is now the valid one
                window = self._held[end]
                window.ack_ids[key] = message.ack_id
                window.due = min(window.due, self._monotonic() + self._ack_deadline_s / 2)
                self.counters.redeliveries_held += 1
            else:
                fresh[key] = message  # a message twice in one pull: its later delivery
        if fresh:
            finished = self.log.finished(fresh)
            if finished:
                self._acknowledge_finished({key: fresh.pop(key).ack_id for key in finished})
        if not fresh:
            return None
        messages = list(fresh.values())
        stamp_us = max(
            int(self._clock() * 1_000_000), max(map(publish_us, messages)), self._floor_us, self._last_stamp_us + 1
        )
        self._last_stamp_us = stamp_us
        end = window_end_us(stamp_us, self._window_seconds)
        self.log.record_pull(stamp_us, end, _PULL_RESPONSE(received_messages=messages).SerializeToString())
        if self._unsynced_end_us is None:
            self._unsynced_end_us = end
        held = self._held.get(end)
        if held is None:
            held = self._held[end] = HeldWindow(due=self._monotonic() + self._ack_deadline_s / 2)
        for key, message in fresh.items():
            held.ack_ids[key] = message.ack_id
            self._window_of[key] = end
        self.counters.held = self.holding
        return stamp_us, messages

    def _acknowledge_finished(self, ack_ids: dict[str, str]) -> None:
        """Redeliveries of finished messages: acknowledged again, never processed."""
        self.counters.redeliveries_finished += len(ack_ids)
        sent = self._acknowledge(list(ack_ids.items()))
        self.log.mark_acked(sent, self._clock())

    @overload
    def hold_us(self, proposed_us: int) -> int: ...
    @overload
    def hold_us(self, proposed_us: None) -> None: ...

    def hold_us(self, proposed_us: int | None) -> int | None:
        """The reader's watermark hold (None: none, a drain), once every pull of a window it lets
        fire is on disk: a window fires when the watermark passes its end, and its rows go to
        Spanner after, so the log is synced first (message_log.py, "Durability")."""
        if self._unsynced_end_us is not None and (proposed_us is None or proposed_us >= self._unsynced_end_us):
            self.log.sync()
            self._unsynced_end_us = None
        return proposed_us

    # --- acknowledging -----------------------------------------------------------------------

    def settle(self, committed_through_us: int, draining: bool = False) -> None:
        """Acknowledges every window ending at or before `committed_through_us` and marks it
        finished in the log; extends the deadlines of the messages still held (all of them, far,
        when `draining`: the reader is not scheduled again); prunes the log now and then."""
        finished = sorted(end for end in self._held if end <= committed_through_us)
        if finished:
            to_ack: list[tuple[str, str]] = []
            unacked: list[str] = []
            for end in finished:
                for key, ack_id in self._held.pop(end).ack_ids.items():
                    del self._window_of[key]
                    if ack_id is None:
                        unacked.append(key)
                    else:
                        to_ack.append((key, ack_id))
            sent = self._acknowledge(to_ack)
            failed = set(key for key, _ in to_ack) - set(sent) if len(sent) < len(to_ack) else ()
            self.log.finish_windows(finished[-1], sent, [*unacked, *failed], self._clock())
            self.counters.held = self.holding
        self._extend(draining)
        self.log.prune(self._clock())

    def finish(self) -> None:
        """The pipeline has ended, every window written (a drain): acknowledges everything held."""
        self.settle(2**63 - 1)

    def _acknowledge(self, ack_ids: list[tuple[str, str]]) -> list[str]:
        """Sends the acknowledgements, in chunks; returns the delivery keys of those sent (a chunk
        that fails is not: its messages come back, and are acknowledged then)."""
        sent: list[str] = []
        for start in range(0, len(ack_ids), ACK_CHUNK):
            chunk = ack_ids[start : start + ACK_CHUNK]
            try:
                self._subscriber.acknowledge(
                    request={"subscription": self._subscription, "ack_ids": [ack_id for _, ack_id in chunk]}
                )
            except Exception as error:  # noqa: BLE001 - they are redelivered and acknowledged then
                self.counters.ack_failures += len(chunk)
                _LOG.warning(
                    "acknowledging %d messages failed (%s): they are redelivered, recognised and acknowledged then",
                    len(chunk),
                    error,
                )
                continue
            sent.extend(key for key, _ in chunk)
        self.counters.acknowledged += len(sent)
        return sent

    def _extend(self, draining: bool) -> None:
        now = self._monotonic()
        seconds = EXTEND_FOR_DRAIN_S if draining else EXTEND_TO_S
        due = [window for window in self._held.values() if draining or window.due <= now]
        ack_ids = [ack_id for window in due for ack_id in window.ack_ids.values() if ack_id is not None]
        for window in due:
            window.due = now + seconds / 2
        for start in range(0, len(ack_ids), ACK_CHUNK):
            try:
                self._subscriber.modify_ack_deadline(
                    request={
                        "subscription": self._subscription,
                        "ack_ids": ack_ids[start : start + ACK_CHUNK],
                        "ack_deadline_seconds": seconds,
                    }
                )
                self.counters.extended += len(ack_ids[start : start + ACK_CHUNK])
            except Exception as error:  # noqa: BLE001 - a message whose deadline passes is redelivered: held
                _LOG.warning(
                    "extending the ack deadline of %d held messages failed (%s): any redelivery is recognised and held",
                    len(ack_ids[start : start + ACK_CHUNK]),
                    error,
                )
