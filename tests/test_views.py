"""Versioned top-posts views on the Spanner emulator: stable pages, small versions, expiry,
an atomic switch, and one publisher at a time.

Each test gets its own database, so rankings never mix. The first test moves counts with
real deltas and FoldDeltas; the others set folded counts in Posts directly (the view reads
only Posts through PostsByUpvotes), which keeps the module fast and the rankings exact.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.spanner_v1 import param_types

from schemas import post_hash
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_reads import views as leaderboard
from spanner_reads.reads import top_posts
from spanner_reads.views import (
    LeaseLost,
    NoActiveVersion,
    NotCertified,
    PublishInProgress,
    StoredRow,
    VersionNotAvailable,
    ViewRow,
    ViewVersion,
    expire_versions,
    plan_version,
    publish_top_view,
    read_top_page,
)
from spanner_store.database import open_database
from spanner_writes.deltas import write_deltas
from tests.support.fold_runs import run_fold as fold
from tests.support.polling import wait_until
from tests.support.resources import new_resources
from upvotes.cli import build_parser, main
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner

HOUR = 1_795_312_800


@pytest.fixture
def fresh(emulator_env):
    """A database of its own for one test."""
    resources = new_resources("lb")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    return resources, open_database(resources.project, resources.instance, resources.database)


def set_counts(database, counts: dict[str, tuple[int, int]]) -> None:
    """Sets posts' folded counts, as a fold would leave them."""
    rows = [(post_hash(p), p, up, sh) for p, (up, sh) in counts.items()]
    with database.batch() as batch:
        batch.insert_or_update("Posts", columns=("PostHash", "PostId", "Upvotes", "Shares"), values=rows)


def expected_top(database, k: int) -> list[ViewRow]:
    """The live ranking (`upvotes top`); counts in these tests are distinct, so ties never decide."""
    posts = top_posts(database, k).posts
    assert len({p.counts.upvotes for p in posts}) == len(posts)
    return [ViewRow(rank, p.post_id, p.counts) for rank, p in enumerate(posts, 1)]


def all_pages(database, version: int | None, page_size: int) -> list[ViewRow]:
    first = read_top_page(database, version, 1, page_size)
    rows = list(first.rows)
    for page in range(2, first.pages + 1):
        rows += read_top_page(database, first.version, page, page_size).rows
    return rows


def stored_rows(database, view: str = leaderboard.DEFAULT_VIEW) -> list[tuple]:
    with database.snapshot() as snapshot:
        return [
            tuple(r)
            for r in snapshot.execute_sql(
                "SELECT Rank, ValidSince, InvalidSince FROM TopPostsViewRows WHERE ViewName = @v",
                params={"v": view},
                param_types={"v": param_types.STRING},
            )
        ]


def test_pages_of_a_version_stay_consistent_while_a_fold_publishes_the_next(fresh) -> None:
    resources, database = fresh
    # 30 posts with distinct totals: post i has 10 * (i + 1) upvotes.
    write_deltas(
        database, [PostDelta.of(f"c-{i}", HOUR, f"a:{i}", upvotes=10 * (i + 1), shares=i, events=1) for i in range(30)]
    )
    fold(resources)
    published = publish_top_view(database, k=20, batch_rows=7)
    v = published.version
    assert (v, published.rows_written, published.full_rewrite_rows) == (1, 20, 20)
    as_of_v = expected_top(database, 20)
    assert [r.post_id for r in as_of_v[:3]] == ["c-29", "c-28", "c-27"]

    page_1 = read_top_page(database, None, page=1, page_size=6)
    assert (page_1.version, page_1.pages, page_1.rows) == (v, 4, as_of_v[:6])

    # Posts from below the top 20 jump in, reshuffling every page; fold and publish V+1.
    write_deltas(
        database,
        [PostDelta.of(f"c-{i}", HOUR + 3600, f"b:{i}", upvotes=155 + 20 * i, shares=1, events=1) for i in range(8)],
    )
    fold(resources)
    next_version = publish_top_view(database, k=20, batch_rows=7)
    assert next_version.version == v + 1 and next_version.rows_written > 10
    as_of_next = expected_top(database, 20)
    assert as_of_next != as_of_v

    # The reader of V goes on with pages 2..4 of V: no duplicates, no gaps, exactly V's top 20.
    rest = [read_top_page(database, v, page, 6) for page in range(2, 5)]
    assert {p.version for p in rest} == {v}
    union = page_1.rows + [row for p in rest for row in p.rows]
    assert [r.rank for r in union] == list(range(1, 21))
    assert len({r.post_id for r in union}) == 20
    assert union == as_of_v
    assert read_top_page(database, v, 5, 6).rows == []  # past the end

    # A new reader gets V+1, whose pages are just as consistent.
    assert read_top_page(database, None, 1, 6).version == v + 1
    assert all_pages(database, None, 6) == as_of_next
    assert all_pages(database, v + 1, 7) == as_of_next


