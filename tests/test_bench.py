"""`python -m bench --quick` end to end: every section is there, every count exact, a figure.

Runs the smoke-sized benchmarks in a subprocess (they start their own emulators unless
SPANNER_EMULATOR_HOST / PUBSUB_EMULATOR_HOST name running ones). No timing is asserted:
timings are what the benchmark reports, not what it checks. Beside it, without emulators: every
registered benchmark reports itself (bench/benchmark.py), and the committed results render with
named sections.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import report, trending
from bench.registry import BENCHMARKS, benchmarks, run_sizes
from tests.support.resources import new_resources
from upvotes.operations.capacity_model import fold_rows_read
from upvotes.operations.provision import provision

REPO = Path(__file__).resolve().parents[1]
SECTIONS = BENCHMARKS
APPROACHES = ("rmw", "sharded_10", "sharded_100", "chain_sink", "e2e_pubsub")
TIMEOUT_S = 2_400  # the quick run: 15-25 minutes on 2 cores (emulators started for each of 16 benchmarks)


@pytest.mark.bench_smoke
@pytest.mark.timeout(TIMEOUT_S + 60)  # pytest.ini's 600 s is for one test, not for every benchmark
@pytest.mark.emulators  # the benchmarks start their own
def test_quick_bench_writes_every_section_with_exact_counts_and_a_figure(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]

    document = json.loads((tmp_path / "latest.json").read_text())
    assert (tmp_path / "latest.md").read_text().startswith("## Benchmark results (quick run)")
    assert set(SECTIONS) <= set(document["benchmarks"])
    for key in ("date", "nproc", "cpu_model", "python", "apache_beam"):
        assert document["machine"][key]
    assert document["targets"] == report.evaluate_targets(document)
    assert len(document["targets"]) >= 22 and all(isinstance(t["met"], bool) for t in document["targets"])
    assert set(document["sizes"]) == {"name", *SECTIONS}
    markdown = (tmp_path / "latest.md").read_text()
    assert all(f'<a id="{name}"></a>' in markdown for name in SECTIONS)
    for section in SECTIONS:
        assert document["benchmarks"][section]["peak_rss"]["self_mib"] > 0

    hot = document["benchmarks"]["hot_post"]["approaches"]
    assert set(hot) == set(APPROACHES)
    for name, approach in hot.items():
        assert approach["exact"] is True and approach["final_count"] == approach["votes"], name
    assert hot["chain_sink"]["count_before_fold"] == hot["chain_sink"]["count_after_fold"] == hot["chain_sink"]["votes"]
    sweep = document["benchmarks"]["hot_post"]["sweep"]
    assert {(r["approach"], r["retry"]) for r in sweep} == {
        (a, r) for a in APPROACHES[:3] for r in ("client", "jittered")
    }
    assert all(r["exact"] is True and r["votes"] > 0 for r in sweep)
    soak = document["benchmarks"]["hot_post"]["soak"]
    assert soak["exact"] is True and soak["votes"] > 0 and soak["peak_rss_after_long_mib"] > 0

    variants = document["benchmarks"]["transform_cost"]["variants"]
    assert variants and all(v["exact"] is True for v in variants.values())
    amplification = document["benchmarks"]["write_amplification"]
    assert amplification["pipeline_sample"]["exact"] is True
    assert amplification["pipeline_sample"]["pipeline_deltas"] == amplification["pipeline_sample"]["lower_bound_groups"]
    assert abs(amplification["model_vs_delta_rows"] - 1) <= 0.10, "upvotes capacity's model is off by over 10%"
    fold = document["benchmarks"]["fold_scaling"]
    assert all(p["exact"] is True for p in fold["points"]) and all(r["exact"] is True for r in fold["reads"])
    assert document["benchmarks"]["freshness"]["exact"] is True
    assert document["benchmarks"]["freshness"]["markers"] > 0
    hot_reads = document["benchmarks"]["hot_reads"]
    assert hot_reads["exact"] is True
    assert [p["target_reads_per_s"] for p in hot_reads["library"]] == [1_000, 10_000]

    sizes = document["benchmarks"]["commit_sizes"]
    assert sizes["exact"] is True and sizes["components"]["fold"]["posts_split"] == 1
    assert 0 < document["largest_commit_mutations"] <= sizes["limit"]
    assert all(b["largest_commit_mutations"] <= sizes["limit"] for b in document["benchmarks"].values())

    unique = document["benchmarks"]["unique_voters"]
    assert unique["with_sketches"]["exact"] is True and unique["without_sketches"]["exact"] is True
    assert [p["voters"] for p in unique["errors"]][:3] == [10, 100, 1_000]
    assert all(p["relative_error"] <= 0.005 for p in unique["errors"][:3])
    assert unique["with_sketches"]["sketch_bytes_per_row"] > 0 == unique["without_sketches"]["sketch_bytes_per_row"]

    write_back = document["benchmarks"]["write_back"]
    assert set(write_back["race"]) == {"none", "aof_everysec", "aof_always", "pipeline"}
    for name, row in write_back["race"].items():
        assert (
            row["exact"] is True and row["votes"] == hot["e2e_pubsub"]["votes"] and row["freshness"]["samples"] > 0
        ), name
    killed = {(c["killed"], c.get("durability")): c for c in write_back["crashes"]}
    assert len(killed) == 8 and all(c["acknowledged"] > 0 for c in killed.values())
    for point in ("after rename", "after commit"):  # the flusher, killed at each fault point: exact
        crash = killed[(f"flusher, {point}", "none")]
        assert crash["lost"] == crash["doubled"] == 0 and crash["leftover_staging_keys"] == 1, crash
    assert killed[("redis-server", "aof_always")]["lost"] == 0  # fsynced before the reply
    # A machine crash after a flush's commit: under everysec (no WAITAOF before Redis 7.2) it takes
    # the RENAME back and the flush is applied again; always fsynced the RENAME before its reply.
    everysec, always = (
        killed[("machine, after commit", "aof_everysec")],
        killed[("machine, after commit", "aof_always")],
    )
    assert (everysec["doubled"] > 0) is not everysec["waitaof"], everysec
    assert always["lost"] == always["doubled"] == 0, always
    assert "| redis-server |" in (tmp_path / "latest.md").read_text()
    assert "| machine, after commit |" in (tmp_path / "latest.md").read_text()

    catalogue = document["benchmarks"]["catalogue_cost"]
    assert catalogue["exact"] is True and [p["posts"] for p in catalogue["points"]] == [1_000, 10_000]
    # Following the log, the rows a fold and status read do not grow with the catalogue (status also
    # reads the change rows of its 10-minute rate window: the 4 commits of each earlier size at most);
    # a full scan's grow by one per post.
    first, last = catalogue["points"][0], catalogue["points"][-1]
    assert (
        last["fold_rows_read"] == first["fold_rows_read"] == fold_rows_read(100, 1_000, 1)
    )  # upvotes capacity's model
    assert last["fold_idle_rows_read"] == 1
    assert 0 <= last["status_rows_read"] - first["status_rows_read"] <= 4 * (len(catalogue["points"]) - 1)
    assert last["full_scan"]["fold_rows_read"] - first["full_scan"]["fold_rows_read"] == 9_000
    assert catalogue["sink_mutations_per_1k_votes"]["1000_rows_per_commit"]["change_log_ratio"] <= 1.001

    reader = document["benchmarks"]["stream_reader"]
    assert all(r["exact"] is True for r in reader["single_events"].values())
    assert reader["sigkill"]["votes_lost"] == 0 == reader["sigkill"]["votes_doubled"]  # the message log (issue 47)
    assert reader["sigkill"]["kills"] >= 2 and len(reader["sigkill"]["pulls_replayed"]) <= reader["sigkill"]["kills"]
    assert all(
        reader["cost"][kind][mode]["votes"] > 0 for kind in ("batched", "single") for mode in ("before", "after")
    )
    real = document["benchmarks"]["real_traffic"]
    assert real["pipeline"]["exact"] is True and real["pipeline"]["votes"] > real["sizes"]["events"] > 0
    assert real["pipeline"]["freshness"]["samples"] > 0 and real["pipeline"]["mutations_per_1k_votes"] > 0
    assert real["pipeline"]["tail"]["mutations_per_vote"] > 0 and real["rmw"]["votes_per_s"] > 0
    assert real["pubsub"]["publish_msgs_per_s"] > 0 and real["python"]["events_per_s_per_core"] > 0
    soak = document["benchmarks"]["fault_soak"]
    assert soak["exact"] is True and soak["lost"] == soak["doubled"] == 0 and soak["votes"] > 0
    assert soak["faults"]["stream_sigterms"] == len(soak["drains"]) >= 1 and soak["final_stop_exit_code"] == 0
    assert soak["faults"]["serve_restarts"] == 1 and soak["faults_injected"] >= 4

    states = document["benchmarks"]["vote_states"]
    assert states["rmw"]["best"]["votes_per_s"] == max(r["votes_per_s"] for r in states["rmw"]["runs"])
    for shape in ("hot_post", "zipf"):
        races = states["races"][shape]
        assert races["deltas"]["exact"] is races["states"]["exact"] is True, shape
        assert races["deltas"]["votes"] == races["states"]["votes"] == hot["e2e_pubsub"]["votes"], shape
        assert races["states"]["votes_rows"] > 0 == races["deltas"]["votes_rows"], shape
    assert states["races"]["hot_post"]["states"]["posts"] == 1
    assert states["window_state"]["encoded_bytes_per_key"] > 0 and states["soak"]["exact"] is True
    error = states["count_error"]
    assert error["drain_exit_code"] == 0 == error["mismatching_posts"] == error["absolute_error"], error
    assert states["final_exit_code"] == 0

    assert_trending(document["benchmarks"]["trending"])

    figure = tmp_path / "latest.png"
    assert figure.exists() and figure.stat().st_size > 10_000
    assert "| Target |" in completed.stdout


def assert_trending(result: dict) -> None:
    """bench/trending.py's quick results: every size ranked by both rankings, certified, with
    exact counts and no rank error against the ledger; freshness and the cost measured."""
    assert [p["posts"] for p in result["points"]] == list(trending.QUICK.posts)
    assert result["rank_errors"] == 0 and result["exact"] is True
    for point in result["points"]:
        for by in ("hot", "last"):
            ranked = point[by]
            assert ranked["rank_errors"] == 0 and ranked.get("command_rank_errors", 0) == 0, (point["posts"], by)
            assert ranked["exact"] is ranked["counts_exact"] is True and len(ranked["posts"]) == trending.K
            assert ranked["rows_read"] > 0 and point["brute_force"][by]["rank_errors"] == 0
            assert point["brute_force"][by]["rows"] in (point["posts"], point["hourly_rows"])
    fresh = result["points"][-1]["freshness"]
    assert fresh["rank_errors"] == 0 and fresh["exact"] is True and fresh["panes"] == 1
    cost = result["cost"]
    assert cost["deltas_folded"] == cost["delta_rows"] and cost["fold"]["commits"] > 0
    # The code before issue 36 ran, when this clone has its commit (a shallow clone falls back to the model).
    has_commit = (
        subprocess.run(
            ["git", "cat-file", "-e", f"{trending.BEFORE_COMMIT}^{{commit}}"], cwd=REPO, capture_output=True
        ).returncode
        == 0
    )
    assert cost["before_from"].startswith(f"the code of {trending.BEFORE_COMMIT}") is has_commit, cost["before_from"]
    for part in ("sink", "fold"):
        assert cost[part]["before"] > 0 and cost[part]["after"] > 0 and cost[part]["before_commits"] > 0, part
        assert cost[part]["ratio"] == round(cost[part]["after"] / cost[part]["before"], 4), part


@pytest.mark.bench_smoke
def test_trending_quick_run_ranks_every_size_without_rank_errors(emulator_env, tmp_path: Path) -> None:
    """bench/trending.py at its quick sizes, in this process on the session's emulators: its table
    has a row per size and ranking, and no answer differs from the ledger's brute-force ranking."""
    resources = new_resources("trb")
    provision(resources, log=lambda _: None)
    result = trending.run(trending.QUICK, resources, tmp_path)
    assert_trending(result)
    document = {"benchmarks": {"trending": result}}
    section = "\n\n".join(trending.markdown(document))
    for posts in trending.QUICK.posts:
        for ranking in ("--by hot", f"--last {trending.WINDOW_HOURS}h"):
            assert re.search(
                rf"^\| {posts:,} \| [\d,]+ \| {ranking} \|.*\| 0( / 0)? \| yes \|$", section, flags=re.M
            ), (posts, ranking, section)
    found = {t["target"]: t for t in trending.targets(document)}
    assert found["Trending rank errors against the ledger's brute-force ranking: 0"]["met"] is True
    assert len(found) == 5


