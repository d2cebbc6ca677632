"""Streaming pipeline: Pub/Sub vote events -> validated -> summed per post and window -> Spanner deltas.

    Pub/Sub ──ReadVotes──> ParseVotes ──sums──> WindowAndSumVotes ──PostDelta──> WriteDeltaRows
                                  ├──states─> WindowAndMergeVoteStates ──> ApplyVoteStates   │ failed
                                  └──rejected──────────┐                        │ failed     │
                                                       └──> PublishDeadLetters <┴────────────┘

Delta events become blind-write delta rows; vote-state events (one vote per user) are merged to
each user's latest state per window and applied against the stored state, with the counts they
move, in one transaction per batch (spanner_writes/votes.py).

Locally, on the emulators, `upvotes stream` runs it through the local runner
(local_runner/streaming.py: the project's Pub/Sub reader and window-state cleanup on the
DirectRunner, named explicitly: the plain DirectRunner would first try to download the Prism
runner; Ctrl-C or SIGTERM drains it, local_runner/drain.py):

    upvotes stream --project demo-project --instance upvotes --database votes \\
        --subscription votes-sub --dead-letter-topic votes-dead-letter

This module holds only what Dataflow runs too: the wiring (build) and the launch.
On Dataflow (or launch the flex template, see templates/README.md):

    python -m pipeline.streaming --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py --instance I --database D \\
        --subscription projects/P/subscriptions/S --dead-letter-topic projects/P/topics/T
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult

from pipeline.options import StreamingOptions, pipeline_options, spanner_project
from pipeline.params import StreamingSettings, pubsub_path
from schemas.contract import EventTimePolicy
from spanner_store.database import open_database
from spanner_writes.sinks import DELTA_ROWS, SINKS, VOTE_STATES
from spanner_writes.writers import WriterClaim, claim_generation
from transforms.dead_letter import PublishDeadLetters
from transforms.parse_and_sum import ParseVotes
from transforms.read_votes import ReadVotes
from transforms.spanner_sink import WriteDeltaRows
from transforms.vote_state_sink import ApplyVoteStates
from transforms.vote_states import WindowAndMergeVoteStates
from transforms.windowing import WindowAndSumVotes


def is_dataflow(options: PipelineOptions) -> bool:
    return "dataflow" in (options.view_as(StandardOptions).runner or "").lower()


def writer_name(options: PipelineOptions) -> str:
    """The name this run writes under: the job name (kept by an in-place update), or a fresh
    local name when none is given."""
    return options.view_as(GoogleCloudOptions).job_name or f"local-{uuid.uuid4().hex[:12]}"


def claim_writer(options: PipelineOptions, project: str, instance: str, database: str) -> WriterClaim:
    """Claims this launch's writer generation (spanner_writes/writers.py), once per launch, before
    the pipeline is built: an update (`--update`) keeps the running job's generation and so its
    delta keys; any other launch takes a new one, so a drained-and-relaunched job never
    rewrites a key of its predecessor."""
    update = bool(options.view_as(GoogleCloudOptions).update)
    claim = claim_generation(open_database(project, instance, database), writer_name(options), update)
    logging.info(
        "writer %s, generation %d (%s)",
        claim.writer_name,
        claim.generation,
        "update: kept" if update else "fresh launch: new",
    )
    return claim


def build(
    pipeline: beam.Pipeline, settings: StreamingSettings, claim: WriterClaim, *, project: str, deduplicate: bool
) -> None:
    """Adds the streaming graph to `pipeline`: `settings` as checked once at launch, the delta
    keys those of the writer `claim` (claim_writer), Spanner and Pub/Sub in `project`, messages
    deduplicated by ID if `deduplicate` (Dataflow only). Pure: it only wires, and checks, reads
    and writes nothing; tests and launch share it."""
    messages = pipeline | "ReadVotes" >> ReadVotes(
        pubsub_path(project, "subscriptions", settings.subscription), deduplicate=deduplicate
    )
    parsed = messages | "ParseVotes" >> ParseVotes(EventTimePolicy(max_clock_skew_s=settings.max_clock_skew_seconds))
    failed = {
        DELTA_ROWS: (
            parsed.sums
            | "WindowAndSumVotes" >> WindowAndSumVotes(claim.identity, settings.window_seconds, claim.key_format)
            | DELTA_ROWS.step >> WriteDeltaRows(project, settings.instance, settings.database, settings.rows_per_commit)
        ),
        VOTE_STATES: (
            parsed.states
            | "WindowAndMergeVoteStates" >> WindowAndMergeVoteStates(settings.window_seconds)
            | VOTE_STATES.step
            >> ApplyVoteStates(project, settings.instance, settings.database, settings.rows_per_commit)
        ),
    }
    # Every declared sink's dead letters, in the registry's order (PublishDeadLetters labels its
    # inputs by position); a declared sink not wired here fails the build.
    (parsed.rejected, *(failed[sink] for sink in SINKS)) | "PublishDeadLetters" >> PublishDeadLetters(
        pubsub_path(project, "topics", settings.dead_letter_topic)
    )


def start(options: PipelineOptions, settings: StreamingSettings) -> PipelineResult:
    """Claims the writer, builds the graph from `settings` (checked by the caller, once per
    launch) and submits it without waiting."""
    project = spanner_project(options)
    claim = claim_writer(options, project, settings.instance, settings.database)
    pipeline = beam.Pipeline(options=options)
    build(pipeline, settings, claim, project=project, deduplicate=is_dataflow(options))
    return pipeline.run()


def launch(argv: Sequence[str] | None = None, values: Mapping[str, object] | None = None) -> PipelineResult:
    """Checks the settings (once), claims the writer generation, builds and submits the pipeline
    without waiting (what a flex-template launch does). The local runner's evaluators are not
    installed here: local_runner.streaming runs the pipeline locally."""
    options = pipeline_options(argv, values, streaming=True)
    settings = options.view_as(StreamingOptions).validated()
    return start(options, settings)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    launch().wait_until_finish()
