"""The event contract: a table of valid and invalid messages through parse_vote and ParseVotes."""
from __future__ import annotations

import json
from datetime import datetime

import apache_beam as beam
import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from schemas.contract import (
    FORMAT_ATTRIBUTE, LINE_ATTRIBUTE, MAX_BATCH_BYTES, MAX_BATCH_EVENTS, MAX_MESSAGE_BYTES, NDJSON, REASONS, parse_message,
    parse_vote, reason_of,
)
from schemas.counters import Counts, one
from schemas.records import CounterSums, PostHour, Rejected, VoteEvent, VoteState
from transforms.parse_and_sum import ParseVotes
from schemas.delta_ids import sum_shard

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
    (j(post_id="p-1", counter="downvotes", delta=1), VoteEvent("p-1", "downvotes", 1, PUBLISHED_HOUR)),
    # Vote-state events: the time to the microsecond (nanoseconds cut), orders the user's events.
    (j(post_id="p-1", user_id="u-7", vote="up", event_time="2026-11-22T01:02:03.4567891Z", event_id="e2"),
     VoteState("p-1", "u-7", "up", epoch("2026-11-22T01:02:03Z") * 10**6 + 456_789, epoch("2026-11-22T01:00:00Z"), "e2")),
    (j(post_id="p-1", user_id="u-7", vote="none", event_time="2026-11-22T03:02:03.5+02:00"),
     VoteState("p-1", "u-7", "none", epoch("2026-11-22T01:02:03Z") * 10**6 + 500_000, epoch("2026-11-22T01:00:00Z"))),
    (j(post_id="p-1", user_id="u-7", vote="down", event_time="2026-11-22T00:00:00Z", extra=1),
     VoteState("p-1", "u-7", "down", PUBLISHED_HOUR * 10**6, PUBLISHED_HOUR)),
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
    (j(post_id="p-1", vote="up", event_time="2026-11-22T01:02:03Z"), "missing_user"),
    (j(post_id="p-1", user_id="u-7", vote="sideways", event_time="2026-11-22T01:02:03Z"), "unknown_vote"),
    (j(post_id="p-1", user_id="u-7", vote="UP", event_time="2026-11-22T01:02:03Z"), "unknown_vote"),
    (j(post_id="p-1", user_id="u-7", vote=1, event_time="2026-11-22T01:02:03Z"), "wrong_type"),
    (j(post_id="p-1", user_id=None, vote="up", event_time="2026-11-22T01:02:03Z"), "wrong_type"),
    (j(post_id="p-1", user_id="u-7", vote="up"), "missing_field"),
    (j(user_id="u-7", vote="up", event_time="2026-11-22T01:02:03Z"), "missing_field"),
    (j(post_id="p-1", user_id="u-7", vote="up", event_time="now"), "bad_event_time"),
    (j(post_id="p-1", user_id="u-7", vote="up", counter="upvotes", event_time="2026-11-22T01:02:03Z"),
     "state_with_delta"),
    (j(post_id="p-1", user_id="u-7", vote="none", delta=-1, event_time="2026-11-22T01:02:03Z"), "state_with_delta"),
]


@pytest.mark.parametrize("data,expected", VALID)
def test_valid_events_are_accepted(data: bytes, expected: VoteEvent | VoteState) -> None:
    assert parse_vote(data, {}, PUBLISHED) == expected


@pytest.mark.parametrize("data,reason", INVALID)
def test_invalid_events_are_rejected_with_their_reason(data: bytes, reason: str) -> None:
    result = parse_vote(data, {"event_id": "e9"}, PUBLISHED)
    assert isinstance(result, Rejected)
    assert reason_of(result) == reason, result.error
    assert result.data == data and result.attributes == {"event_id": "e9"}
    assert len(result.error) > len(reason) + 2  # a detail follows the reason


BATCH_ONLY_REASONS = {"unknown_format", "too_many_events"}  # exercised by the batch tests below


def test_every_reason_is_exercised_by_the_table() -> None:
    assert {reason for _, reason in INVALID} == set(REASONS) - BATCH_ONLY_REASONS


def per_post_hour(keyed: tuple[int, dict[PostHour, CounterSums]]) -> list[tuple[PostHour, CounterSums]]:
    """A shard's sums, one (PostHour, CounterSums) each; each in the shard of its post."""
    shard, sums = keyed
    assert all(sum_shard(key.post_id) == shard for key in sums)
    return list(sums.items())


def message_sums(event: VoteEvent) -> tuple[PostHour, CounterSums]:
    sums = CounterSums(one(event.counter, event.delta), 1)
    return PostHour(event.post_id, event.event_hour), sums  # VALID[:2] are different posts: one sum each


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
        assert_that(parsed.sums | beam.FlatMap(per_post_hour), equal_to([message_sums(e) for _, e in VALID[:2]]),
                    label="sums")
        assert_that(parsed.rejected | beam.Map(reason_of), equal_to([r for _, r in INVALID[:3]]), label="rejected")


# --- contract v2: batches -------------------------------------------------------------------

BATCH = {FORMAT_ATTRIBUTE: NDJSON, "event_id": "batch-1"}


def ndjson(*lines: bytes) -> bytes:
    return b"\n".join(lines)


