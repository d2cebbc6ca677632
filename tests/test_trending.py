"""What is viral now (spanner_reads/trending.py) on the Spanner emulator: the hot ranking and the
top posts of the last N hours, written through the real write paths (the sink's WriteDeltaRows and
write_new_deltas, the vote-state path) and folded by the real fold, each answer checked against
the brute force of a ledger of every vote (tests/support/trending_ledger.py)."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timezone

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from schemas.counters import Counts
from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS
from schemas.records import PostDelta, PostUser
from schemas.vote_states import DOWN, NONE, UP, LatestVote
from spanner_reads.fresh_top import fresh_top
from spanner_reads.reads import exact_counts
from spanner_reads.trending import hot_top, window_top
from spanner_store.database import MUTATION_BUDGET, RetryPolicy, open_database, run_with_retries
from spanner_store.top_candidates import CANDIDATES_PER_COMMIT
from spanner_writes import folding
from spanner_writes.deltas import write_new_deltas
from spanner_writes.votes import apply_vote_states
from tests.support.fold_runs import run_fold
from tests.support.resources import new_resources
from tests.support.trending_ledger import (
    VoteLedger,
    assert_hot_answer,
    assert_window_answer,
    brute_hot,
    window_of,
)
from transforms import fold_deltas
from transforms.spanner_sink import WriteDeltaRows
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

H = DEFAULT_HALF_LIFE_HOURS
NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)


def at_hour(hours_from_now: float) -> datetime:
    """Half past an hour relative to NOW_HOUR: the moment a test pins a window read to."""
    return datetime.fromtimestamp(NOW_HOUR + 1800 + 3600 * hours_from_now, timezone.utc)


def delta(post_id: str, upvotes: int, delta_id: str, hours_ago: int = 0, downvotes: int = 0) -> PostDelta:
    return PostDelta.of(
        post_id,
        NOW_HOUR - 3600 * hours_ago,
        delta_id,
        upvotes=upvotes,
        downvotes=downvotes,
        events=abs(upvotes) + abs(downvotes),
    )


@pytest.fixture
def fresh(emulator_env):
    """A database of its own (the rankings are over every post), hot half-life 12 hours."""
    resources = new_resources("tr")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    return resources, open_database(resources.project, resources.instance, resources.database)


def write(database, ledger: VoteLedger, deltas: list[PostDelta]) -> None:
    """One commit of delta rows, as the sink writes it (write_new_deltas, retried), into the ledger."""
    run_with_retries(lambda: write_new_deltas(database, deltas), PATIENT)
    ledger.add_deltas(deltas)


def sink(resources, ledger: VoteLedger, deltas: list[PostDelta], rows_per_commit: int = 50) -> None:
    """Delta rows through the streaming pipeline's own sink transform."""
    with TestPipeline() as p:
        (
            p
            | beam.Create(deltas)
            | WriteDeltaRows(resources.project, resources.instance, resources.database, rows_per_commit=rows_per_commit)
        )
    ledger.add_deltas(deltas)


def vote(database, ledger: VoteLedger, states: list[tuple[str, str, str, int, int]]) -> None:
    """Vote states (post, user, vote, event time in µs, hours ago), one transaction of the
    vote-state path; the ledger keeps each user's latest."""
    batch = {
        PostUser(post, user): LatestVote(choice, at_us, f"e{at_us}", NOW_HOUR - 3600 * ago, 1, choice != NONE)
        for post, user, choice, at_us, ago in states
    }
    run_with_retries(lambda: apply_vote_states(database, batch), PATIENT)
    for post, user, choice, at_us, ago in states:
        ledger.add_state(post, user, choice, at_us, NOW_HOUR - 3600 * ago, f"e{at_us}")


def ids(answer) -> list[str]:
    return [p.totals.post_id for p in answer.posts]


def units(answer) -> list[float]:
    """Scores in votes of NOW_HOUR (the common decay factor taken out), rounded."""
    factor = 2.0 ** ((answer.as_of.timestamp() - NOW_HOUR) / 3600 / H)
    return [round(p.score * factor, 3) for p in answer.posts]


