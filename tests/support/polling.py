"""Waiting on a condition instead of sleeping a guessed time: the one poll-until-deadline of the tests.

A test that waits for the system (a stream to count, a page to redraw, a reader to see a
version) polls the condition until it holds and fails with what it waited for once the
deadline passes; how long it took is returned, for the tests that report it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def wait_until(
    check: Callable[[], object],
    timeout_s: float,
    what: str,
    alive: subprocess.Popen | None = None,
    log: Path | None = None,
    poll_s: float = 0.5,
) -> float:
    """Polls `check` every `poll_s` until it holds (is true); the seconds it took. Fails after `timeout_s`,
    or at once if the process `alive` (a streaming pipeline) exits, with the tail of its `log`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if alive is not None and alive.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(
                f"the streaming pipeline exited with {alive.returncode} while waiting for {what}\n{tail}"
            )
        if check():
            return time.monotonic() - started
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def assert_stays(check: Callable[[], bool], seconds: float, what: str, poll_s: float = 0.5) -> None:
    """`check` holds at every poll for `seconds`: a state that lasts, not a passing moment."""
    until = time.monotonic() + seconds
    while True:
        assert check(), f"{what} stopped holding"
        if time.monotonic() >= until:
            return
        time.sleep(poll_s)
