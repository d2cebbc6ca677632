"""What is viral now, everywhere a user reads a top list (issue 36): `upvotes top --by hot` and
`--last 24h` (and `--watch`), CountsReader.hot_top and window_top (cached, single flight), and
GET /v1/top?by=hot and ?last=24h, on the Spanner emulator. The rankings themselves are tested in
tests/test_trending.py; here, that each surface shows them whole and refuses bad input.

The module's database holds four posts whose three rankings all differ (NOW_HOUR: the hour the
module started):

    post          votes                            all time   hot (H = 12 h)   last 24 h
    old-giant     400 up, 72 hours ago             400 (1st)  400 / 64 (4th)   none
    yesterday     100 up, 20 hours ago             100 (2nd)  100 / 3.17 (2nd) 100 (1st)
    mixed         60 up and 50 down, this hour      60 (3rd)  10 (3rd)         60 (2nd)
    fresh-riser   40 up, this hour                  40 (4th)  40 (1st)         40 (3rd)
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest
from google.cloud import spanner

from schemas.counters import Counts
from schemas.hot_score import DEFAULT_HALF_LIFE_HOURS, HOUR_S
from schemas.records import PostDelta
from spanner_reads.counts_reader import CountsReader
from spanner_reads.rankings import hot, last_hours
from spanner_reads.trending import HotRankingUnavailable
from spanner_reads.views import DEFAULT_VIEWS
from spanner_store.database import open_database
from spanner_store.ranking_settings import HALF_LIFE
from spanner_store.tables import RANKING_SETTINGS
from spanner_writes.deltas import write_deltas
from tests.support.polling import wait_until
from tests.support.resources import new_resources
from upvotes import argument_types
from upvotes.cli import main
from upvotes.commands import top as top_command
from upvotes.operations.provision import DEFAULT_INSTANCE_CONFIG, provision_spanner
from upvotes.serving.service import ServiceSettings, create_app, start_in_background
from upvotes.serving.user_votes import SpannerVoteReader

NOW_HOUR = int(datetime.now(timezone.utc).timestamp()) // HOUR_S * HOUR_S
H = DEFAULT_HALF_LIFE_HOURS
CALLERS = 32
TOKEN = "trending surfaces token " + "x" * 16
# (post, hours ago, upvotes, downvotes)
VOTES = [("old-giant", 72, 400, 0), ("yesterday", 20, 100, 0), ("mixed", 0, 60, 50), ("fresh-riser", 0, 40, 0)]
ALL_TIME = ["old-giant", "yesterday", "mixed", "fresh-riser"]
HOT = ["fresh-riser", "yesterday", "mixed", "old-giant"]
LAST_24H = ["yesterday", "mixed", "fresh-riser"]
COUNTS = {post: Counts(upvotes=up, downvotes=down) for post, _, up, down in VOTES}


def hot_at(post: str, as_of: str) -> float:
    """The post's hot score at `as_of`, by the definition: its one hour's net, 2^(-age / H)."""
    _, hours_ago, up, down = next(v for v in VOTES if v[0] == post)
    age_h = (datetime.fromisoformat(as_of).timestamp() - (NOW_HOUR - hours_ago * HOUR_S)) / HOUR_S
    return (up - down) * 2.0 ** (-age_h / H)


class FakeClock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def voted(stack, database):
    """The module's database with the four posts of the table above, one commit each."""
    for i, (post, hours_ago, up, down) in enumerate(VOTES):
        write_deltas(
            database,
            [PostDelta.of(post, NOW_HOUR - hours_ago * HOUR_S, f"v:{i}", upvotes=up, downvotes=down, events=up + down)],
        )
    return stack, database


