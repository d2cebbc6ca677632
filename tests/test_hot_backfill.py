"""`upvotes provision` adding the hot ranking to a database of the schema before issue 36
(bench/fixtures/posts_before_issue_36.sql, shared with the benchmark: no HotKey, no rise bounds
in TopCandidates, no RankingSettings) with folded posts, while a stream writes deltas and folds run
(upvotes/operations/hot_backfill.py): afterwards every HotKey is the score of its post's hourly
rows, hot_top is certified and is the ledger's, and no vote is lost or counted twice. Then a
second provision keeps the recorded half-life, and --recompute-hot changes it and every key."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from google.cloud import spanner

import spanner_store.database
from schemas import ddl_statements, statements_of
from schemas.counters import Counts
from schemas.hot_score import hot_score
from schemas.records import PostDelta
from spanner_reads.reads import exact_counts
from spanner_reads.trending import HotRankingUnavailable, hot_top, window_top
from spanner_store.database import (
    RetryPolicy,
    commit_mutations,
    open_database,
    run_with_retries,
    wait_for_schema,
)
from spanner_store.delta_commits import delta_commit_row, new_commit_id
from spanner_store.ranking_settings import read_settings
from spanner_store.tables import (
    COUNTER_COLUMNS,
    DELTA_COLUMNS,
    DELTA_COMMIT_COLUMNS,
    DELTA_COMMITS,
    DELTAS,
    FOLD_RUN_COLUMNS,
    FOLD_RUNS,
    HOURLY,
    POST_KEY_COLUMNS,
    POSTS,
    TOP_CANDIDATES,
    commit_shard,
    delta_key,
    hour_timestamp,
    post_key,
)
from spanner_store.top_candidates import commit_candidates
from spanner_writes.deltas import write_new_deltas
from spanner_writes.folding import FoldOutcome
from tests.support.fold_runs import run_fold
from tests.support.polling import wait_until
from tests.support.provision_races import race
from tests.support.resources import new_resources
from tests.support.trending_ledger import (
    VoteLedger,
    assert_hot_answer,
    assert_window_answer,
    brute_hot,
    brute_window,
    keys_and_hours,
    stale_keys,
    unfenced,
    window_of,
)
from upvotes.cli import main
from upvotes.operations import hot_backfill
from upvotes.operations.provision import provision_spanner

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

BEFORE = Path(__file__).resolve().parent.parent / "bench" / "fixtures" / "posts_before_issue_36.sql"
NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)
# The TopCandidates columns of that schema, as its writers wrote them.
BEFORE_CANDIDATE_COLUMNS = ("Shard", "CommittedAt", "CandidateId", "PostIds", "Threshold")
POSTS_BEFORE = [f"m-{i:02}" for i in range(40)]
POSTS_DURING = [f"n-{i:02}" for i in range(5)]  # first voted on while the migration runs
PAGE = 7  # posts per backfill page here, so that 45 posts take 7 pages
RACED_PAGES = 3  # between each of the first pages, a fold and a stream commit land
TIMEOUT_S = 120


def old_write(database, deltas: list[PostDelta]) -> datetime:
    """One commit as the previous version's sink made it: delta rows, their parents, the
    DeltaCommits row and a TopCandidates row without the rise bounds. Returns its timestamp."""
    commit_id = new_commit_id()
    candidates = commit_candidates(deltas)

    def write(batch) -> None:
        batch.insert_or_update(POSTS, columns=POST_KEY_COLUMNS, values=sorted({post_key(d.post_id) for d in deltas}))
        batch.insert(
            DELTAS,
            columns=DELTA_COLUMNS,
            values=[
                delta_key(d) + tuple(d.sums.counts) + (d.sums.events, None, spanner.COMMIT_TIMESTAMP) for d in deltas
            ],
        )
        batch.insert(
            DELTA_COMMITS,
            columns=DELTA_COMMIT_COLUMNS,
            values=[
                delta_commit_row(
                    commit_id, (d.post_id for d in deltas), len(deltas), sum(d.sums.events for d in deltas)
                )
            ],
        )
        batch.insert(
            TOP_CANDIDATES,
            columns=BEFORE_CANDIDATE_COLUMNS,
            values=[
                (
                    commit_shard(commit_id),
                    spanner.COMMIT_TIMESTAMP,
                    commit_id,
                    candidates.post_ids,
                    candidates.threshold,
                )
            ],
        )

    committed = commit_mutations(database, write)
    assert isinstance(committed, datetime)
    return committed


def old_fold(database, deltas: list[PostDelta], through: datetime) -> None:
    """What the previous version's fold left of these deltas (every one committed at or before
    `through`): the posts' counters folded through it, their hourly rows (no HourShard, no
    HotKey), and a finished run whose ChangesThrough is `through` (the cursor)."""
    totals: dict[str, Counts] = {}
    hours: dict[tuple[str, int], Counts] = {}
    for d in deltas:
        totals[d.post_id] = totals.get(d.post_id, Counts()).plus(d.sums.counts)
        hours[(d.post_id, d.event_hour)] = hours.get((d.post_id, d.event_hour), Counts()).plus(d.sums.counts)

    def write(batch) -> None:
        batch.update(
            POSTS,
            columns=POST_KEY_COLUMNS + COUNTER_COLUMNS + ("FoldedThrough",),
            values=[post_key(p) + tuple(c) + (through,) for p, c in totals.items()],
        )
        batch.insert(
            HOURLY,
            columns=("PostHash", "PostId", "EventHour") + COUNTER_COLUMNS,
            values=[post_key(p) + (hour_timestamp(h),) + tuple(c) for (p, h), c in hours.items()],
        )
        batch.insert(
            FOLD_RUNS,
            columns=FOLD_RUN_COLUMNS,
            values=[("before-36", through, len(totals), len(deltas), spanner.COMMIT_TIMESTAMP, 0, through)],
        )

    commit_mutations(database, write)


def settings(database):
    with database.snapshot() as snapshot:
        return read_settings(snapshot)


def random_delta(rng: random.Random, post_id: str, delta_id: str) -> PostDelta:
    return PostDelta.of(
        post_id,
        NOW_HOUR - 3600 * rng.randint(0, 40),
        delta_id,
        upvotes=rng.randint(-2, 30),
        downvotes=rng.randint(0, 6),
        shares=rng.randint(0, 3),
        events=1,
    )


def test_provision_backfills_every_hot_key_while_a_stream_writes_and_folds_run(stack, monkeypatch, capsys) -> None:
    """`stack` only creates the instance; this test makes its own database of the previous schema."""
    res = new_resources("hotmig")
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(
        res.database, ddl_statements=statements_of(BEFORE.read_text(encoding="utf-8"))
    ).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    rng = random.Random(36)
    ledger = VoteLedger()
    # What the previous version left: folded posts, and deltas committed after its last fold.
    folded = [random_delta(rng, p, f"old:{p}:{j}") for p in POSTS_BEFORE for j in range(rng.randint(1, 3))]
    old_fold(database, folded, old_write(database, folded))
    unfolded = [random_delta(rng, p, f"old:{p}:late") for p in POSTS_BEFORE[::4]]
    old_write(database, unfolded)
    ledger.add_deltas(folded + unfolded)

    monkeypatch.setattr(spanner_store.database, "SCHEMA_POLL_S", 0.1)
    monkeypatch.setattr(hot_backfill, "PAGE", PAGE)
    stop, migrated, errors = threading.Event(), threading.Event(), []
    folds: list[FoldOutcome] = []
    commits: list[int] = []
    waits: list[int] = []

    def stream() -> None:
        """This version's writer, started before the migration: it waits for the schema
        (wait_for_schema, as the sink does), then commits a few rows at a time."""
        srng = random.Random(37)
        try:
            while not stop.is_set():
                batch = [
                    random_delta(srng, srng.choice(POSTS_BEFORE + POSTS_DURING), f"new:{len(commits)}:{i}")
                    for i in range(srng.randint(1, 4))
                ]
                wait_for_schema(
                    lambda: run_with_retries(lambda: write_new_deltas(database, batch), PATIENT),
                    "test stream",
                    on_wait=lambda: waits.append(len(commits)),
                )
                ledger.add_deltas(batch)
                commits.append(len(batch))
                stop.wait(0.05)  # a stream's pace, not a loop's
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def folding() -> None:
        """This version's fold, run on a loop from the moment the schema is migrated."""
        try:
            migrated.wait(TIMEOUT_S)
            while not stop.is_set():
                folds.append(run_fold(res))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    real_pages = hot_backfill._pages
    pages: list[int] = []
    mid_backfill = []

    def racing_pages(db):
        """The backfill's pages; after each of the first ones, a fold and a stream commit land."""
        for page in real_pages(db):
            yield page
            pages.append(len(page))
            if len(pages) <= RACED_PAGES:
                mid_backfill.append(hot_top(database, 5).exact)
                folds_then, commits_then = len(folds), len(commits)
                wait_until(
                    lambda: errors or (len(folds) > folds_then and len(commits) > commits_then),
                    TIMEOUT_S,
                    "a fold and a stream commit between two pages of the backfill",
                )

    monkeypatch.setattr(hot_backfill, "_pages", racing_pages)
    threads = [threading.Thread(target=stream), threading.Thread(target=folding)]
    for thread in threads:
        thread.start()
    logged: list[str] = []
    try:
        wait_until(lambda: errors or waits, TIMEOUT_S, "the stream to wait for the migration")

        def log(line: str) -> None:
            logged.append(line)
            if line.startswith("exists  database"):  # the schema is migrated
                migrated.set()

        provision_spanner(res, False, "unused", log)
        # And on for a while after the backfill: another fold and more commits.
        folds_then, commits_then = len(folds), len(commits)
        wait_until(
            lambda: errors or (len(folds) > folds_then and len(commits) > commits_then + 3),
            TIMEOUT_S,
            "a fold and stream commits after the backfill",
        )
    finally:
        stop.set()
        migrated.set()
        for thread in threads:
            thread.join(timeout=TIMEOUT_S)
    assert not errors and not any(thread.is_alive() for thread in threads), errors
    assert {
        "added   column Posts.HotKey FLOAT64",
        "added   column Posts.HotKeyThrough TIMESTAMP",
        "added   constraint Posts.HotKeyCurrent",
        "created TABLE RankingSettings",
        "recorded hot half-life 12 h",
    } <= set(logged), logged
    assert len(pages) > RACED_PAGES and sum(pages) >= len(POSTS_BEFORE) and mid_backfill == [False] * RACED_PAGES
    assert [line for line in logged if line.startswith("backfilled hot scores")], logged
    assert settings(database) == (12.0, True, 1) and unfenced(database) == {}

    run_fold(res)  # past the previous version's candidate rows, which bound nothing
    totals = ledger.totals()
    assert {t.post_id: t.counts for t in exact_counts(database, totals)} == totals  # none lost, none twice
    keys, hours = keys_and_hours(database)
    assert set(keys) == set(totals)
    for post_id, key in keys.items():
        assert key == hot_score(hours.get(post_id, {}).items(), 12.0).key, post_id
    top = hot_top(database, 5, extra=5)
    assert top.exact and [p.totals.post_id for p in top.posts] == [
        s.post_id for s in brute_hot(ledger, 12.0, top.as_of)[:5]
    ]
    assert_hot_answer(top, ledger, 12.0, 5, "migrated")
    # The hourly rows the previous version wrote are in the by-hour index's shard 0: still read.
    moment = datetime.fromtimestamp(NOW_HOUR + 1800, timezone.utc)
    last = window_top(database, 5, hours=24, clock=lambda _: moment)
    assert last.exact and [p.totals.post_id for p in last.posts] == [
        p for p, _ in brute_window(ledger, *window_of(moment, 24))[:5]
    ]
    assert_window_answer(last, ledger, 5, *window_of(moment, 24), "migrated, last 24 h")
    with capsys.disabled():
        print(
            f"\nbackfill of {sum(pages)} posts in {len(pages)} pages raced {len(folds)} folds and "
            f"{len(commits)} stream commits ({sum(commits)} rows)"
        )

    # A second provision with another half-life keeps the recorded one, and every key.
    flags = [
        "--project",
        res.project,
        "--instance",
        res.instance,
        "--database",
        res.database,
        "--topic",
        res.topic,
        "--subscription",
        res.subscription,
        "--dead-letter-topic",
        res.dead_letter_topic,
    ]
    capsys.readouterr()
    assert main(["provision", *flags, "--hot-half-life-hours", "6"]) == 0
    assert "kept    hot half-life 12 h" in capsys.readouterr().out
    assert settings(database) == (12.0, True, 1) and keys_and_hours(database)[0] == keys

    # --recompute-hot records it and recomputes every key.
    assert main(["provision", *flags, "--hot-half-life-hours", "6", "--recompute-hot"]) == 0
    assert "recorded hot half-life 6 h" in capsys.readouterr().out
    assert settings(database) == (6.0, True, 2) and unfenced(database) == {}
    recomputed, hours = keys_and_hours(database)
    for post_id, key in recomputed.items():
        assert key == hot_score(hours.get(post_id, {}).items(), 6.0).key, post_id
    assert all(recomputed[p] != keys[p] for p in keys if keys[p]), "every nonzero key changes with H"
    top = hot_top(database, 5, extra=5)
    assert top.exact and top.half_life_hours == 6.0
    assert [p.totals.post_id for p in top.posts] == [s.post_id for s in brute_hot(ledger, 6.0, top.as_of)[:5]]
    assert_hot_answer(top, ledger, 6.0, 5, "recomputed")


