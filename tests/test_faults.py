"""Nothing lost, nothing counted twice: faults injected on the real emulators, each test ending
with an exact verify against a ledger or the expected totals.

| fault                                              | where                         | expected outcome        |
|----------------------------------------------------|-------------------------------|-------------------------|
| ABORTED / UNAVAILABLE before or after commits      | WriteDeltaRows in a Beam run  | exact, retries counted  |
| the sink replaying batches it already committed    | two Beam runs, fail_after     | exact, counted once     |
| a replay after the deltas were folded              | sink, then fold, then replay  | exact, counted once     |
| folds racing continuous streaming writes           | writer thread + Beam folds    | exact; reads in bounds  |
| SIGINT, then SIGTERM, under load, restarts         | `upvotes stream` subprocess   | drained; exact          |
| a second SIGTERM with the sink stuck, a restart    | `upvotes stream` subprocess   | exit 4; exact after the |
|                                                    |                               | restart replays its log |
| the Spanner emulator stopped under the sink        | a private Spanner emulator    | transient error fast;   |
|                                                    |                               | rewrite counted once    |
| `upvotes verify` on a matching / mismatched ledger | the CLI                       | exit 0 / exit 1         |

What the local stream can lose: nothing. SIGINT and SIGTERM drain it (local_runner/drain.py),
tested here under load. A SIGKILL (or a crash, or a drain cut short) loses nothing either: the
reader acknowledges a message only once everything derived from it is committed, and a restart
replays first what its message log holds unfinished (local_runner/exactly_once.py); every crash
point is tests/test_exactly_once.py's, with a soak of kills under load.

On Dataflow none of this loses anything: the Pub/Sub source acknowledges a message only after
the bundle that read it is durably committed (checkpointed) by the service; ids given by the
`event_id` attribute (id_label) are deduplicated across redeliveries; and a retried or
replayed bundle writes the same deterministic delta keys (job name, window, pane), which the
sink's ALREADY_EXISTS handling turns into no-ops.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions, gapic_v1
from google.cloud import pubsub_v1

from local_runner import drain
from schemas.contract import batch_messages
from schemas.counters import Counts
from schemas.records import PostDelta, PostUser
from schemas.vote_states import LatestVote
from spanner_reads.reads import exact_counts
from spanner_store.database import RetryPolicy, is_transient, open_database, run_transaction, run_with_retries
from spanner_store.tables import COUNTER_COLUMNS, counts_at
from spanner_writes.deltas import write_deltas
from spanner_writes.votes import apply_vote_states
from tests.support.fold_runs import run_fold
from tests.support.polling import assert_stays, wait_until
from tests.support.steady_load import SteadyLoad
from tests.support.streams import SETTLE_TIMEOUT_S, WINDOW_S, drain_reports, ledger_of, publish_events
from transforms.spanner_sink import WriteDeltaRows, WriteDeltasFn
from upvotes.cli import main as cli_main
from upvotes.command_errors import explain
from upvotes.devtools import emulators, local_stream
from upvotes.devtools.publishing import publish_messages
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import Workload, generate_events
from upvotes.operations.backlog import peek_backlog
from upvotes.operations.provision import provision_spanner
from upvotes.resources import Resources

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

HOUR = 1_795_312_800


def totals_of(deltas: list[PostDelta]) -> dict[str, dict[str, int]]:
    expected: dict[str, Counts] = {}
    for d in deltas:
        expected[d.post_id] = expected.get(d.post_id, Counts()).plus(d.sums.counts)
    return {post: counts._asdict() for post, counts in expected.items()}


def make_deltas(prefix: str, n: int, posts: int, writer: str) -> list[PostDelta]:
    return [
        PostDelta.of(
            f"{prefix}-{i % posts}",
            HOUR + 3600 * (i % 3),
            f"{writer}:{i}:0",
            upvotes=1 + i % 4,
            shares=i % 2,
            events=1 + i % 4,
        )
        for i in range(n)
    ]


def run_sink(stack: Resources, items: list[PostDelta], rows_per_commit: int = 10) -> dict[str, int]:
    """Runs WriteDeltaRows in a Beam pipeline; returns its WriteDeltaRows counters."""
    pipeline = TestPipeline()
    (
        pipeline
        | beam.Create(items, reshuffle=False)
        | WriteDeltaRows(stack.project, stack.instance, stack.database, rows_per_commit=rows_per_commit)
    )
    result = pipeline.run()
    result.wait_until_finish()
    return {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "WriteDeltaRows"
    }


# --- transient errors and replays in the sink, through Beam -----------------------------------


@pytest.mark.parametrize("error", [exceptions.Aborted, exceptions.ServiceUnavailable], ids=["ABORTED", "UNAVAILABLE"])
def test_transient_errors_in_a_fraction_of_commits_are_retried_exactly(stack, database, flaky_sink, error) -> None:
    name = error.__name__.lower()
    items = make_deltas(f"transient-{name}", n=300, posts=12, writer=f"transient-{name}")
    created = flaky_sink(fail_before=0.25, fail_after=0.25, error=error)
    counters = run_sink(stack, items)
    assert created, "the pipeline did not open the patched database"
    assert sum(f.injected_before for f in created) > 0 and sum(f.injected_after for f in created) > 0
    assert counters["transient_retries"] >= sum(f.injected_before + f.injected_after for f in created)
    # Every row is accounted for once: either written, or found already written after an unseen success.
    assert counters["rows_written"] + counters["rows_already_written"] == len(items)
    assert counters["rows_already_written"] > 0
    assert counters.get("rows_dead_lettered", 0) == 0
    assert verify_totals(database, totals_of(items)) == []


def test_the_sink_replaying_committed_batches_counts_them_once(stack, database, flaky_sink) -> None:
    items = make_deltas("replay", n=200, posts=8, writer="replay")
    first = run_sink(stack, items[:120])
    assert first["rows_written"] == 120
    # A replayed bundle: the first 120 again (already committed) plus 80 new, with commits that
    # succeed unseen half the time.
    created = flaky_sink(fail_after=0.5)
    second = run_sink(stack, items)
    assert sum(f.injected_after for f in created) > 0
    assert second["rows_written"] + second["rows_already_written"] == 200
    assert second["rows_already_written"] >= 120
    assert verify_totals(database, totals_of(items)) == []
    # And the whole thing a third time, with nothing new: nothing is written.
    third = run_sink(stack, items)
    assert third.get("rows_written", 0) == 0 and third["rows_already_written"] == 200
    assert verify_totals(database, totals_of(items)) == []


def test_a_replay_after_a_fold_is_not_counted_again(stack, database) -> None:
    items = make_deltas("refold", n=60, posts=6, writer="refold")
    run_sink(stack, items)
    fold_once(stack)
    assert verify_totals(database, totals_of(items)) == []
    counters = run_sink(stack, items)  # the delta rows are kept after folding, so their keys still collide
    assert counters.get("rows_written", 0) == 0 and counters["rows_already_written"] == 60
    fold_once(stack)
    assert verify_totals(database, totals_of(items)) == []


def fold_once(stack: Resources):
    return run_fold(stack, posts_per_commit=50)


# --- folds racing the streaming writes -----------------------------------------------------------


class ContinuousWriter(threading.Thread):
    """Commits small batches of positive deltas, as the sink does (retries, ALREADY_EXISTS handling),
    until stopped; keeps what was acknowledged and what was attempted, per post."""

    def __init__(self, stack: Resources, prefix: str, posts: int, pause_s: float) -> None:
        super().__init__(daemon=True)
        self.fn = WriteDeltasFn(stack.project, stack.instance, stack.database, rows_per_commit=1000)
        self.fn.setup()
        self.prefix, self.posts, self.pause_s = prefix, posts, pause_s
        self.lock = threading.Lock()
        self.committed: dict[str, Counts] = {}  # post -> the counts acknowledged
        self.attempted: dict[str, Counts] = {}  # post -> the counts whose commit has begun
        self.rows = 0
        self.retries = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    @staticmethod
    def _add(into: dict[str, Counts], batch: list[PostDelta]) -> None:
        for d in batch:
            into[d.post_id] = into.get(d.post_id, Counts()).plus(d.sums.counts)

    def snapshot(self, which: str) -> dict[str, Counts]:
        with self.lock:
            return dict(getattr(self, which))

    def run(self) -> None:
        policy = RetryPolicy(attempts=60, first_delay_s=0.002, max_delay_s=0.2)
        batch_no = 0
        try:
            while not self.stopping.is_set():
                batch = [
                    PostDelta.of(
                        f"{self.prefix}-{(batch_no + k) % self.posts}",
                        HOUR + 3600 * (k % 2),
                        f"{self.prefix}:{batch_no}:{k}",
                        upvotes=1 + k % 3,
                        shares=k % 2,
                        events=1,
                    )
                    for k in range(4)
                ]
                with self.lock:
                    self._add(self.attempted, batch)
                run_with_retries(lambda: self.fn._commit_once(batch), policy, lambda _: self._count_retry())
                with self.lock:
                    self._add(self.committed, batch)
                    self.rows += len(batch)
                batch_no += 1
                time.sleep(self.pause_s)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def _count_retry(self) -> None:
        self.retries += 1


class BoundsSampler(threading.Thread):
    """Reads exact counts over and over while the writer runs; each read must lie between what
    was acknowledged before it began and what had been attempted by the time it returned."""

    def __init__(self, stack: Resources, writer: ContinuousWriter) -> None:
        super().__init__(daemon=True)
        self.database = open_database(stack.project, stack.instance, stack.database)
        self.writer = writer
        self.samples = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        posts = [f"{self.writer.prefix}-{i}" for i in range(self.writer.posts)]
        try:
            while not self.writer.stopping.is_set():
                low = self.writer.snapshot("committed")
                read = {t.post_id: t.counts for t in exact_counts(self.database, posts)}
                high = self.writer.snapshot("attempted")
                for post in posts:
                    lo, hi = low.get(post, Counts()), high.get(post, Counts())
                    if not all(a <= b <= c for a, b, c in zip(lo, read[post], hi)):
                        self.violations.append(f"{post}: read {read[post]}, acknowledged {lo}, attempted {hi}")
                self.samples += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def test_folds_racing_continuous_writes_stay_exact_and_reads_stay_in_bounds(stack, database) -> None:
    """A writer thread commits deltas non-stop while FoldDeltas runs three times in this process (the
    emulator aborts one side of every overlap; both retry), then a final fold. Reads sampled during
    the race stay within [acknowledged before the read, attempted by its end]; afterwards every delta
    was folded exactly once and the exact count equals everything written."""
    writer = ContinuousWriter(stack, "race", posts=10, pause_s=0.01)
    sampler = BoundsSampler(stack, writer)
    writer.start()
    sampler.start()
    outcomes = []
    try:
        for _ in range(3):
            # A commit acknowledged after the previous fold ended is after its snapshot: each fold
            # has deltas to fold, whatever the timing (waited for, not assumed).
            acknowledged = writer.rows
            wait_until(lambda: writer.rows > acknowledged, 30, "a commit after the previous fold")
            outcomes.append(fold_once(stack))
            assert writer.error is None and sampler.error is None
        wait_until(lambda: writer.rows >= 100 and sampler.samples >= 10, 60, "100 rows written and 10 reads sampled")
    finally:
        writer.stopping.set()
        writer.join(timeout=60)
        sampler.join(timeout=60)
    assert writer.error is None, writer.error
    assert sampler.error is None, sampler.error
    outcomes.append(fold_once(stack))

    committed = writer.snapshot("committed")
    assert committed == writer.snapshot("attempted")  # every attempted batch was acknowledged
    expected = {post: counts._asdict() for post, counts in committed.items()}
    assert len(expected) == 10 and writer.rows >= 100
    assert verify_totals(database, expected) == []
    # Every delta was folded exactly once over the runs, and the folded aggregate is the whole count.
    assert sum(o.deltas_folded for o in outcomes) == writer.rows
    assert all(o.deltas_folded > 0 for o in outcomes[:-1])  # the folds ran during the writes
    with database.snapshot() as snapshot:
        folded = {
            r[0]: counts_at(r, 1)._asdict()
            for r in snapshot.execute_sql(
                f"SELECT PostId, {', '.join(COUNTER_COLUMNS)} FROM Posts WHERE STARTS_WITH(PostId, 'race-')"
            )
        }
    assert folded == expected
    assert sampler.samples >= 10 and sampler.violations == [], sampler.violations[:5]
    print(
        f"\nrace: {writer.rows} delta rows in {len(outcomes)} folds, {writer.retries} writer retries, "
        f"{sampler.samples} bounded reads"
    )


# --- the streaming pipeline stopped and restarted ----------------------------------------------


def test_stream_stopped_with_sigint_and_sigterm_under_load_loses_nothing(streaming_stack) -> None:
    """`upvotes stream` (2 s windows) under a steady batched load is stopped with SIGINT (Ctrl-C),
    started again, stopped with SIGTERM, started again: each stop drains (exit 0) and the
    counts end exactly equal to the ledger; the drains' own reports add up to every message
    and every vote published, none left unwritten."""
    res, database, start, log = streaming_stack
    # Published at 1,000 votes/s until both stops are done and the third run counts: the load
    # lasts as long as the stops take (a stream's start is slower on a loaded machine), not a
    # fixed time that might end before the second stop.
    events = list(generate_events(Workload(events=120_000, posts=60, seed=21)))
    load = SteadyLoad(res.topic_path(res.topic), events, batch_size=100, rate=1_000)

    stream = start()
    load.start()
    posts = sorted({event["post_id"] for event in events})

    def counted() -> int:
        return sum(sum(map(abs, t.counts)) for t in exact_counts(database, posts))

    stops = []
    for sig in (signal.SIGINT, signal.SIGTERM, None):
        before = counted()
        wait_until(lambda: counted() > before, SETTLE_TIMEOUT_S, "this run to count votes", stream, log)
        if sig is None:
            break  # the third run counts under load: the load may end
        time.sleep(1.5)  # mid-window, mid-load
        stopped_at = time.monotonic()
        assert local_stream.stop(stream, sig) == 0, log.read_text(errors="replace")[-3000:]
        stops.append(time.monotonic() - stopped_at)
        assert load.running  # still under load
        stream = start()
    load.stop()
    sent = load.sent()
    ledger = ledger_of(sent)
    took = wait_until(
        lambda: verify_totals(database, ledger.totals) == [],
        SETTLE_TIMEOUT_S,
        "every post to match the ledger",
        stream,
        log,
    )
    assert_stays(lambda: verify_totals(database, ledger.totals) == [], 2 * WINDOW_S + 1, "the exact count")
    assert local_stream.stop(stream, signal.SIGTERM) == 0

    reports = drain_reports(log)
    assert [r[0] for r in reports] == ["SIGINT", "SIGTERM", "SIGTERM"], log.read_text(errors="replace")[-3000:]
    assert sum(r[1] for r in reports) == load.messages and sum(r[2] for r in reports) == len(sent)
    assert all(r[2] > 0 for r in reports)  # each run counted some of the load
    print(
        f"\ndrains under load took {', '.join(f'{s:.1f}' for s in stops)} s (signal to exit); exact "
        f"{took:.1f} s after the load; votes per run: {[r[2] for r in reports]}"
    )


def test_a_sigterm_while_the_stream_starts_stops_it_cleanly(streaming_stack) -> None:
    """Signals are handled from before Beam is imported: a SIGTERM during the launch is kept, and
    the pipeline stops at its first bundle having pulled nothing (exit 0); the votes wait."""
    res, database, start, log = streaming_stack
    events = one_vote_per_post(20, "early")
    publish_events(res, events)
    stream = start()
    assert local_stream.stop(stream, signal.SIGTERM) == 0, log.read_text(errors="replace")[-3000:]
    summary = local_stream.drain_summary(log)
    assert summary is not None and summary.endswith("This run: 0 messages, 0 votes, 0 delta rows, 0 dead letters.")
    restarted = start()
    wait_until(
        lambda: verify_totals(database, ledger_of(events).totals) == [],
        SETTLE_TIMEOUT_S,
        "the waiting votes to be counted",
        restarted,
        log,
    )


def one_vote_per_post(n: int, tag: str) -> list[dict]:
    """n upvotes, each to a post of its own: a post's count says exactly whether its vote was counted."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [
        {"post_id": f"{tag}-{i}", "counter": "upvotes", "delta": 1, "event_id": f"{tag}-e{i}", "event_time": now}
        for i in range(n)
    ]


