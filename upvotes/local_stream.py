"""The streaming pipeline as a local child process on the DirectRunner, for the demo, the
tests and the benchmarks. It runs in a process group of its own, so stopping it also stops
anything it started.

`Heartbeat` works around one limit of the DirectRunner's Pub/Sub reader: it pulls
synchronously with a 30 s timeout, so on an idle subscription the last window of a burst
fires up to 30 s late. A heartbeat publishes an empty batch (contract v2, no events: nothing
counted, nothing dead-lettered) every half second, so an idle pull returns within that. Not
faster: each heartbeat takes one of the reader's 10 messages per pull, which under load belong
to votes. Dataflow's reader does not need it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, Mapping

from schemas.contract import FORMAT_ATTRIBUTE, NDJSON
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


class Heartbeat(threading.Thread):
    """Publishes an empty batch to `topic_path` every `interval_s` until stopped (see the module docstring)."""

    def __init__(self, topic_path: str, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self.topic_path = topic_path
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from google.cloud import pubsub_v1

        client = pubsub_v1.PublisherClient()
        try:
            while not self.stopping.wait(self.interval_s):
                client.publish(self.topic_path, b"\n", **{FORMAT_ATTRIBUTE: NDJSON}).result(timeout=30)
                self.sent += 1
        finally:
            client.stop()

    def __enter__(self) -> "Heartbeat":
        self.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopping.set()
        self.join(timeout=30)
