"""Benchmark hot_post, the race. Every approach on the same Spanner emulator, in the same run.

(a) The baselines, honestly: read-modify-write on one hot counter row, and sharded counters
(10 and 100 shards), over writer threads {1, 2, 4, 8} x {the client's own abort retry, our
short jittered retry}, each for a fixed time (upvotes.devtools.race). Every configuration is kept in
the results; the best one of each approach is its baseline.
(b) This project, the chain and sink fed from memory: batched messages (500 votes each)
through ParseVotes -> WindowAndSumVotes -> WriteDeltaRows on the FnApiRunner, then a fold.
(c) This project end to end: a viral burst (Zipf 1.2) published through Pub/Sub in batches
to the streaming pipeline (a DirectRunner subprocess), timed from the first publish until
every post's exact count equals the ledger.
(d) Memory under a sustained load: the same pipeline fed a steady batched load at 80% of
(c)'s rate (see SOAK_LOAD); its peak RSS after the first and after the whole soak.

For each approach: votes/s, and the Spanner-side cost per 1,000 votes: commits, mutations
(index entries included) and the Spanner emulator process's own CPU seconds, a proxy for the
load on the database.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage

from bench.benchmark import Benchmark, p50_p99_ms, table, target
from bench.config import FULL_RACE, QUICK_RACE, RACE_WINDOW_S, RACE_ZIPF, Race, race_workload
from bench.feeds import RSS_SAMPLES, counter_values, emit_cycled, local_pipeline, set_cycled_feed
from bench.measure import current_rss_mib, latency_summary, measured, timed_calls
from bench.spanner_cost import EmulatorCpu, delta_cost, spanner_cost
from bench.stack import (
    EXACT_READ_KIND,
    LedgeredBatches,
    PacedPublisher,
    check_alive,
    run_fold,
    streaming_pipeline,
    upvotes_of,
    wait_until_ready,
    with_topics,
)
from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS, defaults
from schemas.contract import batch_messages
from spanner_store.database import open_database
from spanner_writes.folding import MUTATIONS_PER_HOUR, MUTATIONS_PER_POST
from transforms.parse_and_sum import ParseVotes
from transforms.spanner_sink import WriteDeltaRows
from transforms.windowing import WindowAndSumVotes
from upvotes.devtools import baseline_counters
from upvotes.devtools.race import BASELINE_SWEEP, BaselineRun, race_pipeline, run_baseline
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import DEFAULT_BATCH_SIZE, UPVOTES_ONLY, Workload, generate_events
from upvotes.resources import Resources

CHAIN_POST = "hot-chain"
MESSAGE_POOL = 200  # distinct pre-encoded batches the in-memory feed cycles through
RSS_SAMPLES_PER_RUN = 10
E2E_TIMEOUT_S = 300.0
# Of the end-to-end rate, as the issue asks, the publisher on the same 2 cores. Measured at 80%:
# RSS ratio 1.057, exact 9 s after the load; with Beam's own DirectRunner evaluator instead of
# local_runner/window_state.py's (UPVOTES_DIRECT_RUNNER_CLEANUP=off), 1.099 and 25 s.
SOAK_LOAD = 0.8


# --- (a) the baselines ------------------------------------------------------------------------


def baseline_sweep(
    database, seconds: float, threads: tuple[int, ...]
) -> tuple[list[dict], dict[str, tuple[BaselineRun, dict]]]:
    """Every configuration for `seconds`; returns them all and the best run of each approach (with its row)."""
    rows: list[dict] = []
    best: dict[str, tuple[BaselineRun, dict]] = {}
    for config in BASELINE_SWEEP:
        if config.threads not in threads:
            continue
        counter = f"{config.approach}-{uuid.uuid4().hex[:8]}"
        with EmulatorCpu() as cpu:
            run = run_baseline(database, counter, config, seconds)
        assert run.exact, f"{config.label}: the counter does not equal the acknowledged votes"
        row = {
            **asdict(config),
            "approach": config.approach,
            "counter": counter,
            "votes": run.votes,
            "seconds": round(run.seconds, 2),
            "votes_per_s": round(run.votes_per_s, 1),
            "aborts": run.aborts,
            "exact": run.exact,
            **spanner_cost(run.votes, run.votes, run.votes * baseline_counters.MUTATIONS_PER_INCREMENT, cpu.seconds),
        }
        rows.append(row)
        if config.approach not in best or run.votes_per_s > best[config.approach][0].votes_per_s:
            best[config.approach] = (run, row)
    return rows, best


# --- (b) the chain and sink, fed from memory --------------------------------------------------


def chain_and_sink(res: Resources, database, votes: int) -> tuple[dict, Callable[[], int]]:
    """ParseVotes -> WindowAndSumVotes -> WriteDeltaRows over `votes` in-memory votes, in batches, then a fold."""
    events = generate_events(
        Workload(events=MESSAGE_POOL * DEFAULT_BATCH_SIZE, posts=1, seed=7, unvote_fraction=0.0, fractions=UPVOTES_ONLY)
    )
    pool = [
        PubsubMessage(m.data, m.attributes)
        for m in batch_messages(({**e, "post_id": CHAIN_POST} for e in events), DEFAULT_BATCH_SIZE)
    ]
    set_cycled_feed(pool, votes // DEFAULT_BATCH_SIZE, RSS_SAMPLES_PER_RUN)
    streaming = defaults(STREAMING_PARAMS)
    pipeline = local_pipeline()
    parsed = pipeline | "Start" >> beam.Impulse() | "Votes" >> beam.FlatMap(emit_cycled) | "ParseVotes" >> ParseVotes()
    (
        parsed.sums
        | "WindowAndSumVotes" >> WindowAndSumVotes(f"bench-{int(time.time())}", streaming["window_seconds"])
        | "WriteDeltaRows" >> WriteDeltaRows(res.project, res.instance, res.database, streaming["rows_per_commit"])
    )
    with EmulatorCpu() as cpu, measured() as usage:
        result = pipeline.run()
        result.wait_until_finish()
    sink = counter_values(result, "WriteDeltaRows")
    before_fold = upvotes_of(database, [CHAIN_POST])[CHAIN_POST]
    with EmulatorCpu() as fold_cpu:
        fold = run_fold(res)
    after_fold = upvotes_of(database, [CHAIN_POST])[CHAIN_POST]
    assert before_fold == votes and after_fold == votes, (
        f"chain and sink: {before_fold} before the fold, {after_fold} after, expected {votes}"
    )
    cost = delta_cost(database, CHAIN_POST)
    fold_commits = -(-fold["posts_folded"] // defaults(FOLD_PARAMS)["posts_per_commit"]) + 1  # + the FoldRuns row
    fold_mutations = fold["posts_folded"] * MUTATIONS_PER_POST + cost["post_hours"] * MUTATIONS_PER_HOUR
    commits = sink.get("commits", 0) + fold_commits
    samples = list(RSS_SAMPLES)
    memory = {
        "samples": [{"votes": n * DEFAULT_BATCH_SIZE, "rss_mib": round(rss, 1)} for n, rss in samples],
        "n_votes": samples[0][0] * DEFAULT_BATCH_SIZE,
        "rss_at_n_mib": round(samples[0][1], 1),
        "ten_n_votes": samples[-1][0] * DEFAULT_BATCH_SIZE,
        "rss_at_10n_mib": round(samples[-1][1], 1),
        "ratio_10n_to_n": round(samples[-1][1] / samples[0][1], 3),
    }
    emulator_cpu: float | None = None
    if cpu.seconds is not None:
        assert fold_cpu.seconds is not None  # the same emulator, measured the same way
        emulator_cpu = cpu.seconds + fold_cpu.seconds
    return {
        "votes": votes,
        "seconds": round(usage.wall_s, 3),
        "cpu_seconds": round(usage.cpu_s, 3),
        "votes_per_s": votes / usage.wall_s,
        "runner": "FnApiRunner (batch; windows on ingestion time)",
        "exact": True,
        "final_count": after_fold,
        "batch_size": DEFAULT_BATCH_SIZE,
        "commits": commits,
        "delta_rows": sink.get("rows_written", 0),
        "retries": sink.get("transient_retries", 0) + fold["retries"],
        **spanner_cost(votes, commits, cost["sink_mutations"] + fold_mutations, emulator_cpu),
        "fold": fold,
        "count_before_fold": before_fold,
        "count_after_fold": after_fold,
        "read_kind": EXACT_READ_KIND,
        "memory": memory,
    }, lambda: upvotes_of(database, [CHAIN_POST])[CHAIN_POST]


# --- (c) and (d): end to end through Pub/Sub, then the soak -----------------------------------


def end_to_end_and_soak(res: Resources, database, sizes: Sizes, log_dir: Path) -> tuple[dict, dict, Callable[[], int]]:
    stream_res = with_topics(res, "e2e")
    topic_path = stream_res.topic_path(stream_res.topic)
    log_path = log_dir / "hot_post_stream.log"
    prefix = "e2e-"
    workload = race_workload(sizes.race, prefix)
    with streaming_pipeline(stream_res, RACE_WINDOW_S, log_path) as process:
        wait_until_ready(database, topic_path, process, log_path)
        with EmulatorCpu() as cpu:
            race = race_pipeline(
                database,
                topic_path,
                workload,
                DEFAULT_BATCH_SIZE,
                E2E_TIMEOUT_S,
                alive=lambda: check_alive(process, log_path),
                progress=False,
            )
        assert race is not None, f"end to end: the counts did not match within {E2E_TIMEOUT_S:.0f} s; see {log_path}"
        soak = _soak(database, topic_path, process, log_path, SOAK_LOAD * race.votes_per_s, sizes)
    cost = delta_cost(database, prefix)
    e2e = {
        "votes": race.ledger.events,
        "posts": len(race.ledger.totals),
        "zipf": RACE_ZIPF,
        "seconds": round(race.seconds, 3),
        "votes_per_s": race.votes_per_s,
        "publish_seconds": round(race.report.seconds, 3),
        "messages": race.report.messages,
        "batch_size": DEFAULT_BATCH_SIZE,
        "window_s": RACE_WINDOW_S,
        "runner": "BundleBasedDirectRunner (streaming subprocess)",
        "cap": "the project's local Pub/Sub reader (local_runner/pubsub_reader.py) pulls up to 1,000 messages per bundle",
        "commits": cost["sink_commits"],
        "delta_rows": cost["delta_rows"],
        **spanner_cost(race.ledger.events, cost["sink_commits"], cost["sink_mutations"], cpu.seconds),
        "retries": None,
        "retries_note": "inside the subprocess; not observable from here",
        "read_kind": EXACT_READ_KIND,
        "exact": True,
        "final_count": race.ledger.events,
    }
    hottest = max(race.ledger.totals, key=lambda p: race.ledger.totals[p]["upvotes"])
    return e2e, soak, lambda: upvotes_of(database, [hottest])[hottest]


def _soak(database, topic_path: str, process, log_path: Path, votes_per_s: float, sizes: Sizes) -> dict:
    """A steady batched load at `votes_per_s` for sizes.soak_long_s; the pipeline's RSS along the way."""
    messages_per_s = votes_per_s / DEFAULT_BATCH_SIZE
    source = LedgeredBatches(
        Workload(
            events=int(votes_per_s * (sizes.soak_long_s + 30)), posts=1_000, zipf=RACE_ZIPF, seed=9, post_prefix="soak-"
        )
    )
    publisher = PacedPublisher(topic_path, source.next_message, messages_per_s)
    samples, started = [], time.monotonic()
    publisher.start()
    peak_short = None
    try:
        while (elapsed := time.monotonic() - started) < sizes.soak_long_s:
            check_alive(process, log_path)
            samples.append(
                {
                    "second": round(elapsed, 1),
                    "rss_mib": round(current_rss_mib(process.pid), 1),
                    "peak_mib": round(current_rss_mib(process.pid, "VmHWM"), 1),
                }
            )
            if peak_short is None and elapsed >= sizes.soak_short_s:
                peak_short = samples[-1]["peak_mib"]
            time.sleep(1.0)
    finally:
        publisher.stop()
    peak_long = current_rss_mib(process.pid, "VmHWM")
    # If the pipeline fell behind the load, its backlog waits in Pub/Sub (not in its memory);
    # how long it takes to drain says how far behind it was.
    ended = time.monotonic()
    deadline = ended + max(E2E_TIMEOUT_S, sizes.soak_long_s)
    while mismatched := verify_totals(database, source.ledger.totals):
        check_alive(process, log_path)
        assert time.monotonic() < deadline, f"soak: {len(mismatched)} counts did not match the ledger; see {log_path}"
        time.sleep(1.0)
    drain_s = time.monotonic() - ended
    assert peak_short is not None  # read at soak_short_s, before soak_long_s
    return {
        "votes_per_s": round(votes_per_s, 1),
        "load_of_e2e_rate": SOAK_LOAD,
        "votes": source.ledger.events,
        "short_s": sizes.soak_short_s,
        "long_s": sizes.soak_long_s,
        "peak_rss_after_short_mib": peak_short,
        "peak_rss_after_long_mib": round(peak_long, 1),
        "ratio_long_to_short": round(peak_long / peak_short, 3),
        "exact": True,
        "samples": samples,
        "seconds_to_exact_after_the_load": round(drain_s, 1),
    }


