"""Token buckets, one per key (a credential, a session, a client address): `rate` per second,
holding at most `burst`. The service runs them on its event loop thread only, so they take
no lock. At most `max_keys` buckets are kept (the least recently used go first; a bucket
dropped comes back full), so a flood of new keys cannot grow memory without bound.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

MAX_KEYS = 100_000


class TokenBuckets:
    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS
    ) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(f"a token bucket needs a rate above 0 and a burst of at least 1 (got {rate}, {burst})")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: Hashable) -> float:
        """Takes one token for `key`: 0.0 if there was one, else the seconds until there is."""
        now = self._clock()
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return wait


def retry_after(wait_s: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))
