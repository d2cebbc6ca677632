"""Tests for `upvotes publish`: the workload, invalid payloads, the ledger, progress, and
publishing round trips through the Pub/Sub emulator."""

from __future__ import annotations

import argparse
import collections
import io
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.pubsub_v1.types import PubsubMessage
from hypothesis import given
from hypothesis import strategies as st

from schemas.contract import (
    BATCH_ID_PREFIX,
    EVENT_ID_ATTRIBUTE,
    FORMAT_ATTRIBUTE,
    MAX_BATCH_BYTES,
    MESSAGE_ID_PREFIX,
    NDJSON,
    batch_messages,
    event_message,
    parse_message,
    parse_vote,
    reason_of,
)
from schemas.counters import COUNTERS, Counts
from schemas.records import Rejected, VoteEvent, VoteState
from upvotes.cli import main
from upvotes.commands.publish import add_arguments, run
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.progress import progress_bar
from upvotes.devtools.publishing import (
    _interleave,
    publish_file,
    publish_messages,
    publish_workload,
)
from upvotes.devtools.workload import (
    INVALID_KINDS,
    RealTrafficWorkload,
    Workload,
    generate,
    generate_events,
    invalid_payloads,
    uuid4_text,
)
from upvotes.resources import Resources

START = datetime(2026, 11, 22, 3, 30, tzinfo=timezone.utc)
VIRAL = Workload(events=10_000, posts=100, zipf=1.2, seed=7, start_time=START)


def accepted(data: bytes, attributes: dict[str, str] | None = None) -> VoteEvent:
    vote = parse_vote(data, attributes, publish_time_s=time.time())
    assert isinstance(vote, VoteEvent), vote
    return vote


def recount(votes: list[VoteEvent]) -> dict[str, dict[str, int]]:
    """Totals computed independently of Ledger."""
    sums: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for vote in votes:
        sums[vote.post_id][vote.counter] += vote.delta
    return {post: {counter.name: c[counter.contract_name] for counter in COUNTERS} for post, c in sums.items()}


# --- the workload -------------------------------------------------------------------------


def test_same_seed_gives_the_same_events_and_another_seed_does_not() -> None:
    small = Workload(events=500, posts=50, seed=3, start_time=START)
    assert list(generate_events(small)) == list(generate_events(small))
    other = list(generate_events(Workload(events=500, posts=50, seed=4, start_time=START)))
    assert other != list(generate_events(small))


@given(st.integers(0, 2**128 - 1))
def test_event_ids_are_spelled_as_pythons_uuid4(bits: int) -> None:
    assert uuid4_text(bits) == str(uuid.UUID(int=bits, version=4))


def test_zipf_puts_most_votes_on_a_few_posts() -> None:
    votes = collections.Counter(event["post_id"] for event in generate_events(VIRAL))
    assert votes.most_common(1)[0][0] == "p-1"
    top_tenth = sum(count for _, count in votes.most_common(10))
    assert top_tenth / VIRAL.events > 0.5
    assert set(votes) <= {f"p-{rank}" for rank in range(1, 101)}


def test_events_have_unique_ids_a_user_and_times_over_two_hours() -> None:
    events = list(generate_events(VIRAL))
    assert len({event["event_id"] for event in events}) == len(events)
    assert all(event["user_id"] for event in events)
    times = [datetime.fromisoformat(event["event_time"]) for event in events]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["event_time"]) for e in events)
    assert START - timedelta(hours=2) <= min(times) and max(times) < START
    assert len({t.replace(minute=0, second=0, microsecond=0) for t in times}) == 3  # 01:xx, 02:xx, 03:xx
    kinds = collections.Counter((event["counter"], event["delta"]) for event in events)
    assert set(kinds) == {("upvotes", 1), ("upvotes", -1), ("shares", 1)}
    assert 0.15 < kinds["shares", 1] / len(events) < 0.25 and 0.07 < kinds["upvotes", -1] / len(events) < 0.13


def test_live_events_are_stamped_within_their_span() -> None:
    live = list(generate_events(Workload(events=5_000, posts=100, seed=7, start_time=START, span_ms=1_500)))
    times = [datetime.fromisoformat(event["event_time"]) for event in live]
    assert START - timedelta(milliseconds=1_500) <= min(times) < START - timedelta(seconds=1) and max(times) <= START
    with pytest.raises(ValueError):
        Workload(events=1, posts=1, span_ms=-1)


