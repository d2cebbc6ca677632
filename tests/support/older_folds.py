"""Folds of earlier versions, as a database of this version meets them during an upgrade (issue 44):
Cloud Scheduler keeps launching the previous fold template until the new one is built.

- `older_fold`: one run of an older fold, transaction for transaction. For every post with
  deltas committed at or before its snapshot S, one read-write transaction through the normal
  commit path does what the older fold's did: the counters and FoldedThrough, the hourly rows and
  HourlyFoldedThrough (both to S, as the pre-trending fold of 21e5855 wrote them; its hourly rows
  without HourShard), and, for the fold of the version before issue 44 (`writes_hot_key`), HotKey
  from all of the post's hourly rows; never HotKeyThrough, which neither knew. A post whose
  transaction fails with a non-transient error is skipped and listed, as both did
  (transforms/fold_deltas.py `_or_skip`); then the run's FoldRuns row, ChangesThrough S: the
  cursor readers and the next fold start from.
- `run_pre_trending_fold`: the real thing, the fold of 21e5855 (the last commit before issue 36),
  extracted with `git archive` and run as `upvotes fold` in a subprocess; None where git or the
  commit is not available.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

from schemas.counters import Counts
from schemas.records import CounterSums
from schemas.voter_sketch import union_of
from spanner_store.database import is_transient, run_transaction, run_with_retries
from spanner_store.delta_commits import SkippedPost
from spanner_store.hot_keys import hot_keys_of, read_post_hours
from spanner_store.key_sets import KeySet
from spanner_store.tables import (
    DELTA_COMMIT_SUM_COLUMNS,
    HOT_KEY,
    HOURLY,
    HOURLY_COLUMNS,
    HOURLY_WATERMARK,
    POST_COLUMNS,
    POSTS,
    VOTERS,
    WATERMARK_COLUMNS,
    counts_at,
    sketch_column,
    sketch_value,
)
from spanner_store.unfolded import hour_sums_of, hourly_watermark, read_unfolded
from spanner_writes.folding import FoldOutcome, FoldPlan, choose_snapshot, record_fold_run

PRE_TRENDING_COMMIT = "21e5855"  # 49a5e36^, the last commit before issue 36's HotKey
REPO = Path(__file__).resolve().parents[2]
TREE = (
    "local_runner",
    "pipeline",
    "schemas",
    "spanner_reads",
    "spanner_store",
    "spanner_writes",
    "transforms",
    "upvotes",
)
FOLD_TIMEOUT_S = 120


def older_fold(database, writes_hot_key: bool = False) -> list[SkippedPost]:
    """One run of an older fold (see the module docstring); the posts it skipped."""
    snapshot_at = choose_snapshot(database)
    with database.snapshot(read_timestamp=snapshot_at, multi_use=True) as snapshot:
        watermarks = {
            (h, p): wm for h, p, wm in snapshot.read(POSTS, columns=WATERMARK_COLUMNS, keyset=KeySet(all_=True))
        }
        posts = sorted({(row[0], row[1]) for row in read_unfolded(snapshot, watermarks, POST_COLUMNS[:2], snapshot_at)})
    outcome, skipped = FoldOutcome(), []
    for post in posts:
        try:
            deltas = run_with_retries(
                lambda: run_transaction(  # called at once
                    database, lambda txn: _fold_post(txn, post, snapshot_at, writes_hot_key)
                )
            )
            outcome = outcome.plus(FoldOutcome(posts_folded=int(deltas > 0), deltas_folded=deltas))
        except Exception as error:  # noqa: BLE001 - sorted as the older folds sorted it
            if is_transient(error):
                raise
            skipped.append(SkippedPost(*post, repr(error)))
            outcome = outcome.plus(FoldOutcome(posts_skipped=1))
    record_fold_run(database, FoldPlan(snapshot_at, None, True), outcome, skipped, None)
    return skipped


def _fold_post(transaction, post: tuple[int, str], snapshot_at: datetime, writes_hot_key: bool) -> int:
    """One post's fold transaction as the older fold ran it; the deltas it folded."""
    (row,) = transaction.read(
        POSTS, columns=POST_COLUMNS + (HOURLY_WATERMARK, VOTERS), keyset=KeySet(keys=[list(post)])
    )
    watermark, stored_hourly_mark, voters = row[len(POST_COLUMNS) - 1 :]
    if watermark >= snapshot_at:
        return 0
    hourly_mark = hourly_watermark(watermark, stored_hourly_mark)
    gain, sketches, deltas = Counts(), [], 0
    gain_hours: dict[datetime, CounterSums] = {}
    for committed_at, *sums_row in read_unfolded(transaction, {post: watermark}, DELTA_COMMIT_SUM_COLUMNS, snapshot_at):
        hour, sums = hour_sums_of(sums_row)
        gain, deltas = gain.plus(sums.counts), deltas + 1
        sketches.append(sums.voters)
        if committed_at > hourly_mark:
            gain_hours[hour] = gain_hours.get(hour, CounterSums()).plus(sums)
    hours = read_post_hours(transaction, [post])[post]
    for hour, sums in gain_hours.items():
        hours[hour] = hours.get(hour, CounterSums()).plus(sums)
    if gain_hours:
        transaction.insert_or_update(
            HOURLY,
            columns=HOURLY_COLUMNS,
            values=[(*post, hour, *hours[hour].counts, sketch_column(hours[hour].voters)) for hour in gain_hours],
        )
    columns = POST_COLUMNS + (HOURLY_WATERMARK, VOTERS)
    values = (
        *post,
        *counts_at(row, 2).plus(gain),
        snapshot_at,
        max(hourly_mark, snapshot_at),
        sketch_column(union_of([sketch_value(voters), *sketches])),
    )
    if writes_hot_key and gain_hours:
        columns, values = columns + (HOT_KEY,), values + (hot_keys_of(transaction, {post: hours})[post],)
    transaction.update(POSTS, columns=columns, values=[values])
    return deltas


def run_pre_trending_fold(resources) -> dict | None:
    """`upvotes fold` of PRE_TRENDING_COMMIT on `resources`' database, in a subprocess: the JSON
    it prints. None where that commit cannot be extracted (no git, a shallow clone)."""
    with tempfile.TemporaryDirectory(prefix="pre-trending-fold-") as tree:
        try:
            archive = subprocess.run(
                ["git", "archive", "--format=tar", PRE_TRENDING_COMMIT, *TREE],
                cwd=REPO,
                capture_output=True,
                check=True,
                timeout=FOLD_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "upvotes.cli",
                "fold",
                "--project",
                resources.project,
                "--instance",
                resources.instance,
                "--database",
                resources.database,
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=FOLD_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": tree},
        )
    if done.returncode != 0:
        raise RuntimeError(f"the fold of {PRE_TRENDING_COMMIT} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
