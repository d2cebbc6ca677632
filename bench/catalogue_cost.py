"""Catalogue cost (issue 22): what `upvotes fold` and `upvotes status` cost as the catalogue grows
while the work stays the same, and what the change log costs the sink.

One database grows through the catalogue sizes: posts are seeded straight into Posts (folded,
nothing unfolded, commits of SEED_ROWS_PER_COMMIT rows within the 20,000-mutation budget). At
each size the same work arrives `sizes.catalogue_rounds` times: WORK_DELTAS new delta rows over
WORK_POSTS posts, written by the sink's own commit (spanner_writes.deltas.write_deltas, so with its
DeltaCommits row). After each, as a user runs them (the installed `upvotes` command in a
subprocess, timed whole: interpreter, imports, pipeline start; medians of the rounds, as the
machine is shared):

- `upvotes status --json`, following the change log from the last fold's cursor;
- `upvotes fold`, following the log; then `upvotes fold` again with nothing to do.

Then the baseline, same run, same database, on one more batch of the same work: `upvotes status
--full-scan`, `upvotes fold --full-scan` and again with nothing to do: every post's watermark
read, as the fold and status did before this change (one sample each: at 1,000,000 posts they
take minutes).

Rows read are what each command reports (`rows_read`: FoldRuns, DeltaCommits and Posts rows and
delta index entries returned by its reads). Every fold must fold exactly the work, and the
posts' folded counts must match what was written.

Sink write cost, by upvotes.devtools.mutation_count's model of Spanner's rules on the DDL (the
emulator does not count): the commit write_deltas builds, with and without its DeltaCommits
row (without: what the previous version committed), and option (a), a shard-led global index on
PostDeltas (a stored generated ChangeShard column and an index on (ChangeShard, CommittedAt)),
counted on that DDL variant. Per 1,000 votes at one vote per delta row, for full commits of
1,000 rows and for the worst case of one row per commit.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from google.cloud import spanner
from google.cloud.spanner_v1 import Mutation
from google.cloud.spanner_v1.batch import Batch

import schemas
from bench.benchmark import Benchmark, table, target
from bench.stack import fresh_database
from schemas.counters import Counts
from schemas.ddl import ddl_object_name, schema_model
from schemas.records import PostDelta
from spanner_reads.reads import exact_counts
from spanner_store.database import MUTATION_BUDGET, commit_mutations, run_with_retries
from spanner_store.mutation_cost import insert_cost
from spanner_store.tables import DELTA_COMMITS, HOT_KEY_THROUGH, POST_COLUMNS, POSTS, post_key
from spanner_writes.deltas import add_delta_writes, write_deltas
from upvotes.devtools.mutation_count import commit_mutation_count
from upvotes.resources import Resources

WORK_DELTAS, WORK_POSTS = 1_000, 100
# A folded post as the fold leaves it with no hourly row (its NULL HotKey fenced at its watermark),
# its cells and index entries within the budget.
SEED_COLUMNS = POST_COLUMNS + (HOT_KEY_THROUGH,)
SEED_ROWS_PER_COMMIT = MUTATION_BUDGET // insert_cost(POSTS, SEED_COLUMNS)
HOUR = 1_795_312_800
COMMIT_SHAPES = (1_000, 1)  # delta rows per sink commit, one vote and one post each
# Option (a): the documented pattern for a time-ordered index without a hotspot.
SHARD_INDEX_DDL = "CREATE INDEX PostDeltasByChangeShard ON PostDeltas (ChangeShard, CommittedAt)"


def upvotes_command() -> str:
    """The `upvotes` console script of this interpreter's environment, as a user runs it."""
    return str(Path(sys.executable).with_name("upvotes"))


