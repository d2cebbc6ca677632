"""The commit mutation counter: Spanner's documented rules applied to the schema's DDL,
on the real client's mutation objects, and the meter that bounds every test's commits."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest
from google.cloud import spanner
from google.cloud.spanner_v1.batch import Batch

from schemas.counters import Counts
from schemas.ddl import schema_model
from schemas.records import PostDelta
from spanner_store.database import MUTATION_BUDGET, SPANNER_MUTATION_LIMIT
from spanner_store.delta_commits import MUTATIONS_PER_DELTA_COMMIT, delta_commit_row
from spanner_store.tables import (
    COUNTER_COLUMNS,
    DELTA_COLUMNS,
    DELTA_COMMIT_COLUMNS,
    DELTA_COMMITS,
    DELTAS,
    FOLD_RUN_COLUMNS,
    FOLD_RUN_SKIPPED,
    FOLD_RUN_SKIPPED_COLUMNS,
    FOLD_RUNS,
    KEY_RANGES,
    POST_KEY_COLUMNS,
    POSTS,
    TOP_CANDIDATE_COLUMNS,
    TOP_CANDIDATES,
    VIEW_RETIRE_COLUMNS,
    VIEW_ROW_COLUMNS,
    VIEW_ROWS,
    key_range,
)
from spanner_writes.deltas import (
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    mutations_for,
    write_deltas,
)
from spanner_writes.folding import MAX_SKIPPED_LISTED
from upvotes.devtools.commit_meter import CommitMeter, CommitTooLarge, metering_commits
from upvotes.devtools.mutation_count import commit_key_ranges, commit_mutation_count

MODEL = schema_model()
HOUR = datetime(2026, 11, 22, 1, tzinfo=timezone.utc)
COUNTS = tuple(Counts(upvotes=3))  # one value per counter column, in COUNTER_COLUMNS order
BY_UPVOTES = {i.name: i for i in MODEL[POSTS].indexes}["PostsByUpvotes"]


def count(build) -> float:
    batch = Batch(session=None)
    build(batch)
    return commit_mutation_count(batch._mutations, MODEL)


def test_the_model_reads_every_index_from_the_ddl() -> None:
    by_commit = {i.name: i for i in MODEL[DELTAS].indexes}["PostDeltasByCommit"]
    # The index key, the table key parts it lacks, then the stored columns: 4 key parts,
    # CommittedAt, every counter, Events and Voters.
    assert by_commit.entry == ("PostHash", "PostId", "CommittedAt", "EventHour", "DeltaId") + COUNTER_COLUMNS + (
        "Events",
        "Voters",
    )
    assert BY_UPVOTES.entry == ("Upvotes", "PostHash", "PostId")
    invalid_since = {i.name: i for i in MODEL[VIEW_ROWS].indexes}["TopPostsViewRowsByInvalidSince"]
    assert invalid_since.null_filtered and not by_commit.null_filtered
    (by_hour,) = MODEL["PostHourlyCounts"].indexes
    assert by_hour.entry == ("HourShard", "EventHour", "Upvotes", "PostHash", "PostId")
    (by_hot,) = [i for i in MODEL[POSTS].indexes if i.name == "PostsByHot"]
    assert by_hot.null_filtered and by_hot.entry == ("HotKey", "PostHash", "PostId")


def test_an_insert_counts_its_columns_and_every_index_entry() -> None:
    row = ("p", HOUR, "d") + COUNTS + (1, b"sketch", spanner.COMMIT_TIMESTAMP)
    (by_commit,) = MODEL[DELTAS].indexes
    one = len(DELTA_COLUMNS) + len(by_commit.entry)
    assert one == 9 + 9 + 2 * (len(COUNTER_COLUMNS) - 2)  # 18 with two counters
    assert count(lambda b: b.insert(DELTAS, DELTA_COLUMNS, [(1,) + row])) == one
    assert count(lambda b: b.insert(DELTAS, DELTA_COLUMNS, [(n,) + row for n in range(10)])) == 10 * one
    # The sink's planner agrees with the model for a delta and a new parent.
    assert MUTATIONS_PER_DELTA == one
    assert count(lambda b: b.insert_or_update(POSTS, POST_KEY_COLUMNS, [(1, "p")])) <= MUTATIONS_PER_PARENT


def test_an_update_counts_an_index_only_when_it_writes_a_column_the_index_holds() -> None:
    # Only the hourly watermark: PostsByUpvotes holds neither, its entry is untouched.
    assert count(lambda b: b.update(POSTS, ("PostHash", "PostId", "HourlyFoldedThrough"), [(1, "p", HOUR)])) == 3
    # Upvotes is the index key: the new entry plus the removal of the old one.
    entry = len(BY_UPVOTES.entry)
    assert count(lambda b: b.update(POSTS, ("PostHash", "PostId", "Upvotes"), [(1, "p", 5)])) == 3 + entry + 1
    # Shares is in no index: its column only.
    assert count(lambda b: b.update(POSTS, ("PostHash", "PostId", "Shares"), [(1, "p", 5)])) == 3


def test_a_null_filtered_index_has_no_entry_for_a_null_key() -> None:
    current = ("top", 1, 1, None, "p") + COUNTS
    assert count(lambda b: b.insert(VIEW_ROWS, VIEW_ROW_COLUMNS, [current])) == len(VIEW_ROW_COLUMNS)
    retired = ("top", 1, 1, 2, "p") + COUNTS
    assert count(lambda b: b.insert(VIEW_ROWS, VIEW_ROW_COLUMNS, [retired])) == len(VIEW_ROW_COLUMNS) + 4
    # Retiring a row creates its entry; un-retiring it (back to NULL) removes it.
    assert count(lambda b: b.update(VIEW_ROWS, VIEW_RETIRE_COLUMNS, [("top", 1, 1, 2)])) == 4 + 4 + 1
    assert count(lambda b: b.update(VIEW_ROWS, VIEW_RETIRE_COLUMNS, [("top", 1, 1, None)])) == 4 + 1


def test_deletes_count_per_key_plus_each_index_entry_and_ranges_of_indexed_tables_are_unbounded() -> None:
    assert count(lambda b: b.delete(VIEW_ROWS, spanner.KeySet(keys=[["top", 1, 1], ["top", 2, 1]]))) == 2 * 2
    assert count(lambda b: b.delete("PostHourlyCounts", spanner.KeySet(keys=[[1, "p", HOUR]]))) == 1 + 1
    assert count(lambda b: b.delete("FoldRuns", spanner.KeySet(keys=[["f"]]))) == 1
    assert count(lambda b: b.delete(DELTAS, spanner.KeySet(all_=True))) == math.inf


def test_the_meter_passes_real_commits_and_rejects_one_over_the_limit(database) -> None:
    meter = CommitMeter()
    deltas = [PostDelta.of("meter-p", 1_795_312_800, f"m:{i}", upvotes=1, events=1) for i in range(1_000)]
    with metering_commits(meter):
        write_deltas(database, deltas)
        # Per delta its row and index entry; the parent's key columns (2) and its PostsByUpvotes
        # entry; the commit's TopCandidates and DeltaCommits rows (one per column, no index).
        assert (meter.commits, meter.largest) == (
            1,
            1_000 * MUTATIONS_PER_DELTA
            + 2
            + len(BY_UPVOTES.entry)
            + len(TOP_CANDIDATE_COLUMNS)
            + len(DELTA_COMMIT_COLUMNS),
        )
        assert meter.largest <= mutations_for(deltas)
        too_many = [PostDelta.of("meter-q", 1_795_312_800, f"m:{i}", upvotes=1, events=1) for i in range(5_000)]
        with pytest.raises(CommitTooLarge):
            write_deltas(database, too_many)
    assert meter.too_large and meter.largest > SPANNER_MUTATION_LIMIT
    # The oversized commit was never sent.
    with database.snapshot() as snapshot:
        assert list(snapshot.execute_sql("SELECT COUNT(*) FROM PostDeltas WHERE PostId = 'meter-q'")) == [[0]]


def test_a_view_row_operation_costs_at_most_what_the_view_batches_assume() -> None:
    from spanner_reads.views import MAX_BATCH_ROWS, MUTATIONS_PER_VIEW_ROW

    worst = max(
        count(lambda b: b.insert_or_update(VIEW_ROWS, VIEW_ROW_COLUMNS, [("top", 1, 2, 3, "p") + COUNTS])),
        count(lambda b: b.update(VIEW_ROWS, VIEW_RETIRE_COLUMNS, [("top", 1, 1, 2)])),
        count(lambda b: b.delete(VIEW_ROWS, spanner.KeySet(keys=[["top", 1, 1]]))),
    )
    assert worst <= MUTATIONS_PER_VIEW_ROW
    assert MAX_BATCH_ROWS * MUTATIONS_PER_VIEW_ROW <= MUTATION_BUDGET < SPANNER_MUTATION_LIMIT


def test_key_ranges_count_the_post_hash_ranges_and_other_tables_rows() -> None:
    model = schema_model()
    batch = Batch(None)
    # Two posts in the lowest 1/64 of the hash space, one in the highest: two ranges, plus the
    # TopCandidates row (a table of its own).
    low, high = 5, (1 << 63) - 5
    batch.insert(POSTS, columns=("PostHash", "PostId"), values=[(low, "a"), (low + 1, "b"), (high, "c")])
    batch.insert(
        TOP_CANDIDATES, columns=TOP_CANDIDATE_COLUMNS, values=[(3, spanner.COMMIT_TIMESTAMP, "x", ["a"], 0, 0.0, None)]
    )
    assert commit_key_ranges(batch._mutations, model) == 3
    assert (key_range(low), key_range(high)) == (0, KEY_RANGES - 1)


def test_the_change_log_costs_a_few_mutations_per_commit_not_per_delta() -> None:
    """The sink's per-commit rows as the DDL counts them; a full commit of 1,000 delta rows over
    1,000 posts grows by under 0.1% with its DeltaCommits row."""
    ids = [f"p-{i}" for i in range(1_000)]
    logged = delta_commit_row("c", ids, 1_000, 1_000)
    assert count(lambda b: b.insert(DELTA_COMMITS, DELTA_COMMIT_COLUMNS, [logged])) == MUTATIONS_PER_DELTA_COMMIT == 6
    candidates = (0, spanner.COMMIT_TIMESTAMP, "c", ids[:16], 0, 0.0, HOUR)
    assert count(lambda b: b.insert(TOP_CANDIDATES, TOP_CANDIDATE_COLUMNS, [candidates])) + 6 == MUTATIONS_PER_COMMIT
    deltas = [PostDelta.of(p, 1_795_312_800, "w:0:0", upvotes=1, events=1) for p in ids]
    assert MUTATIONS_PER_DELTA_COMMIT / (mutations_for(deltas) - MUTATIONS_PER_DELTA_COMMIT) < 0.001


def test_a_fold_run_record_with_every_skipped_post_it_lists_fits_one_commit() -> None:
    row = ("f", HOUR, 1, 1, spanner.COMMIT_TIMESTAMP, MAX_SKIPPED_LISTED, HOUR)
    skipped = [("f", n, f"p-{n}", "x" * 1024) for n in range(MAX_SKIPPED_LISTED)]
    cost = count(
        lambda b: (
            b.insert(FOLD_RUNS, FOLD_RUN_COLUMNS, [row]),
            b.insert(FOLD_RUN_SKIPPED, FOLD_RUN_SKIPPED_COLUMNS, skipped),
        )
    )
    assert cost == len(FOLD_RUN_COLUMNS) + MAX_SKIPPED_LISTED * len(FOLD_RUN_SKIPPED_COLUMNS) <= MUTATION_BUDGET


def test_the_writers_planned_costs_are_what_the_model_counts_for_their_writes() -> None:
    """The per-row costs the writers plan with (spanner_store/mutation_cost.py, from the DDL)
    against this model on real client mutations: a new counter column is counted in both."""
    from spanner_store.tables import HOURLY, HOURLY_WRITE_COLUMNS, POST_FOLD_COLUMNS
    from spanner_writes.folding import MUTATIONS_PER_HOUR, MUTATIONS_PER_POST

    post = (1, "p") + COUNTS + (HOUR, HOUR, None, 43_000.5)
    assert count(lambda b: b.update(POSTS, POST_FOLD_COLUMNS, [post])) == MUTATIONS_PER_POST
    assert (
        count(lambda b: b.insert_or_update(HOURLY, HOURLY_WRITE_COLUMNS, [(1, "p", HOUR) + COUNTS + (None, 1)]))
        == MUTATIONS_PER_HOUR
    )
    assert (
        count(lambda b: b.insert_or_update(POSTS, POST_KEY_COLUMNS, [(1, "p")])) + len(MODEL[POSTS].columns) - 2
        == MUTATIONS_PER_PARENT
    )