# --- the benchmark -------------------------------------------------------------------------


def run(sizes: Sizes, res: Resources, log_dir: Path) -> dict:
    """Every approach in turn on the bench database, then the interleaved total reads."""
    database = open_database(res.project, res.instance, res.database)
    sweep, best = baseline_sweep(database, sizes.sweep_seconds, sizes.sweep_threads)
    approaches: dict[str, dict] = {}
    readers: dict[str, Callable[[], int]] = {}
    for approach, (best_run, row) in best.items():
        approaches[approach] = {
            **row,
            "config": best_run.config.label,
            "final_count": best_run.votes,
            "read_kind": (
                "strong read of one row"
                if best_run.config.shards == 1
                else f"strong read: SUM over {best_run.config.shards} shard rows"
            ),
        }
        readers[approach] = functools.partial(baseline_counters.total, database, row["counter"])
    approaches["chain_sink"], readers["chain_sink"] = chain_and_sink(res, database, sizes.chain_votes)
    e2e, soak, readers["e2e_pubsub"] = end_to_end_and_soak(res, database, sizes, log_dir)
    approaches["e2e_pubsub"] = e2e
    # Reads last and interleaved, so every approach sees the same database (strong reads on
    # the emulator slow down as commits accumulate).
    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(sizes.reads):
        for name, read in readers.items():
            samples[name] += timed_calls(read, 1)
    for name, result in approaches.items():
        result["read_latency"] = latency_summary(samples[name])
    rmw = approaches["rmw"]
    for result in approaches.values():
        result["votes_per_s_vs_rmw"] = result["votes_per_s"] / rmw["votes_per_s"]
    return {"approaches": approaches, "sweep": sweep, "memory": approaches["chain_sink"]["memory"], "soak": soak}


