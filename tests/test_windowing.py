"""Windowing and triggering of WindowAndSumVotes (transforms/windowing.py) with TestStream: panes,
lateness, discarding, one delta per post, event hour and window; and what the windows make of the
ingestion-time stamp ParseVotes gives each bundle's sums (a vote behind the watermark, a worker
clock behind it, still counted). ParseVotes' own stamp and counters: tests/test_parse_and_sum.py."""

from __future__ import annotations

import time

import apache_beam as beam
from apache_beam.runners.worker import statesampler
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.trigger import DefaultTrigger
from apache_beam.transforms.window import TimestampedValue

from local_runner import metrics
from schemas.counters import Counts, one
from schemas.delta_ids import SUM_SHARDS, pane_delta_id, sum_shard
from schemas.records import CounterSums, PostDelta, PostHour
from tests.support.streams import streaming_pipeline
from tests.support.vote_messages import HOUR, message
from transforms.parse_and_sum import ParseVotes
from transforms.windowing import ALLOWED_LATENESS_S, MergeSums, WindowAndSumVotes, ingestion_windows

WRITER = "test-writer"


def vote(post: str, delta: int = 1, counter: str = "upvotes") -> tuple[int, dict[PostHour, CounterSums]]:
    """One vote as ParseVotes emits a bundle's sums: keyed by its post's shard."""
    sums = CounterSums(one(counter, delta), 1)
    return sum_shard(post), {PostHour(post, HOUR): sums}


def run_stream(stream: TestStream, check, window_seconds: int = 10) -> None:
    """Runs WindowAndSumVotes over the stream; `check` asserts on the list of every delta emitted."""
    with streaming_pipeline() as p:
        assert_that(p | stream | WindowAndSumVotes(WRITER, window_seconds), check)


def test_a_hot_post_costs_one_delta_per_window() -> None:
    stream = (
        TestStream()
        .add_elements([TimestampedValue(vote("hot"), t) for t in (1, 2, 3, 4)] + [TimestampedValue(vote("cold"), 5)])
        .advance_watermark_to(10)
        .add_elements([TimestampedValue(vote("hot", -1), 12), TimestampedValue(vote("hot", 1, "shares"), 15)])
        .advance_watermark_to(20)
        .add_elements([TimestampedValue(vote("hot"), 27)])
        .advance_watermark_to_infinity()
    )
    with streaming_pipeline() as p:
        deltas = p | stream | WindowAndSumVotes(WRITER, window_seconds=10)
        assert_that(
            deltas,
            equal_to(
                [
                    PostDelta.of("hot", HOUR, pane_delta_id(WRITER, 0, 0, 10_000_000, SUM_SHARDS), upvotes=4, events=4),
                    PostDelta.of(
                        "cold", HOUR, pane_delta_id(WRITER, 0, 0, 10_000_000, SUM_SHARDS), upvotes=1, events=1
                    ),
                    # DISCARDING: the second window's pane holds only its own votes.
                    PostDelta.of(
                        "hot",
                        HOUR,
                        pane_delta_id(WRITER, 10_000_000, 0, 20_000_000, SUM_SHARDS),
                        upvotes=-1,
                        shares=1,
                        events=2,
                    ),
                    PostDelta.of(
                        "hot", HOUR, pane_delta_id(WRITER, 20_000_000, 0, 30_000_000, SUM_SHARDS), upvotes=1, events=1
                    ),
                ]
            ),
        )
        # Per window: exactly one delta per post and window.
        assert_that(
            deltas | beam.Map(lambda d, w=beam.DoFn.WindowParam: (int(w.start), d.post_id)),
            equal_to([(0, "hot"), (0, "cold"), (10, "hot"), (20, "hot")]),
            label="one per post and window",
        )