def top_lines(stack, *flags: str, capsys) -> tuple[list[dict], str]:
    assert (
        main(
            [
                "top",
                f"--project={stack.project}",
                f"--instance={stack.instance}",
                f"--database={stack.database}",
                *flags,
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines()], captured.err


# --- upvotes top ---------------------------------------------------------------------------


def test_top_by_hot_prints_each_posts_hot_score_and_the_all_time_fields(voted, capsys) -> None:
    stack, _ = voted
    lines, summary = top_lines(stack, "--by", "hot", "-n", "3", capsys=capsys)
    assert [(line["rank"], line["post_id"]) for line in lines] == list(enumerate(HOT[:3], 1))
    for line in lines:
        assert {k: line[k] for k in Counts._fields} == COUNTS[line["post_id"]]._asdict()
        assert line["hot"] == pytest.approx(hot_at(line["post_id"], line["as_of"]), rel=1e-9)
        assert (line["by"], line["half_life_hours"], line["exact"], line["folded_through"]) == ("hot", H, True, None)
    assert len({line["as_of"] for line in lines}) == 1  # one snapshot
    assert summary.startswith(f"ranked by hot score (half-life {H:g} h); exact counts as of {lines[0]['as_of']}")
    assert "certified exact" in summary


def test_top_last_24h_prints_the_window_upvotes_and_leaves_out_posts_without_any(voted, capsys) -> None:
    stack, _ = voted
    lines, summary = top_lines(stack, "--last", "24h", capsys=capsys)
    assert [(line["rank"], line["post_id"], line["window_upvotes"]) for line in lines] == [
        (1, "yesterday", 100),
        (2, "mixed", 60),
        (3, "fresh-riser", 40),
    ]
    for line in lines:
        assert {k: line[k] for k in Counts._fields} == COUNTS[line["post_id"]]._asdict()
        assert (line["by"], line["last_hours"], line["exact"]) == ("last", 24, True)
        assert line["as_of"] == lines[0]["as_of"] and "folded_through" in line
    assert summary.startswith("ranked by upvotes in the last 24 h; exact counts as of ")
    # One day is 24 hours; a window of 2 hours holds this hour and the last: only this hour's posts.
    assert [line["post_id"] for line in top_lines(stack, "--last", "1d", capsys=capsys)[0]] == LAST_24H
    two_hours, _ = top_lines(stack, "--by", "upvotes", "--last", "2h", capsys=capsys)
    assert [(line["post_id"], line["last_hours"]) for line in two_hours] == [("mixed", 2), ("fresh-riser", 2)]


def test_top_by_upvotes_is_todays_list(voted, capsys) -> None:
    stack, _ = voted
    default, summary = top_lines(stack, capsys=capsys)
    explicit, _ = top_lines(stack, "--by", "upvotes", capsys=capsys)
    for lines in (default, explicit):
        assert [line["post_id"] for line in lines] == ALL_TIME
        assert set(lines[0]) == {"rank", "post_id", *Counts._fields, "as_of", "exact", "folded_through"}
    assert summary.startswith("exact counts as of ")


@pytest.mark.parametrize(
    "flags, shown",
    [
        (["--by", "hot"], ["top 2 posts by hot score (half-life 12 h)", "hot"]),
        (["--last", "24h"], ["top 2 posts by upvotes in the last 24 h", "last 24h"]),
        ([], ["top 2 posts by upvotes; exact counts as of"]),
    ],
)
def test_watch_draws_the_table_of_each_ranking(voted, monkeypatch, capsys, flags, shown) -> None:
    stack, _ = voted

    def stop(_seconds: float) -> None:  # the first redraw is enough: Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(top_command.time, "sleep", stop)
    assert (
        main(
            [
                "top",
                f"--project={stack.project}",
                f"--instance={stack.instance}",
                f"--database={stack.database}",
                "-n",
                "2",
                "--watch",
                *flags,
            ]
        )
        == 130
    )
    table = capsys.readouterr().out
    for text in shown:
        assert text in table
    rows = [line.split() for line in table.splitlines() if line.strip()[:1].isdigit()]
    expected = {"--by": HOT, "--last": LAST_24H}.get(flags[0] if flags else "", ALL_TIME)[:2]
    assert [row[1] for row in rows] == expected
    if flags == ["--last", "24h"]:
        assert [row[2] for row in rows] == ["100", "60"]  # the window's upvotes, then the counters


def test_top_by_hot_pages_through_the_published_hot_view(voted, capsys) -> None:
    stack, _ = voted
    assert (
        main(
            [
                "publish-top-view",
                f"--project={stack.project}",
                f"--instance={stack.instance}",
                f"--database={stack.database}",
                "--by",
                "hot",
                "-k",
                "3",
            ]
        )
        == 0
    )
    published = json.loads(capsys.readouterr().out)
    assert published["view"] == DEFAULT_VIEWS["hot"]
    lines, header = top_lines(stack, "--by", "hot", "--page", "1", "--page-size", "2", capsys=capsys)
    assert [(line["version"], line["rank"], line["post_id"]) for line in lines] == [
        (published["version"], 1, HOT[0]),
        (published["version"], 2, HOT[1]),
    ]
    assert f"view {DEFAULT_VIEWS['hot']} version {published['version']}" in header and "page 1 of 2" in header
    # Without --by hot, the upvotes view, which nobody published here.
    assert (
        main(
            [
                "top",
                f"--project={stack.project}",
                f"--instance={stack.instance}",
                f"--database={stack.database}",
                "--page",
                "1",
            ]
        )
        == 1
    )
    assert f"view {DEFAULT_VIEWS['upvotes']} has no published version" in capsys.readouterr().err


@pytest.mark.parametrize("text, hours", [("24h", 24), ("1h", 1), ("7d", 168), ("30d", 720), ("720h", 720), ("2D", 48)])
def test_last_takes_hours_or_days(text: str, hours: int) -> None:
    assert argument_types.parsed_by(last_hours.hours_of)(text) == hours == last_hours.hours_of(text)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("0h", "1 to 720 hours"),
        ("721h", "1 to 720 hours (30d), not '721h' (721 hours)"),
        ("31d", "744 hours"),
        ("24", "written like 24h or 7d"),
        ("1.5d", "written like 24h or 7d"),
        ("-3h", "written like 24h or 7d"),
        ("24m", "written like 24h or 7d"),
        ("", "written like 24h or 7d"),
    ],
)
def test_a_bad_last_is_a_usage_error_that_says_how_to_write_it(capsys, text: str, reason: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["top", "--project=p", "--instance=i", "--database=d", f"--last={text}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --last" in err and reason in err and "Traceback" not in err


def test_last_with_by_hot_and_trending_pages_are_refused(capsys) -> None:
    flags = ["top", "--project=p", "--instance=i", "--database=d"]
    assert main([*flags, "--by", "hot", "--last", "24h"]) == 2
    assert "use --by hot or --last, not both" in capsys.readouterr().err
    assert main([*flags, "--last", "24h", "--page", "2"]) == 2
    assert "not with --last" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, "--by", "views"])
    assert exit_info.value.code == 2 and "invalid choice: 'views'" in capsys.readouterr().err


