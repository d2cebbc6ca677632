"""The flags `upvotes adjust` and `upvotes reset` share: who, why, and the adjustment's ID."""

from __future__ import annotations

import argparse
import getpass
import json
import re
import uuid

from upvotes.command_errors import UsageError

ADJUSTMENT_ID = r"[A-Za-z0-9][-A-Za-z0-9_.]{0,63}"


def add_moderation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", help="why (required; kept in the Adjustments audit table)")
    parser.add_argument(
        "--id",
        dest="adjustment_id",
        help="ID of this adjustment (default: a random UUID); running the same ID again writes "
        "nothing twice, so pass one to retry safely",
    )
    parser.add_argument("--actor", help="who (default: the login name of the current user)")


def adjustment_id_of(args: argparse.Namespace) -> str:
    adjustment_id = args.adjustment_id or str(uuid.uuid4())
    if not re.fullmatch(ADJUSTMENT_ID, adjustment_id):
        raise UsageError(f"--id {adjustment_id!r}: use up to 64 letters, digits, '-', '_' or '.'")
    return adjustment_id


def actor_of(args: argparse.Namespace) -> str:
    try:
        actor = args.actor or getpass.getuser()
    except (KeyError, OSError):  # no login name for this uid (some containers)
        raise UsageError("say who you are with --actor") from None
    return actor[:256]


def required_reason(args: argparse.Namespace) -> str:
    if not args.reason or not args.reason.strip():
        raise UsageError("--reason is required: say why, for the audit trail")
    if len(args.reason) > 1024:
        raise UsageError("--reason is longer than 1024 characters")
    return args.reason.strip()


def print_result(result) -> None:
    """One JSON line: the adjustment as recorded, whether this run wrote it, and the commits it made."""
    print(json.dumps({**result.adjustment.to_json(), "written_now": result.written, "commits": result.commits}))
