"""Targets, the markdown tables, latest.json and latest.png."""
from __future__ import annotations

import json
from pathlib import Path

JSON_NAME = "latest.json"
PNG_NAME = "latest.png"
MARKDOWN_NAME = "latest.md"  # the tables, as printed: what bench/README.md and docs/benchmarks.md show

APPROACH_LABELS = {
    "rmw": "Read-modify-write, 1 row",
    "sharded_10": "Sharded counter, 10 shards",
    "sharded_100": "Sharded counter, 100 shards",
    "chain_sink": "This project: chain + sink (memory, batches) + fold",
    "e2e_pubsub": "This project: end to end via Pub/Sub (batches)",
}
PLOT_LABELS = {
    "rmw": "RMW", "sharded_10": "Sharded\n10", "sharded_100": "Sharded\n100",
    "chain_sink": "Chain + sink\n(memory)", "e2e_pubsub": "End to end\n(Pub/Sub)",
}


def _target(text: str, measured: str, met: bool) -> dict:
    return {"target": text, "measured": measured, "met": met}


def evaluate_targets(document: dict) -> list[dict]:
    """Each target with what was measured; nothing here asserts."""
    bench = document["benchmarks"]
    hot = bench["hot_post"]["approaches"]
    rmw, chain, e2e = hot["rmw"], hot["chain_sink"], hot["e2e_pubsub"]
    sweep = bench["hot_post"]["sweep"]
    soak = bench["hot_post"]["soak"]
    commits_ratio = chain["commits_per_1k_votes"] / rmw["commits_per_1k_votes"]
    race_ratio = e2e["votes_per_s"] / rmw["votes_per_s"]
    variants = bench["transform_cost"]["variants"]
    batched, single = variants["beam_chain_batched"], variants["beam_chain"]
    fold = bench["fold_scaling"]
    fresh = bench["freshness"]
    reads = bench["hot_reads"]
    lib_low, lib_high = reads["library"][0], reads["library"][-1]
    http_high = reads["http"][-1]
    growth = lib_high["reads_per_s"] / lib_low["reads_per_s"]
    per_refresh_max = max(p["spanner_reads_per_refresh"] for p in reads["library"] + reads["http"])
    best = ", ".join(f"{name}: {hot[name]['config']} ({hot[name]['votes_per_s']:,.0f}/s)"
                     for name in ("rmw", "sharded_10", "sharded_100"))
    costs = "; ".join(
        f"{name} {a['commits_per_1k_votes']:,.3g} commits, {a['mutations_per_1k_votes']:,.4g} mutations, "
        + ("n/a" if a["emulator_cpu_s_per_1k_votes"] is None else f"{a['emulator_cpu_s_per_1k_votes']:.3g}")
        + " emulator CPU s" for name, a in hot.items())
    return [
        _target(
            "Baselines at their best: threads {1,2,4,8} x {client retry, jittered retry} each",
            f"{len(sweep)} configurations; best {best}",
            all(hot[name]["votes_per_s"] == max(r["votes_per_s"] for r in sweep if r["approach"] == name)
                for name in ("rmw", "sharded_10", "sharded_100")),
        ),
        _target(
            "End to end, publish -> exact read of a batched viral burst, >= 20x the best RMW of the same run",
            f"{e2e['votes_per_s']:,.0f} votes/s ({e2e['votes']:,} votes over {e2e['posts']:,} posts, "
            f"{e2e['messages']:,} messages) vs best RMW {rmw['votes_per_s']:,.0f}: {race_ratio:.1f}x",
            race_ratio >= 20,
        ),
        _target(
            "Chain >= plain Python (json.loads + dict of sums) per core on batched input",
            f"batched {batched['vs_plain_json']:.2f}x plain_json all in, {batched['steady_vs_plain_json']:.2f}x without "
            f"the {bench['transform_cost']['beam_run_fixed_cpu_seconds']:.2f} s a Beam run costs once "
            f"({batched['vs_plain_orjson']:.2f}x plain_orjson); single-event {single['vs_plain_json']:.2f}x",
            batched["vs_plain_json"] >= 1.0,
        ),
        _target(
            "Spanner cost per 1,000 votes for every approach (commits, mutations with index entries, emulator CPU)",
            costs,
            all(a.get("mutations_per_1k_votes") is not None for a in hot.values()),
        ),
        _target(
            f"Memory flat: streaming peak RSS after {soak['long_s']} s / after {soak['short_s']} s of a steady "
            f"load at {soak['load_of_e2e_rate']:.0%} of the e2e rate <= 1.1",
            f"{soak['peak_rss_after_long_mib']:.0f} / {soak['peak_rss_after_short_mib']:.0f} MiB = "
            f"{soak['ratio_long_to_short']:.3f} at {soak['votes_per_s']:,.0f} votes/s ({soak['votes']:,} votes, exact)",
            soak["ratio_long_to_short"] <= 1.1,
        ),
        _target(
            "Commits per 1,000 hot-post votes <= 1/1,000 of read-modify-write's",
            f"chain + sink + fold: {chain['commits_per_1k_votes']:.4f} vs RMW {rmw['commits_per_1k_votes']:.0f} "
            f"(ratio {commits_ratio:.1e}); end to end with {e2e['window_s']} s windows: {e2e['commits_per_1k_votes']:.2f}",
            commits_ratio <= 1e-3,
        ),
        _target(
            f"Fold linear: {fold['size_ratio']:.0f}x deltas in <= {1.2 * fold['size_ratio']:.0f}x time (each run folding all)",
            f"{fold['time_ratio']:.2f}x time; log-log exponent {fold['exponent']:.2f} "
            f"(fixed cost of an empty fold {fold['empty_fold_seconds']:.1f} s); one run folded "
            + ", ".join(f"{p['deltas_folded']:,} of {p['deltas']:,}" for p in fold["points"] + [fold["completeness"]])
            + f" (the last over {fold['completeness']['posts']:,} posts)",
            fold["folded_all"] and fold["time_ratio"] <= 1.2 * fold["size_ratio"],
        ),
        _target(
            f"Exact-read latency flat within 20% from 0 to {fold['reads'][-1]['old_deltas']:,} old deltas",
            f"p50 ratio {fold['read_p50_ratio_strong']:.2f} (exact_counts, strong snapshot), "
            f"{fold['read_p50_ratio_exact_timestamp']:.2f} (exact-timestamp snapshot)",
            fold["read_p50_ratio_strong"] <= 1.2,
        ),
        _target(
            f"Freshness p99 <= 2 windows + 1 s ({fresh['target_s']} s)",
            f"p99 {fresh['latency']['p99_ms'] / 1000:.1f} s, p50 {fresh['latency']['p50_ms'] / 1000:.1f} s "
            f"at {fresh['rate_events_per_s']} events/s",
            fresh["latency"]["p99_ms"] / 1000 <= fresh["target_s"],
        ),
        _target(
            f"Hot reads: Spanner reads/s flat (<= 1 per post per {reads['refresh_s']:g} s refresh) while "
            "client reads/s grow 10x",
            f"library: {lib_low['reads_per_s']:,.0f} -> {lib_high['reads_per_s']:,.0f} reads/s ({growth:.1f}x) with "
            f"{lib_low['spanner_reads_per_s']:.2f} -> {lib_high['spanner_reads_per_s']:.2f} Spanner reads/s; HTTP at "
            f"{http_high['reads_per_s']:,.0f} req/s: {http_high['spanner_reads_per_s']:.2f}; uncached baseline "
            f"{reads['baseline_uncached']['spanner_reads_per_s']:,.0f} Spanner reads/s",
            per_refresh_max <= 1.0 + 1e-9 and growth >= 9.0,
        ),
        *_unique_voter_targets(bench),
        *_write_back_targets(bench),
        *_catalogue_cost_targets(bench),
        *_stream_stop_targets(bench),
        *_vote_state_targets(bench),
    ]