def test_a_recompute_cut_short_is_finished_by_the_next_provision(stack, monkeypatch) -> None:
    """`provision --recompute-hot` killed halfway leaves keys of both half-lives; a later plain
    `provision` (a rerun, a deploy) must finish it before reads certify again."""
    res = new_resources("hotre")
    provision_spanner(res, False, "unused", lambda _: None, hot_half_life_hours=12.0)
    database = open_database(res.project, res.instance, res.database)
    rng = random.Random(12)
    ledger = VoteLedger()
    deltas = [random_delta(rng, f"r-{i:02}", f"r:{i}:{j}") for i in range(30) for j in range(3)]
    run_with_retries(lambda: write_new_deltas(database, deltas), PATIENT)
    ledger.add_deltas(deltas)
    run_fold(res)

    monkeypatch.setattr(hot_backfill, "PAGE", 5)
    real_write_keys = hot_backfill._write_keys
    written: list[int] = []

    def killed_after_two_pages(transaction, posts, *run):
        if len(written) == 2:
            raise RuntimeError("killed mid-recompute")
        written.append(len(posts))
        return real_write_keys(transaction, posts, *run)

    monkeypatch.setattr(hot_backfill, "_write_keys", killed_after_two_pages)
    with pytest.raises(RuntimeError, match="killed mid-recompute"):
        provision_spanner(res, False, "unused", lambda _: None, hot_half_life_hours=6.0, recompute_hot=True)
    assert settings(database) == (6.0, False, 2) and not hot_top(database, 3).exact
    monkeypatch.setattr(hot_backfill, "_write_keys", real_write_keys)

    logged: list[str] = []
    provision_spanner(res, False, "unused", logged.append)  # the default 12: the recorded 6 is kept
    assert any(line.startswith("kept    hot half-life 6 h") for line in logged), logged
    assert settings(database) == (6.0, True, 3) and unfenced(database) == {}
    keys, hours = keys_and_hours(database)
    assert {p: k for p, k in keys.items() if k != hot_score(hours.get(p, {}).items(), 6.0).key} == {}
    top = hot_top(database, 5, extra=5)
    assert top.exact and [p.totals.post_id for p in top.posts] == [
        s.post_id for s in brute_hot(ledger, 6.0, top.as_of)[:5]
    ]
    assert_hot_answer(top, ledger, 6.0, 5, "recompute finished")


