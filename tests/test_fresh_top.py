"""Fresh top posts without a fold (spanner_reads/fresh_top.py): the candidate rows each delta
commit carries, and the exact re-ranking, on the Spanner emulator through the sink's own
write path (WriteDeltaRows) and the real fold pipeline."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from pipeline import fold
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads.fresh_top import fresh_top
from spanner_reads.reads import exact_counts, top_posts
from spanner_store.database import open_database
from spanner_store.top_candidates import CANDIDATES_PER_COMMIT, CandidateRow, commit_candidates
from tests.support.resources import new_resources
from transforms.spanner_sink import WriteDeltaRows
from upvotes.cli import main
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

HOUR = 1_795_312_800


def delta(post_id: str, upvotes: int, delta_id: str, hour: int = HOUR, shares: int = 0) -> PostDelta:
    return PostDelta.of(post_id, hour, delta_id, upvotes=upvotes, shares=shares, events=abs(upvotes) + shares)


# --- the candidates of one commit: pure ------------------------------------------------------


def test_commit_candidates_lists_the_biggest_risers_and_bounds_the_rest() -> None:
    deltas = [delta(f"p-{i}", i, f"d{i}") for i in range(1, CANDIDATES_PER_COMMIT + 4)]
    deltas.append(delta("p-1", 100, "other-hour", hour=HOUR + 3600))  # sums over hours: p-1 has 101
    row = commit_candidates(deltas)
    top_sums = sorted(range(2, CANDIDATES_PER_COMMIT + 4), reverse=True)[: CANDIDATES_PER_COMMIT - 1]
    assert row.post_ids == ["p-1"] + [f"p-{i}" for i in top_sums]
    assert row.threshold == max(set(range(2, CANDIDATES_PER_COMMIT + 4)) - set(top_sums))


def test_commit_candidates_never_lists_a_fall_and_a_small_commit_has_threshold_zero() -> None:
    row = commit_candidates([delta("up", 3, "a"), delta("down", -5, "b"), delta("down", 1, "c")])
    # "down" nets -4, but its +1 row could lift a trending ranking by 1 (rises are clipped per row).
    assert row == CandidateRow(["up"], 0, rise_threshold=1.0, newest_hour=HOUR)
    falls = [delta(f"f-{i}", -1 - i, f"d{i}") for i in range(CANDIDATES_PER_COMMIT + 5)]
    assert commit_candidates(falls) == CandidateRow([], 0, rise_threshold=0.0, newest_hour=HOUR)


# --- on the emulator ---------------------------------------------------------------------------


@pytest.fixture
def fresh(emulator_env):
    """A database of its own for one test."""
    resources = new_resources("ft")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    return resources, open_database(resources.project, resources.instance, resources.database)


def sink(resources, deltas: list[PostDelta], rows_per_commit: int = 50) -> None:
    """Writes deltas through the streaming pipeline's own sink transform."""
    with TestPipeline() as p:
        (
            p
            | beam.Create(deltas)
            | WriteDeltaRows(resources.project, resources.instance, resources.database, rows_per_commit=rows_per_commit)
        )


def run_fold(resources) -> None:
    fold.run([f"--project={resources.project}", f"--instance={resources.instance}", f"--database={resources.database}"])


def test_a_post_overtaking_the_folded_leader_is_first_at_its_exact_count_without_a_fold(fresh) -> None:
    resources, database = fresh
    sink(resources, [delta(f"old-{i}", 100 - i, f"a:{i}") for i in range(40)])
    run_fold(resources)
    assert top_posts(database, 1).posts[0].post_id == "old-0"  # the folded leader, 100

    # After the fold: a new post rises past the leader, the leader falls back (un-votes) and
    # another folded post climbs.
    sink(resources, [delta("riser", 150, "b:1", shares=7), delta("old-0", -60, "b:2"), delta("old-5", 10, "b:3")])

    top = fresh_top(database, k=5, extra=10)
    assert top_posts(database, 1).posts[0].post_id == "old-0"  # the index has not moved: no fold ran
    assert [(p.post_id, p.counts.upvotes, p.counts.shares) for p in top.posts] == [
        ("riser", 150, 7),
        ("old-5", 105, 0),
        ("old-1", 99, 0),
        ("old-2", 98, 0),
        ("old-3", 97, 0),
    ]
    # 40 posts > k + extra, so certified by the bound: the 15th folded post (86) plus the
    # candidate rows' thresholds (0: the commit listed all its risers).
    assert (top.exact, top.bound, top.candidate_rows) == (True, 86, 1)
    assert top.folded_through is not None and top.as_of >= top.folded_through

    # The post that fell back is ranked by its exact count, 40: last of all 41 posts.
    everyone = fresh_top(database, k=41, extra=0)
    assert everyone.posts[-1] == ("old-0", Counts(upvotes=40), None)
    assert [p.counts.upvotes for p in everyone.posts] == sorted(
        (p.counts.upvotes for p in everyone.posts), reverse=True
    )


def test_the_bound_holds_for_every_post_left_out_and_decides_exact(fresh) -> None:
    resources, database = fresh
    sink(resources, [delta(f"base-{i}", 50, f"a:{i}") for i in range(30)])
    run_fold(resources)
    # One commit touching more posts than it can list: the unlisted ones raise the threshold.
    risers = [delta(f"r-{i}", 10 + i, f"b:{i}") for i in range(CANDIDATES_PER_COMMIT + 4)]
    sink(resources, risers, rows_per_commit=1_000)

    # Without reading what decides it (no budget to resolve a bound): the 5th folded post has 50
    # and the commit's threshold is its 17th-largest sum, 13: a post left out could have 63 > 50,
    # so this answer is not certified.
    top = fresh_top(database, k=3, extra=2, resolve_posts=0)
    listed = {p.post_id for p in top.posts}
    everyone = exact_counts(database, [f"base-{i}" for i in range(30)] + [d.post_id for d in risers])
    assert all(t.counts.upvotes <= top.bound for t in everyone if t.post_id not in listed)
    assert [p.counts.upvotes for p in top.posts] == [50, 50, 50]
    assert (top.bound, top.exact, top.commits_read) == (50 + 13, False, 0)
    # By default the read reads that commit's 20 posts (its DeltaCommits row): every post it raised
    # is then considered, its threshold bounds nothing, and the answer is certified without a fold.
    resolved = fresh_top(database, k=3, extra=2)
    assert (resolved.bound, resolved.exact, resolved.commits_read) == (50, True, 1)
    assert resolved.posts == top.posts and resolved.considered == top.considered + 4  # the 4 it did not list

    # After a fold the candidates are behind the watermark: the folded ranking certifies itself.
    run_fold(resources)
    after = fresh_top(database, k=3, extra=2)
    assert (after.exact, after.bound, after.candidate_rows) == (True, 50, 0)


def test_top_command_prints_exact_counts_with_freshness(fresh, capsys) -> None:
    resources, database = fresh
    sink(resources, [delta("a", 5, "a:1"), delta("b", 9, "a:2")])  # never folded: all candidates
    flags = [f"--project={resources.project}", f"--instance={resources.instance}", f"--database={resources.database}"]
    assert main(["top", *flags, "-n", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["rank"], r["post_id"], r["upvotes"], r["exact"]) for r in lines] == [
        (1, "b", 9, True),
        (2, "a", 5, True),
    ]
    assert all(r["as_of"] and r["folded_through"] is None for r in lines)
