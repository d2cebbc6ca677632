"""The streaming pipeline (pipeline/streaming.py) run from this process, as `upvotes stream` runs it.

On Beam's local DirectRunner it installs the project's evaluators first (window_state.py: fired
windows' state freed; pubsub_reader.py: big pulls and a drain), opens the stream's message log
(message_log.py, exactly_once.py: a message is acknowledged only once everything derived from it is
committed, and a restart replays what the last run left unfinished under the writer that wrote it),
beats its heartbeat (heartbeat.py) and runs until a SIGINT or SIGTERM drains it (drain.py). On any
other runner (Dataflow) it hands the signals back and waits for the job, which Dataflow drains
(`gcloud dataflow jobs drain`) and checkpoints itself.

Also runnable as `python -m local_runner.streaming` with the pipeline's flags (--project,
--instance, --database, --subscription, --dead-letter-topic, ...).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from google.cloud import spanner

from local_runner import dofn_specs, option_views, pubsub_reader, signatures, window_state
from local_runner.drain import DrainReport, StopOnSignals, default_drain_timeout_s, say_now
from local_runner.exactly_once import ExactlyOnce
from local_runner.heartbeat import Heartbeat
from local_runner.message_log import LogMismatch, MessageLog, Writer, log_path
from local_runner.pubsub_reader import LOG_ENV, ReaderControl, subscriber_client
from pipeline.options import StreamingOptions, pipeline_options, spanner_project
from pipeline.params import StreamingSettings, pubsub_path
from pipeline.streaming import build, claim_writer, start
from schemas.delta_ids import SUM_SHARDS, writer_identity
from spanner_store.database import open_database
from spanner_store.tables import WRITER_GENERATIONS
from spanner_writes.writers import WriterClaim

# Where `upvotes stream` keeps its message logs unless told (--log-dir): beside the emulators' state.
DEFAULT_LOG_DIR = Path(".upvotes") / "stream-log"


def install_beam_caches() -> None:
    """Caches what Beam works out again and again while it builds and runs a pipeline, the same
    answer every time: the DoFns' state and timer specs (dofn_specs.py), the views of the options
    (option_views.py) and what it reads off functions (signatures.py). For pipelines on the local
    DirectRunner: the stream here, and the tests' pipelines (tests/conftest.py)."""
    dofn_specs.install()
    option_views.install()
    signatures.install()


def prepare_runner(options: PipelineOptions) -> ReaderControl | None:
    """On the local DirectRunner, installs the project's evaluators (window_state.py: fired
    windows' state freed; pubsub_reader.py: big pulls and a drain) and Beam's caches
    (install_beam_caches), and returns the reader's control; on any other runner, nothing."""
    if not window_state.is_local_runner(options.view_as(StandardOptions).runner):
        return None
    window_state.install()
    install_beam_caches()
    return pubsub_reader.install()


def run(
    options: PipelineOptions,
    settings: StreamingSettings,
    stopping: StopOnSignals | None = None,
    log_dir: str | os.PathLike = DEFAULT_LOG_DIR,
) -> DrainReport | None:
    """Runs the pipeline until it ends, from `settings` (checked by the caller, once per launch).
    Locally, until drained by SIGINT or SIGTERM through `stopping` (local_runner/drain.py; entered
    by the caller as early as it can, or here with a timeout of a few windows), its message log in
    `log_dir`: returns what the drain wrote, or ends the process with drain.EXIT_NOT_DRAINED if it
    is cut short. On Dataflow, until the job ends (drain it with `gcloud dataflow jobs drain`);
    `stopping` then hands the signals back."""
    control = prepare_runner(options)
    if not window_state.is_local_runner(options.view_as(StandardOptions).runner):
        if stopping is not None:
            stopping.detach()
        start(options, settings).wait_until_finish()
        return None
    if stopping is None:
        with StopOnSignals(default_drain_timeout_s(settings.window_seconds)) as own:
            return _run_until_drained(options, settings, control, own, Path(log_dir))
    return _run_until_drained(options, settings, control, stopping, Path(log_dir))


