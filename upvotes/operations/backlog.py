"""How long votes have waited unread: the age of a subscription's oldest unacknowledged message.

A stream that died silently leaves its subscription filling up; `upvotes status` reads this
beside the last delta commit (spanner_reads/liveness.py) and crosses a threshold when votes
wait too long.

- On Google Cloud: the Cloud Monitoring metric
  `pubsub.googleapis.com/subscription/oldest_unacked_message_age` (a gauge in seconds, sampled
  every 60 s and visible up to 120 s later), its newest point of the last LOOKBACK_S. Nothing
  is read from the subscription itself. No point in that time is a check that could not be
  made (reported as such, never as healthy).
- On the Pub/Sub emulator, which has no Cloud Monitoring: a peek. Up to PEEK_LIMIT messages are
  pulled (return_immediately), the oldest publish time among them is taken, and they are
  released at once (ack deadline 0), unacknowledged: a running reader gets them a moment
  later; if the release failed they would come back after the subscription's ack deadline,
  late but not lost. The age is that of the oldest message seen, so a lower bound when more
  than PEEK_LIMIT wait (the emulator hands out the oldest first).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from pipeline.params import PUBSUB_NAME

METRIC = "pubsub.googleapis.com/subscription/oldest_unacked_message_age"
LOOKBACK_S = 600
PEEK_LIMIT = 100
PEEK_TIMEOUT_S = 30.0
PEEK = "peek (the emulator has no Cloud Monitoring)"
MONITORING = f"Cloud Monitoring {METRIC}"


class BacklogUnknown(RuntimeError):
    """The backlog could not be read."""


@dataclass(frozen=True)
class Backlog:
    subscription: str  # projects/P/subscriptions/S
    oldest_unacked_age_s: float | None  # None: nothing waits
    method: str  # PEEK or MONITORING
    as_of: datetime  # when the age was measured (a Monitoring sample may be minutes old)
    messages_seen: int | None = None  # the peek's sample size

    def as_dict(self) -> dict:
        return {
            "subscription": self.subscription,
            "oldest_unacked_age_s": self.oldest_unacked_age_s,
            "method": self.method,
            "as_of": self.as_of.isoformat(),
            "messages_seen": self.messages_seen,
        }


def on_emulator() -> bool:
    return bool(os.environ.get("PUBSUB_EMULATOR_HOST"))


def read_backlog(subscription: str) -> Backlog:
    """The subscription's oldest unacknowledged message age, the way its environment allows."""
    if on_emulator():
        from google.cloud import pubsub_v1

        subscriber = pubsub_v1.SubscriberClient()
        try:
            return peek_backlog(subscriber, subscription)
        finally:
            subscriber.close()
    from google.cloud import monitoring_v3

    return monitoring_backlog(monitoring_v3.MetricServiceClient(), subscription)


def peek_backlog(subscriber, subscription: str, limit: int = PEEK_LIMIT) -> Backlog:
    response = subscriber.pull(
        request={"subscription": subscription, "max_messages": limit, "return_immediately": True},
        timeout=PEEK_TIMEOUT_S,
    )
    received = list(response.received_messages)
    now = datetime.now(timezone.utc)
    if received:
        subscriber.modify_ack_deadline(
            request={"subscription": subscription, "ack_deadline_seconds": 0, "ack_ids": [m.ack_id for m in received]}
        )
    oldest = min((m.message.publish_time for m in received), default=None)
    age = None if oldest is None else round(max(0.0, (now - oldest).total_seconds()), 3)
    return Backlog(subscription, age, PEEK, now, len(received))


def _parts(subscription: str) -> tuple[str, str]:
    match = re.fullmatch(rf"projects/([a-z][-a-z0-9]{{4,28}}[a-z0-9])/subscriptions/({PUBSUB_NAME})", subscription)
    if match is None:  # also keeps the Monitoring filter below free of anything but a name
        raise BacklogUnknown(f"not a subscription path: {subscription!r}")
    return match.group(1), match.group(2)


def monitoring_backlog(client, subscription: str, now_s: float | None = None) -> Backlog:
    """From `client` (a monitoring_v3.MetricServiceClient): the newest sample of METRIC for the
    subscription in the last LOOKBACK_S seconds."""
    from google.cloud import monitoring_v3

    project, name = _parts(subscription)
    now_s = time.time() if now_s is None else now_s
    series = client.list_time_series(
        request={
            "name": f"projects/{project}",
            "filter": f'metric.type = "{METRIC}" AND resource.type = "pubsub_subscription" '
            f'AND resource.labels.subscription_id = "{name}"',
            "interval": monitoring_v3.TimeInterval(
                end_time={"seconds": int(now_s)}, start_time={"seconds": int(now_s - LOOKBACK_S)}
            ),
            "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
        }
    )
    points = [point for one in series for point in one.points]
    if not points:
        raise BacklogUnknown(f"no {METRIC} sample for {subscription} in the last {LOOKBACK_S} s")
    newest = max(points, key=lambda point: point.interval.end_time)
    age = newest.value.int64_value
    return Backlog(subscription, float(age) if age else None, MONITORING, newest.interval.end_time)
