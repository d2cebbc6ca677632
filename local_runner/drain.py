"""Stopping the local streaming pipeline without losing a vote: a drain on SIGINT and SIGTERM.

Ctrl-C, `kill`, a container stop or a reboot is how a long-running local process ends. Without
this module the DirectRunner ends mid-bundle (SIGTERM) or leaves its daemon worker threads
behind (SIGINT), and every vote its reader had acknowledged but not yet written is lost.

The first SIGINT or SIGTERM starts a drain, what Dataflow does on `jobs drain`: the reader
pulls nothing more and drops its watermark hold (local_runner/pubsub_reader.py), so every open
window fires as if the input had ended, the sink writes every pane, the dead-letter writer
publishes what it holds, and the runner ends the pipeline. `StopOnSignals.until_finished`
then returns a DrainReport: what was pulled, counted and written, and how long the drain took
(the caller exits 0).

A second signal, or `drain_timeout_s` passing (the sink may be stuck behind an unreachable
Spanner), stops at once: the report says how many votes were pulled but not yet written, and
the process ends with EXIT_NOT_DRAINED, without waiting for Beam's daemon worker threads or the
clients' threads. With the message log (local_runner/exactly_once.py) nothing is lost: those
messages are unacknowledged and logged, and the next run replays them; without it (Beam's
reader, or UPVOTES_STREAM_LOG=off) they were acknowledged on pull and are lost. Without the
project's reader (Beam's cannot drain) the first signal does that.

Which ending is reported has one source of truth: whether the pipeline finished (its result's
state is DONE, which Beam sets before `wait_until_finish` returns). A finished pipeline wrote
every window, so it is "drained" and exit 0 even if the timeout or a second signal comes in the
instant between the pipeline finishing and the main thread reporting it; "stopped at once" is
said only of a pipeline not finished when the stop is decided. The outcome is decided once,
under one lock, and the stop exits while still holding it, so the main thread can never report
a drain the stop has already denied (nor the reverse).

Signal handlers run in the main thread, which only waits for the pipeline here; they set flags,
start a timer and write with os.write (never print, which is not reentrant). The lock is
reentrant because a second signal's handler may run in the main thread while it holds it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spanner_writes.sinks import SINKS, SinkMetrics

if TYPE_CHECKING:  # Beam is imported only once the pipeline starts: see StopOnSignals
    from types import FrameType

    from apache_beam.runners.runner import PipelineResult

    from local_runner.pubsub_reader import ReaderControl

EXIT_DRAINED = 0
EXIT_NOT_DRAINED = 4
# A few windows to fire and write the open ones; never less than DRAIN_MIN_S, so that a sink
# riding out a short Spanner outage (its retries last about 25 s) still finishes.
DRAIN_WINDOWS = 3
DRAIN_MIN_S = 30.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def say_now(line: str) -> None:
    """One line to stderr, safe in a signal handler and from any thread."""
    os.write(2, f"upvotes stream: {line}\n".encode("utf-8", "replace"))


def default_drain_timeout_s(window_seconds: int) -> float:
    return max(DRAIN_MIN_S, DRAIN_WINDOWS * window_seconds)


@dataclass(frozen=True)
class Progress:
    """The pipeline's counters at one moment (committed bundles only, so a lower bound of the
    work done and an upper bound of what is unwritten)."""

    messages_pulled: int = 0
    messages_parsed: int = 0
    votes: int = 0  # accepted by ParseVotes, delta and vote-state events
    votes_written: int = 0  # in delta rows now in Spanner, or vote states applied (or found superseded) there
    votes_dead_lettered: int = 0  # in delta rows or vote states that could never be written (dead letters)
    votes_without_effect: int = 0  # sums that cancel out: no row to write
    delta_rows: int = 0
    dead_letters: int = 0

    @property
    def votes_unwritten(self) -> int:
        return max(0, self.votes - self.votes_written - self.votes_dead_lettered - self.votes_without_effect)

    @property
    def messages_unparsed(self) -> int:
        return max(0, self.messages_pulled - self.messages_parsed)


class ReaderProgress(Protocol):
    """What progress_of reads of the project's reader (local_runner.pubsub_reader.ReaderControl)."""

    messages: int

    def counters(self) -> dict[tuple[str, str], int] | None: ...


