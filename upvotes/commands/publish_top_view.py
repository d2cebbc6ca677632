"""`upvotes publish-top-view`: the top K posts as a new, incrementally written view version."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from spanner_reads.rankings import RANKINGS as BY_NAME
from spanner_reads.views import DEFAULT_BATCH_ROWS, DEFAULT_K, DEFAULT_KEEP_VERSIONS_S, DEFAULT_VIEWS, RANKINGS, UPVOTES
from upvotes.argument_types import non_negative_float, positive_int
from upvotes.flags.database import add_database_arguments, open_database_of

HELP = "Publish the top K posts as a new, incrementally written view version."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument(
        "-k", type=positive_int, default=DEFAULT_K, help=f"how many top posts the view holds (default {DEFAULT_K})"
    )
    parser.add_argument(
        "--by",
        choices=RANKINGS,
        default=UPVOTES,
        help="rank by " + " or by ".join(BY_NAME[by].help + (" (default)" if by == UPVOTES else "") for by in RANKINGS),
    )
    parser.add_argument(
        "--allow-uncertified",
        action="store_true",
        help="publish a ranking that is not certified, marked as such on every page (default: "
        "publish nothing and exit 1)",
    )
    parser.add_argument(
        "--view",
        help="view name (default: " + ", ".join(f"{name} with --by {by}" for by, name in DEFAULT_VIEWS.items()) + ")",
    )
    parser.add_argument(
        "--batch-rows",
        type=positive_int,
        default=DEFAULT_BATCH_ROWS,
        help=f"most rows written per transaction (default {DEFAULT_BATCH_ROWS})",
    )
    parser.add_argument(
        "--keep-versions-seconds",
        type=non_negative_float,
        default=DEFAULT_KEEP_VERSIONS_S,
        help="how long a replaced version stays readable, for readers still paging "
        f"through it (default {DEFAULT_KEEP_VERSIONS_S:g})",
    )


def run(args: argparse.Namespace) -> int:
    """Publishes one version; prints its report as one JSON line."""
    from spanner_reads.views import publish_top_view

    result = publish_top_view(
        open_database_of(args),
        k=args.k,
        view=args.view or DEFAULT_VIEWS[args.by],
        batch_rows=args.batch_rows,
        keep_versions_for_s=args.keep_versions_seconds,
        by=args.by,
        allow_uncertified=args.allow_uncertified,
    )
    print(json.dumps(asdict(result)))
    return 0