def test_an_incremental_version_writes_only_the_changed_ranks(fresh) -> None:
    _, database = fresh
    counts = {f"inc-{i:03d}": (1000 + 10 * i, i) for i in range(150)}  # rank r holds inc-(150 - r)
    set_counts(database, counts)
    full = publish_top_view(database, k=100)
    assert (full.version, full.rows_written, full.rows_retired, full.full_rewrite_rows) == (1, 100, 0, 100)
    assert all_pages(database, 1, 25) == expected_top(database, 100)

    # Counts of two posts change without reordering anything.
    set_counts(database, {"inc-147": (1000 + 10 * 147 + 3, 147), "inc-100": (1000 + 10 * 100, 999)})
    small = publish_top_view(database, k=100)
    assert (small.version, small.rows_written, small.rows_retired, small.full_rewrite_rows) == (2, 2, 2, 100)
    assert small.transactions <= 4  # lease, one batch, switch (+ nothing to expire)
    assert all_pages(database, 2, 25) == expected_top(database, 100)

    # One post climbs from rank 60 to rank 10: ranks 10..60 all change (50 posts move down one).
    set_counts(database, {"inc-090": (1000 + 10 * 140 + 5, 90)})
    climb = publish_top_view(database, k=100)
    assert (climb.version, climb.rows_written, climb.rows_retired) == (3, 51, 51)
    assert all_pages(database, 3, 25) == expected_top(database, 100)

    # Nothing changed: no new version at all.
    same = publish_top_view(database, k=100)
    assert (same.published, same.version, same.rows_written) == (False, 3, 0)

    # Three versions of 100 rows are stored in 153 rows, and each still reads whole.
    assert len(stored_rows(database)) == 100 + 2 + 51
    assert [len(all_pages(database, version, 30)) for version in (1, 2, 3)] == [100, 100, 100]
    print(
        f"\nrows written per version (full rewrite = {full.full_rewrite_rows}): first {full.rows_written}, "
        f"2 counts changed {small.rows_written}, one post climbed 50 ranks {climb.rows_written}, unchanged 0"
    )


def test_old_versions_expire_and_their_rows_are_deleted(fresh) -> None:
    _, database = fresh
    set_counts(database, {f"exp-{i}": (100 + 10 * i, 0) for i in range(30)})
    assert publish_top_view(database, k=10).version == 1

    set_counts(database, {"exp-29": (1000, 0), "exp-0": (995, 0)})  # rank 1 changes, exp-0 enters at 2
    second = publish_top_view(database, k=10, keep_versions_for_s=0)  # version 1 expires at once
    assert (second.version, second.versions_expired) == (2, 1)
    assert second.rows_deleted == second.rows_retired > 0  # the rows only version 1 used
    with pytest.raises(VersionNotAvailable):
        read_top_page(database, 1, 1, 10)
    assert all_pages(database, 2, 4) == expected_top(database, 10)
    assert all(invalid_since is None for _, _, invalid_since in stored_rows(database))

    set_counts(database, {"exp-1": (2000, 0)})
    clock = ManualClock()
    third = publish_top_view(database, k=10, keep_versions_for_s=1.0, clock=clock)
    assert (third.version, third.versions_expired, third.rows_deleted) == (3, 0, 0)
    assert len(read_top_page(database, 2, 1, 10, clock=clock).rows) == 10  # still readable within its second
    clock.advance(1.2)
    with pytest.raises(VersionNotAvailable):  # past ExpiresAt, even before anything is deleted
        read_top_page(database, 2, 1, 10, clock=clock)
    assert expire_versions(database, clock=clock)[:2] == (1, third.rows_retired)
    assert len(stored_rows(database)) == 10  # only version 3 is left
    with database.snapshot() as snapshot:
        versions = [r[0] for r in snapshot.execute_sql("SELECT Version FROM TopPostsVersions")]
    assert versions == [3]
    assert all_pages(database, None, 3) == expected_top(database, 10)
    with pytest.raises(VersionNotAvailable):
        read_top_page(database, 4, 1, 10)  # never published


