"""Certified without a fold (issue 44, item 8), on the Spanner emulator: a burst that lands in commits
listing fewer posts than they raise, and ordinary vote-state traffic, on a database never folded.
Every ranking (all time, hot, the last 24 h) must be certified and right, by reading the commits its
bounds leave open (spanner_reads/fresh_side.py); a read without that budget (`resolve_posts=0`,
what main did before) is not certified, and says so."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS
from schemas.records import PostDelta, PostUser
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.fresh_side import commits_to_read
from spanner_reads.fresh_top import fresh_top
from spanner_reads.trending import hot_top, window_top
from spanner_store.database import RetryPolicy, open_database, run_with_retries
from spanner_writes.deltas import write_new_deltas
from spanner_writes.votes import apply_vote_states
from tests.support.resources import new_resources
from tests.support.trending_ledger import (
    VoteLedger,
    assert_hot_answer,
    assert_window_answer,
    brute_hot,
    brute_window,
    window_of,
)
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

H = DEFAULT_HALF_LIFE_HOURS
NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)


# --- which commits to read: pure ---------------------------------------------------------------


def test_commits_to_read_takes_the_fewest_largest_bounds_that_leave_the_rest_within_room() -> None:
    bounds = [("a", 5.0), ("b", 1.0), ("c", 3.0), ("d", 1.0)]
    assert commits_to_read(bounds, 10.0, strict=False) == []  # 10 <= 10
    assert commits_to_read(bounds, 10.0, strict=True) == ["a"]  # 5 < 10
    assert commits_to_read(bounds, 2.0, strict=False) == ["a", "c"]  # 1 + 1 <= 2
    assert commits_to_read(bounds, 2.0, strict=True) == ["a", "c", "d"]  # 1 < 2
    assert commits_to_read(bounds, -1.0, strict=False) == ["a", "c", "d", "b"]  # no room: all of them
    # A row that bounds nothing (from before the bounds) is always read.
    assert commits_to_read([("old", float("inf")), ("x", 1.0)], 100.0, strict=True) == ["old"]


# --- on the emulator ---------------------------------------------------------------------------


@pytest.fixture
def never_folded(emulator_env):
    resources = new_resources("cwf")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    return open_database(resources.project, resources.instance, resources.database)


def test_a_burst_in_commits_that_list_fewer_posts_than_they_raise_is_certified_and_right_without_a_fold(
    never_folded,
) -> None:
    """Item 8's check, smaller: a burst over 61 posts and about 60 event hours in two commits, each
    raising more posts than it lists. Most posts have big old sums (listed first); the true hot
    first is a post with 500 upvotes an hour ago, which its commit does not list. Without reading
    the commits, neither trending ranking is certified, and the hot order shown misses the true
    first; reading them, every ranking is certified and right."""
    database, rng, ledger = never_folded, random.Random(44), VoteLedger()
    rows: list[PostDelta] = []
    for number in range(60):
        post = f"burst-{number:03}"
        for hour in rng.sample(range(48, 96), 8):  # old votes: big all-time sums, little heat left
            rows.append(
                PostDelta.of(
                    post, NOW_HOUR - 3600 * hour, f"burst:{number}:{hour}", upvotes=rng.randint(300, 600), events=1
                )
            )
        if number % 5 == 0:  # a few posts with votes in the last 24 hours as well
            rows.append(
                PostDelta.of(
                    post,
                    NOW_HOUR - 3600 * rng.randint(0, 23),
                    f"burst:{number}:recent",
                    upvotes=rng.randint(20, 200),
                    events=1,
                )
            )
    rows.append(PostDelta.of("viral-now", NOW_HOUR - 3600, "burst:viral", upvotes=500, events=500))
    rng.shuffle(rows)
    for commit in (rows[: len(rows) // 2], rows[len(rows) // 2 :]):
        run_with_retries(lambda: write_new_deltas(database, commit), PATIENT)  # called at once
        ledger.add_deltas(commit)

    truth = brute_hot(ledger, H, datetime.now(timezone.utc))
    assert truth[0].post_id == "viral-now"
    unresolved = hot_top(database, 5, resolve_posts=0)
    assert not unresolved.exact and "viral-now" not in [p.totals.post_id for p in unresolved.posts]
    assert not window_top(database, 5, hours=24, resolve_posts=0).exact

    hot = hot_top(database, 5)
    assert hot.exact and hot.commits_read >= 1 and hot.folded_through is None
    assert [p.totals.post_id for p in hot.posts] == [s.post_id for s in brute_hot(ledger, H, hot.as_of)[:5]]
    assert_hot_answer(hot, ledger, H, 5, "the burst, hot")
    last = window_top(database, 5, hours=24)
    first, final = window_of(last.as_of, 24)
    assert last.exact and last.posts[0].totals.post_id == "viral-now"
    assert [p.totals.post_id for p in last.posts] == [p for p, _ in brute_window(ledger, first, final)[:5]]
    assert_window_answer(last, ledger, 5, first, final, "the burst, last 24 h")
    top = fresh_top(database, 5)
    totals = ledger.totals()
    assert (
        top.exact
        and [p.counts.upvotes for p in top.posts] == sorted((c.upvotes for c in totals.values()), reverse=True)[:5]
    )


def test_vote_state_traffic_in_many_commits_is_certified_in_every_ranking_without_a_fold(never_folded) -> None:
    """Item 8's second check: vote states of 40 users over 60 posts (flips and retractions) in 17
    transactions, each over more posts than its candidate row lists, on a database never folded.
    The all-time top said "NOT certified" before; now every ranking is certified and right."""
    database, rng, ledger = never_folded, random.Random(8), VoteLedger()
    posts = [f"state-{i:02}" for i in range(60)]
    times = iter(rng.sample(range(1, 1_000_000), 5_000))
    for _ in range(17):
        batch: dict[PostUser, LatestVote] = {}
        for _ in range(rng.randint(40, 80)):
            key = PostUser(rng.choice(posts), f"user-{rng.randrange(40)}")
            vote = rng.choice([UP, UP, UP, DOWN, NONE])
            batch[key] = LatestVote(vote, next(times), "", NOW_HOUR - 3600 * rng.randint(0, 30), 1, vote != NONE)
        run_with_retries(lambda: apply_vote_states(database, batch), PATIENT)  # called at once
        for key, state in batch.items():
            ledger.add_state(key.post_id, key.user_id, state.vote, state.at_us, state.event_hour)

    totals = ledger.totals()
    for k in (3, 10):
        top = fresh_top(database, k)
        assert top.exact, (k, top.bound)
        assert [p.counts.upvotes for p in top.posts] == sorted((c.upvotes for c in totals.values()), reverse=True)[:k]
        hot = hot_top(database, k)
        assert hot.exact
        assert_hot_answer(hot, ledger, H, k, f"vote states, hot, K={k}")
        last = window_top(database, k, hours=24)
        assert last.exact
        assert_window_answer(last, ledger, k, *window_of(last.as_of, 24), f"vote states, last 24 h, K={k}")
    assert not fresh_top(database, 10, resolve_posts=0).exact  # what it answered before