CUT_SHORT = re.compile(
    r"^upvotes stream: stopped at once \(second signal, SIGTERM\), [0-9.]+ s into the drain: "
    r"up to ([0-9,]+) votes pulled but not yet written, and ([0-9,]+) messages pulled but not yet "
    r"parsed, are not lost: unacknowledged, they wait in the message log "
)


def test_a_second_sigterm_stops_at_once_and_the_restart_counts_what_it_left(streaming_stack) -> None:
    """The drain is stuck (the Spanner emulator frozen under the sink): a second SIGTERM ends the
    stream at once, exit 4, its report saying what waits in its message log; the restart replays it
    and the stuck batch counts exactly once.

    The stuck commit is ambiguous: the sink's channel was open, so its request may have reached the
    frozen emulator, which then applies it when it resumes, though the stream is gone. Either way
    the restart's replay writes the same rows under the same keys: found written, or written now.
    (Before issue 47 the batch was acknowledged on pull, and lost unless that commit landed.)"""
    pid = os.environ.get(emulators.PID_ENV_VARS[emulators.SPANNER])
    if not pid:
        pytest.skip("needs a Spanner emulator started by this test session (to freeze it)")
    res, database, start, log = streaming_stack
    counted = [{"post_id": f"cut-a-{i}", "counter": "upvotes", "delta": 1} for i in range(100)]
    stuck = [{"post_id": f"cut-b-{i}", "counter": "upvotes", "delta": 1} for i in range(100)]
    stream = start()
    publish_messages(res.topic_path(res.topic), batch_messages(counted, 100), progress=False)
    wait_until(
        lambda: verify_totals(database, ledger_of(counted).totals) == [],
        SETTLE_TIMEOUT_S,
        "the first batch to be counted",
        stream,
        log,
    )
    os.kill(int(pid), signal.SIGSTOP)
    try:
        publish_messages(res.topic_path(res.topic), batch_messages(stuck, 100), progress=False)
        subscriber = pubsub_v1.SubscriberClient()
        wait_until(
            lambda: peek_backlog(subscriber, res.subscription_path(res.subscription)).messages_seen == 0,
            SETTLE_TIMEOUT_S,
            "the stream to pull the stuck batch (held, unacknowledged)",
            stream,
            log,
        )
        os.killpg(stream.pid, signal.SIGTERM)  # the drain fires its window: the sink waits on Spanner
        assert_stays(lambda: stream.poll() is None, 1, "the drain, stuck behind the frozen emulator")
        assert local_stream.stop(stream, signal.SIGTERM) == drain.EXIT_NOT_DRAINED
    finally:
        os.kill(int(pid), signal.SIGCONT)
    [report] = [m for m in map(CUT_SHORT.match, log.read_text(errors="replace").splitlines()) if m]
    unwritten, unparsed = (int(g.replace(",", "")) for g in report.groups())
    assert unwritten + 100 * unparsed >= 100  # the stuck batch is among what the report says waits

    restarted = start()  # replays the stuck batch from its log
    wait_until(
        lambda: verify_totals(database, ledger_of(counted + stuck).totals) == [],
        SETTLE_TIMEOUT_S,
        "the stuck batch to be counted by the restart",
        restarted,
        log,
    )
    assert_stays(
        lambda: verify_totals(database, ledger_of(counted + stuck).totals) == [],
        3 * WINDOW_S,
        "the stuck batch counted once",
    )
    assert local_stream.stop(restarted) == 0
    assert "upvotes stream: replaying 1 pulls" in log.read_text(errors="replace")