def test_readers_see_the_old_or_the_new_complete_version_never_a_mix(fresh) -> None:
    resources, database = fresh
    with pytest.raises(NoActiveVersion):
        read_top_page(database, None, 1, 10)
    set_counts(database, {f"sw-{i}": (100 + i, i) for i in range(40)})
    assert publish_top_view(database, k=30).version == 1
    old = expected_top(database, 30)
    set_counts(database, {f"sw-{i}": (1000 - i, i) for i in range(40)})  # the order reverses: every rank changes
    reversed_rows = [ViewRow(r, f"sw-{r - 1}", Counts(upvotes=1000 - (r - 1), shares=r - 1)) for r in range(1, 31)]

    during: list[str] = []

    def watch(stage: str, n: int) -> None:  # runs after each committed step of the publication
        during.append(stage)
        if stage == "batch":
            page = read_top_page(database, None, 1, 30)
            assert (page.version, page.rows) == (1, old)  # part of version 2 is written: still the old set
            with pytest.raises(VersionNotAvailable):
                read_top_page(database, 2, 1, 30)  # the version being written is not readable

    seen: list[tuple[int, list[ViewRow]]] = []
    stop = threading.Event()

    def reader() -> None:  # a concurrent reader of the active version, on its own client
        own = open_database(resources.project, resources.instance, resources.database)
        while not stop.is_set():
            page = read_top_page(own, None, 1, 30)
            seen.append((page.version, page.rows))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        wait_until(
            lambda: seen, 60, "the reader's first page", poll_s=0.05
        )  # it reads version 1 before the publication starts
        second = publish_top_view(database, k=30, batch_rows=4, progress=watch)
        wait_until(lambda: any(v == 2 for v, _ in seen), 60, "the reader to see version 2", poll_s=0.05)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert (second.version, second.rows_written, second.rows_retired) == (2, 30, 30)
    assert during.count("batch") == 15  # 60 row writes, 4 per transaction
    assert {v for v, _ in seen} == {1, 2}
    for version, rows in seen:
        assert rows == (old if version == 1 else reversed_rows)
    assert all_pages(database, None, 30) == reversed_rows == expected_top(database, 30)
    assert all_pages(database, 1, 30) == old


