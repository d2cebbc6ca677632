"""The event contract: a table of valid and invalid messages through parse_vote and ParseVotes."""
from __future__ import annotations

import json
from datetime import datetime

import apache_beam as beam
import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from schemas.contract import REASONS, parse_vote, reason_of
from transforms.parse import ParseVotes
from schemas.records import Rejected, VoteEvent

def epoch(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339).timestamp())


PUBLISHED = float(epoch("2026-11-22T00:22:03Z"))
PUBLISHED_HOUR = epoch("2026-11-22T00:00:00Z")


def j(**fields) -> bytes:
    return json.dumps(fields).encode()


VALID = [
    (j(post_id="p-42", counter="upvotes", delta=1), VoteEvent("p-42", "upvotes", 1, PUBLISHED_HOUR)),
    (j(post_id="p-42", counter="upvotes", delta=-1, event_id="e1", user_id="u-7", event_time="2026-11-22T01:02:03.456Z"),
     VoteEvent("p-42", "upvotes", -1, epoch("2026-11-22T01:00:00Z"), "e1", "u-7")),
    (j(post_id="x" * 128, counter="shares", delta=1_000_000), VoteEvent("x" * 128, "shares", 1_000_000, PUBLISHED_HOUR)),
    (j(post_id="p", counter="shares", delta=-1_000_000, extra={"ignored": True}), VoteEvent("p", "shares", -1_000_000, PUBLISHED_HOUR)),
    (j(post_id="p-1", counter="upvotes", delta=2, event_time="2026-11-22T03:59:59+02:00"), VoteEvent("p-1", "upvotes", 2, epoch("2026-11-22T01:00:00Z"))),
    (j(post_id="ünïcødé 🎉", counter="upvotes", delta=1), VoteEvent("ünïcødé 🎉", "upvotes", 1, PUBLISHED_HOUR)),
]

INVALID = [
    (b"\xff\xfe\x00garbage", "not_utf8"),
    (b"not json at all", "not_json"),
    (b"", "not_json"),
    (b'{"post_id": "p-1", "counter": "upvotes", "delta": 1', "not_json"),
    (b"[1, 2, 3]", "not_object"),
    (b'"a string"', "not_object"),
    (b"null", "not_object"),
    (j(counter="upvotes", delta=1), "missing_field"),
    (j(post_id="p-1", delta=1), "missing_field"),
    (j(post_id="p-1", counter="upvotes"), "missing_field"),
    (j(post_id=42, counter="upvotes", delta=1), "wrong_type"),
    (j(post_id="p-1", counter=1, delta=1), "wrong_type"),
    (j(post_id="p-1", counter="upvotes", delta="1"), "wrong_type"),
    (j(post_id="p-1", counter="upvotes", delta=1.0), "wrong_type"),
    (j(post_id="p-1", counter="upvotes", delta=True), "wrong_type"),
    (j(post_id="p-1", counter="upvotes", delta=None), "wrong_type"),
    (j(post_id="p-1", counter="upvotes", delta=1, event_id=7), "wrong_type"),
    (j(post_id="", counter="upvotes", delta=1), "empty_post_id"),
    (j(post_id="x" * 129, counter="upvotes", delta=1), "post_id_too_long"),
    (j(post_id="p-1", counter="likes", delta=1), "unknown_counter"),
    (j(post_id="p-1", counter="Upvotes", delta=1), "unknown_counter"),
    (j(post_id="p-1", counter="upvotes", delta=0), "zero_delta"),
    (j(post_id="p-1", counter="upvotes", delta=1_000_001), "delta_out_of_range"),
    (j(post_id="p-1", counter="upvotes", delta=-1_000_001), "delta_out_of_range"),
    (b'{"post_id": "p-1", "counter": "upvotes", "delta": 100000000000000000000000}', "delta_out_of_range"),
    (j(post_id="p-1", counter="upvotes", delta=1, event_time="yesterday"), "bad_event_time"),
    (j(post_id="p-1", counter="upvotes", delta=1, event_time="2026-11-22T01:02:03"), "bad_event_time"),
    (j(post_id="p-1", counter="upvotes", delta=1, user_id="u" * 129), "field_too_long"),
    (b"{" * 100_000, "too_large"),
]


@pytest.mark.parametrize("data,expected", VALID)
def test_valid_events_are_accepted(data: bytes, expected: VoteEvent) -> None:
    assert parse_vote(data, {}, PUBLISHED) == expected


@pytest.mark.parametrize("data,reason", INVALID)
def test_invalid_events_are_rejected_with_their_reason(data: bytes, reason: str) -> None:
    result = parse_vote(data, {"event_id": "e9"}, PUBLISHED)
    assert isinstance(result, Rejected)
    assert reason_of(result) == reason, result.error
    assert result.data == data and result.attributes == {"event_id": "e9"}
    assert len(result.error) > len(reason) + 2  # a detail follows the reason


def test_every_reason_is_exercised_by_the_table() -> None:
    assert {reason for _, reason in INVALID} == set(REASONS)


def test_parse_votes_splits_accepted_and_rejected_in_a_pipeline() -> None:
    messages = [PubsubMessage(data, {"k": "v"}) for data, _ in VALID[:2]] + [
        PubsubMessage(data, {}) for data, _ in INVALID[:3]
    ]
    with TestPipeline() as p:
        parsed = (
            p
            | beam.Create(messages)
            | beam.Map(lambda m: beam.window.TimestampedValue(m, PUBLISHED))
            | ParseVotes()
        )
        assert_that(parsed.votes, equal_to([e for _, e in VALID[:2]]), label="votes")
        assert_that(parsed.rejected | beam.Map(reason_of), equal_to([r for _, r in INVALID[:3]]), label="rejected")
