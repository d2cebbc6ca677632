"""What is viral now (spanner_reads/trending.py): the hot ranking and the top posts of the last N
hours, exact and certified without a fold, on the Spanner emulator through the sink's own write
path and the real fold; and the same rankings computed by brute force from a ledger."""
from __future__ import annotations

from datetime import datetime, timezone

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from schemas.records import PostDelta
from spanner_reads.trending import hot_top, window_top
from spanner_store.database import open_database
from tests.support.fold_runs import run_fold
from tests.support.resources import new_resources
from transforms.spanner_sink import WriteDeltaRows
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600


def delta(post_id: str, upvotes: int, delta_id: str, hours_ago: int = 0, downvotes: int = 0) -> PostDelta:
    return PostDelta.of(post_id, NOW_HOUR - 3600 * hours_ago, delta_id, upvotes=upvotes, downvotes=downvotes,
                        events=abs(upvotes) + abs(downvotes))


@pytest.fixture
def fresh(emulator_env):
    resources = new_resources("tr")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    return resources, open_database(resources.project, resources.instance, resources.database)


def sink(resources, deltas: list[PostDelta], rows_per_commit: int = 50) -> None:
    with TestPipeline() as p:
        p | beam.Create(deltas) | WriteDeltaRows(resources.project, resources.instance, resources.database,
                                                 rows_per_commit=rows_per_commit)


def test_smoke(fresh) -> None:
    resources, database = fresh
    sink(resources, [delta("old", 100, "a", hours_ago=48), delta("new", 30, "b", hours_ago=1),
                     delta("mid", 60, "c", hours_ago=20)])
    top = hot_top(database, 3)
    print(top)
    assert [p.totals.post_id for p in top.posts] == ["new", "mid", "old"]
    run_fold(resources)
    top = hot_top(database, 3, extra=0)
    print(top)
    assert [p.totals.post_id for p in top.posts] == ["new", "mid", "old"]
    last = window_top(database, 3, hours=24)
    print(last)
    assert [p.totals.post_id for p in last.posts] == ["mid", "new"]