def test_every_generated_event_is_accepted_with_its_attributes() -> None:
    for event in generate_events(Workload(events=2000, posts=300, seed=1, start_time=START)):
        data, attributes = event_message(event)
        assert attributes == {"event_id": event["event_id"], "event_time": event["event_time"]}
        vote = accepted(data, attributes)
        assert (vote.post_id, vote.counter, vote.delta, vote.event_id, vote.user_id) == (
            event["post_id"],
            event["counter"],
            event["delta"],
            event["event_id"],
            event["user_id"],
        )


def test_real_traffic_is_half_viral_head_half_long_tail_half_vote_states_and_all_accepted() -> None:
    """Issue 45's shape: single votes, a Zipf head and a uniform tail, half vote states by users of
    their own (some flipping), all valid; deterministic for a seed."""
    workload = RealTrafficWorkload(events=20_000, posts=5_000, seed=3, start_time=START)
    events = list(generate(workload))
    assert events == list(generate(workload))
    states = [e for e in events if "vote" in e]
    assert 0.45 < len(states) / len(events) < 0.55
    posts = collections.Counter(e["post_id"] for e in events)
    assert posts.most_common(1)[0][0] == "p-1" and posts["p-1"] > 0.05 * len(events)  # the viral head
    assert len(posts) > 0.5 * workload.posts  # and a long tail over the catalogue
    first_votes = [e for e in states if e["vote"] == "up"]
    assert len({e["user_id"] for e in first_votes}) > 0.8 * len(first_votes)  # users of their own
    assert {e["vote"] for e in states} == {"up", "down", "none"}  # flips
    for event in events:
        vote = parse_vote(*event_message(event), publish_time_s=time.time())
        assert isinstance(vote, (VoteEvent, VoteState)) and vote.post_id == event["post_id"], vote


def test_every_invalid_payload_is_rejected_for_its_own_reason() -> None:
    payloads = invalid_payloads(2 * len(INVALID_KINDS) + 3, seed=5)
    reasons = []
    for index, payload in enumerate(payloads):
        result = parse_vote(payload, {}, publish_time_s=time.time())
        assert isinstance(result, Rejected), payload
        assert reason_of(result) == INVALID_KINDS[index % len(INVALID_KINDS)][0], (payload, result.error)
        reasons.append(reason_of(result))
    assert len(set(reasons)) >= 10
    assert invalid_payloads(30, seed=5) == invalid_payloads(30, seed=5)


def test_workload_rejects_impossible_parameters() -> None:
    for bad in (
        {"posts": 0},
        {"events": -1},
        {"fractions": {"shares": 0.7}, "unvote_fraction": 0.4},
        {"zipf": -1.0},
        {"fractions": {"likes": 0.1}},
        {"fractions": {"shares": -0.1}},
    ):
        with pytest.raises(ValueError):
            settings: dict[str, Any] = {"events": 10, "posts": 10, **bad}
            Workload(**settings)


def test_invalid_messages_are_spread_evenly() -> None:
    numbers: list[int | str] = list(range(10))
    letters: list[int | str] = ["a", "b"]
    assert list(_interleave(iter(numbers), letters, 10)) == [0, 1, 2, "a", 3, 4, 5, "b", 6, 7, 8, 9]
    nothing: list[str] = []
    assert list(_interleave(iter(nothing), ["a"], 0)) == ["a"]


# --- the ledger ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def viral() -> tuple[Ledger, list[dict]]:
    """The VIRAL workload's events and their ledger (with 4 invalid); tests must not change them."""
    events = list(generate_events(VIRAL))
    ledger = Ledger()
    for event in events:
        ledger.add(event)
    ledger.add_invalid(4)
    return ledger, events


def test_ledger_totals_equal_a_recount(viral: tuple[Ledger, list[dict]]) -> None:
    ledger, events = viral
    assert ledger.totals == recount([accepted(event_message(event)[0]) for event in events])
    assert (ledger.events, ledger.invalid) == (len(events), 4)


