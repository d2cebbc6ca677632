"""Benchmark fold_scaling: fold time against the number of deltas; exact-read latency against the
number of old, folded deltas kept for a post.

Fold: for each size, a fresh database gets that many deltas over FOLD_POSTS posts (a post's
deltas next to each other, inserted with write_deltas in commits of 2,000 rows) and one
fold run (pipeline.fold, as `upvotes fold` runs it) should fold them all. One more fold
over COMPLETENESS_POSTS posts checks that a run folds every post, however many there are. A fold of an empty database measures the fixed cost (pipeline
start, snapshot, partitioning), reported beside the scaling exponent.

Reads: one post accumulates 0, then 10,000, then 100,000 old deltas, each stage folded,
plus 10 fresh unfolded deltas on top; at each stage, `reads` exact reads of that post,
two kinds: spanner_reads.reads.exact_counts as readers call it (a strong read-only snapshot:
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
from dataclasses import dataclass
from pathlib import Path

from bench.benchmark import Benchmark, p50_p99_ms, table, target
from bench.measure import latency_summary, loglog_exponent, timed_calls
from bench.stack import fresh_database, run_fold
from schemas.records import PostDelta
from spanner_reads.reads import exact_counts
from spanner_store.database import run_with_retries
from spanner_writes.deltas import write_deltas
from spanner_writes.folding import choose_snapshot
from upvotes.resources import Resources

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
        batch = deltas[first : first + ROWS_PER_COMMIT]
        run_with_retries(lambda: write_deltas(database, batch))  # called at once
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
        "deltas": size,
        "posts": posts,
        "insert_seconds": round(insert_s, 2),
        "insert_rows_per_s": size / insert_s if size else None,
        "fold_seconds": round(fold["seconds"], 2),
        "deltas_folded": fold["deltas_folded"],
        "posts_folded": fold["posts_folded"],
        "folded_all": fold["deltas_folded"] == size,
        "retries": fold["retries"],
        "exact": exact,
    }


def sink_commit_cost(res: Resources) -> dict:
    """Rows/s of one 2,000-row commit with a parent upsert per delta, and with one per 10 deltas."""
    database, _ = fresh_database(res, f"{res.database}-c")
    rates = {}
    for name, posts in (("distinct_posts", ROWS_PER_COMMIT), ("ten_deltas_per_post", ROWS_PER_COMMIT // 10)):
        deltas = [
            PostDelta.of(f"{name}-{i % posts}", HOUR, f"{name}:{i}", upvotes=1, events=1)
            for i in range(ROWS_PER_COMMIT)
        ]
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
        insert_deltas(
            database, [PostDelta.of(READ_POST, HOUR, f"old:{stage}:{i}", upvotes=1, events=1) for i in range(to_fold)]
        )
        written += to_fold
        if old:
            fold = run_fold(fresh)
            folded += fold["deltas_folded"]
            assert folded == old, f"{folded} deltas folded, expected {old}"
        insert_deltas(
            database,
            [PostDelta.of(READ_POST, HOUR, f"fresh:{stage}:{i}", upvotes=1, events=1) for i in range(FRESH_DELTAS)],
        )
        written += FRESH_DELTAS
        at = choose_snapshot(database)
        strong = timed_calls(lambda: exact_counts(database, [READ_POST]), reads, READ_BUDGET_S)
        pinned_database = _AtTimestamp(database, at)
        pinned = timed_calls(lambda: exact_counts(pinned_database, [READ_POST]), reads, READ_BUDGET_S)
        counts = (
            exact_counts(database, [READ_POST])[0].counts.upvotes,
            exact_counts(pinned_database, [READ_POST])[0].counts.upvotes,
        )
        assert counts == (written, written), f"exact reads {counts}, expected {written}"
        points.append(
            {
                "old_deltas": old,
                "unfolded_deltas": FRESH_DELTAS,
                "count": written,
                "exact": True,
                "exact_counts_strong": latency_summary(strong),
                "exact_timestamp": latency_summary(pinned),
            }
        )
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


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    fold_deltas: tuple[int, ...]
    read_old_deltas: tuple[int, ...]
    fold_reads: int


FULL = Sizes(fold_deltas=(10_000, 30_000, 100_000), read_old_deltas=(0, 10_000, 100_000), fold_reads=100)
QUICK = Sizes(fold_deltas=(1_000, 3_000), read_old_deltas=(0, 1_000, 3_000), fold_reads=10)


def targets(document: dict) -> list[dict]:
    fold = document["benchmarks"]["fold_scaling"]
    return [
        target(
            f"Fold linear: {fold['size_ratio']:.0f}x deltas in <= {1.2 * fold['size_ratio']:.0f}x time (each run folding all)",
            f"{fold['time_ratio']:.2f}x time; log-log exponent {fold['exponent']:.2f} "
            f"(fixed cost of an empty fold {fold['empty_fold_seconds']:.1f} s); one run folded "
            + ", ".join(f"{p['deltas_folded']:,} of {p['deltas']:,}" for p in fold["points"] + [fold["completeness"]])
            + f" (the last over {fold['completeness']['posts']:,} posts)",
            fold["folded_all"] and fold["time_ratio"] <= 1.2 * fold["size_ratio"],
        ),
        target(
            f"Exact-read latency flat within 20% from 0 to {fold['reads'][-1]['old_deltas']:,} old deltas",
            f"p50 ratio {fold['read_p50_ratio_strong']:.2f} (exact_counts, strong snapshot), "
            f"{fold['read_p50_ratio_exact_timestamp']:.2f} (exact-timestamp snapshot)",
            fold["read_p50_ratio_strong"] <= 1.2,
        ),
    ]


def markdown(document: dict) -> list[str]:
    fs = document["benchmarks"]["fold_scaling"]
    return [
        f"Fold and read scaling ({fs['runner']})",
        table(
            ["Deltas", "Posts", "Insert rows/s", "Folded by one run", "Fold s", "Deltas/s folded", "Posts/s folded"],
            [
                [
                    f"{p['deltas']:,}",
                    f"{p['posts']:,}",
                    f"{p['insert_rows_per_s']:,.0f}",
                    f"{p['deltas_folded']:,}" + ("" if p["folded_all"] else " (NOT ALL)"),
                    f"{p['fold_seconds']:.2f}",
                    f"{p['deltas_per_s']:,.0f}",
                    f"{p['posts_per_s']:,.0f}",
                ]
                for p in fs["points"]
            ],
        ),
        f"Log-log exponent {fs['exponent']:.2f}; an empty fold takes {fs['empty_fold_seconds']:.1f} s. "
        f"Completeness: one run over {fs['completeness']['posts']:,} posts folded {fs['completeness']['deltas_folded']:,} "
        f"of {fs['completeness']['deltas']:,} deltas ({fs['completeness']['posts_folded']:,} posts). "
        f"Sink commit of {fs['sink_commit_cost']['rows']:,} deltas on the emulator: "
        f"{fs['sink_commit_cost']['distinct_posts']['rows_per_s']:,.0f} rows/s with a Posts key upsert per delta, "
        f"{fs['sink_commit_cost']['ten_deltas_per_post']['rows_per_s']:,.0f} rows/s with one per 10 deltas.",
        table(
            ["Old folded deltas", "exact_counts (strong) p50 / p99 ms", "Exact timestamp p50 / p99 ms", "Samples"],
            [
                [
                    f"{r['old_deltas']:,}",
                    p50_p99_ms(r["exact_counts_strong"]),
                    p50_p99_ms(r["exact_timestamp"]),
                    f"{r['exact_counts_strong']['samples']} / {r['exact_timestamp']['samples']}",
                ]
                for r in fs["reads"]
            ],
        ),
    ]


def chart(document: dict) -> list:
    fs = document["benchmarks"]["fold_scaling"]

    def fold_time(ax) -> None:
        xs = [p["deltas"] for p in fs["points"]]
        ax.loglog(xs, [p["fold_seconds"] for p in fs["points"]], "o-", label=f"fold (exponent {fs['exponent']:.2f})")
        ax.loglog(xs, [fs["points"][0]["fold_seconds"] * x / xs[0] for x in xs], "--", color="grey", label="linear")
        ax.set_xlabel("deltas")
        ax.set_ylabel("seconds")
        ax.set_title("fold_scaling: fold time")
        ax.legend()

    def read_latency(ax) -> None:
        old = [max(r["old_deltas"], 1) for r in fs["reads"]]
        ax.semilogx(old, [r["exact_counts_strong"]["p50_ms"] for r in fs["reads"]], "o-", label="exact_counts (strong)")
        ax.semilogx(old, [r["exact_timestamp"]["p50_ms"] for r in fs["reads"]], "s-", label="exact timestamp")
        ax.set_xlabel("old folded deltas (0 shown at 1)")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("p50 ms")
        ax.set_title("fold_scaling: exact-read latency")
        ax.legend()

    return [fold_time, read_latency]


BENCHMARK = Benchmark(
    name="fold_scaling",
    title="Fold time against deltas; exact-read latency against old deltas",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
    chart=chart,
)