def _unique_voter_targets(bench: dict) -> list[dict]:
    if "unique_voters" not in bench:
        return []
    uv = bench["unique_voters"]
    largest, small = uv["errors"][-1], [p for p in uv["errors"] if p["voters"] <= 1_000]
    return [_target(
        "Unique voters within 2% at the largest audience (1,000,000 distinct voters in the full run), "
        "exact or near-exact up to 1,000",
        f"{largest['relative_error']:.2%} at {largest['voters']:,} ({largest['deltas']} delta sketches unioned); "
        f"up to 1,000: max {max(p['relative_error'] for p in small):.2%}",
        largest["relative_error"] <= 0.02 and all(p["relative_error"] <= 0.005 for p in small),
    )]


# --- markdown ---------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _sweep_cell(sweep: list[dict], best: dict, approach: str, threads: int, retry: str) -> str:
    row = next((r for r in sweep if (r["approach"], r["threads"], r["retry"]) == (approach, threads, retry)), None)
    if row is None:
        return "-"
    text = f"{row['votes_per_s']:,.0f} ({row['aborts']:,})"
    return f"**{text}**" if best[approach]["counter"] == row["counter"] else text


def _ms(summary: dict) -> str:
    return f"{summary['p50_ms']:,.1f} / {summary['p99_ms']:,.1f}"


