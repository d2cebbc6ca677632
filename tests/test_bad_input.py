"""Hostile input: a corpus of malformed messages, property tests of parse_vote, and dead letters
that always fit in Pub/Sub.

parse_vote's contract (schemas/contract.py): bytes in, exactly one of VoteEvent or Rejected
out, never an exception; a Rejected keeps the message whole and its error is
"<reason>: <detail>" with reason in REASONS; an accepted event satisfies the event contract
(schemas/vote_event.schema.json). The corpus in tests/corpus/ (made by make_corpus.py)
pins the outcome of each kind of malformed message; hypothesis searches for inputs the
corpus did not think of.

Pure tests: no emulator is needed, and the module runs in seconds.
"""
from __future__ import annotations

import importlib.util
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.dead_letter import ERROR_ATTRIBUTE, to_dead_letter
from schemas.contract import (
    DEFAULT_EVENT_TIME_POLICY, FORMAT_ATTRIBUTE, LINE_ATTRIBUTE, MAX_MESSAGE_BYTES, REASONS, EventTimePolicy,
    parse_message, parse_vote, reason_of,
)
from schemas.counters import CONTRACT_NAMES as COUNTERS
from schemas.counters import VOTER_CONTRACT_NAMES
from schemas.records import HOUR_S, FailedDelta, PostDelta, PostUser, Rejected, VoteEvent, VoteState
from schemas.vote_states import VOTES, keep_latest
from transforms.parse_and_sum import ParseVotes, RunningSums, sum_message
from spanner_store.tables import delta_key

CORPUS = Path(__file__).resolve().parent / "corpus"
PUBLISHED = 1_795_309_323.0  # 2026-11-22T01:02:03Z: stands in for a missing event_time
PUBLISHED_HOUR = int(PUBLISHED // HOUR_S) * HOUR_S

# Pub/Sub's limits on one message (https://cloud.google.com/pubsub/quotas#resource_limits).
PUBSUB_MAX_ATTRIBUTES = 100
PUBSUB_MAX_ATTRIBUTE_KEY_BYTES = 256
PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES = 1024
PUBSUB_MAX_MESSAGE_BYTES = 10_000_000  # "10 MB", counted conservatively in decimal
TEN_MB = 10 * 1024 * 1024



def outcome(result: VoteEvent | VoteState | Rejected) -> str:
    return reason_of(result) if isinstance(result, Rejected) else "accepted"


def load_make_corpus():
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def manifest() -> dict[str, str]:
    return json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))


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


def corpus_attributes(name: str) -> dict[str, str]:
    """The attributes a corpus file is sent with: batches carry their `format`."""
    if name.endswith(".ndjson"):
        return {"event_id": "b-corpus", FORMAT_ATTRIBUTE: load_make_corpus().format_of(name)}
    return {"event_id": "e-corpus"}


def batch_outcome(results: list) -> dict:
    """A batch's results in the manifest's form."""
    if len(results) == 1 and isinstance(results[0], Rejected) and LINE_ATTRIBUTE not in results[0].attributes:
        return {"whole": reason_of(results[0])}
    return {"accepted": sum(not isinstance(r, Rejected) for r in results),
            "rejected": {r.attributes[LINE_ATTRIBUTE]: reason_of(r) for r in results if isinstance(r, Rejected)}}


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
        outcomes |= {want} if isinstance(want, str) else ({want["whole"]} if "whole" in want else set(want["rejected"].values()))
    assert outcomes <= set(REASONS) | {"accepted"}
    assert set(REASONS) <= outcomes


