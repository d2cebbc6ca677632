"""Benchmark: the latency of `upvotes status`'s Spanner reads at 100,000 posts, and what they read.

`python -m bench.status_cost [--posts N]` on freshly started emulators (not part of the full
`python -m bench` run). Setup, in a fresh database:

- N posts, each with OLD_PER_POST old deltas committed two days ago (an explicit past CommittedAt, as a
  commit-timestamp column accepts) and a watermark one day ago: folded, and outside the
  10-minute recent window, like the bulk of the 30 days of deltas kept in production; and the
  FoldRuns row of the fold that folded them (ChangesThrough one day ago: the cursor);
- UNFOLDED fresh deltas over as many posts, committed now by the sink's own commit (unfolded,
  recent, with their DeltaCommits row).

Measured in the same run, same database:

- status: spanner_reads.health.delta_health, what `upvotes status` reads (a strong read-only
  snapshot: the cursor, the DeltaCommits rows after it, then the watermarks and unfolded index
  ranges of the posts they name);
- status --full-scan: the same with every Posts row's watermark read instead (what status read
  before the change log);
- baseline: the same unfolded count and oldest commit as one SQL join of PostDeltas to Posts
  on CommittedAt > FoldedThrough, which reads every delta kept.

Reported: p50 latency of each, their ratio, rows each reads, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from google.cloud import spanner

from bench.measure import latency_summary, peak_rss_mib, timed_calls
from bench.stack import bench_resources, fresh_database, quiet
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads.health import delta_health
from spanner_store.database import commit_mutations, run_with_retries
from spanner_store.tables import (
    DELTA_COLUMNS,
    DELTAS,
    FOLD_RUN_COLUMNS,
    FOLD_RUNS,
    HOT_KEY_THROUGH,
    POST_COLUMNS,
    POSTS,
    delta_key,
    post_key,
)
from spanner_writes.deltas import write_deltas
from upvotes.devtools.emulators import running_emulators
from upvotes.operations.provision import provision

HOUR = 1_795_312_800
ROWS_PER_COMMIT = 2_000
UNFOLDED = 1_000
OLD_PER_POST = 3
SAMPLES = 5
# The baseline: the obvious SQL, which joins every delta kept (bench only; status never runs it).
UNFOLDED_BY_JOIN_SQL = """SELECT COUNT(*), MIN(d.CommittedAt)
FROM PostDeltas AS d JOIN Posts AS p ON d.PostHash = p.PostHash AND d.PostId = p.PostId
WHERE d.CommittedAt > p.FoldedThrough"""


def populate(database, posts: int, now: datetime) -> None:
    """`posts` folded posts with one old delta each, then UNFOLDED fresh deltas."""
    old_commit, watermark = now - timedelta(days=2), now - timedelta(days=1)
    post_ids = [f"s-{i}" for i in range(posts)]
    for first in range(0, posts, ROWS_PER_COMMIT // OLD_PER_POST):
        chunk = post_ids[first : first + ROWS_PER_COMMIT // OLD_PER_POST]
        one_upvote = tuple(Counts(upvotes=1))
        # Folded with no hourly row: a NULL HotKey, fenced at the watermark (as the fold leaves it).
        post_rows = [post_key(p) + one_upvote + (watermark, watermark) for p in chunk]
        delta_rows = [
            delta_key(PostDelta.of(p, HOUR, f"old:{k}:0", upvotes=1, events=1)) + one_upvote + (1, None, old_commit)
            for p in chunk
            for k in range(OLD_PER_POST)
        ]

        def write(batch, post_rows=post_rows, delta_rows=delta_rows) -> None:
            batch.insert(POSTS, columns=POST_COLUMNS + (HOT_KEY_THROUGH,), values=post_rows)
            batch.insert(DELTAS, columns=DELTA_COLUMNS, values=delta_rows)

        run_with_retries(lambda: commit_mutations(database, write))  # called at once
    run_with_retries(
        lambda: commit_mutations(
            database,
            lambda batch: batch.insert(
                FOLD_RUNS,
                columns=FOLD_RUN_COLUMNS,
                values=[("seeded", watermark, posts, posts * OLD_PER_POST, spanner.COMMIT_TIMESTAMP, 0, watermark)],
            ),
        )
    )
    fresh = [
        PostDelta.of(post_ids[i * posts // UNFOLDED], HOUR, f"fresh:{i}:0", upvotes=1, events=1)
        for i in range(UNFOLDED)
    ]
    run_with_retries(lambda: write_deltas(database, fresh))


def join_baseline(database) -> tuple[int, datetime]:
    with database.snapshot() as snapshot:
        return tuple(list(snapshot.execute_sql(UNFOLDED_BY_JOIN_SQL))[0])


def measure(posts: int) -> dict:
    res = bench_resources("status")
    provision(res, log=quiet)
    database, _ = fresh_database(res, f"bench-status-{posts}")
    populate(database, posts, datetime.now(timezone.utc))

    health, scanned = delta_health(database), delta_health(database, full_scan=True)
    count, _ = join_baseline(database)
    assert health.unfolded_deltas == scanned.unfolded_deltas == count == UNFOLDED, (health, scanned, count)
    assert health.oldest_unfolded_commit == scanned.oldest_unfolded_commit and not health.full_scan
    status_s = timed_calls(lambda: delta_health(database), SAMPLES)
    full_scan_s = timed_calls(lambda: delta_health(database, full_scan=True), SAMPLES)
    baseline_s = timed_calls(lambda: join_baseline(database), SAMPLES)
    status, full_scan, baseline = latency_summary(status_s), latency_summary(full_scan_s), latency_summary(baseline_s)
    return {
        "posts": posts,
        "deltas_kept": posts * OLD_PER_POST + UNFOLDED,
        "unfolded_deltas": health.unfolded_deltas,
        "status": {
            **status,
            "rows_read": health.rows_read,
            "reads": "the cursor, the change rows after it, the posts they name and their unfolded deltas",
        },
        "status_full_scan": {
            **full_scan,
            "rows_read": scanned.rows_read,
            "reads": f"every Posts row ({posts}) and each one's unfolded index range",
        },
        "baseline_join": {
            **baseline,
            "reads": f"every delta kept ({posts * OLD_PER_POST + UNFOLDED}) joined to its Posts row",
        },
        "status_over_baseline_p50": round(status["p50_ms"] / baseline["p50_ms"], 3),
        "status_over_full_scan_p50": round(status["p50_ms"] / full_scan["p50_ms"], 3),
        "peak_rss": peak_rss_mib(),
        "read_kind": "strong read-only snapshots on the Spanner emulator",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.status_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--posts", type=int, default=100_000, help="posts in the database (default 100,000)")
    args = parser.parse_args(argv)
    with running_emulators(Path(tempfile.mkdtemp(prefix="bench-status-")), quiet) as env:
        os.environ.update(env)
        os.environ.setdefault("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "false")
        print(json.dumps(measure(args.posts), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