def markdown(document: dict) -> str:
    m, bench = document["machine"], document["benchmarks"]
    parts = [
        f"## Benchmark results ({document['sizes']['name']} run)",
        f"{m['date']} on {m['nproc']} x {m['cpu_model']}, Python {m['python']}, Beam {m['apache_beam']}, "
        f"google-cloud-spanner {m['google_cloud_spanner']}; load average {m['load_average_1m']} before, "
        f"{m['load_average_1m_after']} after; {document['total_seconds']:.0f} s in all.",
    ]
    hot = bench["hot_post"]["approaches"]
    parts += ["### 1. The race: every approach on the same Spanner emulator, same run", _table(
        ["Approach", "Configuration", "Votes", "Votes/s", "x best RMW", "Commits / 1k votes", "Mutations / 1k votes",
         "Emulator CPU s / 1k votes", "Exact", "Total read", "Read p50 / p99 ms"],
        [[APPROACH_LABELS[name], a.get("config", a.get("runner", "")), f"{a['votes']:,}", f"{a['votes_per_s']:,.1f}",
          f"{a['votes_per_s_vs_rmw']:,.1f}", f"{a['commits_per_1k_votes']:,.4g}", f"{a['mutations_per_1k_votes']:,.4g}",
          "n/a" if a["emulator_cpu_s_per_1k_votes"] is None else f"{a['emulator_cpu_s_per_1k_votes']:.3g}",
          "yes" if a["exact"] else "NO", a["read_kind"], _ms(a["read_latency"])]
         for name, a in hot.items()],
    ), "Every baseline configuration (votes/s; aborted attempts), best of each approach in bold:", _table(
        ["Approach", "Threads", "Client retry", "Jittered retry"],
        [[approach, str(threads)] + [_sweep_cell(bench["hot_post"]["sweep"], hot, approach, threads, retry)
                                     for retry in ("client", "jittered")]
         for approach in ("rmw", "sharded_10", "sharded_100")
         for threads in sorted({r["threads"] for r in bench["hot_post"]["sweep"]})],
    )]
    mem, soak = bench["hot_post"]["memory"], bench["hot_post"]["soak"]
    parts.append(
        f"Memory, in-memory chain (FnApiRunner): {mem['rss_at_n_mib']:.0f} MiB after {mem['n_votes']:,} votes, "
        f"{mem['rss_at_10n_mib']:.0f} MiB after {mem['ten_n_votes']:,} (ratio {mem['ratio_10n_to_n']:.3f}). "
        f"Streaming subprocess under a steady batched load of {soak['votes_per_s']:,.0f} votes/s "
        f"({soak['load_of_e2e_rate']:.0%} of the end-to-end rate): peak RSS {soak['peak_rss_after_short_mib']:.0f} MiB "
        f"after {soak['short_s']} s, {soak['peak_rss_after_long_mib']:.0f} MiB after {soak['long_s']} s "
        f"(ratio {soak['ratio_long_to_short']:.3f}); {soak['votes']:,} votes counted exactly, "
        f"{soak['seconds_to_exact_after_the_load']:.0f} s after the load stopped."
    )
    tc = bench["transform_cost"]
    parts += [f"### 2. Transform CPU cost ({tc['workload']}; {tc['runner']})", _table(
        ["Variant", "Input", "Events", "CPU s", "Events/s per core", "x plain_json", "x plain_orjson",
         "x plain_json without the run's fixed cost", "Exact"],
        [[name, f"{v['input']} ({v['events_per_message']}/message)", f"{v['events']:,}", f"{v['cpu_seconds']:.2f}",
          f"{v['events_per_s_per_core']:,.0f}", f"{v['vs_plain_json']:.3f}", f"{v['vs_plain_orjson']:.3f}",
          f"{v['steady_vs_plain_json']:.3f}", "yes" if v["exact"] else "NO"] for name, v in tc["variants"].items()],
    ), f"Profile of beam_chain over {tc['profile']['events']:,} events (cProfile inflates the absolute figures):",
        _table(["Area", "Share", "us per event"],
               [[a["area"], f"{a['share']:.1%}", f"{a['us_per_event']:.1f}"] for a in tc["profile"]["areas"]])]
    wa = bench["write_amplification"]
    sample = wa["pipeline_sample"]
    parts += [f"### 3. Write amplification ({wa['workload']})", _table(
        ["Figure", "Rows", "Per 1M votes"],
        [["Lower bound: (post, hour, window) groups", f"{wa['lower_bound_groups']:,}", f"{wa['delta_rows_per_1m_votes']:,.0f}"],
         ["Delta rows (WindowAndSumVotes)", f"{wa['delta_rows']:,}", f"{wa['delta_rows_per_1m_votes']:,.0f}"],
         *([[f"Delta rows by `upvotes capacity`'s model (x{wa['model_vs_delta_rows']:.3f} of counted)",
             f"{wa['model_delta_rows']:,}", ""]] if "model_delta_rows" in wa else []),
         ["+ parent key upserts (one per post per commit)", f"{wa['parent_upserts']:,}", ""],
         ["Rows written in all", f"{wa['rows_written']:,}", f"{wa['rows_per_1m_votes']:,.0f}"],
         ["Read-modify-write (one row write per vote)", "", f"{wa['rmw_rows_per_1m_votes']:,}"]]
        + [[f"Lower bound with {w['window_s']} s windows", f"{w['lower_bound_groups']:,}", f"{w['delta_rows_per_1m_votes']:,.0f}"]
           for w in wa["window_sweep"]],
    ), f"WindowAndSumVotes on the FnApiRunner over {sample['posts']} ({sample['votes']:,} votes): "
       f"{sample['pipeline_deltas']:,} deltas for {sample['lower_bound_groups']:,} groups "
       f"(ratio {wa['delta_rows_vs_lower_bound']:.3f}), sums exact."]
    fs = bench["fold_scaling"]
    parts += [f"### 4. Fold and read scaling ({fs['runner']})", _table(
        ["Deltas", "Posts", "Insert rows/s", "Folded by one run", "Fold s", "Deltas/s folded", "Posts/s folded"],
        [[f"{p['deltas']:,}", f"{p['posts']:,}", f"{p['insert_rows_per_s']:,.0f}",
          f"{p['deltas_folded']:,}" + ("" if p["folded_all"] else " (NOT ALL)"), f"{p['fold_seconds']:.2f}",
          f"{p['deltas_per_s']:,.0f}", f"{p['posts_per_s']:,.0f}"] for p in fs["points"]],
    ), f"Log-log exponent {fs['exponent']:.2f}; an empty fold takes {fs['empty_fold_seconds']:.1f} s. "
       f"Completeness: one run over {fs['completeness']['posts']:,} posts folded {fs['completeness']['deltas_folded']:,} "
       f"of {fs['completeness']['deltas']:,} deltas ({fs['completeness']['posts_folded']:,} posts). "
       f"Sink commit of {fs['sink_commit_cost']['rows']:,} deltas on the emulator: "
       f"{fs['sink_commit_cost']['distinct_posts']['rows_per_s']:,.0f} rows/s with a Posts key upsert per delta, "
       f"{fs['sink_commit_cost']['ten_deltas_per_post']['rows_per_s']:,.0f} rows/s with one per 10 deltas.", _table(
        ["Old folded deltas", "exact_counts (strong) p50 / p99 ms", "Exact timestamp p50 / p99 ms", "Samples"],
        [[f"{r['old_deltas']:,}", _ms(r["exact_counts_strong"]), _ms(r["exact_timestamp"]),
          f"{r['exact_counts_strong']['samples']} / {r['exact_timestamp']['samples']}"] for r in fs["reads"]],
    )]
    fr = bench["freshness"]
    parts += [f"### 5. Freshness (streaming subprocess, {fr['window_s']} s windows)", _table(
        ["Events/s", "Seconds", "Markers", "p50 s", "p99 s", "Max s", "Target s"],
        [[f"{fr['rate_events_per_s']}", f"{fr['load_seconds']}", f"{fr['markers']}",
          f"{fr['latency']['p50_ms'] / 1000:.2f}", f"{fr['latency']['p99_ms'] / 1000:.2f}",
          f"{fr['latency']['max_ms'] / 1000:.2f}", f"{fr['target_s']}"]],
    )]
    hr = bench["hot_reads"]
    parts += [f"### 6. Hot reads: {hr['callers']} callers, one post, refresh {hr['refresh_s']:g} s", _table(
        ["Reader", "Target reads/s", "Reads/s achieved", "Spanner reads/s", "x baseline Spanner reads/s",
         "Latency p50 / p99 ms", "Errors", "Exact"],
        [[label, f"{p['target_reads_per_s']:,}", f"{p['reads_per_s']:,.0f}", f"{p['spanner_reads_per_s']:,.2f}",
          f"{p['spanner_reads_per_s'] / hr['baseline_uncached']['spanner_reads_per_s']:.4f}", _ms(p["latency"]),
          f"{p['errors']}", "yes" if p["exact"] else "NO"]
         for label, p in [("exact_counts per request (baseline)", hr["baseline_uncached"])]
         + [("CountsReader (library)", p) for p in hr["library"]]
         + [("upvotes serve (HTTP, httpx keep-alive)", p) for p in hr["http"]]],
    )]
    if "commit_sizes" in bench:
        cs = bench["commit_sizes"]
        parts += [f"### 7. Largest commit (mutations, Spanner's limit {cs['limit']:,}; a post with "
                  f"{cs['hours']:,} event hours)", _table(
            ["Component", "Largest commit", "Share of the limit", "Commits"],
            [[name, f"{c['largest_commit']:,}", f"{c['largest_commit'] / cs['limit']:.2f}", f"{c['commits']}"]
             for name, c in cs["components"].items()]
            + [["fold before issue 15 (one transaction per post, computed)", f"{cs['baseline_one_transaction_fold']:,}",
                f"{cs['baseline_over_limit']:.2f}", "1"]],
        )]
        if "sink_commit_shape" in cs:
            parts += [_commit_shape_section(cs["sink_commit_shape"], cs["fold_commit_shape"])]
    if "unique_voters" in bench:
        uv = bench["unique_voters"]
        ws, wo, cpu = uv["with_sketches"], uv["without_sketches"], uv["cpu"]
        parts += [f"### 8. Unique voters (HyperLogLog, lg_k {uv['lg_k']}, at most {uv['max_sketch_bytes']:,} bytes)",
                  _table(["Distinct voters", "Upvotes", "Delta sketches", "Estimate", "Relative error",
                          "Bytes per delta sketch (mean)", "Folded sketch bytes"],
                         [[f"{p['voters']:,}", f"{p['votes']:,}", f"{p['deltas']}", f"{p['estimate']:,}",
                           f"{p['relative_error']:.2%}", f"{p['delta_sketch_bytes_mean']:,}", f"{p['folded_sketch_bytes']:,}"]
                          for p in uv["errors"]]),
                  f"Same {uv['workload_votes']:,}-vote Zipf workload, with sketches and without (user IDs removed), "
                  "same run:",
                  _table(["", "Delta rows / 1k votes", "Mutations / 1k votes", "Sketch bytes per row (mean / max)",
                          "Write s", "Fold s", "Exact"],
                         [[label, f"{r['rows_per_1k_votes']:.1f}", f"{r['mutations_per_1k_votes']:,.0f}",
                           f"{r['sketch_bytes_per_row']:,.0f} / {r['sketch_bytes_max']:,}", f"{r['write_s']:.2f}",
                           f"{r['fold_s']:.2f}", "yes" if r["exact"] else "NO"]
                          for label, r in (("with sketches", ws), ("without", wo))]
                         + [["ratio"] + [f"{uv['ratios'][k]:.3f}" if uv["ratios"][k] is not None else "-"
                                         for k in ("rows_per_1k_votes", "mutations_per_1k_votes")]
                            + ["-"] + [f"{uv['ratios'][k]:.3f}" if uv["ratios"][k] is not None else "-"
                                       for k in ("write_s", "fold_s")] + ["-"]]),
                  f"CPU of the chain's parse-and-sum per vote: {cpu['us_per_vote_with_voters']:.2f} µs recording voters "
                  f"vs {cpu['us_per_vote_without_user_ids']:.2f} µs without user IDs (+{cpu['added_us_per_vote']:.2f} µs, "
                  f"{cpu['ratio']:.2f}x; best of 3 over {cpu['votes']:,} votes)."]
    parts += _write_back_markdown(document)
    parts += _catalogue_cost_markdown(bench)
    parts += _stream_stop_sections(bench)
    parts += _vote_state_markdown(bench)
    parts += ["### Time, peak RSS and largest commit per benchmark (each in its own process)", _table(
        ["Benchmark", "Seconds", "Peak RSS MiB", "Subprocess peak RSS MiB", "Largest commit (mutations)"],
        [[name, f"{b['seconds']:.0f}", f"{b['peak_rss']['self_mib']:.0f}",
          f"{b['peak_rss']['children_mib']:.0f}" if b["peak_rss"]["children_mib"] else "-",
          f"{b['largest_commit_mutations']:,}" if "largest_commit_mutations" in b else "-"]
         for name, b in bench.items()],
    )]
    parts += ["### Targets", _table(
        ["Target", "Measured", "Met"],
        [[t["target"], t["measured"], "met" if t["met"] else "NOT met"] for t in document["targets"]],
    )]
    return "\n\n".join(parts) + "\n"


