"""ParseVotes and its parts (transforms/parse_and_sum.py): sum_message, the fused parse and sum,
held to parse_message on the corpus and on generated batches; who sum_message counts as a voter;
BundleSums' one element (and sketch) per post and hour; and ParseVotes in a pipeline: accepted
and rejected apart, sums per post and hour, the whole corpus in one bundle, the ingestion-time
stamp and the metrics it counts (per rejection reason, per ingestion-hour reason, bundles
stamped ahead of a lagging worker clock).

The rules themselves (what is valid, an event's hour) are the contract's (tests/test_contract.py,
tests/test_bad_input.py); what the windows do with the stamped sums is tests/test_windowing.py's.

Each test parses at the publish time its expectations were written for: the contract table's
PUBLISHED (tests/support/event_times.py), the corpus's CORPUS_PUBLISHED, or PUBLISHED_IN_HOUR.

Beam TestPipelines on the DirectRunner and hypothesis: no emulator.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import apache_beam as beam
import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.contract import (
    DEFAULT_EVENT_TIME_POLICY,
    FORMAT_ATTRIBUTE,
    LINE_ATTRIBUTE,
    NDJSON,
    EventTimePolicy,
    batch_messages,
    parse_message,
    reason_of,
)
from schemas.counters import CONTRACT_NAMES as COUNTERS
from schemas.counters import VOTER_CONTRACT_NAMES, Counts, one
from schemas.delta_ids import sum_shard
from schemas.records import HOUR_S, CounterSums, PostHour, PostUser, Rejected, VoteEvent, VoteState
from schemas.vote_states import keep_latest
from schemas.voter_sketch import estimate, sketch_of
from tests.support.contract_table import BATCH, INVALID, VALID, ndjson
from tests.support.corpus import CORPUS, CORPUS_PUBLISHED, corpus_attributes, manifest
from tests.support.event_times import PUBLISHED, PUBLISHED_AT, PUBLISHED_HOUR, epoch, hour_of, rfc3339
from tests.support.examples import examples
from tests.support.hostile_input import HOSTILE_IDS, NDJSON_LINES
from tests.support.vote_messages import HOUR, message
from transforms.parse_and_sum import BundleSums, ParseVotes, RunningSums, sum_message
from upvotes.devtools.workload import Workload, generate_events

PUBLISHED_IN_HOUR = HOUR + 60.0  # when the voter tests' messages are published: a minute into HOUR


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
    assert [(r.data, r.attributes, r.error) for r in rejected] == [
        (r.data, r.attributes, r.error) for r in want_rejected
    ]
    assert sorted(ingestion) == want_ingestion


@pytest.mark.parametrize("name", sorted(p.name for p in [*CORPUS.glob("*.bin"), *CORPUS.glob("*.ndjson")]))
def test_sum_message_agrees_with_parse_message_on_every_corpus_message(name: str) -> None:
    assert_sums_like_parse_message(
        (CORPUS / name).read_bytes(), corpus_attributes(name), CORPUS_PUBLISHED, DEFAULT_EVENT_TIME_POLICY
    )


# Publish times and event times on both sides of the policy's bounds, and inside one hour of them.
_SKEWED_POLICY = EventTimePolicy(max_clock_skew_s=600, retention_s=2 * HOUR_S + 30)
_NEAR_BOUNDS = st.sampled_from(
    [
        "2026-11-22T01:02:03Z",
        "2026-11-22T01:12:04Z",
        "2026-11-22T01:59:59z",
        "2026-11-22T02:00:00Z",
        "2026-11-21T23:01:00Z",
        "2026-11-21T23:02:33Z",
        "2026-11-21T22:59:59Z",
        "2026-11-22T01:02:03.5Z",
        "2026-11-22T01:02:03+00:00",
        "2026-11-22T01:60:00Z",
        "2026-11-22T01:02:60Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "2026-02-30T00:00:00Z",
    ]
)
_EVENTS_NEAR_BOUNDS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "post_id": st.sampled_from(["p-1", "p-2", "ü"]),
                "counter": st.sampled_from(COUNTERS),
                "delta": st.sampled_from([1, -1, 3]),
            },
            optional={
                "event_time": _NEAR_BOUNDS,
                "user_id": st.sampled_from(["u", "v", "", "x" * 129, "ü\u0000/"]),
                "event_id": st.sampled_from(["e", None]),
            },
        ).map(lambda fields: json.dumps(fields).encode()),
        NDJSON_LINES.map(lambda lines: lines[0] if lines else b"{}"),
    ),
    max_size=40,
)


@settings(max_examples=examples(400), deadline=None)
@given(
    _EVENTS_NEAR_BOUNDS,
    st.booleans(),
    st.sampled_from([CORPUS_PUBLISHED, CORPUS_PUBLISHED + 0.5, 0.0, -1e15, float("inf")]),
    st.sampled_from([DEFAULT_EVENT_TIME_POLICY, _SKEWED_POLICY, None]),
)
def test_sum_message_agrees_with_parse_message_on_generated_batches(
    lines: list[bytes], batched: bool, published: float, policy
) -> None:
    if batched:
        assert_sums_like_parse_message(
            b"\n".join(lines), {FORMAT_ATTRIBUTE: "ndjson", "event_id": "b"}, published, policy
        )
    else:
        for line in lines:
            assert_sums_like_parse_message(line, {"event_id": "e"}, published, policy)


# --- sum_message's fast path: common votes decoded in one call (schemas.contract.CommonVote) ----


def _common_time(moment: datetime, digits: int, t: str, z: str) -> str:
    fraction = f".{moment.microsecond:06d}{moment.microsecond % 1000:03d}"[: digits + 1] if digits else ""
    return f"{moment.year:04d}-{moment:%m-%d}{t}{moment:%H:%M:%S}{fraction}{z}"


# UTC times of every fraction length and case, near the bounds the tests publish at, and times
# the fast path must leave to the general path (offsets, leap seconds, no such day, other digits).
_COMMON_TIMES = st.one_of(
    st.builds(
        _common_time,
        st.datetimes(
            min_value=PUBLISHED_AT.replace(tzinfo=None) - timedelta(hours=3),
            max_value=PUBLISHED_AT.replace(tzinfo=None) + timedelta(hours=2),
        ),
        st.integers(0, 9),
        st.sampled_from("Tt"),
        st.sampled_from("Zz"),
    ),
    st.builds(
        _common_time,
        st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
        st.sampled_from([0, 3, 6]),
        st.just("T"),
        st.just("Z"),
    ),
    st.sampled_from(
        [
            "2026-11-22T00:00:00Z",
            "2026-11-22T00:00:00.4z",
            "2026-11-22T00:59:59Z",
            "2026-11-22T00:59:59.999Z",
            "2026-11-22T01:00:00Z",
            "2026-11-21T23:59:59.5Z",
        ]
    ),
    st.sampled_from(
        [
            "2026-11-22T00:22:03+00:00",
            "2026-11-22T00:59:60Z",
            "2026-11-22T00:60:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "0000-01-01T00:00:00Z",
            "2026-11-22T00:22:03.1234567890Z",
            "\uff12026-11-22T00:22:03Z",
            "2026-11-22 00:22:03Z",
            "",
            "2026-11-22T00:22:03.Z",
        ]
    ),
)
_COMMON_VOTES = st.fixed_dictionaries(
    {
        "post_id": st.sampled_from(["p-1", "p-2", "ü", "🙂" * 128]),
        "counter": st.sampled_from(COUNTERS),
        "delta": st.sampled_from([1, -1, 7, 1_000_000, -1_000_000]),
    },
    optional={
        "event_time": _COMMON_TIMES,
        "event_id": st.sampled_from(["e", "x" * 128]),
        "user_id": st.sampled_from(["u", "v", "ü\u0000/", "x" * 128]),
    },
).map(lambda fields: json.dumps(fields, ensure_ascii=False).encode())
# Edits where a decoder could be laxer than orjson: bytes that are not UTF-8 or a surrogate, escapes,
# numbers orjson cannot hold, duplicate and unknown keys, null, line breaks, nesting.
_PIECES = [
    b'"',
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xc3\xa9",
    b"\x00",
    b"\x7f",
    b"\n",
    b"\r",
    b" ",
    b"\x0b",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"0",
    b"-0",
    b"1e400",
    b"1.0",
    b"true",
    b"null",
    b"99999999999999999999",
    b'"vote":"up",',
    b'"delta":0,',
    b'"delta":2,',
    b'"post_id":"q",',
    b'"extra":1e400,',
    b'"extra":"\xff",',
    b'"event_time":null,',
    b"60",
    b"+01:00",
    b"T",
    b"z",
    b".",
    b"\xef\xbb\xbf",
]
_EDITS = st.lists(
    st.tuples(st.sampled_from(["insert", "replace", "delete"]), st.integers(0, 700), st.sampled_from(_PIECES)),
    max_size=3,
)


def _edited(line: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    for edit, at, piece in edits:
        at %= len(line) + 1
        end = at if edit == "insert" else at + len(piece)
        line = line[:at] + (b"" if edit == "delete" else piece) + line[end:]
    return line


@settings(max_examples=examples(1500), deadline=None)
@given(
    st.lists(st.builds(_edited, _COMMON_VOTES, _EDITS), min_size=1, max_size=8),
    st.booleans(),
    # Publish times whose policy bounds fall half a second either side of an hour's first or last second.
    st.sampled_from(
        [
            PUBLISHED,
            PUBLISHED_HOUR - 0.5,
            PUBLISHED_HOUR - 1.5,
            PUBLISHED_HOUR + 2998.5,
            PUBLISHED_HOUR + 2999.5,
            PUBLISHED_HOUR + 7229.5,
            PUBLISHED_HOUR + 7230.5,
            0.0,
            -1e15,
            float("inf"),
        ]
    ),
    st.sampled_from([DEFAULT_EVENT_TIME_POLICY, _SKEWED_POLICY, None]),
)
def test_the_fast_path_agrees_with_parse_message_on_common_votes_and_their_edits(
    lines: list[bytes], trailing_newline: bool, published: float, policy
) -> None:
    for line in lines:
        assert_sums_like_parse_message(line, {"event_id": "e"}, published, policy)
    assert_sums_like_parse_message(
        b"\n".join(lines) + b"\n" * trailing_newline, {FORMAT_ATTRIBUTE: NDJSON}, published, policy
    )


def test_common_votes_never_reach_the_specification(monkeypatch) -> None:
    """What the fast path is for: the workload's events, one per message and batched, are summed
    without parse_message, parse_vote or parse_line (tests above hold it to them)."""

    def general_path(*_, **__):
        raise AssertionError("the general path was taken")

    events = list(generate_events(Workload(events=2_000, posts=50, zipf=1.1, seed=3)))
    published = max(epoch(event["event_time"]) for event in events) + 1.0
    for name in ("parse_message", "parse_vote", "parse_line"):
        monkeypatch.setattr(f"transforms.parse_and_sum.{name}", general_path)
    sums: dict = {}
    for item in [*batch_messages(events, 1), *batch_messages(events, 500)]:
        assert sum_message(item.data, item.attributes, published, sums, DEFAULT_EVENT_TIME_POLICY, states={}) == []
    assert sum(acc.events for acc in sums.values()) == 2 * len(events)


# --- sum_message: who is a voter ---------------------------------------------------------------


def batch(*events: dict) -> bytes:
    return b"\n".join(json.dumps(e).encode() for e in events)


def voters_of(*events: dict) -> set[str] | None:
    """The voters sum_message records for these events (one ndjson message, one post and hour)."""
    sums: dict = {}
    assert sum_message(batch(*events), {FORMAT_ATTRIBUTE: NDJSON}, PUBLISHED_IN_HOUR, sums, states={}) == []
    (acc,) = sums.values()
    return acc.voters


def upvote(user: str | None, delta: int = 1, counter: str = "upvotes") -> dict:
    event = {"post_id": "p", "counter": counter, "delta": delta}
    if user is not None:
        event["user_id"] = user
    return event


def test_an_unvote_does_not_remove_a_voter() -> None:
    assert voters_of(upvote("alice"), upvote("alice", -1)) == {"alice"}
    assert voters_of(upvote("bob", -1), upvote("carol")) == {"carol"}  # an un-vote alone is no upvote


def test_votes_without_user_id_and_shares_are_not_voters() -> None:
    assert voters_of(upvote(None), upvote(None)) is None
    assert voters_of(upvote("dave", counter="shares"), upvote(None)) is None
    assert voters_of(upvote("erin", delta=3), upvote(None)) == {"erin"}


def test_hostile_user_ids_are_distinct_voters_and_estimated_exactly() -> None:
    recorded = voters_of(*[upvote(user) for user in HOSTILE_IDS + HOSTILE_IDS])
    assert recorded == set(HOSTILE_IDS)
    assert estimate(sketch_of(recorded)) == len(HOSTILE_IDS)


def test_a_bundle_emits_one_sketch_per_post_and_hour() -> None:
    bundle = BundleSums()
    events = [upvote(f"u{i % 30}") for i in range(90)] + [upvote(None)] * 5
    bundle.add_message(batch(*events), {FORMAT_ATTRIBUTE: NDJSON}, PUBLISHED_IN_HOUR, None, lambda _: None)
    ((shard, sums),) = [value.value for value in bundle.emit(PUBLISHED_IN_HOUR)]
    assert shard == sum_shard("p")
    ((key, total),) = sums.items()
    assert (total.counts, total.events) == (Counts(upvotes=95), 95) and estimate(total.voters) == 30


# --- ParseVotes in a pipeline -----------------------------------------------------------------


def per_post_hour(keyed: tuple[int, dict[PostHour, CounterSums]]) -> list[tuple[PostHour, CounterSums]]:
    """A shard's sums, one (PostHour, CounterSums) each; each in the shard of its post."""
    shard, sums = keyed
    assert all(sum_shard(key.post_id) == shard for key in sums)
    return list(sums.items())


