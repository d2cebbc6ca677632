"""Applying vote states to Spanner (spanner_writes/votes.py, transforms/vote_state_sink.py) on the
emulator, at every crash point the design names, with injected faults the emulator never produces.

The crash points of one vote state, from the message to the count (docs/guarantees.md):

1. before its window fires (a stream stopped or killed): the drain fires it (test_vote_flips_stream);
2. in the sink's transaction, before the commit (an abort on a read or at the commit, an error,
   a crash): nothing is visible, and the retry or replay applies it;
3. after the commit, the answer lost (an ambiguous commit), or the batch replayed after a success
   (a retried bundle, a redelivered message): the retry finds it applied and writes nothing;
4. between the state's row and its delta rows: none, they are one commit (a write that fails in
   between leaves neither);
5. two writers with the same user at once: serialised, the second reads what the first wrote;
6. a batch that can never be applied: dead-lettered whole, and replayed through the same path.
"""

from __future__ import annotations

import threading
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import Mutation

from schemas.counters import Counts
from schemas.records import FailedVoteStates, PostUser
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.my_votes import vote_of
from spanner_reads.reads import exact_counts
from spanner_store.database import RetryPolicy, commit_mutations, run_with_retries
from spanner_store.tables import post_key
from spanner_writes import votes as votes_module
from spanner_writes.deltas import MUTATIONS_PER_DELTA
from spanner_writes.known_posts import KnownPosts
from spanner_writes.votes import apply_vote_states, batch_cost, changes_cost
from tests.support.faults import RETRYABLE_ERRORS, FlakyDatabase, dead_letters, inject
from transforms import vote_state_sink
from transforms.parse_and_sum import vote_shard
from transforms.vote_state_sink import ApplyVoteStates, ApplyVoteStatesFn
from transforms.vote_states import WindowAndMergeVoteStates

HOUR = 1_795_312_800
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)


def state(vote: str, at_us: int, event_id: str = "") -> LatestVote:
    return LatestVote(vote, at_us, event_id, HOUR, 1, vote != NONE)


def counts(database, post_id: str) -> Counts:
    return exact_counts(database, [post_id])[0].counts


def vote_now(database, post_id: str, user_id: str) -> str | None:
    """The user's stored vote on the post; None: none stored."""
    found = vote_of(database, post_id, user_id)
    return None if found is None else found.vote


def apply(database, states: dict[PostUser, LatestVote]):
    return run_with_retries(lambda: apply_vote_states(database, states), PATIENT)


def test_a_batch_applied_twice_counts_once(database) -> None:
    batch = {PostUser("twice", f"u{i}"): state(UP if i % 3 else DOWN, 10, f"e{i}") for i in range(30)}
    first, second = apply(database, batch), apply(database, batch)
    assert (first.applied, first.superseded) == (30, 0) and (second.applied, second.superseded, second.rows) == (
        0,
        30,
        [],
    )
    assert counts(database, "twice") == Counts(upvotes=20, downvotes=10)


def test_flips_move_one_vote_and_an_older_state_arriving_late_changes_nothing(database) -> None:
    user = PostUser("flips", "u1")
    for vote, at_us in ((UP, 10), (DOWN, 20), (NONE, 30), (UP, 40)):
        apply(database, {user: state(vote, at_us)})
    assert counts(database, "flips") == Counts(upvotes=1)
    apply(database, {user: state(DOWN, 35)})  # older than the stored up@40
    assert counts(database, "flips") == Counts(upvotes=1)
    assert vote_now(database, "flips", "u1") == UP


