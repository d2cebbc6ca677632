"""Opening a Spanner database and retrying its transient errors, the same way everywhere.

Every writer here (the delta sink, the fold, provisioning) goes through `run_with_retries`
instead of the client's own abort retry: the client sleeps 2^n seconds after an abort
without a retry hint, and the emulator aborts any second concurrent transaction at once,
so short jittered retries of our own keep throughput up and every retry bounded. Which
errors are worth a retry is decided in one place, `is_transient`.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from google.api_core import exceptions, gapic_v1
from google.cloud import spanner
from google.cloud.spanner_v1.batch import Batch
from google.cloud.spanner_v1.database import Database
from google.cloud.spanner_v1.transaction import Transaction

T = TypeVar("T")
LOG = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 60.0
SESSION_CALL_TIMEOUT_S = 30.0  # the client's own deadline for GetSession and CreateSession, kept

# INTERNAL errors that are a connection or stream closed under a call, not a broken invariant:
# the messages Google's Spanner clients retry (Python's _check_rst_stream_error, Java's
# IsRetryableInternalError).
RETRYABLE_INTERNAL_MESSAGES = (
    "Received unexpected EOS on DATA frame from server",
    "RST_STREAM",
    "HTTP/2 error code: INTERNAL_ERROR",
    "Connection closed with unknown cause",
)
# What Spanner says of a session it has deleted (idle over an hour, or garbage-collected).
SESSION_NOT_FOUND = "Session not found"


def _message(error: BaseException) -> str:
    return getattr(error, "message", None) or str(error)


def is_transient(error: BaseException) -> bool:
    """Whether the same commit or transaction, tried again after a backoff, may succeed.

    From Spanner's error-code page (cloud.google.com/spanner/docs/error-codes) and the retry
    settings of Google's own clients. Every writer here may retry safely: blind inserts have
    deterministic keys (a retry finds them written), transactions re-read before they write.

    | Error                                  | Class     | Why                                              |
    |----------------------------------------|-----------|--------------------------------------------------|
    | ABORTED                                | transient | a conflict with another transaction; Spanner:    |
    |                                        |           | retry the whole transaction                      |
    | UNAVAILABLE                            | transient | server or network down for now; the clients      |
    |                                        |           | retry it with backoff                            |
    | DEADLINE_EXCEEDED                      | transient | out of time; the commit may have happened, which |
    |                                        |           | a retry finds (see above)                        |
    | RESOURCE_EXHAUSTED                     | transient | Spanner overloaded (or a quota): the clients     |
    |                                        |           | retry it, backing off longer (RetryPolicy)       |
    | CANCELLED                              | transient | the call was cancelled; Spanner: retry it        |
    | INTERNAL, a stream reset               | transient | the connection closed mid-call (the messages in  |
    |                                        |           | RETRYABLE_INTERNAL_MESSAGES); the clients retry  |
    | NOT_FOUND "Session not found"          | transient | the session is gone, not the data; the clients   |
    |                                        |           | retry on a new session (*)                       |
    | the client's own retry given up        | as its    | a call the client retries by itself (GetSession, |
    | (RetryError), its last error           | last      | BeginTransaction, ExecuteSql: 30 s) ran out of   |
    |                                        | error     | time: an outage longer than that, which our      |
    |                                        |           | policy bounds, not a different kind of error     |
    | INTERNAL, any other                    | permanent | a broken invariant; Spanner: don't retry unless  |
    |                                        |           | you know why it happened                         |
    | NOT_FOUND, any other                   | permanent | a missing row or parent; a table or column the   |
    |                                        |           | schema lacks yet is wait_for_schema's (see       |
    |                                        |           | schema_behind), not a retry's                    |
    | ALREADY_EXISTS                         | permanent | the row is there: the sink reads it as written   |
    | INVALID_ARGUMENT, FAILED_PRECONDITION, | permanent | the same request fails the same way until        |
    | OUT_OF_RANGE, PERMISSION_DENIED,       |           | someone changes it or the database; Spanner:     |
    | UNAUTHENTICATED, UNIMPLEMENTED,        |           | don't retry without fixing the problem           |
    | UNKNOWN, DATA_LOSS, anything else      |           |                                                  |

    (*) This Python client (3.71) renews a lost session after a snapshot, not after a batch or a
    read-write transaction: a retry takes the session the client hands out next, which is the
    same one unless another is free (the classic pool is a stack; a multiplexed session is one).
    """
    if isinstance(
        error,
        (
            exceptions.Aborted,
            exceptions.ServiceUnavailable,
            exceptions.DeadlineExceeded,
            exceptions.ResourceExhausted,
            exceptions.Cancelled,
        ),
    ):
        return True
    if isinstance(error, exceptions.RetryError):
        return error.cause is not None and is_transient(error.cause)
    if isinstance(error, exceptions.InternalServerError):
        return any(message in _message(error) for message in RETRYABLE_INTERNAL_MESSAGES)
    if isinstance(error, exceptions.NotFound):
        return SESSION_NOT_FOUND in _message(error)
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """Capped, full-jitter exponential backoff, bounded by a number of calls and a deadline.

    RESOURCE_EXHAUSTED waits longer from the first retry (overload_*, the Spanner client's own
    defaults for it: 0.25 s up to 32 s): Spanner says it is overloaded, and retrying at the
    pace of an abort would add to the load that caused it. An abort is a conflict with one
    other transaction, over in milliseconds: ABORTED and the others retry fast.

    The deadline (from the first call; no retry starts after it) lets a commit that used its
    whole COMMIT_TIMEOUT_S be tried once more, and bounds how long an outage or an overload
    holds a writer before its caller hears.
    """

    attempts: int = 12
    first_delay_s: float = 0.005
    max_delay_s: float = 2.0
    deadline_s: float = 2 * COMMIT_TIMEOUT_S
    overload_first_delay_s: float = 0.25
    overload_max_delay_s: float = 32.0

    def ceiling(self, attempt: int, error: BaseException) -> float:
        """The longest wait after call number `attempt` (from 0) failed with `error`."""
        if isinstance(error, exceptions.ResourceExhausted):
            return min(self.overload_max_delay_s, self.overload_first_delay_s * 2**attempt)
        return min(self.max_delay_s, self.first_delay_s * 2**attempt)

    def delay(self, attempt: int, error: BaseException) -> float:
        return random.uniform(0, self.ceiling(attempt, error))


DEFAULT_RETRY = RetryPolicy()


def run_with_retries(
    work: Callable[[], T],
    policy: RetryPolicy = DEFAULT_RETRY,
    on_retry: Callable[[Exception], None] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Calls `work` until it succeeds. After a transient error (is_transient) it waits policy.delay
    and calls it again, at most policy.attempts calls in all and none starting later than
    policy.deadline_s after the first; then the error is raised, as any other error is at once.
    `clock` and `sleep` are there for tests."""
    started = clock()
    attempt = 0
    while True:
        try:
            return work()
        except Exception as error:  # noqa: BLE001 - sorted by is_transient
            if not is_transient(error):
                raise
            delay = policy.delay(attempt, error)
            attempt += 1
            if attempt >= policy.attempts or clock() - started + delay > policy.deadline_s:
                raise
            if on_retry is not None:
                on_retry(error)
            LOG.debug("transient Spanner error, retry %d in %.3f s: %s", attempt, delay, error)
            sleep(delay)