def test_every_registered_benchmark_reports_itself() -> None:
    """One module per benchmark, registered once: its own sizes for both runs, its report."""
    found = benchmarks()
    assert [b.name for b in found] == list(BENCHMARKS) and len(set(BENCHMARKS)) == len(BENCHMARKS)
    for benchmark in found:
        assert type(benchmark.full) is type(benchmark.quick), benchmark.name
        assert type(benchmark.full).__dataclass_params__.frozen, benchmark.name
        assert benchmark.title and callable(benchmark.run) and callable(benchmark.markdown), benchmark.name
    for run in ("full", "quick"):
        sizes = run_sizes(run)
        assert sizes.name == run and list(sizes.as_dict()) == ["name", *BENCHMARKS]


def test_the_committed_results_render_with_named_sections(tmp_path: Path) -> None:
    """bench/results/latest.json renders as the committed latest.md: a section per benchmark that
    ran, anchored and headed by its name, never a number; the chart has every panel."""
    document = json.loads((REPO / "bench" / "results" / "latest.json").read_text())
    markdown = report.markdown(document)
    assert markdown + "\n" == (REPO / "bench" / "results" / "latest.md").read_text()
    for name in document["benchmarks"]:
        assert f'<a id="{name}"></a>\n\n### {name}: ' in markdown, name
    assert not re.search(r"^### \d", markdown, flags=re.M)
    report.plot(document, tmp_path / "latest.png")
    assert (tmp_path / "latest.png").stat().st_size > 10_000
