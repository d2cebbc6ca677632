"""Hostile input: a corpus of malformed messages, property tests of parse_vote and parse_message,
and dead letters that always fit in Pub/Sub.

parse_vote's contract (schemas/contract.py): bytes in, exactly one of VoteEvent or Rejected
out, never an exception; a Rejected keeps the message whole and its error is
"<reason>: <detail>" with reason in REASONS; an accepted event satisfies the event contract
(schemas/vote_event.schema.json). The corpus in tests/corpus/ (made by make_corpus.py, loaded
by tests/support/corpus.py) pins the outcome of each kind of malformed message; hypothesis
(tests/support/hostile_input.py's strategies) searches for inputs the corpus did not think of.
A batch (contract v2) is judged line by line exactly like single messages. Dead letters
(transforms/dead_letter.py to_dead_letter) of the largest and most hostile messages fit in
Pub/Sub's limits. The same inputs through sum_message and ParseVotes: tests/test_parse_and_sum.py.

Pure tests: no emulator is needed, and the module runs in seconds.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schemas.contract import (
    FORMAT_ATTRIBUTE,
    LINE_ATTRIBUTE,
    MAX_MESSAGE_BYTES,
    REASONS,
    parse_message,
    parse_vote,
    reason_of,
)
from schemas.counters import CONTRACT_NAMES as COUNTERS
from schemas.records import HOUR_S, FailedDelta, PostDelta, Rejected, VoteEvent, VoteState
from schemas.vote_states import VOTES
from spanner_store.tables import delta_key
from tests.support.corpus import CORPUS, corpus_attributes, load_make_corpus, manifest
from tests.support.corpus import CORPUS_PUBLISHED as PUBLISHED  # stands in for a missing event_time
from tests.support.examples import examples
from tests.support.hostile_input import JSON_VALUES, MIXED_VOTE, NDJSON_LINES, NO_SURROGATES, VALID_TIMES
from transforms.dead_letter import ERROR_ATTRIBUTE, to_dead_letter

PUBLISHED_HOUR = int(PUBLISHED // HOUR_S) * HOUR_S

# Pub/Sub's limits on one message (https://cloud.google.com/pubsub/quotas#resource_limits).
PUBSUB_MAX_ATTRIBUTES = 100
PUBSUB_MAX_ATTRIBUTE_KEY_BYTES = 256
PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES = 1024
PUBSUB_MAX_MESSAGE_BYTES = 10_000_000  # "10 MB", counted conservatively in decimal
TEN_MB = 10 * 1024 * 1024


def outcome(result: VoteEvent | VoteState | Rejected) -> str:
    return reason_of(result) if isinstance(result, Rejected) else "accepted"


def assert_well_formed(data: bytes, attributes: dict, result) -> None:
    """The invariants every parse_vote result must satisfy, whatever the input."""
    assert type(result) in (VoteEvent, VoteState, Rejected)
    if isinstance(result, Rejected):
        reason, sep, detail = result.error.partition(": ")
        assert sep == ": " and reason in REASONS, result.error
        assert detail, result.error
        assert result.data == data  # kept whole for the dead-letter topic
        assert result.attributes == attributes
        return
    assert isinstance(result.post_id, str) and 1 <= len(result.post_id) <= 128
    if isinstance(result, VoteState):
        assert result.vote in VOTES and isinstance(result.user_id, str) and 1 <= len(result.user_id) <= 128
        assert type(result.at_us) is int and result.event_hour <= result.at_us // 10**6 < result.event_hour + HOUR_S
        return
    assert result.counter in COUNTERS
    assert type(result.delta) is int and result.delta != 0 and -1_000_000 <= result.delta <= 1_000_000
    assert type(result.event_hour) is int and result.event_hour % HOUR_S == 0
    for optional in (result.event_id, result.user_id):
        assert optional is None or (isinstance(optional, str) and len(optional) <= 128)


# --- the corpus ---------------------------------------------------------------------------


def corpus_params():
    for name, expected in sorted(manifest().items()):
        yield pytest.param(name, expected, id=name)


def batch_outcome(results: list) -> dict:
    """A batch's results in the manifest's form."""
    if len(results) == 1 and isinstance(results[0], Rejected) and LINE_ATTRIBUTE not in results[0].attributes:
        return {"whole": reason_of(results[0])}
    return {
        "accepted": sum(not isinstance(r, Rejected) for r in results),
        "rejected": {r.attributes[LINE_ATTRIBUTE]: reason_of(r) for r in results if isinstance(r, Rejected)},
    }


@pytest.mark.parametrize("name,expected", list(corpus_params()))
def test_each_corpus_message_gets_its_expected_outcome(name: str, expected: str | dict) -> None:
    data = (CORPUS / name).read_bytes()
    attributes = corpus_attributes(name)
    results = list(parse_message(data, attributes, PUBLISHED))
    if name.endswith(".ndjson"):
        assert batch_outcome(results) == expected
        for result in results:
            if not isinstance(result, Rejected):
                assert_well_formed(b"", {}, result)
            elif LINE_ATTRIBUTE in result.attributes:  # a rejected line keeps its own bytes whole
                line = data.split(b"\n")[int(result.attributes[LINE_ATTRIBUTE]) - 1]
                assert_well_formed(line, {**attributes, LINE_ATTRIBUTE: result.attributes[LINE_ATTRIBUTE]}, result)
            else:
                assert_well_formed(data, attributes, result)
        return
    [result] = results
    assert_well_formed(data, attributes, result)
    assert outcome(result) == expected, getattr(result, "error", result)


def test_the_corpus_is_complete_and_matches_its_generator() -> None:
    on_disk = {p.name: p.read_bytes() for p in [*CORPUS.glob("*.bin"), *CORPUS.glob("*.ndjson")]}
    expected = manifest()
    generated = load_make_corpus().corpus()
    assert len(on_disk) >= 50
    assert set(on_disk) == set(expected) == set(generated)  # every file has exactly one expectation
    assert {name: data for name, (data, _) in generated.items()} == on_disk  # regenerates byte for byte
    assert {name: want for name, (_, want) in generated.items()} == expected
    assert max(len(data) for data in on_disk.values()) < 1024 * 1024  # big payloads are made in memory
    # Every outcome is a reason the contract can give, and every reason is exercised.
    outcomes = set()
    for want in expected.values():
        outcomes |= (
            {want}
            if isinstance(want, str)
            else ({want["whole"]} if "whole" in want else set(want["rejected"].values()))
        )
    assert outcomes <= set(REASONS) | {"accepted"}
    assert set(REASONS) <= outcomes


def test_the_corpus_covers_each_input_class() -> None:
    names = " ".join(manifest())
    for needed in (
        "batch-one-bad-line-among-1000",
        "batch-all-lines-bad",
        "batch-blank-lines",
        "batch-1001-events",
        "batch-a-line-over-the-event-limit",
        "batch-bad-format-value",
        "batch-not-utf8",
        "binary-garbage",
        "empty-payload",
        "deep-nesting-100k",
        "post-id-integer",
        "counter-null",
        "delta-nan",
        "delta-infinity",
        "delta-1e400",
        "delta-huge-integer",
        "delta-true",
        "post-id-null",
        "lone-high-surrogate",
        "utf8-bom-prefix",
        "overlong-utf8",
        "raw-nul",
        "rtl-override",
        "post-id-128-emoji",
        "post-id-129-emoji",
        "sql-drop-table",
        "control-chars",
        "duplicate-delta",
        "trailing-garbage",
        "array-of-events",
        "json-string-containing-json",
    ):
        assert needed in names, needed


def test_accepted_hostile_post_ids_are_kept_verbatim() -> None:
    """The SQL-looking / control-character IDs are valid and come out exactly as sent."""
    for name, expected in manifest().items():
        if expected != "accepted":
            continue
        data = (CORPUS / name).read_bytes()
        event = parse_vote(data, {}, PUBLISHED)
        # The event carries the last value of each key, as Python's own JSON parser reads it.
        fields = json.loads(data.decode("utf-8"))
        assert not isinstance(event, Rejected), event
        if isinstance(event, VoteState):
            assert (event.post_id, event.user_id, event.vote) == (fields["post_id"], fields["user_id"], fields["vote"])
        else:
            assert (event.post_id, event.counter, event.delta) == (
                fields["post_id"],
                fields["counter"],
                fields["delta"],
            )


def test_a_10_mb_payload_is_rejected_as_too_large_without_parsing_it() -> None:
    padding = b" " * (TEN_MB - 64)
    data = b'{"post_id":"p-1","counter":"upvotes","delta":1}' + padding  # valid JSON, but 10 MB
    assert len(data) > TEN_MB - 64
    result = parse_vote(data, {"event_id": "e-big"}, PUBLISHED)
    assert isinstance(result, Rejected) and reason_of(result) == "too_large"
    assert result.error.startswith("too_large: ") and str(len(data)) in result.error
    assert result.data == data
    assert isinstance(parse_vote(b"[" * TEN_MB, {}, PUBLISHED), Rejected)


def test_the_size_limit_is_exact() -> None:
    body = b'{"post_id":"p-1","counter":"upvotes","delta":1}'
    at_limit = body + b" " * (MAX_MESSAGE_BYTES - len(body))
    assert outcome(parse_vote(at_limit, {}, PUBLISHED)) == "accepted"
    assert outcome(parse_vote(at_limit + b" ", {}, PUBLISHED)) == "too_large"


@given(
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(timezone.utc)
    )
)
@example(datetime(1, 1, 1, tzinfo=timezone.utc))
@example(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc))
def test_every_accepted_event_time_gives_a_row_key_the_sink_can_build(moment: datetime) -> None:
    event_time = f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S.%fZ")
    data = json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1, "event_time": event_time}).encode()
    result = parse_vote(data, {}, PUBLISHED)
    assert isinstance(result, VoteEvent), result
    key = delta_key(PostDelta.of(result.post_id, result.event_hour, "w:0:0", upvotes=1, events=1))
    assert key[2] == moment.replace(minute=0, second=0, microsecond=0)


# --- property tests of parse_vote -------------------------------------------------------------


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=4096))
@example(b"")
@example(b"\xff" * 10)
@example(b'{"post_id":"p","counter":"upvotes","delta":1}')
def test_parse_vote_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    assert_well_formed(data, {}, parse_vote(data, {}, PUBLISHED))


@settings(max_examples=examples(400), deadline=None)
@given(JSON_VALUES, st.booleans())
def test_parse_vote_never_raises_on_arbitrary_json(value, ascii_only: bool) -> None:
    # NaN/Infinity come out as bare tokens (not JSON); lone surrogates come out either as
    # \\ud800 escapes or, with surrogatepass, as bytes that are not UTF-8.
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    result = parse_vote(data, {"a": "b"}, PUBLISHED)
    assert_well_formed(data, {"a": "b"}, result)
    if not isinstance(value, dict):
        assert isinstance(result, Rejected)


def has_non_finite_number(value) -> bool:
    """json.dumps writes NaN and Infinity as bare tokens, which are not JSON (RFC 8259); orjson refuses
    integers too big for a double."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) >= 2**1024  # orjson reads it as a double, which overflows: not_json
    if isinstance(value, dict):
        return any(has_non_finite_number(v) for v in value.values())
    if isinstance(value, list):
        return any(has_non_finite_number(v) for v in value)
    return False