def test_the_corpus_covers_each_input_class() -> None:
    names = " ".join(manifest())
    for needed in ("batch-one-bad-line-among-1000", "batch-all-lines-bad", "batch-blank-lines", "batch-1001-events",
                   "batch-a-line-over-the-event-limit", "batch-bad-format-value", "batch-not-utf8","binary-garbage", "empty-payload", "deep-nesting-100k", "post-id-integer", "counter-null",
                   "delta-nan", "delta-infinity", "delta-1e400", "delta-huge-integer", "delta-true", "post-id-null",
                   "lone-high-surrogate", "utf8-bom-prefix", "overlong-utf8", "raw-nul", "rtl-override",
                   "post-id-128-emoji", "post-id-129-emoji", "sql-drop-table", "control-chars",
                   "duplicate-delta", "trailing-garbage", "array-of-events", "json-string-containing-json"):
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
        if isinstance(event, VoteState):
            assert (event.post_id, event.user_id, event.vote) == (fields["post_id"], fields["user_id"], fields["vote"])
        else:
            assert (event.post_id, event.counter, event.delta) == (fields["post_id"], fields["counter"], fields["delta"])


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


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
                   timezones=st.just(timezone.utc)))
@example(datetime(1, 1, 1, tzinfo=timezone.utc))
@example(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc))
def test_every_accepted_event_time_gives_a_row_key_the_sink_can_build(moment: datetime) -> None:
    event_time = f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S.%fZ")
    data = json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1, "event_time": event_time}).encode()
    result = parse_vote(data, {}, PUBLISHED)
    assert isinstance(result, VoteEvent), result
    key = delta_key(PostDelta.of(result.post_id, result.event_hour, "w:0:0", upvotes=1, events=1))
    assert key[2] == moment.replace(minute=0, second=0, microsecond=0)


def test_the_corpus_through_parse_votes_in_a_pipeline() -> None:
    """The DoFn (metrics per reason, tagged outputs) survives the whole corpus in one bundle."""
    # The contract rejects these (their UTC hour is outside Spanner's range); the pipeline's
    # event-time policy counts them in their ingestion hour instead (issue 15).
    ingestion_hour = {"116-event-time-year-0-in-utc.bin", "117-event-time-year-10000-in-utc.bin"}
    expected = {n: "accepted" if n in ingestion_hour else r for n, r in manifest().items()}
    messages = [PubsubMessage((CORPUS / name).read_bytes(), {**corpus_attributes(name), "n": name})
                for name in sorted(expected)]
    messages.append(PubsubMessage(None, {"n": "none"}))  # a message without data
    want_rejected = [("none", "not_json")]
    accepted = 0
    for name, want in expected.items():
        if isinstance(want, str):
            accepted += want == "accepted"
            want_rejected += [(name, want)] if want != "accepted" else []
        elif "whole" in want:
            want_rejected.append((name, want["whole"]))
        else:
            accepted += want["accepted"]
            want_rejected += [(name, reason) for reason in want["rejected"].values()]
    with TestPipeline() as p:
        parsed = (
            p | beam.Create(messages)
            | beam.Map(lambda m: beam.window.TimestampedValue(m, PUBLISHED))
            | ParseVotes()
        )
        events = ((parsed.sums, parsed.states) | beam.Flatten()
                  | beam.FlatMap(lambda keyed: [sums.events for sums in keyed[1].values()])
                  | beam.CombineGlobally(sum))
        assert_that(events, equal_to([accepted]), label="votes")
        assert_that(
            parsed.rejected | beam.Map(lambda r: (r.attributes["n"], reason_of(r))),
            equal_to(sorted(want_rejected)),
            label="rejected",
        )


# --- property tests of parse_vote -------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=4096))
@example(b"")
@example(b"\xff" * 10)
@example(b'{"post_id":"p","counter":"upvotes","delta":1}')
def test_parse_vote_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    assert_well_formed(data, {}, parse_vote(data, {}, PUBLISHED))


JSON_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
    | st.sampled_from(["post_id", "counter", "delta", "upvotes", "shares", ""])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=12) | st.sampled_from(["post_id", "counter", "delta", "event_time"]),
                      children, max_size=6),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_parse_vote_never_raises_on_arbitrary_json(value, ascii_only: bool) -> None:
    # NaN/Infinity come out as bare tokens (not JSON); lone surrogates come out either as
    # \\ud800 escapes or, with surrogatepass, as bytes that are not UTF-8.
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    result = parse_vote(data, {"a": "b"}, PUBLISHED)
    assert_well_formed(data, {"a": "b"}, result)
    if not isinstance(value, dict):
        assert isinstance(result, Rejected)