def test_hot_reads_of_a_database_with_no_half_life_recorded_say_to_provision(stack) -> None:
    """The schema of this version without `provision`'s record (its DDL applied by hand): the
    fold writes no key, and a hot read names the fix instead of ranking without one."""
    res = new_resources("nohalf")
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=ddl_statements()).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    run_with_retries(
        lambda: write_new_deltas(database, [PostDelta.of("p", NOW_HOUR, "d", upvotes=3, events=3)]), PATIENT
    )
    run_fold(res)
    assert keys_and_hours(database)[0] == {"p": None} and list(unfenced(database)) == ["p"]  # no key: unfenced
    with pytest.raises(HotRankingUnavailable, match="upvotes provision"):
        hot_top(database, 3)
    provision_spanner(res, False, "unused", lambda _: None)
    assert keys_and_hours(database)[0] == {"p": hot_score([(NOW_HOUR, Counts(upvotes=3))], 12.0).key}
    assert unfenced(database) == {}
    assert [p.totals.post_id for p in hot_top(database, 3).posts] == ["p"]


# Scripts of two provisions' backfill steps (tests/support/provision_races.py), A's and B's: each
# starts with the step that records the half-life, then one per page of RACE_PAGE posts (31 posts:
# 4 pages), then the one that records the end.
RACE_PAGE = 8
RACE_STEPS = 6


