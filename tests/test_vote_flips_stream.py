"""One vote per user through `upvotes stream` on the emulators: users flipping up -> down -> none
-> up, with duplicates and late events, while the stream is stopped (SIGTERM, SIGINT: it drains)
and started again in the middle of the flips. The counts, every user's stored vote and the
unique voters must end exactly as the ledger says, and the drains must account for every event.

A restarted stream starts with no pipeline state at all: every state is applied against the one
stored in Spanner (spanner_writes/votes.py), so nothing depends on what the stopped run held.
"""

from __future__ import annotations

import signal
import time

import pytest

from schemas.contract import batch_messages
from schemas.counters import Counts
from spanner_reads.my_votes import vote_of
from spanner_reads.reads import exact_counts
from tests.support.polling import assert_stays, wait_until
from tests.support.steady_load import SteadyLoad
from tests.support.streams import SETTLE_TIMEOUT_S, WINDOW_S, drain_reports, ledger_of
from upvotes.devtools import local_stream
from upvotes.devtools.publishing import publish_messages
from upvotes.devtools.verification import verify_totals, verify_unique_voters
from upvotes.devtools.workload import VoteStateWorkload, generate_vote_states

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)


def test_flips_across_stream_stops_and_restarts_end_exact(streaming_stack) -> None:
    res, database, start, log = streaming_stack
    # 300 users on 3 posts, half the events flips of recent voters, 10% duplicates, 10% late: most
    # users change their vote several times, and many of those changes straddle a stop.
    events = list(
        generate_vote_states(
            VoteStateWorkload(
                events=60_000,
                posts=3,
                voters=300,
                seed=29,
                flip_fraction=0.5,
                duplicate_fraction=0.1,
                late_fraction=0.1,
            )
        )
    )
    load = SteadyLoad(res.topic_path(res.topic), events, batch_size=50, rate=500)
    stream = start()
    load.start()

    def last_applied():
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql("SELECT MAX(AppliedAt) FROM Votes"))[0][0]

    for sig in (signal.SIGTERM, signal.SIGINT, None):
        before = last_applied()
        wait_until(
            lambda: last_applied() not in (None, before),
            SETTLE_TIMEOUT_S,
            "this run to apply votes under load",
            stream,
            log,
        )
        if sig is None:
            break
        time.sleep(1.5)  # mid-window, mid-flips
        assert local_stream.stop(stream, sig) == 0, log.read_text(errors="replace")[-3000:]
        assert load.running  # the flips go on while the stream is down
        stream = start()
    load.stop()
    sent = load.sent()
    ledger = ledger_of(sent)
    assert any(t["downvotes"] for t in ledger.totals.values())
    wait_until(
        lambda: verify_totals(database, ledger.totals) == [],
        SETTLE_TIMEOUT_S,
        "every post to match the ledger",
        stream,
        log,
    )
    assert_stays(lambda: verify_totals(database, ledger.totals) == [], 2 * WINDOW_S + 1, "the exact count")
    assert verify_unique_voters(database, ledger.unique_voters, tolerance=0.0) == []  # under 300 voters: exact
    assert local_stream.stop(stream, signal.SIGTERM) == 0

    # Every user's stored vote is their latest one, whatever order the events came in.
    latest: dict[tuple[str, str], tuple[tuple[str, str], str]] = {}
    for event in sent:
        key, order = (event["post_id"], event["user_id"]), (event["event_time"], event["event_id"])
        if key not in latest or order > latest[key][0]:
            latest[key] = (order, event["vote"])
    sample = sorted(latest)[::7]
    stored = [vote_of(database, post, user) for post, user in sample]
    assert [None if vote is None else vote.vote for vote in stored] == [latest[key][1] for key in sample]
    assert sum(1 for _, vote in latest.values() if vote == "up") == sum(
        t.counts.upvotes for t in exact_counts(database, sorted(ledger.totals))
    )

    reports = drain_reports(log)
    assert [r[0] for r in reports] == ["SIGTERM", "SIGINT", "SIGTERM"], log.read_text(errors="replace")[-3000:]
    assert sum(r[1] for r in reports) == load.messages and sum(r[2] for r in reports) == len(sent)
    assert all(r[2] > 0 for r in reports)  # each run applied some of the flips
    print(
        f"\n{len(sent):,} vote-state events over {len(latest)} (post, user) pairs, votes per run: "
        f"{[r[2] for r in reports]}; latest: {ledger.totals}"
    )


def test_one_users_events_in_two_messages_of_one_bundle_and_of_two_bundles_end_at_the_latest(streaming_stack) -> None:
    """The same user's up and down, in two messages published together (one bundle, merged before
    the sink) and again in messages far apart (two bundles, two transactions): the latest wins."""
    res, database, start, log = streaming_stack
    stream = start()
    topic = res.topic_path(res.topic)
    first = [
        {"post_id": "both", "user_id": f"u{i}", "vote": "up", "event_time": "2026-11-25T10:00:00Z", "event_id": f"a{i}"}
        for i in range(50)
    ]
    second = [
        {**event, "vote": "down", "event_time": "2026-11-25T10:00:01Z", "event_id": f"b{i}"}
        for i, event in enumerate(first)
    ]
    # Newest first, in separate messages sent at once: one pull, one bundle.
    publish_messages(topic, batch_messages(second + first, 50), progress=False)
    wait_until(
        lambda: exact_counts(database, ["both"])[0].counts == Counts(downvotes=50),
        SETTLE_TIMEOUT_S,
        "the newest votes to win",
        stream,
        log,
    )
    # The older ups again, in a later bundle: they lose to the stored downs.
    publish_messages(topic, batch_messages(first, 25), progress=False)
    assert_stays(
        lambda: exact_counts(database, ["both"])[0].counts == Counts(downvotes=50),
        3 * WINDOW_S,
        "the count, after older events arrive again",
    )
    assert local_stream.stop(stream, signal.SIGTERM) == 0