def _commit_shape_section(sink: dict, fold: dict) -> str:
    """Key ranges per commit (a proxy for the splits a commit touches) of the sink and the fold,
    against the same rows in arrival order, same run."""
    rows = [[f"sink, one window of {sink['rows']:,} delta rows: {label}", f"{r['commits']}",
             f"{r['key_ranges_per_commit']:.1f} / {r['key_ranges_largest']}", f"{r['mutations_per_commit']:,}"]
            for label, r in (("arrival order (before issue 30)", sink["arrival_order_baseline"]),
                             ("key order (plan_commits)", sink["key_order"]))]
    before, after = fold["arrival_order_baseline"], fold["by_key_range"]
    rows += [[f"fold of those {fold['posts']:,} posts: {label}", f"{r['commits']}",
              f"{r['key_ranges_per_commit']:.1f} / {r['key_ranges_largest']}", mutations]
             for label, r, mutations in (("transactions of the posts as met (before, computed)", before, "-"),
                                         ("grouped by key range", after, f"{after['mutations_per_commit']:,}"))]
    return ("Commit shape: distinct key ranges per commit (1/64 of the PostHash space, a proxy for the splits "
            "a commit touches on real Spanner), same rows, same run:\n\n"
            + _table(["Commits", "Commits (n)", "Key ranges per commit (mean / largest)", "Mutations per commit"], rows)
            + f"\n\nSink: {sink['key_order']['key_ranges_per_commit'] / sink['arrival_order_baseline']['key_ranges_per_commit']:.2f}x "
              f"the ranges per commit; fold: {after['key_ranges_per_commit'] / before['key_ranges_per_commit']:.2f}x "
              f"({after['commits']} transactions instead of {before['commits']}). "
              + ("Exact." if sink["exact"] and fold["exact"] else "NOT EXACT."))


# --- write_back: the four approaches, and what a crash loses ------------------------------------

WRITE_BACK_LABELS = {"none": "Redis without persistence", "aof_everysec": "Redis AOF everysec",
                     "aof_always": "Redis AOF always"}


def _write_back_targets(bench: dict) -> list[dict]:
    if "write_back" not in bench:
        return []
    wb = bench["write_back"]
    flusher = [c for c in wb["crashes"] if c["killed"].startswith("flusher")]
    race = wb["race"]
    return [
        _target("Write-back flusher SIGKILLed at each fault point (after RENAME; after the Spanner commit, before "
                "the DEL) and restarted at once: nothing lost, nothing doubled",
                "; ".join(f"{c['killed']}: {c['lost']} lost, {c['doubled']} doubled of {c['acknowledged']:,} "
                          f"acknowledged (leftover parts applied {c['leftover_parts_applied']}, already applied "
                          f"{c['leftover_parts_already_applied']})" for c in flusher),
                len(flusher) == 2 and all(c["lost"] == 0 == c["doubled"] for c in flusher)),
        _target("Four approaches on the same burst, same run: every write-back mode and the pipeline exact in Spanner",
                ", ".join(f"{name} {r['votes_per_s']:,.0f} votes/s" for name, r in race.items()),
                all(r["exact"] for r in race.values())),
    ]


def _seconds(summary: dict) -> str:
    return f"{summary['p50_ms'] / 1000:.2f} / {summary['p99_ms'] / 1000:.2f}"


def _rss(peaks: dict) -> str:
    return ", ".join(f"{process} {mib:.0f}" for process, mib in peaks.items())


def four_approaches_rows(document: dict) -> list[list[str]]:
    """The four approaches, best configuration of each, with what a crash loses: the table of the
    bench README and docs/benchmarks.md."""
    bench = document["benchmarks"]
    hot, wb = bench["hot_post"]["approaches"], bench["write_back"]
    rmw_rate = hot["rmw"]["votes_per_s"]
    sharded = max(("sharded_10", "sharded_100"), key=lambda name: hot[name]["votes_per_s"])
    stream = next(c for c in wb["crashes"] if c["approach"] == "pipeline")
    by_mode = {c["durability"]: c for c in wb["crashes"] if c["killed"] == "redis-server"}
    machine = {c["durability"]: c for c in wb["crashes"] if c["killed"].startswith("machine")}
    flusher = [c for c in wb["crashes"] if c["killed"].startswith("flusher")]
    flusher_doubled = sum(c["doubled"] for c in flusher)
    flusher_lost = sum(c["lost"] for c in flusher)
    rows = [[f"1. Read-modify-write ({hot['rmw']['config']})", f"{rmw_rate:,.0f}", "1.0",
             f"{hot['rmw']['commits_per_1k_votes']:,.0f}", "0 (acknowledged = committed)",
             "0 (acknowledged only after its commit; not killed here)",
             "0 (retries follow aborts, which commit nothing)"],
            [f"2. Sharded counter ({hot[sharded]['config']})", f"{hot[sharded]['votes_per_s']:,.0f}",
             f"{hot[sharded]['votes_per_s'] / rmw_rate:.1f}", f"{hot[sharded]['commits_per_1k_votes']:,.0f}",
             "0 (acknowledged = committed)", "0 (as 1)", "0 (as 1)"]]
    pipeline = wb["race"]["pipeline"]
    rows.append([f"3. This project: Pub/Sub -> pipeline -> blind writes ({pipeline['window_s']} s windows)",
                 f"{pipeline['votes_per_s']:,.0f} (hot_post, no markers: {hot['e2e_pubsub']['votes_per_s']:,.0f})",
                 f"{pipeline['votes_per_s'] / rmw_rate:.1f}", f"{pipeline['commits_per_1k_votes']:.2f}",
                 _seconds(pipeline["freshness"]),
                 f"stream SIGKILLed: {stream['lost']:,} of {stream['acknowledged']:,}",
                 f"{stream['doubled']:,} (same kill)"])
    for mode, label in WRITE_BACK_LABELS.items():
        r, crash = wb["race"][mode], by_mode[mode]
        lost, doubled = f"redis-server SIGKILLed: {crash['lost']:,} of {crash['acknowledged']:,}", ""
        if mode in machine:
            lost += f"; machine crash after a flush's commit (simulated): {machine[mode]['lost_gross']:,}"
            doubled = f"{machine[mode]['doubled_gross']:,} (that machine crash: {_rename_fate(machine[mode])}); "
        elif mode == "aof_everysec":  # a document from before the machine rows
            lost += "; a machine crash: up to ~1 s of votes (documented, not measured)"
        rows.append([f"4. Write-back cache: {label}, flushed every {r['flush_interval_s']} s", f"{r['votes_per_s']:,.0f}",
                     f"{r['votes_per_s'] / rmw_rate:.1f}", f"{r['commits_per_1k_votes']:.2f}", _seconds(r["freshness"]),
                     f"{lost}; flusher SIGKILLed: {flusher_lost}",
                     f"{doubled}{flusher_doubled} (flusher killed after its commit, flush retried)"])
    return rows


