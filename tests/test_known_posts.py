"""KnownPosts' bookkeeping (pure) and the sinks' commits with it, on the Spanner emulator: a post's Posts row
is upserted by its first commit only and not at all when a read finds it, and a row deleted
behind the sink's back is written again."""

from __future__ import annotations

import pytest
from apache_beam.testing.test_stream import TestStream

from schemas.records import PostDelta, PostUser
from schemas.vote_states import UP, LatestVote
from spanner_reads.reads import exact_counts
from spanner_store.database import commit_mutations
from spanner_store.tables import POSTS, post_key
from spanner_writes.deltas import write_deltas
from spanner_writes.known_posts import KnownPosts
from spanner_writes.votes import apply_vote_states
from tests.support.streams import streaming_pipeline
from transforms.spanner_sink import WriteDeltaRows, WriteDeltasFn
from upvotes.devtools.commit_meter import _table_of, metering_commits

HOUR = 1_795_312_800


def test_known_posts_hold_at_most_their_capacity_and_drop_the_least_recently_written_first() -> None:
    known = KnownPosts(capacity=3)
    known.add(["a", "b", "c"])
    known.add(["a"])  # written again: now the most recent
    known.add(["d"])
    assert len(known) == 3
    assert known.among(["a", "b", "c", "d", "e"]) == {"a", "c", "d"}
    known.forget(["c", "zz"])
    assert known.among(["a", "b", "c", "d"]) == {"a", "d"}
    with pytest.raises(ValueError):
        KnownPosts(capacity=0)


class PostsRowsPerCommit:
    """A commit meter that keeps how many Posts rows each commit writes."""

    def __init__(self) -> None:
        self.commits: list[int] = []

    def record(self, mutations) -> None:
        self.commits.append(sum(len(_operation(m).values) for m in mutations if _table_of(m) == POSTS))


def _operation(mutation):
    pb = type(mutation).pb(mutation)
    return getattr(pb, pb.WhichOneof("operation"))


def bundle(fn: WriteDeltasFn, items: list[PostDelta]) -> list:
    fn.start_bundle()
    return [out for d in items for out in fn.process(d)] + list(fn.finish_bundle())


def test_the_sink_upserts_a_posts_row_in_its_first_commit_only_and_counts_exactly(stack, database) -> None:
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=1000)
    fn.setup()
    posts = [f"known-{i}" for i in range(5)]
    meter = PostsRowsPerCommit()
    with metering_commits(meter):
        for window in range(3):
            assert (
                bundle(
                    fn, [PostDelta.of(p, HOUR, f"known:{window}", upvotes=1 + i, events=1) for i, p in enumerate(posts)]
                )
                == []
            )
    assert meter.commits == [5, 0, 0]
    assert [t.counts.upvotes for t in exact_counts(database, posts)] == [3 * (1 + i) for i in range(5)]


def test_on_the_direct_runner_a_posts_row_is_upserted_once_across_bundles(stack, database) -> None:
    """The DirectRunner copies the sink's DoFn and calls its setup for every bundle; what the sink
    knows lives per process (transforms/per_process.py), so the next bundles upsert no Posts row."""
    posts = [f"bundles-{i}" for i in range(5)]
    stream = TestStream()
    for window in range(3):
        stream = stream.add_elements(
            [PostDelta.of(p, HOUR, f"bundles:{window}", upvotes=1 + i, events=1) for i, p in enumerate(posts)]
        )
    meter = PostsRowsPerCommit()
    with metering_commits(meter), streaming_pipeline() as pipeline:
        (
            pipeline
            | stream.advance_watermark_to_infinity()
            | WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=1000)
        )
    assert meter.commits == [5, 0, 0]
    assert [t.counts.upvotes for t in exact_counts(database, posts)] == [3 * (1 + i) for i in range(5)]


def test_a_posts_row_deleted_behind_the_sinks_back_is_written_again_and_nothing_is_lost(stack, database) -> None:
    fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=1000)
    fn.setup()
    assert bundle(fn, [PostDelta.of("deleted-by-hand", HOUR, "hand:0", upvotes=2, events=2)]) == []
    # An operator deletes the post (cascading to its deltas); the sink still believes its row exists.
    commit_mutations(database, lambda batch: batch.delete(POSTS, _keyset([post_key("deleted-by-hand")])))
    assert (
        bundle(
            fn,
            [
                PostDelta.of("deleted-by-hand", HOUR, "hand:1", upvotes=3, events=3),
                PostDelta.of("never-deleted", HOUR, "hand:1", upvotes=1, events=1),
            ],
        )
        == []
    )
    assert [t.counts.upvotes for t in exact_counts(database, ["deleted-by-hand", "never-deleted"])] == [3, 1]
    assert fn._known_posts.among(["deleted-by-hand", "never-deleted"]) == {"deleted-by-hand", "never-deleted"}


def test_a_sink_that_does_not_know_a_post_reads_it_and_writes_no_parent_that_exists(database) -> None:
    """A new process (a restart), or the other sink's post: found by the read, not written."""
    write_deltas(database, [PostDelta.of(p, HOUR, "found:0", upvotes=2, events=2) for p in ("found-0", "found-1")])
    meter = PostsRowsPerCommit()
    known = KnownPosts()
    with metering_commits(meter):
        write_deltas(
            database, [PostDelta.of(p, HOUR, "found:1", upvotes=1, events=1) for p in ("found-0", "new-0")], known
        )
        apply_vote_states(
            database,
            {
                PostUser(p, "voter-0"): LatestVote(UP, HOUR * 1_000_000, "v", HOUR, 1, True)
                for p in ("found-1", "new-1")
            },
            known=known,
        )
    assert meter.commits == [1, 1]  # new-0, then new-1: each upserted by its key
    assert known.among(["found-0", "found-1", "new-0", "new-1"]) == {"found-0", "found-1", "new-0", "new-1"}
    assert [t.counts.upvotes for t in exact_counts(database, ["found-0", "found-1", "new-0", "new-1"])] == [3, 3, 1, 1]


def _keyset(keys: list[tuple]):
    from google.cloud import spanner

    return spanner.KeySet(keys=[list(k) for k in keys])