def test_a_post_voted_on_hours_ago_is_overtaken_by_a_newer_post_with_fewer_votes_without_a_fold(fresh) -> None:
    resources, database = fresh
    ledger = VoteLedger()
    # 100 votes 10 hours ago weigh 100 / 2^(10/12) = 56.12 votes of now.
    write(database, ledger, [delta("old", 100, "a:1", hours_ago=10), delta("other", 30, "a:2", hours_ago=2)])
    run_fold(resources)
    before = hot_top(database, 3)
    assert ids(before) == ["old", "other"] and before.exact and units(before) == [56.123, 26.727]
    folded_through = before.folded_through

    sink(resources, ledger, [delta("new", 1, f"b:{i}") for i in range(56)])  # 56 < 56.12: not yet
    top = hot_top(database, 3)
    assert ids(top) == ["old", "new", "other"] and top.exact and units(top) == [56.123, 56.0, 26.727]
    assert_hot_answer(top, ledger, H, 3, "56 new votes")

    sink(resources, ledger, [delta("new", 1, "c:0")])  # the 57th
    top = hot_top(database, 3)
    assert ids(top) == ["new", "old", "other"] and top.exact and units(top) == [57.0, 56.123, 26.727]
    assert [p.totals.counts for p in top.posts] == [Counts(upvotes=57), Counts(upvotes=100), Counts(upvotes=30)]
    assert_hot_answer(top, ledger, H, 3, "57 new votes")
    assert top.folded_through == folded_through  # no fold ran
    # The all-time top still has the old post first; the last 6 hours have only the others.
    assert [p.post_id for p in fresh_top(database, 3).posts] == ["old", "new", "other"]
    last = window_top(database, 3, hours=6, clock=lambda _: at_hour(0))
    assert [(p.totals.post_id, p.score) for p in last.posts] == [("new", 57), ("other", 30)] and last.exact

    run_fold(resources)  # and the fold's HotKey agrees
    after = hot_top(database, 3, extra=1)
    assert ids(after) == ["new", "old", "other"] and after.exact
    assert_hot_answer(after, ledger, H, 3, "folded")


def test_a_flip_moves_the_hot_order_back(fresh) -> None:
    resources, database = fresh
    ledger = VoteLedger()
    vote(
        database,
        ledger,
        [("b", f"b{i}", UP, 100 + i, 2) for i in range(4)] + [("a", f"a{i}", UP, 100 + i, 2) for i in range(3)],
    )
    assert ids(hot_top(database, 2)) == ["b", "a"]
    vote(database, ledger, [("a", "a3", UP, 200, 2), ("a", "a4", UP, 201, 2)])
    top = hot_top(database, 2)
    assert ids(top) == ["a", "b"] and top.exact
    run_fold(resources)  # the index now has a first

    # Two of a's voters flip to down, now: their upvotes leave their hour, two downvotes count now.
    vote(database, ledger, [("a", "a3", DOWN, 300, 0), ("a", "a4", DOWN, 301, 0)])
    top = hot_top(database, 2)
    assert ids(top) == ["b", "a"] and top.exact
    # b: 4 / 2^(2/12) = 3.564; a: 3 / 2^(2/12) - 2 = 0.673.
    assert units(top) == [3.564, 0.673]
    assert [p.totals.counts for p in top.posts] == [Counts(upvotes=4), Counts(upvotes=3, downvotes=2)]
    assert_hot_answer(top, ledger, H, 2, "after the flips")

    # An up of a3's older than its flip, arriving late, changes nothing; b's voters retract.
    vote(database, ledger, [("a", "a3", UP, 250, 0)] + [("b", f"b{i}", NONE, 400 + i, 0) for i in range(4)])
    top = hot_top(database, 2)
    assert ids(top) == ["a", "b"] and units(top) == [0.673, 0.0]
    assert exact_counts(database, ["a", "b"])[1].counts == Counts()
    assert_hot_answer(top, ledger, H, 2, "after the retractions")
    run_fold(resources)
    assert_hot_answer(hot_top(database, 2), ledger, H, 2, "folded")


