"""Progress of long loops (publishing, waiting for the counts to match): tqdm's bar, on stderr.

    with progress_bar(100_000, "publish", unit="events") as bar:
        for item in items:
            ...
            bar.update()

It shows what is done, of how much, the percentage, the rate and the time left, e.g.
``publish:  12%|█▏        | 12345/100000 [00:01<00:13, 6530.00events/s]``. On a terminal it
redraws at most ten times a second; elsewhere (CI logs, pipes) at most every two seconds, so a
log is not flooded. `update` is cheap enough for hot loops: tqdm reads the clock only every
`miniters` updates, a number it adapts to the loop's speed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

TTY_INTERVAL_S = 0.1
LOG_INTERVAL_S = 2.0


def progress_bar(
    total: int | None, label: str, stream: TextIO | None = None, *, unit: str = "it", enabled: bool = True
) -> tqdm:
    """A bar counting to `total` (None: a count and a rate, no percentage), or a silent one."""
    stream = stream if stream is not None else sys.stderr
    return tqdm(
        total=total,
        desc=label,
        file=stream,
        unit=unit,
        disable=not enabled,
        dynamic_ncols=True,
        mininterval=TTY_INTERVAL_S if _isatty(stream) else LOG_INTERVAL_S,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
