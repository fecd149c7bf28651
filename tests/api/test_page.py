"""The page at / in real headless Chromium (Debian's chromium and chromium-driver, driven
by selenium) against real server processes: insert two near-duplicates, search, open the
match and see the shared passages marked; errors as the contract states them; the API key
prompt; no horizontal scrolling at 360 px. Screenshots at desktop and phone widths go to
artifacts/page/ (NEARDUP_ARTIFACTS_DIR to put them elsewhere).

`make test` installs Chromium where it can (root with apt-get); elsewhere these tests skip
and say why.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devkit.server import Server
from neardup_client import Client, CollectionSettings, PassageSettings

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NEARDUP_ARTIFACTS_DIR", ROOT / "artifacts")) / "page"
CHROMIUM = os.environ.get("NEARDUP_CHROMIUM") or shutil.which("chromium")
CHROMEDRIVER = os.environ.get("NEARDUP_CHROMEDRIVER") or shutil.which("chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
WAIT_SECONDS = 30  # condition waits: only a loaded machine ever needs this long
POLL_SECONDS = 0.02
WRITER_KEY = "page-test-writer-key-0001"
READER_KEY = "page-test-reader-key-0001"

STORY = (
    "OPEC ministers agreed on Monday to cut crude oil output by 1.5 mln barrels a day from "
    "April, sending prices sharply higher in London and New York. The cut, the deepest since "
    "1983, will be shared by all members except Iraq, the organisation said in a statement "
    "after three days of talks in Geneva. Traders said the market had expected a smaller "
    "reduction and that prices could rise further this week."
)
REISSUE = STORY.replace("smaller reduction", "smaller decrease")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the test extras are not installed
    webdriver = None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "Chromium is not installed (Debian's chromium and chromium-driver; `make test` "
            "installs them when it runs as root with apt-get): the browser tests are skipped"
        )
    if webdriver is None:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    driver = webdriver.Chrome(
        service=Service(executable_path=str(CHROMEDRIVER), log_output=str(log)),
        options=options,
    )
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """An open server and one with API keys, started side by side (a start is mostly
    imports: two take about the time of one)."""
    open_server = Server(tmp_path_factory.mktemp("page") / "data", NEARDUP_LOG_LEVEL="warning")
    keyed = Server(
        tmp_path_factory.mktemp("keyed") / "data",
        NEARDUP_LOG_LEVEL="warning",
        NEARDUP_API_KEYS=f"{WRITER_KEY}:write,{READER_KEY}:read",
    )
    try:
        with ThreadPoolExecutor(2) as pool:
            for started in [pool.submit(s.start) for s in (open_server, keyed)]:
                started.result()
        yield open_server, keyed
    finally:
        open_server.kill()
        keyed.kill()


@pytest.fixture(scope="module")
def server(servers: tuple[Server, Server]) -> Server:
    return servers[0]


@pytest.fixture(scope="module")
def keyed_server(servers: tuple[Server, Server]) -> Server:
    return servers[1]


def until(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """Wait for a condition of the page (selenium polls it), failing with what it was."""
    wait = WebDriverWait(driver, WAIT_SECONDS, poll_frequency=POLL_SECONDS)
    return wait.until(condition, f"waited for {what}")


def by_id(driver: Any, name: str) -> Any:
    return driver.find_element(By.ID, name)


def text_of(driver: Any, name: str) -> str:
    return str(by_id(driver, name).text)


def open_page(driver: Any, server: Server, status: str = "ready") -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.get(server.url + "/")
    until(driver, lambda d: text_of(d, "status") == status, f"the status {status!r}")


def type_text(driver: Any, text: str, document_id: str = "") -> None:
    area = by_id(driver, "text")
    area.clear()
    area.send_keys(text)
    field = by_id(driver, "doc-id")
    field.clear()
    if document_id:
        field.send_keys(document_id)


def error_shown(driver: Any) -> str:
    return str(
        until(
            driver, lambda d: by_id(d, "error").is_displayed() and text_of(d, "error"), "an error"
        )
    )


def screenshot(driver: Any, name: str) -> Path:
    """The whole page as a PNG (beyond the window), in the artifacts directory."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": clip},
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def test_insert_two_near_duplicates_search_and_see_the_shared_passages(
    browser: Any, server: Server
) -> None:
    open_page(browser, server)
    assert "default" in [o.text for o in Select(by_id(browser, "collection")).options]

    # A collection that keeps its texts, created from the page.
    browser.find_element(By.CSS_SELECTOR, "#new-collection summary").click()
    by_id(browser, "new-name").send_keys("news")
    assert by_id(browser, "new-store-text").is_selected()
    browser.find_element(By.CSS_SELECTOR, "#create-form button[type=submit]").click()
    until(browser, lambda d: by_id(d, "collection").get_attribute("value") == "news", "news")
    until(browser, lambda d: "store_text\ntrue" in text_of(d, "settings"), "its settings")

    type_text(browser, STORY, "story-1")
    by_id(browser, "insert-button").click()
    until(browser, lambda d: "Inserted story-1 — a new story" in text_of(d, "outcome"), "insert")
    type_text(browser, REISSUE, "story-2")
    by_id(browser, "insert-button").click()
    until(
        browser,
        lambda d: "a near-duplicate of story-1, cluster story-1" in text_of(d, "outcome"),
        "the second insert's verdict",
    )

    by_id(browser, "search-button").click()
    until(browser, lambda d: text_of(d, "results-title") == "Matches (2)", "two matches")
    rows = browser.find_elements(By.CSS_SELECTOR, "#matches tbody tr")
    assert [row.get_attribute("data-id") for row in rows] == ["story-2", "story-1"]
    exact, near = rows
    assert exact.find_element(By.CSS_SELECTOR, ".similarity").text == "1.000"
    assert exact.find_element(By.CSS_SELECTOR, ".hamming").text == "0"
    similarity = float(near.find_element(By.CSS_SELECTOR, ".similarity").text)
    assert 0.8 <= similarity < 1
    assert int(near.find_element(By.CSS_SELECTOR, ".hamming").text) > 0
    methods = [m.text for m in near.find_elements(By.CSS_SELECTOR, ".method")]
    assert "minhash" in methods
    until(
        browser,
        lambda d: near.find_element(By.CSS_SELECTOR, ".cluster").text == "story-1",
        "the match's cluster",
    )

    near.find_element(By.CSS_SELECTOR, "button").click()
    until(browser, lambda d: by_id(d, "compare").is_displayed(), "the side-by-side view")
    assert text_of(browser, "right-title") == "Match story-1"
    left = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#left-text mark")]
    right = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#right-text mark")]
    assert left[0].startswith("OPEC ministers agreed on Monday") and right[0] == left[0]
    # Only the changed word and its neighbourhood stay unmarked.
    assert text_of(browser, "left-text") == REISSUE and text_of(browser, "right-text") == STORY
    assert not any("decrease" in passage for passage in left)
    assert not any("reduction" in passage for passage in right)
    assert sum(len(passage) for passage in right) > 0.8 * len(STORY)
    # The default collection finds passages: the page marks those the service found.
    assert "passage(s) the service found" in text_of(browser, "compare-summary")

    until(browser, lambda d: "documents\n2" in text_of(d, "stats"), "the stats after the inserts")
    until(browser, lambda d: text_of(d, "health-note").startswith("2 documents"), "health")
    indexes = {
        row.get_attribute("data-index"): row.text
        for row in browser.find_elements(By.CSS_SELECTOR, "#health tbody tr")
    }
    assert set(indexes) == {"exact", "simhash", "minhash", "ngram", "passage"}

    desktop = screenshot(browser, "desktop")
    # At 360 px wide: one column, nothing wider than the screen.
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 360, "height": 780, "deviceScaleFactor": 1, "mobile": True},
    )
    until(browser, lambda d: d.execute_script("return window.innerWidth") == 360, "360 px")
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 0
    columns = browser.execute_script(
        "return [...document.querySelectorAll('.side-by-side article')]"
        ".map(a => Math.round(a.getBoundingClientRect().left))"
    )
    assert len(set(columns)) == 1  # the two texts one above the other
    phone = screenshot(browser, "phone")
    for shot in (desktop, phone):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_errors_are_shown_as_the_contract_states_them(browser: Any, server: Server) -> None:
    open_page(browser, server)
    type_text(browser, "")
    by_id(browser, "search-button").click()
    message = error_shown(browser)
    assert message.startswith("422 invalid_body: text:")
    type_text(browser, " \t ")
    by_id(browser, "insert-button").click()
    until(browser, lambda d: "invalid_document" in text_of(d, "error"), "invalid_document")
    assert text_of(browser, "error").startswith("422 invalid_document: ")
    type_text(browser, "x")
    by_id(browser, "limit").clear()
    by_id(browser, "limit").send_keys("100000")
    by_id(browser, "search-button").click()
    until(browser, lambda d: text_of(d, "error").startswith("413 too_large: "), "413")


