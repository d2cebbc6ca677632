"""`upvotes capacity` and its model: exact small cases, the sink's batching, the model's
delta rows against the write-amplification benchmark's simulated stream, counted exactly, and
the vote states' Votes rows, transactions and delta rows against the state sink on the emulator."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from bench.write_amplification import QUICK, group_sums, model_delta_rows, simulated_stream
from schemas.ddl import schema_model
from schemas.records import PostDelta, PostUser
from schemas.vote_states import LatestVote
from spanner_writes.deltas import (
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    plan_commits,
    write_deltas,
)
from spanner_writes.votes import MUTATIONS_PER_VOTE, apply_all_vote_states
from tests.support.fold_runs import run_fold
from upvotes.cli import main
from upvotes.commands.capacity import _sink_shape, chain_rate_from_results
from upvotes.operations.capacity_model import (
    Assumption,
    Assumptions,
    Popularity,
    Workload,
    cancel_probability,
    capacity,
    expected_groups,
    expected_touched,
    fold_rows_read,
    rows_per_sink_commit,
    split_by_hour,
    state_writes,
    stream_delta_rows,
)

ASSUMPTIONS = Assumptions(
    spanner_writes_per_node_s=Assumption(1_000, "test"),
    spanner_optimized_writes_per_node_s=Assumption(5_000, "test"),
    spanner_reads_per_node_s=Assumption(10_000, "test"),
    hot_row_transactions_per_s=Assumption(100, "test"),
    chain_events_per_core_s=Assumption(50_000, "test"),
    sink_rows_per_core_s=Assumption(10_000, "test"),
)
UNVOTE, SHARE = 0.1, 0.2


def test_cancel_probability_counts_balanced_votes_without_shares() -> None:
    assert cancel_probability(0, UNVOTE, SHARE) == 1.0
    assert cancel_probability(3, UNVOTE, SHARE) == 0.0
    assert cancel_probability(2, UNVOTE, SHARE) == pytest.approx(2 * 0.7 * 0.1)
    assert cancel_probability(4, UNVOTE, SHARE) == pytest.approx(6 * 0.7**2 * 0.1**2)


def test_expected_touched_of_uniform_popularity_is_the_occupancy_formula() -> None:
    uniform = Popularity(np.full(50, 1 / 50))
    assert expected_touched(uniform, 30) == pytest.approx(50 * (1 - (49 / 50) ** 30))
    assert expected_touched(uniform, 0) == 0.0


def test_expected_groups_equals_exact_enumeration_of_a_tiny_stream() -> None:
    """3 posts, 4 votes: every sequence of (post, kind) weighed by its probability."""
    popularity = Popularity.zipf(3, 1.1)
    kinds = ((1, 0, 1 - UNVOTE - SHARE), (-1, 0, UNVOTE), (0, 1, SHARE))
    expected = 0.0
    for posts in itertools.product(range(3), repeat=4):
        for votes in itertools.product(kinds, repeat=4):
            chance = math.prod(popularity.p[post] * kind[2] for post, kind in zip(posts, votes))
            sums: dict[int, list[int]] = {}
            for post, (up, share, _) in zip(posts, votes):
                acc = sums.setdefault(post, [0, 0])
                acc[0] += up
                acc[1] += share
            expected += chance * sum(1 for up, share in sums.values() if up or share)
    assert expected_groups(popularity, 4, UNVOTE, SHARE) == pytest.approx(expected, rel=1e-9)


def test_split_by_hour_puts_late_reports_in_the_previous_hour() -> None:
    boundary, rate, delay = 7_200, 1_000.0, 2.0
    inside = split_by_hour(boundary + 1_000, boundary + 1_010, rate, delay)
    assert inside.previous_hour == pytest.approx(0.0, abs=1e-9) and inside.own_hour == pytest.approx(10_000)
    after = split_by_hour(boundary, boundary + 10, rate, delay)
    assert after.previous_hour == pytest.approx(rate * delay * (1 - math.exp(-5)))
    straddling = split_by_hour(boundary - 5, boundary + 5, rate, delay)
    assert straddling.previous_hour == pytest.approx(rate * 5 + rate * delay * (1 - math.exp(-2.5)))
    assert sum(straddling) == pytest.approx(10_000)


def test_rows_per_sink_commit_is_the_largest_commit_plan_commits_makes() -> None:
    shape = _sink_shape()
    deltas = [PostDelta.of(f"p-{i}", 0, "w:0:0", upvotes=1, events=1) for i in range(5_000)]
    assert max(len(commit) for commit in plan_commits(deltas, shape.rows_per_commit)) == rows_per_sink_commit(shape)


def test_counters_hold_the_hottest_post_only_with_enough_shards() -> None:
    workload = Workload(votes_per_s=10_000, posts=1_000, zipf=1.1, window_s=10, count_reads_per_s=10, shards=(10, 100))
    report = capacity(workload, _sink_shape(), ASSUMPTIONS)
    design, rmw, ten, hundred = report.approaches
    hot = report.hottest_post_votes_per_s
    assert hot == pytest.approx(10_000 * Popularity.zipf(1_000, 1.1).hottest)
    assert rmw.commits == 10_000 and rmw.hot_row_writes == pytest.approx(hot) and not rmw.holds_hot_post
    assert ten.hot_row_writes == pytest.approx(hot / 10) and ten.holds_hot_post == (hot / 10 <= 100)
    assert hundred.holds_hot_post and hundred.row_reads == pytest.approx(10_000 + 10 * 100)
    assert report.shards_to_hold_hottest == math.ceil(hot / 100)
    assert design.holds_hot_post and design.rows_written < rmw.rows_written / 5
    assert design.dataflow_vcpus == pytest.approx(10_000 / 50_000 + design.rows_written / 10_000)


def test_delta_rows_fall_as_windows_grow_and_skew_rises() -> None:
    def rows(window_s: int, zipf: float) -> float:
        workload = Workload(votes_per_s=100_000, posts=100_000, zipf=zipf, window_s=window_s)
        return capacity(workload, _sink_shape(), ASSUMPTIONS).approaches[0].rows_written

    assert rows(2, 1.1) > rows(10, 1.1) > rows(60, 1.1)
    assert rows(10, 0.8) > rows(10, 1.1) > rows(10, 1.3)


# The write-amplification benchmark's stream at QUICK size (100,000 votes over 10,000 posts at
# 5,000/s: 20 s from 5 s before an hour boundary), and a smaller arrival rate so that windows
# hold fewer votes per post, as on a larger site.
SIZES = (QUICK, replace(QUICK, arrival_rate=1_000))
# The issue asks for 10%; the model lands within 1% of every count here, so a 2% bound
# catches a modelling regression the 10% one would let through.
TOLERANCE = 0.02


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"{s.arrival_rate}/s")
@pytest.mark.parametrize("zipf", (0.8, 1.1, 1.3))
def test_model_matches_the_simulated_streams_delta_rows(sizes, zipf: float) -> None:
    votes = simulated_stream(sizes, zipf)
    for window_s in (2, 10, 60):
        counted = len(group_sums(votes, window_s))
        assert model_delta_rows(sizes, window_s, zipf) == pytest.approx(counted, rel=TOLERANCE), (zipf, window_s)


def test_the_hour_split_is_modelled_not_ignored() -> None:
    """In a 20 s stream across an hour boundary the split is several percent of the rows; the
    model with the split is closer to the count than without it."""
    votes = simulated_stream(QUICK)
    counted = len(group_sums(votes, 10))
    with_split = model_delta_rows(QUICK, 10)
    workload = Workload(
        votes_per_s=QUICK.arrival_rate, posts=QUICK.amplification_posts, zipf=1.1, window_s=10, client_delay_mean_s=1e-9
    )
    from bench.write_amplification import STREAM_START

    without = stream_delta_rows(Popularity.zipf(QUICK.amplification_posts, 1.1), workload, STREAM_START, 20)
    assert abs(with_split - counted) < abs(without - counted)
    assert with_split == pytest.approx(counted, rel=0.02)


def test_chain_rate_prefers_the_batched_measurement_for_batched_input() -> None:
    results: dict[str, Any] = {
        "machine": {"date": "2026-12-01"},
        "benchmarks": {
            "transform_cost": {
                "variants": {
                    "beam_chain": {"events_per_s_per_core": 45_000.0},
                    "beam_chain_batched": {"events_per_s_per_core": 130_000.0},
                }
            }
        },
    }
    batched = chain_rate_from_results(results, True, "f.json")
    unbatched = chain_rate_from_results(results, False, "f.json")
    assert batched is not None and batched[0] == 130_000.0
    assert unbatched is not None and unbatched[0] == 45_000.0
    del results["benchmarks"]["transform_cost"]["variants"]["beam_chain_batched"]
    found = chain_rate_from_results(results, True, "f.json")
    assert found is not None
    rate, source = found
    assert rate == 45_000.0 and "conservative" in source
    assert chain_rate_from_results({}, True, "f.json") is None


def test_capacity_command_prints_json_with_its_assumptions(tmp_path, capsys) -> None:
    results = tmp_path / "latest.json"
    results.write_text(
        json.dumps(
            {
                "benchmarks": {
                    "transform_cost": {"variants": {"beam_chain_batched": {"events_per_s_per_core": 100_000.0}}}
                }
            }
        )
    )
    code = main(
        [
            "capacity",
            "--votes-per-s",
            "20000",
            "--posts",
            "5000",
            "--shards",
            "4",
            "--bench-results",
            str(results),
            "--hot-row-transactions-per-s",
            "50",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [a["approach"] for a in report["approaches"]] == [
        "this design (deltas + fold)",
        "read-modify-write",
        "sharded counters (4 shards)",
    ]
    assert report["assumptions"]["chain_events_per_core_s"]["value"] == 100_000.0
    assert report["assumptions"]["hot_row_transactions_per_s"] == {
        "value": 50.0,
        "source": "given by --hot-row-transactions-per-s",
    }
    assert "cloud.google.com/spanner/docs/performance" in report["assumptions"]["spanner_writes_per_node_s"]["source"]


def test_capacity_command_table_and_a_bad_results_file(tmp_path, capsys) -> None:
    assert main(["capacity", "--votes-per-s", "1000", "--posts", "100", "--chain-events-per-core-s", "5000"]) == 0
    out = capsys.readouterr().out
    assert "read-modify-write" in out and "given by --chain-events-per-core-s" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["capacity", "--posts", "100", "--bench-results", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"upvotes: {bad} is not a bench results file")


def test_the_models_fold_reads_what_a_fold_run_reads(stack, database) -> None:
    """The model's fold cost against a real fold following the change log: the rows it read for 6
    sink commits of 25 deltas over 40 posts, among 500 posts that did not change."""
    write_deltas(
        database, [PostDelta.of(f"cap-idle-{i}", 1_795_312_800, "idle:0", upvotes=1, events=1) for i in range(500)]
    )
    run_fold(stack)  # folds those and records the cursor
    commits = [
        [PostDelta.of(f"cap-{(7 * c + i) % 40}", 1_795_312_800, f"cap:{c}:{i}", upvotes=1, events=1) for i in range(25)]
        for c in range(6)
    ]
    for deltas in commits:
        write_deltas(database, deltas)
    outcome = run_fold(stack)
    assert outcome.full_scans == 0 and outcome.deltas_folded == 150
    changed = len({d.post_id for deltas in commits for d in deltas})
    assert outcome.rows_read == fold_rows_read(changed, 150, len(commits))
    # 10x the catalogue for the same votes: a full scan would read 10x; this reads what the long
    # tail adds in posts voted on.
    reads = {
        posts: capacity(
            Workload(votes_per_s=100, posts=posts, zipf=1.1, window_s=10), _sink_shape(), ASSUMPTIONS
        ).fold_rows_read
        for posts in (100_000, 1_000_000)
    }
    assert reads[1_000_000] < 1.2 * reads[100_000]


# --- vote states: one Votes row written and two keys read per state ---------------------------


def test_state_writes_cost_a_votes_row_and_two_reads_per_state() -> None:
    shape = _sink_shape()
    workload = Workload(votes_per_s=40_000, posts=1_000, zipf=1.1, window_s=10, state_fraction=0.25)
    popularity = Popularity.zipf(1_000, 1.1)
    states = state_writes(popularity, workload, shape, ASSUMPTIONS)
    assert states.votes == states.row_writes == states.row_reads / 2 == 10_000
    assert states.transactions == 10_000 / shape.rows_per_commit
    assert states.delta_rows == pytest.approx(states.transactions * expected_touched(popularity, shape.rows_per_commit))
    assert states.mutations == pytest.approx(
        10_000 * MUTATIONS_PER_VOTE
        + states.transactions * MUTATIONS_PER_COMMIT
        + states.delta_rows * (MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT)
    )
    # 1,000 writes/s and 10,000 reads/s per node; 5,000 writes/s optimized.
    assert states.spanner_nodes == pytest.approx(10_000 / 1_000 + 20_000 / 10_000)
    assert states.spanner_nodes_optimized == pytest.approx(10_000 / 5_000 + 20_000 / 10_000)
    assert (states.nodes_per_100k_votes_s, states.nodes_per_100k_votes_s_optimized) == pytest.approx((120, 40))


def test_published_per_node_rates_put_100k_vote_states_at_37_nodes_or_13_optimized(capsys) -> None:
    """Google's regional figures (3,500 writes/s, 22,500 with throughput-optimized writes, 22,500
    reads/s per node): the notes' 29 nodes (or 5) for the writes, plus 8.9 for the two keys read."""
    assert (
        main(
            [
                "capacity",
                "--votes-per-s",
                "100000",
                "--posts",
                "10000",
                "--state-fraction",
                "1",
                "--chain-events-per-core-s",
                "100000",
                "--json",
            ]
        )
        == 0
    )
    states = json.loads(capsys.readouterr().out)["vote_states"]
    assert states["nodes_per_100k_votes_s"] == pytest.approx(100_000 / 3_500 + 200_000 / 22_500)
    assert states["nodes_per_100k_votes_s_optimized"] == pytest.approx(100_000 / 22_500 * 3)
    assert states["spanner_nodes"] == pytest.approx(states["nodes_per_100k_votes_s"])