NO_SURROGATES = st.characters(blacklist_categories=("Cs",))
TEXT = st.text(NO_SURROGATES, max_size=200)
VALID_TIMES = ["2026-11-22T01:02:03Z", "2026-11-22T03:02:03.5+02:00", "2026-11-22T01:59:59.999999-00:30"]
INVALID_TIMES = ["yesterday", "2026-11-22T01:02:03", "", "2026-02-30T00:00:00Z", "2026-11-22T24:00:01Z"]
def mostly(valid: st.SearchStrategy, *invalid: st.SearchStrategy) -> st.SearchStrategy:
    """Valid about five times in six, so that whole valid votes are common too."""
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: valid if ok else st.one_of(*invalid))


REQUIRED = ("post_id", "counter", "delta")
MIXED_VOTE = st.builds(
    lambda fields, optional, dropped: {k: v for k, v in {**fields, **optional}.items() if k not in dropped},
    st.fixed_dictionaries({
        "post_id": mostly(st.text(NO_SURROGATES, min_size=1, max_size=128), st.just(""),
                          st.text(NO_SURROGATES, min_size=129, max_size=140), st.integers(), st.none(), st.booleans()),
        "counter": mostly(st.sampled_from(COUNTERS), TEXT, st.integers(), st.none()),
        "delta": mostly(st.integers(-1_000_000, 1_000_000).filter(bool), st.just(0), st.integers(),
                        st.integers(-(2**80), 2**80), st.floats(), st.booleans(), st.none(), TEXT),
    }),
    st.fixed_dictionaries({}, optional={
        "event_id": mostly(st.text(NO_SURROGATES, max_size=128), TEXT, st.integers(), st.none()),
        "user_id": mostly(st.text(NO_SURROGATES, max_size=128), TEXT, st.lists(st.integers(), max_size=2), st.none()),
        "event_time": mostly(st.sampled_from(VALID_TIMES) | st.none(), st.sampled_from(INVALID_TIMES), st.integers()),
        "vote": mostly(st.sampled_from(VOTES), TEXT, st.integers(), st.none()),
        "extra": JSON_VALUES,
    }),
    mostly(st.just(()), st.lists(st.sampled_from(REQUIRED), max_size=3)),
)


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
        return (fields["vote"] in VOTES and "user_id" in fields and fields.get("event_time") in VALID_TIMES
                and "counter" not in fields and "delta" not in fields)
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


@settings(max_examples=600, deadline=None)
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
ATTRIBUTE_KEYS = st.text(NO_SURROGATES, min_size=1, max_size=64) | st.just(ERROR_ATTRIBUTE) | st.just("truncated_from_bytes")
ATTRIBUTE_VALUES = st.text(NO_SURROGATES, max_size=256).filter(lambda v: utf8_len(v) <= 1024)
ERRORS = st.builds(lambda reason, detail: f"{reason}: {detail}", st.sampled_from(REASONS), st.text(NO_SURROGATES, max_size=3000))


@settings(max_examples=200, deadline=None)
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
    error = "too_large: " + "\U0001F4A3" * 5000  # 20 kB of four-byte characters
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


@settings(max_examples=100, deadline=None)
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

