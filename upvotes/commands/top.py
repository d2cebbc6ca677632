"""`upvotes top`: the top posts by exact upvotes, fresh without a fold, or a page of a published,
versioned view; with `--by hot` or `--last 24h`, what is viral now (spanner_reads/rankings/):
the top posts by hot score, or by upvotes in the last N event hours."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import NamedTuple

from schemas.counters import NAMES
from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA
from spanner_reads.rankings.hot import HOT, hot_top
from spanner_reads.rankings.last_hours import LAST, MAX_HOURS, window_top
from spanner_reads.views import DEFAULT_VIEWS, UPVOTES
from upvotes.argument_types import last_hours, positive_int
from upvotes.commands.database_flags import add_database_arguments, open_database_of
from upvotes.commands.errors import UsageError

HELP = ("Top posts by exact upvotes (folded + unfolded, one snapshot), fresh without a fold, "
        "each line saying whether the ranking is certified exact; --by hot or --last 24h: what is "
        "viral now; --version/--page page through a published, versioned view.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("-n", type=int, default=10, help="how many posts (default 10)")
    parser.add_argument("--extra", type=int, default=DEFAULT_EXTRA,
                        help=f"folded posts read beyond -n, to replace posts that fell back (default {DEFAULT_EXTRA})")
    parser.add_argument("--by", choices=(UPVOTES, HOT),
                        help="rank by all-time exact upvotes (the default) or by hot score: upvotes minus "
                             "downvotes, each weighing half as much every half-life (the database's, set by "
                             "provision); each line adds \"hot\", the score at the snapshot, and \"half_life_hours\"")
    parser.add_argument("--last", type=last_hours, metavar="Nh|Nd",
                        help=f"rank by upvotes counted in the last N event hours (24h, 7d; at most {MAX_HOURS}h), "
                             "the hour now included; each line adds \"last_hours\" and \"window_upvotes\"; "
                             "not with --by hot")
    parser.add_argument("--watch", action="store_true", help="redraw a table every --interval seconds")
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between redraws with --watch")
    parser.add_argument("--version", type=positive_int,
                        help="page through this published version (default: the active one)")
    parser.add_argument("--page", type=positive_int, help="page number, from 1 (default 1)")
    parser.add_argument("--page-size", type=positive_int, default=20, help="rows per page (default 20)")
    parser.add_argument("--view", help="view name (default: " + ", ".join(
        f"{name} with --by {by}" for by, name in DEFAULT_VIEWS.items()) + ", as publish-top-view names them)")


def run(args: argparse.Namespace) -> int:
    ranking = _ranking_of(args)
    if args.version is not None or args.page is not None:
        if ranking == LAST:
            raise UsageError("--version and --page page through a published view (publish-top-view --by "
                             "upvotes or hot): not with --last")
        return _print_page(args, args.view or DEFAULT_VIEWS[ranking])
    if args.n < 1 or args.extra < 0:
        raise UsageError("-n must be at least 1 and --extra at least 0")
    database = open_database_of(args)
    while True:
        top = _read(database, args, ranking)
        if not args.watch:
            print(top.summary if ranking == UPVOTES else f"ranked by {top.title}; {top.summary}", file=sys.stderr)
            for rank, (post, fields) in enumerate(zip(top.posts, top.fields), 1):
                print(json.dumps({"rank": rank, **post.to_json(), **fields, **top.header}))
            return 0
        print("\x1b[2J\x1b[H", end="")
        print(f"top {args.n} posts by {top.title}; {top.summary}; Ctrl-C to stop\n")
        score = f" {top.score_label:>12}" if top.score_label else ""
        print(f"{'rank':>4}  {'post':<32}{score}" + "".join(f" {name:>12}" for name in NAMES))
        for rank, (post, fields) in enumerate(zip(top.posts, top.fields), 1):
            score = f" {_shown(fields[top.score_field]):>12}" if top.score_field else ""
            print(f"{rank:>4}  {post.post_id[:32]:<32}{score}" + "".join(f" {value:>12,}" for value in post.counts))
        sys.stdout.flush()
        time.sleep(args.interval)


def _ranking_of(args: argparse.Namespace) -> str:
    """UPVOTES, HOT or LAST; --last with --by hot is refused."""
    if args.last is not None:
        if args.by == HOT:
            raise UsageError("--last ranks by upvotes in the window: use --by hot or --last, not both")
        return LAST
    return args.by or UPVOTES


class _Shown(NamedTuple):
    """One read of a ranking, as `upvotes top` prints it."""

    posts: list[PostTotals]  # highest first, exact all-time counts
    fields: list[dict]  # per post, the score it is ranked by (none for all-time upvotes)
    header: dict  # on every line: how it was ranked, as of which snapshot, certified or not
    summary: str  # as of when, certified or not, how much was read (stderr, and the table's title)
    title: str  # what it ranks by: "upvotes", "hot score (half-life 12 h)", "upvotes in the last 24 h"
    score_label: str = ""  # the table's score column (none for all-time upvotes: the upvotes column)
    score_field: str = ""


def _read(database, args: argparse.Namespace, ranking: str) -> _Shown:
    """The ranking asked for, read in one snapshot: today's all-time top (fresh_top) or a
    trending one (hot_top, window_top). Every line keeps the all-time lines' fields ("as_of",
    "exact", "folded_through") and the trending ones add theirs."""
    if ranking == UPVOTES:
        from spanner_reads.rankings.all_time import fresh_top

        top = fresh_top(database, args.n, args.extra)
        folded = None if top.folded_through is None else top.folded_through.isoformat()
        certified = "certified exact" if top.exact else f"NOT certified: a post left out may have up to {top.bound:,}"
        return _Shown(top.posts, [{} for _ in top.posts],
                      {"as_of": top.as_of.isoformat(), "exact": top.exact, "folded_through": folded},
                      _summary(top, f"exact counts as of {top.as_of.isoformat()}, ranking {certified}"), "upvotes")
    if ranking == HOT:
        trend = hot_top(database, args.n, args.extra)
        certified = ("certified exact" if trend.exact else
                     f"NOT certified: a post left out may have a hot score up to {trend.bound:,.4g}")
        fields = [{"hot": post.score, "half_life_hours": trend.half_life_hours} for post in trend.posts]
        what = f"hot score (half-life {trend.half_life_hours:g} h)"
        label, field = "hot", "hot"
    else:
        trend = window_top(database, args.n, args.last, args.extra)
        certified = ("certified exact" if trend.exact else
                     f"NOT certified: a post left out may have up to {trend.bound:,.0f} upvotes in the window")
        fields = [{"last_hours": trend.hours, "window_upvotes": int(post.score)} for post in trend.posts]
        what = f"upvotes in the last {trend.hours} h"
        label, field = f"last {trend.hours}h", "window_upvotes"
    header = {key: value for key, value in trend.to_json().items()
              if key in ("by", "as_of", "exact", "folded_through", "bound")}
    summary = _summary(trend, f"exact counts as of {trend.as_of.isoformat()}, ranking {certified}")
    return _Shown([post.totals for post in trend.posts], fields, header, summary, what, label, field)


def _summary(top, ranking: str) -> str:
    folded = None if top.folded_through is None else top.folded_through.isoformat()
    read = f", {top.commits_read} of them read to certify it" if top.commits_read else ""
    return (f"{ranking} ({top.considered} posts considered, {top.candidate_rows} commits since the last fold "
            f"{'(never folded)' if folded is None else 'at ' + folded}{read})")


def _shown(score: float) -> str:
    return f"{score:,}" if isinstance(score, int) else f"{score:,.2f}"


def _certification(page) -> str:
    """What a view page says of its version's ranking (spanner_reads.views.TopPage)."""
    if page.certified is None:
        return "certification not recorded (published before it was)"
    if page.certified:
        return "certified exact"
    return f"NOT certified: a post left out may score up to {page.bound:,.4g}"


def _print_page(args: argparse.Namespace, view: str) -> int:
    """One page of a view as JSON lines (version, rank, post_id, one field per counter)."""
    from spanner_reads.views import read_top_page

    top = read_top_page(open_database_of(args), args.version, args.page or 1, args.page_size, view=view)
    age = "never folded" if top.folded_through is None else f"folded through {top.folded_through.isoformat()}"
    print(f"view {top.view} version {top.version} ({age}, {_certification(top)}): page {top.page} of {top.pages}, "
          f"{top.ranked_rows} ranked rows", file=sys.stderr)
    for row in top.rows:
        print(json.dumps({"version": top.version, **row.to_json(), "exact": top.certified, "bound": top.bound}))
    return 0
