"""The flags of the two pipeline subcommands, generated from the parameter table."""

from __future__ import annotations

import argparse

from pipeline.params import Param, add_params
from upvotes.flags.database import add_project_argument

BEAM_ARGS_EPILOG = "Any other Beam or Dataflow option (--region, --temp_location, ...) is passed through to Beam."


def add_pipeline_arguments(parser: argparse.ArgumentParser, params: tuple[Param, ...]) -> None:
    add_project_argument(parser)
    add_params(parser, params)
    parser.add_argument(
        "--runner", help="Beam runner (default: BundleBasedDirectRunner, local); DataflowRunner on Google Cloud"
    )
    parser.epilog = BEAM_ARGS_EPILOG


def pipeline_inputs(args: argparse.Namespace, params: tuple[Param, ...]) -> tuple[list[str], dict[str, object]]:
    """(Beam's own flags, passed through as given; our settings, as collected, by dest).

    The settings are handed over as values, not rebuilt into flags, and checked and converted
    exactly once per launch (pipeline/params.py).
    """
    values: dict[str, object] = {p.dest: getattr(args, p.dest) for p in params}
    values["project"] = args.project
    if args.runner:
        values["runner"] = args.runner
    return list(args.beam_args), values
