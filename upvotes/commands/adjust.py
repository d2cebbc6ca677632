"""`upvotes adjust`: an audited compensating delta for one post, or the list of adjustments."""

from __future__ import annotations

import argparse
import json

from schemas.counters import NAMES, Counts
from upvotes.argument_types import positive_int
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.flags.moderation import (
    actor_of,
    add_moderation_arguments,
    adjustment_id_of,
    print_result,
    required_reason,
)

HELP = (
    f"Add or remove {'/'.join(NAMES)} of a post as an audited compensating delta (idempotent per --id); "
    "--list shows them."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("post_id", nargs="?", metavar="POST_ID", help="the post to adjust")
    for name in NAMES:
        parser.add_argument(f"--{name}", type=int, default=0, help=f"change of {name}, e.g. -250 (default 0)")
    add_moderation_arguments(parser)
    parser.add_argument("--list", action="store_true", help="print the newest adjustments and resets instead")
    parser.add_argument("--limit", type=positive_int, default=100, help="with --list: how many (default 100)")


def run(args: argparse.Namespace) -> int:
    from upvotes.operations.moderation import adjust, current_hour, list_adjustments

    if args.list:
        for adjustment in list_adjustments(open_database_of(args), args.limit):
            print(json.dumps(adjustment.to_json()))
        return 0
    if not args.post_id:
        raise UsageError("name the POST_ID to adjust (or use --list)")
    counts = Counts(**{name: getattr(args, name) for name in NAMES})
    if counts.is_zero():
        raise UsageError(f"nothing to adjust: give {' and/or '.join(f'--{name}' for name in NAMES)}")
    result = adjust(
        open_database_of(args),
        adjustment_id_of(args),
        args.post_id,
        counts,
        required_reason(args),
        actor_of(args),
        current_hour(),
    )
    print_result(result)
    return 0
