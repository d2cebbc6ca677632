"""`upvotes stream`: the streaming pipeline, until Ctrl-C."""
from __future__ import annotations

import argparse
import sys

from pipeline.params import STREAMING_PARAMS
from upvotes.commands.pipeline_flags import add_pipeline_arguments, pipeline_inputs

HELP = "Run the streaming pipeline: Pub/Sub votes to Spanner delta rows."
PASSES_BEAM_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_pipeline_arguments(parser, STREAMING_PARAMS)


def run(args: argparse.Namespace) -> int:
    from pipeline import streaming

    argv, values = pipeline_inputs(args, STREAMING_PARAMS)
    print("streaming pipeline starting; stop it with Ctrl-C", file=sys.stderr)
    streaming.run(argv, values)
    return 0