# --- the Spanner emulator stopped under the sink ------------------------------------------------

OUTAGE_BOUND_S = 20.0  # generous: with a short RetryPolicy the write should fail in about a second
SHORT_RETRY = RetryPolicy(attempts=5, first_delay_s=0.05, max_delay_s=0.5)


def write_bundle(fn: WriteDeltasFn, items: list[PostDelta]) -> list:
    fn.start_bundle()
    outputs = [out for d in items for out in fn.process(d)]
    return outputs + list(fn.finish_bundle())


# Vote states the vote-state sink applies while Spanner is down: it reads the stored states, the
# users' erasures and suspensions in its transaction before it writes.
OUTAGE_STATES = {
    PostUser(f"outage-v{i % 3}", f"outage-u{i}"): LatestVote(
        "up", 1_795_312_800_000_000, f"e{i}", 1_795_312_800, 1, True
    )
    for i in range(12)
}


def bounded(work: Callable[[], object]) -> dict:
    """Runs `work` on a thread for at most OUTAGE_BOUND_S: whether it finished, in how long, and the
    error it raised (the thread is left behind if the client hangs)."""
    outcome: dict = {}

    def attempt() -> None:
        began = time.monotonic()
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - examined by the test
            outcome["error"] = error
        outcome["seconds"] = time.monotonic() - began

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(OUTAGE_BOUND_S)
    return {**outcome, "finished": not thread.is_alive()}