def race_database(prefix: str, half_life: float | None) -> tuple:
    """A database with 31 posts voted on over 40 hours and folded by this version, provisioned with
    `half_life`, or (None) of this version's schema with no half-life recorded yet (its DDL
    applied by hand, as a first provision finds it: no key, every post unfenced)."""
    res = new_resources(prefix)
    if half_life is None:
        client = spanner.Client(project=res.project)
        client.instance(res.instance).database(res.database, ddl_statements=ddl_statements()).create().result(300)
    else:
        provision_spanner(res, False, "unused", lambda _: None, hot_half_life_hours=half_life)
    database = open_database(res.project, res.instance, res.database)
    rng = random.Random(prefix)
    ledger = VoteLedger()
    deltas = [random_delta(rng, f"h-{i:02}", f"race:{i}:{j}") for i in range(31) for j in range(2)]
    run_with_retries(lambda: write_new_deltas(database, deltas), PATIENT)
    ledger.add_deltas(deltas)
    run_fold(res)
    return database, ledger


def certified_only_when_current(database, ledger: VoteLedger) -> Callable[[str], None]:
    """The invariant checked after every step of a race: `hot_backfilled` set means every key is the
    score of its hourly rows under the recorded H, and a certified hot answer is the brute force's.
    (An answer read mid-backfill is not certified, and its bound, from keys of two half-lives, is
    no bound: only certified answers are checked here.)"""

    def check(when: str) -> None:
        recorded = settings(database)
        if recorded.backfilled:
            assert stale_keys(database, recorded.half_life_hours) == {}, (
                f"{when}: hot_backfilled with keys not of the recorded {recorded.half_life_hours:g} h"
            )
        if recorded.half_life_hours is not None and (top := hot_top(database, 5, extra=5)).exact:
            assert_hot_answer(top, ledger, top.half_life_hours, 5, when)

    return check


