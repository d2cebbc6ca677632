"""ParseVotes: Pub/Sub messages split into accepted votes and dead letters, counted by reason.

The rules themselves are `schemas.contract.parse_vote`, a pure function shared with the
publishers; this module only applies it in a DoFn and reports Beam metrics.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics

from schemas.contract import DEFAULT_EVENT_TIME_POLICY, EventTimePolicy, parse_vote, reason_of
from schemas.records import VoteEvent


class ParsedVotes(NamedTuple):
    votes: beam.PCollection  # of VoteEvent
    rejected: beam.PCollection  # of Rejected


class _ParseVoteFn(beam.DoFn):
    REJECTED = "rejected"

    def __init__(self, policy: EventTimePolicy) -> None:
        self._policy = policy

    def start_bundle(self) -> None:
        # Counted locally and reported once per bundle: a metric update per vote costs more
        # than parsing it.
        self._accepted = 0
        self._rejected: Counter[str] = Counter()
        self._ingestion_hour: Counter[str] = Counter()

    def process(self, message: PubsubMessage, timestamp=beam.DoFn.TimestampParam):
        result = parse_vote(message.data or b"", message.attributes, float(timestamp), self._policy,
                            self._count_ingestion_hour)
        if isinstance(result, VoteEvent):
            self._accepted += 1
            return (result,)
        self._rejected[reason_of(result)] += 1
        return (beam.pvalue.TaggedOutput(self.REJECTED, result),)

    def _count_ingestion_hour(self, reason: str) -> None:
        self._ingestion_hour[reason] += 1

    def finish_bundle(self) -> None:
        Metrics.counter("ParseVotes", "accepted").inc(self._accepted)
        for reason, count in self._rejected.items():
            Metrics.counter("ParseVotes", f"rejected_{reason}").inc(count)
        for reason, count in self._ingestion_hour.items():
            Metrics.counter("ParseVotes", f"ingestion_hour_{reason}").inc(count)


class ParseVotes(beam.PTransform):
    """PubsubMessage -> ParsedVotes(votes: VoteEvent, rejected: Rejected).

    The element timestamp (the Pub/Sub publish time, unless the read names a timestamp
    attribute) stands in for a missing event_time when choosing the event hour, and for one
    outside the event-time policy (older than the delta retention, or further ahead than
    the clock skew it allows): such a vote is counted in its ingestion hour, never dropped.
    Metrics: ParseVotes/accepted, ParseVotes/rejected_<reason> and
    ParseVotes/ingestion_hour_<reason> (older_than_retention, ahead_of_clock).
    """

    def __init__(self, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY) -> None:
        super().__init__()
        self._policy = policy

    def expand(self, messages: beam.PCollection) -> ParsedVotes:
        parsed = messages | "Parse" >> beam.ParDo(_ParseVoteFn(self._policy)).with_outputs(
            _ParseVoteFn.REJECTED, main="votes")
        return ParsedVotes(votes=parsed.votes, rejected=parsed[_ParseVoteFn.REJECTED])
