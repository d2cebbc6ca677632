"""`upvotes stream` with every commit it makes metered, for bench/stream_reader.py's cost table:

    python -m bench.metered_stream OUT.json stream --project ... (upvotes stream's flags)

Each commit is counted by upvotes/devtools/commit_meter.py (mutations from the DDL, index entries
included) and listed in OUT.json when the command ends (a drain) as (wall time, kind, mutations):
kind "heartbeat" for the stream's heartbeat (local_runner/heartbeat.py), "sink" for a commit that
writes delta rows or vote states, "other" for the rest (the writer claim). The benchmark keeps
those of its race's interval.
"""
from __future__ import annotations

import json
import sys
import threading
import time

from spanner_store.tables import DELTA_COMMITS, STREAM_HEARTBEATS
from upvotes.devtools.commit_meter import CommitMeter, _table_of, metering_commits
from upvotes.devtools.mutation_count import commit_mutation_count


class ListingMeter(CommitMeter):
    """A CommitMeter that also lists each commit (time, kind, mutations)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.listed: list[tuple[float, str, float]] = []
        self._list_lock = threading.Lock()

    def record(self, mutations) -> None:
        tables = {_table_of(m) for m in mutations}
        kind = "heartbeat" if tables == {STREAM_HEARTBEATS} else "sink" if DELTA_COMMITS in tables or "Votes" in tables \
            else "other"
        count = commit_mutation_count(mutations, self._model)
        with self._list_lock:
            self.listed.append((time.time(), kind, count))
        super().record(mutations)


def main(out: str, command: list[str]) -> int:
    from upvotes.cli import main as cli_main

    meter = ListingMeter()
    try:
        with metering_commits(meter):
            return cli_main(command)
    finally:
        with open(out, "w", encoding="utf-8") as file:
            json.dump({"commits": meter.listed}, file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
