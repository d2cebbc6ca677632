"""The event-time policy (issue 15): no client clock can spread votes over unbounded hours,
and no vote is dropped for its time; out-of-bounds times count in the ingestion hour."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import schemas
from pipeline.params import STREAMING_PARAMS, defaults
from schemas.contract import DEFAULT_EVENT_TIME_POLICY, EventTimePolicy, event_hour, parse_vote
from schemas.records import VoteEvent
from transforms.parse_and_sum import ParseVotes

PUBLISHED_AT = datetime(2026, 11, 22, 0, 22, 3, tzinfo=timezone.utc)
PUBLISHED = PUBLISHED_AT.timestamp()
HOUR_2001_S = int(datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp())
PUBLISHED_HOUR = int(datetime(2026, 11, 22, tzinfo=timezone.utc).timestamp())


def rfc3339(moment: datetime) -> str:
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%SZ")


def hour_of(moment: datetime) -> int:
    return int(moment.replace(minute=0, second=0).timestamp())


def hour_under_policy(moment: datetime, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY) -> tuple[int, list[str]]:
    reasons: list[str] = []
    return event_hour(rfc3339(moment), PUBLISHED, policy, reasons.append), reasons


def test_the_retention_is_the_ddl_row_deletion_policy_of_deltas() -> None:
    assert DEFAULT_EVENT_TIME_POLICY.retention_s == schemas.delta_retention_days() * 86_400 == 30 * 86_400
    assert DEFAULT_EVENT_TIME_POLICY.max_clock_skew_s == defaults(STREAMING_PARAMS)["max_clock_skew_seconds"] == 3_600


def test_times_inside_the_bounds_keep_their_event_hour() -> None:
    for moment in (PUBLISHED_AT - timedelta(days=2), PUBLISHED_AT - timedelta(days=29, hours=23),
                   PUBLISHED_AT + timedelta(minutes=59), PUBLISHED_AT):
        assert hour_under_policy(moment) == (hour_of(moment), [])


def test_times_outside_the_bounds_count_in_the_ingestion_hour_with_their_reason() -> None:
    assert hour_under_policy(PUBLISHED_AT - timedelta(days=30, seconds=1)) == (PUBLISHED_HOUR, ["older_than_retention"])
    assert hour_under_policy(datetime(2001, 3, 4, 5, tzinfo=timezone.utc)) == (PUBLISHED_HOUR, ["older_than_retention"])
    assert hour_under_policy(datetime(1, 1, 1, tzinfo=timezone.utc)) == (PUBLISHED_HOUR, ["older_than_retention"])
    assert hour_under_policy(PUBLISHED_AT + timedelta(seconds=3_601)) == (PUBLISHED_HOUR, ["ahead_of_clock"])
    assert hour_under_policy(datetime(9999, 12, 31, 23, tzinfo=timezone.utc)) == (PUBLISHED_HOUR, ["ahead_of_clock"])
    # Without a storable ingestion time (Beam's minimum timestamp in a batch), the claimed hour stands.
    beam_min_timestamp = -9_223_372_036_854.775
    assert DEFAULT_EVENT_TIME_POLICY.untrusted(HOUR_2001_S, beam_min_timestamp) is None
    # The skew is a setting.
    two_hours_ahead = PUBLISHED_AT + timedelta(hours=2)
    assert hour_under_policy(two_hours_ahead, EventTimePolicy(max_clock_skew_s=3 * 3_600)) == (hour_of(two_hours_ahead), [])


def test_a_broken_clock_spreads_its_votes_over_at_most_the_policy_window() -> None:
    """The issue's input: 20,000 votes each claiming a different hour from 2001 on."""
    start = datetime(2001, 1, 1, tzinfo=timezone.utc)
    hours = set()
    for i in range(20_000):
        data = json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1,
                           "event_time": rfc3339(start + timedelta(hours=i))}).encode()
        vote = parse_vote(data, {}, PUBLISHED, DEFAULT_EVENT_TIME_POLICY)
        assert isinstance(vote, VoteEvent)  # never dropped
        hours.add(vote.event_hour)
    assert hours == {PUBLISHED_HOUR}
    # Whatever the claimed times, a post's hours per ingestion hour are bounded by the window.
    assert (DEFAULT_EVENT_TIME_POLICY.retention_s + DEFAULT_EVENT_TIME_POLICY.max_clock_skew_s) // 3_600 + 1 == 722


def test_parse_votes_counts_each_ingestion_hour_vote_per_reason() -> None:
    def message(moment: datetime) -> PubsubMessage:
        return PubsubMessage(json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1,
                                         "event_time": rfc3339(moment)}).encode(), {})

    late = PUBLISHED_AT - timedelta(days=2)
    messages = [message(late), message(datetime(2001, 1, 1, tzinfo=timezone.utc)),
                message(datetime(2001, 1, 2, tzinfo=timezone.utc)), message(PUBLISHED_AT + timedelta(days=1))]
    pipeline = TestPipeline()
    parsed = (pipeline | beam.Create(messages)
              | beam.Map(lambda m: beam.window.TimestampedValue(m, PUBLISHED)) | ParseVotes())
    assert_that(parsed.sums | beam.FlatMap(lambda keyed: [(key.event_hour, sums.events) for key, sums in keyed[1].items()]),
                equal_to([(hour_of(late), 1), (PUBLISHED_HOUR, 3)]))  # one bundle: summed per hour
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]
                if c.key.metric.namespace == "ParseVotes"}
    assert counters["ingestion_hour_older_than_retention"] == 2
    assert counters["ingestion_hour_ahead_of_clock"] == 1
    assert counters["accepted"] == 4