def contract_accepts(fields: dict) -> bool:
    """An independent reading of the contract: would this dict (sent as json.dumps writes it) be accepted?"""
    if has_non_finite_number(fields):
        return False  # not JSON at all, even if the bad number is in an ignored field
    post_id, counter, delta = fields.get("post_id"), fields.get("counter"), fields.get("delta")
    if not (isinstance(post_id, str) and 1 <= len(post_id) <= 128):
        return False
    for name in ("event_id", "user_id"):  # present means a string of 1 to 128 characters
        if name in fields and not (isinstance(fields[name], str) and 1 <= len(fields[name]) <= 128):
            return False
    if "vote" in fields:  # a vote-state event: a vote, a user and a time, no counter nor delta
        return (
            fields["vote"] in VOTES
            and "user_id" in fields
            and fields.get("event_time") in VALID_TIMES
            and "counter" not in fields
            and "delta" not in fields
        )
    if counter not in COUNTERS:
        return False
    if type(delta) is not int or delta == 0 or abs(delta) > 1_000_000:
        return False
    return "event_time" not in fields or fields["event_time"] in VALID_TIMES


def hour_of(event_time: str | None) -> int:
    if event_time is None:
        return PUBLISHED_HOUR
    seconds = datetime.fromisoformat(event_time.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()
    return int(seconds // HOUR_S) * HOUR_S


@settings(max_examples=examples(600), deadline=None)
@given(MIXED_VOTE)
@example({"post_id": "p", "counter": "upvotes", "delta": 1})
@example({"post_id": "p", "counter": "upvotes", "delta": True})
@example({"post_id": "p", "counter": "shares", "delta": -1_000_000, "event_time": None, "user_id": None})
@example({"post_id": "p", "counter": "upvotes", "delta": 2**64})
@example({"post_id": "0", "counter": "upvotes", "delta": 1, "extra": float("inf")})
@example({"post_id": "p", "user_id": "u", "vote": "down", "event_time": "2026-11-22T01:02:03Z"})
@example({"post_id": "p", "user_id": "u", "vote": "up", "counter": "upvotes", "event_time": "2026-11-22T01:02:03Z"})
def test_parse_vote_on_dicts_mixing_valid_and_invalid_fields(fields: dict) -> None:
    data = json.dumps(fields, ensure_ascii=False).encode("utf-8")
    result = parse_vote(data, {}, PUBLISHED)
    assert_well_formed(data, {}, result)
    assert (not isinstance(result, Rejected)) == contract_accepts(fields), (fields, result)
    if isinstance(result, VoteState):
        assert (result.post_id, result.user_id, result.vote) == (fields["post_id"], fields["user_id"], fields["vote"])
        assert (result.event_hour, result.event_id) == (hour_of(fields["event_time"]), fields.get("event_id"))
    if isinstance(result, VoteEvent):
        assert (result.post_id, result.counter, result.delta) == (fields["post_id"], fields["counter"], fields["delta"])
        assert result.event_hour == hour_of(fields.get("event_time"))
        assert (result.event_id, result.user_id) == (fields.get("event_id"), fields.get("user_id"))


# --- dead letters within Pub/Sub's limits --------------------------------------------------


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def assert_within_pubsub_limits(message: PubsubMessage) -> None:
    attributes = message.attributes
    assert len(attributes) <= PUBSUB_MAX_ATTRIBUTES
    for key, value in attributes.items():
        assert isinstance(key, str) and isinstance(value, str)
        assert 1 <= utf8_len(key) <= PUBSUB_MAX_ATTRIBUTE_KEY_BYTES
        assert utf8_len(value) <= PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES
    assert isinstance(message.data, bytes) and 0 < len(message.data) <= PUBSUB_MAX_MESSAGE_BYTES
    size = len(message.data) + sum(utf8_len(k) + utf8_len(v) for k, v in attributes.items())
    assert size <= PUBSUB_MAX_MESSAGE_BYTES


def assert_error_kept(message: PubsubMessage, error: str) -> None:
    kept = message.attributes[ERROR_ATTRIBUTE]
    assert error.startswith(kept) and kept  # the error, cut to fit, never another message's
    assert kept.split(": ", 1)[0] in REASONS or kept.startswith("spanner_write_failed")


# Attributes as Pub/Sub delivers them: at most 100, keys up to 256 bytes, values up to 1024.
ATTRIBUTE_KEYS = (
    st.text(NO_SURROGATES, min_size=1, max_size=64) | st.just(ERROR_ATTRIBUTE) | st.just("truncated_from_bytes")
)
ATTRIBUTE_VALUES = st.text(NO_SURROGATES, max_size=256).filter(lambda v: utf8_len(v) <= 1024)
ERRORS = st.builds(
    lambda reason, detail: f"{reason}: {detail}", st.sampled_from(REASONS), st.text(NO_SURROGATES, max_size=3000)
)


@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.binary(min_size=1, max_size=70_000),
    attributes=st.dictionaries(ATTRIBUTE_KEYS, ATTRIBUTE_VALUES, max_size=PUBSUB_MAX_ATTRIBUTES),
    error=ERRORS,
)
def test_dead_letters_of_hostile_rejected_messages_fit_in_pubsub(data: bytes, attributes: dict, error: str) -> None:
    message = to_dead_letter(Rejected(data, attributes, error))
    assert_within_pubsub_limits(message)
    assert_error_kept(message, error)
    assert message.data == data  # under the truncation limit, the payload is kept whole
    others = {k: v for k, v in attributes.items() if k != ERROR_ATTRIBUTE}
    if len(others) <= PUBSUB_MAX_ATTRIBUTES - 1:
        assert {k: v for k, v in message.attributes.items() if k != ERROR_ATTRIBUTE} == others


def full_attributes(with_error: bool) -> dict[str, str]:
    attributes = {f"k{i:03d}-" + "\u00e9" * 60: "\u20ac" * 341 for i in range(PUBSUB_MAX_ATTRIBUTES)}  # 1023 bytes each
    if with_error:
        attributes.pop(next(iter(attributes)))
        attributes[ERROR_ATTRIBUTE] = "an earlier error \u2603" * 40
    return attributes


@pytest.mark.parametrize("with_error", [False, True], ids=["100-attributes", "100-attributes-one-is-error"])
@pytest.mark.parametrize("size", [1, TEN_MB, TEN_MB + 1], ids=["1-byte", "10-MiB", "10-MiB-plus-1"])
def test_dead_letters_of_the_largest_messages_fit_in_pubsub(with_error: bool, size: int) -> None:
    data = b"\x00" * size
    attributes = full_attributes(with_error)
    assert len(attributes) == PUBSUB_MAX_ATTRIBUTES
    error = "too_large: " + "\U0001f4a3" * 5000  # 20 kB of four-byte characters
    message = to_dead_letter(Rejected(data, attributes, error))
    assert_within_pubsub_limits(message)
    assert_error_kept(message, error)
    assert data.startswith(message.data)
    assert "earlier error" not in message.attributes[ERROR_ATTRIBUTE]  # the new error replaces an old one


def test_a_truncated_dead_letter_says_how_long_it_was_when_there_is_room() -> None:
    data = b"x" * TEN_MB
    message = to_dead_letter(Rejected(data, {"event_id": "e1"}, "too_large: 10485760 bytes"))
    assert_within_pubsub_limits(message)
    assert message.attributes["truncated_from_bytes"] == str(TEN_MB)
    assert message.attributes["event_id"] == "e1"
    assert len(message.data) < len(data)


@settings(max_examples=examples(100), deadline=None)
@given(post_id=st.text(NO_SURROGATES, min_size=1, max_size=200), error=st.text(NO_SURROGATES, max_size=5000))
def test_dead_letters_of_failed_delta_rows_fit_in_pubsub(post_id: str, error: str) -> None:
    delta = PostDelta.of(post_id, PUBLISHED_HOUR, "w:1:0", upvotes=1, shares=-1, events=2)
    failed = FailedDelta(delta, "spanner_write_failed: " + error)
    message = to_dead_letter(failed)
    assert_within_pubsub_limits(message)
    assert_error_kept(message, failed.error)
    assert PostDelta.from_json(json.loads(message.data)) == delta  # the row survives intact for replay
    assert message.attributes["kind"] == "delta_row"


# --- property tests of batches (contract v2) ---------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(NDJSON_LINES, st.booleans())
def test_a_batch_is_judged_line_by_line_exactly_like_single_messages(lines: list[bytes], trailing: bool) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing else b"")
    attributes = {FORMAT_ATTRIBUTE: "ndjson", "event_id": "b-prop"}
    results = list(parse_message(data, attributes, PUBLISHED))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        [whole] = results  # not UTF-8: rejected whole, nothing counted
        assert isinstance(whole, Rejected), whole
        assert reason_of(whole) == "not_utf8" and whole.data == data and whole.attributes == attributes
        return
    numbered = [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    assert len(results) == len(numbered)  # blank lines skipped, every other line judged once
    for (number, line), result in zip(numbered, results):
        alone = parse_vote(line, attributes, PUBLISHED)
        if not isinstance(alone, Rejected):
            assert result == alone
        else:
            assert isinstance(result, Rejected) and result.error == alone.error and result.data == line
            assert result.attributes == {**attributes, LINE_ATTRIBUTE: str(number)}
