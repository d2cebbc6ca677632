"""Streaming pipeline: Pub/Sub vote events -> validated -> summed per post and window -> Spanner deltas.

    Pub/Sub ──ReadVotes──> ParseVotes ──votes──> WindowAndSumVotes ──PostDelta──> WriteDeltaRows
                                  └──rejected──────────┐                               │ failed
                                                       └──> PublishDeadLetters <───────┘

Locally, on the emulators (the runner is named explicitly: the DirectRunner would first
try to download the Prism runner):

    upvotes stream --project demo-project --instance upvotes --database votes \\
        --subscription votes-sub --dead-letter-topic votes-dead-letter

On Dataflow (or launch the flex template, see templates/README.md):

    python -m pipeline.streaming --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py --instance I --database D \\
        --subscription projects/P/subscriptions/S --dead-letter-topic projects/P/topics/T
"""
from __future__ import annotations

import logging
import uuid
from typing import Sequence

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions, StandardOptions

from pipeline.options import SpannerOptions, StreamingOptions, spanner_project
from transforms.dead_letter import PublishDeadLetters
from transforms.parse import ParseVotes
from transforms.spanner_sink import WriteDeltaRows
from transforms.windowing import WindowAndSumVotes

LOCAL_RUNNER = "BundleBasedDirectRunner"
EVENT_ID_ATTRIBUTE = "event_id"


def is_dataflow(options: PipelineOptions) -> bool:
    return "dataflow" in (options.view_as(StandardOptions).runner or "").lower()


def writer_name(options: PipelineOptions) -> str:
    """Names this run in every delta key. On Dataflow the job name, which an in-place update
    keeps (so a replayed pane keeps its key); locally a fresh name per run."""
    job_name = options.view_as(GoogleCloudOptions).job_name
    return job_name if job_name and is_dataflow(options) else f"local-{uuid.uuid4().hex[:12]}"


class ReadVotes(beam.PTransform):
    """Pub/Sub subscription -> PubsubMessage (data and attributes).

    On Dataflow, messages redelivered or republished with the same event_id attribute are
    dropped by the service (id_label). The DirectRunner does not support id_label.
    """

    def __init__(self, subscription: str, deduplicate: bool) -> None:
        super().__init__()
        self._subscription = subscription
        self._deduplicate = deduplicate

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        return begin | "Pull" >> beam.io.ReadFromPubSub(
            subscription=self._subscription,
            with_attributes=True,
            id_label=EVENT_ID_ATTRIBUTE if self._deduplicate else None,
        )


def build(pipeline: beam.Pipeline, options: PipelineOptions) -> None:
    """Adds the streaming graph to `pipeline`; tests and run() share it."""
    opts = options.view_as(StreamingOptions).validated()
    db = options.view_as(SpannerOptions)
    project = spanner_project(options)

    messages = pipeline | "ReadVotes" >> ReadVotes(opts.pubsub_path("subscriptions", opts.subscription), is_dataflow(options))
    parsed = messages | "ParseVotes" >> ParseVotes()
    failed_rows = (
        parsed.votes
        | "WindowAndSumVotes" >> WindowAndSumVotes(writer_name(options), int(opts.window_seconds))
        | "WriteDeltaRows" >> WriteDeltaRows(project, db.instance, db.database, int(opts.rows_per_commit))
    )
    (parsed.rejected, failed_rows) | "PublishDeadLetters" >> PublishDeadLetters(
        opts.pubsub_path("topics", opts.dead_letter_topic)
    )


def pipeline_options(argv: Sequence[str] | None) -> PipelineOptions:
    options = PipelineOptions(argv)
    options.view_as(StandardOptions).streaming = True
    options.view_as(SetupOptions).save_main_session = True
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = LOCAL_RUNNER
    return options


def launch(argv: Sequence[str] | None = None) -> PipelineResult:
    """Builds and submits the pipeline without waiting (what a flex-template launch does)."""
    options = pipeline_options(argv)
    pipeline = beam.Pipeline(options=options)
    build(pipeline, options)
    return pipeline.run()


def run(argv: Sequence[str] | None = None) -> None:
    """Runs the pipeline until it is cancelled or fails."""
    launch(argv).wait_until_finish()


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