@pytest.mark.parametrize("fault", ["abort_read", "abort_commit", "ambiguous_commit"])
def test_faults_in_the_transaction_never_lose_or_double_a_state(database, fault: str) -> None:
    """Crash points 2 and 3: aborted before its commit (retried), or committed with the answer lost."""
    rate: dict[str, Any] = {fault: 0.5}  # one of FlakyDatabase's rates, by its keyword
    flaky = FlakyDatabase(database, seed=3, **rate)
    post = f"faults-{fault}"
    expected = Counts()
    for round_ in range(8):
        batch = {
            PostUser(post, f"u{i}"): state((UP, DOWN, NONE)[(i + round_) % 3], 100 + round_, "e") for i in range(12)
        }
        apply(flaky, batch)
    # Every user's latest state is the last round's.
    last = [(UP, DOWN, NONE)[(i + 7) % 3] for i in range(12)]
    expected = Counts(upvotes=last.count(UP), downvotes=last.count(DOWN))
    assert counts(database, post) == expected
    injected = {
        "abort_read": flaky.injected.read_aborts,
        "abort_commit": flaky.injected.commit_aborts,
        "ambiguous_commit": flaky.injected.ambiguous,
    }[fault]
    assert injected > 0


def test_a_state_and_its_delta_are_one_commit(database, monkeypatch) -> None:
    """Crash point 4: a failure after the state's row is written and before its delta rows leaves neither."""

    def delta_writes_fail(transaction, deltas, parents_present, user_ids=None):
        raise exceptions.InternalServerError("injected between the Votes rows and the delta rows")

    monkeypatch.setattr(votes_module, "add_delta_writes", delta_writes_fail)
    with pytest.raises(exceptions.InternalServerError):
        apply_vote_states(database, {PostUser("together", "u1"): state(UP, 1)})
    assert vote_of(database, "together", "u1") is None and counts(database, "together") == Counts()
    monkeypatch.undo()
    apply(database, {PostUser("together", "u1"): state(UP, 1)})
    assert vote_now(database, "together", "u1") == UP and counts(database, "together") == Counts(upvotes=1)


def test_a_batch_whose_stored_votes_are_in_many_hours_is_split_within_the_budget(database) -> None:
    """The planner cannot know the stored states' hours before the read: a batch whose retractions
    fall in more hours than its budget has room for is applied in halves, each within it."""
    users = [PostUser("many-hours", f"u{i}") for i in range(40)]
    for i, user in enumerate(users):  # each user's vote in an hour of its own
        apply(database, {user: LatestVote(UP, i, "", HOUR - 3600 * i, 1, True)})
    budget = batch_cost([(user, state(NONE, 100)) for user in users]) + 5 * MUTATIONS_PER_DELTA
    flaky = FlakyDatabase(database)  # passes everything through; counts the transactions
    changes = run_with_retries(lambda: apply_vote_states(flaky, {u: state(NONE, 100) for u in users}, budget), PATIENT)
    assert changes.applied == 40 and counts(database, "many-hours") == Counts()
    assert flaky.injected.transactions > 1  # split: one transaction could not hold 40 hours' delta rows
    assert changes_cost(changes) > budget


class WritesRecorded:
    """The real database; records the tables each read-write transaction writes with insert_or_update."""

    def __init__(self, database) -> None:
        self._database = database
        self.upserted: list[list[str]] = []

    def __getattr__(self, name):
        return getattr(self._database, name)

    def run_in_transaction(self, work, *args, **kwargs):
        def recording(transaction, *a, **kw):
            result = work(transaction, *a, **kw)  # its mutations, as the commit will send them
            self.upserted.append(
                [
                    Mutation.pb(m).insert_or_update.table
                    for m in transaction._mutations
                    if Mutation.pb(m).WhichOneof("operation") == "insert_or_update"
                ]
            )
            return result

        return self._database.run_in_transaction(recording, *args, **kwargs)


def test_a_hot_posts_row_is_upserted_once_and_a_deleted_one_is_made_again(database) -> None:
    """The sink's transactions do not write (and lock) a hot post's Posts row each time: a post whose
    row a committed transaction made sure of is known (KnownPosts). A row deleted behind its back
    (an operator) fails the insert of its deltas, and the transaction runs again upserting it."""
    recorded, known = WritesRecorded(database), KnownPosts()
    apply_vote_states(recorded, {PostUser("known", "u1"): state(UP, 1)}, known=known)
    apply_vote_states(recorded, {PostUser("known", "u2"): state(UP, 2)}, known=known)
    assert recorded.upserted == [["Votes", "Posts"], ["Votes"]]
    assert counts(database, "known") == Counts(upvotes=2)

    commit_mutations(database, lambda batch: batch.delete("Posts", spanner.KeySet(keys=[list(post_key("known"))])))
    changes = apply_vote_states(recorded, {PostUser("known", "u3"): state(DOWN, 3)}, known=known)
    assert changes.applied == 1 and recorded.upserted[-2:] == [["Votes"], ["Votes", "Posts"]]
    assert counts(database, "known") == Counts(downvotes=1)  # the deleted row's deltas went with it


