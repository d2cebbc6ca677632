"""`upvotes restore-users`: lift a suspension; each of its users counts again with their latest
state (upvotes/operations/suspensions.py)."""

from __future__ import annotations

import argparse
import json
import sys

from upvotes.command_errors import UsageError
from upvotes.commands.suspend_users import add_suspension_id
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.flags.moderation import actor_of

HELP = (
    "Lift a suspension: its users count again with their latest votes (those cast while suspended "
    "included) unless another suspension holds them; audited, idempotent per --id."
)
DEFAULT_REASON = "restored"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    add_suspension_id(parser, "to lift")
    parser.add_argument("--reason", default=DEFAULT_REASON, help=f"why (default {DEFAULT_REASON!r}; kept in the audit)")
    parser.add_argument("--actor", help="who (default: the login name of the current user)")


def run(args: argparse.Namespace) -> int:
    """One JSON line: the restore's audit row as it stands, with what this run did."""
    from upvotes.operations.suspensions import UnknownSuspension, restore_users

    reason = (args.reason or "").strip() or DEFAULT_REASON
    if len(reason) > 1024:
        raise UsageError("--reason is longer than 1024 characters")
    print(
        f"restore-users: lifting suspension {args.suspension_id}; if this run stops, run it again with --id "
        f"{args.suspension_id}",
        file=sys.stderr,
    )
    try:
        result = restore_users(open_database_of(args), args.suspension_id, reason, actor_of(args))
    except UnknownSuspension as error:
        raise UsageError(str(error)) from None
    again = "" if result.written else " (a rerun of this restore)"
    print(
        f"restore-users: moved {result.votes:,} votes of {result.users:,} users back into the counts in "
        f"{result.commits:,} commits{again}",
        file=sys.stderr,
    )
    print(json.dumps(result.to_json()))
    return 0
