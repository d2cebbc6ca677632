"""The event contract's table of messages: VALID ones, each with the event parse_vote makes of it,
and INVALID ones, each with its rejection reason; and batches (contract v2) of such lines.

The expectations are for messages published at tests/support/event_times.py's PUBLISHED: an
event without an event_time is in PUBLISHED_HOUR. tests/test_contract.py holds the parser to the
table; tests/test_parse_and_sum.py runs some of its messages through ParseVotes.
"""

from __future__ import annotations

import json

from schemas.contract import FORMAT_ATTRIBUTE, NDJSON
from schemas.records import VoteEvent, VoteState
from tests.support.event_times import PUBLISHED_HOUR, epoch


def j(**fields) -> bytes:
    return json.dumps(fields).encode()


VALID: list[tuple[bytes, VoteEvent | VoteState]] = [
    (j(post_id="p-42", counter="upvotes", delta=1), VoteEvent("p-42", "upvotes", 1, PUBLISHED_HOUR)),
    (
        j(
            post_id="p-42",
            counter="upvotes",
            delta=-1,
            event_id="e1",
            user_id="u-7",
            event_time="2026-11-22T01:02:03.456Z",
        ),
        VoteEvent("p-42", "upvotes", -1, epoch("2026-11-22T01:00:00Z"), "e1", "u-7"),
    ),
    (
        j(post_id="x" * 128, counter="shares", delta=1_000_000),
        VoteEvent("x" * 128, "shares", 1_000_000, PUBLISHED_HOUR),
    ),
    (
        j(post_id="p", counter="shares", delta=-1_000_000, extra={"ignored": True}),
        VoteEvent("p", "shares", -1_000_000, PUBLISHED_HOUR),
    ),
    (
        j(post_id="p-1", counter="upvotes", delta=2, event_time="2026-11-22T03:59:59+02:00"),
        VoteEvent("p-1", "upvotes", 2, epoch("2026-11-22T01:00:00Z")),
    ),
    (j(post_id="ünïcødé 🎉", counter="upvotes", delta=1), VoteEvent("ünïcødé 🎉", "upvotes", 1, PUBLISHED_HOUR)),
    (j(post_id="p-1", counter="downvotes", delta=1), VoteEvent("p-1", "downvotes", 1, PUBLISHED_HOUR)),
    # Vote-state events: the time to the microsecond (nanoseconds cut), orders the user's events.
    (
        j(post_id="p-1", user_id="u-7", vote="up", event_time="2026-11-22T01:02:03.4567891Z", event_id="e2"),
        VoteState(
            "p-1", "u-7", "up", epoch("2026-11-22T01:02:03Z") * 10**6 + 456_789, epoch("2026-11-22T01:00:00Z"), "e2"
        ),
    ),
    (
        j(post_id="p-1", user_id="u-7", vote="none", event_time="2026-11-22T03:02:03.5+02:00"),
        VoteState("p-1", "u-7", "none", epoch("2026-11-22T01:02:03Z") * 10**6 + 500_000, epoch("2026-11-22T01:00:00Z")),
    ),
    (
        j(post_id="p-1", user_id="u-7", vote="down", event_time="2026-11-22T00:00:00Z", extra=1),
        VoteState("p-1", "u-7", "down", PUBLISHED_HOUR * 10**6, PUBLISHED_HOUR),
    ),
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
    (
        j(post_id="p-1", user_id="u-7", vote="up", counter="upvotes", event_time="2026-11-22T01:02:03Z"),
        "state_with_delta",
    ),
    (j(post_id="p-1", user_id="u-7", vote="none", delta=-1, event_time="2026-11-22T01:02:03Z"), "state_with_delta"),
]


BATCH = {FORMAT_ATTRIBUTE: NDJSON, "event_id": "batch-1"}  # the attributes of a batch message


def ndjson(*lines: bytes) -> bytes:
    """Lines as one batch's data."""
    return b"\n".join(lines)
