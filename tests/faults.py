"""Fault injection around a real Spanner database on the emulator (nothing here mocks Spanner).

`FlakyDatabase` passes everything through to the real database, but makes a chosen fraction
of blind commits fail with a transient error, either before the commit (nothing written) or
after it (written, but the caller never hears: a retry after an unseen success).
"""
from __future__ import annotations

import contextlib
import random
import threading

from google.api_core import exceptions


class FlakyDatabase:
    def __init__(self, database, fail_before: float = 0.0, fail_after: float = 0.0, seed: int = 0,
                 error: type[exceptions.GoogleAPICallError] = exceptions.Aborted) -> None:
        self._database = database
        self._fail_before = fail_before
        self._fail_after = fail_after
        self._random = random.Random(seed)
        self._error = error
        self._lock = threading.Lock()
        self.injected_before = 0
        self.injected_after = 0

    def __getattr__(self, name):
        return getattr(self._database, name)

    def _roll(self) -> float:
        with self._lock:
            return self._random.random()

    @contextlib.contextmanager
    def batch(self, **kwargs):
        if self._roll() < self._fail_before:
            self.injected_before += 1
            raise self._error("injected before commit")
        with self._database.batch(**kwargs) as batch:
            yield batch
        if self._roll() < self._fail_after:
            self.injected_after += 1
            raise self._error("injected after a successful commit")