def timed_json(argv: list[str]) -> tuple[float, dict]:
    """Runs `upvotes ARGV`; its seconds and the last JSON line it printed."""
    start = time.perf_counter()
    done = subprocess.run([upvotes_command(), *argv], capture_output=True, text=True, timeout=3_600)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 3):  # status exits 3 past a threshold: still a report
        raise RuntimeError(f"upvotes {' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def seed_posts(database, first: int, last: int, folded_at: datetime) -> None:
    """Posts first..last-1, folded at `folded_at`, with nothing unfolded."""
    for start in range(first, last, SEED_ROWS_PER_COMMIT):
        rows = [
            post_key(f"cat-{n}") + tuple(Counts()) + (folded_at, folded_at)
            for n in range(start, min(last, start + SEED_ROWS_PER_COMMIT))
        ]
        run_with_retries(
            lambda: commit_mutations(  # called at once
                database, lambda batch: batch.insert(POSTS, columns=SEED_COLUMNS, values=rows)
            )
        )


def work(size: int, tag: str) -> list[PostDelta]:
    """WORK_DELTAS one-vote deltas over WORK_POSTS posts spread over the catalogue."""
    posts = [f"cat-{n * size // WORK_POSTS}" for n in range(WORK_POSTS)]
    return [PostDelta.of(posts[i % WORK_POSTS], HOUR, f"{tag}:{i}", upvotes=1, events=1) for i in range(WORK_DELTAS)]


def commands(res: Resources) -> tuple[list[str], list[str]]:
    where = ["--project", res.project, "--instance", res.instance, "--database", res.database]
    return ["fold", *where], ["status", *where, "--json"]


def folded_upvotes(database, post_ids: list[str]) -> dict[str, int]:
    with database.snapshot() as snapshot:
        return dict(
            snapshot.read(
                POSTS, columns=("PostId", "Upvotes"), keyset=spanner.KeySet(keys=[list(post_key(p)) for p in post_ids])
            )
        )


def measure_size(database, res: Resources, size: int, rounds: int) -> dict:
    """`rounds` rounds of the work, each timed through status, fold and an idle fold (medians
    reported: the machine is shared, one sample is noise), then the full-scan baseline on one more."""
    fold, status = commands(res)
    posts = sorted({d.post_id for d in work(size, "")})
    before = folded_upvotes(database, posts)
    runs: dict[str, list[tuple[float, dict]]] = {"status": [], "fold": [], "fold_idle": []}
    for round_no in range(rounds):
        run_with_retries(lambda: write_deltas(database, work(size, f"log-{size}-{round_no}")))
        runs["status"].append(timed_json(status))
        runs["fold"].append(timed_json(fold))
        runs["fold_idle"].append(timed_json(fold))
    run_with_retries(lambda: write_deltas(database, work(size, f"scan-{size}")))
    full_status_s, full_status = timed_json(status + ["--full-scan"])
    scan_s, scanned = timed_json(fold + ["--full-scan"])
    scan_idle_s, scan_idle = timed_json(fold + ["--full-scan"])
    # Every post of the work gained WORK_DELTAS / WORK_POSTS votes a round, folded and read exactly.
    want = {p: before[p] + (rounds + 1) * WORK_DELTAS // WORK_POSTS for p in posts}
    exact = (
        all(
            (r["unfolded_deltas"], r["posts_with_unfolded_deltas"], r["full_scan"]) == (WORK_DELTAS, WORK_POSTS, False)
            for _, r in runs["status"]
        )
        and all((r["deltas_folded"], r["full_scan"]) == (WORK_DELTAS, False) for _, r in runs["fold"])
        and all(r["deltas_folded"] == 0 for _, r in runs["fold_idle"])
        and full_status["unfolded_deltas"] == WORK_DELTAS
        and full_status["full_scan"]
        and (scanned["deltas_folded"], scan_idle["deltas_folded"], scanned["full_scan"]) == (WORK_DELTAS, 0, True)
        and folded_upvotes(database, posts) == want
        and {t.post_id: t.counts.upvotes for t in exact_counts(database, posts)} == want
    )
    point: dict = {"posts": size, "exact": exact}
    for name, samples in runs.items():
        point[f"{name}_s"] = round(statistics.median(seconds for seconds, _ in samples), 2)
        point[f"{name}_samples_s"] = [round(seconds, 2) for seconds, _ in samples]
        point[f"{name}_rows_read"] = max(report["rows_read"] for _, report in samples)
    point["full_scan"] = {
        "fold_s": round(scan_s, 2),
        "fold_rows_read": scanned["rows_read"],
        "fold_idle_s": round(scan_idle_s, 2),
        "fold_idle_rows_read": scan_idle["rows_read"],
        "status_s": round(full_status_s, 2),
        "status_rows_read": full_status["rows_read"],
    }
    return point


def _table(mutation: Mutation) -> str:
    pb = Mutation.pb(mutation)
    return getattr(pb, pb.WhichOneof("operation")).table


def shard_index_variant() -> list[str]:
    """Today's DDL without DeltaCommits, with a shard-led index on PostDeltas: option (a). Its
    ChangeShard (MOD(PostHash, N), a stored generated column) is not in the DDL: the model counts
    the index entry from the statement, and sink_cost adds the column's own cell per row."""
    statements = [s for s in schemas.ddl_statements() if ddl_object_name(s) != f"TABLE {DELTA_COMMITS}"]
    return statements + [SHARD_INDEX_DDL]


def sink_cost() -> dict:
    """Mutations per 1,000 votes (one vote per delta row) of the sink's commits, by the DDL model:
    the commit add_delta_writes builds (after), the same without its DeltaCommits row (before), and
    that one on option (a)'s DDL (plus a generated-column cell per delta row)."""
    today, variant = schema_model(), schema_model(shard_index_variant())
    shapes = {}
    for rows in COMMIT_SHAPES:
        batch = Batch(session=None)
        add_delta_writes(batch, [PostDelta.of(f"p-{i}", HOUR, f"w:{i}:0", upvotes=1, events=1) for i in range(rows)])
        mutations = batch._mutations  # noqa: SLF001 - the client's own mutation objects, as they are committed
        previous = [m for m in mutations if _table(m) != DELTA_COMMITS]
        after = commit_mutation_count(mutations, today)
        before = commit_mutation_count(previous, today)
        shard_index = commit_mutation_count(previous, variant) + rows
        per_1k = 1_000 / rows  # commits per 1,000 votes
        shapes[f"{rows}_rows_per_commit"] = {
            "before": round(before * per_1k),
            "change_log": round(after * per_1k),
            "shard_index": round(shard_index * per_1k),
            "change_log_ratio": round(after / before, 4),
            "shard_index_ratio": round(shard_index / before, 4),
        }
    return shapes


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    database, fresh = fresh_database(res, f"{res.database}-cat")
    now = datetime.now(timezone.utc)
    seeded, points = 0, []
    fold, _ = commands(fresh)
    for size in sizes.catalogue_posts:
        started = time.perf_counter()
        seed_posts(database, seeded, size, now)
        seed_s = time.perf_counter() - started
        if seeded == 0:
            timed_json(fold)  # no cursor yet: this first run scans every post and records one
        seeded = size
        point = measure_size(database, fresh, size, sizes.catalogue_rounds)
        point["seed_s"] = round(seed_s, 1)
        points.append(point)
    first, last = points[0], points[-1]
    return {
        "work": {"deltas": WORK_DELTAS, "posts": WORK_POSTS},
        "points": points,
        "exact": all(p["exact"] for p in points),
        "fold_time_ratio": round(last["fold_s"] / first["fold_s"], 3),
        "status_time_ratio": round(last["status_s"] / first["status_s"], 3),
        "full_scan_fold_time_ratio": round(last["full_scan"]["fold_s"] / first["full_scan"]["fold_s"], 3),
        "full_scan_status_time_ratio": round(last["full_scan"]["status_s"] / first["full_scan"]["status_s"], 3),
        "sink_mutations_per_1k_votes": sink_cost(),
    }


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    catalogue_posts: tuple[int, ...]  # catalogue sizes, the same work at each
    catalogue_rounds: int  # rounds of the work per size (medians of their timings)


FULL = Sizes(catalogue_posts=(10_000, 100_000, 1_000_000), catalogue_rounds=3)
QUICK = Sizes(catalogue_posts=(1_000, 10_000), catalogue_rounds=1)


def targets(document: dict) -> list[dict]:
    cc = document["benchmarks"]["catalogue_cost"]
    first, last = cc["points"][0], cc["points"][-1]
    span = f"{last['posts']:,} vs {first['posts']:,} posts"
    sink = cc["sink_mutations_per_1k_votes"]
    worst = max(shape["change_log_ratio"] for shape in sink.values())
    return [
        target(
            f"Fold of {cc['work']['deltas']:,} new deltas over {cc['work']['posts']} posts, whole command: "
            f"<= 1.5x from {first['posts']:,} to {last['posts']:,} posts",
            f"{cc['fold_time_ratio']:.2f}x ({last['fold_s']:.1f} s vs {first['fold_s']:.1f} s, {span}; rows read "
            f"{first['fold_rows_read']:,} -> {last['fold_rows_read']:,}); full scan, same run: "
            f"{cc['full_scan_fold_time_ratio']:.2f}x",
            cc["fold_time_ratio"] <= 1.5,
        ),
        target(
            f"`upvotes status`, whole command: <= 1.5x from {first['posts']:,} to {last['posts']:,} posts",
            f"{cc['status_time_ratio']:.2f}x ({last['status_s']:.1f} s vs {first['status_s']:.1f} s; rows read "
            f"{first['status_rows_read']:,} -> {last['status_rows_read']:,}); full scan, same run: "
            f"{cc['full_scan_status_time_ratio']:.2f}x",
            cc["status_time_ratio"] <= 1.5,
        ),
        target(
            "Sink write cost of the change log: <= +20% mutations per 1,000 votes",
            "; ".join(
                f"{name.replace('_', ' ')}: {shape['before']:,} -> {shape['change_log']:,} "
                f"({shape['change_log_ratio'] - 1:+.2%}; shard-led index instead: "
                f"{shape['shard_index_ratio'] - 1:+.1%})"
                for name, shape in sink.items()
            ),
            worst <= 1.2,
        ),
    ]


def markdown(document: dict) -> list[str]:
    cc = document["benchmarks"]["catalogue_cost"]
    rows = []
    for p in cc["points"]:
        scan = p["full_scan"]
        rows.append(
            [
                f"{p['posts']:,}",
                f"{p['fold_s']:.1f} / {p['fold_rows_read']:,}",
                f"{p['fold_idle_s']:.1f} / {p['fold_idle_rows_read']:,}",
                f"{p['status_s']:.1f} / {p['status_rows_read']:,}",
                f"{scan['fold_s']:.1f} / {scan['fold_rows_read']:,}",
                f"{scan['fold_idle_s']:.1f} / {scan['fold_idle_rows_read']:,}",
                f"{scan['status_s']:.1f} / {scan['status_rows_read']:,}",
                "yes" if p["exact"] else "NO",
            ]
        )
    sink = cc["sink_mutations_per_1k_votes"]
    return [
        f"Catalogue cost: the same {cc['work']['deltas']:,} new deltas over {cc['work']['posts']} posts at "
        "each catalogue size (seconds of the whole command / rows read)",
        table(
            [
                "Posts",
                "fold",
                "fold, nothing to do",
                "status",
                "full-scan fold (baseline)",
                "full-scan fold, nothing to do",
                "full-scan status",
                "Exact",
            ],
            rows,
        ),
        "Sink mutations per 1,000 votes (one vote per delta row), by the DDL mutation model: "
        + "; ".join(
            f"{name.replace('_', ' ')}: before {s['before']:,}, with the change log {s['change_log']:,} "
            f"({s['change_log_ratio'] - 1:+.2%}), a shard-led index on PostDeltas instead {s['shard_index']:,} "
            f"({s['shard_index_ratio'] - 1:+.1%})"
            for name, s in sink.items()
        )
        + ".",
    ]


BENCHMARK = Benchmark(
    name="catalogue_cost",
    title="What `upvotes fold` and `upvotes status` cost as the catalogue grows",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
)
