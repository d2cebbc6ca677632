"""`upvotes stream`: the streaming pipeline, until Ctrl-C or SIGTERM, which drain it."""

from __future__ import annotations

import argparse
import sys

from pipeline.params import STREAMING_PARAMS, StreamingSettings
from upvotes.argument_types import positive_float
from upvotes.flags.pipeline import add_pipeline_arguments, pipeline_inputs

HELP = "Run the streaming pipeline: Pub/Sub votes to Spanner delta rows."
PASSES_BEAM_ARGS = True
DRAIN_EPILOG = (
    "Locally, a message is acknowledged only once everything derived from it is written; until then it "
    "waits in the stream's message log (--log-dir), which a restart replays first, so a kill loses and "
    "doubles nothing. Ctrl-C or SIGTERM drains: no more pulls, every open window fires and is written, dead "
    "letters are published, then exit 0 with what was drained. A second signal, or --drain-timeout-s, "
    "stops at once and says how many votes pulled but not yet written wait in the log (exit 4). On Dataflow "
    "Ctrl-C only stops waiting: drain the job with `gcloud dataflow jobs drain`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_pipeline_arguments(parser, STREAMING_PARAMS)
    parser.add_argument(
        "--drain-timeout-s",
        type=positive_float,
        help="local runner: longest drain after Ctrl-C or SIGTERM before stopping at once "
        "(default: 3 windows, at least 30 s)",
    )
    parser.add_argument(
        "--log-dir",
        default=".upvotes/stream-log",
        help="local runner: where the stream keeps its message log, one file per subscription and "
        "database (default .upvotes/stream-log); a restart must use the same one",
    )
    parser.epilog = f"{parser.epilog} {DRAIN_EPILOG}"


def run(args: argparse.Namespace) -> int:
    # Signals are handled from here on, before Beam (seconds to import) is: local_runner/drain.py.
    from local_runner.drain import EXIT_DRAINED, StopOnSignals, default_drain_timeout_s

    argv, values = pipeline_inputs(args, STREAMING_PARAMS)
    settings = StreamingSettings.parse(values)  # this launch's one check of its settings
    drain_timeout_s = args.drain_timeout_s or default_drain_timeout_s(settings.window_seconds)
    with StopOnSignals(drain_timeout_s) as stopping:
        print("streaming pipeline starting; Ctrl-C or SIGTERM drains it", file=sys.stderr, flush=True)
        from local_runner import streaming
        from pipeline.options import pipeline_options

        report = streaming.run(pipeline_options(argv, values, streaming=True), settings, stopping, args.log_dir)
    if report is not None:
        print(f"upvotes stream: {report.text()}", file=sys.stderr, flush=True)
    return EXIT_DRAINED