_LINES = st.lists(
    st.one_of(
        MIXED_VOTE.map(lambda fields: json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass")),
        st.binary(max_size=64).filter(lambda b: b"\n" not in b),
        st.sampled_from([b"", b"  ", b"\r", b"[]", b"null"]),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_LINES, st.booleans())
def test_a_batch_is_judged_line_by_line_exactly_like_single_messages(lines: list[bytes], trailing: bool) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing else b"")
    attributes = {FORMAT_ATTRIBUTE: "ndjson", "event_id": "b-prop"}
    results = list(parse_message(data, attributes, PUBLISHED))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        [whole] = results  # not UTF-8: rejected whole, nothing counted
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


# --- sum_message: the pipeline's fused parse-and-sum, held to parse_message -------------------

def summed_by_parse_message(data: bytes, attributes: dict, published: float, policy) -> tuple[dict, dict, list, list]:
    """What sum_message must produce: parse_message's accepted delta events summed, its vote-state
    events merged to the latest per post and user, and its rejections."""
    sums: dict = {}
    states: dict = {}
    rejected = []
    ingestion: list[str] = []
    for result in parse_message(data, attributes, published, policy, ingestion.append):
        if isinstance(result, Rejected):
            rejected.append(result)
            continue
        if isinstance(result, VoteState):
            keep_latest(states, PostUser(result.post_id, result.user_id), result.latest())
            continue
        acc = sums.setdefault((result.post_id, result.event_hour), RunningSums())
        acc.counts[result.counter] += result.delta
        acc.events += 1
        if result.counter in VOTER_CONTRACT_NAMES and result.delta > 0 and result.user_id is not None:
            acc.voters = (acc.voters or set()) | {result.user_id}  # a voter: schemas/voter_sketch.py
    return sums, states, rejected, sorted(ingestion)


def assert_sums_like_parse_message(data: bytes, attributes: dict, published: float, policy) -> None:
    want_sums, want_states, want_rejected, want_ingestion = summed_by_parse_message(data, attributes, published, policy)
    sums: dict = {}
    states: dict = {}
    ingestion: list[str] = []
    rejected = sum_message(data, attributes, published, sums, policy, ingestion.append, states=states)
    assert sums == want_sums
    assert states == want_states
    assert [(r.data, r.attributes, r.error) for r in rejected] == [(r.data, r.attributes, r.error) for r in want_rejected]
    assert sorted(ingestion) == want_ingestion


@pytest.mark.parametrize("name", sorted(p.name for p in [*CORPUS.glob("*.bin"), *CORPUS.glob("*.ndjson")]))
def test_sum_message_agrees_with_parse_message_on_every_corpus_message(name: str) -> None:
    assert_sums_like_parse_message((CORPUS / name).read_bytes(), corpus_attributes(name), PUBLISHED,
                                   DEFAULT_EVENT_TIME_POLICY)


# Publish times and event times on both sides of the policy's bounds, and inside one hour of them.
_SKEWED_POLICY = EventTimePolicy(max_clock_skew_s=600, retention_s=2 * HOUR_S + 30)
_NEAR_BOUNDS = st.sampled_from([
    "2026-11-22T01:02:03Z", "2026-11-22T01:12:04Z", "2026-11-22T01:59:59z", "2026-11-22T02:00:00Z",
    "2026-11-21T23:01:00Z", "2026-11-21T23:02:33Z", "2026-11-21T22:59:59Z", "2026-11-22T01:02:03.5Z",
    "2026-11-22T01:02:03+00:00", "2026-11-22T01:60:00Z", "2026-11-22T01:02:60Z", "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z", "2026-02-30T00:00:00Z",
])
_EVENTS_NEAR_BOUNDS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"post_id": st.sampled_from(["p-1", "p-2", "ü"]), "counter": st.sampled_from(COUNTERS),
             "delta": st.sampled_from([1, -1, 3])},
            optional={"event_time": _NEAR_BOUNDS, "user_id": st.sampled_from(["u", "v", "", "x" * 129, "ü\u0000/"]),
                      "event_id": st.sampled_from(["e", None])},
        ).map(lambda fields: json.dumps(fields).encode()),
        _LINES.map(lambda lines: lines[0] if lines else b"{}"),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(_EVENTS_NEAR_BOUNDS, st.booleans(), st.sampled_from([PUBLISHED, PUBLISHED + 0.5, 0.0, -1e15, float("inf")]),
       st.sampled_from([DEFAULT_EVENT_TIME_POLICY, _SKEWED_POLICY, None]))
def test_sum_message_agrees_with_parse_message_on_generated_batches(lines: list[bytes], batched: bool,
                                                                    published: float, policy) -> None:
    if batched:
        assert_sums_like_parse_message(b"\n".join(lines), {FORMAT_ATTRIBUTE: "ndjson", "event_id": "b"}, published, policy)
    else:
        for line in lines:
            assert_sums_like_parse_message(line, {"event_id": "e"}, published, policy)
