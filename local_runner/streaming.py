"""The streaming pipeline (pipeline/streaming.py) run from this process, as `upvotes stream` runs it.

On Beam's local DirectRunner it installs the project's evaluators first (window_state.py: fired
windows' state freed; pubsub_reader.py: big pulls and a drain) and runs until a SIGINT or SIGTERM
drains it (drain.py). On any other runner (Dataflow) it hands the signals back and waits for the
job, which Dataflow drains (`gcloud dataflow jobs drain`).

Also runnable as `python -m local_runner.streaming` with the pipeline's flags (--project,
--instance, --database, --subscription, --dead-letter-topic, ...).
"""
from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from local_runner import dofn_specs, pubsub_reader, window_state
from local_runner.drain import DrainReport, StopOnSignals, default_drain_timeout_s, say_now
from local_runner.pubsub_reader import ReaderControl
from pipeline.options import StreamingOptions, pipeline_options
from pipeline.params import StreamingSettings
from pipeline.streaming import start


def prepare_runner(options: PipelineOptions) -> ReaderControl | None:
    """On the local DirectRunner, installs the project's evaluators (window_state.py: fired
    windows' state freed; pubsub_reader.py: big pulls and a drain) and the DoFn specs cache
    (dofn_specs.py), and returns the reader's control; on any other runner, nothing."""
    if not window_state.is_local_runner(options.view_as(StandardOptions).runner):
        return None
    window_state.install()
    dofn_specs.install()
    return pubsub_reader.install()


def run(options: PipelineOptions, settings: StreamingSettings,
        stopping: StopOnSignals | None = None) -> DrainReport | None:
    """Runs the pipeline until it ends, from `settings` (checked by the caller, once per launch).
    Locally, until drained by SIGINT or SIGTERM through `stopping` (local_runner/drain.py; entered
    by the caller as early as it can, or here with a timeout of a few windows): returns what the
    drain wrote, or ends the process with drain.EXIT_NOT_DRAINED if it is cut short. On
    Dataflow, until the job ends (drain it with `gcloud dataflow jobs drain`); `stopping` then
    hands the signals back."""
    control = prepare_runner(options)
    if not window_state.is_local_runner(options.view_as(StandardOptions).runner):
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
    if control is not None:
        control.window_seconds = settings.window_seconds  # an idle reader wakes as each window ends
    stopping.attach(control)
    return stopping.until_finished(start(options, settings))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    options = pipeline_options(None, streaming=True)
    report = run(options, options.view_as(StreamingOptions).validated())
    if report is not None:
        say_now(report.text())
