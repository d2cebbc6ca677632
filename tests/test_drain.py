"""local_runner/drain.py: what SIGINT and SIGTERM do to a local streaming run, with real signals
sent to this process and a stand-in for the running pipeline (the whole path, `upvotes stream`
under load, is tests/test_faults.py's).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from local_runner.drain import (
    DRAIN_MIN_S,
    EXIT_NOT_DRAINED,
    DrainReport,
    Progress,
    StopOnSignals,
    default_drain_timeout_s,
    progress_of,
)
from local_runner.pubsub_reader import ReaderControl
from tests.support.polling import wait_until
from upvotes.devtools import local_stream


class Exited(Exception):
    """What the injected exit raises, so that a test sees the exit instead of ending."""


class Pipeline:
    """A running pipeline that ends when its reader drains (after `drain_s`), or never; its
    `state` is DONE once it has, as a Beam result's is before `wait_until_finish` returns."""

    def __init__(self, control: ReaderControl | None, drain_s: float | None = 0.2) -> None:
        self._control = control
        self._drain_s = drain_s
        self.release = threading.Event()  # ends a drain that would never end (drain_s None)
        self.state = "RUNNING"
        if control is not None:
            control.add_pulled(10, 1)
        self.counters = {
            ("ParseVotes", "messages"): 10,
            ("ParseVotes", "accepted"): 500,
            ("WriteDeltaRows", "events_written"): 380,
            ("WriteDeltaRows", "rows_written"): 12,
            ("WindowAndSumVotes", "events_without_effect"): 20,
            ("ParseVotes", "rejected_not_json"): 2,
        }

    def wait_until_finish(self) -> str:
        while self._control is None or not self._control.wait_for_drain(0.05):
            pass
        if self._drain_s is None:
            self.release.wait()
            raise Exited("released")
        time.sleep(self._drain_s)
        self.counters[("WriteDeltaRows", "events_written")] = 480
        self.state = "DONE"
        return self.state

    def metrics(self):
        results = [
            SimpleNamespace(key=SimpleNamespace(metric=SimpleNamespace(namespace=ns, name=name)), committed=v)
            for (ns, name), v in self.counters.items()
        ]
        return SimpleNamespace(query=lambda: {"counters": results})


def signal_soon(sig: int, after_s: float = 0.2) -> None:
    threading.Timer(after_s, os.kill, args=(os.getpid(), sig)).start()


def wait_for_timers_started_since(before: set[threading.Thread]) -> None:
    """Until every threading.Timer started since `before` (a drain timer among them) has run."""
    wait_until(
        lambda: not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t not in before],
        5,
        "the timers to fire",
        poll_s=0.01,
    )


def exits() -> tuple[list[int], Callable[[int], None]]:
    codes: list[int] = []

    def exit_now(code: int) -> None:
        codes.append(code)
        raise Exited(code)

    return codes, exit_now


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_drains_and_reports(sig):
    said: list[str] = []
    control = ReaderControl()
    codes, exit_now = exits()
    before = signal.getsignal(sig)
    with StopOnSignals(30, said.append, exit_now) as stopping:
        stopping.attach(control)
        signal_soon(sig)
        report = stopping.until_finished(Pipeline(control))
    assert signal.getsignal(sig) == before  # restored
    assert control.draining and codes == []
    assert report.drained and report.why == signal.Signals(sig).name and report.seconds >= 0.2
    assert report.at_end.votes_unwritten == 0 and report.at_signal.votes_unwritten == 100
    text = report.text()
    assert text.startswith("drained in") and "100 votes went into 0 delta rows" in text
    assert "This run: 10 messages, 500 votes, 12 delta rows, 2 dead letters." in text
    assert said and said[0].startswith(f"{signal.Signals(sig).name}: draining")


def test_a_second_signal_stops_at_once_and_says_what_is_lost():
    said: list[str] = []
    control = ReaderControl()
    codes, exit_now = exits()
    with StopOnSignals(30, said.append, exit_now) as stopping:
        stopping.attach(control)
        signal_soon(signal.SIGTERM, 0.1)
        signal_soon(signal.SIGINT, 0.4)
        with pytest.raises(Exited):
            stopping.until_finished(Pipeline(control, drain_s=None))
    assert codes == [EXIT_NOT_DRAINED]
    assert said[-1].startswith("stopped at once (second signal, SIGINT)")
    assert "up to 100 votes pulled and acknowledged but not yet written are lost" in said[-1]


def test_with_the_message_log_a_stop_cut_short_says_what_waits_in_it():
    """With the message log (local_runner/exactly_once.py) nothing pulled was acknowledged: the
    report says where it waits for the next run, and loses nothing."""
    said: list[str] = []
    control = ReaderControl()
    control.once = SimpleNamespace(log=SimpleNamespace(path="/tmp/stream-log/votes.sqlite"))
    codes, exit_now = exits()
    with StopOnSignals(30, said.append, exit_now) as stopping:
        stopping.attach(control)
        signal_soon(signal.SIGTERM, 0.1)
        signal_soon(signal.SIGINT, 0.4)
        with pytest.raises(Exited):
            stopping.until_finished(Pipeline(control, drain_s=None))
    assert codes == [EXIT_NOT_DRAINED]
    assert (
        "up to 100 votes pulled but not yet written, and 0 messages pulled but not yet parsed, are not lost: "
        "unacknowledged, they wait in the message log /tmp/stream-log/votes.sqlite"
    ) in said[-1]
    assert "lost," not in said[-1]