@pytest.fixture(scope="module")
def spanner_outage(emulator_env, tmp_path_factory):
    """Runs the outage once, on a private Spanner emulator (the shared one stays up):
    write, stop the emulator, write again (bounded wait), start a new one, re-provision,
    write the same deltas twice. Returns what was observed."""
    log_dir = Path(tmp_path_factory.mktemp("private-spanner"))
    res = Resources("test-project", "outage-instance", "outage-db", "unused", "unused", "unused")
    before = make_deltas("outage-before", n=30, posts=3, writer="outage-before")
    during = make_deltas("outage", n=40, posts=4, writer="outage")
    seen: dict = {}
    started: list[emulators.Emulator] = []
    with pytest.MonkeyPatch.context() as env:
        try:
            first = emulators.start("spanner", log_dir)
            started.append(first)
            env.setenv("SPANNER_EMULATOR_HOST", first.address)
            provision_spanner(res, False, "unused", lambda _: None)
            fn = WriteDeltasFn(res.project, res.instance, res.database, rows_per_commit=1000, retry=SHORT_RETRY)
            fn.setup()
            assert write_bundle(fn, before) == []
            database = open_database(res.project, res.instance, res.database)
            seen["before_ok"] = verify_totals(database, totals_of(before)) == []

            emulators.stop(first)
            seen.update(bounded(lambda: write_bundle(fn, during)), address=first.address)
            seen["vote_states"] = bounded(
                lambda: run_with_retries(lambda: apply_vote_states(database, OUTAGE_STATES), SHORT_RETRY)
            )

            second = emulators.start("spanner", log_dir)
            started.append(second)
            env.setenv("SPANNER_EMULATOR_HOST", second.address)
            provision_spanner(res, False, "unused", lambda _: None)
            again = WriteDeltasFn(res.project, res.instance, res.database, rows_per_commit=1000, retry=SHORT_RETRY)
            again.setup()
            seen["rewrites"] = [write_bundle(again, during), write_bundle(again, during)]
            database = open_database(res.project, res.instance, res.database)
            seen["after"] = {t.post_id: t.counts._asdict() for t in exact_counts(database, totals_of(during))}
            seen["mismatches"] = verify_totals(database, totals_of(during))
            seen["before_after_restart"] = exact_counts(database, totals_of(before))
        finally:
            for emulator in started:
                emulators.stop(emulator)
    seen["expected"] = totals_of(during)
    return seen