def _rename_fate(crash: dict) -> str:
    """What a machine crash right after a flush's commit did to that flush's RENAME."""
    if crash["rename_lost"]:
        return "its RENAME lost with the AOF's unsynced second, the flush applied again"
    if crash["waitaof"]:
        return "the flusher had waited for the RENAME's fsync (WAITAOF)"
    return "the RENAME was fsynced before its reply"


FOUR_APPROACHES_HEADER = ["Approach", "Votes/s, first send -> exact read in Spanner", "x best RMW",
                          "Commits / 1k votes", "Freshness p50 / p99 s (ack -> exact read)", "Lost on a crash",
                          "Doubled on a crash or a retry"]


def _write_back_markdown(document: dict) -> list[str]:
    bench = document["benchmarks"]
    if "write_back" not in bench or "hot_post" not in bench:
        return []
    wb = bench["write_back"]
    race = wb["race"]
    modes = [m for m in WRITE_BACK_LABELS if m in race]
    first = race[modes[0]]
    return [
        f"### 9. Four approaches, same emulator, same run (redis-server {wb['redis_server_version']})",
        f"The same Zipf burst ({first['votes']:,} votes over {first['posts']:,} posts, one marker vote per batch of "
        f"{first['batch_size']}) for the pipeline and the write-back cache; read-modify-write and sharded counters at "
        "their best from section 1. Crash figures under a steady load of "
        f"{wb['crash_rate']:,} upvotes/s, one SIGKILL at a seeded time, restarted at once (table below).",
        _table(FOUR_APPROACHES_HEADER, four_approaches_rows(document)),
        "The write-back cache and the pipeline, each row its own processes:",
        _table(["Row", "Votes/s to exact", "Cache alone, pipelined / one command per vote (votes/s)",
                "Commits / 1k votes", "Mutations / 1k votes", "Emulator CPU s / 1k votes", "Freshness p50 / p99 s",
                "Exact", "Peak RSS MiB"],
               [[WRITE_BACK_LABELS.get(name, "Pipeline (Pub/Sub, streaming subprocess)"), f"{r['votes_per_s']:,.0f}",
                 f"{r['cache_ingest']['pipelined_votes_per_s']:,.0f} / {r['cache_ingest']['unpipelined_votes_per_s']:,.0f}"
                 if "cache_ingest" in r else "-",
                 f"{r['commits_per_1k_votes']:.3f}", f"{r['mutations_per_1k_votes']:,.1f}",
                 "n/a" if r["emulator_cpu_s_per_1k_votes"] is None else f"{r['emulator_cpu_s_per_1k_votes']:.3g}",
                 _seconds(r["freshness"]), "yes" if r["exact"] else "NO", _rss(r["peak_rss_mib"])]
                for name, r in race.items()]),
        f"What a SIGKILL loses, {wb['crash_rate']:,} upvotes/s for {wb['crash_seconds']:g} s; lost: acknowledged "
        "but never counted; doubled: counted beyond the acknowledged and refused votes (per post, net):",
        _table(["Killed", "Redis durability", "Kill at s", "Back in s", "Acknowledged", "Refused", "Lost", "Doubled",
                "Recovery"],
               [[c["killed"], WRITE_BACK_LABELS.get(c.get("durability"), "-"), f"{c['kill_at_s']:.1f}",
                 f"{c['restart_s']:.3f}", f"{c['acknowledged']:,}", f"{c['refused']:,}", f"{c['lost']:,}",
                 f"{c['doubled']:,}", _recovery(c)] for c in wb["crashes"]]),
        f"AOF everysec on a machine crash: {wb['everysec_machine_crash_window']}. The stream row measures "
        "`python -m pipeline.streaming` as this checkout builds it (started through bench.stack.streaming_pipeline).",
    ]


def _recovery(crash: dict) -> str:
    if "flushed_votes_at_crash" in crash:
        return (f"flush {crash['kill_on_flush']} ({crash['flushed_votes_at_crash']:,} votes; "
                f"{crash['unflushed_votes_at_crash']:,} acknowledged since its RENAME): {_rename_fate(crash)}; gross "
                f"{crash['lost_gross']:,} lost, {crash['doubled_gross']:,} doubled; "
                f"{crash['leftover_staging_keys']} staging key finished on restart")
    if "leftover_staging_keys" in crash:
        return (f"flush {crash['kill_on_flush']}: {crash['leftover_staging_keys']} staging key finished on restart, "
                f"{crash['leftover_parts_applied']} part applied, {crash['leftover_parts_already_applied']} found in the "
                "flush log")
    if crash["approach"] == "pipeline":
        return f"counts settled {crash['settle_s']:.0f} s after the load"
    return f"the flusher saw {crash['flusher_redis_errors']} Redis errors"


def _race_bars(bench: dict) -> list[tuple[str, float, float, str]]:
    """(label, votes/s, mutations per 1k votes, colour) of every approach in the race, the
    write-back cache's modes included when it ran."""
    hot = bench["hot_post"]["approaches"]
    bars = [(PLOT_LABELS[name], a["votes_per_s"], a["mutations_per_1k_votes"], "tab:blue") for name, a in hot.items()]
    race = bench.get("write_back", {}).get("race", {})
    bars += [(f"Write-back\n{m.removeprefix('aof_')}", race[m]["votes_per_s"], race[m]["mutations_per_1k_votes"],
              "tab:red") for m in WRITE_BACK_LABELS if m in race]
    return bars


# --- catalogue cost (issue 22) ------------------------------------------------------------

def _catalogue_cost_targets(bench: dict) -> list[dict]:
    if "catalogue_cost" not in bench:
        return []
    cc = bench["catalogue_cost"]
    first, last = cc["points"][0], cc["points"][-1]
    span = f"{last['posts']:,} vs {first['posts']:,} posts"
    sink = cc["sink_mutations_per_1k_votes"]
    worst = max(shape["change_log_ratio"] for shape in sink.values())
    return [
        _target(f"Fold of {cc['work']['deltas']:,} new deltas over {cc['work']['posts']} posts, whole command: "
                f"<= 1.5x from {first['posts']:,} to {last['posts']:,} posts",
                f"{cc['fold_time_ratio']:.2f}x ({last['fold_s']:.1f} s vs {first['fold_s']:.1f} s, {span}; rows read "
                f"{first['fold_rows_read']:,} -> {last['fold_rows_read']:,}); full scan, same run: "
                f"{cc['full_scan_fold_time_ratio']:.2f}x", cc["fold_time_ratio"] <= 1.5),
        _target(f"`upvotes status`, whole command: <= 1.5x from {first['posts']:,} to {last['posts']:,} posts",
                f"{cc['status_time_ratio']:.2f}x ({last['status_s']:.1f} s vs {first['status_s']:.1f} s; rows read "
                f"{first['status_rows_read']:,} -> {last['status_rows_read']:,}); full scan, same run: "
                f"{cc['full_scan_status_time_ratio']:.2f}x", cc["status_time_ratio"] <= 1.5),
        _target("Sink write cost of the change log: <= +20% mutations per 1,000 votes",
                "; ".join(f"{name.replace('_', ' ')}: {shape['before']:,} -> {shape['change_log']:,} "
                          f"({shape['change_log_ratio'] - 1:+.2%}; shard-led index instead: "
                          f"{shape['shard_index_ratio'] - 1:+.1%})" for name, shape in sink.items()),
                worst <= 1.2),
    ]


