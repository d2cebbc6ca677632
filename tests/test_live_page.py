"""The live page in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium against `upvotes serve` and a running streaming pipeline on the emulators.
A click on a post's vote button must come back as a higher exact count on the page."""
from __future__ import annotations

import shutil
import time

import pytest

from schemas.records import PostDelta
from spanner_store.deltas import write_deltas
from upvotes import local_stream
from upvotes.service import serve_in_background

WINDOW_S = 2
POST = "browser/post ☃"
SEEDED = 5
COUNTED_TIMEOUT_S = 120  # the first vote also waits for the DirectRunner to start pulling
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

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
    write_deltas(database, [PostDelta(POST, 1_795_312_800, "seed:1", SEEDED, 0, SEEDED)])
    running = serve_in_background(stack.project, stack.instance, stack.database, stack.topic, refresh_s=0.5)
    yield running
    running.stop()


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,700"):
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


def wait_for(condition, timeout_s: float, what: str) -> float:
    """Polls `condition` until it holds; returns the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_click_on_vote_is_counted_on_the_live_page(service, browser, pipeline, tmp_path) -> None:
    browser.get(service.url + "/")
    wait_for(lambda: shown_upvotes(browser, POST) == SEEDED, 30, "the seeded count on the page")

    click_vote(browser, POST)
    seconds = wait_for(lambda: shown_upvotes(browser, POST) == SEEDED + 1, COUNTED_TIMEOUT_S, "the click to count")
    assert pipeline.poll() is None, "the streaming pipeline died"
    assert browser.find_element("id", "error").text == ""
    assert "certified exact" in browser.find_element("id", "status").text

    click_vote(browser, POST)  # the pipeline is warm now: this one shows the freshness a user sees
    warm = wait_for(lambda: shown_upvotes(browser, POST) == SEEDED + 2, COUNTED_TIMEOUT_S, "the second click")
    screenshot = tmp_path / "live_page.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 1_000
    print(f"\nfirst click counted on the page after {seconds:.1f} s, "
          f"the second after {warm:.1f} s ({WINDOW_S} s windows); screenshot {screenshot}")