def test_hours_sliding_out_of_the_window_change_the_last_hours_order_with_no_new_vote(fresh) -> None:
    resources, database = fresh
    ledger = VoteLedger()
    write(
        database,
        ledger,
        [
            delta("x", 10, "a:1", hours_ago=5),
            delta("x", 1, "a:2"),
            delta("y", 6, "a:3", hours_ago=1),
            delta("z", 3, "a:4", hours_ago=8),
        ],
    )
    # The 6-hour window read at each moment: (hours from now, its answer).
    expected = [
        (0, [("x", 11), ("y", 6)]),
        (1, [("y", 6), ("x", 1)]),
        (5, [("x", 1)]),
        (6, []),
        (-3, [("x", 10), ("z", 3)]),
    ]
    for folded in (False, True):
        if folded:
            run_fold(resources)
        hot_order = ids(hot_top(database, 3))
        for hours_from_now, answer in expected:
            moment = at_hour(hours_from_now)
            last = window_top(database, 3, hours=6, clock=lambda _, m=moment: m)
            assert [(p.totals.post_id, p.score) for p in last.posts] == answer, (folded, hours_from_now)
            assert last.exact and last.hours == 6
            assert_window_answer(last, ledger, 3, *window_of(moment, 6), f"folded={folded} at {hours_from_now}")
        assert ids(hot_top(database, 3)) == hot_order  # time passing re-ranks nothing by hot
    assert hot_order == ["x", "y", "z"]  # 10 / 2^(5/12) + 1 = 8.49, 6 / 2^(1/12) = 5.66, 3 / 2^(8/12) = 1.89


def test_ties_are_broken_by_post_id_in_both_rankings(fresh) -> None:
    resources, database = fresh
    ledger = VoteLedger()
    write(
        database,
        ledger,
        [
            delta("tie-c", 5, "a:1"),
            delta("tie-a", 5, "a:2"),
            delta("top", 9, "a:3"),
            delta("tie-b", 3, "a:4"),
            delta("tie-b", 2, "a:5", hours_ago=0),
        ],
    )
    for folded in (False, True):
        if folded:
            run_fold(resources)
        hot = hot_top(database, 3, extra=2)
        assert ids(hot) == ["top", "tie-a", "tie-b"] and hot.exact
        assert_hot_answer(hot, ledger, H, 3, f"folded={folded}")
        last = window_top(database, 3, hours=1, clock=lambda _: at_hour(0))
        assert ids(last) == ["top", "tie-a", "tie-b"] and last.exact
    # With exactly K + extra index rows read, the lowest one (5, tied with the K-th) may hide
    # another 5: not certified, though right, by a read that may read no further.
    hot = hot_top(database, 3, extra=1, resolve_posts=0)
    assert ids(hot) == ["top", "tie-a", "tie-b"] and not hot.exact
    # Given the budget, the read reads deeper into the index, finds it holds no other post, and
    # certifies the same answer.
    hot = hot_top(database, 3, extra=1)
    assert ids(hot) == ["top", "tie-a", "tie-b"] and hot.exact and hot.commits_read == 0


def test_answers_read_while_a_fold_races_the_stream_are_right_whenever_certified(fresh) -> None:
    """Folds of a few posts per transaction run in a thread while delta commits keep coming; after
    every commit both rankings are read, and every answer is checked against the ledger: each
    certified one must be the true top K, each one's bound must hold."""
    resources, database = fresh
    rng = random.Random(36)
    ledger = VoteLedger()
    posts = [f"race-{i:02}" for i in range(24)]
    stop, errors, folds = threading.Event(), [], []
    moment = at_hour(0)

    def folding() -> None:
        try:
            while not stop.is_set():
                folds.append(run_fold(resources, posts_per_commit=3))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=folding)
    thread.start()
    read = {"hot": [0, 0], "last": [0, 0]}  # [certified, not]
    try:
        for batch in range(400):
            if errors or (len(folds) >= 4 and batch >= 40):
                break
            # Now and then a commit of every post: more than it lists, so some answers are not
            # certified until a fold passes it.
            chosen = posts if batch % 7 == 3 else [rng.choice(posts) for _ in range(rng.randint(1, 6))]
            deltas = [
                PostDelta.of(
                    post,
                    NOW_HOUR - 3600 * rng.randint(0, 8),
                    f"race:{batch}:{i}",
                    upvotes=rng.randint(-2, 9),
                    downvotes=rng.randint(0, 2),
                    events=1,
                )
                for i, post in enumerate(chosen)
            ]
            write(database, ledger, deltas)
            k = rng.randint(1, 5)
            hot = hot_top(database, k, extra=rng.randint(0, 3))
            assert_hot_answer(hot, ledger, H, k, f"batch {batch}, {len(folds)} folds")
            read["hot"][not hot.exact] += 1
            last = window_top(database, k, hours=4, extra=rng.randint(0, 3), clock=lambda _: moment)
            assert_window_answer(last, ledger, k, *window_of(moment, 4), f"batch {batch}, {len(folds)} folds")
            read["last"][not last.exact] += 1
    finally:
        stop.set()
        thread.join(timeout=300)
    assert not errors and not thread.is_alive()
    assert len(folds) >= 4 and sum(f.posts_folded for f in folds) > 0, folds
    assert read["hot"][0] > 0 and read["last"][0] > 0, read  # certified answers were read mid-race
    print(f"\n{len(folds)} folds raced {sum(read['hot'])} commits; certified hot {read['hot']}, last {read['last']}")

    run_fold(resources)
    totals = ledger.totals()
    assert {t.post_id: t.counts for t in exact_counts(database, totals)} == totals
    hot = hot_top(database, 5, extra=5)
    assert hot.exact and ids(hot) == [s.post_id for s in brute_hot(ledger, H, hot.as_of)[:5]]
    assert_hot_answer(hot, ledger, H, 5, "after the race")


