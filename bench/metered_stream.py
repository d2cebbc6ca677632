"""`python -m bench.metered_stream stream ...`: `upvotes stream` with every commit counted.

The benchmarks that run the stream as a child process (bench/real_traffic.py) need its commits
and mutations, which only the process that commits can count: this module wraps the real
client's commits in upvotes.devtools.commit_meter (the same meter the tests use, counting from
posts.sql's DDL), runs the `upvotes` command line it is given, and writes the meter's totals
to the JSON file named by METER_FILE_ENV every METER_EVERY_S seconds and at exit, for the
benchmark to read while the stream runs. Counting costs the stream a little CPU per commit; the
benchmark's figures include it.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from upvotes.devtools.commit_meter import CommitMeter, metering_commits

METER_FILE_ENV = "UPVOTES_BENCH_METER_FILE"
METER_EVERY_S = 0.5


def _dump(meter: CommitMeter, path: Path) -> None:
    totals = {"commits": meter.commits, "mutations": meter.mutations_total, "largest": meter.largest}
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(totals))
    partial.replace(path)  # readers never see half a file


def main(argv: list[str]) -> int:
    from upvotes.cli import main as upvotes

    path = Path(os.environ[METER_FILE_ENV])
    with metering_commits(CommitMeter()) as meter:
        stop = threading.Event()

        def dump_until_stopped() -> None:
            while not stop.wait(METER_EVERY_S):
                _dump(meter, path)

        threading.Thread(target=dump_until_stopped, name="meter-dump", daemon=True).start()
        try:
            return upvotes(argv)
        finally:
            stop.set()
            _dump(meter, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