def test_two_writers_with_the_same_users_at_once_end_at_the_latest(database) -> None:
    """Crash point 5, and two bundles carrying the same user's events at once: two threads apply
    interleaved flips of the same users; the emulator aborts one of two concurrent transactions."""
    users = [PostUser("concurrent", f"u{i}") for i in range(40)]
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for step in range(6):
                at_us = 2 * step + offset
                apply(
                    database,
                    {user: state((UP, DOWN, NONE)[(at_us + i) % 3], at_us, "w") for i, user in enumerate(users)},
                )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    final = [(UP, DOWN, NONE)[(11 + i) % 3] for i in range(len(users))]  # at_us 11 is the latest
    assert counts(database, "concurrent") == Counts(upvotes=final.count(UP), downvotes=final.count(DOWN))
    assert [vote_now(database, u.post_id, u.user_id) for u in users] == final


def sink_refusing(stack, database, error, transactions: set[int]) -> tuple[ApplyVoteStatesFn, FlakyDatabase]:
    """The vote-state sink's DoFn on the emulator, its numbered transactions refused with `error`."""
    fn = ApplyVoteStatesFn(stack.project, stack.instance, stack.database, rows_per_commit=10)
    fn.setup()
    flaky = FlakyDatabase(database, error=error, fail_transactions=transactions)
    inject(fn, flaky)
    return fn, flaky


def dead_letters_of_bundle(fn: ApplyVoteStatesFn, states: dict[PostUser, LatestVote]) -> list[FailedVoteStates]:
    """One bundle of one pane through the sink's DoFn; returns what it dead-lettered."""
    fn.start_bundle()
    return dead_letters(list(fn.process((0, states))) + list(fn.finish_bundle()), fn.FAILED)


@pytest.mark.parametrize("name", RETRYABLE_ERRORS)
def test_an_error_a_retry_fixes_applies_every_state_and_dead_letters_none(stack, database, name) -> None:
    """RESOURCE_EXHAUSTED, a reset stream, CANCELLED or a lost session on the first of three
    transactions: it is retried, every state applied once."""
    post = f"retried-{name.lower()}"
    fn, flaky = sink_refusing(stack, database, RETRYABLE_ERRORS[name], {1})
    states = {PostUser(post, f"u{i}"): state(UP if i % 3 else DOWN, 10, f"e{i}") for i in range(30)}
    assert dead_letters_of_bundle(fn, states) == []
    assert flaky.injected.refused == 1
    assert counts(database, post) == Counts(upvotes=20, downvotes=10)


def test_a_permanent_error_dead_letters_its_batch_only(stack, database) -> None:
    fn, flaky = sink_refusing(stack, database, exceptions.InvalidArgument, {1})
    states = {PostUser("permanent", f"u{i:02}"): state(UP, 10, f"e{i}") for i in range(30)}
    failed = dead_letters_of_bundle(fn, states)
    assert [len(f.states) for f in failed] == [10] and failed[0].error.startswith("spanner_apply_failed: 400 injected")
    assert flaky.injected.transactions == 3  # not retried
    assert counts(database, "permanent") == Counts(upvotes=20)
    assert all(vote_of(database, "permanent", key.user_id) is None for key, _ in failed[0].states)


# --- the Beam step: TestStream through WindowAndMergeVoteStates and ApplyVoteStates --------------


def streaming_pipeline() -> TestPipeline:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return TestPipeline(options=options)


def element(post: str, user: str, vote: str, at_us: int, event_id: str = "") -> tuple[int, dict]:
    """One bundle's states as ParseVotes emits them: keyed by the user's shard."""
    return vote_shard(user), {PostUser(post, user): state(vote, at_us, event_id)}


