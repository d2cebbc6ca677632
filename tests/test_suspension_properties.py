"""Suspensions and restores (issue 46) as properties, on the Spanner emulator: random interleavings
(seeded, small) of vote states (votes, flips, retractions, older states arriving late), suspensions
(of every vote or since a time; a user in two at once; users moved whole or vote by vote), restores, erasures (`forget-user`) and folds.
After every step the exact counts of every post, its hourly counts and the three certified rankings
(`fresh_top`, `hot_top`, `window_top`) agree with a brute force over the states that count
(tests/support/trending_ledger.py: a user's latest state, unless erased, or cast while an active
suspension of the user covers it): every count equal, every listed post at its true score, and a
certified answer the true top K. Every write goes through the real paths: vote states through the
vote-state sink's transaction (apply_vote_states), the requests through their operations, the real
fold at random points."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from schemas.counters import Counts
from schemas.records import PostUser
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.hourly import hourly_counts_in
from spanner_reads.rankings.all_time import fresh_top
from spanner_reads.rankings.hot import hot_top
from spanner_reads.rankings.last_hours import window_top
from spanner_reads.reads import exact_counts
from spanner_store.database import MUTATION_BUDGET, RetryPolicy, open_database, run_with_retries
from spanner_store.suspended_users import SuspendedUsers
from spanner_store.tables import timestamp_micros
from spanner_writes.deltas import MUTATIONS_PER_PARENT
from spanner_writes.votes import apply_vote_states
from tests.support.fold_runs import run_fold
from tests.support.resources import new_resources
from tests.support.trending_ledger import (
    VoteLedger,
    assert_hot_answer,
    assert_top_answer,
    assert_window_answer,
    window_of,
)
from upvotes.operations.forget_user import forget_user
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner
from upvotes.operations.suspension_passes import PASS_COST
from upvotes.operations.suspensions import restore_users, suspend_users

NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)
SPAN_HOURS = 12
HALF_LIFE = 12.0
STEPS = 14
SEEDS = [1, 2]
# The requests' mutation budgets: the default (users moved whole), and one that fits a pass of a
# single vote and its new parent row, so a user with votes in two posts or hours moves vote by vote.
BUDGETS = [MUTATION_BUDGET, PASS_COST.one_item + MUTATIONS_PER_PARENT]


class Run:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.resources = new_resources(f"susp{seed}")
        provision_spanner(self.resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None, hot_half_life_hours=HALF_LIFE)
        self.database = open_database(self.resources.project, self.resources.instance, self.resources.database)
        self.ledger = VoteLedger()
        self.suspended = SuspendedUsers(self.database)
        self.posts = [f"q{seed}-{i}" for i in range(7)]
        self.users = [f"u{i}" for i in range(5)]
        self.times = iter(self.rng.sample(range(1, 100_000), 5_000))  # distinct event times, random order
        self.active: dict[str, tuple[list[str], datetime | None]] = {}
        self.forgotten: set[str] = set()
        self.requests = 0
        self.certified = 0

    def vote_states(self) -> str:
        batch = {}
        for _ in range(self.rng.randint(2, 10)):
            key = PostUser(self.rng.choice(self.posts), self.rng.choice(self.users))
            vote = self.rng.choice([UP, UP, UP, DOWN, NONE])
            batch[key] = LatestVote(
                vote, next(self.times), "", NOW_HOUR - 3600 * self.rng.randint(0, SPAN_HOURS), 1, vote != NONE
            )
        loaded = self.rng.choice([self.suspended, None])  # the sink's held suspensions, or each user's rows
        run_with_retries(lambda: apply_vote_states(self.database, batch, suspended=loaded), PATIENT)
        for key, state in batch.items():
            self.ledger.add_state(key.post_id, key.user_id, state.vote, state.at_us, state.event_hour)
        return f"{len(batch)} vote states"

    def suspend(self) -> str:
        self.requests += 1
        suspension_id = f"s{self.requests}"
        users = self.rng.sample(self.users, self.rng.randint(1, 3))
        since_us = self.rng.choice([None, self.rng.randint(1, 100_000)])
        since = None if since_us is None else datetime.fromtimestamp(since_us / 1e6, timezone.utc)
        result = suspend_users(
            self.database,
            suspension_id,
            users,
            "ring",
            "t&s",
            since,
            rows_per_pass=self.rng.choice([1, 3, 100]),
            max_mutations=self.rng.choice(BUDGETS),
        )
        self.ledger.suspend(suspension_id, users, since_us)
        self.active[suspension_id] = (users, since)
        return f"suspension {suspension_id} of {users} since {since_us}: {result.votes} votes moved"

    def restore(self) -> str:
        if not self.active:
            return self.suspend()
        suspension_id = self.rng.choice(sorted(self.active))
        result = restore_users(
            self.database,
            suspension_id,
            "cleared",
            "t&s",
            rows_per_pass=self.rng.choice([2, 100]),
            max_mutations=self.rng.choice(BUDGETS),
        )
        self.ledger.restore(suspension_id)
        del self.active[suspension_id]
        return f"restore of {suspension_id}: {result.votes} votes moved back"

    def forget(self) -> str:
        user = self.rng.choice(self.users)
        self.requests += 1
        result = forget_user(self.database, f"f{self.requests}", user, "erasure", "dpo")
        assert result.request.as_of is not None  # its forget time, read back
        self.ledger.forget(user, timestamp_micros(result.request.as_of), f"@forget/f{self.requests}")
        return f"forget {user}: {result.retracted} retracted"

    def fold(self) -> str:
        outcome = run_fold(self.resources, posts_per_commit=self.rng.choice([2, 500]))
        return f"a fold of {outcome.posts_folded} posts"

    def check(self, step: str) -> None:
        totals = self.ledger.totals()
        read = {t.post_id: t.counts for t in exact_counts(self.database, self.posts)}
        assert read == {post: totals.get(post, Counts()) for post in self.posts}, step
        hours = self.ledger.hours()
        with self.database.snapshot(multi_use=True) as snapshot:
            for post in self.posts:
                stored = {
                    int(h.hour.timestamp()): h.counts
                    for h in hourly_counts_in(snapshot, post)
                    if not h.counts.is_zero()
                }
                truth = {hour: Counts(**cell) for hour, cell in hours.get(post, {}).items() if any(cell.values())}
                assert stored == truth, f"{step}: hourly counts of {post}"
        k = self.rng.randint(1, 4)
        top = fresh_top(self.database, k, extra=self.rng.randint(0, 3))
        assert_top_answer(top, self.ledger, k, step)
        hot = hot_top(self.database, k, extra=self.rng.randint(0, 3))
        assert_hot_answer(hot, self.ledger, HALF_LIFE, k, step)
        at = datetime.fromtimestamp(NOW_HOUR + 1800, timezone.utc)
        hours_back = self.rng.choice([1, 3, 8])
        last = window_top(self.database, k, hours=hours_back, extra=self.rng.randint(0, 3), clock=lambda _: at)
        assert_window_answer(last, self.ledger, k, *window_of(at, hours_back), f"{step}, last {hours_back} h")
        self.certified += top.exact + hot.exact + last.exact


@pytest.mark.parametrize("seed", SEEDS)
def test_counts_hours_and_certified_tops_equal_the_brute_force_over_the_states_that_count(
    emulator_env, seed: int
) -> None:
    run = Run(seed)
    actions = [run.vote_states] * 5 + [run.suspend] * 3 + [run.restore] * 3 + [run.forget] + [run.fold]
    run.vote_states()
    run.check(f"seed {seed}: first votes")
    for step in range(STEPS):
        run.check(f"seed {seed}, step {step}: after {run.rng.choice(actions)()}")
    for suspension_id in sorted(run.active):  # every suspension lifted: as if none had been
        restore_users(run.database, suspension_id, "cleared", "t&s")
        run.ledger.restore(suspension_id)
    run.check(f"seed {seed}: every suspension restored")
    run.fold()
    run.check(f"seed {seed}: folded")
    assert run.certified > 0
