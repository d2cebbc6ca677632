"""The live page in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium against `upvotes serve` and a running streaming pipeline on the emulators.

- A click on a post's vote button comes back as a higher exact count on the page.
- A hostile page, served from a second local origin (another port, under the names
  evil.localhost, which is cross-site, and 127.0.0.1, same-site but cross-origin, so the
  SameSite=Strict session cookie goes along), tries every request a page can make without
  the service's consent: fetch() with text/plain (no-cors), with application/json and with
  a guessed X-CSRF-Token header (both need a CORS preflight), a read of the live page, and
  <form> POSTs as text/plain, form-urlencoded and multipart. Nothing is published (an audit
  subscription on the topic sees only the page's own vote), and the service counts each
  request that reached it as refused for its origin; the page's own button still counts.
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

import httpx
import pytest

from schemas.records import PostDelta
from spanner_store.deltas import write_deltas
from upvotes.devtools import local_stream
from upvotes.serving.live_sessions import COOKIE
from upvotes.serving.serve_settings import ServiceSettings
from upvotes.serving.service import serve_in_background

from tests.topic_audit import TopicAudit
from tests.polling import wait_until

WINDOW_S = 2
POST = "browser/post ☃"
SEEDED = 5
TOKEN = "live-page-test-token-" + uuid.uuid4().hex
COUNTED_TIMEOUT_S = 120  # the first vote also waits for the DirectRunner to start pulling
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# What this machine's Chromium needs headless (no sandbox as root, no background connections
# to Google's hosts, which the closed network refuses); each browser gets a fresh profile.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1000,700")
HOSTILE_NAMES = ("evil.localhost", "127.0.0.1")
HOSTILE_POSTS = ("hostile-fetch-plain", "hostile-fetch-json", "hostile-fetch-csrf", "hostile-form-plain",
                 "hostile-form-urlencoded", "hostile-form-multipart")
REQUESTS_REACHING_THE_SERVICE = 4  # the no-cors fetch and the three forms; the preflighted ones never POST

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs headless Chromium: apt-get install -y chromium chromium-driver (Debian packages)")


@pytest.fixture(scope="module")
def pipeline(stack, tmp_path_factory):
    process = local_stream.start(stack, WINDOW_S, tmp_path_factory.mktemp("stream") / "stream.log")
    yield process
    local_stream.stop(process)


@pytest.fixture(scope="module")
def service(stack, database, pipeline):
    write_deltas(database, [PostDelta.of(POST, 1_795_312_800, "seed:1", upvotes=SEEDED, events=SEEDED)])
    running = serve_in_background(stack.project, stack.instance, stack.database, stack.topic,
                                  ServiceSettings(write_tokens=(TOKEN,)), refresh_s=0.5)
    yield running
    running.stop()


def hostile_page(target: str) -> str:
    """A page that tries to vote on (and read) the service at `target` from another origin."""
    def form(post_id: str, enctype: str, frame: str) -> str:
        event = json.dumps({"post_id": post_id, "counter": "upvotes", "delta": 1_000_000})
        # text/plain and urlencoded send name=value: a name ending in an open string and a value
        # closing it make the body valid JSON. Multipart gets the event as a field value.
        name, value = (event[:-1] + ', "pad": "', '"}') if enctype != "multipart/form-data" else ("vote", event)
        return (f'<form method="POST" action="{target}/v1/votes" enctype="{enctype}" target="{frame}">'
                f"<input name='{name}' value='{value}'></form><iframe name=\"{frame}\"></iframe>")

    forms = (form("hostile-form-plain", "text/plain", "f1")
             + form("hostile-form-urlencoded", "application/x-www-form-urlencoded", "f2")
             + form("hostile-form-multipart", "multipart/form-data", "f3"))
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


def click_vote(driver, post_id: str) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            for row in driver.find_elements(By.CSS_SELECTOR, "tr.post"):
                if row.find_element(By.CSS_SELECTOR, "td.post-id").text == post_id:
                    row.find_element(By.CSS_SELECTOR, "button.vote").click()
                    return
        except StaleElementReferenceException:
            continue  # redrawn under us: find it again
    raise AssertionError(f"no vote button for {post_id!r}")


def test_a_click_on_vote_is_counted_on_the_live_page(service, browser, pipeline, tmp_path) -> None:
    browser.get(service.url + "/")
    wait_until(lambda: shown_upvotes(browser, POST) == SEEDED, 30, "the seeded count on the page", poll_s=0.1)

    click_vote(browser, POST)
    seconds = wait_until(lambda: shown_upvotes(browser, POST) == SEEDED + 1, COUNTED_TIMEOUT_S, "the click to count", poll_s=0.1)
    assert pipeline.poll() is None, "the streaming pipeline died"
    assert browser.find_element("id", "error").text == ""
    assert "certified exact" in browser.find_element("id", "status").text

    click_vote(browser, POST)  # the pipeline is warm now: this one shows the freshness a user sees
    warm = wait_until(lambda: shown_upvotes(browser, POST) == SEEDED + 2, COUNTED_TIMEOUT_S, "the second click", poll_s=0.1)
    screenshot = tmp_path / "live_page.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 1_000
    print(f"\nfirst click counted on the page after {seconds:.1f} s, "
          f"the second after {warm:.1f} s ({WINDOW_S} s windows); screenshot {screenshot}")


def test_a_hostile_page_counts_nothing_and_the_page_still_votes(stack, service, hostile_server, browser,
                                                                 pipeline) -> None:
    audit = TopicAudit(stack.topic_path(stack.topic), stack.subscription_path(f"audit-{uuid.uuid4().hex[:8]}"))
    try:
        browser.get(service.url + "/")  # the victim has the live page open: its session cookie is in the browser
        wait_until(lambda: shown_upvotes(browser, POST) is not None, 30, "the live page", poll_s=0.1)
        assert any(c["name"] == COOKIE for c in browser.get_cookies())
        before = httpx.get(service.url + "/healthz").json()["refused"]

        for name in HOSTILE_NAMES:
            browser.get(f"http://{name}:{hostile_server}/")
            wait_until(lambda: browser.find_element("id", "results").text != "", 30, f"the attack from {name}", poll_s=0.1)
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
        click_vote(browser, POST)
        wait_until(lambda: shown_upvotes(browser, POST) == shown + 1, COUNTED_TIMEOUT_S, "the page's own vote", poll_s=0.1)
        assert browser.find_element("id", "error").text == ""
        votes = [json.loads(line) for m in audit.published_since() for line in m.data.split(b"\n") if line.strip()]
        assert [(v["post_id"], v["delta"]) for v in votes] == [(POST, 1)]
        counts = httpx.get(service.url + "/v1/posts", params=[("id", p) for p in HOSTILE_POSTS]).json()["posts"]
        assert [p["upvotes"] for p in counts] == [0] * len(HOSTILE_POSTS)
        assert pipeline.poll() is None, "the streaming pipeline died"
    finally:
        audit.close()