# --- sizes and report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    sweep_seconds: float  # per read-modify-write / sharded configuration
    sweep_threads: tuple[int, ...]  # writer threads tried, each with both retry policies
    chain_votes: int  # through the in-memory chain and sink; RSS sampled every tenth
    race: Race  # (c)'s viral burst end to end through Pub/Sub
    soak_short_s: int  # streaming peak RSS after this long under a steady load ...
    soak_long_s: int  # ... and after this long
    reads: int  # total-read latency samples per approach


FULL = Sizes(
    sweep_seconds=4.0,
    sweep_threads=(1, 2, 4, 8),
    chain_votes=1_000_000,
    race=FULL_RACE,
    soak_short_s=60,
    soak_long_s=300,
    reads=50,
)
QUICK = Sizes(
    sweep_seconds=0.5,
    sweep_threads=(1, 4),
    chain_votes=50_000,
    race=QUICK_RACE,
    soak_short_s=2,
    soak_long_s=6,
    reads=20,
)

APPROACH_LABELS = {
    "rmw": "Read-modify-write, 1 row",
    "sharded_10": "Sharded counter, 10 shards",
    "sharded_100": "Sharded counter, 100 shards",
    "chain_sink": "This project: chain + sink (memory, batches) + fold",
    "e2e_pubsub": "This project: end to end via Pub/Sub (batches)",
}
PLOT_LABELS = {
    "rmw": "RMW",
    "sharded_10": "Sharded\n10",
    "sharded_100": "Sharded\n100",
    "chain_sink": "Chain + sink\n(memory)",
    "e2e_pubsub": "End to end\n(Pub/Sub)",
}