def test_a_stopped_spanner_fails_the_write_quickly_with_a_readable_transient_error(spanner_outage) -> None:
    assert spanner_outage["before_ok"]
    assert spanner_outage["finished"], f"the write was still blocked after {OUTAGE_BOUND_S:.0f} s"
    error = spanner_outage.get("error")
    assert is_transient(error), repr(error)
    assert spanner_outage["seconds"] < OUTAGE_BOUND_S
    message = explain(error)
    assert "unavailable" in message and spanner_outage["address"] in message and "\n" not in message


def test_a_stopped_spanner_fails_the_vote_state_sinks_transaction_quickly_too(spanner_outage) -> None:
    """Its reads come before any write: a read from a stopped Spanner must fail, not block."""
    outcome = spanner_outage["vote_states"]
    assert outcome["finished"], f"applying vote states was still blocked after {OUTAGE_BOUND_S:.0f} s"
    assert is_transient(outcome.get("error")), repr(outcome.get("error"))
    assert outcome["seconds"] < OUTAGE_BOUND_S


def test_a_transaction_that_could_not_get_a_session_leaves_its_thread_able_to_run_the_next(
    stack, database, monkeypatch
) -> None:
    """The client marks a transaction running on the thread before it gets a session, and unmarks
    it only if that worked (googleapis/google-cloud-python#18375): after an outage, every later
    transaction on the thread raised "Spanner does not support nested transactions", for ever."""
    sessions = database._sessions_manager
    get_session = sessions.get_session
    failed: list[str] = []

    def fails_once(kind):
        if not failed:
            failed.append("injected")
            raise exceptions.ServiceUnavailable("injected: no session")
        return get_session(kind)

    monkeypatch.setattr(sessions, "get_session", fails_once)

    def select_one(transaction) -> list:
        return list(transaction.execute_sql("SELECT 1"))

    with pytest.raises(exceptions.ServiceUnavailable, match="injected"):
        run_transaction(database, select_one)
    assert failed and run_transaction(database, select_one) == [[1]]