def progress_of(control: ReaderProgress | None, result: PipelineResult | None) -> Progress:
    """The counters of a running or finished local streaming pipeline (zeros before it runs):
    from the worker's own metrics containers when the project's reader runs
    (local_runner/metrics.py says why), else from `result.metrics()`. The sinks' counters are
    summed over every sink declared (spanner_writes/sinks.py)."""
    counters = control.counters() if control is not None else None
    if counters is None:
        counters = {}
        for counter in result.metrics().query()["counters"] if result is not None else ():
            key = (counter.key.metric.namespace, counter.key.metric.name)
            counters[key] = counters.get(key, 0) + (counter.committed or 0)

    def of_every_sink(name: Callable[[SinkMetrics], str]) -> int:
        return sum(counters.get((sink.step, name(sink.metrics)), 0) for sink in SINKS)

    return Progress(
        messages_pulled=control.messages if control else counters.get(("ParseVotes", "messages"), 0),
        messages_parsed=counters.get(("ParseVotes", "messages"), 0),
        votes=counters.get(("ParseVotes", "accepted"), 0),
        votes_written=of_every_sink(lambda names: names.events_written),
        votes_dead_lettered=of_every_sink(lambda names: names.events_dead_lettered),
        votes_without_effect=counters.get(("WindowAndSumVotes", "events_without_effect"), 0),
        delta_rows=of_every_sink(lambda names: names.delta_rows_written),
        dead_letters=of_every_sink(lambda names: names.dead_lettered)
        + sum(
            v for (namespace, name), v in counters.items() if namespace == "ParseVotes" and name.startswith("rejected_")
        ),
    )


@dataclass(frozen=True)
class DrainReport:
    drained: bool  # every vote pulled is written (or dead-lettered)
    why: str  # what started the drain, or what cut it short
    seconds: float  # from the first signal to the end
    at_signal: Progress
    at_end: Progress
    # The message log that keeps what was pulled and not yet written, for the next run to replay;
    # None: the reader acknowledged on pull, and a stop cut short loses it.
    log: str | None = None

    def text(self) -> str:
        end = self.at_end
        run = (
            f"This run: {end.messages_pulled:,} messages, {end.votes:,} votes, {end.delta_rows:,} delta rows, "
            f"{end.dead_letters:,} dead letters."
        )
        if self.drained:
            return (
                f"drained in {self.seconds:.1f} s ({self.why}): every vote pulled is written; during the drain "
                f"{end.votes_written - self.at_signal.votes_written:,} votes went into "
                f"{end.delta_rows - self.at_signal.delta_rows:,} delta rows. {run}"
            )
        if self.log is not None:
            return (
                f"stopped at once ({self.why}), {self.seconds:.1f} s into the drain: up to {end.votes_unwritten:,} "
                f"votes pulled but not yet written, and {end.messages_unparsed:,} messages pulled but not yet "
                f"parsed, are not lost: unacknowledged, they wait in the message log {self.log}, and the next "
                f"`upvotes stream` on this subscription replays them first. {run}"
            )
        return (
            f"stopped at once ({self.why}), {self.seconds:.1f} s into the drain: up to {end.votes_unwritten:,} votes "
            f"pulled and acknowledged but not yet written are lost, and {end.messages_unparsed:,} messages "
            f"pulled but not yet parsed. {run}"
        )