def _catalogue_cost_markdown(bench: dict) -> list[str]:
    if "catalogue_cost" not in bench:
        return []
    cc = bench["catalogue_cost"]
    rows = []
    for p in cc["points"]:
        scan = p["full_scan"]
        rows.append([f"{p['posts']:,}", f"{p['fold_s']:.1f} / {p['fold_rows_read']:,}",
                     f"{p['fold_idle_s']:.1f} / {p['fold_idle_rows_read']:,}",
                     f"{p['status_s']:.1f} / {p['status_rows_read']:,}",
                     f"{scan['fold_s']:.1f} / {scan['fold_rows_read']:,}",
                     f"{scan['fold_idle_s']:.1f} / {scan['fold_idle_rows_read']:,}",
                     f"{scan['status_s']:.1f} / {scan['status_rows_read']:,}", "yes" if p["exact"] else "NO"])
    sink = cc["sink_mutations_per_1k_votes"]
    return [
        f"### 10. Catalogue cost: the same {cc['work']['deltas']:,} new deltas over {cc['work']['posts']} posts at "
        "each catalogue size (seconds of the whole command / rows read)",
        _table(["Posts", "fold", "fold, nothing to do", "status", "full-scan fold (baseline)",
                "full-scan fold, nothing to do", "full-scan status", "Exact"], rows),
        "Sink mutations per 1,000 votes (one vote per delta row), by the DDL mutation model: "
        + "; ".join(f"{name.replace('_', ' ')}: before {s['before']:,}, with the change log {s['change_log']:,} "
                    f"({s['change_log_ratio'] - 1:+.2%}), a shard-led index on PostDeltas instead {s['shard_index']:,} "
                    f"({s['shard_index_ratio'] - 1:+.1%})" for name, s in sink.items()) + ".",
    ]


# --- the stream's reader, SIGKILL and the fault soak (bench/stream_reader.py, bench/fault_soak.py) ---

def _stream_stop_targets(bench: dict) -> list[dict]:
    targets = []
    if "stream_reader" in bench:
        sr = bench["stream_reader"]
        single, kill = sr["single_events"], sr["sigkill"]
        targets += [
            _target("Local reader: single-event messages reach the counts >= 3x as fast as with Beam's DirectRunner "
                    "reader, same run",
                    f"{single['project']['messages_per_s']:,.0f} vs {single['beam']['messages_per_s']:,.0f} messages/s "
                    f"({sr['speedup']:.1f}x), {single['project']['messages']:,} messages, exact",
                    sr["speedup"] >= 3 and sr["exact"]),
            _target("SIGKILL of the stream under load: nothing counted twice (at-most-once; the loss is measured)",
                    f"{kill['votes_lost']:,} of {kill['votes']:,} votes lost ({kill['messages_lost']} messages), "
                    f"{kill['votes_doubled']} doubled",
                    kill["votes_doubled"] == 0 and kill["markers_counted_twice"] == 0),
        ]
    if "fault_soak" in bench:
        fs = bench["fault_soak"]
        kinds = {k: v for k, v in fs["faults"].items() if k != "folds_finished_before_the_kill"}
        targets.append(_target(
            "Fault soak: every post equal to the ledger (0 lost / 0 doubled) with folds killed, Spanner frozen, "
            "the stream SIGTERMed and restarted, and `upvotes serve` restarted",
            f"{fs['votes']:,} votes, {fs['faults_injected']} faults ("
            + ", ".join(f"{k} {v}" for k, v in kinds.items()) + f"); lost {fs['lost']}, doubled {fs['doubled']}; "
            + ("exact " + f"{fs['seconds_to_exact_after_the_load']:.0f} s after the load" if fs["exact"] else "NOT exact"),
            fs["exact"] and all(kinds.values()) and fs["final_stop_exit_code"] == 0,
        ))
    return targets


def _stream_stop_sections(bench: dict) -> list[str]:
    parts = []
    if "stream_reader" in bench:
        sr = bench["stream_reader"]
        kill = sr["sigkill"]
        window = kill["loss_window_s"]
        parts += [f"### 11. The local stream's Pub/Sub reader (single-event messages, {sr['single_events']['project']['messages']:,})",
                  _table(["Reader", "Seconds, first publish to exact", "Messages/s", "Exact"],
                         [[r["reader"], f"{r['seconds']:.1f}", f"{r['messages_per_s']:,.0f}", "yes" if r["exact"] else "NO"]
                          for r in sr["single_events"].values()]),
                  f"SIGKILL of the stream under {kill['load_votes_per_s']:,} votes/s (batches of {kill['batch_size']}, "
                  f"{kill['window_s']} s windows), restarted at once: {kill['messages_lost']} of {kill['messages']} messages "
                  f"({kill['votes_lost']:,} of {kill['votes']:,} votes) lost"
                  + (f", published {window['published_before_kill_min']:.1f}-{window['published_before_kill_max']:.1f} s "
                     "before the kill" if kill["messages_lost"] else "")
                  + f"; {kill['votes_doubled']} votes counted twice."]
    if "fault_soak" in bench:
        fs = bench["fault_soak"]
        load = fs["load"]
        parts += [f"### 12. Fault soak: {load['votes_per_s']:,} votes/s for {load['seconds']:.0f} s in batches of "
                  f"{load['batch_size']} ({load['http_share']:.0%} through `upvotes serve`), {load['posts']} posts",
                  _table(["Faults injected", "Votes", "Lost", "Doubled", "Seconds to exact after the load",
                          "After a clean fold", "Stream drains (s, signal to exit)"],
                         [[", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fs["faults"].items()), f"{fs['votes']:,}",
                           f"{fs['lost']}", f"{fs['doubled']}",
                           "-" if fs["seconds_to_exact_after_the_load"] is None else f"{fs['seconds_to_exact_after_the_load']:.1f}",
                           f"lost {fs['lost_after_fold']}, doubled {fs['doubled_after_fold']}",
                           ", ".join(f"{d['seconds']:.1f}" for d in fs["drains"])]])]
    return parts


# --- one vote per user: vote-state events (issue 29, bench/vote_states.py) -----------------

VOTE_STATE_SHAPES = {"hot_post": "one viral post", "zipf": "Zipf spread"}
VOTE_STATE_KINDS = {"deltas": "delta events (+1)", "states": "vote states"}


