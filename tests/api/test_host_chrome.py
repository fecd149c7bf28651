"""A site's chrome is not evidence (app/core/hosts.py), on every backend: pages of one
host (their ``metadata.url``, or the page's canonical link) that share only the chrome
every page of the site carries are neither matches nor containments of each other once
the chrome is on HOST_PAGES of them; the same chrome on another host's page still is
(the document-frequency cap alone applies there); a story that two pages of the host
share is still found, chrome beside it or not; and the rule holds after a restart.

The expectations come from how the pages are built, not from the code under test."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.hosts import HOST_PAGES, host_key, page_url, url_host
from devkit.corpus import english_like_text
from tests.conftest import LIMITS, Backend

DOCS = "/v1/collections/site/documents"
SEARCH = "/v1/collections/site/search"
# Defaults but for the df cap's bound, which this test never nears.
SETTINGS = {"passages": {"enabled": True}}


def _text(seed: int, words: int) -> str:
    return english_like_text(random.Random(seed), words * 6)


# The site's chrome: a newsletter box and a footer around every article, three times an
# article's length, so that two pages share most of their text by it.
HEADER = _text(1, 60)
FOOTER = _text(2, 90)
STORIES = [_text(100 + i, 45) for i in range(8)]


def _page(story: str) -> str:
    return f"{HEADER}\n\n{story}\n\n{FOOTER}"


def _insert(client: TestClient, document_id: str, text: str, url: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": document_id, "text": text}
    if url is not None:
        body["metadata"] = {"url": url}
    answer = client.post(DOCS, json=body)
    assert answer.status_code == 201, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _related(result: dict[str, Any]) -> set[str]:
    """Every document an insert's answer relates to: matches and containments."""
    return {m["id"] for m in result["matches"] + result["contains"] + result["contained_in"]}


def _similar(client: TestClient, document_id: str) -> set[str]:
    answer = client.get(f"{DOCS}/{document_id}/similar", params={"min_coverage": 0})
    assert answer.status_code == 200, answer.text
    return {m["id"] for m in answer.json()["matches"]}


