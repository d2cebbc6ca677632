"""`upvotes suspensions`: every suspension, its users, the votes it moved, active or restored."""

from __future__ import annotations

import argparse
import json

from upvotes.argument_types import positive_int
from upvotes.flags.database import add_database_arguments, open_database_of

HELP = "List the suspensions (newest first): their users, the votes they moved, and whether active or restored."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per suspension, with its users and both requests' audit rows",
    )
    parser.add_argument("--limit", type=positive_int, default=100, help="how many (default 100)")


def run(args: argparse.Namespace) -> int:
    """--json: one `Suspension.to_json()` per line. Otherwise one line each: ID, state, users, votes held
    out (and returned), who, when, why."""
    from upvotes.operations.suspensions import list_suspensions

    suspensions = list_suspensions(open_database_of(args), args.limit)
    for suspension in suspensions:
        if args.json:
            print(json.dumps(suspension.to_json()))
            continue
        held, restored = suspension.suspended, suspension.restored
        since = "every vote" if held.since is None else f"since {held.since.isoformat()}"
        back = (
            ""
            if restored is None
            else (
                f"; restored {restored.recorded_at.isoformat()} by {restored.actor} "
                f"({restored.reason!r}): {restored.votes:,} votes back in"
            )
        )
        print(
            f"{held.suspension_id}  {suspension.state:<10} {len(held.user_ids):,} users, {since}: "
            f"{-held.counts.upvotes:,} upvotes and {-held.counts.downvotes:,} downvotes held out "
            f"({held.votes:,} votes); {held.recorded_at.isoformat()} by {held.actor} ({held.reason!r}){back}"
        )
    if not suspensions and not args.json:
        print("no suspensions")
    return 0
