"""`python -m bench.metered_stream stream ...`: `upvotes stream` with every commit counted.

The benchmarks that run the stream as a child process (bench/real_traffic.py, bench/stream_reader.py)
need its commits and mutations, which only the process that commits can count: this module wraps
the real client's commits in upvotes.devtools.commit_meter (the same meter the tests use, counting
from posts.sql's DDL), runs the `upvotes` command line it is given, and writes to the JSON file
named by METER_FILE_ENV the meter's totals every METER_EVERY_S seconds (for a benchmark to read
while the stream runs) and, when the command ends (a drain), also every commit as (wall time,
kind, mutations): kind "heartbeat" for the stream's heartbeat (local_runner/heartbeat.py), "sink"
for a commit that writes delta rows or vote states, "other" for the rest (the writer claim).
Counting costs the stream a little CPU per commit; the benchmarks' figures include it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from spanner_store.tables import DELTA_COMMITS, VOTES
from upvotes.devtools.commit_meter import CommitMeter, _table_of, metering_commits
from upvotes.devtools.mutation_count import commit_mutation_count

METER_FILE_ENV = "UPVOTES_BENCH_METER_FILE"
METER_EVERY_S = 0.5
# spanner_store.tables.STREAM_HEARTBEATS, spelled out: real_traffic runs this module in the tree of a
# version from before the heartbeat too, whose tables module has no such name.
STREAM_HEARTBEATS = "StreamHeartbeats"


class ListingMeter(CommitMeter):
    """A CommitMeter that also lists each commit (time, kind, mutations)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.listed: list[tuple[float, str, float]] = []
        self._list_lock = threading.Lock()

    def record(self, mutations) -> None:
        tables = {_table_of(m) for m in mutations}
        kind = (
            "heartbeat"
            if tables == {STREAM_HEARTBEATS}
            else "sink"
            if DELTA_COMMITS in tables or VOTES in tables
            else "other"
        )
        count = commit_mutation_count(mutations, self._model)
        with self._list_lock:
            self.listed.append((time.time(), kind, count))
        super().record(mutations)


def _dump(meter: ListingMeter, path: Path, listing: bool) -> None:
    totals: dict[str, object] = {"commits": meter.commits, "mutations": meter.mutations_total, "largest": meter.largest}
    if listing:
        with meter._list_lock:  # noqa: SLF001 - the meter's own lock
            totals["listed"] = list(meter.listed)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(totals))
    partial.replace(path)  # readers never see half a file


def main(argv: list[str]) -> int:
    from upvotes.cli import main as upvotes

    path = Path(os.environ[METER_FILE_ENV])
    with metering_commits(ListingMeter()) as meter:
        stop = threading.Event()

        def dump_until_stopped() -> None:
            while not stop.wait(METER_EVERY_S):
                _dump(meter, path, listing=False)

        threading.Thread(target=dump_until_stopped, name="meter-dump", daemon=True).start()
        try:
            return upvotes(argv)
        finally:
            stop.set()
            _dump(meter, path, listing=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
