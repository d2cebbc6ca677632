"""End to end on the emulators: `upvotes stream` as a subprocess, votes published with the plain
Pub/Sub client, folds running while it streams; every count must equal the ledger exactly and
the dead-letter subscription must hold exactly the invalid messages, each with its reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from google.cloud import pubsub_v1

from pipeline import fold
from schemas.contract import REASONS, batch_messages, event_message
from schemas.counters import Counts
from spanner_reads.reads import exact_counts
from spanner_store.tables import COUNTER_COLUMNS, counts_at
from tests.support.polling import wait_until
from transforms.dead_letter import ERROR_ATTRIBUTE
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_message
from upvotes.devtools.workload import Workload, generate_events, invalid_payloads

EVENTS = 3000
INVALID = 30
SETTLE_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def streaming(stack, emulator_env):
    """The streaming pipeline, exactly as a user starts it, on this module's resources."""
    command = [
        sys.executable,
        "-m",
        "upvotes.cli",
        "stream",
        f"--project={stack.project}",
        f"--instance={stack.instance}",
        f"--database={stack.database}",
        f"--subscription={stack.subscription}",
        f"--dead-letter-topic={stack.dead_letter_topic}",
        "--window-seconds=2",
    ]
    process = subprocess.Popen(
        command,
        env={**os.environ, **emulator_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    yield process
    assert process.poll() is None, "the stream died"
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=90)
    assert process.returncode == 0, stderr.decode()[-3000:]  # drained
    assert "upvotes stream: drained in" in stderr.decode()


def publish(stack) -> tuple[dict[str, dict[str, int]], set[bytes]]:
    """Publishes the workload and the invalid payloads; returns the expected totals and the invalid data."""
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1000, max_latency=0.05)
    )
    topic = stack.topic_path(stack.topic)
    ledger = Ledger()
    futures = []
    for event in generate_events(Workload(events=EVENTS, posts=50, zipf=1.2, seed=3)):
        ledger.add(event)
        data, attributes = event_message(event)
        futures.append(publish_message(publisher, topic, data, attributes))
    invalid = invalid_payloads(INVALID, seed=3)
    futures += [publisher.publish(topic, data, source="e2e-test") for data in invalid]
    for future in futures:
        future.result(timeout=60)
    return ledger.totals, set(invalid)


def wait_until_exact(stack, database, expected, streaming) -> float:
    """Folds repeatedly while streaming, until every exact read equals the ledger; returns seconds."""
    argv = [f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"]

    def folded_and_exact() -> bool:
        fold.run(argv)
        return {t.post_id: t.counts._asdict() for t in exact_counts(database, expected)} == expected

    return wait_until(
        folded_and_exact, SETTLE_TIMEOUT_S, "every exact read to equal the ledger", alive=streaming, poll_s=1
    )


def pull_all(subscription: str, want: int, timeout_s: float = 90) -> list:
    """Pulls (and acknowledges) until `want` distinct messages came, then once more briefly:
    anything beyond `want` would be a duplicate or a stray."""
    subscriber = pubsub_v1.SubscriberClient()
    messages: dict[str, object] = {}

    def pull(timeout: float) -> None:
        response = subscriber.pull(subscription=subscription, max_messages=1000, timeout=timeout)
        for received in response.received_messages:
            messages[received.message.message_id] = received.message
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])

    try:

        def pulled_all() -> bool:
            pull(5)
            return len(messages) >= want

        wait_until(pulled_all, timeout_s, f"{want} messages on {subscription}", poll_s=0)
        pull(3)
    finally:
        subscriber.close()
    return list(messages.values())


def test_streaming_counts_every_vote_exactly_once_and_dead_letters_every_invalid_message(
    stack, database, streaming
) -> None:
    expected, invalid = publish(stack)
    seconds = wait_until_exact(stack, database, expected, streaming)

    sums = ", ".join(f"SUM({column})" for column in COUNTER_COLUMNS)
    with database.snapshot() as snapshot:
        rows = list(snapshot.execute_sql(f"SELECT PostId, COUNT(*), {sums} FROM PostDeltas GROUP BY PostId"))
    deltas = {r[0]: counts_at(r, 2)._asdict() for r in rows}
    nonzero = {p: c for p, c in expected.items() if any(c.values())}
    assert {p: c for p, c in deltas.items() if p in nonzero} == nonzero  # the raw deltas, folded or not
    delta_rows = sum(r[1] for r in rows)
    print(
        f"\n{EVENTS} events over {len(expected)} posts counted exactly in {seconds:.1f} s; "
        f"{delta_rows} delta rows ({1000 * delta_rows / EVENTS:.1f} per 1,000 events)"
    )

    dead = pull_all(stack.subscription_path(stack.dead_letter_subscription_id), want=INVALID)
    assert sorted(m.data for m in dead) == sorted(invalid)
    for message in dead:
        assert message.attributes["source"] == "e2e-test"  # original attributes kept
        assert message.attributes[ERROR_ATTRIBUTE].split(":", 1)[0] in REASONS


def test_unique_voters_of_a_burst_are_within_three_percent_of_the_ledger(stack, database, streaming, tmp_path) -> None:
    """A 1,600-vote burst on one post from about 900 distinct upvoters, in ndjson batches, a
    fold in the middle: the exact counts match the ledger and `upvotes verify
    --unique-tolerance 0.03` passes (folded and unfolded sketches unioned in one read)."""
    ledger = Ledger()
    publisher = pubsub_v1.PublisherClient()
    topic = stack.topic_path(stack.topic)
    messages = list(
        batch_messages(
            generate_events(Workload(events=1_600, posts=1, seed=11, voters=2_500, post_prefix="burst-")),
            batch_size=100,
        )
    )
    for number, message in enumerate(messages):
        for line in message.data.splitlines():
            ledger.add(json.loads(line))
        publish_message(publisher, topic, message.data, message.attributes).result(timeout=60)
        if number == len(messages) // 2:
            # Once the first half is counted (waited for, not assumed), a fold: half the voters end
            # up in the folded sketch, half in unfolded deltas.
            half = ledger.totals["burst-1"]
            wait_until(
                lambda: exact_counts(database, ["burst-1"])[0].counts == Counts(**half),
                SETTLE_TIMEOUT_S,
                "the first half to be counted",
                streaming,
            )
            outcome, _ = fold.run(
                [f"--project={stack.project}", f"--instance={stack.instance}", f"--database={stack.database}"]
            )
            assert outcome.deltas_folded > 0
    expected = ledger.totals
    assert 850 <= ledger.unique_voters["burst-1"] <= 950
    wait_until_exact(stack, database, expected, streaming)
    ledger_path = tmp_path / "ledger.json"
    ledger.save(ledger_path)
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "upvotes.cli",
            "verify",
            f"--project={stack.project}",
            f"--instance={stack.instance}",
            f"--database={stack.database}",
            f"--ledger={ledger_path}",
            "--unique-tolerance=0.03",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    (totals,) = exact_counts(database, ["burst-1"], unique=True)
    assert totals.unique_voters is not None  # read with unique=True
    error = abs(totals.unique_voters - ledger.unique_voters["burst-1"]) / ledger.unique_voters["burst-1"]
    print(f"\nunique voters: {totals.unique_voters} estimated, {ledger.unique_voters['burst-1']} exact ({error:.2%})")
    assert error <= 0.03
