"""Exactly once under a kill (issue 47): `upvotes stream` SIGKILLed at each step between a pull
and its acknowledgement, then restarted, loses and doubles nothing; and so does a soak of kills
under load. On the real emulators, the real command (tests/support/crashing_stream.py wraps one
function of it to kill the process at a step).

The steps, one per stage of one chain, each stage a stream killed at its step with the stage's
messages in flight (batches, single events, vote states and an invalid message; 8 rows per commit,
so that a window takes several delta commits and vote-state transactions), the next stage's stream
replaying it: after each restart every post of the stages so far equals the ledger (a count
above it would stay above); at the end every count, hourly total and unique-voter count is exact and no row
was ever dead-lettered as a conflict (a replayed pane that did not come out as written would be).

| step                | what the restart finds                                                      |
|---------------------|-----------------------------------------------------------------------------|
| pulled              | nothing logged, nothing acknowledged: Pub/Sub redelivers after the 10 s ack |
|                     | deadline, and the messages count as new                                     |
| before_commit       | the pull in the log, the window fired, nothing written: replayed            |
| between_commits     | some delta rows of the window written: replayed, those collide as identical |
| between_vote_states | some vote states applied: replayed, superseded by themselves                |
| before_ack          | everything written (checked with the stream dead), nothing acknowledged:   |
|                     | replayed, all collide                                                       |
| after_ack           | acknowledged, the log not told: replayed, all collide; no redelivery        |

With the stream acknowledging on pull, as before issue 47 (UPVOTES_STREAM_LOG=off, kept for the
benchmark's comparison), the chain fails at its first step: the messages pulled before the kill
were acknowledged, and never come back.
"""

from __future__ import annotations

import fcntl
import random
import signal
import time

import pytest
from google.cloud import pubsub_v1

from schemas.contract import batch_messages, event_message
from spanner_reads.reads import exact_counts
from spanner_store.database import open_database
from tests.support.crashing_stream import KILLED_AT
from tests.support.polling import assert_stays, wait_until
from tests.support.resources import STREAM_WINDOW_S, new_resources
from tests.support.steady_load import SteadyLoad
from upvotes.devtools import local_stream
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_messages
from upvotes.devtools.verification import verify_totals, verify_unique_voters
from upvotes.devtools.workload import Workload, generate_events
from upvotes.operations.dead_letters import REJECTED_VOTE, pull_dead_letters, release
from upvotes.operations.provision import provision
from upvotes.resources import Resources

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

# One stage per step (tests/support/crashing_stream.py's points but `logged`, whose log the
# `before_commit` stage leaves as it is: the pull recorded, nothing written).
STEPS = ("pulled", "before_commit", "between_commits", "between_vote_states", "before_ack", "after_ack")

WINDOW_S = STREAM_WINDOW_S
ACK_DEADLINE_S = 10  # Pub/Sub's shortest: a message pulled and never logged comes back this soon
SETTLE_TIMEOUT_S = 120
ROWS_PER_COMMIT = 8


@pytest.fixture
def once_stack(emulator_env, tmp_path):
    """Resources of their own, the votes subscription with a 10 s ack deadline; start(point, tag)
    starts a stream killed at `point` on the messages tagged `tag` (None: a plain one). Every
    stream still running at the end is drained."""
    res = new_resources("once")
    provision(res, log=lambda _: None)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.delete_subscription(request={"subscription": res.subscription_path(res.subscription)})
    subscriber.create_subscription(
        request={
            "name": res.subscription_path(res.subscription),
            "topic": res.topic_path(res.topic),
            "ack_deadline_seconds": ACK_DEADLINE_S,
        }
    )
    subscriber.close()
    log = tmp_path / "stream.log"
    processes = []

    def start(point: str | None = None, tag: str = ""):
        wrapper = ("tests.support.crashing_stream", point, tag) if point else ("upvotes.cli",)
        process = local_stream.start(
            res,
            WINDOW_S,
            log,
            emulator_env,
            append=True,
            wrapper=wrapper,
            stream_args=(f"--rows-per-commit={ROWS_PER_COMMIT}",),
        )
        processes.append(process)
        return process

    yield res, open_database(res.project, res.instance, res.database), start, log
    for process in processes:
        local_stream.stop(process, signal.SIGTERM)


