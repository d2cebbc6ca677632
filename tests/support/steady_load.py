"""A steady batched load that lasts until the test says stop: for tests that stop and restart a
stream under load, whose stops take as long as they take (a stream starts slower on a loaded
machine), so the load must not be a fixed time that might end before the last stop."""

from __future__ import annotations

import threading
from typing import Any

from schemas.contract import Message, batch_messages
from upvotes.devtools.publishing import publish_messages


class SteadyLoad:
    """Publishes `events`, `batch_size` a message, at `rate` events/s in a background thread, from
    `start()` until `stop()`; `sent()` is then exactly the events of the messages published."""

    def __init__(self, topic_path: str, events: list[dict[str, Any]], batch_size: int, rate: float) -> None:
        self._events = events
        self._batch_size = batch_size
        self._published: list[Message] = []
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=publish_messages,
            kwargs=dict(topic_path=topic_path, messages=self._until_stopped(), rate=rate, progress=False),
            daemon=True,
        )

    def _until_stopped(self):
        for message in batch_messages(self._events, self._batch_size):
            if self._done.is_set():
                return
            self._published.append(message)
            yield message

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 120) -> None:
        """Stops publishing and waits for every publish; fails if the load ran out of events first
        (the test's pool was too small for its stops)."""
        self._done.set()
        self._thread.join(timeout=timeout_s)
        assert not self._thread.is_alive(), "the load did not stop"
        assert len(self._published) < -(-len(self._events) // self._batch_size), "the load ran out of events"

    @property
    def messages(self) -> int:
        return len(self._published)

    def sent(self) -> list[dict[str, Any]]:
        """The events published, in order."""
        return self._events[: sum(message.events for message in self._published)]
