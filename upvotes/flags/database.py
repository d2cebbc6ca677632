"""The flags that name a database, shared by every subcommand that reads or writes one."""

from __future__ import annotations

import argparse
import os

DEFAULT_PROJECT = os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project")


def add_project_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        default=DEFAULT_PROJECT,
        help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT or demo-project)",
    )


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    add_project_argument(parser)
    parser.add_argument("--instance", required=True, help="Spanner instance ID")
    parser.add_argument("--database", required=True, help="Spanner database ID")


def open_database_of(args: argparse.Namespace):
    from spanner_store.database import open_database

    return open_database(args.project, args.instance, args.database)