def targets(document: dict) -> list[dict]:
    hot_post = document["benchmarks"]["hot_post"]
    hot = hot_post["approaches"]
    rmw, chain, e2e = hot["rmw"], hot["chain_sink"], hot["e2e_pubsub"]
    sweep, soak = hot_post["sweep"], hot_post["soak"]
    commits_ratio = chain["commits_per_1k_votes"] / rmw["commits_per_1k_votes"]
    race_ratio = e2e["votes_per_s"] / rmw["votes_per_s"]
    best = ", ".join(
        f"{name}: {hot[name]['config']} ({hot[name]['votes_per_s']:,.0f}/s)"
        for name in ("rmw", "sharded_10", "sharded_100")
    )
    costs = "; ".join(
        f"{name} {a['commits_per_1k_votes']:,.3g} commits, {a['mutations_per_1k_votes']:,.4g} mutations, "
        + ("n/a" if a["emulator_cpu_s_per_1k_votes"] is None else f"{a['emulator_cpu_s_per_1k_votes']:.3g}")
        + " emulator CPU s"
        for name, a in hot.items()
    )
    return [
        target(
            "Baselines at their best: threads {1,2,4,8} x {client retry, jittered retry} each",
            f"{len(sweep)} configurations; best {best}",
            all(
                hot[name]["votes_per_s"] == max(r["votes_per_s"] for r in sweep if r["approach"] == name)
                for name in ("rmw", "sharded_10", "sharded_100")
            ),
        ),
        target(
            "End to end, publish -> exact read of a batched viral burst, >= 20x the best RMW of the same run",
            f"{e2e['votes_per_s']:,.0f} votes/s ({e2e['votes']:,} votes over {e2e['posts']:,} posts, "
            f"{e2e['messages']:,} messages) vs best RMW {rmw['votes_per_s']:,.0f}: {race_ratio:.1f}x",
            race_ratio >= 20,
        ),
        target(
            "Spanner cost per 1,000 votes for every approach (commits, mutations with index entries, emulator CPU)",
            costs,
            all(a.get("mutations_per_1k_votes") is not None for a in hot.values()),
        ),
        target(
            f"Memory flat: streaming peak RSS after {soak['long_s']} s / after {soak['short_s']} s of a steady "
            f"load at {soak['load_of_e2e_rate']:.0%} of the e2e rate <= 1.1",
            f"{soak['peak_rss_after_long_mib']:.0f} / {soak['peak_rss_after_short_mib']:.0f} MiB = "
            f"{soak['ratio_long_to_short']:.3f} at {soak['votes_per_s']:,.0f} votes/s ({soak['votes']:,} votes, exact)",
            soak["ratio_long_to_short"] <= 1.1,
        ),
        target(
            "Commits per 1,000 hot-post votes <= 1/1,000 of read-modify-write's",
            f"chain + sink + fold: {chain['commits_per_1k_votes']:.4f} vs RMW {rmw['commits_per_1k_votes']:.0f} "
            f"(ratio {commits_ratio:.1e}); end to end with {e2e['window_s']} s windows: {e2e['commits_per_1k_votes']:.2f}",
            commits_ratio <= 1e-3,
        ),
    ]


