"""Benchmarks of the upvote counter against its baselines, on the local emulators.

`python -m bench` (or `make bench`) starts the Spanner and Pub/Sub emulators, provisions
a fresh database, runs every benchmark in a process of its own (so each one's peak RSS
is its own) and writes `bench/results/latest.json` and `latest.png`. Every figure is a
ratio against a baseline measured in the same invocation, on the same machine.

Modules, one per benchmark, each owning its sizes, its markdown section (named after it in
latest.md), its targets and its chart panels (`BENCHMARK`, a `bench.benchmark.Benchmark`);
`registry` lists them in the order they run. Among them:

- `hot_post`: one post receiving many votes: read-modify-write, sharded counters, this
  project's chain and sink fed from memory, and end to end through Pub/Sub.
- `transform_cost`: CPU per event of the parse-validate-key-combine chain against plain
  Python, with a profile of where Beam's per-element time goes.
- `write_amplification`: Spanner rows written per million votes against the lower bound.
- `fold_scaling`: fold time against the number of deltas; exact-read latency against the
  number of old, folded deltas kept.
- `freshness`: publish-to-visible latency under a steady publish rate.
- `write_back`: the seed's fourth approach, a write-back cache on a real redis-server, raced
  beside the pipeline on the same burst, and what a SIGKILL of each process loses.
- `trending`: what is viral now (`upvotes top --by hot`, `--last 24h`) as the catalogue grows to
  1,000,000 posts, against brute-force scans of every post and a ledger's ranking; how fast a post
  made viral now reaches hot rank 1; what the hot ranking costs the sink and the fold.

Support: `benchmark` (what a benchmark module exports), `registry`, `config` (the race's sizes,
a run's collection of every benchmark's sizes), `machine`, `measure`, `stack` (emulators, databases, the
streaming subprocess, publishing), `feeds` (in-memory sources), `spanner_cost` (commits, mutations and emulator CPU per
1,000 votes), `report`, `runner`.
"""
