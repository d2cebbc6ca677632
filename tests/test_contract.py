"""The event contract (schemas/contract.py): what parse_vote and parse_message make of each
message, the published JSON Schema agreeing with the parser, and the encoders.

The table (tests/support/contract_table.py): each valid message gives its VoteEvent or
VoteState, each invalid one is rejected with its reason and a detail, and every reason but the
batch-only ones is in it. Batches (contract v2, ndjson): each line judged alone and numbered,
blank lines skipped, a batch over the limits or of another format rejected whole, the limits
themselves accepted.

The published contract and the parser agree: schemas/vote_event.schema.json, checked with the
jsonschema library, accepts exactly the documents schemas.contract.parse_vote accepts.

Both sides see the same document: the parser the message bytes, the schema the JSON value
orjson reads from them (as the parser does; duplicate keys keep their last value). Messages
that are not JSON at all (not UTF-8, not JSON, over 64 KiB) are outside what a JSON Schema
can say, and are only checked to be rejected. The schema's description states the one
rule it cannot express (an event hour outside the years 1 to 9999 in UTC), and that case is
named below, so any other disagreement fails.

The writing side of the contract too: whatever events are encoded (event_message,
batch_messages, events_message), parse_message reads back each event's own verdict, and every
message carries the attributes the contract names.

The table is parsed at tests/support/event_times.py's PUBLISHED, the schema checks at the
corpus's publish time (tests/support/corpus.py CORPUS_PUBLISHED). ParseVotes on the same
messages: tests/test_parse_and_sum.py.

Pure tests: no emulator.
"""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import schemas
from schemas.contract import (
    BATCH_ID_PREFIX,
    EVENT_ID_ATTRIBUTE,
    EVENT_TIME_ATTRIBUTE,
    FORMAT_ATTRIBUTE,
    LINE_ATTRIBUTE,
    MAX_BATCH_BYTES,
    MAX_BATCH_EVENTS,
    MAX_MESSAGE_BYTES,
    MESSAGE_ID_PREFIX,
    NDJSON,
    REASONS,
    batch_messages,
    event_message,
    events_message,
    parse_message,
    parse_vote,
    reason_of,
)
from schemas.records import Rejected, VoteEvent, VoteState
from tests.support.contract_table import BATCH, INVALID, VALID, ndjson
from tests.support.corpus import CORPUS, CORPUS_PUBLISHED
from tests.support.event_times import PUBLISHED
from tests.support.examples import examples

# --- the table: valid and invalid messages ----------------------------------------------------


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


# --- contract v2: batches -------------------------------------------------------------------


def results(data: bytes, attributes: dict | None = None) -> list[VoteEvent | VoteState | Rejected]:
    return list(parse_message(data, BATCH if attributes is None else attributes, PUBLISHED))


def test_a_message_without_format_is_one_event_as_in_v1() -> None:
    for data, expected in VALID:
        assert results(data, {}) == [expected]
    assert [
        reason_of(r) if isinstance(r, Rejected) else r
        for r in results(b'[{"post_id": "p", "counter": "upvotes", "delta": 1}]', {})
    ] == ["not_object"]


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
    rejected = [r for r in got if isinstance(r, Rejected)]
    assert rejected == got
    assert [(reason_of(r), r.attributes[LINE_ATTRIBUTE]) for r in rejected] == [
        ("not_json", "1"),
        ("not_json", "2"),
        ("not_object", "4"),
        ("unknown_counter", "5"),
    ]  # line 3 was blank


def test_a_line_over_the_event_limit_is_rejected_alone() -> None:
    huge = json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1, "pad": "x" * MAX_MESSAGE_BYTES}).encode()
    got = results(ndjson(VALID[0][0], huge))
    assert got[0] == VALID[0][1]
    too_large = got[1]
    assert isinstance(too_large, Rejected)
    assert reason_of(too_large) == "too_large" and too_large.attributes[LINE_ATTRIBUTE] == "2"


@pytest.mark.parametrize(
    "data,attributes,reason",
    [
        (ndjson(*[VALID[0][0]] * (MAX_BATCH_EVENTS + 1)), BATCH, "too_many_events"),
        (ndjson(VALID[0][0], b" " * MAX_BATCH_BYTES), BATCH, "too_large"),
        (ndjson(VALID[0][0], b"\xff"), BATCH, "not_utf8"),
        (VALID[0][0], {FORMAT_ATTRIBUTE: "json-array"}, "unknown_format"),
        (VALID[0][0], {FORMAT_ATTRIBUTE: ""}, "unknown_format"),
    ],
)
def test_a_batch_over_the_limits_or_of_another_format_is_rejected_whole(data, attributes, reason) -> None:
    [rejected] = results(data, attributes)
    assert isinstance(rejected, Rejected) and reason_of(rejected) == reason, rejected
    assert rejected.data == data and rejected.attributes == attributes  # the whole message, no line number


