"""ReadVotes: the subscription's messages, with their attributes.

On Dataflow (and Beam's own DirectRunner reader) each message is an element. The local reader
(local_runner/pubsub_reader.py) emits each pull as ONE element, a list of messages, each
with its publish time in `publish_time`: Beam's DirectRunner costs tens of microseconds per element,
more than parsing a single-vote message, and ParseVotes sums a bundle whatever its elements are.
Such an element's timestamp is the pull's ingestion time, stamped by the reader (never earlier
than its latest publish time), which ParseVotes windows the pull's votes by: the local stream
records it with the pull, so that a pull replayed after a crash falls in the same window.
"""

from __future__ import annotations

import apache_beam as beam

from schemas.contract import EVENT_ID_ATTRIBUTE


class ReadVotes(beam.PTransform):
    """PBegin -> PubsubMessage (data and attributes) from a Pub/Sub subscription (locally, lists
    of them: see the module docstring).

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