def test_a_commit_with_more_risers_than_it_lists_uncertifies_an_answer_a_left_out_post_could_overtake(fresh) -> None:
    resources, database = fresh
    ledger = VoteLedger()
    # Folded: base-00..base-29 with 40..69 upvotes, and a lurker with 64, all an hour ago.
    write(
        database,
        ledger,
        [delta(f"base-{i:02}", 40 + i, f"a:{i}", hours_ago=1) for i in range(30)]
        + [delta("lurker", 64, "a:lurker", hours_ago=1)],
    )
    run_fold(resources)
    risers = [delta(f"r-{i:02}", 11 + i, f"b:{i}", hours_ago=1) for i in range(CANDIDATES_PER_COMMIT)]

    # One commit of 17 posts lists the 16 biggest; the lurker's +3 is left out (RiseThreshold 3).
    write(database, ledger, risers + [delta("lurker", 3, "b:lurker", hours_ago=1)])
    # K = 1: the read saw base-29 (69), the 5th index row (65) plus 3 is 68: no post left out can
    # reach 69: certified.
    top = hot_top(database, 1, extra=4)
    assert ids(top) == ["base-29"] and top.exact
    assert_hot_answer(top, ledger, H, 1, "K=1, rise 3")
    # K = 3: the 3rd (67) does not beat 68: not certified by the bounds alone (the lurker has 67
    # indeed, and ties base-27, whom it follows by post ID).
    top = hot_top(database, 3, extra=2, resolve_posts=0)
    assert ids(top) == ["base-29", "base-28", "base-27"] and not top.exact
    assert_hot_answer(top, ledger, H, 3, "K=3, rise 3")
    # Reading the commit's 17 posts (its DeltaCommits row) puts the lurker among those considered,
    # and nothing bounds the rest: certified, and the same answer.
    top = hot_top(database, 3, extra=2)
    assert ids(top) == ["base-29", "base-28", "base-27"] and top.exact and top.commits_read == 1
    assert_hot_answer(top, ledger, H, 3, "K=3, rise 3, the commit read")

    # Another such commit: the lurker's +7 makes it first with 74, and the read cannot see it.
    write(
        database,
        ledger,
        [d._replace(delta_id=f"c:{i}") for i, d in enumerate(risers)] + [delta("lurker", 7, "c:lurker", hours_ago=1)],
    )
    truth = brute_hot(ledger, H, datetime.now(timezone.utc))
    assert [s.post_id for s in truth[:3]] == ["lurker", "base-29", "base-28"]
    top = hot_top(database, 1, extra=4, resolve_posts=0)
    assert ids(top) == ["base-29"] and not top.exact  # wrong, and says so
    factor = 2.0 ** ((top.as_of.timestamp() - NOW_HOUR) / 3600 / H)
    # The bound: the 5th index row (65) plus both commits' thresholds (3 + 7), an hour ago.
    assert top.bound * factor == pytest.approx(75 / 2 ** (1 / H), rel=1e-9)
    assert_hot_answer(top, ledger, H, 1, "K=1, rise 3 + 7")  # the bound covers the lurker's 74
    # Reading the commits that stand in the way finds the lurker: first, and certified, no fold.
    for k in (1, 3):
        top = hot_top(database, k, extra=4 if k == 1 else 2)
        assert ids(top) == ["lurker", "base-29", "base-28"][:k] and top.exact and top.commits_read >= 1
        assert_hot_answer(top, ledger, H, k, f"K={k}, the commits read")
    # The last hours read deeper instead: four times as many rows of each hour holds every post.
    last = window_top(database, 3, hours=2, extra=2, clock=lambda _: at_hour(0), resolve_posts=0)
    assert [(p.totals.post_id, p.score) for p in last.posts] == [
        ("lurker", 74),
        ("base-29", 69),
        ("base-28", 68),
    ] and last.exact
    assert_window_answer(last, ledger, 3, *window_of(at_hour(0), 2), "last 2 hours")

    run_fold(resources)
    for k in (1, 3):
        top = hot_top(database, k, extra=4 if k == 1 else 2)
        assert ids(top) == ["lurker", "base-29", "base-28"][:k] and top.exact and top.candidate_rows == 0
        assert_hot_answer(top, ledger, H, k, f"folded, K={k}")