def _run_until_drained(
    options: PipelineOptions,
    settings: StreamingSettings,
    control: ReaderControl | None,
    stopping: StopOnSignals,
    log_dir: Path,
) -> DrainReport:
    project = spanner_project(options)
    database = open_database(project, settings.instance, settings.database)
    subscription = pubsub_path(project, "subscriptions", settings.subscription)
    if control is not None:
        control.window_seconds = settings.window_seconds  # an idle reader wakes as each window ends
    stopping.attach(control)
    if control is not None and os.environ.get(LOG_ENV, "").lower() != "off":
        claim, control.once = exactly_once(options, settings, database, subscription, log_dir)
    else:
        if control is not None:
            logging.warning(
                "%s=off: each pull is acknowledged when pulled; a SIGKILL loses what was pulled and not yet written",
                LOG_ENV,
            )
        claim = claim_writer(options, project, settings.instance, settings.database)
    pipeline = beam.Pipeline(options=options)
    build(pipeline, settings, claim, project=project, deduplicate=False)
    result = pipeline.run()
    heartbeat = Heartbeat(database, subscription, claim.identity, settings.window_seconds).start()
    report = stopping.until_finished(result)
    if report.drained and control is not None and control.once is not None:
        control.once.finish()  # every window is written: acknowledge what the last windows held
        control.once.log.close()
    heartbeat.stop(drained=report.drained)
    return report


def exactly_once(
    options: PipelineOptions, settings: StreamingSettings, database, subscription: str, log_dir: Path
) -> tuple[WriterClaim, ExactlyOnce]:
    """The stream's message log opened, and the writer this run writes under: the one of the pulls
    the last run left unfinished, which this run replays first (exactly_once.py says why), else a
    new generation (pipeline/streaming.py claim_writer)."""
    project = spanner_project(options)
    path = log_path(log_dir, subscription, database.name)
    log = MessageLog(path)
    unfinished = log.unfinished()
    if unfinished is not None and not _claimed(database, unfinished.writer):
        # No such writer in this database: the log is of another one (an emulator restarted since,
        # a database re-created). Its messages were pulled for that one: set aside, not replayed.
        aside = log.set_aside()
        say_now(
            f"the message log {path} holds {unfinished.pulls:,} unfinished pulls of writer "
            f"{writer_identity(unfinished.writer.name, unfinished.writer.generation)}, which this database never "
            f"claimed: set aside as {aside}, not replayed"
        )
        log, unfinished = MessageLog(path), None
    if unfinished is not None:
        if (unfinished.window_seconds, unfinished.shards) != (settings.window_seconds, SUM_SHARDS):
            log.close()
            raise LogMismatch(
                f"the stream's message log {path} holds {unfinished.pulls:,} pulls the last run did not finish "
                f"writing, cut into {unfinished.window_seconds} s windows of {unfinished.shards} shards: start "
                f"`upvotes stream` with --window-seconds {unfinished.window_seconds} (and this version's "
                f"{SUM_SHARDS} shards) so that they are replayed into the same panes (other windows would not "
                "collide with what was written, and count it twice); change it once that run has drained"
            )
        writer = unfinished.writer
        claim = WriterClaim(
            writer.name, writer.generation, writer_identity(writer.name, writer.generation), writer.key_format
        )
        say_now(
            f"replaying {unfinished.pulls:,} pulls ({unfinished.windows} windows) that the last run pulled and "
            f"did not finish writing, as writer {claim.identity}, before pulling anything new"
        )
        floor_us = unfinished.last_window_end_us
    else:
        claim = claim_writer(options, project, settings.instance, settings.database)
        floor_us = 0
    log.start_run(Writer(claim.writer_name, claim.generation, claim.key_format), settings.window_seconds, SUM_SHARDS)
    subscriber = subscriber_client()
    deadline_s = subscriber.get_subscription(request={"subscription": subscription}).ack_deadline_seconds
    return claim, ExactlyOnce(log, subscriber, subscription, settings.window_seconds, floor_us, deadline_s or 10)


def _claimed(database, writer: Writer) -> bool:
    """Whether `database` has claimed this writer's generation (or a later one)."""
    with database.snapshot() as snapshot:
        rows = list(
            snapshot.read(WRITER_GENERATIONS, columns=("Generation",), keyset=spanner.KeySet(keys=[[writer.name]]))
        )
    return bool(rows) and rows[0][0] >= writer.generation


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    options = pipeline_options(None, streaming=True)
    report = run(options, options.view_as(StreamingOptions).validated())
    if report is not None:
        say_now(report.text())
