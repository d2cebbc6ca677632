"""A tiny progress reporter for long loops: one redrawn line on a terminal, sparse lines in logs.

    with Progress(total=100_000, label="publish") as progress:
        for item in items:
            ...
            progress.advance()

On a terminal it redraws ``publish  12,345/100,000  12%  6,530/s  eta 13s`` at most ten
times a second; otherwise (CI logs, pipes) it prints a plain line at most every two
seconds. Either way it ends with one final line. `advance` is meant for hot loops: it
only adds to a counter and compares it with a threshold; the clock is read about
CLOCK_READS_PER_S times a second, whatever the loop's speed.
"""
from __future__ import annotations

import math
import sys
import time
from types import TracebackType
from typing import TextIO

TTY_INTERVAL_S = 0.1
LOG_INTERVAL_S = 2.0
CLOCK_READS_PER_S = 50


class Progress:
    """Counts work done and reports it on `stream` (default: sys.stderr at construction)."""

    def __init__(self, total: int | None, label: str, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.total = total
        self.label = label
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled
        self._tty = enabled and _isatty(self._stream)
        self._interval = TTY_INTERVAL_S if self._tty else LOG_INTERVAL_S
        self._start = self._next_draw = 0.0
        # The count at which the clock is read next; never reached when disabled.
        self._check_at: float = 1 if enabled else math.inf

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        self._next_draw = self._start + self._interval
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._enabled:
            self._write(self._line(time.monotonic(), final=True), final=True)

    def advance(self, n: int = 1) -> None:
        self.count += n
        if self.count >= self._check_at:
            self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        elapsed = now - self._start
        # At the rate so far, the next clock read comes about 1/CLOCK_READS_PER_S s from now.
        step = int(self.count / elapsed / CLOCK_READS_PER_S) if elapsed > 0 else 0
        self._check_at = self.count + max(1, step)
        if now >= self._next_draw:
            self._next_draw = now + self._interval
            self._write(self._line(now, final=False), final=False)

    def _line(self, now: float, final: bool) -> str:
        elapsed = now - self._start
        rate = self.count / elapsed if elapsed > 0 else 0.0
        parts = [self.label, f"{self.count:,}" if self.total is None else f"{self.count:,}/{self.total:,}"]
        if self.total:
            parts.append(f"{100 * self.count // self.total}%")
        parts.append(f"{rate:,.0f}/s")
        if final:
            parts.append(f"in {_duration(elapsed)}")
        elif self.total and rate > 0:
            parts.append(f"eta {_duration(max(0.0, self.total - self.count) / rate)}")
        return "  ".join(parts)

    def _write(self, line: str, final: bool) -> None:
        if self._tty:
            # Carriage return, then erase to the end of the line: a shorter line leaves no tail.
            self._stream.write(f"\r{line}\x1b[K" + ("\n" if final else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"