class StopOnSignals:
    """SIGINT/SIGTERM handling for one local streaming run (see the module docstring).

    Entered as early as the process can (`upvotes stream` does before it even imports Beam), so
    that no signal finds Python's defaults; `attach(control)` once the reader is installed (a
    signal that came before makes the reader stop at its first bundle), or `detach()` for a
    runner this does not drive (Dataflow); `until_finished(result)` waits for the end."""

    def __init__(
        self, drain_timeout_s: float, say: Callable[[str], None] = say_now, exit_now: Callable[[int], object] = os._exit
    ) -> None:
        self._timeout_s = drain_timeout_s
        self._say = say
        self._exit_now = exit_now
        self._control: ReaderControl | None = None
        self._attached = False
        self._result: PipelineResult | None = None
        self._lock = threading.RLock()
        self._signal_at: float | None = None
        self._why = ""
        self._at_signal = Progress()
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._outcome: DrainReport | None = None  # decided once, under the lock
        self._timer: threading.Timer | None = None

    def __enter__(self) -> StopOnSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *_) -> None:
        self._restore()

    def _restore(self) -> None:
        """Python's handlers back, and no drain timeout pending any more."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if self._timer is not None:
            self._timer.cancel()

    def attach(self, control: ReaderControl | None) -> None:
        """The reader to drain (None: Beam's, which cannot). A signal that came before drains now."""
        with self._lock:
            self._control, self._attached = control, True
            signaled = self._signal_at is not None
        if signaled:
            self._begin_drain()

    def detach(self) -> None:
        """Gives the signals back to Python's handlers (a runner this module does not drive); a
        signal that already came is raised as Python's own would have been."""
        self._restore()
        if self._signal_at is not None:
            raise KeyboardInterrupt(self._why)

    def _progress(self) -> Progress:
        for _ in range(3):  # Beam's metrics map may grow while it is read: read again
            try:
                return progress_of(self._control, self._result)
            except RuntimeError:
                continue
        return self._at_signal

    def _on_signal(self, signum: int, _frame) -> None:
        name = signal.Signals(signum).name
        with self._lock:
            first = self._signal_at is None
            if first:
                self._signal_at = time.monotonic()
                self._why = name
            attached = self._attached
        if not first:
            self._stop_now(f"second signal, {name}")
            return
        self._timer = threading.Timer(
            self._timeout_s, self._stop_now, args=(f"the drain timeout, {self._timeout_s:g} s",)
        )
        self._timer.daemon = True
        self._timer.start()
        if attached:
            self._begin_drain()
        else:
            self._say(f"{name}: stopping: the pipeline stops as soon as it has started, having pulled nothing")

    def _begin_drain(self) -> None:
        self._at_signal = self._progress()
        if self._control is None:
            self._stop_now(f"{self._why}; Beam's own Pub/Sub reader cannot drain")
            return
        self._control.drain()
        self._say(
            f"{self._why}: draining: no more pulls, every open window fires and is written; "
            f"a second Ctrl-C or SIGTERM, or {self._timeout_s:g} s, stops at once"
        )

    def _finished(self) -> bool:
        """Whether the pipeline has finished, every window written: the one source of truth for
        how the run ended (the module docstring says why)."""
        if self._result is None:
            return False
        from apache_beam.runners.runner import PipelineState  # Beam is loaded once a pipeline runs

        return self._result.state == PipelineState.DONE

    def _stop_now(self, why: str) -> None:
        """Ends the process with EXIT_NOT_DRAINED, unless the pipeline has finished or the
        outcome is already decided. The exit happens under the lock (see the module docstring)."""
        with self._lock:
            if self._outcome is not None or self._finished():
                return
            self._outcome = self._report(False, why)
            self._say(self._outcome.text())
            self._exit_now(EXIT_NOT_DRAINED)

    def _report(self, drained: bool, why: str) -> DrainReport:
        seconds = 0.0 if self._signal_at is None else time.monotonic() - self._signal_at
        once = getattr(self._control, "once", None)
        return DrainReport(
            drained,
            why,
            round(seconds, 1),
            self._at_signal,
            self._progress(),
            None if once is None else str(once.log.path),
        )

    def until_finished(self, result: PipelineResult) -> DrainReport:
        """Waits until the pipeline ends (a drain, or a failure, which raises); the report of how
        it ended (a stop decided first has ended the process, except with an injected exit)."""
        self._result = result
        result.wait_until_finish()
        with self._lock:
            if self._outcome is None:
                self._outcome = self._report(self._signal_at is not None, self._why or "the input ended")
            return self._outcome
