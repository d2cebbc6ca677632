"""`upvotes lint-schema`: Spanner DDL files checked for write hotspots."""

from __future__ import annotations

import argparse
import sys

from upvotes.devtools.schema_lint import lint_files

HELP = "Check Spanner DDL files for write hotspots."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE.sql",
        help="Spanner (GoogleSQL) DDL files to check for write hotspots; "
        "indexes may refer to tables defined in any of the files",
    )


def run(args: argparse.Namespace) -> int:
    return lint_files(args.files, sys.stdout)