def _vote_state_targets(bench: dict) -> list[dict]:
    if "vote_states" not in bench:
        return []
    vs = bench["vote_states"]
    rmw, races, error, soak = vs["rmw"]["best"], vs["races"], vs["count_error"], vs["soak"]
    return [
        _target("Vote states end to end (first publish -> every post exact) >= 10x the best read-modify-write of "
                "the same run, on one viral post and on a Zipf spread",
                "; ".join(f"{VOTE_STATE_SHAPES[shape]}: {r['states']['votes_per_s']:,.0f} votes/s = "
                          f"{r['states']['votes_per_s_vs_rmw']:.1f}x (delta events {r['deltas']['votes_per_s']:,.0f}/s)"
                          for shape, r in races.items())
                + f"; best RMW {rmw['votes_per_s']:,.0f}/s ({rmw['config']})",
                min(r["states"]["votes_per_s_vs_rmw"] for r in races.values()) >= 10),
        _target("Vote-state count error 0 with 10% duplicates, 10% late events, flips and a SIGTERM + restart of "
                "the stream mid-load",
                f"{error['mismatching_posts']} of {error['posts']} posts off, summed absolute error "
                f"{error['absolute_error']:,} over {error['votes']:,} votes; drained in {error['drain_seconds']:.1f} s "
                f"(exit {error['drain_exit_code']})",
                error["exact"] and error["drain_exit_code"] == 0),
        _target(f"Memory flat under a hot-post vote-state load: stream peak RSS after {soak['long_s']} s / after "
                f"{soak['short_s']} s <= 1.1",
                f"{soak['peak_rss_after_long_mib']:.0f} / {soak['peak_rss_after_short_mib']:.0f} MiB = "
                f"{soak['ratio_long_to_short']:.3f} at {soak['votes_per_s']:,.0f} votes/s ({soak['votes']:,} votes, "
                f"{soak['distinct_pairs']:,} (post, user) pairs, exact)",
                soak["ratio_long_to_short"] <= 1.1),
    ]


def _vote_state_markdown(bench: dict) -> list[str]:
    if "vote_states" not in bench:
        return []
    vs = bench["vote_states"]
    rmw, state, soak, error = vs["rmw"]["best"], vs["window_state"], vs["soak"], vs["count_error"]
    rows = [[f"Read-modify-write, best of {len(vs['rmw']['runs'])} ({rmw['config']})", "one row", f"{rmw['votes']:,}",
             f"{rmw['votes_per_s']:,.0f}", "1.0", "-", "1,000 (counter rows)", "-", f"{rmw['commits_per_1k_votes']:,.0f}",
             f"{rmw['mutations_per_1k_votes']:,.0f}", _cpu(rmw), "yes"]]
    for shape, races in vs["races"].items():
        for kind, r in races.items():
            versus = r.get("vs_deltas", {}).get("votes_per_s")
            rows.append([VOTE_STATE_KINDS[kind], VOTE_STATE_SHAPES[shape] + ("" if r["posts"] == 1 else f" ({r['posts']:,} posts)"),
                         f"{r['votes']:,}",
                         f"{r['votes_per_s']:,.0f}", f"{r['votes_per_s_vs_rmw']:.1f}",
                         "1.0" if versus is None else f"{versus:.2f}",
                         f"{r['votes_rows_per_1k_votes']:,.0f}" + (f" (writes <= {r['votes_row_writes_ceiling_per_1k_votes']:,.0f})"
                                                                  if kind == "states" else ""),
                         f"{r['delta_rows_per_1k_votes']:,.1f}", f"{r['commits_per_1k_votes']:.2f}",
                         f"{r['mutations_per_1k_votes']:,.0f}", _cpu(r), "yes" if r["exact"] else "NO"])
    return [
        f"### 13. One vote per user: vote-state events beside delta events, same stream, same run "
        f"({vs['window_s']} s windows, batches of {vs['batch_size']}, {vs['voters']:,} voters)",
        _table(["Events", "Shape", "Votes", "Votes/s, first publish -> exact", "x best RMW", "x delta events",
                "Votes rows / 1k votes", "Delta rows / 1k votes", "Commits / 1k votes", "Mutations / 1k votes",
                "Emulator CPU s / 1k votes", "Exact"], rows),
        "Votes rows: the (post, user) rows stored; a state replaced in a later window writes its row again, so the "
        "writes lie between that and the distinct events (in brackets). Commits: one per distinct commit timestamp "
        "of the race's delta rows. Mutations: index entries, parent keys and each commit's DeltaCommits and "
        "TopCandidates rows included. Vote-state delta rows per 1k votes by `upvotes capacity`'s model (one per post "
        "among a transaction's states): "
        + "; ".join(f"{VOTE_STATE_SHAPES[shape]} {races['states']['model_delta_rows_per_1k_votes']:,.1f} (measured "
                    f"{races['states']['delta_rows_per_1k_votes']:,.1f})" for shape, races in vs["races"].items())
        + " (the burst packs two event hours into seconds, so a transaction also moves counts between hours).",
        f"Pipeline state per (post, user), what WindowAndMergeVoteStates holds while its window is open: "
        f"{state['encoded_bytes_per_key']:,.0f} bytes in Beam's accumulator coding ({state['coder']}), "
        f"{state['python_bytes_per_key']:,.0f} bytes as Python objects on the DirectRunner (over {state['keys']:,} keys "
        f"merged from {state['events']:,} hot-post states); at the hot-post state rate about "
        f"{state['held_at_the_hot_post_rate_mib']:.1f} MiB per open window, freed when it fires. "
        f"Under a steady hot-post state load of {soak['votes_per_s']:,.0f} votes/s, every voter new "
        f"({soak['load_of_race_votes_rows']:.0%} of the {soak['race_votes_rows_per_s']:,.0f} Votes rows/s the hot-post "
        f"race stored, at {soak['rows_per_vote']:.2f} rows per vote: {soak['of_race_votes_per_s']:.0%} of its votes/s): "
        f"the stream's peak RSS {soak['peak_rss_after_short_mib']:.0f} MiB after "
        f"{soak['short_s']} s, {soak['peak_rss_after_long_mib']:.0f} MiB after {soak['long_s']} s (ratio "
        f"{soak['ratio_long_to_short']:.3f}); its {soak['distinct_pairs']:,} (post, user) pairs would have held "
        f"{soak['if_window_state_were_kept_mib']:,.0f} MiB had their window state been kept; exact "
        f"{soak['seconds_to_exact_after_the_load']:.0f} s after the load.",
        f"Count error: {error['votes_per_s']:,} vote states/s for {error['load_seconds']:g} s over {error['posts']:,} "
        f"posts ({error['duplicate_fraction']:.0%} duplicates, {error['late_fraction']:.0%} late, "
        f"{error['flip_fraction']:.0%} flips up -> down -> none), the stream SIGTERMed at {error['sigterm_at_s']:g} s and "
        "restarted at once on the same subscription:",
        _table(["Votes", "Drain s (exit code)", "Seconds to exact after the load", "Mismatching posts",
                "Summed absolute error"],
               [[f"{error['votes']:,}", f"{error['drain_seconds']:.1f} ({error['drain_exit_code']})",
                 "not exact" if error["seconds_to_exact_after_the_load"] is None
                 else f"{error['seconds_to_exact_after_the_load']:.1f}",
                 f"{error['mismatching_posts']}", f"{error['absolute_error']:,}"]]),
    ]


def _cpu(row: dict) -> str:
    return "n/a" if row["emulator_cpu_s_per_1k_votes"] is None else f"{row['emulator_cpu_s_per_1k_votes']:.3g}"


