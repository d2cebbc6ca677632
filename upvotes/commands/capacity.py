"""`upvotes capacity`: what this design, read-modify-write and sharded counters need at a workload.

The arithmetic is upvotes.operations.capacity_model (pure, unit-tested, checked against the
write-amplification benchmark). This module gathers its inputs: the workload from flags, the
sink's batching from pipeline.params and spanner_store, the pipeline's per-core rate from the
benchmark's results file when there is one, and the named assumptions, each overridable.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from upvotes.argument_types import non_negative_float, positive_float, positive_int
from upvotes.command_errors import UsageError

HELP = "Model what the design, read-modify-write and sharded counters need at a workload (no cloud calls)."

# Where `make bench` writes its results, in a source checkout.
BENCH_RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "latest.json"
SPANNER_PERFORMANCE = (
    "Google Cloud, Spanner performance (cloud.google.com/spanner/docs/performance): regional SSD instance, per node"
)
SPANNER_WRITES_PER_NODE = (
    3_500.0,
    f"{SPANNER_PERFORMANCE}, peak writes 3,500/s of one 1 KB row each; every row written here counts as one such write",
)
SPANNER_OPTIMIZED_WRITES_PER_NODE = (
    22_500.0,
    f"{SPANNER_PERFORMANCE}, peak writes 22,500/s with throughput-optimized "
    "writes (commits batched by max_commit_delay, about 100 ms)",
)
SPANNER_READS_PER_NODE = (22_500.0, f"{SPANNER_PERFORMANCE}, peak reads 22,500/s of one 1 KB row each")
HOT_ROW_TRANSACTIONS = (
    100.0,
    "assumed: one row's read-modify-write transactions run one at a time "
    "under its lock, about 10 ms each (read, client round trip, commit); "
    "Google publishes no per-row figure",
)
# The chain's rate when no results file has one: `beam_chain` of the bench run of 2026-11-22
# (single-event messages; batched input was not measured then, and costs less per event).
CHAIN_EVENTS_PER_CORE = (
    45_000.0,
    "built in: bench run of 2026-11-22, beam_chain on single-event "
    "messages (batched input not measured then; conservative)",
)
SINK_ROWS_PER_CORE = (10_000.0, "assumed: client-side mutation encoding and gRPC per delta row; not measured here")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.params import STREAMING_PARAMS, defaults
    from upvotes.devtools.workload import DEFAULT_BATCH_SIZE

    work = parser.add_argument_group("workload")
    work.add_argument(
        "--votes-per-s", type=positive_float, default=1_000_000, help="votes per second (default 1000000)"
    )
    work.add_argument("--posts", type=positive_int, default=10_000_000, help="posts voted on (default 10000000)")
    work.add_argument(
        "--zipf",
        type=non_negative_float,
        default=1.1,
        help="Zipf exponent of the posts' popularity; 0 spreads votes evenly (default 1.1)",
    )
    work.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"events per Pub/Sub message (default {DEFAULT_BATCH_SIZE})",
    )
    window = defaults(STREAMING_PARAMS)["window_seconds"]
    work.add_argument(
        "--window-seconds",
        type=positive_int,
        default=window,
        help=f"the pipeline's window (default {window}, as the pipeline's)",
    )
    work.add_argument(
        "--fold-interval-seconds", type=positive_float, default=600, help="seconds between fold runs (default 600)"
    )
    work.add_argument(
        "--count-reads-per-s",
        type=non_negative_float,
        default=1_000,
        help="exact-count reads of the hottest post per second (default 1000)",
    )
    work.add_argument(
        "--shards",
        type=positive_int,
        nargs="+",
        default=[10, 100],
        help="shard counts to model sharded counters with (default 10 100)",
    )
    work.add_argument(
        "--state-fraction",
        type=_share,
        default=0.0,
        metavar="F",
        help="share of the votes that are vote-state events (one vote per user), 0 to 1: each writes "
        "its Votes row and reads the stored one and the user's erasures (default 0)",
    )
    given = parser.add_argument_group("assumptions (each printed with its source)")
    given.add_argument(
        "--bench-results",
        type=Path,
        default=None,
        help=f"benchmark results to take the pipeline's per-core rate from (default {BENCH_RESULTS} when present)",
    )
    given.add_argument(
        "--chain-events-per-core-s",
        type=positive_float,
        help="events per second one vCPU's pipeline chain handles (default: from the bench results)",
    )
    given.add_argument(
        "--sink-rows-per-core-s",
        type=positive_float,
        help=f"delta rows per second one vCPU's sink commits (default {SINK_ROWS_PER_CORE[0]:,.0f}, assumed)",
    )
    given.add_argument(
        "--spanner-writes-per-node-s",
        type=positive_float,
        help=f"rows written per second per Spanner node (default {SPANNER_WRITES_PER_NODE[0]:,.0f})",
    )
    given.add_argument(
        "--spanner-optimized-writes-per-node-s",
        type=positive_float,
        help="rows written per second per Spanner node with throughput-optimized writes "
        f"(default {SPANNER_OPTIMIZED_WRITES_PER_NODE[0]:,.0f})",
    )
    given.add_argument(
        "--spanner-reads-per-node-s",
        type=positive_float,
        help=f"rows read per second per Spanner node (default {SPANNER_READS_PER_NODE[0]:,.0f})",
    )
    given.add_argument(
        "--hot-row-transactions-per-s",
        type=positive_float,
        help=f"read-write transactions per second one row can take (default {HOT_ROW_TRANSACTIONS[0]:,.0f}, assumed)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {value}")
    return value


def chain_rate_from_results(results: dict, batched: bool, where: str) -> tuple[float, str] | None:
    """The pipeline chain's measured events per second per core for this input (batched or not),
    from a bench results document; the single-event figure stands in for a missing batched one."""
    variants = results.get("benchmarks", {}).get("transform_cost", {}).get("variants", {})
    date = results.get("machine", {}).get("date", "an undated run")
    for name in ("beam_chain_batched", "beam_chain") if batched else ("beam_chain",):
        rate = variants.get(name, {}).get("events_per_s_per_core")
        if rate:
            note = (
                " (single-event input; batched not in this run, so conservative)"
                if batched and name == "beam_chain"
                else ""
            )
            return float(rate), f"measured: {where}, {name} of {date}{note}"
    return None


def _chain_rate(args: argparse.Namespace) -> tuple[float, str]:
    if args.chain_events_per_core_s:
        return args.chain_events_per_core_s, "given by --chain-events-per-core-s"
    path = args.bench_results or (BENCH_RESULTS if BENCH_RESULTS.is_file() else None)
    if path is not None:
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise UsageError(f"cannot read the bench results {path}: {error.strerror}") from None
        except ValueError as error:
            raise UsageError(f"{path} is not a bench results file (JSON): {error}") from None
        shown = str(path) if args.bench_results else "bench/results/latest.json"
        found = chain_rate_from_results(results, args.batch_size > 1, shown)
        if found:
            return found
        if args.bench_results:
            raise UsageError(f"{path} has no benchmarks.transform_cost.variants.beam_chain events_per_s_per_core")
    return CHAIN_EVENTS_PER_CORE


def _assumption(given: float | None, flag: str, default: tuple[float, str]):
    from upvotes.operations.capacity_model import Assumption

    return Assumption(given, f"given by --{flag}") if given else Assumption(*default)


def _sink_shape():
    from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS, defaults
    from spanner_store.database import MUTATION_BUDGET
    from spanner_writes.deltas import MUTATIONS_PER_COMMIT, MUTATIONS_PER_DELTA, MUTATIONS_PER_PARENT
    from spanner_writes.folding import MUTATIONS_PER_HOUR, MUTATIONS_PER_POST
    from spanner_writes.votes import MUTATIONS_PER_VOTE
    from upvotes.operations.capacity_model import SinkShape

    return SinkShape(
        rows_per_commit=defaults(STREAMING_PARAMS)["rows_per_commit"],
        mutation_budget=MUTATION_BUDGET,
        mutations_per_delta=MUTATIONS_PER_DELTA,
        mutations_per_parent=MUTATIONS_PER_PARENT,
        mutations_per_commit=MUTATIONS_PER_COMMIT,
        posts_per_fold_commit=defaults(FOLD_PARAMS)["posts_per_commit"],
        fold_mutations_per_post=MUTATIONS_PER_POST,
        fold_mutations_per_hour=MUTATIONS_PER_HOUR,
        mutations_per_vote=MUTATIONS_PER_VOTE,
    )


def run(args: argparse.Namespace) -> int:
    from upvotes.operations.capacity_model import Assumption, Assumptions, Workload, capacity

    workload = Workload(
        votes_per_s=args.votes_per_s,
        posts=args.posts,
        zipf=args.zipf,
        batch_size=args.batch_size,
        window_s=args.window_seconds,
        fold_interval_s=args.fold_interval_seconds,
        count_reads_per_s=args.count_reads_per_s,
        shards=tuple(args.shards),
        state_fraction=args.state_fraction,
    )
    assumptions = Assumptions(
        spanner_writes_per_node_s=_assumption(
            args.spanner_writes_per_node_s, "spanner-writes-per-node-s", SPANNER_WRITES_PER_NODE
        ),
        spanner_optimized_writes_per_node_s=_assumption(
            args.spanner_optimized_writes_per_node_s,
            "spanner-optimized-writes-per-node-s",
            SPANNER_OPTIMIZED_WRITES_PER_NODE,
        ),
        spanner_reads_per_node_s=_assumption(
            args.spanner_reads_per_node_s, "spanner-reads-per-node-s", SPANNER_READS_PER_NODE
        ),
        hot_row_transactions_per_s=_assumption(
            args.hot_row_transactions_per_s, "hot-row-transactions-per-s", HOT_ROW_TRANSACTIONS
        ),
        chain_events_per_core_s=Assumption(*_chain_rate(args)),
        sink_rows_per_core_s=_assumption(args.sink_rows_per_core_s, "sink-rows-per-core-s", SINK_ROWS_PER_CORE),
    )
    report = capacity(workload, _sink_shape(), assumptions)
    print(json.dumps(report_json(report), indent=2) if args.json else "\n".join(report_lines(report)))
    return 0


def report_json(report) -> dict:
    return {
        "workload": asdict(report.workload),
        "hottest_post_share": report.hottest_post_share,
        "hottest_post_votes_per_s": report.hottest_post_votes_per_s,
        "shards_to_hold_hottest": report.shards_to_hold_hottest,
        "pubsub_messages_per_s": report.pubsub_messages_per_s,
        "delta_rows_per_window": report.delta_rows_per_window,
        "posts_per_fold": report.posts_per_fold,
        "fold_rows_read": report.fold_rows_read,
        "approaches": [a._asdict() for a in report.approaches],
        "vote_states": report.vote_states._asdict(),
        "assumptions": {name: a._asdict() for name, a in asdict(report.assumptions).items()},
    }


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 else f"{value:,.2g}"


COLUMNS = (
    ("approach", 30),
    ("rows/s", 11),
    ("commits/s", 11),
    ("mutations/s", 12),
    ("Spanner nodes", 14),
    ("Dataflow vCPUs", 15),
    ("hot row tx/s", 13),
    ("limit/row", 10),
    ("holds hot post", 15),
)


def _state_lines(report) -> list[str]:
    """What the vote-state events cost, when the workload has any."""
    s, w = report.vote_states, report.workload
    if not s.votes:
        return []
    plain = report.assumptions.spanner_writes_per_node_s.value
    optimized = report.assumptions.spanner_optimized_writes_per_node_s.value
    reads = report.assumptions.spanner_reads_per_node_s.value
    return [
        f"Vote states: {w.state_fraction:.0%} of the votes ({s.votes:,.0f}/s). Each writes its Votes row and reads the "
        f"stored one and its user's erasures: {s.row_writes:,.0f} rows written and {s.row_reads:,.0f} keys read per "
        f"second, one row and two keys per vote (a window's "
        f"merge only drops a user's own repeats), in {s.transactions:,.0f} read-write transactions/s that also write "
        f"{s.delta_rows:,.0f} delta rows/s, and no hot row: a post's Posts key is upserted once per worker "
        "(all in this design's figures below).",
        f"Spanner nodes the state writes need: {s.nodes_per_100k_votes_s:,.1f} per 100,000 vote states/s at "
        f"{plain:,.0f} writes/s per node, {s.nodes_per_100k_votes_s_optimized:,.1f} with throughput-optimized writes "
        f"({optimized:,.0f}/s per node), reads at {reads:,.0f}/s per node included; at this workload "
        f"{s.spanner_nodes:,.1f} nodes ({s.spanner_nodes_optimized:,.1f} optimized).",
    ]


def report_lines(report) -> list[str]:
    w = report.workload
    lines = [
        f"Workload: {w.votes_per_s:,.0f} votes/s over {w.posts:,} posts, Zipf {w.zipf}, {w.batch_size} events per "
        f"message ({report.pubsub_messages_per_s:,.0f} Pub/Sub messages/s), {w.window_s} s windows, fold every "
        f"{w.fold_interval_s:,.0f} s, {w.count_reads_per_s:,.0f} exact-count reads/s of the hottest post.",
        f"Hottest post: {report.hottest_post_share:.1%} of all votes, {report.hottest_post_votes_per_s:,.0f} votes/s "
        f"(sharded counters would need {report.shards_to_hold_hottest:,} shards to hold it).",
        f"This design: {report.delta_rows_per_window:,.0f} delta rows per window "
        f"({w.votes_per_s * (1 - w.state_fraction) * w.window_s / max(report.delta_rows_per_window, 1):,.1f} "
        "delta events per row), "
        f"{report.posts_per_fold:,.0f} posts per fold, which reads {report.fold_rows_read:,.0f} rows "
        f"(what changed in the interval; the other {max(0.0, w.posts - report.posts_per_fold):,.0f} posts are not read).",
        *_state_lines(report),
        "",
        "".join(name.ljust(width) if i == 0 else name.rjust(width) for i, (name, width) in enumerate(COLUMNS)),
    ]
    for a in report.approaches:
        cells = (
            a.approach,
            _figure(a.rows_written),
            _figure(a.commits),
            _figure(a.mutations),
            _figure(a.spanner_nodes),
            _figure(a.dataflow_vcpus),
            _figure(a.hot_row_writes),
            _figure(a.hot_row_limit),
            "yes" if a.holds_hot_post else "NO",
        )
        lines.append(
            "".join(
                c.ljust(width) if i == 0 else c.rjust(width) for i, (c, (_, width)) in enumerate(zip(cells, COLUMNS))
            )
        )
    lines += ["", "Assumptions:"]
    for name, (value, source) in report.assumptions.__dict__.items():
        lines.append(f"  {name} = {value:,.0f}: {source}")
    lines += [
        "",
        "rows/s: rows written (delta and Votes rows, or counter rows: one per vote). Commits of this design are full",
        "sink commits (rows per commit and the mutation budget of spanner_writes.deltas), the vote states' read-write",
        "transactions and fold transactions; smaller bundles on Dataflow mean more, smaller commits. Spanner nodes:",
        "rows written / writes per node + rows read / reads per node, compute only (storage not counted). RMW and",
        "sharded counters run on app servers: no pipeline.",
    ]
    return lines