def test_exactly_the_limits_are_accepted() -> None:
    assert len(results(ndjson(*[VALID[0][0]] * MAX_BATCH_EVENTS))) == MAX_BATCH_EVENTS
    padded = ndjson(VALID[0][0], b" " * (MAX_BATCH_BYTES - len(VALID[0][0]) - 1))
    assert len(padded) == MAX_BATCH_BYTES and results(padded) == [VALID[0][1]]


# --- the published JSON Schema and the parser agree ------------------------------------------

# "Integers are written without a fraction (1, not 1.0)": JSON Schema's own integer type
# would take 1.0 as well, so the check uses the schema's stated meaning.
_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
)
Validator = type("Validator", (Draft202012Validator,), {"TYPE_CHECKER": _TYPES})
VALIDATOR = Validator(schemas.event_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_accepts(document: object) -> bool:
    try:
        return VALIDATOR.is_valid(document)
    except RecursionError:
        # jsonschema builds the error message of a value nested a thousand deep and runs out
        # of stack; no such value is a valid event (every field is a string or an integer).
        return False


def parser_verdict(data: bytes) -> str:
    result = parse_vote(data, {}, CORPUS_PUBLISHED)
    return reason_of(result) if isinstance(result, Rejected) else "accepted"


def hour_out_of_range(data: bytes) -> bool:
    """The rule the schema states in words only: the event hour, in UTC, is in years 1..9999."""
    result = parse_vote(data, {}, CORPUS_PUBLISHED)
    return isinstance(result, Rejected) and "outside Spanner's timestamp range" in result.error


def assert_agree(data: bytes) -> None:
    verdict = parser_verdict(data)
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        assert verdict in ("not_json", "not_utf8", "too_large"), verdict
        return
    if len(data) > MAX_MESSAGE_BYTES:
        assert verdict == "too_large"
        return
    if hour_out_of_range(data):
        # The stated exception, and only it: the schema cannot see the range, so its verdict is
        # the one it gives with an in-range time, where both sides agree again.
        in_range = {**document, "event_time": "2026-11-22T01:02:03Z"}
        assert schema_accepts(document) == schema_accepts(in_range)
        assert_agree(orjson.dumps(in_range))
        return
    assert schema_accepts(document) == (verdict == "accepted"), (data[:200], verdict)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(schemas.event_schema())


@pytest.mark.parametrize("name", sorted(json.loads((CORPUS / "expected.json").read_text())))
def test_parser_and_schema_agree_on_every_corpus_message(name: str) -> None:
    data = (CORPUS / name).read_bytes()
    if not name.endswith(".ndjson"):
        assert_agree(data)
        return
    # A batch's lines are v1 events each; the schema speaks about each line.
    for line in data.split(b"\n"):
        if line.strip() and len(line) <= MAX_MESSAGE_BYTES:
            assert_agree(line)


def test_the_corpus_exercises_both_verdicts_of_the_schema() -> None:
    verdicts = set()
    for path in CORPUS.glob("*.bin"):  # v1 messages
        try:
            verdicts.add(schema_accepts(orjson.loads(path.read_bytes())))
        except orjson.JSONDecodeError:
            continue
    assert verdicts == {True, False}


_TEXT = st.text(max_size=140) | st.sampled_from(["", "p-1", "upvotes", "shares", "likes", "x" * 128, "x" * 129])
_TIMES = st.sampled_from(
    [
        "2026-11-22T01:02:03Z",
        "2026-11-22T01:02:03.123456789+05:30",
        "2026-13-01T00:00:00Z",
        "2026-11-22",
        "2026-11-22T01:02:03",
        "yesterday",
        "",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59Z",
        "2026-02-30T00:00:00Z",
        "2026-11-22t01:02:03z",
    ]
) | st.text(max_size=30)
_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
_FIELDS = {
    "post_id": _TEXT | _VALUES,
    "counter": st.sampled_from(["upvotes", "shares", "likes", "UPVOTES", ""]) | _VALUES,
    "delta": st.sampled_from([1, -1, 0, 1_000_000, -1_000_000, 1_000_001, 1.0, True]) | _VALUES,
    "event_id": _TEXT | _VALUES,
    "event_time": _TIMES | _VALUES,
    "user_id": _TEXT | _VALUES,
    "extra": _VALUES,
}


@st.composite
def documents(draw) -> object:
    """Mostly near-valid events with some fields missing or wrong, sometimes no object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_VALUES)
    present = draw(st.sets(st.sampled_from(sorted(_FIELDS))))
    return {name: draw(_FIELDS[name]) for name in present}


@settings(max_examples=examples(1500), deadline=None)
@given(documents())
def test_parser_and_schema_agree_on_generated_documents(document: object) -> None:
    # The standard library writes integers of any size, as a publisher might.
    assert_agree(json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def encodable(document: object) -> bool:
    """An event a publisher can hand the encoder: a JSON object orjson writes (64-bit integers)."""
    try:
        orjson.dumps(document)
    except TypeError:
        return False
    return isinstance(document, dict)


def expected_v1_attributes(event: dict, attributes: dict[str, str]) -> dict[str, str]:
    """The attributes the contract says a v1 message of `event` carries (a new ID is checked by
    its prefix and carried over)."""
    own = event.get("event_id")
    event_id = own if isinstance(own, str) and own else attributes[EVENT_ID_ATTRIBUTE]
    if not (isinstance(own, str) and own):
        assert event_id.startswith(MESSAGE_ID_PREFIX)
    expected = {EVENT_ID_ATTRIBUTE: event_id}
    if isinstance(event.get("event_time"), str):
        expected[EVENT_TIME_ATTRIBUTE] = event["event_time"]
    return expected


def same_verdict(parsed: object, alone: object, event: dict) -> None:
    """A result read back from a message is the event's verdict as a v1 message of its own:
    the same VoteEvent or VoteState, or a rejection of the same bytes for the same reason."""
    if isinstance(alone, Rejected):
        assert isinstance(parsed, Rejected) and parsed.data == alone.data and parsed.error == alone.error
        return
    assert parsed == alone
    if isinstance(parsed, VoteEvent):  # and it is the event that was encoded
        assert (parsed.post_id, parsed.counter, parsed.delta) == (event["post_id"], event["counter"], event["delta"])
    else:
        assert isinstance(parsed, VoteState) and (parsed.post_id, parsed.user_id, parsed.vote) == (
            event["post_id"],
            event["user_id"],
            event["vote"],
        )


_VOTE_STATES = st.fixed_dictionaries(
    {
        "post_id": st.sampled_from(["p-1", "p/2"]),
        "user_id": st.sampled_from(["u-1", "ü"]),
        "vote": st.sampled_from(["up", "down", "none", "sideways"]),
        "event_time": _TIMES,
    },
    optional={"event_id": _TEXT},
)
_DELTA_EVENTS = st.fixed_dictionaries(
    {
        "post_id": st.sampled_from(["p-1", "p/2", "ünï"]),
        "counter": st.sampled_from(["upvotes", "shares"]),
        "delta": st.integers(-2, 2),
    },
    optional={
        "event_id": _TEXT,
        "event_time": st.sampled_from(["2026-11-22T01:02:03Z", "2026-11-22T01:02:03.5+01:00"]),
        "user_id": st.sampled_from(["u-1", "u-2"]),
    },
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_DELTA_EVENTS | _VOTE_STATES | documents().filter(encodable), max_size=12), st.integers(1, 5))
def test_encoded_events_parse_back_to_themselves(events: list[dict], batch_size: int) -> None:
    """encode -> parse_message gives back the events: every encoding of the contract's writing
    side, for valid and invalid events alike, with the attributes the contract names."""
    messages = list(batch_messages(events, batch_size))
    assert [m.events for m in messages] == [min(batch_size, len(events) - i) for i in range(0, len(events), batch_size)]
    parsed = [result for m in messages for result in parse_message(m.data, m.attributes, CORPUS_PUBLISHED)]
    alone = [parse_vote(orjson.dumps(event), {}, CORPUS_PUBLISHED) for event in events]
    assert len(parsed) == len(events)
    for result, own, event in zip(parsed, alone, events):
        same_verdict(result, own, event)
    for message in messages:
        if batch_size == 1:
            event = orjson.loads(message.data)
            assert message.attributes == expected_v1_attributes(event, message.attributes)
        else:
            assert message.attributes[FORMAT_ATTRIBUTE] == NDJSON and set(message.attributes) == {
                FORMAT_ATTRIBUTE,
                EVENT_ID_ATTRIBUTE,
            }
            assert message.attributes[EVENT_ID_ATTRIBUTE].startswith(BATCH_ID_PREFIX)
    if events:  # the service's path: the encoded events of one request, as one message
        lines = [orjson.dumps(event) for event in events]
        one = events_message(lines)
        again = list(parse_message(one.data, one.attributes, CORPUS_PUBLISHED))
        for result, own, event in zip(again, alone, events, strict=True):
            same_verdict(result, own, event)
        if len(events) == 1:
            data, attributes = event_message(events[0])
            assert one.data == data and one.attributes.keys() == attributes.keys()
            assert one.attributes == expected_v1_attributes(events[0], one.attributes)
        else:
            assert one.attributes[EVENT_ID_ATTRIBUTE].startswith(BATCH_ID_PREFIX) and one.events == len(events)
