"""The live page in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium against `upvotes serve` and a running streaming pipeline on the emulators.

- A post's toggle upvotes as the page's session user, then takes the vote back: the exact count
  on the page goes up by one, then back; a reload of the page shows the vote the stream
  applied (read back through GET /v1/posts/{post}/votes/{user}).
- A hostile page, served from a second local origin (another port, under the names
  evil.localhost, which is cross-site, and 127.0.0.1, same-site but cross-origin, so the
  SameSite=Strict session cookie goes along), tries every request a page can make without
  the service's consent: fetch() with text/plain (no-cors), with application/json and with
  a guessed X-CSRF-Token header (both need a CORS preflight), a read of the live page, and
  <form> POSTs as text/plain, form-urlencoded and multipart. Nothing is published (an audit
  subscription on the topic sees only the page's own vote, a vote-state event of its session
  user), and the service counts each request that reached it as refused for its origin; the
  page's own toggle still counts.
- The service under a rebound name (evil.localhost on the service's own port) answers 421
  and sets no session.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
import uuid
from urllib.parse import quote

import httpx
import pytest

from schemas.records import PostDelta
from spanner_writes.deltas import write_deltas
from tests.support.polling import wait_until
from tests.support.topic_audit import TopicAudit
from upvotes.devtools import local_stream
from upvotes.serving.live_page import USER_META
from upvotes.serving.live_sessions import COOKIE
from upvotes.serving.serve_settings import ServiceSettings
from upvotes.serving.service import serve_in_background

WINDOW_S = 2
POST = "browser/post ☃"
SEEDED = 5
TYPED_POST = "typed/in the form"
TOKEN = "live-page-test-token-" + uuid.uuid4().hex
COUNTED_TIMEOUT_S = 120  # the first vote also waits for the DirectRunner to start pulling
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# What this machine's Chromium needs headless (no sandbox as root, no background connections
# to Google's hosts, which the closed network refuses); each browser gets a fresh profile.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1000,700",
)
HOSTILE_NAMES = ("evil.localhost", "127.0.0.1")
HOSTILE_POSTS = (
    "hostile-fetch-plain",
    "hostile-fetch-json",
    "hostile-fetch-csrf",
    "hostile-form-plain",
    "hostile-form-urlencoded",
    "hostile-form-multipart",
)
REQUESTS_REACHING_THE_SERVICE = 4  # the no-cors fetch and the three forms; the preflighted ones never POST

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs headless Chromium: apt-get install -y chromium chromium-driver (Debian packages)",
)


@pytest.fixture(scope="module")
def pipeline(stack, tmp_path_factory):
    process = local_stream.start(stack, WINDOW_S, tmp_path_factory.mktemp("stream") / "stream.log")
    yield process
    local_stream.stop(process)


@pytest.fixture(scope="module")
def service(stack, database, pipeline):
    write_deltas(database, [PostDelta.of(POST, 1_795_312_800, "seed:1", upvotes=SEEDED, events=SEEDED)])
    running = serve_in_background(
        stack.project,
        stack.instance,
        stack.database,
        stack.topic,
        ServiceSettings(write_tokens=(TOKEN,)),
        refresh_s=0.5,
    )
    yield running
    running.stop()


def hostile_page(target: str) -> str:
    """A page that tries to vote on (and read) the service at `target` from another origin."""

    def form(post_id: str, enctype: str, frame: str) -> str:
        event = json.dumps({"post_id": post_id, "counter": "upvotes", "delta": 1_000_000})
        # text/plain and urlencoded send name=value: a name ending in an open string and a value
        # closing it make the body valid JSON. Multipart gets the event as a field value.
        name, value = (event[:-1] + ', "pad": "', '"}') if enctype != "multipart/form-data" else ("vote", event)
        return (
            f'<form method="POST" action="{target}/v1/votes" enctype="{enctype}" target="{frame}">'
            f"<input name='{name}' value='{value}'></form><iframe name=\"{frame}\"></iframe>"
        )

    forms = (
        form("hostile-form-plain", "text/plain", "f1")
        + form("hostile-form-urlencoded", "application/x-www-form-urlencoded", "f2")
        + form("hostile-form-multipart", "multipart/form-data", "f3")
    )
    script = """
