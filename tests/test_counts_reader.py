"""CountsReader on the Spanner emulator: single flight, batching, refresh by an injected clock,
exact-staleness snapshots and the as_of of every answer."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from schemas.counters import Counts
from schemas.records import PostDelta
from schemas.voter_sketch import sketch_of
from spanner_reads.counts_reader import CountsReader
from spanner_store.database import commit_mutations
from spanner_writes.deltas import add_delta_writes, write_deltas
from tests.support.polling import wait_until

HOUR = 1_795_312_800
CALLERS = 32


class FakeClock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def add(database, post_id: str, upvotes: int, tag: str, shares: int = 0) -> datetime:
    """Commits one delta; returns its commit timestamp."""
    committed = commit_mutations(
        database,
        lambda batch: add_delta_writes(
            batch, [PostDelta.of(post_id, HOUR, f"{tag}:{post_id}", upvotes=upvotes, shares=shares, events=1)]
        ),
    )
    assert isinstance(committed, datetime)
    return committed


def test_concurrent_callers_of_a_hot_post_share_one_spanner_read_per_refresh(database) -> None:
    add(database, "hot", 7, "a", shares=2)
    clock = FakeClock()
    reader = CountsReader(database, refresh_s=1.0, clock=clock)
    start = threading.Barrier(CALLERS)
    answers = []

    def call() -> None:
        start.wait()
        answers.append(reader.get("hot"))

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == CALLERS and reader.spanner_reads == 1
    assert {(a.post_id, a.counts, a.as_of) for a in answers} == {("hot", Counts(upvotes=7, shares=2), answers[0].as_of)}

    add(database, "hot", 5, "b")
    clock.now += 0.5  # still within the refresh interval: the cached answer, no read
    assert reader.get("hot").counts.upvotes == 7 and reader.spanner_reads == 1
    clock.now += 0.6  # past it: one read, and the new delta
    refreshed = reader.get("hot")
    assert (refreshed.counts.upvotes, reader.spanner_reads) == (12, 2)
    assert refreshed.as_of > answers[0].as_of


def test_unique_reads_have_their_own_cache_and_the_same_snapshot_as_the_counts(database) -> None:
    write_deltas(
        database, [PostDelta.of("voted", HOUR, "v:1", upvotes=3, events=3, voters=sketch_of(["ann", "bo", "cy"]))]
    )
    clock = FakeClock()
    reader = CountsReader(database, refresh_s=1.0, clock=clock)
    assert reader.get("voted").unique_voters is None
    unique = reader.get("voted", unique=True)
    assert (unique.counts.upvotes, unique.unique_voters, reader.spanner_reads) == (3, 3, 2)
    write_deltas(database, [PostDelta.of("voted", HOUR, "v:2", upvotes=1, events=1, voters=sketch_of(["ann", "dee"]))])
    assert reader.get("voted", unique=True).unique_voters == 3 and reader.spanner_reads == 2  # cached
    clock.now += 1.1
    assert reader.get("voted", unique=True)[1:] == (Counts(upvotes=4), reader.get("voted", unique=True).as_of, 4)


def test_get_many_reads_what_is_missing_in_one_batch_in_the_order_asked(database) -> None:
    add(database, "m-1", 1, "a")
    add(database, "m-2", 2, "a")
    reader = CountsReader(database, refresh_s=60.0, clock=FakeClock())
    assert reader.get("m-1").counts.upvotes == 1 and reader.spanner_reads == 1
    counts = reader.get_many(["m-2", "never-voted", "m-1", "m-2"])
    assert [(c.post_id, c.counts.upvotes, c.counts.shares) for c in counts] == [
        ("m-2", 2, 0),
        ("never-voted", 0, 0),
        ("m-1", 1, 0),
        ("m-2", 2, 0),
    ]
    assert reader.spanner_reads == 2  # m-2 and never-voted together; m-1 from the cache
    assert counts[0].as_of == counts[1].as_of  # one snapshot


def test_exact_staleness_reads_the_past_and_says_when(database) -> None:
    add(database, "stale", 10, "a")
    stale = CountsReader(database, staleness_s=2.0, refresh_s=0.0)
    strong = CountsReader(database, refresh_s=0.0)
    wait_until(
        lambda: stale.get("stale").counts.upvotes == 10,
        30,  # until the first write is 2 s in the past
        "the stale reader to see the first write",
        poll_s=0.1,
    )
    written_at = add(database, "stale", 5, "b")
    past, now = stale.get("stale"), strong.get("stale")
    # The stale read is 2 s behind the moment it was made, whatever the machine's pace: it sees the
    # second write exactly when its snapshot is at or after that write's commit.
    assert past.counts.upvotes == (15 if past.as_of >= written_at else 10) and now.counts.upvotes == 15
    assert now.as_of >= written_at
    assert (now.as_of - past.as_of).total_seconds() >= 2.0 - 0.05  # exact staleness: read time minus 2 s
    assert now.as_of <= datetime.now(timezone.utc)


def test_a_failed_read_reaches_every_waiter_and_is_not_cached(database) -> None:
    class Broken:
        def snapshot(self, **_):
            raise RuntimeError("spanner is down")

    reader = CountsReader(Broken(), clock=FakeClock())
    with pytest.raises(RuntimeError, match="spanner is down"):
        reader.get("x")
    with pytest.raises(RuntimeError):
        reader.get("x")
    assert reader.spanner_reads == 2
