"""The event contract, enforced: the bytes of one message in, VoteEvents, VoteStates and Rejecteds out.

Two kinds of event: a delta event (`counter` and `delta`: "add 1 to this post's shares") and a
vote-state event (`vote`, with a required `user_id` and `event_time`: "this user's vote on this
post is now up, down or none", schemas/vote_states.py). An event with a `vote` field is a
vote-state event and may carry neither `counter` nor `delta`.

v1: a message is one event, UTF-8 JSON (`vote_event.schema.json` beside this file states the
same rules as JSON Schema; a test keeps the two in step). `parse_vote` is a pure function of
an event's bytes, attributes and publish time, and never raises, whatever the input.

v2, batches: a message with the attribute `format=ndjson` carries newline-delimited JSON, one
v1 event per line, at most MAX_BATCH_EVENTS events and MAX_BATCH_BYTES bytes. Blank lines are
skipped. Each line is validated on its own: a bad line is rejected alone, with its 1-based
line number in the `line` attribute, and the other lines count. A batch over the limits, not
UTF-8, or with another `format` value is rejected whole, none of its events counted. Why
batches: every message costs the same fixed work in Pub/Sub and in the pipeline, whatever it
carries; the work per vote inside a message is small (see docs/benchmarks.md).

`parse_message` applies both versions. It is Beam-free, so publishers, the read service and
the pipeline all apply the same rules. The writing side lives here too, the one owner of how
events become messages: `event_message` (v1), `batch_message` and `batch_messages` (v2) and
`events_message` (already-encoded events) set the attributes below (`event_id`, `event_time`,
`format`) for `upvotes publish`, `upvotes serve`, the tests and the benchmarks alike; encoding
and parsing share the attribute names and the batch limits, and a property test holds
parse_message(encode(events)) to the events. A message the encoder names gets an `event_id`
attribute always: a v1 message its event's own `event_id`, else `message-<uuid4>`; a batch
`batch-<uuid4>` (see new_message_id). The pipeline's fused parse-and-sum
(transforms/parse_and_sum.py `sum_message`) decodes the common event in one call, as a
`CommonVote` (msgspec checks its keys, types and limits in C), checks its time with the pieces
marked below and hands anything else to `parse_line`, the specification; property tests hold
the two to the same results.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, NamedTuple

import msgspec
import orjson

from schemas import delta_retention_days
from schemas.counters import CONTRACT_NAMES
from schemas.records import HOUR_S, Rejected, VoteEvent, VoteState
from schemas.vote_states import VOTES

# The attribute a publisher sets to a message's unique ID. Dataflow drops redeliveries and
# republications that carry an ID it has already seen (the DirectRunner cannot).
EVENT_ID_ATTRIBUTE = "event_id"
# The attribute a v1 message carries its event's event_time in (informative: the pipeline
# reads the event's own field, never this attribute).
EVENT_TIME_ATTRIBUTE = "event_time"
# The prefixes of the message IDs the encoder makes (new_message_id): a batch's own ID, and the
# ID of a v1 message whose event has no event_id.
BATCH_ID_PREFIX = "batch-"
MESSAGE_ID_PREFIX = "message-"
# The attribute every dead letter carries its reason in ("<reason>: <detail>"): set by the
# pipeline (transforms/dead_letter.py), read by the re-drive (upvotes/operations/dead_letters.py).
ERROR_ATTRIBUTE = "error"
# The attribute that names the sink of a dead letter a sink could not write (its codec's kind,
# spanner_writes/sinks.py); a rejected message's dead letter keeps the attributes it came with.
KIND_ATTRIBUTE = "kind"
MAX_MESSAGE_BYTES = 64 * 1024  # a vote is about 200 bytes; Pub/Sub allows 10 MB
MAX_POST_ID_CHARS = 128
MAX_ID_CHARS = 128
MAX_ABS_DELTA = 1_000_000
# The pieces the fused reader (transforms/parse_and_sum.py) is made of: `common_lines`,
# `CommonVote` and `decode_common_vote`, `common_hour` and COMMON_ENDINGS of a common time,
# `trusted_hours`, and `parse_line` and `parse_vote` for anything else.
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})\Z")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MIN_HOUR_S = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_HOUR_S = 253_402_297_200  # 9999-12-31T23:00:00Z

FORMAT_ATTRIBUTE = "format"
NDJSON = "ndjson"
LINE_ATTRIBUTE = "line"
MAX_BATCH_EVENTS = 1_000
MAX_BATCH_BYTES = 1_000_000

# Every reason a message can be rejected for; the error attribute starts with one of these.
REASONS = (
    "unknown_format",
    "too_many_events",
    "too_large",
    "not_utf8",
    "not_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "empty_post_id",
    "post_id_too_long",
    "unknown_counter",
    "zero_delta",
    "delta_out_of_range",
    "bad_event_time",
    "field_too_long",
    "missing_user",
    "unknown_vote",
    "state_with_delta",
)
# The field that makes an event a vote-state event (schemas/vote_states.py).
VOTE_FIELD = "vote"


class _Invalid(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _optional_string(fields: Mapping[str, Any], name: str, may_be_empty: bool = False) -> str | None:
    if name not in fields:
        return None
    return _string(fields, name, may_be_empty)


def _string(fields: Mapping[str, Any], name: str, may_be_empty: bool = False) -> str:
    """A field the event has (see _optional_string)."""
    value = fields[name]
    if not isinstance(value, str) or not (value or may_be_empty):
        raise _Invalid("wrong_type", f"{name} must be a non-empty string, got {type(value).__name__} {value!r:.40}")
    if len(value) > MAX_ID_CHARS:
        raise _Invalid("field_too_long", f"{name} has {len(value)} characters, at most {MAX_ID_CHARS} allowed")
    return value


class EventTimePolicy(NamedTuple):
    """Which claimed event times the pipeline believes; it never drops a vote for its time.

    An event_time older than the delta retention, or further ahead of the publish time than
    `max_clock_skew_s`, says more about the client's clock than about the vote: such a vote
    is counted in the hour it was ingested (its publish time), so no client clock can spread
    one post over an unbounded number of event hours. Votes inside the bounds (late by up
    to the retention, early by up to the skew) keep the hour they claim.
    """

    max_clock_skew_s: int = 3_600
    retention_s: int = delta_retention_days() * 86_400

    def untrusted(self, event_s: int, publish_time_s: float) -> str | None:
        """Why an event time is replaced by the publish time, or None when it is kept."""
        if not MIN_HOUR_S <= publish_time_s < MAX_HOUR_S + HOUR_S:
            # No usable ingestion time (a batch input's minimum timestamp, say): it could not
            # stand in, so the claimed time does rather than losing the vote.
            return None
        if event_s < publish_time_s - self.retention_s:
            return "older_than_retention"
        if event_s > publish_time_s + self.max_clock_skew_s:
            return "ahead_of_clock"
        return None


INGESTION_HOUR_REASONS = ("older_than_retention", "ahead_of_clock")
DEFAULT_EVENT_TIME_POLICY = EventTimePolicy()


def event_hour(
    event_time: str | None,
    publish_time_s: float,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
) -> int:
    """Start of the event's hour; the publish time stands in for a missing event_time, and,
    under `policy` (None: every valid time is kept), for one outside its bounds, whose
    reason is passed to `on_ingestion_hour`."""
    if event_time is None:
        seconds = publish_time_s
    else:
        # fromisoformat alone also takes ISO 8601 forms RFC 3339 does not (week dates, no offset).
        if not RFC3339.match(event_time):
            raise _Invalid("bad_event_time", f"event_time {event_time[:40]!r} is not RFC 3339 with an offset (e.g. Z)")
        seconds = _epoch_seconds(event_time)
        reason = policy.untrusted(seconds, publish_time_s) if policy is not None else None
        if reason is not None:
            seconds = publish_time_s
            if on_ingestion_hour is not None:
                on_ingestion_hour(reason)
    hour = int(seconds // HOUR_S) * HOUR_S
    # Spanner timestamps span years 1 to 9999 (UTC); an hour outside cannot be stored.
    if not MIN_HOUR_S <= hour <= MAX_HOUR_S:
        raise _Invalid("bad_event_time", f"event hour {hour} is outside Spanner's timestamp range")
    return hour


def vote_time(
    event_time: str,
    publish_time_s: float,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
) -> tuple[int, int]:
    """(event hour, vote time in microseconds) of a vote-state event.

    The hour is event_hour's. The vote time orders a user's events (schemas/vote_states.py): the
    claimed time, to the microsecond, except that a time further ahead of the publish time than
    the policy's clock skew is the publish time, so that no client clock far ahead can win over
    every vote its user casts later. A time older than the retention keeps its place in the
    order (it loses to anything newer), while its change is counted in its ingestion hour."""
    hour = event_hour(event_time, publish_time_s, policy, on_ingestion_hour)  # validates event_time
    seconds = _epoch_seconds(event_time)
    if policy is not None and policy.untrusted(seconds, publish_time_s) == "ahead_of_clock":
        return hour, int(publish_time_s * 1_000_000)
    match = RFC3339.match(event_time)
    assert match is not None  # event_hour validated event_time
    fraction = match.group(1)
    return hour, seconds * 1_000_000 + (int(fraction[1:7].ljust(6, "0")) if fraction else 0)


def _epoch_seconds(event_time: str) -> int:
    """Whole seconds since the epoch of an RFC 3339 time (a float timestamp would round
    23:59:59.999999 up into the next hour)."""
    if event_time[-1] in "Zz" and event_time[14:16] < "60" and event_time[17:19] < "60":
        # UTC, the common case: the hour is the text's own, looked up once per hour seen.
        try:
            return utc_hour(event_time[:13]) + int(event_time[14:16]) * 60 + int(event_time[17:19])
        except ValueError:
            pass  # no such hour: the general path below names the whole time
    try:
        elapsed = datetime.fromisoformat(event_time) - _EPOCH
    except ValueError:
        raise _Invalid("bad_event_time", f"event_time {event_time[:40]!r} is not a valid time") from None
    return elapsed.days * 86_400 + elapsed.seconds


@functools.lru_cache(maxsize=4096)
def utc_hour(date_and_hour: str) -> int:
    """ "2026-11-22T01" -> the epoch seconds of that UTC hour; ValueError if there is no such hour."""
    elapsed = datetime.fromisoformat(f"{date_and_hour}:00:00+00:00") - _EPOCH
    return elapsed.days * 86_400 + elapsed.seconds


# A field the event does not have; compared by identity only (Any: so is a field's value until it is checked).
ABSENT: Any = object()
_COUNTERS = frozenset(CONTRACT_NAMES)


def is_common_vote(post_id: object, counter: object, delta: object, event_id: object, user_id: object) -> bool:
    """The fields of a common, valid delta event, checked in bulk: the fast paths of _validate and
    of sum_message's events with fields of their own (which also check that the event has no
    VOTE_FIELD). Anything else takes the step-by-step path, which names the problem."""
    # The two optional IDs are checked inline, not by a helper: this runs once per vote, and a
    # call costs about as much as the check.
    return (
        type(post_id) is str
        and 0 < len(post_id) <= MAX_POST_ID_CHARS
        and type(counter) is str
        and counter in _COUNTERS
        and type(delta) is int
        and delta != 0
        and -MAX_ABS_DELTA <= delta <= MAX_ABS_DELTA
        and (event_id is ABSENT or (type(event_id) is str and 0 < len(event_id) <= MAX_ID_CHARS))
        and (user_id is ABSENT or (type(user_id) is str and 0 < len(user_id) <= MAX_ID_CHARS))
    )


def _validate(
    fields: Any,
    publish_time_s: float,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
) -> VoteEvent | VoteState:
    """The event of a decoded message. The common, valid event is checked in bulk (this runs
    once per vote: profiled, the step-by-step checks cost more than decoding the JSON); any
    doubt takes the step-by-step path, which is the specification and names the first problem."""
    if type(fields) is dict:
        # Any: their types are checked at run time, by is_common_vote, in bulk.
        post_id: Any
        counter: Any
        delta: Any
        post_id, counter, delta = fields.get("post_id"), fields.get("counter"), fields.get("delta")
        event_id, user_id = fields.get("event_id", ABSENT), fields.get("user_id", ABSENT)
        event_time = fields.get("event_time", ABSENT)
        if (
            (event_time is ABSENT or type(event_time) is str)
            and is_common_vote(post_id, counter, delta, event_id, user_id)
            and VOTE_FIELD not in fields
        ):
            return VoteEvent(
                post_id,
                counter,
                delta,
                event_hour(None if event_time is ABSENT else event_time, publish_time_s, policy, on_ingestion_hour),
                None if event_id is ABSENT else event_id,
                None if user_id is ABSENT else user_id,
            )
    return _validate_step_by_step(fields, publish_time_s, policy, on_ingestion_hour)


def _validate_step_by_step(
    fields: Any, publish_time_s: float, policy: EventTimePolicy | None, on_ingestion_hour: Callable[[str], None] | None
) -> VoteEvent | VoteState:
    if not isinstance(fields, dict):
        raise _Invalid("not_object", f"the JSON value is a {type(fields).__name__}, not an object")
    if VOTE_FIELD in fields:
        return _validate_state(fields, publish_time_s, policy, on_ingestion_hour)
    for name in ("post_id", "counter", "delta"):
        if name not in fields:
            raise _Invalid("missing_field", f"{name} is required")
    post_id, counter, delta = _post_id(fields), fields["counter"], fields["delta"]
    if not isinstance(counter, str):
        raise _Invalid("wrong_type", f"counter must be a string, got {type(counter).__name__}")
    if counter not in _COUNTERS:
        raise _Invalid("unknown_counter", f"counter {counter[:40]!r} is not one of {', '.join(CONTRACT_NAMES)}")
    # orjson reads integers beyond 64 bits as floats: report them by their size.
    if isinstance(delta, float) and abs(delta) > MAX_ABS_DELTA:
        raise _Invalid("delta_out_of_range", f"delta {delta:g} is outside [-{MAX_ABS_DELTA}, {MAX_ABS_DELTA}]")
    # bool is an int in Python, and 1.0 is a float: neither is a JSON integer delta.
    if isinstance(delta, bool) or not isinstance(delta, int):
        raise _Invalid("wrong_type", f"delta must be an integer, got {type(delta).__name__}")
    if delta == 0:
        raise _Invalid("zero_delta", "delta is 0")
    if not -MAX_ABS_DELTA <= delta <= MAX_ABS_DELTA:
        raise _Invalid("delta_out_of_range", f"delta {delta} is outside [-{MAX_ABS_DELTA}, {MAX_ABS_DELTA}]")
    event_time = _optional_string(fields, "event_time", may_be_empty=True)  # "" is a bad time, not a bad type
    return VoteEvent(
        post_id=post_id,
        counter=counter,
        delta=delta,
        event_hour=event_hour(event_time, publish_time_s, policy, on_ingestion_hour),
        event_id=_optional_string(fields, "event_id"),
        user_id=_optional_string(fields, "user_id"),
    )


def _post_id(fields: Mapping[str, Any]) -> str:
    if "post_id" not in fields:
        raise _Invalid("missing_field", "post_id is required")
    post_id = fields["post_id"]
    if not isinstance(post_id, str):
        raise _Invalid("wrong_type", f"post_id must be a string, got {type(post_id).__name__}")
    if not post_id:
        raise _Invalid("empty_post_id", "post_id is empty")
    if len(post_id) > MAX_POST_ID_CHARS:
        raise _Invalid("post_id_too_long", f"post_id has {len(post_id)} characters, at most {MAX_POST_ID_CHARS}")
    return post_id


def _validate_state(
    fields: Mapping[str, Any],
    publish_time_s: float,
    policy: EventTimePolicy | None,
    on_ingestion_hour: Callable[[str], None] | None,
) -> VoteState:
    """A vote-state event (one with a `vote` field), step by step, naming the first problem."""
    post_id = _post_id(fields)
    for name in ("counter", "delta"):
        if name in fields:
            raise _Invalid(
                "state_with_delta",
                f"a vote-state event carries no {name}: the change follows from the user's previous vote",
            )
    if "user_id" not in fields:
        raise _Invalid("missing_user", "user_id is required in a vote-state event: it counts once per user")
    user_id = _string(fields, "user_id")
    vote = fields[VOTE_FIELD]
    if not isinstance(vote, str):
        raise _Invalid("wrong_type", f"vote must be a string, got {type(vote).__name__}")
    if vote not in VOTES:
        raise _Invalid("unknown_vote", f"vote {vote[:40]!r} is not one of {', '.join(VOTES)}")
    if "event_time" not in fields:
        raise _Invalid("missing_field", "event_time is required in a vote-state event: the latest vote counts")
    event_time = _string(fields, "event_time", may_be_empty=True)  # "" is a bad time, not a bad type
    event_id = _optional_string(fields, "event_id")
    hour, at_us = vote_time(event_time, publish_time_s, policy, on_ingestion_hour)
    return VoteState(post_id, user_id, vote, at_us, hour, event_id)


def parse_vote(
    data: bytes,
    attributes: Mapping[str, str] | None,
    publish_time_s: float,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
) -> VoteEvent | VoteState | Rejected:
    """One event to a VoteEvent or a VoteState, or to a Rejected with the reason. Never raises.

    `policy` (the pipeline passes its own) bounds the event hours a vote may claim; see
    EventTimePolicy. Without one, every valid event time is kept (the contract alone)."""
    try:
        if len(data) > MAX_MESSAGE_BYTES:
            raise _Invalid("too_large", f"{len(data)} bytes, at most {MAX_MESSAGE_BYTES}")
        try:
            fields = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as utf8_error:
                raise _Invalid("not_utf8", f"byte {utf8_error.start} is not valid UTF-8") from None
            raise _Invalid("not_json", str(error)[:200]) from None
        return _validate(fields, publish_time_s, policy, on_ingestion_hour)
    except _Invalid as invalid:
        return Rejected(bytes(data), dict(attributes or {}), str(invalid))
    except Exception as error:  # noqa: BLE001 - a bug here must dead-letter, not stop the job
        return Rejected(
            bytes(data), dict(attributes or {}), f"not_json: unexpected {type(error).__name__}: {str(error)[:200]}"
        )


def reason_of(rejected: Rejected) -> str:
    return rejected.error.split(":", 1)[0]


def parse_message(
    data: bytes,
    attributes: Mapping[str, str] | None,
    publish_time_s: float,
    policy: EventTimePolicy | None = None,
    on_ingestion_hour: Callable[[str], None] | None = None,
) -> Iterator[VoteEvent | VoteState | Rejected]:
    """Every event of one message, accepted or rejected, v1 or v2 (see the module docstring).

    Never raises. A v1 message yields exactly one result; a batch yields one per non-blank
    line, or a single Rejected for the whole message. `policy` as for parse_vote.
    """
    lines = batch_lines(data, attributes)
    if lines is None:
        yield parse_vote(data, attributes, publish_time_s, policy, on_ingestion_hour)
        return
    if isinstance(lines, Rejected):
        yield lines
        return
    for number, line in lines:
        yield parse_line(number, line, attributes, publish_time_s, policy, on_ingestion_hour)


def batch_lines(data: bytes, attributes: Mapping[str, str] | None) -> list[tuple[int, bytes]] | Rejected | None:
    """A batch's non-blank lines with their 1-based numbers; None for a v1 message; the
    whole message's Rejected when the batch breaks a batch rule."""
    message_format = attributes.get(FORMAT_ATTRIBUTE) if attributes else None
    if message_format is None:
        return None
    if message_format != NDJSON:
        return _whole(
            data,
            attributes,
            "unknown_format",
            f"format {message_format[:40]!r} is not one this pipeline reads (only {NDJSON!r}, or none)",
        )
    if len(data) > MAX_BATCH_BYTES:
        return _whole(data, attributes, "too_large", f"batch of {len(data)} bytes, at most {MAX_BATCH_BYTES}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return _whole(data, attributes, "not_utf8", f"byte {error.start} of the batch is not valid UTF-8")
    lines = [(number, line) for number, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    if len(lines) > MAX_BATCH_EVENTS:
        return _whole(data, attributes, "too_many_events", f"batch of {len(lines)} events, at most {MAX_BATCH_EVENTS}")
    return lines


def parse_line(
    number: int,
    line: bytes,
    attributes: Mapping[str, str] | None,
    publish_time_s: float,
    policy: EventTimePolicy | None,
    on_ingestion_hour: Callable[[str], None] | None,
) -> VoteEvent | VoteState | Rejected:
    result = parse_vote(line, attributes, publish_time_s, policy, on_ingestion_hour)
    if type(result) is Rejected:
        result.attributes[LINE_ATTRIBUTE] = str(number)
    return result


_UNBOUNDED = (float("-inf"), float("inf"))


def trusted_hours(publish_time_s: float, policy: EventTimePolicy | None) -> tuple[float, float]:
    """(first, last): the event hours every second of which `policy` keeps for a message published
    at `publish_time_s`; an event time in any other hour needs the general path."""
    if policy is None or not MIN_HOUR_S <= publish_time_s < MAX_HOUR_S + HOUR_S:
        return _UNBOUNDED
    # The hours h with lowest <= h and h + 3599 <= highest, for the very bounds EventTimePolicy.untrusted
    # computes; floor() makes the second comparison one between integers, exact.
    return (publish_time_s - policy.retention_s, math.floor(publish_time_s + policy.max_clock_skew_s) - (HOUR_S - 1))


# --- the common vote, decoded and checked in one call -------------------------------------


class CommonVote(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A delta event of the common shape, as `decode_common_vote` reads it from a line's bytes in
    one call: these keys and no other, each of its type and within its limits (UNSET: absent).

    A line that decodes into one is a valid delta event with these very values, save for two
    rules left to the reader: delta != 0, and event_time (any string here; see `common_hour`).
    Any other line fails to decode and takes the general path (`parse_line`), which names its
    problem. Why the subset is exact: with no unknown field, every byte of the line is syntax or
    a typed string or integer, which msgspec checks as strictly as orjson (UTF-8, escapes,
    surrogates, no float or bool for an int; the last of duplicate keys wins in both), whereas
    values it skips are checked less (an unknown field's 1e400 or invalid UTF-8 would pass).
    Not nullable: null in any field fails, as the contract rejects it. tests/test_parse_and_sum.py
    holds the fast path to parse_message on mutated common lines."""

    # In the order the encoder writes a generated event: msgspec matches keys in order fastest.
    post_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_POST_ID_CHARS)]
    counter: Literal[CONTRACT_NAMES]  # type: ignore[valid-type]  # the contract's names, whatever they are
    delta: Annotated[int, msgspec.Meta(ge=-MAX_ABS_DELTA, le=MAX_ABS_DELTA)]
    event_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)] | msgspec.UnsetType = msgspec.UNSET
    event_time: str | msgspec.UnsetType = msgspec.UNSET
    user_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)] | msgspec.UnsetType = msgspec.UNSET


# bytes -> CommonVote; raises one of COMMON_VOTE_ERRORS for a line of any other shape (msgspec
# raises UnicodeDecodeError for invalid UTF-8 in a string, DecodeError for anything else).
decode_common_vote = msgspec.json.Decoder(CommonVote).decode
COMMON_VOTE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)

# A common event_time: "YYYY-MM-DDTHH:MM:SS" (ASCII digits, a real UTC second), then one of
# COMMON_ENDINGS or, for longer fractions, COMMON_FRACTION: RFC 3339 in UTC, a subset of
# RFC3339, checked by a cache lookup and a set lookup instead of the pattern (which costs as much
# as decoding the whole event). The hour is the text's own, as _epoch_seconds reads it.
COMMON_ENDINGS = frozenset(
    f"{fraction}{zone}"
    for zone in "Zz"
    for fraction in ("", *(f".{n:0{digits}d}" for digits in (1, 2, 3) for n in range(10**digits)))
)
COMMON_FRACTION = re.compile(r"\.[0-9]{1,9}[Zz]\Z")
_COMMON_SECOND = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-5][0-9]:[0-5][0-9]\Z")


# Seconds, not hours: one lookup checks the minutes and seconds too. 65,536 of them hold the
# 7,200 seconds of two hours of events many times over, so a stream (or a benchmark's cycle
# through two hours) keeps hitting; any other second costs the pattern once more.
@functools.lru_cache(maxsize=65_536)
def common_hour(date_and_time: str) -> int | None:
    """ "2026-11-22T01:02:03" -> utc_hour of "2026-11-22T01"; None when the text is of another form
    or no such hour. Every hour it returns is one Spanner can store (a year from 1 to 9999)."""
    if not _COMMON_SECOND.match(date_and_time):
        return None
    try:
        return utc_hour(date_and_time[:13])
    except ValueError:
        return None


def common_lines(data: bytes, attributes: Mapping[str, str] | None) -> tuple[int, list[bytes]] | None:
    """(number of the first line, lines) of a message that no whole-message rule rejects, for a
    reader to decode line by line: a v1 message is its one line, numbered 0; a batch's lines are
    numbered from 1, blank ones included (the reader skips them). None when a rule needs checking:
    `batch_lines` then applies them all. Cheap: no pass over the lines in Python."""
    message_format = attributes.get(FORMAT_ATTRIBUTE) if attributes else None
    if message_format is None:
        return (0, [data]) if len(data) <= MAX_MESSAGE_BYTES else None
    if message_format != NDJSON or len(data) > MAX_BATCH_BYTES:
        return None
    lines = data.split(b"\n")
    if len(lines) > MAX_BATCH_EVENTS and len(lines) - lines.count(b"") > MAX_BATCH_EVENTS:
        return None  # perhaps too many events: batch_lines counts the non-blank lines
    if len(data) > MAX_MESSAGE_BYTES and max(map(len, lines)) > MAX_MESSAGE_BYTES:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return 1, lines


def _whole(data: bytes, attributes: Mapping[str, str] | None, reason: str, detail: str) -> Rejected:
    return Rejected(bytes(data), dict(attributes or {}), f"{reason}: {detail}")


# --- the writing side: events to messages -------------------------------------------------


class Message(NamedTuple):
    """One Pub/Sub message as the contract encodes it, and how many vote events it carries."""

    data: bytes
    attributes: dict[str, str]
    events: int = 1


def new_message_id(prefix: str = BATCH_ID_PREFIX) -> str:
    """A new message ID for the `event_id` attribute: `batch-<uuid4>` for a batch (the default),
    `message-<uuid4>` (MESSAGE_ID_PREFIX) for a v1 message whose event has no event_id. A batch's
    ID is never an event's: a dead-lettered line is identified by its own event_id, never by its
    batch's (upvotes/operations/dead_letters.py); a v1 message's ID stands for its one event."""
    return f"{prefix}{uuid.uuid4()}"


def event_attributes(event: Mapping[str, Any]) -> dict[str, str]:
    """The attributes of the v1 message carrying `event`: `event_id`, the event's own when it is
    a non-empty string, else a new message ID (so Dataflow still deduplicates a publish the
    client retried), and `event_time` when the event has one (a string)."""
    event_id = event.get(EVENT_ID_ATTRIBUTE)
    attributes = {
        EVENT_ID_ATTRIBUTE: event_id if isinstance(event_id, str) and event_id else new_message_id(MESSAGE_ID_PREFIX)
    }
    event_time = event.get(EVENT_TIME_ATTRIBUTE)
    if isinstance(event_time, str):
        attributes[EVENT_TIME_ATTRIBUTE] = event_time
    return attributes


def event_message(event: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """An event's own message (contract v1), as (data, attributes): compact UTF-8 JSON, with
    event_attributes."""
    return orjson.dumps(event), event_attributes(event)


def batch_message(lines: Sequence[bytes]) -> Message:
    """Encoded events (one JSON object each, without a line break) as one contract v2 message:
    ndjson, `format=ndjson` and the batch's own ID as `event_id` (the ID Dataflow deduplicates a
    republished batch by). The caller keeps within MAX_BATCH_EVENTS and MAX_BATCH_BYTES."""
    return Message(b"\n".join(lines), {FORMAT_ATTRIBUTE: NDJSON, EVENT_ID_ATTRIBUTE: new_message_id()}, len(lines))


def events_message(lines: Sequence[bytes]) -> Message:
    """Encoded events as one message: a v1 message for one (its bytes as they are, its attributes
    those event_message sets), a v2 batch (batch_message) for more. What `upvotes serve`
    publishes for the events of one request."""
    if not lines:
        raise ValueError("a message carries at least one event")
    if len(lines) == 1:
        return Message(bytes(lines[0]), event_attributes(orjson.loads(lines[0])))
    return batch_message(lines)


def batch_messages(events: Iterable[Mapping[str, Any]], batch_size: int) -> Iterator[Message]:
    """Events packed into messages of contract v2, in order: at most `batch_size` events and
    MAX_BATCH_BYTES bytes each (batch_message). A batch_size of 1 sends v1 messages
    (event_message)."""
    if not 1 <= batch_size <= MAX_BATCH_EVENTS:
        raise ValueError(f"the batch size must be between 1 and {MAX_BATCH_EVENTS}")
    if batch_size == 1:
        yield from (Message(*event_message(event)) for event in events)
        return
    lines: list[bytes] = []
    size = 0
    for event in events:
        line = orjson.dumps(event)
        if lines and (len(lines) == batch_size or size + len(line) + 1 > MAX_BATCH_BYTES):
            yield batch_message(lines)
            lines, size = [], 0
        lines.append(line)
        size += len(line) + 1
    if lines:
        yield batch_message(lines)
