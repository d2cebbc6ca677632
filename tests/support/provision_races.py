"""Provisions racing each other over the hot ranking's settings and keys (issue 44, item 5), one
backfill step at a time in a scripted order.

Every step of the backfill (upvotes/operations/hot_backfill.py) is one call of its
`run_with_retries`: the transaction that records the half-life, each page's transaction, the one
that records the end. `race` runs each provision in a thread of its own and lets one step run at a
time, in the order of a script ("AABAB": A's first two steps, then B's, ...; the steps of a
provision that has ended are dropped, and once the script is used up the rest run in arrival
order), and calls `check` after every step, with no step running. No step starts before every
provision has reached its first one, so each has read whatever it reads before its first write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from upvotes.operations import hot_backfill

WAIT_S = 120


class _Turns:
    def __init__(self, script: str, names: set[str], check: Callable[[str], None]) -> None:
        self.script = list(script)
        self.waiting: set[str] = set()
        self.started: set[str] = set()
        self.ended: set[str] = set()
        self.names = names
        self.check = check
        self.steps: list[str] = []
        self.failures: list[str] = []
        self.lock = threading.Condition()

    def _mine(self, name: str) -> bool:
        everyone_there = self.names <= self.waiting | self.started | self.ended
        return everyone_there and (not self.script or self.script[0] == name)

    def step(self, name: str, work: Callable[[], object]) -> object:
        deadline = time.monotonic() + WAIT_S
        with self.lock:
            self.waiting.add(name)
            self.lock.notify_all()
            while not self._mine(name):
                if not self.lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"{name} waited {WAIT_S} s for its turn; script left {self.script}")
            self.waiting.discard(name)
            self.started.add(name)
            try:
                return work()
            finally:
                if self.script:
                    self.script.pop(0)
                self.steps.append(name)
                try:
                    self.check(f"after step {len(self.steps)} ({''.join(self.steps)})")
                except AssertionError as failure:
                    self.failures.append(str(failure))
                self.lock.notify_all()

    def end(self, name: str) -> None:
        with self.lock:
            self.ended.add(name)
            self.waiting.discard(name)
            self.script = [turn for turn in self.script if turn != name]
            self.lock.notify_all()


def race(
    monkeypatch, provisions: dict[str, Callable[[], object]], script: str, check: Callable[[str], None]
) -> dict[str, object]:
    """Runs `provisions` (name -> a call of ensure_hot_ranking or provision) at once, their steps in
    the order of `script`; `check` runs after every step. Returns each one's result (or the
    exception it raised); fails with every check that failed."""
    turns = _Turns(script, set(provisions), check)
    real = hot_backfill.run_with_retries
    names: dict[int, str] = {}

    def one_step_at_a_time(work, *args, **kwargs):
        name = names.get(threading.get_ident())
        if name is None:  # not a racing provision's step
            return real(work, *args, **kwargs)
        return turns.step(name, lambda: real(work, *args, **kwargs))

    monkeypatch.setattr(hot_backfill, "run_with_retries", one_step_at_a_time)
    results: dict[str, object] = {}

    def run(name: str, provision: Callable[[], object]) -> None:
        names[threading.get_ident()] = name
        try:
            results[name] = provision()
        except Exception as error:  # noqa: BLE001 - returned to the test
            results[name] = error
        finally:
            turns.end(name)

    threads = [threading.Thread(target=run, args=item) for item in provisions.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    monkeypatch.setattr(hot_backfill, "run_with_retries", real)
    assert not any(thread.is_alive() for thread in threads), f"a provision is still running: {turns.steps}"
    assert not turns.failures, "\n".join(turns.failures)
    return results