def test_a_vote_older_than_the_watermark_is_counted_because_it_is_stamped_on_ingestion() -> None:
    """Event-time windows would drop it as late; ParseVotes stamps its bundle's sums with the
    ingestion time, so WindowAndSumVotes keeps it."""
    now = int(time.time())  # TestStream watermarks are whole milliseconds
    days_old = HOUR - 3 * 24 * 3600
    stream = (
        TestStream()
        .advance_watermark_to(now - 1)  # the watermark is far past the votes' event and publish times
        .add_elements(
            [TimestampedValue(message("p", days_old), days_old), TimestampedValue(message("p", days_old), HOUR)]
        )
        .advance_watermark_to_infinity()
    )

    def check(deltas: list[PostDelta]) -> None:
        assert [(d.post_id, d.event_hour, d.sums.counts.upvotes, d.sums.events) for d in deltas] == [
            ("p", days_old, 2, 2)
        ]

    with streaming_pipeline() as p:
        assert_that((p | stream | ParseVotes()).sums | WindowAndSumVotes(WRITER, window_seconds=10), check)

    # The same votes windowed by their own (event-time) timestamps are dropped as late.
    late = (
        TestStream()
        .advance_watermark_to(now - 1)
        .add_elements([TimestampedValue(vote("p"), days_old)])
        .advance_watermark_to_infinity()
    )

    def nothing(deltas: list[PostDelta]) -> None:
        assert deltas == []

    with streaming_pipeline() as p:
        assert_that(p | late | WindowAndSumVotes(WRITER, window_seconds=10), nothing)