def test_a_collection_without_texts_says_so(browser: Any, server: Server) -> None:
    with Client(server.url) as client:
        # Passages off as well: they keep the texts (without giving them out).
        client.create_collection(
            "bare", CollectionSettings(passages=PassageSettings(enabled=False))
        )
        client.insert("bare", text=STORY, id="kept-as-fingerprints")
    open_page(browser, server)
    Select(by_id(browser, "collection")).select_by_value("bare")
    until(browser, lambda d: "store_text\nfalse" in text_of(d, "settings"), "bare's settings")
    type_text(browser, REISSUE)
    by_id(browser, "search-button").click()
    until(browser, lambda d: text_of(d, "results-title") == "Matches (1)", "one match")
    browser.find_element(By.CSS_SELECTOR, "#matches tbody button").click()
    until(browser, lambda d: by_id(d, "compare").is_displayed(), "the side-by-side view")
    assert "does not keep texts" in text_of(browser, "right-text")
    assert browser.find_elements(By.CSS_SELECTOR, "#compare mark") == []


def test_the_key_prompt_when_the_service_has_keys(browser: Any, keyed_server: Server) -> None:
    open_page(browser, keyed_server, status="API key needed")
    assert (
        by_id(browser, "key-panel").is_displayed() and by_id(browser, "key-prompt").is_displayed()
    )
    assert error_shown(browser).startswith("401 unauthorized: ")
    assert Select(by_id(browser, "collection")).options == []

    by_id(browser, "api-key").send_keys("not-a-key-of-this-service")
    by_id(browser, "key-form").submit()
    until(browser, lambda d: "401 unauthorized" in text_of(d, "error"), "401 again")
    by_id(browser, "api-key").send_keys(READER_KEY)
    by_id(browser, "key-form").submit()
    until(
        browser,
        lambda d: not by_id(d, "key-prompt").is_displayed() and text_of(d, "status") == "ready",
        "the prompt gone",
    )
    assert [o.text for o in Select(by_id(browser, "collection")).options] == ["default"]
    stored = browser.execute_script("return sessionStorage.getItem('neardup.apiKey')")
    assert stored == READER_KEY
    type_text(browser, STORY)
    by_id(browser, "insert-button").click()  # a read key may search, not insert
    until(browser, lambda d: text_of(d, "error").startswith("403 forbidden: "), "403")

    browser.refresh()  # the key is kept for the tab's session
    until(browser, lambda d: text_of(d, "status") == "ready", "ready with the stored key")
    assert not by_id(browser, "key-prompt").is_displayed()
    by_id(browser, "forget-key").click()
    until(browser, lambda d: by_id(d, "key-prompt").is_displayed(), "the prompt again")
    assert browser.execute_script("return sessionStorage.getItem('neardup.apiKey')") is None


