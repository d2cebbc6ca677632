"""`upvotes forget-user`: an erasure request, every vote of one user retracted, audited."""

from __future__ import annotations

import argparse
import json
import sys

from upvotes.argument_types import user_id
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.flags.moderation import actor_of, add_moderation_arguments, adjustment_id_of, required_reason

HELP = "Retract every vote of a user (an erasure request), audited; idempotent per --id."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("user_id", metavar="USER_ID", type=user_id, help="the user whose votes to retract")
    add_moderation_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from upvotes.operations.forget_user import RequestIdInUse, forget_user

    request_id = adjustment_id_of(args)
    reason, actor = required_reason(args), actor_of(args)
    # Before any write: a run that stops halfway is finished by running the same ID again.
    print(
        f"forget-user {args.user_id!r}: request {request_id}; if this run stops, run it again with --id {request_id}",
        file=sys.stderr,
    )
    try:
        result = forget_user(open_database_of(args), request_id, args.user_id, reason, actor)
    except RequestIdInUse as error:
        raise UsageError(str(error)) from None
    again = "" if result.written else " (a rerun of this request: its forget time reused)"
    print(
        f"forget-user {args.user_id!r}: retracted {result.retracted} votes on {result.posts} posts in "
        f"{result.commits} commits{again}; {result.kept} votes cast after the forget time count",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                **result.request.to_json(),
                "written_now": result.written,
                "retracted": result.retracted,
                "posts": result.posts,
                "kept": result.kept,
                "superseded": result.superseded,
                "commits": result.commits,
            }
        )
    )
    return 0