def test_windows_merge_out_of_order_and_late_events_to_the_latest_per_user() -> None:
    """Out of order within a window (the later event first), and late across windows (an older event
    in a later window): each pane holds each user's latest of its own events; the sink applies it."""
    stream = (
        TestStream()
        .add_elements(
            [
                TimestampedValue(element("p", "a", DOWN, 20), 1),
                TimestampedValue(element("p", "a", UP, 10), 2),
                TimestampedValue(element("p", "b", UP, 5), 3),
            ]
        )
        .advance_watermark_to(10)
        .add_elements([TimestampedValue(element("p", "a", NONE, 15), 12)])  # older than the down@20 before it
        .advance_watermark_to_infinity()
    )
    with streaming_pipeline() as p:
        panes = (
            p
            | stream
            | WindowAndMergeVoteStates(window_seconds=10)
            | beam.Map(
                lambda keyed, w=beam.DoFn.WindowParam: (
                    int(w.start),
                    sorted((key.user_id, s.vote, s.at_us, s.events) for key, s in keyed[1].items()),
                )
            )
        )
        assert_that(
            panes | beam.FlatMap(lambda pane: [(pane[0], *item) for item in pane[1]]),
            equal_to([(0, "a", DOWN, 20, 2), (0, "b", UP, 5, 1), (10, "a", NONE, 15, 1)]),
        )


def test_the_stateful_step_applies_late_and_out_of_order_events_exactly(stack, database) -> None:
    """The same kind of stream through the sink, on the emulator: two bundles of one user at once
    (one window), a late older event, a later flip; the counts equal the latest states."""
    stream = (
        TestStream()
        .add_elements(
            [
                TimestampedValue(element("teststream", "a", UP, 10, "1"), 1),
                TimestampedValue(element("teststream", "b", DOWN, 10, "1"), 1),
            ]
        )
        .add_elements([TimestampedValue(element("teststream", "a", DOWN, 30, "3"), 2)])  # another bundle, same user
        .advance_watermark_to(10)
        .add_elements(
            [
                TimestampedValue(element("teststream", "a", UP, 20, "2"), 11),  # late: older than down@30
                TimestampedValue(element("teststream", "b", NONE, 40, "4"), 12),
            ]
        )
        .advance_watermark_to(20)
        .add_elements([TimestampedValue(element("teststream", "c", UP, 50, "5"), 21)])
        .advance_watermark_to_infinity()
    )
    with streaming_pipeline() as p:
        failed = (
            p
            | stream
            | WindowAndMergeVoteStates(window_seconds=10)
            | ApplyVoteStates(stack.project, stack.instance, stack.database, rows_per_commit=100)
        )
        assert_that(failed, equal_to([]))
    assert counts(database, "teststream") == Counts(upvotes=1, downvotes=1)  # a: down, b: none, c: up
    assert [vote_now(database, "teststream", u) for u in "abc"] == [DOWN, NONE, UP]


def test_a_batch_that_can_never_be_applied_is_dead_lettered_whole(stack, database, monkeypatch) -> None:
    """Crash point 6: a non-transient error sends the batch's states to the failed output, nothing applied."""

    def refused(database, states, known, suspended):
        raise exceptions.InvalidArgument("injected: this batch can never be applied")

    monkeypatch.setattr(vote_state_sink, "apply_vote_states", refused)
    stream = (
        TestStream().add_elements([TimestampedValue(element("refused", "a", UP, 1), 1)]).advance_watermark_to_infinity()
    )
    with streaming_pipeline() as p:
        failed = (
            p
            | stream
            | WindowAndMergeVoteStates(window_seconds=10)
            | ApplyVoteStates(stack.project, stack.instance, stack.database, rows_per_commit=100)
        )
        assert_that(
            failed | beam.Map(lambda f: (type(f), f.states[0][0], f.error.split(":")[0])),
            equal_to([(FailedVoteStates, PostUser("refused", "a"), "spanner_apply_failed")]),
        )
    assert vote_of(database, "refused", "a") is None