def message_sums(event: VoteEvent | VoteState) -> tuple[PostHour, CounterSums]:
    assert isinstance(event, VoteEvent)
    sums = CounterSums(one(event.counter, event.delta), 1)
    return PostHour(event.post_id, event.event_hour), sums  # VALID[:2] are different posts: one sum each


def test_parse_votes_splits_accepted_and_rejected_in_a_pipeline() -> None:
    messages = [PubsubMessage(data, {"k": "v"}) for data, _ in VALID[:2]] + [
        PubsubMessage(data, {}) for data, _ in INVALID[:3]
    ]
    with TestPipeline() as p:
        parsed = p | beam.Create(messages) | beam.Map(lambda m: TimestampedValue(m, PUBLISHED)) | ParseVotes()
        assert_that(
            parsed.sums | beam.FlatMap(per_post_hour), equal_to([message_sums(e) for _, e in VALID[:2]]), label="sums"
        )
        assert_that(parsed.rejected | beam.Map(reason_of), equal_to([r for _, r in INVALID[:3]]), label="rejected")


def test_parse_votes_sums_each_batch_per_post_and_hour() -> None:
    one = json.dumps({"post_id": "hot", "counter": "upvotes", "delta": 1}).encode()
    share = json.dumps({"post_id": "hot", "counter": "shares", "delta": 1}).encode()
    unvote = json.dumps({"post_id": "cold", "counter": "upvotes", "delta": -1}).encode()
    batch = PubsubMessage(ndjson(*[one] * 400, *[share] * 50, unvote, b"oops", b""), BATCH)
    with TestPipeline() as p:
        parsed = p | beam.Create([batch]) | beam.Map(lambda m: TimestampedValue(m, PUBLISHED)) | ParseVotes()
        assert_that(
            parsed.sums | beam.FlatMap(per_post_hour),
            equal_to(
                [
                    (PostHour("hot", PUBLISHED_HOUR), CounterSums(Counts(upvotes=400, shares=50), 450)),
                    (PostHour("cold", PUBLISHED_HOUR), CounterSums(Counts(upvotes=-1), 1)),
                ]
            ),
            label="sums",
        )
        assert_that(
            parsed.rejected | beam.Map(lambda r: (reason_of(r), r.attributes[LINE_ATTRIBUTE])),
            equal_to([("not_json", "452")]),
            label="rejected",
        )