def stage_messages(tag: str) -> tuple[list, list[dict]]:
    """One stage's messages and the valid events in them: 240 upvotes with user IDs on 24 posts in
    3 batches, 12 single-event messages, 24 vote states (single events) of 24 users on 4 posts
    (ups and downs), and one invalid message."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    batched = [
        {"post_id": f"{tag}p{i % 24}", "counter": "upvotes", "delta": 1, "user_id": f"{tag}u{i}"} for i in range(240)
    ]
    singles = [{"post_id": f"{tag}s{i}", "counter": "shares", "delta": 2} for i in range(12)]
    states: list[dict[str, object]] = [
        {
            "post_id": f"{tag}v{i % 4}",
            "user_id": f"{tag}w{i}",
            "vote": "up" if i % 3 else "down",
            "event_time": now,
            "event_id": f"{tag}e{i}",
        }
        for i in range(24)
    ]
    messages = [
        *batch_messages(batched, 80),
        *map(event_message, singles + states),
        (f"{tag} is not JSON".encode(), {}),
    ]
    return messages, batched + singles + states


def dead_letters(res: Resources) -> list:
    """What the dead-letter topic's kept subscription holds (released again)."""
    subscriber = pubsub_v1.SubscriberClient()
    try:
        kept = res.subscription_path(f"{res.dead_letter_topic}-kept")
        letters, _ = pull_dead_letters(subscriber, kept, 1000)
        release(subscriber, kept, letters)
        return letters
    finally:
        subscriber.close()


def test_a_kill_at_each_step_then_a_restart_loses_and_doubles_nothing(once_stack) -> None:
    res, database, start, log = once_stack
    ledger = Ledger()

    def exact() -> bool:
        return verify_totals(database, ledger.totals) == []

    took = []
    for stage, point in enumerate(STEPS):
        stream = start(point, f"k{stage}-")
        started = time.monotonic()
        # The restart has counted what the stream killed before it had in flight, exactly: not less
        # (lost), not more (doubled). A count above the ledger (a replay written twice) would stay
        # above it: the next stage's wait, or the last one's, would never see it exact.
        wait_until(exact, SETTLE_TIMEOUT_S, f"the stages before {point} to be counted", stream, log)
        messages, events = stage_messages(f"k{stage}-")
        assert publish_messages(res.topic_path(res.topic), messages, progress=False).failed == 0
        for event in events:
            ledger.add(event)
        ledger.add_invalid()
        assert stream.wait(timeout=SETTLE_TIMEOUT_S) == -signal.SIGKILL, log.read_text(errors="replace")[-3000:]
        assert f"{KILLED_AT} {point}" in log.read_text(errors="replace")
        if point in ("before_ack", "after_ack"):
            # Killed as it acknowledged the stage's last messages: everything derived from them was
            # committed already (the lowest watermark of the pipeline's steps was past their windows).
            assert exact(), verify_totals(database, ledger.totals)[:5]
        took.append(time.monotonic() - started)

    final = start()  # returns once the stream handles signals (local_stream.start)
    wait_until(exact, SETTLE_TIMEOUT_S, "the last stage to be counted", final, log)
    assert_stays(exact, 2 * WINDOW_S + 1, "the exact count")
    assert verify_unique_voters(database, ledger.unique_voters, 0.0) == []
    assert local_stream.stop(final) == 0
    assert exact(), verify_totals(database, ledger.totals)[:5]  # its replay, drained, doubled nothing
    letters = dead_letters(res)
    # A replayed window may publish its rejected message again (docs/guarantees.md); nothing else is a dead letter.
    assert {letter.kind for letter in letters} == {REJECTED_VOTE}, [letter.summary() for letter in letters]
    assert len({letter.data for letter in letters}) == len(STEPS)
    print(
        f"\nkilled at {', '.join(STEPS)}; stages took {', '.join(f'{t:.1f}' for t in took)} s; "
        f"{len(letters)} dead letters for {len(STEPS)} invalid messages"
    )