const target = "__TARGET__";
const vote = (id) => JSON.stringify({post_id: id, counter: "upvotes", delta: 1000000});
const post = (id, init) => fetch(target + "/v1/votes", {method: "POST", credentials: "include", body: vote(id), ...init});
const attempts = {
  "no-cors text/plain": post("hostile-fetch-plain", {mode: "no-cors", headers: {"Content-Type": "text/plain"}}),
  "application/json": post("hostile-fetch-json", {headers: {"Content-Type": "application/json"}}),
  "guessed csrf header": post("hostile-fetch-csrf", {headers: {"Content-Type": "application/json", "X-CSRF-Token": "guess"}}),
  "read the live page": fetch(target + "/", {credentials: "include"}).then((r) => r.text()),
};
let loaded = 0;
document.querySelectorAll("iframe").forEach((frame) => frame.addEventListener("load", () => { loaded += 1; }));
document.querySelectorAll("form").forEach((form) => form.submit());
Promise.allSettled(Object.values(attempts)).then((outcomes) => {
  const results = {};
  Object.keys(attempts).forEach((name, i) => {
    const outcome = outcomes[i];
    results[name] = outcome.status === "fulfilled" ? "fulfilled:" + (outcome.value.type || "text") : "rejected";
  });
  const finish = () => { document.getElementById("results").textContent = JSON.stringify({results, loaded}); };
  const wait = (tries) => (loaded >= 3 || tries <= 0) ? finish() : setTimeout(() => wait(tries - 1), 100);
  wait(100);
});
""".replace("__TARGET__", target)
    return f"<!doctype html><html><body><p id='results'></p>{forms}<script>{script}</script></body></html>"


@pytest.fixture(scope="module")
def hostile_server(service):
    """The hostile page on its own port of 127.0.0.1, whatever Host the browser names."""
    page = hostile_page(service.url).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS + (f"--user-data-dir={tmp_path / 'chromium-profile'}",):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def shown_upvotes(driver, post_id: str) -> int | None:
    """The upvotes the page shows for `post_id`, or None if it is not listed (rows are redrawn
    every poll, so a row found a moment ago may be gone: then look again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.post"):
            if row.find_element(By.CSS_SELECTOR, "td.post-id").text == post_id:
                return int(row.find_element(By.CSS_SELECTOR, "td.upvotes").text.replace(",", ""))
    except StaleElementReferenceException:
        return None
    return None


def toggle_label(driver, post_id: str) -> str | None:
    """The label of `post_id`'s toggle ("upvote", "upvoted", or "…" while its vote is read or
    sent), or None if the post is not listed (or its row was just redrawn)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.post"):
            if row.find_element(By.CSS_SELECTOR, "td.post-id").text == post_id:
                return row.find_element(By.CSS_SELECTOR, "button.vote").text
    except StaleElementReferenceException:
        return None
    return None


def click_toggle(driver, post_id: str, label: str) -> None:
    """Clicks `post_id`'s toggle once it shows `label` (its vote known, nothing in flight)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    wait_until(
        lambda: toggle_label(driver, post_id) == label, 30, f"the toggle of {post_id!r} to show {label!r}", poll_s=0.1
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            for row in driver.find_elements(By.CSS_SELECTOR, "tr.post"):
                if row.find_element(By.CSS_SELECTOR, "td.post-id").text == post_id:
                    row.find_element(By.CSS_SELECTOR, "button.vote").click()
                    return
        except StaleElementReferenceException:
            continue  # redrawn under us: find it again
    raise AssertionError(f"no toggle for {post_id!r}")


def page_user(driver) -> str:
    return driver.find_element("css selector", f'meta[name="{USER_META}"]').get_attribute("content")


def votes_published(audit: TopicAudit) -> list[dict]:
    return [json.loads(line) for m in audit.published_since() for line in m.data.split(b"\n") if line.strip()]


def test_the_toggle_upvotes_then_takes_the_vote_back(stack, service, browser, pipeline, tmp_path) -> None:
    audit = TopicAudit(stack.topic_path(stack.topic), stack.subscription_path(f"audit-{uuid.uuid4().hex[:8]}"))
    try:
        browser.get(service.url + "/")
        wait_until(lambda: shown_upvotes(browser, POST) == SEEDED, 30, "the seeded count on the page", poll_s=0.1)
        user = page_user(browser)

        click_toggle(browser, POST, "upvote")  # never voted: read back as "none"
        seconds = wait_until(
            lambda: shown_upvotes(browser, POST) == SEEDED + 1, COUNTED_TIMEOUT_S, "the upvote to count", poll_s=0.1
        )
        wait_until(lambda: toggle_label(browser, POST) == "upvoted", 10, "the toggle to show the upvote", poll_s=0.1)
        assert browser.find_element("id", "error").text == ""
        assert "certified exact" in browser.find_element("id", "status").text

        browser.refresh()  # a new page of the same session reads the vote the stream applied
        wait_until(lambda: toggle_label(browser, POST) == "upvoted", 30, "the applied upvote on a reload", poll_s=0.1)
        assert page_user(browser) == user
        click_toggle(browser, POST, "upvoted")
        warm = wait_until(
            lambda: shown_upvotes(browser, POST) == SEEDED,
            COUNTED_TIMEOUT_S,
            "the vote taken back to count",
            poll_s=0.1,
        )
        wait_until(lambda: toggle_label(browser, POST) == "upvote", 10, "the toggle to show no vote", poll_s=0.1)
        assert pipeline.poll() is None, "the streaming pipeline died"

        votes = votes_published(audit)
        assert [(v["post_id"], v["user_id"], v["vote"]) for v in votes] == [(POST, user, "up"), (POST, user, "none")]
        assert all(set(v) == {"post_id", "user_id", "vote", "event_time", "event_id"} for v in votes)
        assert votes[0]["event_time"] < votes[1]["event_time"] and votes[0]["event_id"] != votes[1]["event_id"]
        read_back = httpx.get(
            service.url + f"/v1/posts/{quote(POST, safe='')}/votes/{quote(user, safe='')}",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ).json()
        assert (read_back["vote"], read_back["event_id"]) == ("none", votes[1]["event_id"])

        browser.find_element("id", "new-post-id").send_keys(TYPED_POST)  # the "any post ID" form upvotes too
        browser.find_element("id", "new-vote-button").click()
        typed: list[dict] = []

        def published() -> bool:
            typed.extend(votes_published(audit))
            return bool(typed)

        wait_until(published, 30, "the form's vote to be published")
        assert [(v["post_id"], v["user_id"], v["vote"]) for v in typed] == [(TYPED_POST, user, "up")]
        screenshot = tmp_path / "live_page.png"
        assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 1_000
        print(
            f"\nthe upvote counted on the page after {seconds:.1f} s, taking it back after {warm:.1f} s "
            f"({WINDOW_S} s windows); screenshot {screenshot}"
        )
    finally:
        audit.close()


def test_a_hostile_page_counts_nothing_and_the_page_still_votes(
    stack, service, hostile_server, browser, pipeline
) -> None:
    audit = TopicAudit(stack.topic_path(stack.topic), stack.subscription_path(f"audit-{uuid.uuid4().hex[:8]}"))
    try:
        browser.get(service.url + "/")  # the victim has the live page open: its session cookie is in the browser
        wait_until(lambda: shown_upvotes(browser, POST) is not None, 30, "the live page", poll_s=0.1)
        assert any(c["name"] == COOKIE for c in browser.get_cookies())
        before = httpx.get(service.url + "/healthz").json()["refused"]

        for name in HOSTILE_NAMES:
            browser.get(f"http://{name}:{hostile_server}/")
            wait_until(
                lambda: browser.find_element("id", "results").text != "", 30, f"the attack from {name}", poll_s=0.1
            )
            report = json.loads(browser.find_element("id", "results").text)
            # Each fetch fails in the page: the preflighted ones and the read for want of CORS, the
            # no-cors one (which did reach the service) by its Cross-Origin-Resource-Policy.
            assert set(report["results"].values()) == {"rejected"}, (name, report)
            assert report["loaded"] == 3, name  # every form was submitted and answered

        refused = httpx.get(service.url + "/healthz").json()["refused"]
        assert refused["origin"] - before["origin"] == REQUESTS_REACHING_THE_SERVICE * len(HOSTILE_NAMES)
        assert refused["credential"] == before["credential"] and refused["csrf"] == before["csrf"]

        # DNS rebinding: the service's own port under a hostile name is refused, with no session.
        service_port = service.url.rsplit(":", 1)[1]
        browser.get(f"http://evil.localhost:{service_port}/")
        assert "does not answer for Host" in browser.find_element("tag name", "body").text
        assert not browser.get_cookies()
        assert httpx.get(service.url + "/healthz").json()["refused"]["host"] > before["host"]

        browser.get(service.url + "/")
        wait_until(lambda: shown_upvotes(browser, POST) is not None, 30, "the live page again", poll_s=0.1)
        shown = shown_upvotes(browser, POST)
        assert shown is not None
        click_toggle(browser, POST, "upvote")
        wait_until(
            lambda: shown_upvotes(browser, POST) == shown + 1, COUNTED_TIMEOUT_S, "the page's own vote", poll_s=0.1
        )
        assert browser.find_element("id", "error").text == ""
        votes = votes_published(audit)
        assert [(v["post_id"], v["user_id"], v["vote"]) for v in votes] == [(POST, page_user(browser), "up")]
        counts = httpx.get(service.url + "/v1/posts", params=[("id", p) for p in HOSTILE_POSTS]).json()["posts"]
        assert [p["upvotes"] for p in counts] == [0] * len(HOSTILE_POSTS)
        assert pipeline.poll() is None, "the streaming pipeline died"
    finally:
        audit.close()


def shown_rows(driver) -> list[tuple[str, str | None]] | None:
    """(post ID, score cell or None) of each listed post, in order; None if the table was
    redrawn while it was read."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        rows = []
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.post"):
            score = row.find_elements(By.CSS_SELECTOR, "td.score")
            rows.append((row.find_element(By.CSS_SELECTOR, "td.post-id").text, score[0].text if score else None))
        return rows
    except StaleElementReferenceException:
        return None


def rows_now(driver) -> list[tuple[str, str | None]]:
    """shown_rows, read again until a read falls between two redraws of the table."""
    reads: list[list[tuple[str, str | None]]] = []

    def read_between_redraws() -> bool:
        rows = shown_rows(driver)
        if rows is not None:
            reads.append(rows)
        return rows is not None

    wait_until(read_between_redraws, 10, "a read between two redraws", poll_s=0.05)
    return reads[-1]


def listed(driver) -> list[str]:
    return [post for post, _ in shown_rows(driver) or []]


def selected_tab(driver) -> str:
    return driver.find_element("css selector", '#tabs [aria-selected="true"]').text


def test_the_tabs_switch_between_hot_the_last_24_hours_and_all_time(service, browser, database) -> None:
    """A post voted this hour outranks, on the Hot and Last 24 h tabs, a post with more upvotes
    three days ago, which leads All time (the default) and is not in the last 24 hours."""
    now_hour = int(time.time()) // 3600 * 3600
    viral, former = "tabs/viral now ☃", "tabs/three days ago"
    write_deltas(
        database,
        [
            PostDelta.of(former, now_hour - 72 * 3600, "tabs:1", upvotes=500, events=500),
            PostDelta.of(viral, now_hour, "tabs:2", upvotes=30, events=30),
        ],
    )
    browser.get(service.url + "/")
    wait_until(lambda: listed(browser)[:2] == [former, viral], 30, "the all-time list", poll_s=0.1)
    assert selected_tab(browser) == "All time" and rows_now(browser)[0][1] is None  # no score column
    assert not browser.find_element("id", "score-header").is_displayed()

    browser.find_element("id", "tab-hot").click()
    wait_until(lambda: listed(browser)[:2] == [viral, former], 30, "the hot list", poll_s=0.1)
    assert selected_tab(browser) == "Hot"
    assert browser.find_element("id", "score-header").text == "hot score"
    # 30 upvotes this hour: between 30 * 2^(-1 / 12) and 30; 500 three days ago: 500 / 2^6, a little less.
    scores = {post: float(score) for post, score in rows_now(browser) if score is not None}
    assert 30 * 2 ** (-1 / 12) <= scores[viral] <= 30 and 500 / 2 ** (73 / 12) <= scores[former] <= 500 / 64
    status = browser.find_element("id", "status").text
    assert status.startswith("hot scores (half-life 12 h) and exact counts as of ") and "certified exact" in status
    wait_until(lambda: toggle_label(browser, viral) == "upvote", 30, "the toggle on the hot list", poll_s=0.1)

    browser.find_element("id", "tab-last").click()
    wait_until(
        lambda: listed(browser)[:1] == [viral] and former not in listed(browser), 30, "the last 24 hours", poll_s=0.1
    )
    assert selected_tab(browser) == "Last 24 h" and dict(rows_now(browser))[viral] == "30"
    assert browser.find_element("id", "score-header").text == "upvotes, 24 h"
    assert browser.find_element("id", "status").text.startswith("upvotes in the last 24 h and exact counts as of ")

    browser.find_element("id", "tab-all").click()
    wait_until(lambda: listed(browser)[:2] == [former, viral], 30, "the all-time list again", poll_s=0.1)
    assert not browser.find_element("id", "score-header").is_displayed()
    assert browser.find_element("id", "error").text == ""
