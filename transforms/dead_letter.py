"""Dead letters: every message or row the pipeline cannot accept, published with its reason.

Failures travel as data. A rejected message keeps its original bytes and attributes and
gains an `error` attribute; what a sink could never write (a delta row, a batch of vote states)
is published as its sink's codec encodes it (spanner_writes/sinks.py): JSON, with the sink's
`kind` and the `error`. All land on one dead-letter topic, whose own subscription keeps them for
inspection or replay.

The failures come from differently windowed stages (the parse's global window, the sinks'
fixed windows): each input is re-windowed into the global window before they are flattened,
so the dead letters are one windowing (and Beam's "All input pcollections must have the same
window" warning is not printed at every start). Nothing downstream groups, so the window a
dead letter travels in changes nothing but that.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage, WriteToPubSub
from apache_beam.transforms import window

from schemas.contract import ERROR_ATTRIBUTE
from schemas.records import Rejected
from spanner_writes.sinks import FailedRecord, sink_of

MAX_ATTRIBUTES = 100  # Pub/Sub's limit per message
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_DEAD_LETTER_BYTES = 9 * 1024 * 1024  # under Pub/Sub's 10 MB, leaving room for attributes


def to_dead_letter(item: Rejected | FailedRecord) -> PubsubMessage:
    """A Pub/Sub message for the dead-letter topic, always within Pub/Sub's limits: a rejected
    message as it came, a sink's failed record as its codec encodes it."""
    if isinstance(item, Rejected):
        data, attributes = item.data, {**item.attributes, ERROR_ATTRIBUTE: item.error}
    else:
        data, attributes = sink_of(item).codec.encode(item)
    # The error goes last, cut to fit, so that the limit on attributes never drops it.
    error = attributes.pop(ERROR_ATTRIBUTE)
    if len(data) > MAX_DEAD_LETTER_BYTES:
        attributes["truncated_from_bytes"] = str(len(data))
        data = data[:MAX_DEAD_LETTER_BYTES]
    kept = dict(list(attributes.items())[: MAX_ATTRIBUTES - 1])
    kept[ERROR_ATTRIBUTE] = error.encode("utf-8")[:MAX_ATTRIBUTE_VALUE_BYTES].decode("utf-8", "ignore")
    return PubsubMessage(data=data, attributes=kept)


class PublishDeadLetters(beam.PTransform):
    """The parse's Rejected and each sink's failed records (spanner_writes/sinks.py), as PCollections
    -> messages on the dead-letter topic.

    Input i is re-windowed into the global window by the step "GlobalWindow<i>" (stable labels,
    by position, for in-place updates) before the Flatten."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self._topic = topic

    def expand(self, failures: tuple[beam.PCollection, ...]) -> beam.pvalue.PDone:
        global_windowed = tuple(
            failure | f"GlobalWindow{index}" >> beam.WindowInto(window.GlobalWindows())
            for index, failure in enumerate(failures)
        )
        return (
            global_windowed
            | "Flatten" >> beam.Flatten()
            | "ToMessage" >> beam.Map(to_dead_letter)
            | "Publish" >> WriteToPubSub(self._topic, with_attributes=True)
        )