def test_sigkills_at_random_moments_under_2000_votes_per_s_end_equal_to_the_ledger(once_stack) -> None:
    """A short soak: 1,500 votes/s in batches of 100 and 500 single-event messages/s, the stream
    SIGKILLed twice at random moments, restarted at once each time: every post ends equal to the
    ledger (the benchmark's soak kills it 5 times, bench/stream_reader.py)."""
    res, database, start, log = once_stack
    rng = random.Random(47)
    batched = list(generate_events(Workload(events=200_000, posts=200, seed=47, post_prefix="soak-b-")))
    singles = list(generate_events(Workload(events=80_000, posts=100, seed=48, post_prefix="soak-s-")))
    loads = [
        SteadyLoad(res.topic_path(res.topic), batched, batch_size=100, rate=1_500),
        SteadyLoad(res.topic_path(res.topic), singles, batch_size=1, rate=500),
    ]
    posts = sorted({event["post_id"] for event in batched + singles})

    def counted() -> int:
        return sum(sum(map(abs, t.counts)) for t in exact_counts(database, posts))

    stream = start()
    for load in loads:
        load.start()
    for _ in range(2):
        before = counted()
        wait_until(lambda: counted() > before, SETTLE_TIMEOUT_S, "this run to count votes", stream, log)
        time.sleep(rng.uniform(0.0, 2.0))  # a random moment of a running stream
        assert local_stream.stop(stream, signal.SIGKILL) == -signal.SIGKILL
        stream = start()
    time.sleep(3 * WINDOW_S)
    for load in loads:
        load.stop()
    ledger = Ledger()
    for load in loads:
        for event in load.sent():
            ledger.add(event)
    took = wait_until(
        lambda: verify_totals(database, ledger.totals) == [],
        SETTLE_TIMEOUT_S,
        "every post to match the ledger",
        stream,
        log,
    )
    assert_stays(lambda: verify_totals(database, ledger.totals) == [], WINDOW_S + 1, "the exact count")
    assert local_stream.stop(stream) == 0
    replays = [line for line in log.read_text(errors="replace").splitlines() if "upvotes stream: replaying" in line]
    print(
        f"\nsoak: {sum(load.messages for load in loads):,} messages, {ledger.events:,} votes, 2 SIGKILLs; "
        f"exact {took:.1f} s after the load; replays: {replays}"
    )


@pytest.mark.emulators  # starts a process through local_stream.start (one that exits at once)
def test_a_new_run_starts_without_the_message_log_an_earlier_run_left_and_a_restart_keeps_it(tmp_path) -> None:
    """A run on emulators started afresh has a subscription of the old name whose messages are
    numbered from 1 again: with the old run's log, it took them for that run's finished messages
    and counted nothing (a second `make demo`). A restart (`append`) must keep the log it replays."""
    output = tmp_path / "stream.log"
    left = local_stream.message_log_dir(output) / "votes.votes-sub-0.sqlite"
    left.parent.mkdir()
    left.write_text("an earlier run's log")
    exits_at_once = ("this",)  # `python -m this stream ...` prints and exits
    local_stream.start(new_resources(), 2, output, append=True, wrapper=exits_at_once).wait(timeout=60)
    assert left.read_text() == "an earlier run's log"
    with open(left.with_suffix(".lock"), "a+") as held:  # a running stream's lock: the log stays
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        local_stream.start(new_resources(), 2, output, wrapper=exits_at_once).wait(timeout=60)
        assert left.read_text() == "an earlier run's log"
    local_stream.start(new_resources(), 2, output, wrapper=exits_at_once).wait(timeout=60)
    assert not left.parent.exists()