# --- CountsReader --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hot", "last"])
def test_concurrent_callers_of_a_trending_list_share_one_spanner_read_per_refresh(voted, kind: str) -> None:
    _, database = voted
    clock = FakeClock()
    reader = CountsReader(database, refresh_s=1.0, clock=clock)
    read = (lambda: reader.hot_top(3)) if kind == "hot" else (lambda: reader.window_top(3, 24))
    start = threading.Barrier(CALLERS)
    answers = []

    def call() -> None:
        start.wait()
        answers.append(read())

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == CALLERS and reader.spanner_reads == 1
    assert all(answer is answers[0] for answer in answers)
    expected = HOT[:3] if kind == "hot" else LAST_24H
    assert [post.totals.post_id for post in answers[0].posts] == expected and answers[0].exact
    assert answers[0].by == kind

    write_deltas(database, [PostDelta.of("fresh-riser", NOW_HOUR, f"cache:{kind}", upvotes=1_000, events=1_000)])
    try:
        clock.now += 0.5  # within the refresh interval: the cached answer, no read
        assert read() is answers[0] and reader.spanner_reads == 1
        clock.now += 0.6  # past it: one read, which sees the new votes
        refreshed = read()
        assert reader.spanner_reads == 2 and refreshed.as_of > answers[0].as_of
        assert refreshed.posts[0].totals.post_id == "fresh-riser"
        assert refreshed.posts[0].totals.counts.upvotes == 1_040
    finally:  # the module's table again
        write_deltas(database, [PostDelta.of("fresh-riser", NOW_HOUR, f"undo:{kind}", upvotes=-1_000, events=1_000)])


