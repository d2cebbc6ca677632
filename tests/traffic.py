"""Background traffic for tests that watch a local streaming pipeline's freshness.

The DirectRunner's Pub/Sub reader waits out a 30 s pull timeout on an idle emulator
subscription before its watermark moves, so on an idle stack a lone vote waits for that,
not for the windows. A live system is never idle: a trickle of share votes on posts of
their own keeps the reader pulling, as traffic would.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from google.cloud import pubsub_v1

TRICKLE_INTERVAL_S = 0.1
TRICKLE_POSTS = 10


@contextlib.contextmanager
def trickle(topic_path: str) -> Iterator[None]:
    """Publishes one share vote on `background-<n>` every TRICKLE_INTERVAL_S while the block runs."""
    publisher = pubsub_v1.PublisherClient()
    stop = threading.Event()

    def run() -> None:
        number = 0
        while not stop.wait(TRICKLE_INTERVAL_S):
            number += 1
            publisher.publish(topic_path, (f'{{"post_id": "background-{number % TRICKLE_POSTS}", '
                                           '"counter": "shares", "delta": 1}').encode())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