def test_ledger_keeps_posts_whose_net_is_zero() -> None:
    ledger = Ledger()
    ledger.add({"post_id": "p-9", "counter": "upvotes", "delta": 1, "event_time": "2026-11-22T01:59:59.999Z"})
    ledger.add({"post_id": "p-9", "counter": "upvotes", "delta": -1, "event_time": "2026-11-22T02:00:00.000Z"})
    assert ledger.totals == {"p-9": Counts(upvotes=0, shares=0)._asdict()}
    assert ledger.hourly() == {
        "p-9": {
            "2026-11-22T01:00:00Z": Counts(upvotes=1, shares=0)._asdict(),
            "2026-11-22T02:00:00Z": Counts(upvotes=-1, shares=0)._asdict(),
        }
    }


def test_hourly_sums_equal_totals(viral: tuple[Ledger, list[dict]]) -> None:
    ledger, _ = viral
    hourly = ledger.hourly()
    assert set(hourly) == set(ledger.totals)
    for post, hours in hourly.items():
        for counter in ("upvotes", "shares"):
            assert sum(sums[counter] for sums in hours.values()) == ledger.totals[post][counter]
    assert set().union(*hourly.values()) == {"2026-11-22T01:00:00Z", "2026-11-22T02:00:00Z", "2026-11-22T03:00:00Z"}


def test_ledger_counts_distinct_upvoters_exactly(viral: tuple[Ledger, list[dict]]) -> None:
    ledger, events = viral
    voters: dict[str, set[str]] = {}
    for event in events:
        if event["counter"] == "upvotes" and event["delta"] > 0:
            voters.setdefault(event["post_id"], set()).add(event["user_id"])
    assert ledger.unique_voters == {post: len(voters.get(post, ())) for post in ledger.totals}
    assert 0 < max(ledger.unique_voters.values()) < sum(t["upvotes"] for t in ledger.totals.values())


def test_ledger_save_and_load_round_trip(viral: tuple[Ledger, list[dict]], tmp_path) -> None:
    ledger, _ = viral
    path = tmp_path / "ledger.json"
    ledger.save(path)
    document = json.loads(path.read_text())
    assert list(document) == ["events", "hourly", "invalid", "posts", "unique_voters"]
    assert document["posts"] == ledger.totals and document["hourly"] == ledger.hourly()
    loaded = Ledger.load(path)
    assert (loaded.events, loaded.invalid, loaded.totals, loaded.hourly(), loaded.unique_voters) == (
        ledger.events,
        ledger.invalid,
        ledger.totals,
        ledger.hourly(),
        ledger.unique_voters,
    )
    # A loaded ledger keeps counting where the saved one stopped.
    hour = "2026-11-22T01:00:00Z"
    loaded.add({"post_id": "p-1", "counter": "shares", "delta": 1, "event_time": hour})
    assert loaded.hourly()["p-1"][hour]["shares"] == ledger.hourly()["p-1"][hour]["shares"] + 1


# --- progress -----------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_done_total_percent_and_rate_in_logs_and_on_a_terminal() -> None:
    log = io.StringIO()
    with progress_bar(1000, "publish", log, unit="events") as bar:
        for _ in range(1000):
            bar.update()
    final = log.getvalue().split("\r")[-1]
    assert re.search(r"publish: 100%.*\| 1000/1000 \[.*events/s\]", final), final

    terminal = FakeTerminal()
    with progress_bar(None, "pull", terminal, unit="messages") as bar:
        bar.update(5)
    assert re.search(r"pull: 5messages \[.*messages/s\]", terminal.getvalue().split("\r")[-1])

    silent = io.StringIO()
    with progress_bar(10, "quiet", silent, enabled=False) as bar:
        bar.update(10)
    assert silent.getvalue() == ""


# --- publishing through the emulator -------------------------------------------------------


def pull_all(subscription_path: str, expected: int, deadline_s: float = 25.0) -> list[PubsubMessage]:
    """Pulls and acknowledges until `expected` distinct messages arrived or the deadline passed.

    It stops as soon as the count is reached: a pull on an empty subscription waits for its
    whole timeout on the emulator.
    """
    subscriber = pubsub_v1.SubscriberClient()
    messages: dict[str, PubsubMessage] = {}
    deadline = time.monotonic() + deadline_s
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            try:
                response = subscriber.pull(subscription=subscription_path, max_messages=1000, timeout=5, retry=None)
            except exceptions.DeadlineExceeded:
                continue
            if response.received_messages:
                subscriber.acknowledge(
                    subscription=subscription_path, ack_ids=[m.ack_id for m in response.received_messages]
                )
                messages.update((m.message.message_id, m.message) for m in response.received_messages)
    finally:
        subscriber.close()
    return list(messages.values())


