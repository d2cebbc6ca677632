"""Benchmark commit_sizes: the largest Spanner commit each component builds, against the 80,000 limit.

The emulator accepts commits of any size, so this is counted, not timed: every commit goes
through upvotes.devtools.commit_meter (the real client, each commit's mutations counted from the DDL
as Spanner documents them, index entries included). Adversarial input, in a fresh database:

- sink: `plan_commits` + `write_new_deltas` (what WriteDeltaRows does per bundle) for a
  window of `hours` one-vote deltas over many posts, and a broken-clock post with one
  delta per hour;
- fold: one fold run (pipeline.fold, as `upvotes fold` runs it) over the broken-clock post
  (`hours` distinct event hours) and the others;
- views: publish_top_view with k = every post and --batch-rows far above the budget.

Baseline, same run: the single commit the fold would have built for that post before
issue 15 (every hour in one transaction), from the same cost constants.

Commit shape (a cost the emulator hides: a commit writing many splits coordinates them all):
distinct key ranges per commit (upvotes.devtools.commit_meter, a proxy for splits) and mutations per
commit of one window of the sink over `OTHER_POSTS` posts in arrival order, planned as today
(`plan_commits`, key order) against the same rows cut in arrival order (before issue 30).
`runner.py` also meters every other benchmark's process and reports their largest commit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from google.cloud import spanner

from bench.benchmark import Benchmark, table
from bench.stack import fresh_database, run_fold
from pipeline.params import FOLD_PARAMS, defaults
from schemas import post_hash
from schemas.records import PostDelta
from spanner_reads.hourly import hourly_counts
from spanner_reads.reads import exact_counts
from spanner_reads.views import publish_top_view
from spanner_store.database import MUTATION_BUDGET, SPANNER_MUTATION_LIMIT, run_with_retries
from spanner_store.tables import POSTS, key_range, post_key
from spanner_writes.deltas import cut_commits, plan_commits, write_new_deltas
from spanner_writes.folding import MUTATIONS_PER_HOUR, MUTATIONS_PER_POST
from upvotes.devtools.commit_meter import CommitMeter, metering_commits
from upvotes.resources import Resources

HOUR_2001 = 978_307_200
ROWS_PER_COMMIT = 1_000  # the streaming default
OTHER_POSTS = 2_000
POSTS_PER_COMMIT = defaults(FOLD_PARAMS)["posts_per_commit"]


def _measure(meter: CommitMeter, work) -> dict:
    meter.reset()
    result = work()
    return {
        "largest_commit": int(meter.largest),
        "commits": meter.commits,
        "tables": list(meter.largest_tables),
        **(result or {}),
    }


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    hours, window_rows = sizes.hours, sizes.window_rows
    database, fresh = fresh_database(res, f"{res.database}-cs")
    clock = [PostDelta.of("broken-clock", HOUR_2001 + 3600 * i, f"c:{i}", upvotes=1, events=1) for i in range(hours)]
    others = [
        PostDelta.of(f"p-{n}", HOUR_2001, f"o:{n}", upvotes=1 + n % 5, shares=n % 2, events=1)
        for n in range(OTHER_POSTS)
    ]
    meter = CommitMeter()
    with metering_commits(meter):

        def sink():
            for batch in plan_commits(clock + others, ROWS_PER_COMMIT):
                run_with_retries(lambda b=batch: write_new_deltas(database, b))

        def fold():
            outcome = run_fold(fresh)
            (total,) = exact_counts(database, ["broken-clock"])
            folded_hours = hourly_counts(database, "broken-clock", since=datetime(2001, 1, 1, tzinfo=timezone.utc))
            exact = (
                total.counts.upvotes == hours
                and len(folded_hours) == hours
                and all(h.counts.upvotes == 1 for h in folded_hours)
            )
            return {
                "posts_split": outcome.get("posts_split"),
                "deltas_folded": outcome.get("deltas_folded"),
                "exact": exact,
            }

        def views():
            version = publish_top_view(database, k=OTHER_POSTS + 1, view="bench-commit-sizes", batch_rows=1_000_000)
            return {"ranked_rows": version.ranked_rows}

        components = {"sink": _measure(meter, sink), "fold": _measure(meter, fold), "views": _measure(meter, views)}
        shape = _sink_commit_shape(meter, database, window_rows)
        fold_shape = _fold_commit_shape(meter, fresh, database, shape.pop("written"))
    largest = max(c["largest_commit"] for c in components.values())
    unbounded = MUTATIONS_PER_POST + MUTATIONS_PER_HOUR * hours
    return {
        "hours": hours,
        "components": components,
        "largest_commit": largest,
        "limit": SPANNER_MUTATION_LIMIT,
        "budget": MUTATION_BUDGET,
        "largest_over_limit": round(largest / SPANNER_MUTATION_LIMIT, 3),
        "baseline_one_transaction_fold": unbounded,
        "baseline_over_limit": round(unbounded / SPANNER_MUTATION_LIMIT, 3),
        "exact": components["fold"]["exact"] and shape["exact"] and fold_shape["exact"],
        "sink_commit_shape": shape,
        "fold_commit_shape": fold_shape,
    }


def _shape(meter: CommitMeter) -> dict:
    return {
        "commits": meter.commits,
        "key_ranges_per_commit": round(meter.key_ranges_total / meter.commits, 1),
        "key_ranges_largest": meter.key_ranges_largest,
        "mutations_per_commit": round(meter.mutations_total / meter.commits),
    }


def _sink_commit_shape(meter: CommitMeter, database, rows: int) -> dict:
    """One window's delta rows over many posts, arriving in random post order, written in key
    order (today) and, as the baseline, in arrival order (before issue 30)."""
    rng = random.Random(30)
    arrival = [
        PostDelta.of(f"shape-{rng.randrange(10 * rows)}", HOUR_2001, f"shape-{order}:{i}:0", upvotes=1, events=1)
        for order in ("key", "arrival")
        for i in range(rows)
    ]
    by_key, by_arrival = arrival[:rows], arrival[rows:]
    shapes: dict[str, object] = {}
    meter.reset()
    for batch in plan_commits(by_key, ROWS_PER_COMMIT):
        run_with_retries(lambda: write_new_deltas(database, batch))  # called at once
    shapes["key_order"] = _shape(meter)
    meter.reset()
    for batch in cut_commits(by_arrival, ROWS_PER_COMMIT):
        run_with_retries(lambda: write_new_deltas(database, batch))  # called at once
    shapes["arrival_order_baseline"] = _shape(meter)
    written = {d.post_id: 0 for d in arrival}
    for d in arrival:
        written[d.post_id] += 1
    shapes["exact"] = all(t.counts.upvotes == written[t.post_id] for t in exact_counts(database, written))
    shapes["rows"] = rows
    shapes["written"] = written
    return shapes


def _fold_commit_shape(meter: CommitMeter, fresh: Resources, database, written: dict[str, int]) -> dict:
    """The fold of those posts, its transactions grouped by key range (today), against the same
    posts cut into transactions of POSTS_PER_COMMIT in the order a run meets them, as before
    issue 30 (computed: the ranges each such transaction would have written)."""
    meter.reset()
    run_fold(fresh)
    grouped = _shape(meter)  # the run's compare-and-set transactions and its FoldRuns record
    posts = list(written)
    random.Random(31).shuffle(posts)
    chunks = [posts[i : i + POSTS_PER_COMMIT] for i in range(0, len(posts), POSTS_PER_COMMIT)]
    ranges = [len({key_range(post_hash(p)) for p in chunk}) for chunk in chunks]
    folded = _folded_upvotes(database, posts)
    return {
        "posts": len(posts),
        "by_key_range": grouped,
        "arrival_order_baseline": {
            "commits": len(chunks),
            "key_ranges_per_commit": round(sum(ranges) / len(ranges), 1),
            "key_ranges_largest": max(ranges),
        },
        "exact": folded == written,
    }


def _folded_upvotes(database, post_ids: list[str]) -> dict[str, int]:
    keyset = spanner.KeySet(keys=[list(post_key(p)) for p in post_ids])
    with database.snapshot() as snapshot:
        return dict(snapshot.read(POSTS, columns=("PostId", "Upvotes"), keyset=keyset))


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    hours: int  # event hours of the one post whose commits are measured
    window_rows: int  # delta rows of one window, for the commit shape


FULL = Sizes(hours=20_000, window_rows=10_000)
QUICK = Sizes(hours=5_000, window_rows=2_000)


def markdown(document: dict) -> list[str]:
    cs = document["benchmarks"]["commit_sizes"]
    parts = [
        f"Largest commit (mutations, Spanner's limit {cs['limit']:,}; a post with {cs['hours']:,} event hours)",
        table(
            ["Component", "Largest commit", "Share of the limit", "Commits"],
            [
                [name, f"{c['largest_commit']:,}", f"{c['largest_commit'] / cs['limit']:.2f}", f"{c['commits']}"]
                for name, c in cs["components"].items()
            ]
            + [
                [
                    "fold before issue 15 (one transaction per post, computed)",
                    f"{cs['baseline_one_transaction_fold']:,}",
                    f"{cs['baseline_over_limit']:.2f}",
                    "1",
                ]
            ],
        ),
    ]
    if "sink_commit_shape" in cs:
        parts += [_commit_shape_section(cs["sink_commit_shape"], cs["fold_commit_shape"])]
    return parts


def _commit_shape_section(sink: dict, fold: dict) -> str:
    """Key ranges per commit (a proxy for the splits a commit touches) of the sink and the fold,
    against the same rows in arrival order, same run."""
    rows = [
        [
            f"sink, one window of {sink['rows']:,} delta rows: {label}",
            f"{r['commits']}",
            f"{r['key_ranges_per_commit']:.1f} / {r['key_ranges_largest']}",
            f"{r['mutations_per_commit']:,}",
        ]
        for label, r in (
            ("arrival order (before issue 30)", sink["arrival_order_baseline"]),
            ("key order (plan_commits)", sink["key_order"]),
        )
    ]
    before, after = fold["arrival_order_baseline"], fold["by_key_range"]
    rows += [
        [
            f"fold of those {fold['posts']:,} posts: {label}",
            f"{r['commits']}",
            f"{r['key_ranges_per_commit']:.1f} / {r['key_ranges_largest']}",
            mutations,
        ]
        for label, r, mutations in (
            ("transactions of the posts as met (before, computed)", before, "-"),
            ("grouped by key range", after, f"{after['mutations_per_commit']:,}"),
        )
    ]
    return (
        "Commit shape: distinct key ranges per commit (1/64 of the PostHash space, a proxy for the splits "
        "a commit touches on real Spanner), same rows, same run:\n\n"
        + table(["Commits", "Commits (n)", "Key ranges per commit (mean / largest)", "Mutations per commit"], rows)
        + f"\n\nSink: {sink['key_order']['key_ranges_per_commit'] / sink['arrival_order_baseline']['key_ranges_per_commit']:.2f}x "
        f"the ranges per commit; fold: {after['key_ranges_per_commit'] / before['key_ranges_per_commit']:.2f}x "
        f"({after['commits']} transactions instead of {before['commits']}). "
        + ("Exact." if sink["exact"] and fold["exact"] else "NOT EXACT.")
    )


BENCHMARK = Benchmark(
    name="commit_sizes",
    title="The largest Spanner commit each component builds, against the 80,000 limit",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
)
