"""`upvotes read`: exact counts of posts, in total or per event hour."""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

from upvotes.argument_types import utc_time
from upvotes.commands.database_flags import add_database_arguments, open_database_of

HELP = ("Exact counts of posts (folded aggregate plus unfolded deltas, one snapshot); "
        "--hourly for exact counts per event hour.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("post_ids", nargs="+", metavar="POST_ID")
    parser.add_argument("--hourly", action="store_true",
                        help="print exact counts per event hour instead of totals")
    parser.add_argument("--since", type=utc_time, metavar="TIME",
                        help="with --hourly: first hour, RFC 3339, rounded down to its hour "
                        "(default: 24 hours ago)")
    parser.add_argument("--until", type=utc_time, metavar="TIME",
                        help="with --hourly: hours starting before this time (default: no limit)")
    parser.add_argument("--unique", action="store_true",
                        help='add "unique_voters": distinct user IDs that upvoted (a HyperLogLog '
                        "estimate, exact below about 1,000 voters; per hour with --hourly)")


def run(args: argparse.Namespace) -> int:
    """JSON lines: {"post_id", one field per counter} per post; with --hourly
    {"post_id", "hour", one field per counter}, per post in the order given, hours ascending;
    with --unique, "unique_voters" too."""
    from spanner_store.hourly import hour_text, hourly_counts
    from spanner_store.reads import exact_counts

    database = open_database_of(args)
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