def test_sum_of_all_panes_equals_sum_of_inputs_for_a_long_irregular_stream() -> None:
    inputs = [
        (f"p-{i % 7}", 1 if i % 5 else -1, "upvotes" if i % 3 else "shares", i // 4 + (i * 7) % 3) for i in range(400)
    ]
    stream = TestStream()
    for start in range(0, 400, 50):
        chunk = inputs[start : start + 50]
        stream = stream.add_elements([TimestampedValue(vote(p, d, c), t) for p, d, c, t in chunk])
        stream = stream.advance_watermark_to(
            min(t for *_, t in inputs[start + 50 : start + 100]) if start < 350 else 1000
        )
    stream = stream.advance_watermark_to_infinity()

    def check(deltas: list[PostDelta]) -> None:
        for post in {p for p, *_ in inputs}:
            got = [d for d in deltas if d.post_id == post]
            assert sum(d.sums.counts.upvotes for d in got) == sum(
                d for p, d, c, _ in inputs if p == post and c == "upvotes"
            )
            assert sum(d.sums.counts.shares for d in got) == sum(
                d for p, d, c, _ in inputs if p == post and c == "shares"
            )
        ids = [(d.post_id, d.event_hour, d.delta_id) for d in deltas]
        assert len(ids) == len(set(ids)), "two panes share a delta key"
        assert len(deltas) > 7 * 5, "every window should have produced a pane per post"

    run_stream(stream, check)


def test_votes_that_cancel_out_write_nothing() -> None:
    stream = (
        TestStream()
        .add_elements([TimestampedValue(vote("p"), 1), TimestampedValue(vote("p", -1), 2)])
        .advance_watermark_to_infinity()
    )

    def check(deltas: list[PostDelta]) -> None:
        assert deltas == []

    run_stream(stream, check)


def test_parse_and_window_group_by_post_and_event_hour() -> None:
    messages = [message("p", HOUR), message("p", HOUR + 3600), message("p", HOUR, counter="shares"), message("q", HOUR)]
    with TestPipeline() as p:
        deltas = (p | beam.Create(messages) | ParseVotes()).sums | WindowAndSumVotes(WRITER, window_seconds=3600)
        assert_that(
            deltas | beam.Map(lambda d: (d.post_id, d.event_hour, d.sums.counts, d.sums.events)),
            equal_to(
                [
                    ("p", HOUR, Counts(upvotes=1, shares=1), 2),
                    ("p", HOUR + 3600, Counts(upvotes=1), 1),
                    ("q", HOUR, Counts(upvotes=1), 1),
                ]
            ),
        )


def test_posts_sharing_a_shard_each_get_their_own_delta() -> None:
    posts = [f"p-{i}" for i in range(200)]  # more posts than shards: shards hold many posts
    assert len({sum_shard(post) for post in posts}) < len(posts)
    stream = (
        TestStream()
        .add_elements([TimestampedValue(vote(post, delta=i + 1), 1 + i % 5) for i, post in enumerate(posts)])
        .add_elements([TimestampedValue(vote(post, 1, "shares"), 6) for post in posts[:10]])
        .advance_watermark_to_infinity()
    )
    pane = pane_delta_id(WRITER, 0, 0, 10_000_000, SUM_SHARDS)
    expected = [
        PostDelta.of(post, HOUR, pane, upvotes=i + 1, shares=1 if i < 10 else 0, events=2 if i < 10 else 1)
        for i, post in enumerate(posts)
    ]
    run_stream(stream, equal_to(expected))


def test_merge_sums_is_order_free_and_copies_its_inputs() -> None:
    a = {PostHour("x", HOUR): CounterSums(Counts(upvotes=1), 1), PostHour("y", HOUR): CounterSums(Counts(shares=2), 2)}
    b = {PostHour("x", HOUR): CounterSums(Counts(upvotes=-3, shares=1), 4)}
    combine = MergeSums()
    one = combine.add_input(combine.add_input(combine.create_accumulator(), a), b)
    other = combine.merge_accumulators(
        [combine.add_input(combine.create_accumulator(), b), combine.add_input(combine.create_accumulator(), a)]
    )
    assert (
        combine.extract_output(one)
        == combine.extract_output(other)
        == {
            PostHour("x", HOUR): CounterSums(Counts(upvotes=-2, shares=1), 5),
            PostHour("y", HOUR): CounterSums(Counts(shares=2), 2),
        }
    )
    assert a[PostHour("x", HOUR)] == CounterSums(Counts(upvotes=1), 1)  # inputs are not changed in place


def test_a_worker_clock_behind_the_watermark_loses_no_vote() -> None:
    """A worker whose clock lags Pub/Sub's (whose publish times the watermark follows) by more
    than a window and the allowed lateness: its bundle is stamped no earlier than the bundle's
    own messages, which hold the watermark, so its votes land in an open window and count."""
    now = int(time.time())  # this worker's clock; Pub/Sub's and the watermark are an hour ahead
    published = now + 3600
    stream = (
        TestStream()
        .advance_watermark_to(published - 1)
        .add_elements(
            [TimestampedValue(message("p", HOUR), published), TimestampedValue(message("p", HOUR), published)]
        )
        .advance_watermark_to_infinity()
    )

    def check(deltas: list[PostDelta]) -> None:
        assert [(d.post_id, d.event_hour, d.sums.counts.upvotes, d.sums.events) for d in deltas] == [("p", HOUR, 2, 2)]

    with streaming_pipeline() as p:
        assert_that((p | stream | ParseVotes()).sums | WindowAndSumVotes(WRITER, window_seconds=10), check)


def test_a_vote_within_the_allowed_lateness_counts_once_in_a_late_pane_of_its_own() -> None:
    """Behind the watermark, but by less than the allowed lateness: a late pane, written as a
    delta row of its own (the pane index is in the key), never merged into the on-time one."""
    stream = (
        TestStream()
        .add_elements([TimestampedValue(vote("p"), 1), TimestampedValue(vote("p"), 2)])
        .advance_watermark_to(15)  # the window [0, 10) fires on time: pane 0
        .add_elements([TimestampedValue(vote("p", 1, "shares"), 5)])  # 10 s behind the watermark
        .advance_watermark_to(30)
        .advance_watermark_to_infinity()
    )
    window = (0, 10_000_000)
    _SAMPLERS.clear()
    pipeline = streaming_pipeline()
    deltas = pipeline | stream | WindowAndSumVotes(WRITER, window_seconds=10)
    assert_that(
        deltas,
        equal_to(
            [
                PostDelta.of(
                    "p", HOUR, pane_delta_id(WRITER, window[0], 0, window[1], SUM_SHARDS), upvotes=2, events=2
                ),
                PostDelta.of("p", HOUR, pane_delta_id(WRITER, window[0], 1, window[1], SUM_SHARDS), shares=1, events=1),
            ]
        ),
    )
    deltas | beam.Map(_keep_sampler)
    pipeline.run().wait_until_finish()
    counters = metrics.counters(_SAMPLERS[0])
    assert counters is not None and counters[("WindowAndSumVotes", "late_events")] == 1


_SAMPLERS: list = []  # the local runner's worker sampler, which holds its counters (local_runner/metrics.py)


def _keep_sampler(_) -> None:
    _SAMPLERS.append(statesampler.get_current_tracker())


def test_windows_allow_lateness_under_the_default_trigger() -> None:
    """Dataflow lifts a streaming combine only under the default trigger (module docstring)."""
    windowing = ingestion_windows(10).windowing
    assert windowing.triggerfn == DefaultTrigger() and windowing.allowed_lateness == ALLOWED_LATENESS_S