def test_each_ranking_kind_n_and_window_is_cached_apart(voted) -> None:
    _, database = voted
    reader = CountsReader(database, refresh_s=60.0, clock=FakeClock())
    answers: list[Any] = [
        reader.top(3),
        reader.hot_top(3),
        reader.window_top(3, 24),
        reader.window_top(3, 48),
        reader.hot_top(2),
        reader.window_top(2, 24),
    ]
    assert reader.spanner_reads == len(answers)
    assert [
        reader.top(3),
        reader.hot_top(3),
        reader.window_top(3, 24),
        reader.window_top(3, 48),
        reader.hot_top(2),
        reader.window_top(2, 24),
    ] == answers
    assert reader.spanner_reads == len(answers)
    assert [p.post_id for p in answers[0].posts] == ALL_TIME[:3]
    assert [p.totals.post_id for p in answers[1].posts] == HOT[:3]
    assert (answers[2].hours, answers[3].hours) == (24, 48)
    with pytest.raises(ValueError, match="1 to 720 hours"):
        reader.window_top(3, 721)
    assert reader.spanner_reads == len(answers)  # refused before any read


def test_the_reader_reads_trending_lists_with_its_staleness_and_top_extra(voted, monkeypatch) -> None:
    _, database = voted
    calls = []

    def spy(read):
        def wrapped(*args):
            calls.append((read.__name__, args[1:]))
            return read(*args)

        return wrapped

    monkeypatch.setattr(hot, "hot_top", spy(hot.hot_top))
    monkeypatch.setattr(last_hours, "window_top", spy(last_hours.window_top))
    stale = CountsReader(database, staleness_s=2.0, refresh_s=0.0, top_extra=7)
    strong = CountsReader(database, refresh_s=0.0)

    def stale_sees_the_half_life() -> bool:  # recorded by provision, maybe less than 2 s ago
        try:
            return bool(stale.hot_top(2))
        except HotRankingUnavailable:
            return False

    wait_until(stale_sees_the_half_life, 30, "the half-life 2 s in the past", poll_s=0.1)
    calls.clear()
    past, now = stale.hot_top(2), strong.hot_top(2)
    assert (now.as_of - past.as_of).total_seconds() >= 2.0 - 0.05  # exact staleness: 2 s behind
    window = stale.window_top(2, 12)
    assert window.as_of < strong.window_top(2, 12).as_of
    assert calls[0] == ("hot_top", (2, 7, 2.0)) and calls[2] == ("window_top", (2, 12, 7, 2.0))
    assert calls[1] == ("hot_top", (2, 20, 0.0))  # the default top_extra, DEFAULT_EXTRA


# --- GET /v1/top ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(voted):
    stack, database = voted
    settings = ServiceSettings(write_tokens=(TOKEN,))
    reader = CountsReader(database, refresh_s=0.0)
    running = start_in_background(create_app(reader, SpannerVoteReader(database), None, settings), settings)
    with httpx.Client(base_url=running.url, timeout=30) as http:
        yield http
    running.stop()


def test_top_by_hot_over_http(client) -> None:
    response = client.get("/v1/top", params={"by": "hot", "n": 3})
    assert response.status_code == 200, response.text
    top = response.json()
    assert [post["post_id"] for post in top["posts"]] == HOT[:3]
    for post in top["posts"]:
        assert post == {"post_id": post["post_id"], **COUNTS[post["post_id"]]._asdict(), "hot": post["hot"]}
        assert post["hot"] == pytest.approx(hot_at(post["post_id"], top["as_of"]), rel=1e-9)
    assert (top["by"], top["exact"], top["half_life_hours"], top["folded_through"]) == ("hot", True, H, None)
    assert {"bound", "considered", "candidate_rows"} <= set(top) and "hours" not in top


def test_top_of_the_last_hours_over_http(client) -> None:
    top = client.get("/v1/top", params={"last": "24h", "n": 10}).json()
    assert [(post["post_id"], post["window_upvotes"]) for post in top["posts"]] == [
        ("yesterday", 100),
        ("mixed", 60),
        ("fresh-riser", 40),
    ]
    assert top["posts"][1] == {"post_id": "mixed", **COUNTS["mixed"]._asdict(), "window_upvotes": 60}
    assert (top["by"], top["hours"], top["exact"]) == ("last", 24, True) and top["as_of"].startswith("20")
    assert "half_life_hours" not in top
    two = client.get("/v1/top", params={"last": "2h", "by": "upvotes", "n": 1}).json()
    assert ([post["post_id"] for post in two["posts"]], two["hours"]) == (["mixed"], 2)
    assert client.get("/v1/top", params={"last": "1d"}).json()["hours"] == 24


