"""`upvotes top`: the top posts by exact upvotes, fresh without a fold, or a page of a published,
versioned view."""
from __future__ import annotations

import argparse
import json
import sys
import time

from schemas.counters import NAMES
from spanner_reads.fresh_top import DEFAULT_EXTRA
from spanner_reads.views import DEFAULT_VIEW
from upvotes.argument_types import positive_int
from upvotes.commands.database_flags import add_database_arguments, open_database_of
from upvotes.commands.errors import UsageError

HELP = ("Top posts by exact upvotes (folded + unfolded, one snapshot), fresh without a fold, "
        "each line saying whether the ranking is certified exact; --version/--page page through a "
        "published, versioned view.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("-n", type=int, default=10, help="how many posts (default 10)")
    parser.add_argument("--extra", type=int, default=DEFAULT_EXTRA,
                        help=f"folded posts read beyond -n, to replace posts that fell back (default {DEFAULT_EXTRA})")
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
    from spanner_reads.fresh_top import fresh_top

    if args.n < 1 or args.extra < 0:
        raise UsageError("-n must be at least 1 and --extra at least 0")
    database = open_database_of(args)
    while True:
        top = fresh_top(database, args.n, args.extra)
        folded = None if top.folded_through is None else top.folded_through.isoformat()
        certified = "certified exact" if top.exact else f"NOT certified: a post left out may have up to {top.bound:,}"
        summary = (f"exact counts as of {top.as_of.isoformat()}, ranking {certified} "
                   f"({top.considered} posts considered, {top.candidate_rows} commits since the last fold "
                   f"{'(never folded)' if folded is None else 'at ' + folded})")
        if not args.watch:
            print(summary, file=sys.stderr)
            for rank, post in enumerate(top.posts, 1):
                print(json.dumps({"rank": rank, **post.to_json(), "as_of": top.as_of.isoformat(),
                                  "exact": top.exact, "folded_through": folded}))
            return 0
        print("\x1b[2J\x1b[H", end="")
        print(f"top {args.n} posts by upvotes; {summary}; Ctrl-C to stop\n")
        print(f"{'rank':>4}  {'post':<32}" + "".join(f" {name:>12}" for name in NAMES))
        for rank, post in enumerate(top.posts, 1):
            print(f"{rank:>4}  {post.post_id[:32]:<32}" + "".join(f" {value:>12,}" for value in post.counts))
        sys.stdout.flush()
        time.sleep(args.interval)


def _print_page(args: argparse.Namespace) -> int:
    """One page of a view as JSON lines (version, rank, post_id, one field per counter)."""
    from spanner_reads.views import read_top_page

    top = read_top_page(open_database_of(args), args.version, args.page or 1, args.page_size, view=args.view)
    age = "never folded" if top.folded_through is None else f"folded through {top.folded_through.isoformat()}"
    print(f"view {top.view} version {top.version} ({age}): page {top.page} of {top.pages}, "
          f"{top.ranked_rows} ranked rows", file=sys.stderr)
    for row in top.rows:
        print(json.dumps({"version": top.version, **row.to_json()}))
    return 0
