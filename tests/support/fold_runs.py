"""One fold run for tests: FoldDeltas in a test pipeline, as the fold job runs it; and the deltas
of a broken client clock, one hour apart, that the large-fold tests fold."""

from __future__ import annotations

from datetime import datetime, timezone

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.fold import outcome_from_metrics
from pipeline.params import FOLD_PARAMS, defaults
from schemas.records import PostDelta
from spanner_writes.folding import FoldOutcome
from transforms.fold_deltas import FoldDeltas

FOLD_DEFAULTS = defaults(FOLD_PARAMS)
HOUR_2001 = int(datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp())


def run_fold(
    resources,
    snapshot_at=None,
    posts_per_commit: int = 500,
    full_scan: bool = False,
    max_delta_rows: int = FOLD_DEFAULTS["max_delta_rows_per_run"],
) -> FoldOutcome:
    """Folds the database of `resources` (project, instance, database); the outcome comes from the
    run's metrics, and the run must record exactly one FoldRuns row. The fold follows the change
    log from the previous run's cursor (a full scan when there is none, or when asked)."""
    pipeline = TestPipeline()
    outcome = pipeline | FoldDeltas(
        resources.project,
        resources.instance,
        resources.database,
        posts_per_commit,
        snapshot_at,
        full_scan=full_scan,
        data_boost=False,
        max_delta_rows_per_run=max_delta_rows,
    )
    assert_that(outcome | beam.combiners.Count.Globally(), equal_to([1]))
    result = pipeline.run()
    result.wait_until_finish()
    return outcome_from_metrics(result)


def distinct_hour_deltas(post_id: str, hours: int, tag: str) -> list[PostDelta]:
    """One vote per hour from 2001 on, each hour a different one: what a broken client clock makes."""
    return [
        PostDelta.of(post_id, HOUR_2001 + 3600 * i, f"{tag}:{i}", upvotes=1 + i % 3, shares=i % 2, events=1)
        for i in range(hours)
    ]
