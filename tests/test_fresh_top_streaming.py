"""Fresh top posts through the real streaming pipeline: after a fold, votes published to Pub/Sub
make a new post overtake the folded leader, and `fresh_top` ranks it first at its exact count
with no fold in between. The pipeline is warmed up first (a vote counted), so the time printed
is the freshness a live system sees."""

from __future__ import annotations

import time

from google.cloud import pubsub_v1

from pipeline import fold
from schemas.contract import event_message
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads.fresh_top import fresh_top
from spanner_reads.reads import exact_counts, last_fold_snapshot, top_posts
from spanner_writes.deltas import write_deltas
from tests.support.polling import wait_until
from upvotes.devtools import local_stream

WINDOW_S = 2
LEADER_VOTES = 30
RISER_VOTES = 45
DEADLINE_S = 120


def test_a_streamed_riser_overtakes_the_folded_leader_without_a_fold(stack, database, tmp_path) -> None:
    write_deltas(
        database,
        [
            PostDelta.of("leader", 1_795_312_800, "seed:leader", upvotes=LEADER_VOTES, events=LEADER_VOTES),
            PostDelta.of("runner-up", 1_795_312_800, "seed:runner-up", upvotes=10, events=10),
        ],
    )
    fold.run([f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"])
    with database.snapshot() as snapshot:
        folded_at = last_fold_snapshot(snapshot)

    process = local_stream.start(stack, WINDOW_S, tmp_path / "stream.log")
    topic = stack.topic_path(stack.topic)
    try:
        seconds = _riser_overtakes(database, process, topic)
    finally:
        assert local_stream.stop(process) == 0  # drained

    final = fresh_top(database, k=2)
    assert [(p.post_id, p.counts.upvotes) for p in final.posts] == [
        ("riser", RISER_VOTES),
        ("leader", LEADER_VOTES - 5),
    ]
    assert final.exact and final.bound is None  # 4 posts < k + extra: every post considered
    with database.snapshot() as snapshot:
        assert last_fold_snapshot(snapshot) == folded_at  # no fold ran meanwhile
    assert top_posts(database, 1).posts[0] == (
        "leader",
        Counts(upvotes=LEADER_VOTES),
        None,
    )  # the folded index never moved
    print(f"\nthe riser ranked first {seconds:.1f} s after its votes were published ({WINDOW_S} s windows)")


def _riser_overtakes(database, process, topic: str) -> float:
    """Warms the pipeline up, publishes the riser's and the leader's votes, and waits until the
    riser is first and both exact counts are final; returns publish-to-first seconds."""
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(topic, _vote("warm-up", 1)).result(timeout=60)
    wait_until(
        lambda: exact_counts(database, ["warm-up"])[0].counts.upvotes == 1,
        DEADLINE_S,
        "the pipeline to count the warm-up vote",
        process,
        poll_s=0.2,
    )
    published = time.monotonic()
    futures = [publisher.publish(topic, _vote("riser", 1)) for _ in range(RISER_VOTES)]
    futures += [publisher.publish(topic, _vote("leader", -1)) for _ in range(5)]
    for future in futures:
        future.result(timeout=60)
    wait_until(
        lambda: [p.post_id for p in fresh_top(database, k=2).posts][:1] == ["riser"],
        DEADLINE_S - (time.monotonic() - published),
        "the riser to come first",
        process,
        poll_s=0.1,
    )
    seconds = time.monotonic() - published
    wait_until(
        lambda: (
            [(p.post_id, p.counts.upvotes) for p in fresh_top(database, k=2).posts]
            == [("riser", RISER_VOTES), ("leader", LEADER_VOTES - 5)]
        ),  # later windows may still be arriving
        DEADLINE_S - seconds,
        "the counts to settle",
        process,
        poll_s=0.1,
    )
    return seconds


def _vote(post_id: str, delta: int) -> bytes:
    return event_message({"post_id": post_id, "counter": "upvotes", "delta": delta})[0]