def test_a_post_folded_in_steps_keeps_its_hot_key_even_when_the_steps_are_cut_short(fresh, monkeypatch) -> None:
    """A post with more unfolded hours than one commit holds is folded in steps of its hourly rows
    (spanner_writes/folding.py fold_post_in_steps), each writing the key of the rows it leaves.
    Here "more than one commit" is more than 3 hours and a step holds 2."""
    resources, database = fresh
    ledger = VoteLedger()
    real_cost, real_steps = fold_deltas.fold_cost, fold_deltas.fold_post_in_steps
    monkeypatch.setattr(
        fold_deltas, "fold_cost", lambda fold: MUTATION_BUDGET + 1 if len(fold.hours) > 3 else real_cost(fold)
    )
    two_hours = folding.MUTATIONS_PER_POST + 2 * folding.MUTATIONS_PER_HOUR
    monkeypatch.setattr(
        fold_deltas,
        "fold_post_in_steps",
        lambda database_, fold, snapshot_at, _, on_retry: real_steps(database_, fold, snapshot_at, two_hours, on_retry),
    )
    spread = [delta("spread", 3 + i, f"a:{i}", hours_ago=2 * i, downvotes=i % 2) for i in range(9)]
    write(database, ledger, spread + [delta(f"other-{i}", 4 + 2 * i, f"b:{i}", hours_ago=i) for i in range(6)])
    assert run_fold(resources).posts_split == 1
    for k in (1, 4):
        top = hot_top(database, k, extra=2)
        assert top.exact
        assert_hot_answer(top, ledger, H, k, f"folded in steps, K={k}")

    # More hours, and a fold killed after its first step: the post is skipped with its hourly
    # rows ahead of its counters, and its key that of those rows.
    for i in range(8):  # a step takes whole commits: one commit an hour
        write(database, ledger, [delta("spread", 9, f"c:{i}", hours_ago=2 * i + 1)])
    real_step = folding.apply_hourly_step
    steps: list[folding.HourlyStep] = []

    def killed_after_one_step(transaction, post_hash, post_id, step):
        if steps:
            raise RuntimeError("killed between two steps")
        steps.append(step)
        return real_step(transaction, post_hash, post_id, step)

    monkeypatch.setattr(folding, "apply_hourly_step", killed_after_one_step)
    assert run_fold(resources).posts_skipped == 1 and len(steps) == 1
    for k in (1, 4):
        top = hot_top(database, k, extra=2)
        assert_hot_answer(top, ledger, H, k, f"steps cut short, K={k}")
        assert top.exact
    monkeypatch.setattr(folding, "apply_hourly_step", real_step)
    assert run_fold(resources).posts_split == 1
    top = hot_top(database, 7, extra=1)
    assert_hot_answer(top, ledger, H, 7, "completed")
    assert ids(top) == [s.post_id for s in brute_hot(ledger, H, top.as_of)] and top.exact