def test_the_corpus_through_parse_votes_in_a_pipeline() -> None:
    """The DoFn (metrics per reason, tagged outputs) survives the whole corpus in one bundle."""
    # The contract rejects these (their UTC hour is outside Spanner's range); the pipeline's
    # event-time policy counts them in their ingestion hour instead (issue 15).
    ingestion_hour = {"116-event-time-year-0-in-utc.bin", "117-event-time-year-10000-in-utc.bin"}
    expected = {n: "accepted" if n in ingestion_hour else r for n, r in manifest().items()}
    messages = [
        PubsubMessage((CORPUS / name).read_bytes(), {**corpus_attributes(name), "n": name}) for name in sorted(expected)
    ]
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
        parsed = p | beam.Create(messages) | beam.Map(lambda m: TimestampedValue(m, CORPUS_PUBLISHED)) | ParseVotes()
        events = (
            (parsed.sums, parsed.states)
            | beam.Flatten()
            | beam.FlatMap(lambda keyed: [sums.events for sums in keyed[1].values()])
            | beam.CombineGlobally(sum)
        )
        assert_that(events, equal_to([accepted]), label="votes")
        assert_that(
            parsed.rejected | beam.Map(lambda r: (r.attributes["n"], reason_of(r))),
            equal_to(sorted(want_rejected)),
            label="rejected",
        )


