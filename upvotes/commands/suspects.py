"""`upvotes suspects`: voting rings (lockstep groups) and serial voters among the votes of a recent
window; it reports, it never suspends (upvotes/operations/suspects.py, upvotes/operations/suspect_rules.py)."""

from __future__ import annotations

import argparse
import json
import sys

from upvotes.argument_types import duration, positive_int
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.operations.suspect_rules import Rules

HELP = (
    "Find voting rings (at least --min-users users who all voted the same way on the same --min-posts posts "
    "within --within) and serial voters among recent vote-state votes; reports only."
)
DEFAULTS = Rules()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument(
        "--since",
        type=duration,
        required=True,
        metavar="DURATION",
        help="look at the votes cast in the last DURATION: 90m, 24h, 7d",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object per group: {"kind", "users", "posts", "score", "window": {"start", '
        '"end"}, "user_count", "post_count"}',
    )
    parser.add_argument(
        "--min-users",
        type=positive_int,
        default=DEFAULTS.min_users,
        help=f"users of a lockstep group, at least (default {DEFAULTS.min_users})",
    )
    parser.add_argument(
        "--min-posts",
        type=positive_int,
        default=DEFAULTS.min_posts,
        help=f"posts each of them voted on with the group, at least (default {DEFAULTS.min_posts})",
    )
    parser.add_argument(
        "--within",
        type=duration,
        default=None,
        metavar="DURATION",
        help=f"how close in time a group's votes on one post are (default {DEFAULTS.within_s / 60:g}m)",
    )
    parser.add_argument(
        "--serial-votes",
        type=positive_int,
        default=DEFAULTS.serial_votes,
        help=f"a serial voter casts at least this many votes ... (default {DEFAULTS.serial_votes})",
    )
    parser.add_argument(
        "--serial-within",
        type=duration,
        default=None,
        metavar="DURATION",
        help=f"... within this long (default {DEFAULTS.serial_within_s / 60:g}m)",
    )


def run(args: argparse.Namespace) -> int:
    """JSON lines with --json (one per group, highest score first, lockstep groups then serial voters),
    else one readable line per group; a summary (votes read, rows read, time) on stderr."""
    from upvotes.operations.suspects import find, micros_text

    rules = Rules(
        min_users=args.min_users,
        min_posts=args.min_posts,
        within_s=DEFAULTS.within_s if args.within is None else args.within.total_seconds(),
        serial_votes=args.serial_votes,
        serial_within_s=(
            DEFAULTS.serial_within_s if args.serial_within is None else args.serial_within.total_seconds()
        ),
    )
    report = find(open_database_of(args), args.since, rules)
    for suspect in report.suspects:
        if args.json:
            print(json.dumps(suspect.to_json(micros_text)))
        else:
            print(
                f"{suspect.kind:<8} score {suspect.score:>6,}  {len(suspect.users):,} users on {len(suspect.posts):,} "
                f"posts, {micros_text(suspect.first_us)} .. {micros_text(suspect.last_us)}: users "
                f"{' '.join(suspect.users[:20])}{' ...' if len(suspect.users) > 20 else ''}"
            )
    summary = report.summary()
    print(
        f"suspects: {summary['groups']} lockstep groups, {summary['serial_voters']} serial voters among "
        f"{summary['votes']:,} votes of {summary['users']:,} users since {summary['since']}; read "
        f"{summary['rows_read']:,} rows ({summary['commits_read']:,} change-log rows, {summary['votes_rows_read']:,} "
        f"Votes rows) in {summary['read_s']:.2f} s, detection {summary['detect_s']:.2f} s",
        file=sys.stderr,
    )
    return 0
