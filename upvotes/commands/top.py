"""`upvotes top`: the top posts of any ranking (spanner_reads/rankings/), each line saying whether
it is certified exact: by exact upvotes, fresh without a fold (the default), `--by hot` or
`--last 24h` (what is viral now), or a page of a published, versioned view. The flags and what
each line shows come from the registry, so this module names no ranking."""

from __future__ import annotations

import argparse
import json
import sys
import time

from schemas.counters import NAMES
from spanner_reads.fresh_side import DEFAULT_EXTRA
from spanner_reads.rankings import BY_CHOICES, DEFAULT, PARAMETERS, RANKINGS, NotBoth, choose
from spanner_reads.rankings.ranking import RankedPage, Ranking
from spanner_reads.views import DEFAULT_VIEWS
from upvotes.argument_types import parsed_by, positive_int
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments, open_database_of

HELP = (
    "Top posts by exact upvotes (folded + unfolded, one snapshot), fresh without a fold, "
    "each line saying whether the ranking is certified exact; --by hot or --last 24h: what is "
    "viral now; --version/--page page through a published, versioned view."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("-n", type=int, default=10, help="how many posts (default 10)")
    parser.add_argument(
        "--extra",
        type=int,
        default=DEFAULT_EXTRA,
        help=f"folded posts read beyond -n, to replace posts that fell back (default {DEFAULT_EXTRA})",
    )
    scored = [f'"{RANKINGS[by].score_field}"' for by in BY_CHOICES if RANKINGS[by].score_field]
    parser.add_argument(
        "--by",
        choices=BY_CHOICES,
        help="rank by "
        + " or by ".join(RANKINGS[by].help + (" (the default)" if by == DEFAULT else "") for by in BY_CHOICES)
        + f"; each line adds the score it is ranked by ({', '.join(scored)})",
    )
    for parameter in PARAMETERS:
        others = [by for by in BY_CHOICES if by != parameter.by]
        parser.add_argument(
            _flag(parameter.name),
            type=parsed_by(parameter.parse),
            metavar=parameter.metavar,
            help=f"{parameter.help}; each line adds the window and its score; not with --by " + " or ".join(others),
        )
    parser.add_argument("--watch", action="store_true", help="redraw a table every --interval seconds")
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between redraws with --watch")
    parser.add_argument(
        "--version", type=positive_int, help="page through this published version (default: the active one)"
    )
    parser.add_argument("--page", type=positive_int, help="page number, from 1 (default 1)")
    parser.add_argument("--page-size", type=positive_int, default=20, help="rows per page (default 20)")
    parser.add_argument(
        "--view",
        help="view name (default: "
        + ", ".join(f"{name} with --by {by}" for by, name in DEFAULT_VIEWS.items())
        + ", as publish-top-view names them)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        ranking, parameters = choose(
            args.by, {parameter.name: getattr(args, parameter.name) for parameter in PARAMETERS}
        )
    except NotBoth as refused:
        raise UsageError(_not_both(refused)) from None
    if args.version is not None or args.page is not None:
        if ranking.parameter is not None:
            raise UsageError(
                f"--version and --page page through a published view (publish-top-view --by "
                f"{' or '.join(DEFAULT_VIEWS)}): not with {_flag(ranking.parameter.name)}"
            )
        return _print_page(args, args.view or DEFAULT_VIEWS[ranking.name])
    if args.n < 1 or args.extra < 0:
        raise UsageError("-n must be at least 1 and --extra at least 0")
    database = open_database_of(args)
    while True:
        page = ranking.read(database, args.n, args.extra, **parameters)
        if not args.watch:
            _print_lines(ranking, page)
            return 0
        _draw_table(args.n, ranking, page)
        time.sleep(args.interval)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _not_both(refused: NotBoth) -> str:
    """--last with --by hot: what to ask for instead."""
    name, value = refused.other
    other = f"--by {value}" if name == "by" else _flag(name)
    flag = _flag(refused.parameter.name)
    return f"{flag} ranks by {refused.parameter.ranks}: use {other} or {flag}, not both"


def _print_lines(ranking: Ranking, page: RankedPage) -> None:
    """How it was ranked on stderr, then a JSON line per post: its rank, its all-time counts, its
    score (when it is not its upvotes) and the ranking's header ("as_of", "exact", ...)."""
    summary = _summary(ranking, page)
    print(f"ranked by {ranking.title(page)}; {summary}" if ranking.score_field else summary, file=sys.stderr)
    header = ranking.line_header(page)
    for rank, post in enumerate(page.ranked, 1):
        print(json.dumps({"rank": rank, **post.totals.to_json(), **ranking.line_fields(page, post), **header}))


def _draw_table(n: int, ranking: Ranking, page: RankedPage) -> None:
    """The --watch table: a row per post, its score column first when it is not its upvotes."""
    print("\x1b[2J\x1b[H", end="")
    print(f"top {n} posts by {ranking.title(page)}; {_summary(ranking, page)}; Ctrl-C to stop\n")
    label = ranking.score_label(page)
    score = f" {label:>12}" if label else ""
    print(f"{'rank':>4}  {'post':<32}{score}" + "".join(f" {name:>12}" for name in NAMES))
    for rank, post in enumerate(page.ranked, 1):
        score = f" {_shown(ranking.score(post)):>12}" if label else ""
        print(
            f"{rank:>4}  {post.totals.post_id[:32]:<32}{score}"
            + "".join(f" {value:>12,}" for value in post.totals.counts)
        )
    sys.stdout.flush()


def _summary(ranking: Ranking, page: RankedPage) -> str:
    """As of when, certified or not, how much was read (stderr, and the table's title)."""
    certified = (
        "certified exact" if page.exact else f"NOT certified: a post left out may have {ranking.bound_text(page)}"
    )
    folded = None if page.folded_through is None else page.folded_through.isoformat()
    read = f", {page.commits_read} of them read to certify it" if page.commits_read else ""
    return (
        f"exact counts as of {page.as_of.isoformat()}, ranking {certified} ({page.considered} posts considered, "
        f"{page.candidate_rows} commits since the last fold {'(never folded)' if folded is None else 'at ' + folded}"
        f"{read})"
    )


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
    print(
        f"view {top.view} version {top.version} ({age}, {_certification(top)}): page {top.page} of {top.pages}, "
        f"{top.ranked_rows} ranked rows",
        file=sys.stderr,
    )
    for row in top.rows:
        print(json.dumps({"version": top.version, **row.to_json(), "exact": top.certified, "bound": top.bound}))
    return 0