def test_the_vote_state_sinks_reads_fail_on_unavailable_rather_than_restart_for_ever(stack, monkeypatch) -> None:
    """Spanner gone after the transaction got its session: every read answers UNAVAILABLE. The
    client restarts a streaming read after UNAVAILABLE at once and without end; the sink's reads
    (stored states, erasures, suspensions) must raise it instead, for its retry policy to bound."""
    database = open_database(stack.project, stack.instance, stack.database)
    transport = database.spanner_api._transport

    def unavailable(*args, **kwargs):
        raise exceptions.ServiceUnavailable("injected: Spanner is gone")

    monkeypatch.setitem(transport._wrapped_methods, transport.streaming_read, gapic_v1.method.wrap_method(unavailable))
    outcome = bounded(lambda: apply_vote_states(database, OUTAGE_STATES))
    assert outcome["finished"], f"the sink's read was still restarting after {OUTAGE_BOUND_S:.0f} s"
    assert isinstance(outcome.get("error"), exceptions.ServiceUnavailable), repr(outcome.get("error"))


def test_after_the_outage_a_new_emulator_rewritten_twice_counts_once(spanner_outage) -> None:
    assert spanner_outage["before_ok"]
    assert spanner_outage["rewrites"] == [[], []]
    assert spanner_outage["mismatches"] == []
    assert spanner_outage["after"] == spanner_outage["expected"]
    # The emulator keeps nothing across restarts: what was written before the outage is gone,
    # which is why the test re-provisions (on real Spanner it would still be there).
    assert all(t.counts.is_zero() for t in spanner_outage["before_after_restart"])