@pytest.mark.parametrize(
    "script",
    [
        "A" * (RACE_STEPS - 1) + "BBA",  # B's record and first page between A's last page and A's end
        "B" + "A" * RACE_STEPS,  # A all through between B's record and B's first page
    ],
)
def test_two_recomputes_at_once_end_with_every_key_of_the_last_half_life(stack, monkeypatch, script) -> None:
    """`provision --recompute-hot` with H = 12 (A) and with H = 6 (B) at once, their steps
    interleaved by `script`: after every step, `hot_backfilled` means every key is of the recorded
    H; at the end it is, of the one that recorded last, which took the backfill over. Before issue
    44, A's end recorded `hot_backfilled` = 1 over B's half-life and A's keys (the first script)."""
    database, ledger = race_database("hotrace", 12.0)
    monkeypatch.setattr(hot_backfill, "PAGE", RACE_PAGE)
    logs: dict[str, list[str]] = {"A": [], "B": []}
    results = race(
        monkeypatch,
        {
            "A": lambda: hot_backfill.ensure_hot_ranking(database, 12.0, logs["A"].append, recompute=True),
            "B": lambda: hot_backfill.ensure_hot_ranking(database, 6.0, logs["B"].append, recompute=True),
        },
        script,
        certified_only_when_current(database, ledger),
    )
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    final = settings(database)
    last, first = sorted("AB", key=script.index, reverse=True)  # the later record
    assert final.backfilled and final.half_life_hours == {"A": 12.0, "B": 6.0}[last], (final, logs)
    assert stale_keys(database, final.half_life_hours) == {} and unfenced(database) == {}
    # The run that was overtaken says so and leaves the end to the other.
    finishing, overtaken = results[last], results[first]
    assert isinstance(finishing, hot_backfill.BackfillReport) and isinstance(overtaken, hot_backfill.BackfillReport)
    assert finishing.finished and not overtaken.finished, results
    assert any("took it over" in line for line in logs[first]), logs
    top = hot_top(database, 5, extra=5)
    assert top.exact and top.half_life_hours == final.half_life_hours
    assert_hot_answer(top, ledger, final.half_life_hours, 5, "after the race")


