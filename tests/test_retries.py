"""Which Spanner errors are retried (is_transient) and how (RetryPolicy, run_with_retries): pure,
no emulator, no real sleeping (a fake clock that a fake sleep advances)."""

from __future__ import annotations

import grpc
import pytest
from google.api_core import exceptions

from spanner_store.database import RetryPolicy, is_transient, run_with_retries, schema_behind


def spanner_error(code: grpc.StatusCode, message: str = "injected") -> exceptions.GoogleAPICallError:
    """The exception the client raises for a gRPC status: the same mapping, not a guessed class."""
    return exceptions.from_grpc_status(code, message)


TRANSIENT = [
    spanner_error(grpc.StatusCode.ABORTED, "Transaction was aborted."),
    spanner_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"),
    spanner_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
    spanner_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "CPU overloaded; retry later"),
    spanner_error(grpc.StatusCode.CANCELLED, "Cancelled"),
    spanner_error(grpc.StatusCode.INTERNAL, "Received unexpected EOS on DATA frame from server"),
    spanner_error(grpc.StatusCode.INTERNAL, "stream terminated by RST_STREAM with error code: 2"),
    spanner_error(grpc.StatusCode.INTERNAL, "HTTP/2 error code: INTERNAL_ERROR\nReceived Rst Stream"),
    spanner_error(grpc.StatusCode.INTERNAL, "Connection closed with unknown cause"),
    spanner_error(grpc.StatusCode.NOT_FOUND, "Session not found: projects/p/instances/i/databases/d/sessions/s"),
    # The client's own 30 s retry of a call (GetSession, BeginTransaction, ExecuteSql) given up.
    exceptions.RetryError("Timeout of 30.0s exceeded", spanner_error(grpc.StatusCode.UNAVAILABLE, "connect failed")),
]
PERMANENT = [
    spanner_error(grpc.StatusCode.INTERNAL, "an invariant of the system was broken"),
    spanner_error(grpc.StatusCode.NOT_FOUND, "Table not found: Votes"),
    spanner_error(grpc.StatusCode.NOT_FOUND, "Parent row for row [p,1] in table PostDeltas is missing."),
    spanner_error(grpc.StatusCode.NOT_FOUND, "Transaction not found"),
    spanner_error(grpc.StatusCode.ALREADY_EXISTS, "Row [p,1] in table PostDeltas already exists"),
    spanner_error(grpc.StatusCode.INVALID_ARGUMENT, "STRING(128) value too long"),
    spanner_error(grpc.StatusCode.FAILED_PRECONDITION, "exceeded the maximum timestamp staleness"),
    spanner_error(grpc.StatusCode.OUT_OF_RANGE, "out of range"),
    spanner_error(grpc.StatusCode.PERMISSION_DENIED, "spanner.databases.write denied"),
    spanner_error(grpc.StatusCode.UNAUTHENTICATED, "no credentials"),
    spanner_error(grpc.StatusCode.UNIMPLEMENTED, "not supported"),
    spanner_error(grpc.StatusCode.UNKNOWN, "unknown"),
    spanner_error(grpc.StatusCode.DATA_LOSS, "data loss"),
    exceptions.RetryError("Timeout of 30.0s exceeded", spanner_error(grpc.StatusCode.INVALID_ARGUMENT, "bad")),
    exceptions.RetryError("Timeout of 30.0s exceeded", None),
    ValueError("one vote state cannot exceed the mutation budget"),
    AssertionError("a broken invariant of ours"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: f"{type(e).__name__}:{e.message[:30]}")
def test_errors_a_retry_may_fix_are_transient(error) -> None:
    assert is_transient(error)


@pytest.mark.parametrize("error", PERMANENT, ids=lambda e: f"{type(e).__name__}:{str(e)[:30]}")
def test_errors_that_fail_again_are_permanent(error) -> None:
    assert not is_transient(error)


def test_a_schema_behind_the_code_is_for_wait_for_schema_not_a_retry() -> None:
    for missing in ("Table not found: Votes", "Column not found in table Posts: Downvotes"):
        error = spanner_error(grpc.StatusCode.NOT_FOUND, missing)
        assert schema_behind(error) and not is_transient(error)
    assert not schema_behind(spanner_error(grpc.StatusCode.NOT_FOUND, "Session not found: s"))


# --- backoff -----------------------------------------------------------------------------------

ABORTED = spanner_error(grpc.StatusCode.ABORTED)
OVERLOADED = spanner_error(grpc.StatusCode.RESOURCE_EXHAUSTED)
POLICY = RetryPolicy(
    attempts=25,
    first_delay_s=0.005,
    max_delay_s=2.0,
    deadline_s=120.0,
    overload_first_delay_s=0.25,
    overload_max_delay_s=32.0,
)


def test_the_backoff_doubles_to_its_cap_and_an_overload_backs_off_longer() -> None:
    assert [POLICY.ceiling(n, ABORTED) for n in (0, 1, 2, 8, 9, 30)] == [0.005, 0.01, 0.02, 1.28, 2.0, 2.0]
    assert [POLICY.ceiling(n, OVERLOADED) for n in (0, 1, 2, 7, 8, 30)] == [0.25, 0.5, 1.0, 32.0, 32.0, 32.0]
    for n in range(12):
        for error in (ABORTED, OVERLOADED):
            assert all(0 <= POLICY.delay(n, error) <= POLICY.ceiling(n, error) for _ in range(50))


class FakeTime:
    """A clock that only `sleep` moves, and `work` by `work_s` a call; records every sleep."""

    def __init__(self, work_s: float = 0.0) -> None:
        self.now = 0.0
        self.work_s = work_s
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Failing:
    """A `work` that raises each of `errors` in turn, then returns `then`; counts its calls."""

    def __init__(self, *errors: Exception, then: str = "done", time: FakeTime | None = None) -> None:
        self._pending = list(errors)
        self._then = then
        self._time = time
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self._time is not None:
            self._time.now += self._time.work_s
        if self._pending:
            raise self._pending.pop(0)
        return self._then


def run(work, policy: RetryPolicy, time: FakeTime, on_retry=None):
    return run_with_retries(work, policy, on_retry, clock=time.clock, sleep=time.sleep)


def test_transient_errors_are_retried_with_their_backoff_until_the_work_succeeds() -> None:
    time = FakeTime()
    retried: list[Exception] = []
    errors = [ABORTED, OVERLOADED, TRANSIENT[5], TRANSIENT[-1]]
    work = Failing(*errors)
    assert run(work, POLICY, time, retried.append) == "done"
    assert work.calls == 5 and retried == errors
    assert len(time.sleeps) == 4
    assert all(0 <= slept <= POLICY.ceiling(n, error) for n, (slept, error) in enumerate(zip(time.sleeps, errors)))


def test_a_permanent_error_is_raised_at_once() -> None:
    time = FakeTime()
    work = Failing(ABORTED, spanner_error(grpc.StatusCode.INVALID_ARGUMENT))
    with pytest.raises(exceptions.InvalidArgument):
        run(work, POLICY, time)
    assert work.calls == 2 and len(time.sleeps) == 1


def test_after_the_last_attempt_the_transient_error_is_raised() -> None:
    time = FakeTime()
    work = Failing(*[ABORTED] * 30)
    with pytest.raises(exceptions.Aborted):
        run(work, POLICY, time)
    assert work.calls == 25 and len(time.sleeps) == 24


def test_no_retry_starts_after_the_deadline() -> None:
    """An overload that lasts: retried while the next call would start within the deadline, then raised;
    each call here takes 10 s (a slow, overloaded Spanner)."""
    time = FakeTime(work_s=10.0)
    work = Failing(*[OVERLOADED] * 30)
    with pytest.raises(exceptions.ResourceExhausted):
        run(work, POLICY, time)
    assert time.now - time.work_s <= POLICY.deadline_s  # the last call started within the deadline
    assert 2 <= work.calls < 25
