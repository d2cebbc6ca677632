"""ParseVotes: Pub/Sub messages to per-message vote sums and dead letters, counted by reason.

The rules are `schemas.contract.parse_message`, shared with the publishers; this module
applies them in a DoFn and sums each message's accepted votes per (post, event hour) in the
same pass. Why sum here and not downstream: Beam's cost is per element, and a batch of 500
votes for a handful of hot posts then leaves this step as a handful of elements, not 500.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics

from schemas.contract import parse_message, reason_of
from schemas.records import UPVOTES, CounterSums, PostHour, Rejected


class ParsedVotes(NamedTuple):
    sums: beam.PCollection  # of (PostHour, CounterSums): one per post and event hour per message
    rejected: beam.PCollection  # of Rejected


class _ParseAndSumFn(beam.DoFn):
    REJECTED = "rejected"

    def start_bundle(self) -> None:
        # Counted locally and reported once per bundle: a metric update per vote costs more
        # than parsing it.
        self._accepted = 0
        self._rejected: Counter[str] = Counter()

    def process(self, message: PubsubMessage, timestamp=beam.DoFn.TimestampParam):
        sums: dict[tuple[str, int], list[int]] = {}
        rejected = []
        for result in parse_message(message.data or b"", message.attributes, float(timestamp)):
            if type(result) is Rejected:
                rejected.append(result)
                continue
            acc = sums.get((result.post_id, result.event_hour))
            if acc is None:
                acc = sums[(result.post_id, result.event_hour)] = [0, 0, 0]
            acc[0 if result.counter == UPVOTES else 1] += result.delta
            acc[2] += 1
        self._accepted += sum(acc[2] for acc in sums.values())
        for result in rejected:
            self._rejected[reason_of(result)] += 1
            yield beam.pvalue.TaggedOutput(self.REJECTED, result)
        for (post_id, event_hour), acc in sums.items():
            yield PostHour(post_id, event_hour), CounterSums(*acc)

    def finish_bundle(self) -> None:
        Metrics.counter("ParseVotes", "accepted").inc(self._accepted)
        for reason, count in self._rejected.items():
            Metrics.counter("ParseVotes", f"rejected_{reason}").inc(count)


class ParseVotes(beam.PTransform):
    """PubsubMessage -> ParsedVotes(sums: (PostHour, CounterSums), rejected: Rejected).

    A message is one event, or a batch of them (contract v2); `sums` holds each message's
    accepted votes summed per post and event hour. The element timestamp (the Pub/Sub
    publish time, unless the read names a timestamp attribute) stands in for a missing
    event_time. Metrics: ParseVotes/accepted (votes) and ParseVotes/rejected_<reason>
    (dead letters: one per rejected line of a batch, or one per message rejected whole).
    """

    def expand(self, messages: beam.PCollection) -> ParsedVotes:
        parsed = messages | "Parse" >> beam.ParDo(_ParseAndSumFn()).with_outputs(_ParseAndSumFn.REJECTED, main="sums")
        return ParsedVotes(sums=parsed.sums, rejected=parsed[_ParseAndSumFn.REJECTED])
