"""What reached a Pub/Sub topic: the proof, in the serve security tests, that a refused
request published nothing.

`TopicAudit` reads its own subscription of the topic (created here if missing, so a running
pipeline on the topic's other subscription is not disturbed). `published_since()` publishes
a marker straight to the topic and pulls everything up to it: every message published
before the marker is among what it returns. A service publishes before it answers, so a
request answered before the call was either published by then or never will be.
"""

from __future__ import annotations

import json
import time
import uuid

from google.api_core import exceptions
from google.cloud import pubsub_v1

from upvotes.devtools.publishing import publish_message

MARKER_ATTRIBUTE = "audit_marker"
MARKER_POST = "topic-audit-marker"  # the marker is a valid vote, so a pipeline reading the topic counts it


class TopicAudit:
    def __init__(self, topic_path: str, subscription_path: str, timeout_s: float = 60) -> None:
        self._publisher = pubsub_v1.PublisherClient()
        self._subscriber = pubsub_v1.SubscriberClient()
        self._topic_path = topic_path
        self._subscription = subscription_path
        self._timeout_s = timeout_s
        try:
            self._subscriber.create_subscription(name=subscription_path, topic=topic_path)
        except exceptions.AlreadyExists:
            pass
        self.published_since()  # start from now

    def published_since(self) -> list:
        """Every message published to the topic since the previous call, marker excluded."""
        marker = uuid.uuid4().hex
        vote = json.dumps({"post_id": MARKER_POST, "counter": "upvotes", "delta": 1, "event_id": marker}).encode()
        publish_message(self._publisher, self._topic_path, vote, {"event_id": marker, MARKER_ATTRIBUTE: marker}).result(
            timeout=30
        )
        messages: list = []
        deadline = time.monotonic() + self._timeout_s
        while not any(m.attributes.get(MARKER_ATTRIBUTE) == marker for m in messages):
            assert time.monotonic() < deadline, "the audit marker never arrived"
            response = self._subscriber.pull(subscription=self._subscription, max_messages=100, timeout=10)
            if response.received_messages:
                self._subscriber.acknowledge(
                    subscription=self._subscription, ack_ids=[m.ack_id for m in response.received_messages]
                )
            messages += [m.message for m in response.received_messages]
        return [m for m in messages if MARKER_ATTRIBUTE not in m.attributes]

    def close(self) -> None:
        self._subscriber.close()