class ManualClock:
    """The views' clock, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Crash(BaseException):
    """Stops a publisher the way a killed process would: nothing of ours runs after it."""


def test_one_publisher_at_a_time_and_a_crashed_publication_is_repaired(fresh) -> None:
    _, database = fresh
    set_counts(database, {f"ls-{i}": (100 + 10 * i, 0) for i in range(20)})
    publish_top_view(database, k=10)
    v1 = expected_top(database, 10)
    set_counts(database, {f"ls-{i}": (1000 + i, 1) for i in range(5)})  # ls-4..ls-0 take ranks 1..5

    def crash_after_first_batch(stage: str, n: int) -> None:
        if stage == "batch":
            with pytest.raises(PublishInProgress):
                publish_top_view(database, k=10)  # a second publisher must wait for the lease
            raise Crash()

    clock = ManualClock()
    with pytest.raises(Crash):
        publish_top_view(database, k=10, batch_rows=3, lease_s=0.5, progress=crash_after_first_batch, clock=clock)
    assert all_pages(database, None, 4) == v1  # the half-written version 2 is invisible
    assert any(valid_since == 2 for _, valid_since, _ in stored_rows(database))  # but partly there

    # Before anyone retries, ls-0..ls-4 fall back and only ls-10 (rank 10) changes. Once the
    # lease lapses, a new publisher takes over, deletes the crash's rows for ranks 1..3 (they
    # no longer fit) and publishes version 2 with the one changed rank.
    set_counts(database, {**{f"ls-{i}": (100 + 10 * i, 0) for i in range(5)}, "ls-10": (200, 7)})
    clock.advance(0.6)  # the crashed publisher's lease lapses
    retry = publish_top_view(database, k=10, batch_rows=3, clock=clock)
    assert (retry.version, retry.rows_written, retry.rows_retired, retry.rows_repaired) == (2, 1, 1, 3)
    assert all_pages(database, 2, 4) == expected_top(database, 10)
    assert all_pages(database, 1, 4) == v1
    rows = stored_rows(database)
    assert sum(valid_since == 2 for _, valid_since, _ in rows) == retry.rows_written  # no strays
    assert sum(invalid_since == 2 for _, _, invalid_since in rows) == retry.rows_retired

    # A publisher whose lease lapsed and was taken over stops at its next batch.
    set_counts(database, {f"ls-{i}": (3000 + i, 2) for i in range(10, 20)})
    calls: list[ViewVersion] = []

    def overtaken(stage: str, n: int) -> None:
        if stage == "batch" and not calls:
            calls.append(publish_top_view(database, k=10, batch_rows=3))  # takes over the lapsed lease

    with pytest.raises(LeaseLost):
        publish_top_view(database, k=10, batch_rows=3, lease_s=0.0, progress=overtaken)
    assert calls[0].version == 3
    assert all_pages(database, None, 4) == expected_top(database, 10)


def test_plan_reuses_and_undoes_a_crashed_attempts_rows() -> None:
    base, new = 4, 5
    stored = [
        StoredRow(1, 2, None, "a", Counts(upvotes=9)),  # unchanged
        StoredRow(2, 3, 5, "b", Counts(upvotes=8)),  # a crash retired it, but it is still rank 2: undo
        StoredRow(3, 1, None, "c", Counts(upvotes=7)),  # changes
        StoredRow(3, 5, None, "x", Counts(upvotes=6)),  # the crash's rank 3, wrong now: overwrite
        StoredRow(4, 4, 5, "d", Counts(upvotes=5)),  # retired by the crash, and rightly
        StoredRow(4, 5, None, "e", Counts(upvotes=4)),  # the crash's rank 4, right: reuse
        StoredRow(5, 5, None, "f", Counts(upvotes=3)),  # the crash's rank 5, not in the new ranking: delete
    ]
    ranking = [
        ("a", Counts(upvotes=9)),
        ("b", Counts(upvotes=8)),
        ("y", Counts(upvotes=7, shares=1)),
        ("e", Counts(upvotes=4)),
    ]
    plan = plan_version("v", stored, ranking, base, new)
    assert plan.upserts == [("v", 3, 5, None, "y", *Counts(upvotes=7, shares=1))]
    assert plan.updates == [("v", 2, 3, None), ("v", 3, 1, 5)]
    assert plan.deletes == [("v", 5, 5)]
    assert (plan.rows_written, plan.rows_retired, plan.rows_repaired) == (2, 2, 2)


def test_cli_subcommands(fresh, capsys) -> None:
    resources, database = fresh
    set_counts(database, {f"cli-{i}": (10 * i, i) for i in range(1, 8)})
    where = ["--project", resources.project, "--instance", resources.instance, "--database", resources.database]
    publish = ["publish-top-view"] + where + ["-k", "5", "--batch-rows", "2", "--keep-versions-seconds", "60"]
    args = build_parser().parse_args(publish)
    assert (args.k, args.view, args.by, args.batch_rows, args.keep_versions_seconds) == (5, None, "upvotes", 2, 60.0)
    assert main(publish) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["version"], report["rows_written"], report["full_rewrite_rows"]) == (1, 5, 5)

    assert main(["top"] + where + ["--version", "1", "--page-size", "2", "--page", "2"]) == 0
    out = capsys.readouterr()
    assert [json.loads(line) for line in out.out.splitlines()] == [
        {
            "version": 1,
            "rank": 3,
            "post_id": "cli-5",
            **Counts(upvotes=50, shares=5)._asdict(),
            "exact": True,
            "bound": None,
        },
        {
            "version": 1,
            "rank": 4,
            "post_id": "cli-4",
            **Counts(upvotes=40, shares=4)._asdict(),
            "exact": True,
            "bound": None,
        },
    ]
    assert "page 2 of 3" in out.err and "certified exact" in out.err
    assert main(["top"] + where + ["--version", "9"]) == 1
    assert "no version 9" in capsys.readouterr().err


def test_a_hot_view_ranks_by_hot_score_and_lives_beside_the_upvotes_view(fresh, capsys) -> None:
    """`publish-top-view --by hot`: yesterday's big post leads the upvotes view but not the hot one."""
    resources, database = fresh
    now_hour = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
    write_deltas(
        database,
        [
            PostDelta.of("yesterday", now_hour - 30 * 3600, "y", upvotes=100, events=100),
            PostDelta.of("today", now_hour, "t", upvotes=40, events=40),
            PostDelta.of("hour-ago", now_hour - 3600, "h", upvotes=30, events=30),
        ],
    )
    fold(resources)
    flags = [f"--project={resources.project}", f"--instance={resources.instance}", f"--database={resources.database}"]
    assert main(["publish-top-view", *flags, "-k", "3", "--by", "hot"]) == 0
    assert main(["publish-top-view", *flags, "-k", "3"]) == 0
    published = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["view"], p["version"], p["ranked_rows"]) for p in published] == [
        ("top-hot", 1, 3),
        ("top-upvotes", 1, 3),
    ]
    # 100 votes 30 hours ago weigh 100 / 2^2.5 = 17.7 now: below 40 now and 30 an hour ago (28.3).
    hot = read_top_page(database, None, 1, 10, view="top-hot").rows
    assert [(row.post_id, row.counts.upvotes) for row in hot] == [("today", 40), ("hour-ago", 30), ("yesterday", 100)]
    assert [row.post_id for row in read_top_page(database, None, 1, 10).rows] == ["yesterday", "today", "hour-ago"]
    with pytest.raises(ValueError, match="ranks by one of"):
        publish_top_view(database, k=3, by="shares")