def _plot_vote_states(vs: dict, axes) -> None:
    """The vote-state section's row of the figure: rates, Spanner cost, the soak, and the counts."""
    shapes = list(vs["races"])
    rmw = vs["rmw"]["best"]
    width = 0.38
    for ax, metric, title in ((axes[0], "votes_per_s", "13. Votes/s, first publish -> exact"),
                              (axes[1], "mutations_per_1k_votes", "13. Spanner mutations per 1,000 votes")):
        for offset, (kind, colour) in zip((-width / 2, width / 2), (("deltas", "tab:blue"), ("states", "tab:green"))):
            bars = ax.bar([i + offset for i in range(len(shapes))], [vs["races"][s][kind][metric] for s in shapes],
                          width, label=VOTE_STATE_KINDS[kind], color=colour)
            ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.axhline(rmw[metric], color="red", linestyle="--", label=f"best RMW ({rmw[metric]:,.0f})")
        highest = max(rmw[metric], *(vs["races"][s][kind][metric] for s in shapes for kind in VOTE_STATE_KINDS))
        if metric == "votes_per_s":
            ax.axhline(10 * rmw[metric], color="grey", linestyle=":", label="10x best RMW")
            ax.set_ylim(top=1.4 * max(highest, 10 * rmw[metric]))
        else:
            ax.set_yscale("log")
            ax.set_ylim(top=30 * highest)
        ax.set_xticks(range(len(shapes)), [VOTE_STATE_SHAPES[s] for s in shapes])
        ax.set_title(title)
        ax.legend(fontsize=8, loc="upper center", ncols=2)

    soak = vs["soak"]
    ax = axes[2]
    ax.plot([s["second"] for s in soak["samples"]], [s["rss_mib"] for s in soak["samples"]], "-", label="RSS")
    ax.plot([s["second"] for s in soak["samples"]], [s["peak_mib"] for s in soak["samples"]], "--", label="peak RSS")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds of steady hot-post vote-state load")
    ax.set_ylabel("MiB")
    ax.set_title(f"13. Memory: stream at {soak['votes_per_s']:,.0f} vote states/s")
    ax.legend()

    error, state = vs["count_error"], vs["window_state"]
    ax = axes[3]
    ax.axis("off")
    ax.set_title("13. Vote states: window state and count error")
    ax.text(0.0, 0.9, "\n".join([
        f"Window state per (post, user): {state['encoded_bytes_per_key']:,.0f} B encoded,",
        f"{state['python_bytes_per_key']:,.0f} B as Python objects; freed when the window fires",
        f"Soak: {soak['distinct_pairs']:,} pairs would hold {soak['if_window_state_were_kept_mib']:,.0f} MiB if kept;",
        f"peak RSS {soak['peak_rss_after_short_mib']:.0f} -> {soak['peak_rss_after_long_mib']:.0f} MiB",
        f"SIGTERM + restart under {error['votes_per_s']:,} states/s ({error['duplicate_fraction']:.0%} duplicates,",
        f"{error['late_fraction']:.0%} late, flips): {error['mismatching_posts']} posts off, "
        f"absolute error {error['absolute_error']:,}",
    ]), va="top", fontsize=10, family="monospace")


# --- files ------------------------------------------------------------------------------

def write(document: dict, out_dir: Path) -> None:
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out_dir / MARKDOWN_NAME).write_text(markdown(document) + "\n", encoding="utf-8")
    plot(document, out_dir / PNG_NAME)


def plot(document: dict, path: Path) -> None:
    """Eight panels: one or two per benchmark, and memory; four more for vote states when they ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = document["benchmarks"]
    fig, axes = plt.subplots(3 if "vote_states" in bench else 2, 4, figsize=(22, 15 if "vote_states" in bench else 10))
    m = document["machine"]
    fig.suptitle(f"Upvote counter benchmarks, {document['sizes']['name']} run, {m['date']}, "
                 f"{m['nproc']} x {m['cpu_model']}, Beam {m['apache_beam']}")

    labels, rates, mutations, colours = zip(*_race_bars(bench))
    ax = axes[0, 0]
    bars = ax.bar(labels, rates, color=colours)
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_yscale("log")
    ax.set_title("1, 9. The race: votes/s, best configuration of each")
    ax.tick_params(axis="x", labelsize=7, labelrotation=45)

    ax = axes[0, 1]
    bars = ax.bar(labels, mutations, color="tab:orange")
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_yscale("log")
    ax.set_title("1, 9. Spanner mutations per 1,000 votes (index entries included)")
    ax.tick_params(axis="x", labelsize=7, labelrotation=45)

    variants = bench["transform_cost"]["variants"]
    ax = axes[0, 2]
    bars = ax.bar([n.replace("_", "\n", 1) for n in variants], [v["events_per_s_per_core"] for v in variants.values()],
                  color="tab:green")
    ax.bar_label(bars, fmt="%.0f")
    ax.set_title("2. Transform CPU: events/s per core")
    ax.tick_params(axis="x", labelsize=8)

    wa = bench["write_amplification"]
    ax = axes[0, 3]
    sweep = wa["window_sweep"]
    ax.bar([f"{w['window_s']} s" for w in sweep] + ["RMW"],
           [w["delta_rows_per_1m_votes"] for w in sweep] + [wa["rmw_rows_per_1m_votes"]], color="tab:purple")
    ax.set_yscale("log")
    ax.set_title("3. Delta rows per 1M votes, by window length")

    fs = bench["fold_scaling"]
    ax = axes[1, 0]
    xs = [p["deltas"] for p in fs["points"]]
    ax.loglog(xs, [p["fold_seconds"] for p in fs["points"]], "o-", label=f"fold (exponent {fs['exponent']:.2f})")
    ax.loglog(xs, [fs["points"][0]["fold_seconds"] * x / xs[0] for x in xs], "--", color="grey", label="linear")
    ax.set_xlabel("deltas")
    ax.set_ylabel("seconds")
    ax.set_title("4. Fold time")
    ax.legend()

    ax = axes[1, 1]
    old = [max(r["old_deltas"], 1) for r in fs["reads"]]
    ax.semilogx(old, [r["exact_counts_strong"]["p50_ms"] for r in fs["reads"]], "o-", label="exact_counts (strong)")
    ax.semilogx(old, [r["exact_timestamp"]["p50_ms"] for r in fs["reads"]], "s-", label="exact timestamp")
    ax.set_xlabel("old folded deltas (0 shown at 1)")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("p50 ms")
    ax.set_title("4. Exact-read latency")
    ax.legend()

    fr = bench["freshness"]
    ax = axes[1, 2]
    ax.plot([s["published_at_s"] for s in fr["series"]], [s["latency_s"] for s in fr["series"]], ".")
    ax.axhline(fr["target_s"], color="red", linestyle="--", label="target: 2 windows + 1 s")
    ax.set_xlabel("published at (s)")
    ax.set_ylabel("publish to visible (s)")
    ax.set_title(f"5. Freshness at {fr['rate_events_per_s']} events/s")
    ax.legend()

    ax = axes[1, 3]
    soak = bench["hot_post"]["soak"]["samples"]
    ax.plot([s["second"] for s in soak], [s["rss_mib"] for s in soak], "-", label="RSS")
    ax.plot([s["second"] for s in soak], [s["peak_mib"] for s in soak], "--", label="peak RSS")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds of steady batched load")
    ax.set_ylabel("MiB")
    ax.set_title(f"Memory: streaming pipeline at {bench['hot_post']['soak']['votes_per_s']:,.0f} votes/s")
    ax.legend()

    if "vote_states" in bench:
        _plot_vote_states(bench["vote_states"], axes[2])

    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