def test_vote_states_are_in_this_designs_figures_and_leave_the_window_deltas() -> None:
    """A state fraction moves votes from the windows' blind deltas to the state transactions: the
    design's rows, commits, reads and nodes are the delta events' plus the states'."""
    base = Workload(votes_per_s=20_000, posts=5_000, zipf=1.1, window_s=10)
    with_states = capacity(replace(base, state_fraction=0.4), _sink_shape(), ASSUMPTIONS)
    deltas_only = capacity(replace(base, votes_per_s=12_000), _sink_shape(), ASSUMPTIONS)
    states, design, delta_design = with_states.vote_states, with_states.approaches[0], deltas_only.approaches[0]
    assert with_states.delta_rows_per_window == pytest.approx(deltas_only.delta_rows_per_window)
    assert design.rows_written == pytest.approx(delta_design.rows_written + states.row_writes + states.delta_rows)
    assert design.mutations > delta_design.mutations + states.mutations * 0.99
    assert design.spanner_nodes > states.spanner_nodes
    assert capacity(base, _sink_shape(), ASSUMPTIONS).vote_states.votes == 0


def test_capacity_command_says_what_the_state_writes_need(capsys) -> None:
    assert main(["capacity", "--votes-per-s", "1000", "--posts", "100", "--chain-events-per-core-s", "5000"]) == 0
    assert "Vote states" not in capsys.readouterr().out
    assert (
        main(
            [
                "capacity",
                "--votes-per-s",
                "200000",
                "--posts",
                "1000",
                "--state-fraction",
                "0.5",
                "--chain-events-per-core-s",
                "5000",
                "--spanner-optimized-writes-per-node-s",
                "20000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Vote states: 50% of the votes (100,000/s)" in out
    assert "Spanner nodes the state writes need: 37.5 per 100,000 vote states/s" in out
    assert "13.9 with throughput-optimized writes (20,000/s per node)" in out
    assert "given by --spanner-optimized-writes-per-node-s" in out
    with pytest.raises(SystemExit):
        main(["capacity", "--state-fraction", "1.5"])


def test_the_models_state_transactions_are_what_the_state_sink_commits(database, commit_meter) -> None:
    """3,000 first votes over 200 posts (Zipf 1.1) through the sink's own path: the commits, the
    delta rows (one per post per transaction, within 5% of the model's expectation) and the
    mutations, as the meter counts them from the DDL, are what the model's formula gives."""
    popularity = Popularity.zipf(200, 1.1)
    rng = random.Random(29)
    posts = rng.choices(range(200), weights=popularity.p.tolist(), k=3_000)
    states = {
        PostUser(f"capvs-{post}", f"u-{i}"): LatestVote(
            "up", 1_795_312_800_000_000 + i, f"e-{i}", 1_795_312_800, voted=True
        )
        for i, post in enumerate(posts)
    }
    commit_meter.reset()
    totals = apply_all_vote_states(database, states, rows_per_commit=1_000)
    with database.snapshot() as snapshot:
        [[delta_rows]] = snapshot.execute_sql("SELECT COUNT(*) FROM PostDeltas WHERE STARTS_WITH(PostId, 'capvs-')")
    workload = Workload(votes_per_s=3_000, posts=200, zipf=1.1, window_s=10, state_fraction=1.0)
    model = state_writes(popularity, workload, replace(_sink_shape(), rows_per_commit=1_000), ASSUMPTIONS)
    assert totals.commits == commit_meter.commits == model.transactions == 3
    assert delta_rows == pytest.approx(model.delta_rows, rel=0.05)
    # The model counts each parent Posts row at the planners' cost of a new one (every column); the
    # meter counts the key columns a parent's upsert writes: the model is the bound, above it by at
    # most those other columns per parent (one parent per delta row at most).
    formula = (
        3_000 * MUTATIONS_PER_VOTE
        + 3 * MUTATIONS_PER_COMMIT
        + delta_rows * (MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT)
    )
    unwritten = len(schema_model()["Posts"].columns) - 2
    assert commit_meter.mutations_total <= formula <= commit_meter.mutations_total + delta_rows * unwritten
