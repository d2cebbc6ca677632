"""Benchmark 4: fold time against the number of deltas; exact-read latency against the
number of old, folded deltas kept for a post.

Fold: for each size, a fresh database gets that many deltas over FOLD_POSTS posts (a post's
deltas next to each other, inserted with write_deltas in commits of 2,000 rows) and one
fold run (pipeline.fold, as `upvotes fold` runs it) should fold them all. One more fold
over COMPLETENESS_POSTS posts checks that a run folds every post, however many there are. A fold of an empty database measures the fixed cost (pipeline
start, snapshot, partitioning), reported beside the scaling exponent.

Reads: one post accumulates 0, then 10,000, then 100,000 old deltas, each stage folded,
plus 10 fresh unfolded deltas on top; at each stage, `reads` exact reads of that post,
two kinds: spanner_store.reads.exact_counts as readers call it (a strong read-only snapshot:
the Posts row, then the index range of the post's unfolded deltas), and exact_counts on a
handle whose snapshots read at an exact timestamp taken after the writes (on the emulator
those do not slow down as commits accumulate). Reads that
take long (the emulator scans every delta kept for the post) stop after READ_BUDGET_S
per kind and stage, with at least 5 samples.

Sink commit cost: one commit of 2,000 deltas for 2,000 distinct posts (what the sink
writes for a window of a many-post workload: a key-only Posts upsert per delta) against
one of 2,000 deltas for 200 posts, in the same fresh database.
"""
from __future__ import annotations

import time
from pathlib import Path

from bench.config import Sizes
from bench.measure import latency_summary, loglog_exponent, timed_calls
from bench.stack import fresh_database, run_fold
from spanner_store.folding import choose_snapshot
from schemas.records import PostDelta
from spanner_store.deltas import write_deltas
from spanner_store.database import run_with_retries
from upvotes.devtools.provision import Resources
from spanner_store.reads import exact_counts

FOLD_POSTS = 1_000  # the scaling points: more deltas per post as they grow
# One more fold over more posts: a run must fold every post, however many.
COMPLETENESS_DELTAS, COMPLETENESS_POSTS = 10_000, 2_500
ROWS_PER_COMMIT = 2_000
FRESH_DELTAS = 10
HOUR = 1_795_312_800
READ_POST = "r-hot"
READ_BUDGET_S = 5.0
FOLDED_TOTALS_SQL = "SELECT COALESCE(SUM(Upvotes), 0), COUNTIF(Upvotes != 0) FROM Posts"


def insert_deltas(database, deltas: list[PostDelta]) -> float:
    """Blind inserts in commits of ROWS_PER_COMMIT rows; returns the seconds taken."""
    start = time.perf_counter()
    for first in range(0, len(deltas), ROWS_PER_COMMIT):
        batch = deltas[first:first + ROWS_PER_COMMIT]
        run_with_retries(lambda b=batch: write_deltas(database, b))
    return time.perf_counter() - start