def results(data: bytes, attributes: dict | None = None) -> list[VoteEvent | Rejected]:
    return list(parse_message(data, BATCH if attributes is None else attributes, PUBLISHED))


def test_a_message_without_format_is_one_event_as_in_v1() -> None:
    for data, expected in VALID:
        assert results(data, {}) == [expected]
    assert [reason_of(r) for r in results(b'[{"post_id": "p", "counter": "upvotes", "delta": 1}]', {})] == ["not_object"]


def test_every_valid_line_of_a_batch_is_an_event_and_blank_lines_are_skipped() -> None:
    data = ndjson(VALID[0][0], b"", b"   ", VALID[1][0], VALID[2][0], b"")  # blank lines and a trailing newline
    assert results(data) == [VALID[0][1], VALID[1][1], VALID[2][1]]
    assert results(b"\n\n") == []  # nothing to count, nothing to reject
    assert results(ndjson(VALID[0][0], VALID[1][0]).replace(b"\n", b"\r\n")) == [VALID[0][1], VALID[1][1]]


def test_one_bad_line_among_1000_is_dead_lettered_alone_with_its_line_number() -> None:
    lines = [VALID[0][0]] * 1000
    lines[636] = INVALID[12][0]  # delta "1": wrong_type
    got = results(ndjson(*lines))
    assert sum(isinstance(r, VoteEvent) for r in got) == 999
    [bad] = [r for r in got if isinstance(r, Rejected)]
    assert reason_of(bad) == "wrong_type" and bad.data == INVALID[12][0]
    assert bad.attributes == {**BATCH, LINE_ATTRIBUTE: "637"}


def test_every_line_bad_gives_one_dead_letter_per_line_numbered_past_blank_lines() -> None:
    data = ndjson(INVALID[1][0], INVALID[3][0], b"", INVALID[4][0], INVALID[20][0])
    got = results(data)
    assert all(isinstance(r, Rejected) for r in got)
    assert [(reason_of(r), r.attributes[LINE_ATTRIBUTE]) for r in got] == [
        ("not_json", "1"), ("not_json", "2"), ("not_object", "4"), ("unknown_counter", "5")]  # line 3 was blank


def test_a_line_over_the_event_limit_is_rejected_alone() -> None:
    huge = json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1, "pad": "x" * MAX_MESSAGE_BYTES}).encode()
    got = results(ndjson(VALID[0][0], huge))
    assert got[0] == VALID[0][1]
    assert reason_of(got[1]) == "too_large" and got[1].attributes[LINE_ATTRIBUTE] == "2"


@pytest.mark.parametrize("data,attributes,reason", [
    (ndjson(*[VALID[0][0]] * (MAX_BATCH_EVENTS + 1)), BATCH, "too_many_events"),
    (ndjson(VALID[0][0], b" " * MAX_BATCH_BYTES), BATCH, "too_large"),
    (ndjson(VALID[0][0], b"\xff"), BATCH, "not_utf8"),
    (VALID[0][0], {FORMAT_ATTRIBUTE: "json-array"}, "unknown_format"),
    (VALID[0][0], {FORMAT_ATTRIBUTE: ""}, "unknown_format"),
])
def test_a_batch_over_the_limits_or_of_another_format_is_rejected_whole(data, attributes, reason) -> None:
    [rejected] = results(data, attributes)
    assert isinstance(rejected, Rejected) and reason_of(rejected) == reason, rejected.error
    assert rejected.data == data and rejected.attributes == attributes  # the whole message, no line number


def test_exactly_the_limits_are_accepted() -> None:
    assert len(results(ndjson(*[VALID[0][0]] * MAX_BATCH_EVENTS))) == MAX_BATCH_EVENTS
    padded = ndjson(VALID[0][0], b" " * (MAX_BATCH_BYTES - len(VALID[0][0]) - 1))
    assert len(padded) == MAX_BATCH_BYTES and results(padded) == [VALID[0][1]]


def test_parse_votes_sums_each_batch_per_post_and_hour() -> None:
    one = json.dumps({"post_id": "hot", "counter": "upvotes", "delta": 1}).encode()
    share = json.dumps({"post_id": "hot", "counter": "shares", "delta": 1}).encode()
    unvote = json.dumps({"post_id": "cold", "counter": "upvotes", "delta": -1}).encode()
    batch = PubsubMessage(ndjson(*[one] * 400, *[share] * 50, unvote, b"oops", b""), BATCH)
    with TestPipeline() as p:
        parsed = (p | beam.Create([batch]) | beam.Map(lambda m: beam.window.TimestampedValue(m, PUBLISHED))
                  | ParseVotes())
        assert_that(parsed.sums | beam.FlatMap(per_post_hour),
                    equal_to([(PostHour("hot", PUBLISHED_HOUR), CounterSums(Counts(upvotes=400, shares=50), 450)),
                              (PostHour("cold", PUBLISHED_HOUR), CounterSums(Counts(upvotes=-1), 1))]), label="sums")
        assert_that(parsed.rejected | beam.Map(lambda r: (reason_of(r), r.attributes[LINE_ATTRIBUTE])),
                    equal_to([("not_json", "452")]), label="rejected")