def test_the_drain_timeout_stops_at_once():
    said: list[str] = []
    control = ReaderControl()
    codes: list[int] = []
    stopped = threading.Event()

    def exit_now(code: int) -> None:  # from the timer thread: record, and let the test go on
        codes.append(code)
        stopped.set()

    pipeline = Pipeline(control, drain_s=None)
    with StopOnSignals(0.5, said.append, exit_now) as stopping:
        stopping.attach(control)
        signal_soon(signal.SIGTERM, 0.1)
        with pytest.raises(Exited):
            threading.Timer(5, pipeline.release.set).start()
            stopping.until_finished(pipeline)
        assert stopped.is_set()
    assert codes == [EXIT_NOT_DRAINED]
    assert said[-1].startswith("stopped at once (the drain timeout, 0.5 s)")


def test_without_the_projects_reader_the_first_signal_stops_at_once():
    said: list[str] = []
    codes, exit_now = exits()
    with StopOnSignals(30, said.append, exit_now) as stopping:
        stopping.attach(None)
        with pytest.raises(Exited):  # the handler runs in this thread, at once
            os.kill(os.getpid(), signal.SIGTERM)
    assert codes == [EXIT_NOT_DRAINED] and "cannot drain" in said[-1]


def test_a_late_timer_never_exits_a_process_that_drained():
    control = ReaderControl()
    codes, exit_now = exits()
    before = set(threading.enumerate())
    with StopOnSignals(0.3, lambda _: None, exit_now) as stopping:
        stopping.attach(control)
        signal_soon(signal.SIGINT, 0.05)
        assert stopping.until_finished(Pipeline(control, drain_s=0.0)).drained
        wait_for_timers_started_since(before)
    assert codes == []


class FinishesAsTheTimerFires(Pipeline):
    """A pipeline whose drain completes just as the drain timer fires: finished (state DONE),
    its `wait_until_finish` returns only once every timer started since `timers_before` has run."""

    def __init__(self, control: ReaderControl, timers_before: set[threading.Thread]) -> None:
        super().__init__(control, drain_s=0.0)
        self._timers_before = timers_before

    def wait_until_finish(self) -> str:
        super().wait_until_finish()
        wait_for_timers_started_since(self._timers_before)
        return self.state


def test_a_drain_that_finishes_as_the_timer_fires_is_reported_drained():
    """The pipeline finished, so every window was written: exit 0 and "drained", never the
    drain timeout's "votes lost" (which a script would answer by republishing them)."""
    said: list[str] = []
    control = ReaderControl()
    codes: list[int] = []
    pipeline = FinishesAsTheTimerFires(control, set(threading.enumerate()))
    with StopOnSignals(0.05, said.append, codes.append) as stopping:
        stopping.attach(control)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, at once: the drain and its timer start
        report = stopping.until_finished(pipeline)
    assert codes == [] and report.drained
    assert not any("lost" in line for line in said), said
    assert report.text().startswith("drained in")


def test_a_signal_before_the_pipeline_starts_stops_it_at_its_first_bundle():
    """`upvotes stream` handles signals before it imports Beam: a SIGTERM then is kept, and the
    reader attached later drains at once (having pulled nothing)."""
    said: list[str] = []
    control = ReaderControl()
    codes, exit_now = exits()
    with StopOnSignals(30, said.append, exit_now) as stopping:
        os.kill(os.getpid(), signal.SIGTERM)
        assert not control.draining and said[-1].startswith("SIGTERM: stopping")
        stopping.attach(control)
        assert control.draining
        report = stopping.until_finished(Pipeline(control, drain_s=0.0))
    assert report.drained and codes == [] and said[-1].startswith("SIGTERM: draining")


def test_a_runner_this_does_not_drive_gets_the_signals_back():
    """Dataflow: `upvotes stream` only waits for the job, so Ctrl-C is Python's again (and one
    that came during the launch is raised as Python's own)."""
    before = signal.getsignal(signal.SIGINT)  # Python's, or SIG_IGN if started in the background
    with StopOnSignals(30, lambda _: None, exits()[1]) as stopping:
        stopping.detach()
        assert signal.getsignal(signal.SIGINT) == before
    with StopOnSignals(30, lambda _: None, exits()[1]) as stopping:
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            stopping.detach()
    assert signal.getsignal(signal.SIGINT) == before


def test_progress_accounts_for_every_vote():
    done = Progress(
        messages_pulled=10,
        messages_parsed=10,
        votes=500,
        votes_written=470,
        votes_dead_lettered=10,
        votes_without_effect=20,
        delta_rows=12,
        dead_letters=3,
    )
    assert done.votes_unwritten == 0 and done.messages_unparsed == 0
    assert Progress(messages_pulled=12, messages_parsed=10, votes=500, votes_written=400).votes_unwritten == 100
    assert progress_of(None, None) == Progress()
    control = ReaderControl()
    control.add_pulled(7, 1)
    assert progress_of(control, None).messages_pulled == 7


def test_the_default_timeout_is_a_few_windows():
    assert default_drain_timeout_s(2) == DRAIN_MIN_S
    assert default_drain_timeout_s(60) == 180


def test_local_stream_recognises_both_endings():
    drained = DrainReport(True, "SIGTERM", 1.0, Progress(), Progress())
    cut = DrainReport(False, "second signal, SIGINT", 1.0, Progress(), Progress())
    assert f"upvotes stream: {drained.text()}".startswith(local_stream.DRAINED_PREFIX)
    assert f"upvotes stream: {cut.text()}".startswith(local_stream.STOPPED_PREFIX)
