"""`upvotes reset`: a post's counts to zero as of now, every hour, by audited compensating deltas."""

from __future__ import annotations

import argparse

from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.flags.moderation import (
    actor_of,
    add_moderation_arguments,
    adjustment_id_of,
    print_result,
    required_reason,
)

HELP = (
    "Zero a post as of a snapshot S (minus its exact count at S in every hour, in one commit, or in several "
    "for a post with very many hours: rerun the same --id to finish one that stopped); votes committed after "
    "S still count."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("post_id", metavar="POST_ID", help="the post to reset")
    add_moderation_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from upvotes.operations.moderation import reset

    result = reset(open_database_of(args), adjustment_id_of(args), args.post_id, required_reason(args), actor_of(args))
    print_result(result)
    return 0
