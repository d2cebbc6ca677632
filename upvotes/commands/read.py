"""`upvotes read`: exact counts of posts, in total or per event hour; or one user's vote on each."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

from upvotes.argument_types import user_id, utc_time
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of

HELP = (
    "Exact counts of posts (folded aggregate plus unfolded deltas, one snapshot); "
    "--hourly for exact counts per event hour; --user for one user's vote on each post."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("post_ids", nargs="+", metavar="POST_ID", help="the posts to read, printed in this order")
    parser.add_argument("--hourly", action="store_true", help="print exact counts per event hour instead of totals")
    parser.add_argument(
        "--since",
        type=utc_time,
        metavar="TIME",
        help="with --hourly: first hour, RFC 3339, rounded down to its hour (default: 24 hours ago)",
    )
    parser.add_argument(
        "--until",
        type=utc_time,
        metavar="TIME",
        help="with --hourly: hours starting before this time (default: no limit)",
    )
    parser.add_argument(
        "--unique",
        action="store_true",
        help='add "unique_voters": distinct user IDs that upvoted (a HyperLogLog '
        "estimate, exact below about 1,000 voters; per hour with --hourly)",
    )
    parser.add_argument(
        "--user",
        type=user_id,
        metavar="USER_ID",
        help="print this user's vote on each post instead of counts, as the stream has applied it: "
        '{"post_id", "user_id", "vote", "voted_at", "event_id", "applied_at"}; "vote" is up, down '
        'or none ("none" with null times: never voted)',
    )


def run(args: argparse.Namespace) -> int:
    """JSON lines: {"post_id", one field per counter} per post; with --hourly
    {"post_id", "hour", one field per counter}, per post in the order given, hours ascending;
    with --unique, "unique_voters" too; with --user, that user's vote on each post, in the
    order given (upvotes/serving/user_votes.py)."""
    from spanner_reads.hourly import hour_text, hourly_counts
    from spanner_reads.reads import exact_counts

    if args.user is not None and (args.hourly or args.unique):
        raise UsageError("--user prints votes, not counts: it takes neither --hourly nor --unique")
    database = open_database_of(args)
    if args.user is not None:
        print_votes(database, args.user, args.post_ids)
        return 0
    if not args.hourly:
        for totals in exact_counts(database, args.post_ids, args.unique):
            print(json.dumps(totals.to_json()))
        return 0
    since = args.since or datetime.now(timezone.utc) - timedelta(hours=24)
    for post_id in args.post_ids:
        for count in hourly_counts(database, post_id, since, args.until, args.unique):
            record = {"post_id": post_id, "hour": hour_text(count.hour), **count.counts._asdict()}
            if args.unique:
                record["unique_voters"] = count.unique_voters
            print(json.dumps(record))
    return 0


def print_votes(database, user: str, post_ids: list[str]) -> None:
    """One JSON line per post: `user`'s vote on it, one strong read each."""
    from spanner_reads.my_votes import vote_of
    from upvotes.serving.user_votes import vote_json

    for post_id in post_ids:
        print(json.dumps(vote_json(post_id, user, vote_of(database, post_id, user))))
