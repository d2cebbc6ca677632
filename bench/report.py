"""Targets, the markdown tables, latest.json and latest.png."""
from __future__ import annotations

import json
from pathlib import Path

JSON_NAME = "latest.json"
PNG_NAME = "latest.png"
MARKDOWN_NAME = "latest.md"  # the tables, as printed: what the READMEs link to

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
        *_stream_stop_targets(bench),
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
    parts += _stream_stop_sections(bench)
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
        parts += [f"### 9. The local stream's Pub/Sub reader (single-event messages, {sr['single_events']['project']['messages']:,})",
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
        parts += [f"### 10. Fault soak: {load['votes_per_s']:,} votes/s for {load['seconds']:.0f} s in batches of "
                  f"{load['batch_size']} ({load['http_share']:.0%} through `upvotes serve`), {load['posts']} posts",
                  _table(["Faults injected", "Votes", "Lost", "Doubled", "Seconds to exact after the load",
                          "After a clean fold", "Stream drains (s, signal to exit)"],
                         [[", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fs["faults"].items()), f"{fs['votes']:,}",
                           f"{fs['lost']}", f"{fs['doubled']}",
                           "-" if fs["seconds_to_exact_after_the_load"] is None else f"{fs['seconds_to_exact_after_the_load']:.1f}",
                           f"lost {fs['lost_after_fold']}, doubled {fs['doubled_after_fold']}",
                           ", ".join(f"{d['seconds']:.1f}" for d in fs["drains"])]])]
    return parts


# --- files ------------------------------------------------------------------------------

def write(document: dict, out_dir: Path) -> None:
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out_dir / MARKDOWN_NAME).write_text(markdown(document) + "\n", encoding="utf-8")
    plot(document, out_dir / PNG_NAME)


def plot(document: dict, path: Path) -> None:
    """Eight panels: one or two per benchmark, and memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = document["benchmarks"]
    fig, axes = plt.subplots(2, 4, figsize=(22, 10))
    m = document["machine"]
    fig.suptitle(f"Upvote counter benchmarks, {document['sizes']['name']} run, {m['date']}, "
                 f"{m['nproc']} x {m['cpu_model']}, Beam {m['apache_beam']}")

    hot = bench["hot_post"]["approaches"]
    names = list(hot)
    labels = [PLOT_LABELS[n] for n in names]
    ax = axes[0, 0]
    bars = ax.bar(labels, [hot[n]["votes_per_s"] for n in names], color="tab:blue")
    ax.bar_label(bars, fmt="%.0f")
    ax.set_yscale("log")
    ax.set_title("1. The race: votes/s, best configuration of each")

    ax = axes[0, 1]
    bars = ax.bar(labels, [hot[n]["mutations_per_1k_votes"] for n in names], color="tab:orange")
    ax.bar_label(bars, fmt="%.3g")
    ax.set_yscale("log")
    ax.set_title("1. Spanner mutations per 1,000 votes (index entries included)")

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

    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
