"""Fold pipeline (batch): moves every unfolded delta into the Posts aggregate, exactly once.

Run it on a schedule (Cloud Scheduler launches its flex template on Dataflow), or locally:

    upvotes fold --project demo-project --instance upvotes --database votes [--every 30]

On Dataflow:

    python -m pipeline.fold --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py --instance I --database D
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult

from pipeline.options import FoldOptions, pipeline_options, spanner_project
from pipeline.params import FoldSettings
from spanner_writes.folding import FoldOutcome
from transforms.fold_deltas import FoldDeltas


def build(pipeline: beam.Pipeline, settings: FoldSettings, *, project: str) -> beam.PCollection:
    """Adds the fold graph to `pipeline`, from `settings` as checked once at launch, Spanner in
    `project`; returns the PCollection of the run's FoldOutcome. Pure: it only wires."""
    return pipeline | "FoldDeltas" >> FoldDeltas(
        project,
        settings.instance,
        settings.database,
        settings.posts_per_commit,
        full_scan=settings.full_scan,
        data_boost=settings.data_boost,
        max_delta_rows_per_run=settings.max_delta_rows_per_run,
    )


def outcome_from_metrics(result) -> FoldOutcome:
    """The run's counts, read back from its Beam metrics and summed over the steps that count them
    (rows_read is counted by every read step)."""
    counters: dict[str, int] = {}
    for counter in result.metrics().query()["counters"]:
        if counter.key.metric.namespace == "FoldDeltas":
            name = counter.key.metric.name
            counters[name] = counters.get(name, 0) + (counter.committed or 0)
    return FoldOutcome(**{name: counters.get(name, 0) for name in FoldOutcome._fields})


def launch(argv: Sequence[str] | None = None, values: Mapping[str, object] | None = None) -> PipelineResult:
    """Checks the settings (once), builds and submits one fold without waiting (what a
    flex-template launch does)."""
    options = pipeline_options(argv, values, streaming=False)
    settings = options.view_as(FoldOptions).validated()
    pipeline = beam.Pipeline(options=options)
    build(pipeline, settings, project=spanner_project(options))
    return pipeline.run()


def run(argv: Sequence[str] | None = None, values: Mapping[str, object] | None = None) -> tuple[FoldOutcome, float]:
    """Runs one fold to completion; returns its counts and the seconds it took."""
    started = time.monotonic()
    result = launch(argv, values)
    result.wait_until_finish()
    return outcome_from_metrics(result), time.monotonic() - started


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    outcome, seconds = run()
    logging.info("folded %d deltas into %d posts in %.1f s", outcome.deltas_folded, outcome.posts_folded, seconds)
