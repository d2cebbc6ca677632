"""ParseVotes: Pub/Sub messages to per-bundle vote sums and dead letters, counted by reason.

The rules are `schemas.contract.parse_message`, shared with the publishers; this module
applies them in a DoFn and sums the bundle's accepted votes per (post, event hour) in the
same pass (`schemas.contract.sum_message`, through transforms.windowing.BundleSums). Why sum here and not downstream: Beam's cost is
per element (measured: several microseconds each, more than parsing a vote), so no element
is made per vote or per message, only one per shard of posts per bundle.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics

from schemas.contract import DEFAULT_EVENT_TIME_POLICY, EventTimePolicy, reason_of
from transforms.windowing import BundleSums


class ParsedVotes(NamedTuple):
    sums: beam.PCollection  # of (shard, ShardSums): per post and event hour per bundle, at ingestion time
    rejected: beam.PCollection  # of Rejected


class _ParseAndSumFn(beam.DoFn):
    REJECTED = "rejected"

    def __init__(self, policy: EventTimePolicy) -> None:
        self._policy = policy

    def start_bundle(self) -> None:
        self._sums = BundleSums()
        # Counted locally and reported once per bundle: a metric update per vote costs more
        # than parsing it.
        self._rejected: Counter[str] = Counter()
        self._ingestion_hour: Counter[str] = Counter()
        self._messages = 0

    def process(self, message: PubsubMessage, timestamp=beam.DoFn.TimestampParam):
        self._messages += 1
        for rejected in self._sums.add_message(message.data or b"", message.attributes, float(timestamp),
                                               self._policy, self._count_ingestion_hour):
            self._rejected[reason_of(rejected)] += 1
            yield beam.pvalue.TaggedOutput(self.REJECTED, rejected)

    def _count_ingestion_hour(self, reason: str) -> None:
        self._ingestion_hour[reason] += 1

    def finish_bundle(self):
        Metrics.counter("ParseVotes", "messages").inc(self._messages)
        Metrics.counter("ParseVotes", "accepted").inc(self._sums.votes)
        for reason, count in self._rejected.items():
            Metrics.counter("ParseVotes", f"rejected_{reason}").inc(count)
        for reason, count in self._ingestion_hour.items():
            Metrics.counter("ParseVotes", f"ingestion_hour_{reason}").inc(count)
        yield from self._sums.emit()


class ParseVotes(beam.PTransform):
    """PubsubMessage -> ParsedVotes(sums: (shard, ShardSums), rejected: Rejected).

    A message is one event, or a batch of them (contract v2). `sums` holds each bundle's
    accepted votes summed per post and event hour, stamped with the bundle's ingestion time
    (what WindowAndSumVotes windows by). The element timestamp (the Pub/Sub publish time,
    unless the read names a timestamp attribute) stands in for a missing event_time, and for
    one outside the event-time policy (older than the delta retention, or further ahead than
    the clock skew it allows): such a vote is counted in its ingestion hour, never dropped.
    Metrics: ParseVotes/messages, ParseVotes/accepted (votes), ParseVotes/rejected_<reason> (dead letters: one per
    rejected line of a batch, or one per message rejected whole) and
    ParseVotes/ingestion_hour_<reason> (older_than_retention, ahead_of_clock).
    """

    def __init__(self, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY) -> None:
        super().__init__()
        self._policy = policy

    def expand(self, messages: beam.PCollection) -> ParsedVotes:
        parsed = messages | "Parse" >> beam.ParDo(_ParseAndSumFn(self._policy)).with_outputs(
            _ParseAndSumFn.REJECTED, main="sums")
        return ParsedVotes(sums=parsed.sums, rejected=parsed[_ParseAndSumFn.REJECTED])
