"""A Spanner that misbehaves like the real one, around a real database on the emulator.

The emulator runs one read-write transaction at a time, keeps every version and never leaves
a commit ambiguous; production Spanner does none of these. `FlakyDatabase` passes everything
through to the real database (nothing here mocks Spanner) and injects, on a seeded schedule:

- blind commits (`batch()`) that fail before the commit (nothing written) or after it
  (written, but the caller never hears: a retry after an unseen success), at a rate or at
  chosen commits (`fail_commits`), with any error (`error`: a class or a factory of one, e.g.
  `session_not_found`);
- read-write transactions (`run_in_transaction`) aborted on a read inside them or at their
  commit (nothing written), or answered DEADLINE_EXCEEDED after the commit succeeded (the
  ambiguous commit, which real Spanner leaves to the caller), or refused with `error` before
  they begin (`fail_transactions`);
- reads at a timestamp older than the version retention (`snapshot(read_timestamp=...)`,
  `batch_snapshot(read_timestamp=...)`), rejected as real Spanner rejects them, against an
  injectable clock so a test can age a fold's snapshot without waiting an hour;
- orders the emulator never produces: `before_transaction` runs a callback (another fold, a
  sink commit) before a chosen read-write transaction starts, e.g. between a fold's snapshot
  and its compare-and-set.

Every injection is counted, so a test can assert that its faults really happened.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from apache_beam.utils.windowed_value import WindowedValue
from google.api_core import exceptions

# What Spanner keeps versions for (version_retention_period's default): a read at an older
# timestamp is rejected with FAILED_PRECONDITION.
DEFAULT_VERSION_RETENTION = timedelta(hours=1)


def aborted(message: str) -> exceptions.Aborted:
    """An ABORTED as the client raises it: the client's own retry reads `errors[0]`."""
    return exceptions.Aborted(message, errors=[object()])


def session_not_found(message: str) -> exceptions.NotFound:
    """NOT_FOUND as Spanner answers a request on a session it has deleted (idle for an hour, or
    garbage-collected): the client names the session in the message."""
    return exceptions.NotFound(f"Session not found: projects/p/instances/i/databases/d/sessions/s ({message})")


def stream_reset(message: str) -> exceptions.InternalServerError:
    """INTERNAL as gRPC reports a stream the server closed mid-call, which Google's clients retry."""
    return exceptions.InternalServerError(f"Received unexpected EOS on DATA frame from server ({message})")


# What real Spanner answers and a retry fixes, beyond the ABORTED, UNAVAILABLE and
# DEADLINE_EXCEEDED other tests inject; by the name a test's id shows.
RETRYABLE_ERRORS: dict[str, Callable[[str], exceptions.GoogleAPICallError]] = {
    "RESOURCE_EXHAUSTED": exceptions.ResourceExhausted,
    "INTERNAL_stream_reset": stream_reset,
    "CANCELLED": exceptions.Cancelled,
    "NOT_FOUND_session": session_not_found,
}


def inject(fn: Any, database: object) -> None:
    """Puts `database`, a stand-in that injects faults around a real one, where the DoFn `fn` keeps
    its own (`_database`, typed as the client's Database)."""
    fn._database = database


def dead_letters(outputs: Iterable, tag: str) -> list:
    """What a sink's DoFn sent to its dead-letter output `tag`, from the outputs of one bundle's
    `process` calls (values bare) and `finish_bundle` (values in the global window)."""
    outputs = list(outputs)
    assert {out.tag for out in outputs} <= {tag}, [out.tag for out in outputs]
    return [out.value.value if isinstance(out.value, WindowedValue) else out.value for out in outputs]