@pytest.fixture
def own_topic(stack: Resources) -> Iterator[tuple[str, str]]:
    """A new topic and subscription, so a test sees only its own messages."""
    tag = uuid.uuid4().hex[:8]
    topic, subscription = stack.topic_path(f"own-{tag}"), stack.subscription_path(f"own-sub-{tag}")
    pubsub_v1.PublisherClient().create_topic(name=topic)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=60)
    subscriber.close()
    yield topic, subscription


@pytest.mark.parametrize("batch_size,messages_sent", [(1, 2020), (500, 24), (333, 27)])
def test_published_workload_adds_up_to_the_ledger(
    stack: Resources, tmp_path, batch_size: int, messages_sent: int
) -> None:
    workload = Workload(events=2000, posts=200, seed=11, invalid=20)
    ledger_path = tmp_path / "ledger.json"
    subscription = stack.subscription_path(f"{stack.subscription}-{batch_size}")
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=stack.topic_path(stack.topic), ack_deadline_seconds=60)
    subscriber.close()
    report, ledger = publish_workload(
        stack.topic_path(stack.topic), workload, str(ledger_path), progress=False, batch_size=batch_size
    )
    assert (report.published, report.invalid, report.failed, report.messages) == (2020, 20, 0, messages_sent)
    assert Ledger.load(ledger_path).totals == ledger.totals

    messages = pull_all(subscription, messages_sent)
    assert len(messages) == messages_sent
    votes: list[VoteEvent] = []
    rejected: list[VoteState | Rejected] = []
    batch_ids = []
    for message in messages:
        attributes = dict(message.attributes)
        results = list(parse_message(message.data, attributes, message.publish_time.timestamp()))
        if attributes.get(FORMAT_ATTRIBUTE) == NDJSON:
            assert len(results) <= batch_size
            batch_ids.append(attributes["event_id"])
            assert attributes["event_id"].startswith(BATCH_ID_PREFIX) and set(attributes) == {"format", "event_id"}
        elif isinstance(results[0], VoteEvent):
            assert {"event_id", "event_time"} <= set(attributes)
        for result in results:
            if isinstance(result, VoteEvent):
                votes.append(result)
            else:
                rejected.append(result)
    assert len(batch_ids) == len(set(batch_ids)) == (0 if batch_size == 1 else -(-2000 // batch_size))
    assert recount(votes) == ledger.totals
    assert len(votes) == ledger.events == 2000
    assert len(rejected) == ledger.invalid == 20


def test_publish_file_publishes_lines_as_they_are(own_topic: tuple[str, str], tmp_path) -> None:
    topic, subscription = own_topic
    valid = [
        b'{"post_id":"p-1","counter":"upvotes","delta":1,"event_id":"e1","event_time":"2026-11-22T01:15:00.000Z"}',
        b'{"post_id": "p-1", "counter": "upvotes", "delta": -1, "event_id": "e2", "event_time": "2026-11-22T04:10:00+02:00"}',
        b'{"post_id":"p-2","counter":"shares","delta":3,"event_id":"e3","event_time":"2026-11-22T02:59:59.999Z"}',
        b'{"post_id":"p-3","counter":"upvotes","delta":1}',
    ]
    invalid = [b"not json", b'{"post_id":"p-1","counter":"likes","delta":1}', b'["p-1","upvotes",1]']
    path = tmp_path / "votes.jsonl"
    lines = [valid[0], valid[1], invalid[0], valid[2], b"", invalid[1], invalid[2]]
    path.write_bytes(b"".join(line + b"\n" for line in lines) + valid[3] + b"\r\n")  # a blank line; CRLF

    report, ledger = publish_file(topic, str(path), str(tmp_path / "ledger.json"), None, False)
    assert (report.published, report.invalid, report.failed) == (7, 3, 0)
    assert (ledger.events, ledger.invalid) == (4, 3)
    assert ledger.totals == {
        "p-1": Counts(upvotes=0, shares=0)._asdict(),
        "p-2": Counts(upvotes=0, shares=3)._asdict(),
        "p-3": Counts(upvotes=1, shares=0)._asdict(),
    }
    assert ledger.hourly()["p-1"] == {
        "2026-11-22T01:00:00Z": Counts(upvotes=1, shares=0)._asdict(),
        "2026-11-22T02:00:00Z": Counts(upvotes=-1, shares=0)._asdict(),
    }
    assert Ledger.load(tmp_path / "ledger.json").totals == ledger.totals

    messages = {message.data: message for message in pull_all(subscription, 7)}
    assert set(messages) == set(valid + invalid)
    assert dict(messages[valid[0]].attributes) == {"event_id": "e1", "event_time": "2026-11-22T01:15:00.000Z"}
    # An event without an event_id gets a new message ID (the contract's encoding, as `upvotes serve`
    # sends it); a line the parser rejects goes as it is, without attributes.
    assert set(messages[valid[3]].attributes) == {EVENT_ID_ATTRIBUTE}
    assert messages[valid[3]].attributes[EVENT_ID_ATTRIBUTE].startswith(MESSAGE_ID_PREFIX)
    assert dict(messages[invalid[0]].attributes) == {}


def test_failed_publishes_are_counted_not_raised(stack: Resources) -> None:
    report = publish_messages(stack.topic_path("no-such-topic"), [(b"{}", {})] * 3, total=3, progress=False)
    assert (report.published, report.failed) == (0, 3)


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_publishes_and_writes_the_ledger(own_topic: tuple[str, str], tmp_path, capsys) -> None:
    topic, subscription = own_topic
    ledger_path = tmp_path / "ledger.json"
    status = run(
        cli(
            "--topic",
            topic,
            "--events",
            "300",
            "--posts",
            "20",
            "--invalid",
            "5",
            "--ledger",
            str(ledger_path),
            "--no-progress",
        )
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    summary = r"published 305 events \(5 invalid\) in [\d.]+ s: [\d,]+ events/s; ledger: .*ledger\.json\n"
    assert re.fullmatch(summary, out)
    assert err == ""
    ledger = Ledger.load(ledger_path)
    assert (ledger.events, ledger.invalid) == (300, 5)
    assert len(pull_all(subscription, 6)) == 6  # 300 events in one batch of the default 500, and 5 invalid


def test_cli_explains_errors_the_user_can_fix(stack: Resources, tmp_path, capsys) -> None:
    cases = [
        (("--topic", "bad/topic"), "is not a topic name"),
        (("--topic", stack.topic, "--file", str(tmp_path / "missing.jsonl")), "no such file"),
        (("--topic", "no-such-topic", "--project", stack.project), "does not exist"),
        (("--topic", stack.topic, "--posts", "0"), "posts must be at least 1"),
        (("--topic", stack.topic, "--rate", "0"), "--rate must be positive"),
    ]
    for argv, message in cases:
        assert main(["publish", *argv, "--no-progress"]) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("upvotes: ") and message in err, err
        assert "Traceback" not in err


def test_batches_pack_events_within_both_limits_and_read_back_as_the_same_events() -> None:
    events = list(generate_events(Workload(events=1234, posts=50, seed=3, start_time=START)))
    batches = list(batch_messages(events, 500))
    assert [b.events for b in batches] == [500, 500, 234]
    assert all(b.attributes[FORMAT_ATTRIBUTE] == NDJSON for b in batches)
    parsed = [r for b in batches for r in parse_message(b.data, b.attributes, 0.0)]
    assert parsed == [parse_vote(event_message(e)[0], {}, 0.0) for e in events]
    fat = [dict(e, padding="x" * 5000) for e in events[:600]]  # about 5 KB each: bytes bind first
    assert all(len(b.data) <= MAX_BATCH_BYTES for b in batch_messages(fat, 1000))
    assert sum(b.events for b in batch_messages(fat, 1000)) == 600
    assert [(m.data, m.attributes) for m in batch_messages(events[:3], 1)] == [event_message(e) for e in events[:3]]
    with pytest.raises(ValueError):
        list(batch_messages(events, 1001))


def test_voters_bounds_the_user_ids_a_workload_draws() -> None:
    events = list(generate_events(Workload(events=2_000, posts=3, seed=1, voters=50)))
    assert {e["user_id"] for e in events} == {f"u-{i}" for i in range(50)}
    ledger = Ledger()
    for event in events:
        ledger.add(event)
    assert all(40 <= n <= 50 for n in ledger.unique_voters.values())  # far fewer voters than upvotes
    assert sum(ledger.unique_voters.values()) < sum(t["upvotes"] for t in ledger.totals.values()) / 5
    with pytest.raises(ValueError, match="voters"):
        Workload(events=1, posts=1, voters=0)