def test_an_uncertified_ranking_is_never_published_as_certified(fresh, capsys, monkeypatch) -> None:
    """Issue 44, item 2: a commit that lists 16 new posts and raises an unlisted 17th past the folded
    leader. A read that cannot read that commit (no budget) is not certified, and its first post is
    not the true first: publishing it refuses, or, when allowed, stores and shows that it is not
    certified. A read that can (the default) is certified and right, and is published as such."""
    import functools

    from spanner_reads import trending
    from spanner_reads.rankings import hot
    from spanner_store.top_candidates import CANDIDATES_PER_COMMIT

    resources, database = fresh
    now_hour = int(datetime.now(timezone.utc).timestamp()) // 3600 * 3600
    write_deltas(database, [PostDelta.of(f"old-{i}", now_hour, f"a:{i}", upvotes=50 + i, events=1) for i in range(25)])
    fold(resources)
    risers = [
        PostDelta.of(f"new-{i:02}", now_hour, f"b:{i}", upvotes=60 + i, events=1) for i in range(CANDIDATES_PER_COMMIT)
    ]
    write_deltas(database, risers + [PostDelta.of("old-0", now_hour, "b:unlisted", upvotes=59, events=1)])
    # old-0 now has 109: the true first of both rankings, raised by a commit that does not list it.
    flags = [f"--project={resources.project}", f"--instance={resources.instance}", f"--database={resources.database}"]

    monkeypatch.setattr(hot, "hot_top", functools.partial(trending.hot_top, resolve_posts=0))
    assert not trending.hot_top(database, 3, resolve_posts=0).exact
    with pytest.raises(NotCertified, match="not certified"):
        publish_top_view(database, k=3, by="hot", view="top-hot")
    with pytest.raises(NoActiveVersion):
        read_top_page(database, None, 1, 10, view="top-hot")
    assert main(["publish-top-view", *flags, "-k", "3", "--by", "hot"]) == 1
    assert "--allow-uncertified" in capsys.readouterr().err

    allowed = publish_top_view(database, k=3, by="hot", view="top-hot", allow_uncertified=True)
    assert (allowed.version, allowed.certified) == (1, False) and allowed.bound is not None and allowed.bound > 0
    page = read_top_page(database, None, 1, 10, view="top-hot")
    assert (page.certified, page.bound) == (False, allowed.bound) and page.rows[0].post_id != "old-0"
    assert main(["top", *flags, "--by", "hot", "--page", "1"]) == 0
    shown = capsys.readouterr()
    assert all(json.loads(line)["exact"] is False for line in shown.out.splitlines())
    assert "NOT certified" in shown.err

    monkeypatch.undo()  # the default read: it reads the commit, finds old-0, and certifies
    certified = publish_top_view(database, k=3, by="hot", view="top-hot")
    assert (certified.version, certified.published, certified.certified) == (2, True, True)
    page = read_top_page(database, None, 1, 10, view="top-hot")
    assert page.certified and [row.post_id for row in page.rows][0] == "old-0"
    upvotes = publish_top_view(database, k=3)
    assert upvotes.certified and read_top_page(database, None, 1, 3).rows[0] == ViewRow(1, "old-0", Counts(upvotes=109))
    # Certified again with the same rows: nothing new to publish.
    assert not publish_top_view(database, k=3, by="hot", view="top-hot").published
