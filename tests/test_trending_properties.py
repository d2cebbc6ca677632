"""The trending rankings (spanner_reads/trending.py) as properties, on the Spanner emulator: for
random votes, un-votes, flips, retractions, arrival orders and fold points (seeded, small), every
answer of `hot_top` and `window_top` read between the steps agrees with the brute force of the
ledger (tests/support/trending_ledger.py): every post it lists at its true score and counts, in
the true order; when it says `exact`, the true top K; and its bound above every post left out
that would outrank its K-th. Votes go through the real write paths: delta rows through
write_new_deltas (the sink's commit) and the sink transform WriteDeltaRows, vote states through
apply_vote_states (the vote-state sink's transaction), and the real fold at random points.

Issue 44 adds what an upgrade and its operators bring: an older fold among the actions (the
pre-trending one, which leaves HotKey as it is, or the one before issue 44, which keeps it but not
its fence; tests/support/older_folds.py), which the database makes skip every fenced post; and two
provisions at once, a recompute with a random half-life and another provision, their backfill
steps interleaved at random (tests/support/provision_races.py): every certified answer read
between their steps is still the brute force's, under the half-life it reports."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from schemas.hot_score import HotScore, hot_score
from schemas.records import PostDelta, PostUser
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.reads import exact_counts
from spanner_reads.trending import hot_top, window_top
from spanner_store.database import RetryPolicy, open_database, run_with_retries
from spanner_store.ranking_settings import read_settings
from spanner_store.top_candidates import CANDIDATES_PER_COMMIT
from spanner_writes.deltas import write_new_deltas
from spanner_writes.votes import apply_vote_states
from tests.support.fold_runs import run_fold
from tests.support.older_folds import older_fold
from tests.support.provision_races import race
from tests.support.resources import new_resources
from tests.support.trending_ledger import (
    VoteLedger,
    assert_hot_answer,
    assert_window_answer,
    brute_hot,
    hot_values,
    keys_and_hours,
    unfenced,
    window_of,
)
from transforms.spanner_sink import WriteDeltaRows
from upvotes.operations import hot_backfill
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)
SPAN_HOURS = 30  # votes fall in the last 30 event hours
STEPS = 16
# (seed, half-life): the default, a fast decay, a half-life that divides no hour count.
CASES = [(1, 12.0), (2, 1.0), (3, 5.5), (4, 12.0)]
HALF_LIVES = (1.0, 5.5, 12.0)  # what a racing recompute records
RACE_PAGE = 5  # posts per backfill page while provisions race: a few pages, each a step


def moment(hours_from_now: int) -> datetime:
    return datetime.fromtimestamp(NOW_HOUR + 1800 + 3600 * hours_from_now, timezone.utc)


class Run:
    """One seed's database, ledger and random choices."""

    def __init__(self, seed: int, half_life: float, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.rng = random.Random(seed)
        self.half_life = half_life
        self.resources = new_resources(f"trp{seed}")
        provision_spanner(self.resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None, hot_half_life_hours=half_life)
        self.database = open_database(self.resources.project, self.resources.instance, self.resources.database)
        self.ledger = VoteLedger()
        self.posts = [f"s{seed}-{i:02}" for i in range(self.rng.randint(18, 22))]
        self.voted_posts = self.posts[:5]
        self.users = [f"u{i}" for i in range(6)]
        self.rows = 0
        self.times = iter(self.rng.sample(range(1, 10_000), 2_000))  # distinct event times, random order
        self.answers = {"hot": [0, 0], "last": [0, 0]}  # [certified, not]

    def delta(self, post_id: str) -> PostDelta:
        self.rows += 1
        rng = self.rng
        return PostDelta.of(
            post_id,
            NOW_HOUR - 3600 * rng.randint(0, SPAN_HOURS),
            f"prop:{self.rows}",
            upvotes=rng.choice([-2, -1, 0, 1, 2, 3, 5, 8]),
            downvotes=rng.choice([-1, 0, 0, 1, 2]),
            shares=rng.randint(0, 2),
            views=rng.randint(0, 3),
            events=1,
        )

    def write_deltas(self) -> str:
        """A few rows, in a random order, cut into one to three commits."""
        rows = [self.delta(self.rng.choice(self.posts)) for _ in range(self.rng.randint(1, 8))]
        cuts = sorted(self.rng.sample(range(1, len(rows)), min(len(rows) - 1, self.rng.randint(0, 2))))
        for commit in (rows[a:b] for a, b in zip([0] + cuts, cuts + [len(rows)])):
            run_with_retries(lambda: write_new_deltas(self.database, commit), PATIENT)  # called at once
            self.ledger.add_deltas(commit)
        return f"{len(rows)} rows in {len(cuts) + 1} commits"

    def write_wide(self) -> str:
        """One commit of a recent rise for every post: more posts than a commit lists. The ones
        it leaves out rise less in upvotes, but all in the current hour, and as much as 11 in hot
        (downvotes taken back), so they may overtake the answer's K-th unseen: only the bound
        covers them."""
        listed = set(self.rng.sample(self.posts, CANDIDATES_PER_COMMIT))
        rows = []
        for post in self.posts:
            self.rows += 1
            up, down, ago = (
                (self.rng.randint(4, 9), self.rng.choice([0, 1]), self.rng.randint(0, 3))
                if post in listed
                else (self.rng.randint(1, 3), -self.rng.randint(0, 8), 0)
            )
            rows.append(
                PostDelta.of(post, NOW_HOUR - 3600 * ago, f"prop:{self.rows}", upvotes=up, downvotes=down, events=1)
            )
        run_with_retries(lambda: write_new_deltas(self.database, rows), PATIENT)
        self.ledger.add_deltas(rows)
        return f"a commit of {len(rows)} posts"

    def sink(self) -> str:
        rows = [self.delta(self.rng.choice(self.posts)) for _ in range(self.rng.randint(3, 12))]
        with TestPipeline() as p:
            (
                p
                | beam.Create(rows)
                | WriteDeltaRows(
                    self.resources.project,
                    self.resources.instance,
                    self.resources.database,
                    rows_per_commit=self.rng.randint(1, 5),
                )
            )
        self.ledger.add_deltas(rows)
        return f"{len(rows)} rows through the sink"

    def vote_states(self) -> str:
        """Up, down or none by a few users on a few posts, at random event times: flips,
        retractions, and states older than the stored one arriving after it."""
        batch = {}
        for _ in range(self.rng.randint(1, 8)):
            key = PostUser(self.rng.choice(self.voted_posts), self.rng.choice(self.users))
            choice = self.rng.choice([UP, UP, DOWN, NONE])
            batch[key] = LatestVote(
                choice, next(self.times), "", NOW_HOUR - 3600 * self.rng.randint(0, SPAN_HOURS), 1, choice != NONE
            )
        run_with_retries(lambda: apply_vote_states(self.database, batch), PATIENT)
        for key, state in batch.items():
            self.ledger.add_state(key.post_id, key.user_id, state.vote, state.at_us, state.event_hour)
        return f"{len(batch)} vote states"

    def fold(self) -> str:
        outcome = run_fold(self.resources, posts_per_commit=self.rng.choice([2, 500]))
        return f"a fold of {outcome.posts_folded} posts"

    def older_fold(self) -> str:
        """A fold of an earlier version: it skips every post voted on since it was last folded
        (all fenced, rows of this version); its run is the cursor the reads start from."""
        skipped = older_fold(self.database, writes_hot_key=self.rng.random() < 0.5)
        return f"an older fold that skipped {len(skipped)} posts"

    def race_provisions(self) -> str:
        """`provision --recompute-hot` with a random half-life (A) and another provision (B, a
        recompute or not, with another random one), their steps in a random order."""
        a, b = self.rng.choice(HALF_LIVES), self.rng.choice(HALF_LIVES)
        b_recomputes = self.rng.random() < 0.5
        script = "".join(self.rng.choice("AB") for _ in range(self.rng.randint(2, 12)))
        self.monkeypatch.setattr(hot_backfill, "PAGE", RACE_PAGE)
        race(
            self.monkeypatch,
            {
                "A": lambda: hot_backfill.ensure_hot_ranking(self.database, a, lambda _: None, recompute=True),
                "B": lambda: hot_backfill.ensure_hot_ranking(self.database, b, lambda _: None, recompute=b_recomputes),
            },
            script,
            self.check_certified,
        )
        with self.database.snapshot() as snapshot:
            settings = read_settings(snapshot)
        assert settings.backfilled and settings.half_life_hours is not None, settings
        self.half_life = settings.half_life_hours
        return f"provisions racing ({a:g} h recomputed, {b:g} h{' recomputed' if b_recomputes else ''}, {script})"

    def check_certified(self, step: str) -> None:
        """Between two racing provisions' steps: a certified hot answer is the brute force's under
        the half-life it read (an answer mid-backfill is not certified, nor bounded). Its K is
        fixed: the steps' order depends on the threads', and the seed's choices must not."""
        hot = hot_top(self.database, 3, extra=2)
        if hot.exact:
            assert_hot_answer(hot, self.ledger, hot.half_life_hours, 3, step)

    def check(self, step: str) -> None:
        rng = self.rng
        k = rng.randint(1, 5)
        hot = hot_top(self.database, k, extra=rng.randint(0, 3))
        assert hot.half_life_hours == self.half_life
        assert_hot_answer(hot, self.ledger, self.half_life, k, step)
        self.answers["hot"][not hot.exact] += 1
        # A random window, and the current hour alone (where a wide commit's left-out rows land).
        for at, hours, window_k in (
            (moment(rng.choice([0, 0, 3, -6])), rng.choice([1, 3, 8, 24]), k),
            (moment(0), 1, 5),
        ):
            last = window_top(self.database, window_k, hours=hours, extra=rng.randint(0, 3), clock=lambda _, m=at: m)
            assert_window_answer(
                last, self.ledger, window_k, *window_of(at, hours), f"{step}, last {hours} h, K={window_k}"
            )
            self.answers["last"][not last.exact] += 1


@pytest.mark.parametrize("seed, half_life", CASES)
def test_every_answer_agrees_with_the_ledger_and_every_certified_one_is_exact(
    emulator_env, monkeypatch, seed: int, half_life: float
) -> None:
    run = Run(seed, half_life, monkeypatch)
    actions = [run.write_deltas] * 5 + [run.vote_states] * 3 + [run.write_wide] * 2 + [run.fold] * 2 + [run.older_fold]
    # Once each at least: the sink transform, an older fold, provisions racing.
    once = dict(zip(run.rng.sample(range(STEPS), 3), (run.sink, run.older_fold, run.race_provisions)))
    for step in range(STEPS):
        action = once.get(step) or run.rng.choice(actions)
        run.check(f"seed {seed}, step {step}: after {action()}")

    run.fold()
    run.check(f"seed {seed}: folded")
    totals = run.ledger.totals()
    assert {t.post_id: t.counts for t in exact_counts(run.database, totals)} == totals
    # Folded, every post's HotKey is the score of its hourly rows, and of the ledger, and fenced.
    half_life = run.half_life
    keys, hours = keys_and_hours(run.database)
    truth = hot_values(run.ledger, half_life, moment(0))
    for post_id, key in keys.items():
        assert key == hot_score(hours.get(post_id, {}).items(), half_life).key
        score = HotScore.from_key(key).at(moment(0), half_life)
        assert score == pytest.approx(truth[post_id].score, rel=1e-9, abs=0), post_id
    assert unfenced(run.database) == {}
    # With the index read whole, the answer is certified and is the brute force's.
    everything = hot_top(run.database, 3, extra=len(run.posts))
    assert everything.exact and [p.totals.post_id for p in everything.posts] == [
        s.post_id for s in brute_hot(run.ledger, half_life, everything.as_of)[:3]
    ]
    assert run.answers["hot"][0] > 0 and run.answers["last"][0] > 0, run.answers
    print(f"\nseed {seed}: answers certified/not: {run.answers}")
