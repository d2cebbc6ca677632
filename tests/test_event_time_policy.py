"""The event-time policy (issue 15, schemas/contract.py EventTimePolicy and event_hour): no
client clock can spread votes over unbounded hours, and no vote is dropped for its time;
out-of-bounds times count in the ingestion hour. ParseVotes' counters of those votes, per
reason: tests/test_parse_and_sum.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import schemas
from pipeline.params import STREAMING_PARAMS, defaults
from schemas.contract import DEFAULT_EVENT_TIME_POLICY, EventTimePolicy, event_hour, parse_vote
from schemas.records import VoteEvent
from tests.support.event_times import PUBLISHED, PUBLISHED_AT, PUBLISHED_HOUR, hour_of, rfc3339

HOUR_2001_S = int(datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp())


def hour_under_policy(moment: datetime, policy: EventTimePolicy = DEFAULT_EVENT_TIME_POLICY) -> tuple[int, list[str]]:
    reasons: list[str] = []
    return event_hour(rfc3339(moment), PUBLISHED, policy, reasons.append), reasons


def test_the_retention_is_the_ddl_row_deletion_policy_of_deltas() -> None:
    assert DEFAULT_EVENT_TIME_POLICY.retention_s == schemas.delta_retention_days() * 86_400 == 30 * 86_400
    assert DEFAULT_EVENT_TIME_POLICY.max_clock_skew_s == defaults(STREAMING_PARAMS)["max_clock_skew_seconds"] == 3_600


def test_times_inside_the_bounds_keep_their_event_hour() -> None:
    for moment in (
        PUBLISHED_AT - timedelta(days=2),
        PUBLISHED_AT - timedelta(days=29, hours=23),
        PUBLISHED_AT + timedelta(minutes=59),
        PUBLISHED_AT,
    ):
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
    assert hour_under_policy(two_hours_ahead, EventTimePolicy(max_clock_skew_s=3 * 3_600)) == (
        hour_of(two_hours_ahead),
        [],
    )


def test_a_broken_clock_spreads_its_votes_over_at_most_the_policy_window() -> None:
    """The issue's input: 20,000 votes each claiming a different hour from 2001 on."""
    start = datetime(2001, 1, 1, tzinfo=timezone.utc)
    hours = set()
    for i in range(20_000):
        data = json.dumps(
            {"post_id": "p", "counter": "upvotes", "delta": 1, "event_time": rfc3339(start + timedelta(hours=i))}
        ).encode()
        vote = parse_vote(data, {}, PUBLISHED, DEFAULT_EVENT_TIME_POLICY)
        assert isinstance(vote, VoteEvent)  # never dropped
        hours.add(vote.event_hour)
    assert hours == {PUBLISHED_HOUR}
    # Whatever the claimed times, a post's hours per ingestion hour are bounded by the window.
    assert (DEFAULT_EVENT_TIME_POLICY.retention_s + DEFAULT_EVENT_TIME_POLICY.max_clock_skew_s) // 3_600 + 1 == 722
