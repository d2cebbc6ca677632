"""Unique voters: the sketch (schemas/voter_sketch.py), the window combine carrying sketches
(MergeSums, WindowAndSumVotes) across panes and replays, and a delta's sketch through its dead
letter. Who counts as a voter (sum_message) and a bundle's one sketch per post and hour
(BundleSums): tests/test_parse_and_sum.py."""

from __future__ import annotations

import json
import pickle
import random

from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import TimestampedValue

from schemas.counters import Counts
from schemas.delta_ids import sum_shard
from schemas.records import CounterSums, PostDelta, PostHour
from schemas.voter_sketch import MAX_SKETCH_BYTES, VoterUnion, estimate, sketch_of, union_of
from tests.support.hostile_input import HOSTILE_IDS
from tests.support.streams import streaming_pipeline
from tests.support.vote_messages import HOUR
from transforms.windowing import MergeSums, WindowAndSumVotes

WRITER = "test-writer"


def users(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


# --- the sketch ---------------------------------------------------------------------------


def test_the_sketch_is_exact_for_small_audiences_and_close_for_large_ones() -> None:
    for n in (1, 10, 100, 999):
        assert estimate(sketch_of(users("u", n))) == n
    big = estimate(sketch_of(users("v", 200_000)))
    assert abs(big - 200_000) / 200_000 < 0.02
    assert len(sketch_of(users("w", 200_000))) <= MAX_SKETCH_BYTES


def state(sketch: bytes) -> bytes:
    """A serialised HLL sketch's registers and what derives from them (from byte 16 of
    DataSketches' HLL layout on). Bytes 0-15 hold the mode, flags and the HIP accumulator:
    estimator bookkeeping that depends on the order coupons arrived in (the flags record
    that a union happened), not on which coupons did."""
    return sketch[16:]


def test_union_is_associative_commutative_and_idempotent() -> None:
    rng = random.Random(5)
    samples = [rng.sample(users("u", 5_000), 1_500) for _ in range(4)]
    a, b, c, d = (sketch_of(sample) for sample in samples)
    left = union_of([union_of([union_of([a, b]), c]), d])
    right = union_of([a, union_of([b, union_of([c, d])])])
    shuffled = union_of([d, b, a, c])
    assert left is not None and right is not None and shuffled is not None
    assert state(left) == state(right) == state(shuffled)
    exact = len(set().union(*samples))
    for union in (left, right, shuffled):
        assert abs(estimate(union) - exact) / exact < 0.01
    # A replayed pane or a refold unions the same sketch again: the state does not change.
    replayed = union_of([left, a, b, left])
    assert replayed is not None
    assert state(replayed) == state(left) and abs(estimate(replayed) - exact) / exact < 0.01
    assert union_of([None, None]) is None and estimate(None) == 0  # no sketch: no voters


def test_voter_union_survives_pickling_as_beam_encodes_accumulators() -> None:
    union = VoterUnion(sketch_of(users("u", 300)))
    copy = pickle.loads(pickle.dumps(union))
    assert estimate(copy.add(sketch_of(users("u", 400))).to_bytes()) == 400
    assert estimate(union.to_bytes()) == 300  # the original is untouched


# --- the window combine -------------------------------------------------------------------


def shard_sums(post: str, voters: list[str], upvotes: int | None = None) -> tuple[int, dict[PostHour, CounterSums]]:
    n = len(voters) if upvotes is None else upvotes
    return sum_shard(post), {
        PostHour(post, HOUR): CounterSums(Counts(upvotes=n), n, sketch_of(voters) if voters else None)
    }


def test_merge_sums_unions_sketches_in_any_order_and_copies_its_inputs() -> None:
    combine = MergeSums()
    a, b = shard_sums("x", users("u", 600))[1], shard_sums("x", users("u", 300) + users("v", 100))[1]
    key = PostHour("x", HOUR)
    one = combine.extract_output(combine.add_input(combine.add_input(combine.create_accumulator(), a), b))
    first = combine.add_input(combine.create_accumulator(), b)
    second = combine.add_input(combine.create_accumulator(), a)
    other = combine.extract_output(combine.merge_accumulators([first, pickle.loads(pickle.dumps(second))]))
    assert one[key][:2] == other[key][:2] == (Counts(upvotes=1_000), 1_000)
    assert estimate(one[key].voters) == estimate(other[key].voters) == 700
    later = second[key].voters
    assert later is not None
    assert estimate(later.to_bytes()) == 600  # a later accumulator is not changed
    assert estimate(a[key].voters) == 600  # nor an input


def test_voters_seen_in_many_windows_and_replayed_are_counted_once() -> None:
    """Each pane's delta has its own sketch; their union is the post's voters, however many
    panes saw a voter and even if a pane's sums arrive twice (a replayed bundle)."""
    stream = (
        TestStream()
        .add_elements(
            [
                TimestampedValue(shard_sums("hot", users("u", 500)), 1),
                TimestampedValue(shard_sums("hot", users("u", 250)), 2),  # the same voters again
                TimestampedValue(shard_sums("hot", [], upvotes=7), 3),
            ]
        )  # votes without user IDs
        .advance_watermark_to(10)
        .add_elements([TimestampedValue(shard_sums("hot", users("u", 400) + users("w", 100)), 12)])
        .advance_watermark_to_infinity()
    )

    def check(deltas) -> None:
        by_window = sorted(deltas, key=lambda d: d.delta_id)
        assert [(d.sums.counts.upvotes, estimate(d.sums.voters)) for d in by_window] == [(757, 500), (500, 500)]
        assert estimate(union_of(d.sums.voters for d in deltas)) == 600

    with streaming_pipeline() as p:
        assert_that(p | stream | WindowAndSumVotes(WRITER, window_seconds=10), check)


def test_a_pane_whose_votes_cancel_out_is_still_written_for_its_voters() -> None:
    cancelled = (sum_shard("p"), {PostHour("p", HOUR): CounterSums(Counts(), 2, sketch_of(["alice"]))})
    stream = TestStream().add_elements([TimestampedValue(cancelled, 1)]).advance_watermark_to_infinity()

    def check(deltas) -> None:
        assert [(d.sums.counts, estimate(d.sums.voters)) for d in deltas] == [(Counts(), 1)]

    with streaming_pipeline() as p:
        assert_that(p | stream | WindowAndSumVotes(WRITER, window_seconds=10), check)


def test_a_delta_keeps_its_sketch_through_its_dead_letter_json() -> None:
    delta = PostDelta.of("p/ü", HOUR, "w:0:0", upvotes=3, events=3, voters=sketch_of(HOSTILE_IDS))
    fields = json.loads(json.dumps(delta.to_json()))
    assert PostDelta.from_json(fields) == delta and estimate(PostDelta.from_json(fields).sums.voters) == len(
        HOSTILE_IDS
    )
    assert PostDelta.from_json(PostDelta.of("p", HOUR, "w", upvotes=1, events=1).to_json()).sums.voters is None
    legacy = {k: v for k, v in delta.to_json().items() if k != "voters"}  # dead-lettered before sketches
    assert PostDelta.from_json(legacy) == delta._replace(sums=delta.sums._replace(voters=None))