def test_the_page_and_its_files_need_no_key(keyed_server: Server) -> None:
    with httpx.Client(base_url=keyed_server.url) as client:
        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'none'" in page.headers["content-security-policy"]
        for name in ("app.js", "style.css"):
            assert client.get(f"/static/{name}").status_code == 200
        assert client.get("/static/missing.js").status_code == 404
        assert client.get("/v1/collections").status_code == 401


def test_the_passages_the_service_found_are_marked(browser: Any, server: Server) -> None:
    """A collection with passages on: the page marks the passages where the service says
    they are (code points: the emoji before the story is one, not two UTF-16 units)."""
    story = "🙂 " + STORY
    other = (
        "Copper prices were steady in London as traders awaited fresh figures on Chinese "
        "demand and warehouse stocks fell for a third week."
    )
    with Client(server.url) as client:
        settings = CollectionSettings(store_text=True, passages=PassageSettings(enabled=True))
        client.create_collection("wire", settings)
        client.insert("wire", text=story, id="story")
    open_page(browser, server)
    Select(by_id(browser, "collection")).select_by_value("wire")
    until(browser, lambda d: "passages" in text_of(d, "settings"), "wire's settings")
    roundup = f"ROUNDUP 🌍 {other}\n\n{STORY}\n\n{other}"
    type_text(browser, roundup)
    by_id(browser, "search-button").click()
    until(browser, lambda d: text_of(d, "results-title") == "Matches (1)", "one match")
    row = browser.find_element(By.CSS_SELECTOR, "#matches tbody tr")
    assert [m.text for m in row.find_elements(By.CSS_SELECTOR, ".method")] == ["passage"]
    row.find_element(By.CSS_SELECTOR, "button").click()
    until(browser, lambda d: by_id(d, "compare").is_displayed(), "the side-by-side view")
    left = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#left-text mark")]
    right = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#right-text mark")]
    assert left == [STORY.rstrip(".")] and right == left
    assert "passage(s) the service found" in text_of(browser, "compare-summary")


def test_a_scoped_key_sees_only_its_collections(browser: Any, keyed_server: Server) -> None:
    writer = {"Authorization": f"Bearer {WRITER_KEY}"}
    with httpx.Client(base_url=keyed_server.url, headers=writer) as admin:
        for name in ("news-page", "hidden-page"):
            assert admin.put(f"/v1/collections/{name}").is_success
        body = {"name": "page", "actions": ["search"], "collections": ["news-*"]}
        scoped_key = admin.post("/v1/keys", json=body).json()["key"]
    open_page(browser, keyed_server, status="API key needed")
    by_id(browser, "api-key").send_keys(scoped_key)
    by_id(browser, "key-form").submit()
    until(browser, lambda d: text_of(d, "status") == "ready", "ready with the scoped key")
    assert [o.text for o in Select(by_id(browser, "collection")).options] == ["news-page"]
    assert "hidden-page" not in browser.page_source
    by_id(browser, "forget-key").click()
