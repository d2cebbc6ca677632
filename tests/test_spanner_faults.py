"""What the emulator hides, injected: the sink, the fold and the writer claim against a Spanner
that aborts, answers ambiguously, forgets old versions and interleaves (tests/faults.py).

Each schedule is drawn from a seed, so a failure names the seed that reproduces it. The
assertions are the guarantees, whatever the schedule: totals are exact, nothing is skipped
without a record, and every ambiguous commit resolves to exactly once.
"""
from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from google.api_core import exceptions

from schemas.records import PostDelta
from spanner_store.database import RetryPolicy, open_database, run_with_retries
from spanner_store.reads import verify_totals
from spanner_store.writers import claim_generation
from tests.faults import FlakyDatabase, Injected
from transforms import spanner_sink
from transforms.spanner_sink import WriteDeltaRows

HOUR = 1_795_312_800
SEEDS = range(6)


def schedule(seed: int) -> dict:
    """A random fault schedule: every kind of fault, at rates drawn from the seed."""
    rng = random.Random(seed)
    return {"fail_before": rng.uniform(0.05, 0.3), "fail_after": rng.uniform(0.05, 0.3),
            "abort_read": rng.uniform(0.05, 0.3), "abort_commit": rng.uniform(0.05, 0.3),
            "ambiguous_commit": rng.uniform(0.05, 0.3), "seed": seed}


def expected_totals(deltas: list[PostDelta]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for d in deltas:
        sums = totals.setdefault(d.post_id, {"upvotes": 0, "shares": 0})
        sums["upvotes"] += d.upvotes
        sums["shares"] += d.shares
    return totals


@pytest.fixture
def misbehaving(monkeypatch):
    """Makes the modules named open FlakyDatabase(real database, **settings); returns the shared
    injection counts. The DirectRunner runs DoFns in this process, and their setup() calls the
    module-global `open_database`, so patching the module is enough (the counts prove it)."""

    def install(modules, **settings) -> Injected:
        injected = Injected()
        opened = []
        for module in modules:
            real_open = module.open_database

            def flaky_open(project, instance, database, real_open=real_open):
                opened.append(1)
                return FlakyDatabase(real_open(project, instance, database), injected=injected,
                                     **{**settings, "seed": settings.get("seed", 0) * 100 + len(opened)})

            monkeypatch.setattr(module, "open_database", flaky_open)
        return injected

    return install


@pytest.mark.parametrize("seed", SEEDS)
def test_the_sink_under_a_random_fault_schedule_writes_every_delta_exactly_once(stack, database, misbehaving,
                                                                                seed) -> None:
    rng = random.Random(seed)
    deltas = [PostDelta(f"sink-{seed}-{rng.randrange(9)}", HOUR + 3600 * rng.randrange(3), f"w{seed}:{i}:0",
                        rng.randrange(-2, 9), rng.randrange(3), 1) for i in range(150)]
    settings = schedule(seed)
    injected = misbehaving([spanner_sink], **{**settings, "error": exceptions.DeadlineExceeded})
    pipeline = TestPipeline()
    pipeline | beam.Create(deltas, reshuffle=False) | WriteDeltaRows(
        stack.project, stack.instance, stack.database, rows_per_commit=10)
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]
                if c.key.metric.namespace == "WriteDeltaRows"}

    assert injected.before + injected.after > 0, f"seed {seed}: no fault was injected"
    # An ambiguous commit (DEADLINE_EXCEEDED after success) resolves to exactly once: its rows
    # are found already written on the retry, and nothing is written twice.
    assert counters["rows_written"] + counters.get("rows_already_written", 0) == len(deltas)
    if injected.after:
        assert counters.get("rows_already_written", 0) >= 1
    assert verify_totals(database, expected_totals(deltas)) == [], f"seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
def test_writer_claims_under_aborts_and_ambiguous_commits_never_share_a_generation(stack, seed) -> None:
    """A fresh launch must never get a generation an earlier launch of the name holds, even when
    its claim commits unseen and is retried (it then takes the next one: a gap, never a repeat),
    and even when another launch claims between its attempts."""
    real = open_database(stack.project, stack.instance, stack.database)
    name = f"claims-{seed}"
    claimed: list[int] = []

    def racing_launch(number: int) -> None:
        if number % 3 == 0:  # another launch of the same name, between this one's attempts
            claimed.append(claim_generation(real, name, update=False).generation)

    flaky = FlakyDatabase(real, **schedule(seed), before_transaction=racing_launch)
    for _ in range(8):
        claim = run_with_retries(lambda: claim_generation(flaky, name, update=False),
                                 RetryPolicy(attempts=40, first_delay_s=0.001, max_delay_s=0.01))
        claimed.append(claim.generation)
        kept = run_with_retries(lambda: claim_generation(flaky, name, update=True),
                                RetryPolicy(attempts=40, first_delay_s=0.001, max_delay_s=0.01))
        assert kept.generation >= claim.generation  # an update keeps the newest generation
    assert flaky.injected.read_aborts + flaky.injected.commit_aborts + flaky.injected.ambiguous > 0
    assert len(claimed) == len(set(claimed)), f"seed {seed}: a generation was handed out twice: {claimed}"
