"""One vote per user, the pure rules (schemas/vote_states.py) and their plan (spanner_writes/votes.py
plan_vote_changes, plan_batches), without an emulator.

The property test runs the whole path in memory: random events (duplicates, flips, late and
out-of-order ones) shuffled, cut into bundles (ParseVotes' per-bundle merge), grouped into windows
(MergeLatestVotes), applied pane by pane against a stored state as the sink's transactions do
(plan_vote_changes), with some panes applied twice (a redelivery, a replayed bundle, an ambiguous
commit retried). The counts moved must always equal the number of users in each latest state.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.contract import EventTimePolicy, parse_vote
from schemas.counters import COUNTER_OF_VOTE, Counts, total
from schemas.records import PostUser, VoteState
from schemas.vote_states import (
    DOWN,
    NONE,
    UP,
    VOTES,
    Erasure,
    LatestVote,
    counted,
    erased,
    keep_latest,
    later,
    order_of,
)
from schemas.voter_sketch import estimate, union_of
from spanner_store.database import MUTATION_BUDGET
from spanner_store.tables import timestamp_micros, vote_key
from spanner_store.vote_rows import StoredVote
from spanner_writes.votes import batch_cost, plan_batches, plan_vote_changes
from tests.support.examples import examples
from transforms.vote_states import MergeLatestVotes

HOUR = 1_795_312_800


def state(vote: str, at_us: int, event_id: str = "", hour: int = HOUR) -> LatestVote:
    return LatestVote(vote, at_us, event_id, hour, 1, vote != NONE)


# --- the order and the change -------------------------------------------------------------


def test_the_latest_is_the_highest_time_then_event_id_then_vote() -> None:
    assert later(state(UP, 2), state(DOWN, 1)).vote == UP
    assert later(state(DOWN, 1), state(UP, 2)).vote == UP
    assert later(state(UP, 1, "b"), state(NONE, 1, "a")).vote == UP
    # The same time and event_id with two votes (a publisher's bug): a fixed winner either way.
    assert later(state(UP, 1, "a"), state(DOWN, 1, "a")) == later(state(DOWN, 1, "a"), state(UP, 1, "a"))


def test_a_merged_state_stands_for_every_event_and_remembers_a_vote() -> None:
    merged = later(later(state(UP, 1), state(NONE, 3)), state(UP, 2))
    assert (merged.vote, merged.at_us, merged.events, merged.voted) == (NONE, 3, 3, True)


@pytest.mark.parametrize(
    "vote,counts",
    [
        (None, Counts()),
        (NONE, Counts()),
        (UP, Counts(upvotes=1)),
        (DOWN, Counts(downvotes=1)),
    ],
)
def test_a_user_counts_one_on_the_counter_of_their_vote(vote, counts) -> None:
    assert counted(vote) == counts


@pytest.mark.parametrize(
    "old,new,moved",
    [
        (UP, DOWN, Counts(upvotes=-1, downvotes=1)),
        (DOWN, UP, Counts(upvotes=1, downvotes=-1)),
        (UP, NONE, Counts(upvotes=-1)),
        (NONE, DOWN, Counts(downvotes=1)),
        (UP, UP, Counts()),
    ],
)
def test_a_flip_in_one_hour_moves_one_vote_from_the_old_counter_to_the_new(old, new, moved) -> None:
    key = PostUser("p", "u")
    changes = plan_vote_changes({key: StoredVote("p", "u", old, 1, "", HOUR)}, {key: state(new, 2)}, "@vote/x")
    assert total(d.sums.counts for d in changes.deltas) == moved
    assert all(d.event_hour == HOUR for d in changes.deltas)


def test_a_flip_takes_the_old_vote_out_of_its_own_hour() -> None:
    """So that hourly counts are the users whose latest state is in each hour, whatever the arrival order."""
    key = PostUser("p", "u")
    changes = plan_vote_changes(
        {key: StoredVote("p", "u", UP, 1, "", HOUR - 3600)}, {key: state(DOWN, 2, hour=HOUR)}, "@vote/x"
    )
    assert {d.event_hour: d.sums.counts for d in changes.deltas} == {
        HOUR - 3600: Counts(upvotes=-1),
        HOUR: Counts(downvotes=1),
    }


def test_an_erased_state_adds_no_voter_and_a_state_later_than_the_erasure_keeps_its_own() -> None:
    """A merged state no later than its user's erasure stands only for events at or before it (it
    is the latest of them), all forgotten: it becomes the request's "none" and adds no unique voter
    (issue 44, item 6). A state later than the erasure is left whole: its `voted` may come from an
    event after the erasure, which the merged state cannot tell apart from one before it."""
    key, request = PostUser("p", "u"), Erasure(1_000, "@forget/r", HOUR)
    merged = later(state(UP, 10, "up"), state(NONE, 20, "taken-back"))  # voted, latest "none"
    forgotten = erased(merged, request)
    assert (forgotten.vote, forgotten.at_us, forgotten.events, forgotten.voted) == (NONE, 1_000, 2, False)
    assert plan_vote_changes({}, {key: forgotten}, "@vote/x").deltas == []  # no count moved, no sketch

    after = later(state(UP, 10, "up"), state(NONE, 2_000, "taken-back"))
    assert erased(after, request) == after and after.voted
    (delta,) = plan_vote_changes({}, {key: erased(after, request)}, "@vote/x").deltas
    assert delta.sums.counts == Counts() and estimate(delta.sums.voters) == 1


@given(
    st.lists(
        st.tuples(st.sampled_from(VOTES), st.integers(0, 3), st.sampled_from(["", "a", "b"])), min_size=3, max_size=3
    )
)
def test_later_is_commutative_and_associative(triple) -> None:
    a, b, c = (state(*fields) for fields in triple)
    assert later(a, b) == later(b, a)
    assert later(later(a, b), c) == later(a, later(b, c))


# --- the contract's vote time -----------------------------------------------------------------


def test_a_vote_time_far_ahead_of_the_clock_is_the_publish_time() -> None:
    """The clock-skew policy of delta events: a client clock far ahead must not win every later vote."""
    published = HOUR + 100.5
    ahead = parse_vote(
        b'{"post_id":"p","user_id":"u","vote":"up","event_time":"2030-01-01T00:00:00Z"}',
        {},
        published,
        EventTimePolicy(max_clock_skew_s=60),
    )
    assert isinstance(ahead, VoteState) and ahead.at_us == int(published * 1e6) and ahead.event_hour == HOUR
    # Within the skew, the claimed time to the microsecond.
    near = parse_vote(
        b'{"post_id":"p","user_id":"u","vote":"up","event_time":"2026-11-22T02:01:40.000001Z"}',
        {},
        published,
        EventTimePolicy(max_clock_skew_s=60),
    )
    assert isinstance(near, VoteState) and near.at_us == (HOUR + 100) * 10**6 + 1


# --- the whole path, in memory ----------------------------------------------------------------


class MemoryVotes:
    """The Votes table and the counts per post and hour, as the sink's transactions change them
    (plan_vote_changes)."""

    def __init__(self) -> None:
        self.stored: dict[PostUser, StoredVote] = {}
        self.counts: dict[tuple[str, int], Counts] = {}
        self.voter_sketches: dict[str, list[bytes]] = {}

    def apply(self, states: dict[PostUser, LatestVote]) -> None:
        changes = plan_vote_changes({k: v for k, v in self.stored.items() if k in states}, states, "@vote/x")
        for row in changes.rows:
            _, user_id, post_id, vote, voted_at, event_id, event_hour, _ = row
            self.stored[PostUser(post_id, user_id)] = StoredVote(
                post_id, user_id, vote, timestamp_micros(voted_at), event_id, int(event_hour.timestamp())
            )
        for delta in changes.deltas:
            key = (delta.post_id, delta.event_hour)
            self.counts[key] = self.counts.get(key, Counts()).plus(delta.sums.counts)
            if delta.sums.voters is not None:
                self.voter_sketches.setdefault(delta.post_id, []).append(delta.sums.voters)

    def post_counts(self, post_id: str) -> Counts:
        return total(counts for (post, _), counts in self.counts.items() if post == post_id)


def hour_of(at_us: int) -> int:
    """The generated events' hours: each time unit is half an hour, so flips cross hours."""
    return HOUR + 3600 * (at_us // 2)


EVENT = st.tuples(
    st.sampled_from(["p1", "p2"]),
    st.sampled_from(["u1", "u2", "u3", "u4"]),
    st.sampled_from(VOTES),
    st.integers(0, 6),
    st.sampled_from(["", "e1", "e2"]),
)


@settings(max_examples=examples(300), deadline=None)
@given(events=st.lists(EVENT, max_size=40), seed=st.integers(0, 2**32))
def test_counts_equal_the_users_in_each_latest_state_whatever_the_order(events, seed) -> None:
    rng = random.Random(seed)
    # Duplicates (a republished or redelivered event), then any arrival order.
    arriving = events + [rng.choice(events) for _ in range(len(events) // 3)] if events else []
    rng.shuffle(arriving)
    # Bundles, merged by ParseVotes; windows, merged by MergeLatestVotes over bundles in any grouping.
    bundles = _cut(arriving, rng)
    merge = MergeLatestVotes()
    panes = []
    for window in _cut(bundles, rng):
        accumulators = []
        for bundle in window:
            merged: dict[PostUser, LatestVote] = {}
            for post, user, vote, at_us, event_id in bundle:
                keep_latest(merged, PostUser(post, user), state(vote, at_us, event_id, hour_of(at_us)))
            accumulators.append(merge.add_input(merge.create_accumulator(), merged))
        panes.append(merge.extract_output(merge.merge_accumulators(accumulators)))
    store = MemoryVotes()
    for pane in panes:
        store.apply(pane)
        if rng.random() < 0.3:
            store.apply(pane)  # applied again: a redelivery, a replayed bundle, a retried ambiguous commit

    latest: dict[PostUser, tuple] = {}
    for post, user, vote, at_us, event_id in events:
        key = PostUser(post, user)
        candidate = (order_of(vote, at_us, event_id), vote)
        latest[key] = max(latest.get(key, candidate), candidate)
    for post in ("p1", "p2"):
        tally = Counter(vote for (p, _), (_, vote) in latest.items() if p == post)
        expected = Counts(**{COUNTER_OF_VOTE[v]: n for v, n in tally.items() if v in COUNTER_OF_VOTE})
        assert store.post_counts(post) == expected
        voters = {user for p, user, vote, _, _ in events if p == post and vote != NONE}
        assert estimate(union_of(store.voter_sketches.get(post, ()))) == len(voters)
    hourly: dict[tuple[str, int], Counts] = {}
    for key, (order, vote) in latest.items():
        if vote != NONE:
            hour = (key.post_id, hour_of(order.at_us))
            hourly[hour] = hourly.get(hour, Counts()).plus(counted(vote))
    assert {hour: counts for hour, counts in store.counts.items() if not counts.is_zero()} == hourly
    assert {key: stored.vote for key, stored in store.stored.items()} == {
        key: vote for key, (_, vote) in latest.items()
    }


def _cut(items: list, rng: random.Random) -> list[list]:
    """`items` in order, cut at random into consecutive groups."""
    groups, current = [], []
    for item in items:
        current.append(item)
        if rng.random() < 0.3:
            groups.append(current)
            current = []
    return groups + ([current] if current else [])


def test_a_state_no_later_than_the_stored_one_writes_nothing() -> None:
    key = PostUser("p", "u")
    stored = {key: StoredVote("p", "u", UP, 5, "e", HOUR)}
    for incoming in (state(UP, 5, "e"), state(DOWN, 4, "z"), state(NONE, 5, "a")):
        changes = plan_vote_changes(stored, {key: incoming}, "@vote/x")
        assert (changes.rows, changes.deltas, changes.applied, changes.superseded) == ([], [], 0, 1)


def test_a_later_state_with_the_same_vote_moves_its_order_but_no_count() -> None:
    key = PostUser("p", "u")
    changes = plan_vote_changes({key: StoredVote("p", "u", UP, 5, "e", HOUR)}, {key: state(UP, 6, "f")}, "@vote/x")
    assert len(changes.rows) == 1 and changes.rows[0][3:6][::2] == (UP, "f")
    assert [d.sums.counts for d in changes.deltas] == [Counts()]  # only its voter, which a sketch unions


# --- planning the transactions ----------------------------------------------------------------


def test_batches_follow_the_votes_key_and_stay_within_the_budget() -> None:
    rng = random.Random(7)
    states = {
        PostUser(f"p{rng.randrange(50)}", f"u{i}"): state(UP, i, hour=HOUR + 3600 * rng.randrange(3))
        for i in range(5_000)
    }
    batches = plan_batches(states, max_rows=1_000, max_mutations=MUTATION_BUDGET)
    assert sum(len(b) for b in batches) == len(states)
    assert all(len(b) <= 1_000 and batch_cost(b.items()) <= MUTATION_BUDGET for b in batches)
    keys = [vote_key(k.post_id, k.user_id) for b in batches for k in b]
    assert keys == sorted(keys)
    small = plan_batches(states, max_rows=1_000, max_mutations=3_000)
    assert len(small) > len(batches) and all(batch_cost(b.items()) <= 3_000 for b in small)