@pytest.mark.parametrize(
    "script",
    [
        "A" * RACE_STEPS + "B" * RACE_STEPS,  # A all through, then B, which read no half-life before A's record
        "AABAB",  # B's record between A's first and second pages
    ],
)
def test_two_first_provisions_with_different_half_lives_never_certify_keys_of_the_other(
    stack, monkeypatch, script
) -> None:
    """The first two provisions of a database, with H = 12 (A) and H = 6 (B), at once: the
    half-life A recorded first is kept (B says so), every key ends under it and certified. Before
    issue 44 B, having read no half-life before A's record, recorded its own over A's keys and
    filled only the missing ones: A's keys for ever, certified under B's half-life (the first script)."""
    database, ledger = race_database("hotfirst", None)
    monkeypatch.setattr(hot_backfill, "PAGE", RACE_PAGE)
    logs: dict[str, list[str]] = {"A": [], "B": []}
    race(
        monkeypatch,
        {
            "A": lambda: hot_backfill.ensure_hot_ranking(database, 12.0, logs["A"].append),
            "B": lambda: hot_backfill.ensure_hot_ranking(database, 6.0, logs["B"].append),
        },
        script,
        certified_only_when_current(database, ledger),
    )
    final = settings(database)
    assert final.backfilled and final.half_life_hours == 12.0, (final, logs)
    assert any(line.startswith("kept    hot half-life 12 h") for line in logs["B"]), logs
    assert stale_keys(database, 12.0) == {} and unfenced(database) == {}
    top = hot_top(database, 5, extra=5)
    assert top.exact
    assert_hot_answer(top, ledger, 12.0, 5, "after the race")
