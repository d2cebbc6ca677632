"""The local stream's heartbeat: its StreamHeartbeats row rewritten at least once per window, idle
or not, so that `upvotes status` sees a dead stream within three windows of its death.

Why: a stream's delta commits (the change log) stop when the votes stop, so "no commit lately"
cannot tell an idle stream from a dead one, and the votes subscription's backlog flags a dead
stream only once its oldest message is 300 s old (the production alert's threshold, which stays).

What: `Heartbeat` writes the row of the subscription the stream reads (schemas/posts.sql
StreamHeartbeats): the writer, the window length, the host and process, `AliveAt` the commit
timestamp, every half window from a thread of its own (at least once per window even when a
beat's commit is slow); the first beat also records `StartedAt` and clears `StoppedAt`, and a
drain that ends the pipeline records `StoppedAt` (`stop(drained=True)`), so a stream stopped on
purpose is not taken for a dead one. A SIGKILL, a crash, an out-of-memory kill or a frozen
process stop the beats with nothing recorded: `upvotes status` flags the row once it is 3 of
its windows old (spanner_reads/liveness.py, upvotes/operations/status.py).

A thread, not the pipeline's worker: a bundle that parses a backlog of 1,000 batch messages keeps
the runner's one worker thread busy for seconds, and would look like a death. What the beat says
is that the stream's process runs; that it makes progress is the backlog's to say.

A beat that fails is logged and retried at the next one; a database without the table (provisioned
by an earlier version: run `upvotes provision`) is said once, and the stream runs on without beats.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from google.api_core import exceptions
from google.cloud import spanner

from spanner_store.database import RetryPolicy, commit_mutations, run_with_retries, schema_behind
from spanner_store.tables import STREAM_HEARTBEATS

_LOG = logging.getLogger(__name__)
MIN_PERIOD_S = 0.5
BEAT_RETRY = RetryPolicy(attempts=5, first_delay_s=0.01, max_delay_s=0.2, deadline_s=5.0)


def period_s(window_seconds: float) -> float:
    """How often a stream with windows this long beats: twice per window (at least once per window
    whatever a commit's latency), but not more often than MIN_PERIOD_S."""
    return max(MIN_PERIOD_S, window_seconds / 2)


class Heartbeat:
    """One stream's beats (see the module docstring)."""

    def __init__(self, database: Any, subscription: str, writer: str, window_seconds: int) -> None:
        self._database = database
        self._subscription = subscription
        self._writer = writer
        self._window_seconds = window_seconds
        self.period_s = period_s(window_seconds)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="upvotes-heartbeat", daemon=True)
        self._disabled = False
        self.beats = 0

    def start(self) -> Heartbeat:
        self._beat(first=True)
        self._thread.start()
        return self

    def stop(self, drained: bool) -> None:
        """No more beats; with `drained`, the row records that the stream stopped on purpose."""
        self._stopping.set()
        self._thread.join(timeout=10)
        if drained:
            self._beat(stopped=True)

    def _run(self) -> None:
        while not self._stopping.wait(self.period_s):
            self._beat()

    def _row(self, first: bool, stopped: bool) -> tuple[tuple[str, ...], list[tuple]]:
        columns = ["Subscription", "Writer", "WindowSeconds", "Host", "Pid", "AliveAt"]
        values: list = [
            self._subscription,
            self._writer,
            self._window_seconds,
            socket.gethostname(),
            os.getpid(),
            spanner.COMMIT_TIMESTAMP,
        ]
        if first:
            columns += ["StartedAt", "StoppedAt"]
            values += [spanner.COMMIT_TIMESTAMP, None]
        if stopped:
            columns.append("StoppedAt")
            values.append(spanner.COMMIT_TIMESTAMP)
        return tuple(columns), [tuple(values)]

    def _beat(self, first: bool = False, stopped: bool = False) -> None:
        if self._disabled:
            return
        columns, values = self._row(first, stopped)
        try:
            run_with_retries(
                lambda: commit_mutations(
                    self._database,
                    lambda batch: batch.insert_or_update(STREAM_HEARTBEATS, columns=columns, values=values),
                ),
                BEAT_RETRY,
            )
            self.beats += 1
        except exceptions.NotFound as error:
            if not schema_behind(error):
                raise
            self._disabled = True
            _LOG.warning(
                "this database has no %s table (provisioned by an earlier version): the stream runs "
                "without a heartbeat, and `upvotes status` cannot tell when it dies; run `upvotes "
                "provision` to add it",
                STREAM_HEARTBEATS,
            )
        except Exception as error:  # noqa: BLE001 - a missed beat is retried at the next one
            _LOG.warning("heartbeat not written (%s); trying again in %.1f s", error, self.period_s)