def fold_point(res: Resources, size: int, posts: int) -> dict:
    """`size` deltas over `posts` posts in a fresh database (a post's deltas next to each
    other), then one fold run.

    The run should fold every delta. Whatever it folds must land exactly in Posts, and
    exact reads of every post must add up to `size` whether folded or not; a run that
    leaves deltas unfolded is reported (`folded_all`), not hidden.
    """
    database, fresh = fresh_database(res, f"{res.database}-f{size}-{posts}")
    post_ids = [f"f-{p}" for p in range(posts)]
    deltas = [PostDelta.of(post_ids[i * posts // size], HOUR, f"fold:{i}", upvotes=1, events=1) for i in range(size)]
    insert_s = insert_deltas(database, deltas)
    fold = run_fold(fresh)
    with database.snapshot() as snapshot:
        folded_sum, folded_posts = list(snapshot.execute_sql(FOLDED_TOTALS_SQL))[0]
    read_total = sum(t.counts.upvotes for t in exact_counts(database, post_ids))
    exact = (folded_sum, folded_posts) == (fold["deltas_folded"], fold["posts_folded"]) and read_total == size
    assert exact, f"fold of {size}: {fold}, Posts hold {folded_sum} over {folded_posts} posts, exact reads {read_total}"
    return {
        "deltas": size, "posts": posts, "insert_seconds": round(insert_s, 2),
        "insert_rows_per_s": size / insert_s if size else None, "fold_seconds": round(fold["seconds"], 2),
        "deltas_folded": fold["deltas_folded"], "posts_folded": fold["posts_folded"],
        "folded_all": fold["deltas_folded"] == size, "retries": fold["retries"], "exact": exact,
    }


def sink_commit_cost(res: Resources) -> dict:
    """Rows/s of one 2,000-row commit with a parent upsert per delta, and with one per 10 deltas."""
    database, _ = fresh_database(res, f"{res.database}-c")
    rates = {}
    for name, posts in (("distinct_posts", ROWS_PER_COMMIT), ("ten_deltas_per_post", ROWS_PER_COMMIT // 10)):
        deltas = [PostDelta.of(f"{name}-{i % posts}", HOUR, f"{name}:{i}", upvotes=1, events=1) for i in range(ROWS_PER_COMMIT)]
        rates[name] = {"posts": posts, "rows_per_s": ROWS_PER_COMMIT / insert_deltas(database, deltas)}
    return {"rows": ROWS_PER_COMMIT, **rates}


class _AtTimestamp:
    """A database handle whose snapshots all read at one exact timestamp, for exact_counts."""

    def __init__(self, database, read_timestamp) -> None:
        self._database = database
        self._read_timestamp = read_timestamp

    def snapshot(self, **options):
        return self._database.snapshot(read_timestamp=self._read_timestamp, **options)


def read_scaling(res: Resources, stages: tuple[int, ...], reads: int) -> list[dict]:
    """Exact-read latency of one post as its old, folded deltas grow through `stages`."""
    database, fresh = fresh_database(res, f"{res.database}-r")
    folded = written = 0
    points = []
    for stage, old in enumerate(sorted(stages)):
        to_fold = old - written  # the previous stage's fresh deltas are folded with these
        insert_deltas(database, [PostDelta.of(READ_POST, HOUR, f"old:{stage}:{i}", upvotes=1, events=1) for i in range(to_fold)])
        written += to_fold
        if old:
            fold = run_fold(fresh)
            folded += fold["deltas_folded"]
            assert folded == old, f"{folded} deltas folded, expected {old}"
        insert_deltas(database, [PostDelta.of(READ_POST, HOUR, f"fresh:{stage}:{i}", upvotes=1, events=1) for i in range(FRESH_DELTAS)])
        written += FRESH_DELTAS
        at = choose_snapshot(database)
        strong = timed_calls(lambda: exact_counts(database, [READ_POST]), reads, READ_BUDGET_S)
        pinned_database = _AtTimestamp(database, at)
        pinned = timed_calls(lambda: exact_counts(pinned_database, [READ_POST]), reads, READ_BUDGET_S)
        counts = (exact_counts(database, [READ_POST])[0].counts.upvotes,
                  exact_counts(pinned_database, [READ_POST])[0].counts.upvotes)
        assert counts == (written, written), f"exact reads {counts}, expected {written}"
        points.append({
            "old_deltas": old, "unfolded_deltas": FRESH_DELTAS, "count": written, "exact": True,
            "exact_counts_strong": latency_summary(strong),
            "exact_timestamp": latency_summary(pinned),
        })
    return points


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """Fold points (an empty one first, for the fixed cost), completeness, reads, commit cost."""
    overhead = fold_point(res, 0, 0)
    points = [fold_point(res, size, FOLD_POSTS) for size in sizes.fold_deltas]
    completeness = fold_point(res, COMPLETENESS_DELTAS, COMPLETENESS_POSTS)
    for point in points:
        point["deltas_per_s"] = point["deltas_folded"] / point["fold_seconds"]
        point["posts_per_s"] = point["posts_folded"] / point["fold_seconds"]
    xs = [p["deltas"] for p in points]
    smallest, largest = points[0], points[-1]
    reads = read_scaling(res, sizes.read_old_deltas, sizes.fold_reads)
    commit_cost = sink_commit_cost(res)
    first, last = reads[0], reads[-1]
    return {
        "runner": "pipeline.fold (BundleBasedDirectRunner), as `upvotes fold` runs it",
        "empty_fold_seconds": overhead["fold_seconds"],
        "points": points,
        "exponent": loglog_exponent(xs, [p["fold_seconds"] for p in points]),
        "folded_all": all(p["folded_all"] for p in points) and completeness["folded_all"],
        "completeness": completeness,
        "size_ratio": largest["deltas"] / smallest["deltas"],
        "time_ratio": largest["fold_seconds"] / smallest["fold_seconds"],
        "reads": reads,
        "read_p50_ratio_strong": last["exact_counts_strong"]["p50_ms"] / first["exact_counts_strong"]["p50_ms"],
        "read_p50_ratio_exact_timestamp": last["exact_timestamp"]["p50_ms"] / first["exact_timestamp"]["p50_ms"],
        "sink_commit_cost": commit_cost,
    }
