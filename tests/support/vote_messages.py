"""A vote as Pub/Sub delivers it to ParseVotes: one JSON delta event per message, its event time
in a given hour (`message`), and the hour the windowing, voter and ParseVotes tests' votes are
in (HOUR, 2026-11-22T02:00:00Z)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from apache_beam.io.gcp.pubsub import PubsubMessage

HOUR = 1_795_312_800


def message(post: str, event_hour: int, delta: int = 1, counter: str = "upvotes") -> PubsubMessage:
    event_time = datetime.fromtimestamp(event_hour + 125, tz=timezone.utc).isoformat()
    return PubsubMessage(
        json.dumps({"post_id": post, "counter": counter, "delta": delta, "event_time": event_time}).encode(), {}
    )
