"""The streaming pipeline as a local child process on the DirectRunner, for the demo, the
tests and the benchmarks. It runs in a process group of its own, so stopping it also stops
anything it started."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping

from upvotes.provision import Resources

STOP_GRACE_S = 20.0


def start(res: Resources, window_seconds: int, log_path: Path, env: Mapping[str, str] | None = None,
          append: bool = False) -> subprocess.Popen:
    """Starts `python -m pipeline.streaming` on `res`, its output going to `log_path`."""
    command = [
        sys.executable, "-m", "pipeline.streaming", f"--project={res.project}", f"--instance={res.instance}",
        f"--database={res.database}", f"--subscription={res.subscription}",
        f"--dead-letter-topic={res.dead_letter_topic}", f"--window-seconds={window_seconds}",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab" if append else "wb") as log:
        return subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> int:
    """Sends `sig` to the pipeline's process group (SIGKILL after `grace_s`); returns its exit code."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


@contextlib.contextmanager
def running(res: Resources, window_seconds: int, log_path: Path,
            env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """The pipeline for the duration of a block, stopped (and waited for) on the way out."""
    process = start(res, window_seconds, log_path, env)
    try:
        yield process
    finally:
        stop(process)
