"""The published contract and the parser agree: schemas/vote_event.schema.json, checked with the
jsonschema library, accepts exactly the documents schemas.contract.parse_vote accepts.

Both sides see the same document: the parser the message bytes, the schema the JSON value
orjson reads from them (as the parser does; duplicate keys keep their last value). Messages
that are not JSON at all (not UTF-8, not JSON, over 64 KiB) are outside what a JSON Schema
can say, and are only checked to be rejected. The schema's description states the one
rule it cannot express (an event hour outside the years 1 to 9999 in UTC), and that case is
named below, so any other disagreement fails.

Pure tests: no emulator.
"""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import schemas
from schemas.contract import MAX_MESSAGE_BYTES, parse_vote, reason_of
from schemas.records import Rejected

CORPUS = Path(__file__).resolve().parent / "corpus"
PUBLISHED = 1_795_309_323.0

# "Integers are written without a fraction (1, not 1.0)": JSON Schema's own integer type
# would take 1.0 as well, so the check uses the schema's stated meaning.
_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool))
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
    result = parse_vote(data, {}, PUBLISHED)
    return reason_of(result) if isinstance(result, Rejected) else "accepted"


def hour_out_of_range(data: bytes) -> bool:
    """The rule the schema states in words only: the event hour, in UTC, is in years 1..9999."""
    result = parse_vote(data, {}, PUBLISHED)
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
_TIMES = st.sampled_from([
    "2026-11-22T01:02:03Z", "2026-11-22T01:02:03.123456789+05:30", "2026-13-01T00:00:00Z", "2026-11-22",
    "2026-11-22T01:02:03", "yesterday", "", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59Z",
    "2026-02-30T00:00:00Z", "2026-11-22t01:02:03z",
]) | st.text(max_size=30)
_VALUES = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | _TEXT | st.lists(st.integers(), max_size=2)
           | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
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


@settings(max_examples=1500, deadline=None)
@given(documents())
def test_parser_and_schema_agree_on_generated_documents(document: object) -> None:
    # The standard library writes integers of any size, as a publisher might.
    assert_agree(json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass"))
