"""The streaming pipeline as a local child process on the DirectRunner, for the demo, the
tests and the benchmarks: `upvotes stream`, in a process group of its own, so stopping it also
stops anything it started.

`stop` sends SIGTERM, which drains it (local_runner/drain.py: no more pulls, every open window
fired and written, exit 0), and waits for the drain; only past the drain timeout plus a grace
does it SIGKILL. `drain_summary` reads what the drain reported from the log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from local_runner.message_log import in_use
from upvotes.resources import Resources

DRAIN_TIMEOUT_S = 60.0  # what the stream is given to drain (--drain-timeout-s)
# The stream exits by itself at DRAIN_TIMEOUT_S (exit 4, saying what it lost); SIGKILL only a
# process that does not even do that.
STOP_GRACE_S = DRAIN_TIMEOUT_S + 30.0
# What `upvotes stream` prints once it handles SIGINT and SIGTERM (upvotes/commands/stream.py).
STARTED_LINE = b"streaming pipeline starting"
START_TIMEOUT_S = 120.0  # Python start-up and imports, on a loaded machine
DRAINED_PREFIX = "upvotes stream: drained"
STOPPED_PREFIX = "upvotes stream: stopped at once"


def message_log_dir(log_path: Path) -> Path:
    """Where a stream whose output goes to `log_path` keeps its message log: beside it, so that a
    restart with the same output (`append`) replays what the killed run left."""
    return log_path.parent / "stream-log"


def start(
    res: Resources,
    window_seconds: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    append: bool = False,
    wrapper: tuple[str, ...] = ("upvotes.cli",),
    stream_args: tuple[str, ...] = (),
    cwd: Path | None = None,
    message_log: bool = True,
) -> subprocess.Popen:
    """Starts `upvotes stream` on `res`, its output going to `log_path`, its message log beside it
    (`message_log_dir`; `message_log=False` for a version of the command from before the log).
    `wrapper`: the module (and its arguments) that runs the command, a wrapper of upvotes.cli's main
    for the tests' and benchmarks' faults and meters; `stream_args`: more flags of the command;
    `cwd`: where it runs from (`python -m` imports the packages of its working directory first: a
    benchmark runs an earlier version's tree).

    Not `append`, a new run: a message log an earlier run left beside `log_path` is removed first.
    It belongs to that run's subscription, and a caller that starts a new run (the demo, a
    benchmark, on emulators started afresh) has a new one of the same name. The log itself no
    longer mistakes the new run's messages for the old one's (they are known by ID and publish
    time, and unfinished pulls of another database are set aside: local_runner/streaming.py), so
    this only keeps a new run from inheriting the old one's rows and set-aside files; it was first
    added when it did not (a second `make demo` counted nothing). A log a running stream holds is
    left alone: the new stream is refused (LogBusy), as before."""
    if message_log and not append and not in_use(message_log_dir(log_path)):
        shutil.rmtree(message_log_dir(log_path), ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        *wrapper,
        "stream",
        f"--project={res.project}",
        f"--instance={res.instance}",
        f"--database={res.database}",
        f"--subscription={res.subscription}",
        f"--dead-letter-topic={res.dead_letter_topic}",
        f"--window-seconds={window_seconds}",
        f"--drain-timeout-s={DRAIN_TIMEOUT_S:g}",
        *((f"--log-dir={message_log_dir(log_path)}",) if message_log else ()),
        *stream_args,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab" if append else "wb") as log:
        offset = log.tell()
        process = subprocess.Popen(
            command,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )
    _wait_until_it_handles_signals(process, log_path, offset)
    return process


def _wait_until_it_handles_signals(process: subprocess.Popen, log_path: Path, offset: int) -> None:
    """Until the stream prints STARTED_LINE (its signal handlers are installed by then) or exits: a
    SIGTERM during the seconds Python spends importing would end it with Python's default, undrained."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        with open(log_path, "rb") as log:
            log.seek(offset)
            if STARTED_LINE in log.read():
                return
        time.sleep(0.05)


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> int:
    """Sends `sig` to the pipeline's process group (SIGKILL after `grace_s`); returns its exit code:
    0 after a drain (SIGTERM, SIGINT). A Ctrl-C while it waits sends a second SIGTERM (the
    stream then stops at once and says what it lost) before it is raised."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()
    except KeyboardInterrupt:  # a second Ctrl-C while it drains: stop it at once too
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
        raise


@contextlib.contextmanager
def running(
    res: Resources,
    window_seconds: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    wrapper: tuple[str, ...] = ("upvotes.cli",),
    cwd: Path | None = None,
    message_log: bool = True,
) -> Iterator[subprocess.Popen]:
    """The pipeline for the duration of a block, stopped (and waited for) on the way out."""
    process = start(res, window_seconds, log_path, env, wrapper=wrapper, cwd=cwd, message_log=message_log)
    try:
        yield process
    finally:
        stop(process)


def drain_summary(log_path: Path) -> str | None:
    """The last line in which the stream said what it drained, or what it lost, if any."""
    lines = [
        line
        for line in log_path.read_text(errors="replace").splitlines()
        if line.startswith((DRAINED_PREFIX, STOPPED_PREFIX))
    ]
    return lines[-1] if lines else None
