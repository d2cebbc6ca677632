"""Checking the counts against a ledger (`upvotes verify`, the demo, the benchmarks and the tests),
and how many delta rows a run kept: developer tools, not the read path apps use."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.counters import NAMES
from spanner_reads.reads import exact_counts
from spanner_store.tables import COUNTER_COLUMNS

# Column names from schemas/counters.py, never input.
DELTA_ROW_COUNTS_SQL = f"""SELECT COUNT(*), {" + ".join(f"COUNTIF({c} != 0)" for c in COUNTER_COLUMNS)}
FROM PostDeltas"""


def delta_row_counts(database) -> tuple[int, int]:
    """Delta rows kept, and the (post, counter, pane) groups they hold: what one row per post,
    counter and pane would have cost. A full scan, for the demo and benchmarks only."""
    with database.snapshot() as snapshot:
        return tuple(list(snapshot.execute_sql(DELTA_ROW_COUNTS_SQL))[0])


@dataclass(frozen=True)
class Mismatch:
    post_id: str
    counter: str
    expected: int
    actual: int


def verify_unique_voters(database, expected: dict[str, int], tolerance: float) -> list[Mismatch]:
    """Every post's unique voters against the exact {post: distinct voters}: an estimate off by
    more than `tolerance` (relative; none at all for a post without voters) is a mismatch."""
    mismatches = []
    for totals in exact_counts(database, expected, unique=True):
        want = expected[totals.post_id]
        assert totals.unique_voters is not None  # read with unique=True
        if abs(totals.unique_voters - want) > tolerance * want:
            mismatches.append(Mismatch(totals.post_id, "unique_voters", want, totals.unique_voters))
    return mismatches


def verify_totals(database, expected: dict[str, dict[str, int]]) -> list[Mismatch]:
    """Every post's exact count against the expected {post: {counter name: n}} (a missing counter: 0)."""
    mismatches = []
    for totals in exact_counts(database, expected):
        want = expected[totals.post_id]
        for counter, actual in zip(NAMES, totals.counts):
            if actual != want.get(counter, 0):
                mismatches.append(Mismatch(totals.post_id, counter, want.get(counter, 0), actual))
    return mismatches


# Posts re-read per poll of `wait_until_exact` until they match.
EXACT_SAMPLE = 200


def wait_until_exact(
    database,
    expected: dict[str, dict[str, int]],
    timeout_s: float,
    alive: Callable[[], None] = lambda: None,
    poll_s: float = 0.1,
    matched: Callable[[int], None] = lambda _: None,
) -> float | None:
    """Waits until every post's exact count equals `expected` in ONE read (one snapshot: a count can
    pass through its final value on the way); returns the seconds of that last read, None at the
    timeout. Polls read a sample of the posts that did not match yet, the newest first (EXACT_SAMPLE),
    so that the checker loads the database the pipeline writes to as little as it can, and all of
    them once the sample matches. `matched(n)` is told how many posts matched the last full read."""

    def unmatched(posts: list[str]) -> list[str]:
        return list(dict.fromkeys(m.post_id for m in verify_totals(database, {p: expected[p] for p in posts})))

    pending = list(expected)[::-1]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive()
        sample = unmatched(pending[:EXACT_SAMPLE]) if pending else []
        if sample:
            pending = sample + pending[EXACT_SAMPLE:]
            time.sleep(poll_s)
            continue
        started = time.perf_counter()
        pending = unmatched(list(expected))
        matched(len(expected) - len(pending))
        if not pending:
            return time.perf_counter() - started
    return None