@dataclass
class Injected:
    """How many faults of each kind were injected (shared by every handle of one schedule)."""

    commits: int = 0  # blind commits started (attempts)
    before: int = 0  # blind commits failed before committing
    after: int = 0  # blind commits failed after committing
    read_aborts: int = 0  # transactions aborted on a read
    commit_aborts: int = 0  # transactions aborted at their commit
    ambiguous: int = 0  # transactions that committed but answered DEADLINE_EXCEEDED
    too_old: int = 0  # reads rejected as older than the version retention
    transactions: int = 0  # read-write transactions started (attempts)
    refused: int = 0  # read-write transactions failed with `error` before they began
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class FlakyDatabase:
    """The real `database`, with faults injected at the given rates (0..1) from `seed`, and at the
    numbered blind commits and read-write transactions given (counted from 1, attempts included)."""

    def __init__(
        self,
        database,
        fail_before: float = 0.0,
        fail_after: float = 0.0,
        seed: int = 0,
        error: Callable[[str], Exception] = exceptions.Aborted,
        *,
        fail_commits: Collection[int] = (),
        fail_transactions: Collection[int] = (),
        abort_read: float = 0.0,
        abort_commit: float = 0.0,
        ambiguous_commit: float = 0.0,
        version_retention: timedelta | None = None,
        clock: Callable[[], datetime] = utc_now,
        before_transaction: Callable[[int], None] | None = None,
        injected: Injected | None = None,
    ) -> None:
        self._database = database
        self._fail_before = fail_before
        self._fail_after = fail_after
        self._error = error
        self._fail_commits = frozenset(fail_commits)  # numbers of blind commits, from 1
        self._fail_transactions = frozenset(fail_transactions)  # numbers of read-write transactions, from 1
        self._abort_read = abort_read
        self._abort_commit = abort_commit
        self._ambiguous_commit = ambiguous_commit
        self._version_retention = version_retention
        self._clock = clock
        self._before_transaction = before_transaction
        self._random = random.Random(seed)
        self.injected = injected or Injected()

    def __getattr__(self, name):
        return getattr(self._database, name)

    @property
    def injected_before(self) -> int:
        return self.injected.before

    @property
    def injected_after(self) -> int:
        return self.injected.after

    def _roll(self, rate: float) -> bool:
        if rate <= 0:
            return False
        with self.injected.lock:
            return self._random.random() < rate

    def _count(self, kind: str) -> int:
        with self.injected.lock:
            value = getattr(self.injected, kind) + 1
            setattr(self.injected, kind, value)
            return value

    # --- blind commits -----------------------------------------------------------------------

    @contextlib.contextmanager
    def batch(self, **kwargs):
        number = self._count("commits")
        if number in self._fail_commits or self._roll(self._fail_before):
            self._count("before")
            raise self._error("injected before commit")
        with self._database.batch(**kwargs) as batch:
            yield batch
        if self._roll(self._fail_after):
            self._count("after")
            raise self._error("injected after a successful commit")

    # --- read-write transactions -------------------------------------------------------------

    def run_in_transaction(self, work, *args, **kwargs):
        number = self._count("transactions")
        if self._before_transaction is not None:
            self._before_transaction(number)
        if number in self._fail_transactions:
            self._count("refused")
            raise self._error("injected before the transaction began")

        def misbehaving(transaction, *a, **kw):
            result = work(_AbortingReads(transaction, self), *a, **kw)
            if self._roll(self._abort_commit):
                self._count("commit_aborts")
                raise aborted("injected: transaction aborted at commit")
            return result

        result = self._database.run_in_transaction(misbehaving, *args, **kwargs)
        if self._roll(self._ambiguous_commit):
            self._count("ambiguous")
            raise exceptions.DeadlineExceeded("injected: the commit succeeded but its answer was lost")
        return result

    # --- reads at a timestamp ----------------------------------------------------------------

    def _check_retention(self, read_timestamp: datetime | None) -> None:
        if read_timestamp is None or self._version_retention is None:
            return
        if read_timestamp < self._clock() - self._version_retention:
            self._count("too_old")
            raise exceptions.FailedPrecondition(
                f"injected: read timestamp {read_timestamp.isoformat()} has exceeded the maximum timestamp "
                f"staleness ({self._version_retention} version retention)"
            )

    def snapshot(self, **kwargs):
        self._check_retention(kwargs.get("read_timestamp"))
        return _RetentionCheckedSnapshot(self._database.snapshot(**kwargs), self, kwargs.get("read_timestamp"))

    def batch_snapshot(self, **kwargs):
        self._check_retention(kwargs.get("read_timestamp"))
        return self._database.batch_snapshot(**kwargs)


class _AbortingReads:
    """A transaction whose reads may abort, as a real one does under lock contention."""

    def __init__(self, transaction, faults: FlakyDatabase) -> None:
        self._transaction = transaction
        self._faults = faults

    def __getattr__(self, name):
        return getattr(self._transaction, name)

    def _maybe_abort(self) -> None:
        if self._faults._roll(self._faults._abort_read):  # noqa: SLF001 - one fault schedule
            self._faults._count("read_aborts")  # noqa: SLF001
            raise aborted("injected: transaction aborted on a read")

    def read(self, *args, **kwargs):
        self._maybe_abort()
        return self._transaction.read(*args, **kwargs)

    def execute_sql(self, *args, **kwargs):
        self._maybe_abort()
        return self._transaction.execute_sql(*args, **kwargs)


class _RetentionCheckedSnapshot:
    """A snapshot context whose every read re-checks the retention against the (moving) clock:
    a long fold's later reads at its snapshot are the ones real Spanner rejects."""

    def __init__(self, snapshot, faults: FlakyDatabase, read_timestamp: datetime | None) -> None:
        self._snapshot = snapshot
        self._faults = faults
        self._read_timestamp = read_timestamp

    def __enter__(self):
        self._inner = self._snapshot.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._snapshot.__exit__(*exc_info)

    def __getattr__(self, name):
        return getattr(getattr(self, "_inner", self._snapshot), name)

    def read(self, *args, **kwargs):
        self._faults._check_retention(self._read_timestamp)  # noqa: SLF001 - one fault schedule
        return self._inner.read(*args, **kwargs)

    def execute_sql(self, *args, **kwargs):
        self._faults._check_retention(self._read_timestamp)  # noqa: SLF001
        return self._inner.execute_sql(*args, **kwargs)