# How long a writer of this version waits for a table or column it writes and the database
# lacks (`upvotes provision` takes seconds on the emulator, minutes on a large Spanner
# database), retrying every SCHEMA_POLL_S.
SCHEMA_WAIT_S = 3600.0
SCHEMA_POLL_S = 2.0


def schema_behind(error: Exception) -> bool:
    """True for the error of a write naming a table or column this database does not have yet:
    code newer than the schema, until `upvotes provision` migrates it (a retry then succeeds)."""
    text = _message(error)
    return isinstance(error, exceptions.NotFound) and ("Table not found" in text or "Column not found" in text)


def wait_for_schema(work: Callable[[], T], writer: str, on_wait: Callable[[], None] | None = None) -> T:
    """Calls `work`, and while it fails for a schema behind this code (schema_behind), waits for
    the migration and calls it again, up to SCHEMA_WAIT_S; then the error is raised.

    A writer of a new version may start before `upvotes provision` has migrated the database
    (a rolling update); waiting is right, failing would lose the launch or the rows."""
    waited = 0.0
    while True:
        try:
            return work()
        except exceptions.NotFound as error:
            if not schema_behind(error) or waited >= SCHEMA_WAIT_S:
                raise
            if waited == 0:
                LOG.warning(
                    "the database lacks what this version writes (%s): run `upvotes provision`; "
                    "the %s retries every %.0f s",
                    error.message,
                    writer,
                    SCHEMA_POLL_S,
                )
            if on_wait is not None:
                on_wait()
            time.sleep(SCHEMA_POLL_S)
            waited += SCHEMA_POLL_S


OPERATION_TIMEOUT_S = 600  # a long-running operation: creating an instance or a database, a DDL change
# Real Spanner rejects a commit of more than 80,000 mutations (one per column written, plus
# one per column of each index entry changed); the emulator does not enforce it. Every
# writer here plans its commits under a quarter of it, leaving headroom for schema growth.
SPANNER_MUTATION_LIMIT = 80_000
MUTATION_BUDGET = 20_000


