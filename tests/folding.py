"""One fold run for tests: FoldDeltas in a test pipeline, as the fold job runs it."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.fold import outcome_from_metrics
from pipeline.params import FOLD_PARAMS, defaults
from spanner_writes.folding import FoldOutcome
from transforms.fold_deltas import FoldDeltas


FOLD_DEFAULTS = defaults(FOLD_PARAMS)


def run_fold(resources, snapshot_at=None, posts_per_commit: int = 500, full_scan: bool = False,
             max_delta_rows: int = FOLD_DEFAULTS["max_delta_rows_per_run"]) -> FoldOutcome:
    """Folds the database of `resources` (project, instance, database); the outcome comes from the
    run's metrics, and the run must record exactly one FoldRuns row. The fold follows the change
    log from the previous run's cursor (a full scan when there is none, or when asked)."""
    pipeline = TestPipeline()
    outcome = pipeline | FoldDeltas(resources.project, resources.instance, resources.database,
                                    posts_per_commit, snapshot_at, full_scan=full_scan, data_boost=False,
                                    max_delta_rows_per_run=max_delta_rows)
    assert_that(outcome | beam.combiners.Count.Globally(), equal_to([1]))
    result = pipeline.run()
    result.wait_until_finish()
    return outcome_from_metrics(result)