def _sweep_cell(sweep: list[dict], best: dict, approach: str, threads: int, retry: str) -> str:
    row = next((r for r in sweep if (r["approach"], r["threads"], r["retry"]) == (approach, threads, retry)), None)
    if row is None:
        return "-"
    text = f"{row['votes_per_s']:,.0f} ({row['aborts']:,})"
    return f"**{text}**" if best[approach]["counter"] == row["counter"] else text


def markdown(document: dict) -> list[str]:
    hot_post = document["benchmarks"]["hot_post"]
    hot = hot_post["approaches"]
    mem, soak = hot_post["memory"], hot_post["soak"]
    return [
        "The race: every approach on the same Spanner emulator, same run",
        table(
            [
                "Approach",
                "Configuration",
                "Votes",
                "Votes/s",
                "x best RMW",
                "Commits / 1k votes",
                "Mutations / 1k votes",
                "Emulator CPU s / 1k votes",
                "Exact",
                "Total read",
                "Read p50 / p99 ms",
            ],
            [
                [
                    APPROACH_LABELS[name],
                    a.get("config", a.get("runner", "")),
                    f"{a['votes']:,}",
                    f"{a['votes_per_s']:,.1f}",
                    f"{a['votes_per_s_vs_rmw']:,.1f}",
                    f"{a['commits_per_1k_votes']:,.4g}",
                    f"{a['mutations_per_1k_votes']:,.4g}",
                    "n/a" if a["emulator_cpu_s_per_1k_votes"] is None else f"{a['emulator_cpu_s_per_1k_votes']:.3g}",
                    "yes" if a["exact"] else "NO",
                    a["read_kind"],
                    p50_p99_ms(a["read_latency"]),
                ]
                for name, a in hot.items()
            ],
        ),
        "Every baseline configuration (votes/s; aborted attempts), best of each approach in bold:",
        table(
            ["Approach", "Threads", "Client retry", "Jittered retry"],
            [
                [approach, str(threads)]
                + [_sweep_cell(hot_post["sweep"], hot, approach, threads, retry) for retry in ("client", "jittered")]
                for approach in ("rmw", "sharded_10", "sharded_100")
                for threads in sorted({r["threads"] for r in hot_post["sweep"]})
            ],
        ),
        f"Memory, in-memory chain (FnApiRunner): {mem['rss_at_n_mib']:.0f} MiB after {mem['n_votes']:,} votes, "
        f"{mem['rss_at_10n_mib']:.0f} MiB after {mem['ten_n_votes']:,} (ratio {mem['ratio_10n_to_n']:.3f}). "
        f"Streaming subprocess under a steady batched load of {soak['votes_per_s']:,.0f} votes/s "
        f"({soak['load_of_e2e_rate']:.0%} of the end-to-end rate): peak RSS {soak['peak_rss_after_short_mib']:.0f} MiB "
        f"after {soak['short_s']} s, {soak['peak_rss_after_long_mib']:.0f} MiB after {soak['long_s']} s "
        f"(ratio {soak['ratio_long_to_short']:.3f}); {soak['votes']:,} votes counted exactly, "
        f"{soak['seconds_to_exact_after_the_load']:.0f} s after the load stopped.",
    ]


