"""Streaming pipeline: Pub/Sub vote events -> validated -> summed per post and window -> Spanner deltas.

    Pub/Sub ──ReadVotes──> ParseVotes ──sums──> WindowAndSumVotes ──PostDelta──> WriteDeltaRows
                                  ├──states─> WindowAndMergeVoteStates ──> ApplyVoteStates   │ failed
                                  └──rejected──────────┐                        │ failed     │
                                                       └──> PublishDeadLetters <┴────────────┘

Delta events become blind-write delta rows; vote-state events (one vote per user) are merged to
each user's latest state per window and applied against the stored state, with the counts they
move, in one transaction per batch (spanner_store/votes.py).

Locally, on the emulators (the runner is named explicitly: the DirectRunner would first
try to download the Prism runner):

    upvotes stream --project demo-project --instance upvotes --database votes \\
        --subscription votes-sub --dead-letter-topic votes-dead-letter

Ctrl-C or SIGTERM drains it: no more pulls, every open window fired and written, then exit
(pipeline/drain.py, with the project's reader: pipeline/local_reader.py).

On Dataflow (or launch the flex template, see templates/README.md):

    python -m pipeline.streaming --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py --instance I --database D \\
        --subscription projects/P/subscriptions/S --dead-letter-topic projects/P/topics/T
"""
from __future__ import annotations

import logging
import uuid
from typing import Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult

from pipeline import local_reader, local_runner
from pipeline.drain import DrainReport, StopOnSignals, default_drain_timeout_s, say_now
from pipeline.local_reader import ReaderControl
from pipeline.options import StreamingOptions, pipeline_options, spanner_project
from pipeline.params import StreamingSettings, pubsub_path
from schemas.contract import EventTimePolicy
from spanner_store.database import open_database
from spanner_store.writers import WriterClaim, claim_generation
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
    """Claims this launch's writer generation (spanner_store/writers.py), once per launch, before
    the pipeline is built: an update (`--update`) keeps the running job's generation and so its
    delta keys; any other launch takes a new one, so a drained-and-relaunched job never
    rewrites a key of its predecessor."""
    update = bool(options.view_as(GoogleCloudOptions).update)
    claim = claim_generation(open_database(project, instance, database), writer_name(options), update)
    logging.info("writer %s, generation %d (%s)", claim.writer_name, claim.generation,
                 "update: kept" if update else "fresh launch: new")
    return claim


def build(pipeline: beam.Pipeline, settings: StreamingSettings, claim: WriterClaim, *, project: str,
          deduplicate: bool) -> None:
    """Adds the streaming graph to `pipeline`: `settings` as checked once at launch, the delta
    keys those of the writer `claim` (claim_writer), Spanner and Pub/Sub in `project`, messages
    deduplicated by ID if `deduplicate` (Dataflow only). Pure: it only wires, and checks, reads
    and writes nothing; tests and launch share it."""
    messages = pipeline | "ReadVotes" >> ReadVotes(
        pubsub_path(project, "subscriptions", settings.subscription), deduplicate=deduplicate)
    parsed = messages | "ParseVotes" >> ParseVotes(EventTimePolicy(max_clock_skew_s=settings.max_clock_skew_seconds))
    failed_rows = (
        parsed.sums
        | "WindowAndSumVotes" >> WindowAndSumVotes(claim.identity, settings.window_seconds, claim.key_format)
        | "WriteDeltaRows" >> WriteDeltaRows(project, settings.instance, settings.database, settings.rows_per_commit)
    )
    failed_states = (
        parsed.states
        | "WindowAndMergeVoteStates" >> WindowAndMergeVoteStates(settings.window_seconds)
        | "ApplyVoteStates" >> ApplyVoteStates(project, settings.instance, settings.database, settings.rows_per_commit)
    )
    (parsed.rejected, failed_rows, failed_states) | "PublishDeadLetters" >> PublishDeadLetters(
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


def prepare_runner(options: PipelineOptions) -> ReaderControl | None:
    """On the local DirectRunner, installs the project's evaluators (pipeline/local_runner.py:
    fired windows' state freed; pipeline/local_reader.py: big pulls and a drain) and returns the
    reader's control; on any other runner, nothing."""
    if not local_runner.is_local_runner(options.view_as(StandardOptions).runner):
        return None
    local_runner.install()
    return local_reader.install()


def launch(argv: Sequence[str] | None = None, values: Mapping[str, object] | None = None) -> PipelineResult:
    """Checks the settings (once), installs the local runner's evaluators (prepare_runner),
    claims the writer generation, builds and submits the pipeline without waiting (what a
    flex-template launch does)."""
    options = pipeline_options(argv, values, streaming=True)
    settings = options.view_as(StreamingOptions).validated()
    prepare_runner(options)
    return start(options, settings)


def run(options: PipelineOptions, settings: StreamingSettings,
        stopping: StopOnSignals | None = None) -> DrainReport | None:
    """Runs the pipeline until it ends, from `settings` (checked by the caller, once per launch).
    Locally, until drained by SIGINT or SIGTERM through `stopping` (pipeline/drain.py; entered
    by the caller as early as it can, or here with a timeout of a few windows): returns what the
    drain wrote, or ends the process with drain.EXIT_NOT_DRAINED if it is cut short. On
    Dataflow, until the job ends (drain it with `gcloud dataflow jobs drain`); `stopping` then
    hands the signals back."""
    control = prepare_runner(options)
    if not local_runner.is_local_runner(options.view_as(StandardOptions).runner):
        if stopping is not None:
            stopping.detach()
        start(options, settings).wait_until_finish()
        return None
    if stopping is None:
        with StopOnSignals(default_drain_timeout_s(settings.window_seconds)) as own:
            return _run_until_drained(options, settings, control, own)
    return _run_until_drained(options, settings, control, stopping)


def _run_until_drained(options: PipelineOptions, settings: StreamingSettings, control: ReaderControl | None,
                       stopping: StopOnSignals) -> DrainReport:
    stopping.attach(control)
    return stopping.until_finished(start(options, settings))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    options = pipeline_options(None, streaming=True)
    report = run(options, options.view_as(StreamingOptions).validated())
    if report is not None:
        say_now(report.text())
