"""What an approach costs Spanner, per 1,000 votes: commits, mutations (index entries included),
and the Spanner emulator process's own CPU seconds, a proxy for the load on the database."""

from __future__ import annotations

import os

from google.cloud.spanner_v1 import param_types

from bench.measure import process_cpu_seconds
from spanner_writes.deltas import MUTATIONS_PER_DELTA, MUTATIONS_PER_PARENT
from upvotes.devtools.emulators import PID_ENV_VARS, SPANNER

# The parent upserts: one per post, in its first commit (the sink's KnownPosts,
# spanner_writes/known_posts.py; one stream, which does not restart within a benchmark row).
DELTA_COST_SQL = """SELECT COUNT(*), COUNT(DISTINCT CommittedAt), COUNT(DISTINCT PostId),
  (SELECT COUNT(*) FROM (SELECT DISTINCT PostId, EventHour FROM PostDeltas WHERE STARTS_WITH(PostId, @prefix)))
FROM PostDeltas WHERE STARTS_WITH(PostId, @prefix)"""


class EmulatorCpu:
    """CPU seconds the Spanner emulator process spent during a block (None if not started here)."""

    def __init__(self) -> None:
        pid = os.environ.get(PID_ENV_VARS[SPANNER])
        self._pid = int(pid) if pid else None
        self.seconds: float | None = None

    def __enter__(self) -> EmulatorCpu:
        self._start = process_cpu_seconds(self._pid) if self._pid else None
        return self

    def __exit__(self, *_) -> None:
        if self._pid:
            assert self._start is not None  # read on entering, as there is a pid
            self.seconds = process_cpu_seconds(self._pid) - self._start


def _per_1k(value: float | None, votes: int) -> float | None:
    return None if value is None else round(value / votes * 1000, 4)


def spanner_cost(votes: int, commits: int, mutations: int, emulator_cpu_s: float | None) -> dict:
    return {
        "commits_per_1k_votes": _per_1k(commits, votes),
        "mutations_per_1k_votes": _per_1k(mutations, votes),
        "emulator_cpu_s_per_1k_votes": _per_1k(emulator_cpu_s, votes),
    }


def delta_cost(database, prefix: str) -> dict:
    """Commits and mutations the sink and the fold spent on posts starting with `prefix`."""
    with database.snapshot() as snapshot:
        rows, commits, parents, post_hours = list(
            snapshot.execute_sql(DELTA_COST_SQL, params={"prefix": prefix}, param_types={"prefix": param_types.STRING})
        )[0]
    return {
        "delta_rows": rows,
        "sink_commits": commits,
        "sink_mutations": rows * MUTATIONS_PER_DELTA + parents * MUTATIONS_PER_PARENT,
        "post_hours": post_hours,
    }