def test_explain_gives_one_readable_line_for_an_unavailable_spanner(monkeypatch) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", "127.0.0.1:1")
    message = explain(exceptions.ServiceUnavailable("failed to connect to all addresses"))
    assert message.startswith("the service is unavailable (emulator at 127.0.0.1:1)") and "\n" not in message
    assert "upvotes emulators start" in message
    # The client's own retry of a call, given up: said as its last error.
    gave_up = exceptions.RetryError("Timeout of 30.0s exceeded", exceptions.ServiceUnavailable("failed to connect"))
    assert explain(gave_up).startswith("the service is unavailable (emulator at 127.0.0.1:1): failed to connect")


def test_explain_tells_a_lost_session_from_a_missing_resource() -> None:
    lost = explain(exceptions.NotFound("Session not found: projects/p/instances/i/databases/d/sessions/s"))
    missing = explain(exceptions.NotFound("Database not found: projects/p/instances/i/databases/d"))
    assert lost.startswith("Spanner dropped the session") and "provision" not in lost
    assert missing.startswith("not found: Database not found") and "upvotes provision" in missing


# --- `upvotes verify` -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verify_ledger(stack, database, tmp_path_factory):
    """A ledger of a small workload, with exactly its totals written as deltas."""
    events = [
        dict(e, post_id="verify-" + e["post_id"]) for e in generate_events(Workload(events=300, posts=15, seed=5))
    ]
    ledger = ledger_of(events)
    deltas = [
        PostDelta.of(post, HOUR, f"verify:{i}:0", upvotes=sums["upvotes"], shares=sums["shares"], events=1)
        for i, (post, sums) in enumerate(sorted(ledger.totals.items()))
    ]
    write_deltas(database, deltas)
    path = Path(tmp_path_factory.mktemp("verify")) / "ledger.json"
    ledger.save(path)
    return ledger, path