def test_top_without_by_or_with_by_upvotes_is_todays_answer(client) -> None:
    for params in ({"n": 4}, {"n": 4, "by": "upvotes"}):
        top = client.get("/v1/top", params=params).json()
        assert set(top) == {"posts", "as_of", "exact", "bound", "folded_through"}
        assert [post["post_id"] for post in top["posts"]] == ALL_TIME
        assert top["posts"][0] == {"post_id": "old-giant", **COUNTS["old-giant"]._asdict()}


@pytest.mark.parametrize(
    "params, reason",
    [
        ({"by": "views"}, "query.by"),
        ({"by": "HOT"}, "query.by"),
        ({"by": "hot", "last": "24h"}, "not both"),
        ({"last": "721h"}, "1 to 720 hours"),
        ({"last": "31d"}, "744 hours"),
        ({"last": "0h"}, "1 to 720 hours"),
        ({"last": "24"}, "written like 24h or 7d"),
        ({"last": ""}, "written like 24h or 7d"),
        ({"last": "9" * 40 + "h"}, "query.last"),
        ({"by": "hot", "n": 0}, "query.n"),
        ({"last": "24h", "n": 1001}, "query.n"),
    ],
)
def test_bad_trending_parameters_answer_400_with_a_reason(client, params: dict, reason: str) -> None:
    response = client.get("/v1/top", params=params)
    assert response.status_code == 400, (params, response.text)
    assert response.headers["content-type"] == "application/json"
    assert reason in response.json()["error"] and "Traceback" not in response.text


def test_the_trending_routes_are_cached_with_single_flight(voted) -> None:
    """Many requests within the refresh interval: one Spanner read per ranking."""
    _, database = voted
    settings = ServiceSettings(write_tokens=(TOKEN,))
    clock = FakeClock()
    reader = CountsReader(database, refresh_s=1.0, clock=clock)
    running = start_in_background(create_app(reader, SpannerVoteReader(database), None, settings), settings)
    try:
        with httpx.Client(base_url=running.url, timeout=30) as http:
            queries: list[dict[str, str | int]] = [
                {"by": "hot", "n": 3},
                {"last": "24h", "n": 3},
                {"last": "1d", "n": 3},
            ]
            answers = [http.get("/v1/top", params=params).json() for params in queries * 5]
            assert http.get("/healthz").json()["spanner_reads"] == 2  # 24h and 1d: one window
            assert reader.spanner_reads == 2
            assert len({answer["as_of"] for answer in answers}) == 2
            clock.now += 1.1
            assert http.get("/v1/top", params={"by": "hot", "n": 3}).json()["as_of"] > answers[0]["as_of"]
            assert reader.spanner_reads == 3
    finally:
        running.stop()


def test_hot_without_a_recorded_half_life_is_503_saying_to_provision(emulator_env, capsys) -> None:
    """A database from before the hot ranking (no half-life recorded): the HTTP route answers 503
    and the command one line, both saying to run `upvotes provision`."""
    resources = new_resources("nohot")
    provision_spanner(resources, False, DEFAULT_INSTANCE_CONFIG, lambda _: None)
    database = open_database(resources.project, resources.instance, resources.database)
    database.run_in_transaction(lambda t: t.delete(RANKING_SETTINGS, spanner.KeySet(keys=[[HALF_LIFE]])))
    reader = CountsReader(database, refresh_s=60.0, clock=FakeClock())
    with pytest.raises(HotRankingUnavailable):
        reader.hot_top(3)
    settings = ServiceSettings(write_tokens=(TOKEN,))
    running = start_in_background(create_app(reader, SpannerVoteReader(database), None, settings), settings)
    try:
        response = httpx.get(running.url + "/v1/top", params={"by": "hot"})
        assert response.status_code == 503 and "upvotes provision" in response.json()["error"]
        assert reader.spanner_reads == 2  # a failed read is not cached
        assert httpx.get(running.url + "/v1/top", params={"last": "24h"}).json()["posts"] == []
    finally:
        running.stop()
    assert (
        main(
            [
                "top",
                f"--project={resources.project}",
                f"--instance={resources.instance}",
                f"--database={resources.database}",
                "--by",
                "hot",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("upvotes: this database has no hot half-life recorded: run `upvotes provision`")
