"""`upvotes suspend-users`: hold a ring of accounts' vote-state votes out of every count,
retroactively and exactly, audited; idempotent per --id (upvotes/operations/suspensions.py)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from upvotes.argument_types import user_id, utc_time
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.flags.moderation import ADJUSTMENT_ID, actor_of, required_reason

HELP = (
    "Hold every vote-state vote of some users (a voting ring) out of every count, in every hour and "
    "ranking, now and in flight, until restore-users; audited, idempotent per --id."
)


def add_suspension_id(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--id",
        dest="suspension_id",
        required=True,
        type=suspension_id,
        help=f"ID of the suspension {what}; running the same ID again moves nothing twice, "
        "so a stopped run is finished by running it again",
    )


def suspension_id(text: str) -> str:
    if not re.fullmatch(ADJUSTMENT_ID, text):
        raise argparse.ArgumentTypeError(f"{text!r}: use up to 64 letters, digits, '-', '_' or '.'")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("user_ids", nargs="*", metavar="USER_ID", type=user_id, help="the users to suspend")
    parser.add_argument(
        "--users-file",
        type=Path,
        metavar="PATH",
        help="read the users from this file instead, one per line (blank lines and lines starting with # are skipped)",
    )
    add_suspension_id(parser, "to record")
    parser.add_argument("--reason", help="why (required; kept in the Suspensions audit table)")
    parser.add_argument("--actor", help="who (default: the login name of the current user)")
    parser.add_argument(
        "--since",
        type=utc_time,
        metavar="TIME",
        help="hold out only the votes cast at or after this time, RFC 3339 (default: every vote of these users)",
    )


def users_of(args: argparse.Namespace) -> list[str]:
    """The users named on the command line or in --users-file (not both)."""
    from upvotes.operations.suspensions import MAX_USERS

    if args.users_file is not None and args.user_ids:
        raise UsageError("name the users either as arguments or with --users-file, not both")
    if args.users_file is None:
        users = list(args.user_ids)
    else:
        try:
            lines = args.users_file.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise UsageError(f"--users-file {args.users_file}: {error.strerror}") from None
        users = []
        for number, line in enumerate(lines, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                users.append(user_id(line.strip()))
            except argparse.ArgumentTypeError as error:
                raise UsageError(f"--users-file {args.users_file}, line {number}: {error}") from None
    if not users:
        raise UsageError("name at least one user (USER_ID ... or --users-file PATH)")
    if len(set(users)) > MAX_USERS:
        raise UsageError(
            f"{len(set(users)):,} users: at most {MAX_USERS:,} per suspension; split the ring over several IDs"
        )
    return users


def run(args: argparse.Namespace) -> int:
    """One JSON line: the audit row as it stands (`Request.to_json`), with what this run did."""
    from upvotes.operations.suspensions import SuspensionIdInUse, suspend_users

    users = users_of(args)
    reason, actor = required_reason(args), actor_of(args)
    print(
        f"suspend-users: suspension {args.suspension_id} of {len(set(users)):,} users; if this run stops, run it "
        f"again with --id {args.suspension_id}",
        file=sys.stderr,
    )
    try:
        result = suspend_users(open_database_of(args), args.suspension_id, users, reason, actor, args.since)
    except SuspensionIdInUse as error:
        raise UsageError(str(error)) from None
    again = "" if result.written else " (a rerun of this suspension)"
    print(
        f"suspend-users: moved {result.votes:,} votes out of the counts in {result.commits:,} commits{again}; "
        f"the suspension holds {result.request.votes:,} votes out in all",
        file=sys.stderr,
    )
    print(json.dumps(result.to_json()))
    return 0