def verify_argv(stack: Resources, ledger_path: Path) -> list[str]:
    return [
        "verify",
        "--project",
        stack.project,
        "--instance",
        stack.instance,
        "--database",
        stack.database,
        "--ledger",
        str(ledger_path),
    ]


def test_upvotes_verify_passes_on_a_matching_ledger(stack, verify_ledger, capsys) -> None:
    ledger, path = verify_ledger
    assert cli_main(verify_argv(stack, path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"verify: all {len(ledger.totals)} posts match the ledger ({ledger.events} events)"]


def test_upvotes_verify_reports_each_mismatch_and_exits_1(stack, verify_ledger, tmp_path, capsys) -> None:
    ledger, path = verify_ledger
    document = json.loads(path.read_text())
    post = sorted(document["posts"])[0]
    actual = document["posts"][post]["upvotes"]
    document["posts"][post]["upvotes"] = actual + 3
    document["posts"]["verify-never-written"] = {"upvotes": 0, "shares": 2}
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(document))
    assert cli_main(verify_argv(stack, wrong)) == 1
    out = capsys.readouterr().out.splitlines()
    assert sorted(out[:-1]) == sorted(
        [
            f"MISMATCH {post} upvotes: expected {actual + 3}, actual {actual}",
            "MISMATCH verify-never-written shares: expected 2, actual 0",
        ]
    )
    assert out[-1] == f"verify: 2 mismatches over {len(ledger.totals) + 1} posts"


def test_upvotes_verify_wait_s_reads_again_until_late_deltas_arrive(
    stack, database, verify_ledger, tmp_path, capsys, monkeypatch
) -> None:
    """--wait-s: the README runs verify right after publishing, while the stream's last window is open.
    The late delta is written during verify's first pause, so the test waits on no clock."""
    from types import SimpleNamespace

    from upvotes.commands import verify

    ledger, path = verify_ledger
    document = json.loads(path.read_text())
    document["posts"]["verify-late"] = {"upvotes": 4, "shares": 1}
    late = tmp_path / "late.json"
    late.write_text(json.dumps(document))
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        if not pauses:
            write_deltas(database, [PostDelta.of("verify-late", HOUR, "verify:late:0", upvotes=4, shares=1, events=1)])
        pauses.append(seconds)

    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=time.monotonic, sleep=pause))
    assert cli_main(verify_argv(stack, late) + ["--wait-s", "60"]) == 0
    captured = capsys.readouterr()
    assert pauses == [1.0] and "verify: 1 posts differ from the ledger; reading again" in captured.err
    assert captured.out == f"verify: all {len(ledger.totals) + 1} posts match the ledger ({ledger.events} events)\n"
    monkeypatch.setattr(verify, "time", time)
    document["posts"]["verify-never"] = {"upvotes": 1, "shares": 0}
    late.write_text(json.dumps(document))
    started = time.monotonic()
    assert cli_main(verify_argv(stack, late) + ["--wait-s", "1"]) == 1
    assert 1 <= time.monotonic() - started < 30
    assert capsys.readouterr().out.splitlines()[-1] == f"verify: 1 mismatches over {len(ledger.totals) + 2} posts"


def test_upvotes_verify_refuses_an_unreadable_ledger_in_one_line(stack, tmp_path, capsys) -> None:
    assert cli_main(verify_argv(stack, tmp_path / "missing.json")) == 2
    err = capsys.readouterr().err
    assert err.startswith("upvotes: cannot read the ledger") and err.count("\n") == 1
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    code = cli_main(verify_argv(stack, corrupt))
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("upvotes: ") and err.count("\n") == 1 and "Traceback" not in err