def test_parse_votes_counts_each_ingestion_hour_vote_per_reason() -> None:
    def message(moment: datetime) -> PubsubMessage:
        return PubsubMessage(
            json.dumps({"post_id": "p", "counter": "upvotes", "delta": 1, "event_time": rfc3339(moment)}).encode(), {}
        )

    late = PUBLISHED_AT - timedelta(days=2)
    messages = [
        message(late),
        message(datetime(2001, 1, 1, tzinfo=timezone.utc)),
        message(datetime(2001, 1, 2, tzinfo=timezone.utc)),
        message(PUBLISHED_AT + timedelta(days=1)),
    ]
    pipeline = TestPipeline()
    parsed = pipeline | beam.Create(messages) | beam.Map(lambda m: TimestampedValue(m, PUBLISHED)) | ParseVotes()
    assert_that(
        parsed.sums | beam.FlatMap(lambda keyed: [(key.event_hour, sums.events) for key, sums in keyed[1].items()]),
        equal_to([(hour_of(late), 1), (PUBLISHED_HOUR, 3)]),
    )  # one bundle: summed per hour
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "ParseVotes"
    }
    assert counters["ingestion_hour_older_than_retention"] == 2
    assert counters["ingestion_hour_ahead_of_clock"] == 1
    assert counters["accepted"] == 4


def test_parse_votes_counts_the_votes_a_lagging_worker_clock_would_have_stamped_late() -> None:
    published = int(time.time()) + 3600
    pipeline = TestPipeline()
    parsed = (
        pipeline
        | beam.Create([message("p", HOUR), message("q", HOUR)])
        | beam.Map(lambda m: TimestampedValue(m, published))
        | ParseVotes()
    )
    assert_that(parsed.sums | beam.Map(lambda _, t=beam.DoFn.TimestampParam: int(t)), equal_to([published] * 2))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "ParseVotes"
    }
    assert counters["stamped_ahead_of_worker_clock"] == 2
