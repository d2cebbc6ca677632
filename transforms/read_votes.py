"""ReadVotes: the subscription's messages, with their attributes."""
from __future__ import annotations

import apache_beam as beam

from schemas.contract import EVENT_ID_ATTRIBUTE


class ReadVotes(beam.PTransform):
    """PBegin -> PubsubMessage (data and attributes) from a Pub/Sub subscription.

    With `deduplicate` (Dataflow only), messages redelivered or republished with the same
    event_id attribute are dropped by the service (id_label).
    """

    def __init__(self, subscription: str, deduplicate: bool) -> None:
        super().__init__()
        self._subscription = subscription
        self._deduplicate = deduplicate

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        return begin | "Pull" >> beam.io.ReadFromPubSub(
            subscription=self._subscription,
            with_attributes=True,
            id_label=EVENT_ID_ATTRIBUTE if self._deduplicate else None,
        )
