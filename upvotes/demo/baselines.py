"""Race, part 1: read-modify-write, one transaction per vote on one hot counter: the approach this
design replaces, in its two best configurations on this emulator (bench/README.md). Its best rate
is what every later race is measured against."""

from __future__ import annotations

import uuid

from upvotes.demo.stage import say
from upvotes.devtools.race import CLIENT_RETRY, JITTERED_RETRY, BaselineConfig, BaselineRun, run_baseline


def best_read_modify_write(database, seconds: float) -> BaselineRun:
    """`seconds` of each configuration, each checked to have lost no increment; the faster one."""
    say(f"race, part 1: read-modify-write, one transaction per vote on one hot counter, {seconds:g} s each")
    runs = []
    for config in (BaselineConfig(1, 1, CLIENT_RETRY), BaselineConfig(1, 2, JITTERED_RETRY)):
        result = run_baseline(database, f"demo-{uuid.uuid4().hex[:8]}", config, seconds)
        if not result.exact:
            raise RuntimeError(f"read-modify-write ({config.label}) lost an increment")
        say(
            f"  {config.label}: {result.votes:,} votes in {result.seconds:.1f} s = {result.votes_per_s:,.0f} votes/s "
            f"({result.aborts:,} aborted attempts)"
        )
        runs.append(result)
    return max(runs, key=lambda r: r.votes_per_s)