@pytest.fixture
def client(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    for served in backend.serve(tmp_path, **LIMITS):
        assert served.put("/v1/collections/site", json=SETTINGS).status_code == 201
        yield served


def test_hosts_are_read_from_urls_and_pages() -> None:
    assert url_host("https://www.Example.com/a/b?c=d") == "example.com"
    assert url_host("http://news.example.com:8080/") == "news.example.com"
    assert url_host("/relative/path") is None and url_host("mailto:x@y.z") is None
    html = '<html><head><link href="https://www.site.org/story" rel="canonical"></head></html>'
    assert page_url(html) == "https://www.site.org/story"
    og = "<head><meta property='og:url' content='https://site.org/x'></head>"
    assert page_url(og) == "https://site.org/x"
    assert host_key({"url": "https://site.org/1"}) == host_key(None, html) != 0
    assert host_key({"url": "https://other.org/1"}) != host_key(None, html)
    assert host_key(None, "<p>no link</p>") == 0 == host_key({"url": 7})


def test_a_sites_chrome_relates_none_of_its_pages_once_repeated(client: TestClient) -> None:
    # The first two pages of the site: two pages may share anything, chrome included.
    first = _insert(client, "a0", _page(STORIES[0]), "https://www.site.com/a0")
    second = _insert(client, "a1", _page(STORIES[1]), "https://site.com/a1")
    assert not _related(first)
    assert not _related(second), "its passages cover under 0.8 of either"
    assert "a0" in _similar(client, "a1"), "two pages: no chrome known yet, they share a lot"
    # From the third page on, the chrome is on HOST_PAGES pages of the site: no evidence.
    for number in range(2, 6):
        later = _insert(client, f"a{number}", _page(STORIES[number]), f"https://site.com/{number}")
        assert HOST_PAGES == 3
        assert not _related(later), (number, later)
    for number in range(2, 6):
        assert not _similar(client, f"a{number}") & {f"a{i}" for i in range(6)}
    # The same chrome on a page of another host is evidence, as it always was.
    _insert(client, "b0", _page(STORIES[6]), "https://elsewhere.net/b0")
    assert {f"a{i}" for i in range(6)} <= _similar(client, "b0")
    # A page with no host: the document-frequency cap alone.
    _insert(client, "n0", _page(STORIES[7]), None)
    assert {f"a{i}" for i in range(6)} | {"b0"} <= _similar(client, "n0")


def test_a_story_two_pages_of_the_site_share_is_still_found(client: TestClient) -> None:
    for number in range(4):
        _insert(client, f"a{number}", _page(STORIES[number]), f"https://site.com/{number}")
    # A roundup of the site holding two of its stories, the chrome around them: each story's
    # page is inside it but for its chrome.
    roundup = f"{HEADER}\n\n{STORIES[1]}\n\n{STORIES[4]}\n\n{STORIES[2]}\n\n{FOOTER}"
    result = _insert(client, "roundup", roundup, "https://site.com/roundup")
    related = _similar(client, "roundup")
    assert {"a1", "a2"} <= related, result
    assert not {"a0", "a3"} & related, "pages that share only the chrome with it"
    # The same story on a second path of the site: a duplicate, found by every method.
    again = _insert(client, "a1-print", _page(STORIES[1]), "https://site.com/print/1")
    assert again["duplicate_of"] == "a1"


def test_a_canonical_link_names_the_host_and_the_rule_survives_a_restart(
    backend: Backend, tmp_path: Path
) -> None:
    def as_page(story: str, url: str) -> dict[str, Any]:
        html = (
            f'<html><head><link rel="canonical" href="{url}"><title>t</title></head><body>'
            f"<article><p>{HEADER}</p><p>{story}</p><p>{FOOTER}</p></article></body></html>"
        )
        return {"html_base64": base64.b64encode(html.encode()).decode(), "charset": "utf-8"}

    for round_ in range(2):  # the embedded service restarted, or a second app on Redis
        for client in backend.serve(tmp_path, **LIMITS):
            if round_ == 0:
                assert client.put("/v1/collections/site", json=SETTINGS).status_code == 201
                for number in range(4):
                    body = {"id": f"a{number}", "metadata": {"url": f"https://site.com/{number}"}}
                    answer = client.post(DOCS, json={**body, "text": _page(STORIES[number])})
                    assert answer.status_code == 201
            else:
                # A new page of the site, its host named by its canonical link only.
                body = as_page(STORIES[5], "https://www.site.com/5")
                answer = client.post(DOCS, json={"id": "a5", **body})
                assert answer.status_code == 201, answer.text
                assert not _related(answer.json())
                assert not _similar(client, "a5") & {f"a{i}" for i in range(4)}
                found = client.post(SEARCH, json={**as_page(STORIES[6], "https://site.com/6")})
                assert found.status_code == 200
                searched = {m["id"] for m in found.json()["matches"]}
                assert not searched & {f"a{i}" for i in range(4)}
                # The same page searched without its canonical link: no host, no rule.
                html = base64.b64decode(as_page(STORIES[6], "x")["html_base64"]).decode()
                bare = html.replace('<link rel="canonical" href="x">', "")
                plain = client.post(
                    SEARCH, json={"text": bare, "html": True, "min_coverage": 0}
                ).json()["matches"]
                assert {m["id"] for m in plain} & {f"a{i}" for i in range(4)}


def _by_passages(result: dict[str, Any]) -> set[str]:
    """The documents an insert's answer relates to by its passages alone."""
    alone = {m["id"] for m in result["matches"] if m["methods"] == ["passage"]}
    return alone | {m["id"] for m in result["contains"] + result["contained_in"]}


def test_a_batch_of_a_sites_pages_answers_as_its_pages_one_by_one(client: TestClient) -> None:
    """Stories in heavy chrome: two pages' chrome covers more than CONTAINED of each, a
    containment both ways until the chrome is on HOST_PAGES pages; a batch counts its
    earlier pages, and a stored page, as the inserts one by one do."""
    short = [_text(300 + i, 30) for i in range(5)]
    pages = [
        {"id": f"p{i}", "text": _page(story), "metadata": {"url": f"https://site.com/p{i}"}}
        for i, story in enumerate(short)
    ]
    answers = [client.post(DOCS, json=page).json() for page in pages]
    assert [_by_passages(a) for a in answers] == [set(), {"p0"}, set(), set(), set()]
    one_by_one = [_related(a) for a in answers]
    assert client.put("/v1/collections/batched", json=SETTINGS).status_code == 201
    answer = client.post("/v1/collections/batched/documents/batch", json={"documents": pages})
    assert answer.status_code == 200, answer.text
    assert [_related(result) for result in answer.json()["results"]] == one_by_one
    # Split across a stored page and a batch: the stored one counts too.
    assert client.put("/v1/collections/split", json=SETTINGS).status_code == 201
    assert client.post("/v1/collections/split/documents", json=pages[0]).status_code == 201
    answer = client.post("/v1/collections/split/documents/batch", json={"documents": pages[1:]})
    assert [_related(result) for result in answer.json()["results"]] == one_by_one[1:]
