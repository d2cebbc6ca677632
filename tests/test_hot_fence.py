"""Certified means certified (issue 44, item 1): a fold of an earlier version never leaves a
certified hot answer wrong. `upvotes deploy` provisions before it builds, so Cloud Scheduler keeps
launching the previous fold for a while, and it folds hourly rows without keeping HotKey. The
database fences every post (Posts.HotKeyThrough and the HotKeyCurrent constraint,
schemas/posts.sql): such a fold's transaction fails for a fenced post, the fold skips and lists
it, the reads count its deltas exactly, and a fold of this version folds it.

The older folds run here: tests/support/older_folds.py, a transaction-for-transaction simulation
(the pre-trending fold, and the fold of the version before this one, which writes HotKey but not
HotKeyThrough), and the real pre-trending fold (`git archive` of its commit, in a subprocess)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

import pytest
from google.cloud import spanner

from schemas import statements_of
from schemas.records import PostDelta
from spanner_reads.reads import exact_counts
from spanner_reads.trending import hot_top
from spanner_store.database import RetryPolicy, commit_mutations, open_database, run_with_retries
from spanner_store.ranking_settings import BACKFILLED, HALF_LIFE, read_settings, record_setting
from spanner_store.tables import POST_KEY_COLUMNS, POSTS, post_key
from spanner_writes.deltas import write_new_deltas
from tests.support.fold_runs import run_fold
from tests.support.older_folds import PRE_TRENDING_COMMIT, older_fold, run_pre_trending_fold
from tests.support.resources import new_resources
from tests.support.trending_ledger import VoteLedger, assert_hot_answer, stale_keys, unfenced
from upvotes.operations import hot_backfill
from upvotes.operations.provision import provision_spanner

BEFORE = Path(__file__).parent / "fixtures" / "posts_before_issue_44.sql"
NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
PATIENT = RetryPolicy(attempts=200, first_delay_s=0.001, max_delay_s=0.05)
HALF_LIFE_HOURS = 12.0
SMALL = "small"  # one vote, the lowest key of the catalogue: left out of the index's top K+m


def catalogue(rng: random.Random, posts: int) -> list[PostDelta]:
    """`posts` posts of 20 to 300 upvotes over the last 30 hours, and SMALL with one vote."""
    deltas = [
        PostDelta.of(
            f"p-{i:02}",
            NOW_HOUR - 3600 * rng.randint(0, 30),
            f"cat:{i}:{j}",
            upvotes=rng.randint(10, 150),
            downvotes=rng.randint(0, 5),
            events=1,
        )
        for i in range(posts)
        for j in range(2)
    ]
    return deltas + [PostDelta.of(SMALL, NOW_HOUR - 3600 * 20, "cat:small", upvotes=1, events=1)]


def write(database, ledger: VoteLedger, deltas: list[PostDelta]) -> None:
    run_with_retries(lambda: write_new_deltas(database, deltas), PATIENT)
    ledger.add_deltas(deltas)


def settings(database):
    with database.snapshot() as snapshot:
        return read_settings(snapshot)


def test_an_older_fold_after_the_backfill_never_leaves_a_certified_hot_answer_wrong(stack) -> None:
    """The issue's reproduction: 30 posts folded by this version, then +500 on a small post folded
    by an older fold: the pre-trending one would leave its key at 1 vote while its hourly rows hold
    501; the one before this version keeps the key, but not the fence. Both are fenced off."""
    database = open_database(stack.project, stack.instance, stack.database)
    ledger = VoteLedger()
    write(database, ledger, catalogue(random.Random(44), 30))
    run_fold(stack)
    top = hot_top(database, 10)
    assert top.exact and SMALL not in [p.totals.post_id for p in top.posts]
    assert_hot_answer(top, ledger, HALF_LIFE_HOURS, 10, "folded by this version")

    write(database, ledger, [PostDelta.of(SMALL, NOW_HOUR, "viral:small", upvotes=500, events=500)])
    for writes_hot_key, fold in ((False, "the pre-trending fold"), (True, "the fold before issue 44")):
        skipped = older_fold(database, writes_hot_key)
        top = hot_top(database, 10)
        assert_hot_answer(top, ledger, HALF_LIFE_HOURS, 10, f"after {fold}")
        assert top.posts[0].totals.post_id == SMALL and top.exact  # its run skipped it: considered
        # Fenced: its transaction failed on the constraint, nothing of it was folded, and it is listed.
        assert [(post.post_id, "HotKeyCurrent" in post.error) for post in skipped] == [(SMALL, True)], fold
        assert {t.post_id: t.counts for t in exact_counts(database, ledger.totals())} == ledger.totals()
        assert stale_keys(database, HALF_LIFE_HOURS) == {} and unfenced(database) == {}

    # This version's next fold folds it: key and fence move with its hourly rows.
    assert run_fold(stack).posts_folded == 1
    assert stale_keys(database, HALF_LIFE_HOURS) == {} and unfenced(database) == {}
    top = hot_top(database, 10)
    assert top.exact and top.posts[0].totals.post_id == SMALL
    assert_hot_answer(top, ledger, HALF_LIFE_HOURS, 10, "folded again by this version")


def test_the_pre_trending_fold_itself_skips_every_fenced_post(stack) -> None:
    """The real fold of the commit before issue 36, in a subprocess, on the same reproduction."""
    res = new_resources("fencereal")
    provision_spanner(res, False, "unused", lambda _: None, hot_half_life_hours=HALF_LIFE_HOURS)
    database = open_database(res.project, res.instance, res.database)
    ledger = VoteLedger()
    write(database, ledger, catalogue(random.Random(45), 30))
    run_fold(res)
    write(
        database,
        ledger,
        [
            PostDelta.of(SMALL, NOW_HOUR, "viral:small", upvotes=500, events=500),
            PostDelta.of("p-03", NOW_HOUR, "more:p-03", upvotes=2, events=2),
        ],
    )
    folded = run_pre_trending_fold(res)
    if folded is None:
        pytest.skip(f"git or commit {PRE_TRENDING_COMMIT} not available to run the pre-trending fold")
    top = hot_top(database, 10)
    assert_hot_answer(top, ledger, HALF_LIFE_HOURS, 10, f"after the fold of {PRE_TRENDING_COMMIT}")
    assert top.exact and top.posts[0].totals.post_id == SMALL
    assert (folded["posts_folded"], folded["posts_skipped"]) == (0, 2)
    assert stale_keys(database, HALF_LIFE_HOURS) == {} and unfenced(database) == {}
    assert run_fold(res).posts_folded == 2 and stale_keys(database, HALF_LIFE_HOURS) == {}
    assert hot_top(database, 10).exact


def test_provision_fences_a_database_of_the_schema_before_this_change(stack, monkeypatch) -> None:
    """A database as the previous version left it (tests/fixtures/posts_before_issue_44.sql, its
    provision's settings, posts folded by its fold), the pre-trending fold still scheduled: provision
    adds the column (NULL in every existing row), the constraint and the default (new rows fenced
    from birth), and its backfill fences every post. An older fold before the backfill reaches a
    post folds it (unfenced); one after skips it."""
    res = new_resources("fencemig")
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(
        res.database, ddl_statements=statements_of(BEFORE.read_text(encoding="utf-8"))
    ).create().result(300)
    database = open_database(res.project, res.instance, res.database)

    def record_settings(batch) -> None:
        record_setting(batch, HALF_LIFE, HALF_LIFE_HOURS)
        record_setting(batch, BACKFILLED, 1.0)

    commit_mutations(database, record_settings)
    ledger = VoteLedger()
    deltas = catalogue(random.Random(46), 12)
    write(database, ledger, deltas)
    assert older_fold(database, writes_hot_key=True) == []  # the previous version's fold
    posts = sorted({d.post_id for d in deltas}, key=post_key)  # the backfill's order
    monkeypatch.setattr(hot_backfill, "PAGE", 4)
    real_pages = hot_backfill._pages
    seen: list[dict] = []

    def pages_raced_by_the_older_fold(db):
        """Before the backfill's first page is written, and before its second, votes on the
        first post (in its first page) and the last (in its last page), then the pre-trending fold."""
        for number, page in enumerate(real_pages(db)):
            if number < 2:
                write(
                    database,
                    ledger,
                    [
                        PostDelta.of(post, NOW_HOUR, f"mid:{number}:{post}", upvotes=30, events=30)
                        for post in (posts[0], posts[-1])
                    ],
                )
                seen.append(
                    {
                        "top_exact": hot_top(database, 5).exact,
                        "unfenced": len(unfenced(database)),
                        "skipped": [p.post_id for p in older_fold(database)],
                    }
                )
            yield page

    monkeypatch.setattr(hot_backfill, "_pages", pages_raced_by_the_older_fold)
    logged: list[str] = []
    provision_spanner(res, False, "unused", logged.append)
    assert {
        "added   column Posts.HotKeyThrough TIMESTAMP",
        "added   constraint Posts.HotKeyCurrent",
        'set     default Posts.HotKeyThrough (TIMESTAMP "1970-01-01T00:00:00Z")',
    } <= set(logged), logged
    # Not certified until the backfill ends; every existing row unfenced, so the first older fold
    # folds both posts; by the second, the first page's posts are fenced: it skips the first.
    assert seen[0] == {"top_exact": False, "unfenced": len(posts), "skipped": []}, seen
    assert not seen[1]["top_exact"] and seen[1]["skipped"] == [posts[0]], seen
    assert settings(database) == (HALF_LIFE_HOURS, True, 1)
    assert stale_keys(database, HALF_LIFE_HOURS) == {} and unfenced(database) == {}
    assert {t.post_id: t.counts for t in exact_counts(database, ledger.totals())} == ledger.totals()
    top = hot_top(database, 5)
    assert top.exact
    assert_hot_answer(top, ledger, HALF_LIFE_HOURS, 5, "migrated")

    # A row written from now on takes the default: fenced from birth, so an older fold skips it.
    commit_mutations(
        database,
        lambda batch: batch.insert_or_update(POSTS, columns=POST_KEY_COLUMNS, values=[post_key("born-fenced")]),
    )
    assert "born-fenced" not in unfenced(database)
    write(database, ledger, [PostDelta.of("born-fenced", NOW_HOUR, "born:0", upvotes=3, events=3)])
    assert sorted(p.post_id for p in older_fold(database)) == sorted(["born-fenced", posts[0]])
    run_fold(res)
    assert stale_keys(database, HALF_LIFE_HOURS) == {} and unfenced(database) == {}
    assert_hot_answer(hot_top(database, 5), ledger, HALF_LIFE_HOURS, 5, "after this version's fold")
    again: list[str] = []
    provision_spanner(res, False, "unused", again.append)
    assert not [line for line in again if line.startswith(("added", "created", "dropped", "set", "recorded"))], again
    assert settings(database) == (HALF_LIFE_HOURS, True, 1)
