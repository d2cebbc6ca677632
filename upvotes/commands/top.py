"""`upvotes top`: the top posts by folded upvotes, or a page of a published, versioned view."""
from __future__ import annotations

import argparse
import json
import sys
import time

from spanner_store.views import DEFAULT_VIEW
from upvotes.commands.argument_types import positive_int
from upvotes.commands.database_flags import add_database_arguments, open_database_of

HELP = ("Top posts by folded upvotes, from the index, with the ranking's age; "
        "--version/--page page through a published, versioned view.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("-n", type=int, default=10, help="how many posts (default 10)")
    parser.add_argument("--watch", action="store_true", help="redraw a table every --interval seconds")
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between redraws with --watch")
    parser.add_argument("--version", type=positive_int,
                        help="page through this published version (default: the active one)")
    parser.add_argument("--page", type=positive_int, help="page number, from 1 (default 1)")
    parser.add_argument("--page-size", type=positive_int, default=20, help="rows per page (default 20)")
    parser.add_argument("--view", default=DEFAULT_VIEW, help=f"view name (default {DEFAULT_VIEW})")


def run(args: argparse.Namespace) -> int:
    if args.version is not None or args.page is not None:
        return _print_page(args)
    from spanner_store.reads import top_posts

    database = open_database_of(args)
    while True:
        top = top_posts(database, args.n)
        age = "never folded" if top.folded_through is None else (
            f"folded through {top.folded_through.isoformat()} "
            f"({time.time() - top.folded_through.timestamp():.0f} s ago)")
        if not args.watch:
            print(f"ranking as of the last fold: {age}", file=sys.stderr)
            for rank, post in enumerate(top.posts, 1):
                print(json.dumps({"rank": rank, **post._asdict()}))
            return 0
        print("\x1b[2J\x1b[H", end="")
        print(f"top {args.n} posts by upvotes, {age}; Ctrl-C to stop\n")
        print(f"{'rank':>4}  {'post':<32} {'upvotes':>12} {'shares':>10}")
        for rank, post in enumerate(top.posts, 1):
            print(f"{rank:>4}  {post.post_id[:32]:<32} {post.upvotes:>12,} {post.shares:>10,}")
        sys.stdout.flush()
        time.sleep(args.interval)


def _print_page(args: argparse.Namespace) -> int:
    """One page of a view as JSON lines (version, rank, post_id, upvotes, shares)."""
    from spanner_store.views import read_top_page

    top = read_top_page(open_database_of(args), args.version, args.page or 1, args.page_size, view=args.view)
    age = "never folded" if top.folded_through is None else f"folded through {top.folded_through.isoformat()}"
    print(f"view {top.view} version {top.version} ({age}): page {top.page} of {top.pages}, "
          f"{top.ranked_rows} ranked rows", file=sys.stderr)
    for row in top.rows:
        print(json.dumps({"version": top.version, **row._asdict()}))
    return 0