def open_database(project: str, instance: str, database: str) -> Database:
    """A handle on an existing database; honours SPANNER_EMULATOR_HOST.

    On the emulator the client's default multiplexed sessions break concurrent
    read-write transactions (NOT_FOUND / "Invalid transaction ID", not retried), so a
    classic session pool is used there. Real Spanner keeps the client's default.

    The client's generated Commit call retries UNAVAILABLE by itself for up to an hour, which
    hides an outage from run_with_retries (measured: a sink blocked > 5 min on a stopped
    emulator). Commit is rewrapped without that retry and with a 60 s deadline, so every
    transient error surfaces here and every retry stays bounded.
    """
    emulator = bool(os.environ.get("SPANNER_EMULATOR_HOST"))
    if emulator:
        os.environ.setdefault("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "false")
    client = spanner.Client(project=project)
    handle = client.instance(instance).database(database)
    transport = handle.spanner_api._transport  # noqa: SLF001 - no public hook for a call's default retry
    unretried = {transport.commit: COMMIT_TIMEOUT_S}
    if emulator:
        # The classic pool checks a pooled session with GetSession before each transaction, or
        # makes one with CreateSession, and each retries UNAVAILABLE by itself for 30 s: a sink's
        # transaction on a stopped emulator stalled that long per attempt (tests/test_faults.py's
        # outage), then failed with a RetryError no retry policy here takes for transient.
        unretried[transport.get_session] = SESSION_CALL_TIMEOUT_S
        unretried[transport.create_session] = SESSION_CALL_TIMEOUT_S
    for method, timeout_s in unretried.items():
        transport._wrapped_methods[method] = gapic_v1.method.wrap_method(  # noqa: SLF001
            method, default_retry=None, default_timeout=timeout_s
        )
    return handle


def classic_sessions_for_concurrent_reads() -> None:
    """For a process that runs many multi-use read-only snapshots at once (`upvotes serve`, the
    hot-reads benchmark): on the emulator those fail on multiplexed sessions too ("Invalid
    transaction ID", measured with 32 threads), so read-only snapshots use the classic pool.
    Not set process-wide in open_database: with it, the sink's write to a stopped emulator in
    tests/test_faults.py stayed blocked past the test's 20 s bound instead of failing within its
    retry policy."""
    if os.environ.get("SPANNER_EMULATOR_HOST"):
        os.environ.setdefault("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false")


def commit_mutations(database: Database, write: Callable[[Batch], None]) -> object:
    """Commits one batch of blind mutations (no reads) once; returns the commit timestamp.

    `timeout_secs=0` turns off the client's own abort retry so callers decide.
    """
    with database.batch(timeout_secs=0) as batch:
        write(batch)
    return batch.committed


def read_timestamp(snapshot) -> datetime:
    """The timestamp a multi-use read-only snapshot reads at, known once it has read. The client
    keeps it in a private attribute, with no public accessor: every reader asks here."""
    return snapshot._transaction_read_timestamp  # noqa: SLF001


class _Unavailable(Exception):
    """An UNAVAILABLE carried past the client's read loop (`read_rows`)."""


def _unavailable_raised(call: Callable[..., T]) -> Callable[..., T]:
    """A streaming read's `retry`: no retry, and an UNAVAILABLE carried out as _Unavailable."""

    @functools.wraps(call)
    def once(*args, **kwargs) -> T:
        try:
            return call(*args, **kwargs)
        except exceptions.ServiceUnavailable as error:
            raise _Unavailable(error) from error

    return once


def read_rows(read: Callable[[Callable], Iterable[T]]) -> list[T]:
    """The rows of `read(retry)`, a snapshot's or a transaction's `read(..., retry=retry)`, with an
    UNAVAILABLE raised at once for the caller's retry policy (run_with_retries) to bound.

    Why: the client restarts a streaming read after UNAVAILABLE at once and without end
    (spanner_v1.snapshot `_restart_on_unavailable`), so a read from a stopped Spanner blocks its
    caller for ever: seen in tests/test_faults.py's outage once the sink read a key before it
    wrote, where a commit fails within its deadline (open_database). Only the call's first
    response is covered: a stream cut after it is restarted by the client as before."""
    try:
        return list(read(_unavailable_raised))
    except _Unavailable as carried:
        raise carried.args[0] from None


def run_transaction(database: Database, work: Callable[..., T]) -> T:
    """Runs one read-write transaction attempt; an abort surfaces for run_with_retries, and so does
    a stopped Spanner, after which the next attempt on the thread works again.

    A transaction whose work fails with an API error other than an abort (a table the schema
    lacks, a session lost) is rolled back here: the client rolls back only after other errors,
    and one left open keeps its locks until Spanner times it out, while on the emulator every
    other writer aborts behind it."""

    def rolled_back_on_error(transaction: Transaction) -> T:
        try:
            return work(transaction)
        except exceptions.Aborted:
            raise  # the transaction is over already
        except exceptions.GoogleAPICallError:
            try:
                transaction.rollback()
            except exceptions.GoogleAPICallError as rollback_error:  # the work's error is the one to see
                LOG.debug("rollback after a failed transaction failed: %s", rollback_error)
            raise

    running_before = getattr(database._local, "transaction_running", False)  # noqa: SLF001 - see below
    try:
        return database.run_in_transaction(rolled_back_on_error, timeout_secs=0)
    except Exception:
        # The client sets this thread's "transaction running" flag before it gets a session and
        # clears it only if that succeeded (googleapis/google-cloud-python#18375): after one
        # failed, during an outage, every later transaction on the thread raised "Spanner does not
        # support nested transactions", for ever (tests/test_faults.py's outage).
        database._local.transaction_running = running_before  # noqa: SLF001
        raise