def race_bars(document: dict) -> list[tuple[str, float, float, str]]:
    """(label, votes/s, mutations per 1k votes, colour) of every approach in the race, the
    write-back cache's modes included when it ran."""
    from bench import write_back

    hot = document["benchmarks"]["hot_post"]["approaches"]
    bars = [(PLOT_LABELS[name], a["votes_per_s"], a["mutations_per_1k_votes"], "tab:blue") for name, a in hot.items()]
    return bars + write_back.race_bars(document)


def chart(document: dict) -> list:
    labels, rates, mutations, colours = zip(*race_bars(document))
    soak = document["benchmarks"]["hot_post"]["soak"]
    names = "hot_post, write_back" if "write_back" in document["benchmarks"] else "hot_post"

    def race(ax) -> None:
        bars = ax.bar(labels, rates, color=colours)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{names}: the race: votes/s, best configuration of each")
        ax.tick_params(axis="x", labelsize=7, labelrotation=45)

    def cost(ax) -> None:
        bars = ax.bar(labels, mutations, color="tab:orange")
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{names}: Spanner mutations per 1,000 votes (index entries included)")
        ax.tick_params(axis="x", labelsize=7, labelrotation=45)

    def memory(ax) -> None:
        samples = soak["samples"]
        ax.plot([s["second"] for s in samples], [s["rss_mib"] for s in samples], "-", label="RSS")
        ax.plot([s["second"] for s in samples], [s["peak_mib"] for s in samples], "--", label="peak RSS")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds of steady batched load")
        ax.set_ylabel("MiB")
        ax.set_title(f"hot_post: memory: streaming pipeline at {soak['votes_per_s']:,.0f} votes/s")
        ax.legend()

    return [race, cost, memory]


BENCHMARK = Benchmark(
    name="hot_post",
    title="The race: every approach on one hot post, same emulator, same run",
    full=FULL,
    quick=QUICK,
    run=run,
    markdown=markdown,
    targets=targets,
    chart=chart,
)
