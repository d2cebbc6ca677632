"""`upvotes verify`: every post's exact count against a publisher's ledger."""

from __future__ import annotations

import argparse
import sys
import time

from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of

HELP = "Compare every post's exact count with a publisher ledger; exit 1 on any mismatch."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("--ledger", required=True, help="ledger file written by `upvotes publish --ledger`")
    parser.add_argument(
        "--unique-tolerance",
        type=float,
        metavar="F",
        help="also check each post's unique voters against the ledger's exact distinct "
        "voters, within this relative error (e.g. 0.03)",
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        metavar="S",
        help="while counts differ, read them again every second for up to S seconds: a running "
        "stream writes a vote about one window after it arrives (default: no wait)",
    )


def run(args: argparse.Namespace) -> int:
    from upvotes.devtools.ledger import Ledger
    from upvotes.devtools.verification import verify_totals, verify_unique_voters

    try:
        ledger = Ledger.load(args.ledger)
    except OSError as error:
        raise UsageError(f"cannot read the ledger {args.ledger}: {error.strerror}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{args.ledger} is not a ledger written by `upvotes publish --ledger`: {error}") from None
    if args.unique_tolerance is not None and not 0 <= args.unique_tolerance < 1:
        raise UsageError(f"--unique-tolerance must be in [0, 1), got {args.unique_tolerance}")
    if args.wait_s < 0:
        raise UsageError(f"--wait-s must be 0 or more, got {args.wait_s}")
    database = open_database_of(args)
    deadline = time.monotonic() + args.wait_s
    reported = None
    while True:
        mismatches = verify_totals(database, ledger.totals)
        if args.unique_tolerance is not None:
            mismatches += verify_unique_voters(database, ledger.unique_voters, args.unique_tolerance)
        left_s = deadline - time.monotonic()
        if not mismatches or left_s <= 0:
            break
        differing = len({m.post_id for m in mismatches})
        if differing != reported:  # progress, one line per change
            print(
                f"verify: {differing} posts differ from the ledger; reading again for up to {left_s:.0f} s",
                file=sys.stderr,
            )
            reported = differing
        time.sleep(min(1.0, left_s))
    for m in mismatches:
        print(f"MISMATCH {m.post_id} {m.counter}: expected {m.expected}, actual {m.actual}")
    posts = len(ledger.totals)
    if mismatches:
        print(f"verify: {len(mismatches)} mismatches over {posts} posts")
        return 1
    checked = "" if args.unique_tolerance is None else f", unique voters within {args.unique_tolerance:.0%}"
    print(f"verify: all {posts} posts match the ledger ({ledger.events} events{checked})")
    return 0
