"""neardup_client.scrapy in real Scrapy crawls (each in its own process, as Scrapy runs)
of the site of tests/e2e/scrapy_site.py, served by a thread of the test, against a real
``neardup serve``; and the pipeline's pieces on their own.

The expectations come from how the site is built: which page is a copy of which, which
pages only the mirror leads to.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from itemadapter import ItemAdapter
from scrapy import Field, Item
from twisted.internet.defer import Deferred

from devkit.crawl import Crawled, SiteServer, crawl
from devkit.server import Server
from neardup_client import Client, InsertResult, Match, NewDocument, NewPage, Retry
from neardup_client.scrapy import Answer, Checker, NeardupSettings
from neardup_client.scrapy._pipeline import annotate, document_of
from tests.e2e.scrapy_site import (
    COPIES,
    FOLLOW,
    MIRROR,
    MIRROR_LINKS,
    ORIGINALS,
    SYNDICATED,
    site,
)
from tests.e2e.test_client import neardup

ARTICLES = {*ORIGINALS, *COPIES}  # the pages with an article: an item each
PAGES = {"/", *ARTICLES}  # every page crawled when the mirror's links are not followed


def path(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def outcomes(crawled: Crawled) -> dict[str, int]:
    return {
        key.removeprefix("neardup/"): value
        for key, value in crawled.stats.items()
        if key.startswith("neardup/")
    }


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("scrapy") / "data", NEARDUP_LOG_LEVEL="warning") as s:
        yield s


# ---------------------------------------------------------------- real crawls


@pytest.mark.slow
@pytest.mark.parametrize("reactor", ["asyncio", "default"])
def test_a_crawl_keeps_each_story_once_and_does_not_follow_a_mirror(
    service: Server, reactor: str
) -> None:
    """Every story passes once; the copy on another path, the print version, the
    syndicated copy and the mirror are dropped as duplicates of the page crawled before
    them; the mirror's links are not followed; the crawl ends cleanly."""
    with SiteServer(site()) as served:
        crawled = crawl(
            served.url + "/",
            FOLLOW,
            neardup_url=service.url,
            collection=f"crawl-{reactor}",
            reactor=reactor,
        )
        requested = list(served.requested)
    assert crawled.stats["finish_reason"] == "finished", crawled.log
    assert sorted(path(item["url"]) for item in crawled.items) == sorted(ORIGINALS)
    assert all(item["duplicate_of"] is None for item in crawled.items)
    assert all(item["cluster_id"] == item["url"] for item in crawled.items)
    dropped = {path(item["url"]): path(item["duplicate_of"]) for item in crawled.dropped}
    assert dropped == COPIES
    assert crawled.stats["item_dropped_count"] == len(COPIES)
    assert outcomes(crawled) == {
        "new": len(ORIGINALS) + 1,  # and the home page, checked by the middleware
        "duplicate": len(COPIES),
        "pages_not_followed": 1,
        "requests_not_followed": len(MIRROR_LINKS),
    }
    assert sorted(requested) == sorted(PAGES)
    assert not set(MIRROR_LINKS) & set(requested)
    # Each page was sent once: the items of the pages the middleware checked were not.
    with Client(service.url) as client:
        assert client.get_collection(f"crawl-{reactor}").stats.documents == len(PAGES)


@pytest.mark.slow
def test_without_the_middleware_the_mirror_leads_to_its_pages(service: Server) -> None:
    """The pipeline alone: the mirror is dropped all the same, but its links are
    followed, to the pages only it leads to (the requests the middleware saves)."""
    with SiteServer(site()) as served:
        crawled = crawl(
            served.url + "/",
            FOLLOW,
            neardup_url=service.url,
            collection="pipeline-only",
            middleware=False,
            reactor="default",
        )
        requested = list(served.requested)
    assert crawled.stats["finish_reason"] == "finished", crawled.log
    assert sorted(requested) == sorted(PAGES | set(MIRROR_LINKS))
    kept = sorted(path(item["url"]) for item in crawled.items)
    assert kept == sorted([*ORIGINALS, *MIRROR_LINKS])
    assert {path(item["url"]) for item in crawled.dropped} == set(COPIES)
    assert outcomes(crawled) == {
        "new": len(ORIGINALS) + len(MIRROR_LINKS),  # the items only: no page checked
        "duplicate": len(COPIES),
    }


@pytest.mark.slow
def test_the_service_stopped_during_a_crawl_loses_nothing(tmp_path: Path) -> None:
    """The service stops when /news/3 is fetched (its check finds nobody) and starts
    again when the page that check lets through is fetched. Nothing is dropped but a
    copy whose original was checked; every item is scraped or dropped; every page is
    counted once, as checked or as an error; the crawl ends cleanly."""
    server = Server(tmp_path / "data", NEARDUP_LOG_LEVEL="warning")
    with server, SiteServer(site()) as served:

        def stop() -> None:
            assert server.stop() == 0

        def start() -> None:
            server.start()

        served.before["/news/3"] = stop
        served.before[SYNDICATED] = start
        crawled = crawl(
            served.url + "/",
            FOLLOW,
            neardup_url=server.url,
            reactor="asyncio",
            settings={"NEARDUP_RETRIES": 2, "NEARDUP_BACKOFF": 0.05},
        )
        with Client(server.url) as client:
            stored = client.get_collection("crawl").stats.documents
    assert crawled.stats["finish_reason"] == "finished", crawled.log
    parsed = {path(url) for url in crawled.parsed}
    items = {path(item["url"]): item for item in crawled.items}
    dropped = {path(item["url"]): item for item in crawled.dropped}
    assert set(items) | set(dropped) == parsed - {"/"} and not set(items) & set(dropped)
    for page, item in dropped.items():
        assert path(item["duplicate_of"]) == COPIES[page]
        assert items[COPIES[page]]["cluster_id"] is not None  # its original was checked
    unchecked = {page for page, item in items.items() if item["cluster_id"] is None}
    assert "/news/3" in unchecked  # checked while the service was down: kept
    # Where the mirror or its original went unchecked, its links were followed.
    assert (MIRROR in dropped) == (not set(MIRROR_LINKS) & parsed)
    assert parsed <= PAGES | set(MIRROR_LINKS)
    counted = outcomes(crawled)
    assert counted["error"] == counted["error/unreachable"] >= len(unchecked)
    assert counted["error"] + counted["new"] + counted.get("duplicate", 0) == len(parsed)
    assert stored == counted["new"] + counted.get("duplicate", 0)
    assert "documents not checked (kept), from" in crawled.log


@pytest.mark.slow
def test_the_crawls_warc_inserted_with_the_cli_answers_as_the_crawl(
    service: Server, tmp_path: Path
) -> None:
    """The crawl's responses written to WARC by warcio as the crawl read them, inserted
    with ``neardup insert --warc`` into a fresh collection: the same duplicates as the
    crawl's; a run stopped after some pages, run again, counts each page once."""
    warc = tmp_path / "crawl.warc.gz"
    with SiteServer(site()) as served:
        crawled = crawl(
            served.url + "/",
            FOLLOW,
            neardup_url=service.url,
            collection="warc-crawl",
            warc=warc,
            settings={"NEARDUP_DROP": "none"},
        )
    assert crawled.stats["finish_reason"] == "finished", crawled.log
    crawl_answers = {item["url"]: item["duplicate_of"] for item in crawled.items}
    assert {path(u): d and path(d) for u, d in crawl_answers.items() if d} == COPIES

    first = tmp_path / "first.warc.gz"
    _copy_records(warc, first, 5)
    with Client(service.url) as client:
        client.create_collection("warc-cli")
    stopped = neardup(service, "insert", "warc-cli", "--warc", str(first))
    assert stopped.returncode == 0, stopped.stderr
    done = neardup(service, "insert", "warc-cli", "--warc", str(warc))
    assert done.returncode == 0, done.stderr
    before = {line["id"]: line for line in map(json.loads, stopped.stdout.splitlines())}
    after = {line["id"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert len(before) == 5 and set(after) == {served.url + page for page in PAGES}
    # The first run's pages come back as retries of themselves; the others are answered.
    assert all(after[url]["duplicate_of"] == url for url in before)
    answers = {url: line["duplicate_of"] for url, line in {**after, **before}.items()}
    assert {url: answers[url] for url in crawl_answers} == crawl_answers
    assert answers[served.url + "/"] is None
    copied_first = sum(line["duplicate_of"] is not None for line in before.values())
    new = len(PAGES) - len(COPIES) - (5 - copied_first)
    summary = f"{len(PAGES)} pages: {new} new, {len(COPIES) - copied_first} duplicates, "
    assert summary + "0 contained, 5 already stored, 0 refused" in done.stderr
    with Client(service.url) as client:
        assert client.get_collection("warc-cli").stats.documents == len(PAGES)


def _copy_records(source: Path, target: Path, count: int) -> None:
    """The first ``count`` response records of a WARC, as a crawl stopped there."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    with source.open("rb") as reading, target.open("wb") as writing:
        writer = WARCWriter(writing, gzip=True)
        for number, record in enumerate(ArchiveIterator(reading)):
            if number == count:
                break
            writer.write_record(record)


# ---------------------------------------------------------------- the pieces


SETTINGS = NeardupSettings()


def test_an_item_is_its_page_as_fetched_or_its_text() -> None:
    now = "2024-05-01T12:00:00Z"
    page = {"url": "https://a.example/1", "html": b"<p>caf\xe9</p>", "charset": "cp1252"}
    document, document_id, url = document_of(ItemAdapter(page), SETTINGS, now)  # type: ignore[misc,arg-type]
    assert (document_id, url) == ("https://a.example/1", "https://a.example/1")
    assert document.to_json() == {
        "html_base64": "PHA+Y2Fm6TwvcD4=",
        "id": "https://a.example/1",
        "charset": "cp1252",
        "metadata": {"url": "https://a.example/1"},
        "timestamp": now,
    }
    decoded = {"url": "u", "html": "<p>café</p>"}
    assert document_of(ItemAdapter(decoded), SETTINGS, now)[0] == NewDocument(  # type: ignore[arg-type]
        "<p>café</p>", "u", {"url": "u"}, True, now
    )
    own_id = NeardupSettings(id_field="sku", text_field="body")
    text = {"url": "u", "sku": "S-1", "body": "a plain text"}
    assert document_of(ItemAdapter(text), own_id, now)[:2] == (  # type: ignore[arg-type]
        NewDocument("a plain text", "S-1", {"url": "u"}, False, now),
        "S-1",
    )
    assert document_of(ItemAdapter({"url": "u"}), SETTINGS, now) == (  # type: ignore[arg-type]
        "no 'html' nor 'text' field"
    )
    assert "no 'url' field" in document_of(ItemAdapter({"html": "x"}), SETTINGS, now)  # type: ignore[arg-type, operator]


def _result(document_id: str, duplicate_of: str | None, **fields: Any) -> InsertResult:
    return InsertResult(document_id, True, duplicate_of, duplicate_of or document_id, (), **fields)


def test_answers_tell_new_duplicate_contained_stored_and_unchecked() -> None:
    inside = (Match("big", 0.3, 20, ("passage",)),)
    assert Answer("a", "a", _result("a", None)).outcome == "new"
    assert Answer("a", "a", _result("a", "b")).outcome == "duplicate"
    contained = Answer("a", "a", _result("a", None, contained_in=inside))
    assert (contained.outcome, contained.contained_in) == ("contained", ["big"])
    # Sent again (a resumed crawl): a duplicate of itself, told apart by its cluster.
    first = Answer("a", "a", InsertResult("a", False, "a", "a", ()))
    repeat = Answer("c", "c", InsertResult("c", False, "c", "a", ()))
    assert (first.outcome, first.already_stored, first.duplicate_of) == ("new", True, None)
    assert (repeat.outcome, repeat.duplicate_of) == ("duplicate", "a")
    assert Answer("a", "a", error="unreachable").outcome == "error"


class Story(Item):
    url = Field()
    html = Field()
    duplicate_of = Field()
    cluster_id = Field()


def test_annotations_are_set_where_the_item_takes_them() -> None:
    answer = Answer("a", "a", _result("a", "b", contains=(Match("q", 1, 0, ("passage",)),)))
    plain: dict[str, Any] = {"url": "a"}
    assert annotate(ItemAdapter(plain), answer) == []
    assert plain == {
        "url": "a",
        "duplicate_of": "b",
        "cluster_id": "b",
        "contains": ["q"],
        "contained_in": [],
    }
    story = Story(url="a")
    assert annotate(ItemAdapter(story), answer) == ["contains", "contained_in"]
    assert dict(story) == {"url": "a", "duplicate_of": "b", "cluster_id": "b"}


def test_settings_are_read_scrapy_style_and_checked() -> None:
    from scrapy.settings import Settings

    read = NeardupSettings.from_settings(
        Settings({"NEARDUP_URL": "http://n:1", "NEARDUP_DROP": "none", "NEARDUP_BATCH_SIZE": "7"})
    )
    assert (read.url, read.drop, read.batch_size, read.follow_duplicates) == (
        "http://n:1",
        "none",
        7,
        False,
    )
    with pytest.raises(ValueError, match='set "duplicates" or "none"'):
        NeardupSettings.from_settings(Settings({"NEARDUP_DROP": "all"}))


class Stats:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


def _checked(
    transport: httpx.MockTransport, documents: list[NewPage | NewDocument]
) -> tuple[list[Answer], Stats]:
    """The Checker's answers for the documents, on an asyncio loop, the service faked."""
    stats = Stats()

    async def run() -> list[Answer]:
        client = Client(
            "http://neardup", transport=transport, retry=Retry(retries=3, backoff=0.001)
        )
        checker = Checker(SETTINGS, stats, client)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        deferreds: list[Deferred[Answer]] = [
            checker.check(document, str(document.id), None) for document in documents
        ]
        answers = [await deferred.asFuture(loop) for deferred in deferreds]
        checker.close()
        return answers

    return asyncio.run(run()), stats


def _answer(request: httpx.Request) -> httpx.Response:
    if request.method == "GET":
        return httpx.Response(200, json={"name": "default", "settings": {}, "stats": {}})
    documents = json.loads(request.content)["documents"]
    results: list[dict[str, Any]] = []
    for document in documents:
        if "html_base64" not in document:
            results.append(
                {"id": document["id"], "error": {"code": "invalid_body", "message": "?"}}
            )
        else:
            results.append(
                {
                    "id": document["id"],
                    "inserted": True,
                    "duplicate_of": None,
                    "cluster_id": document["id"],
                    "matches": [],
                }
            )
    return httpx.Response(200, json={"results": results})


def test_a_503_is_retried_and_a_refused_document_kept_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = iter([503, 503])

    def service(request: httpx.Request) -> httpx.Response:
        status = next(failures, None) if request.method == "POST" else None
        if status is not None:
            return httpx.Response(status, json={"error": {"code": "not_ready", "message": "."}})
        return _answer(request)

    refused = NewDocument("not a page", "https://a.example/bad")
    with caplog.at_level(logging.WARNING):
        answers, stats = _checked(
            httpx.MockTransport(service),
            [NewPage(b"<p>one</p>", id="https://a.example/1"), refused],
        )
    assert [answer.outcome for answer in answers] == ["new", "error"]
    assert stats.values == {
        "neardup/retries": 2,
        "neardup/new": 1,
        "neardup/error": 1,
        "neardup/error/invalid_body": 1,
    }
    assert "neardup refused https://a.example/bad (kept): invalid_body" in caplog.text


def test_a_service_out_of_reach_answers_every_document_with_an_error() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    pages: list[NewPage | NewDocument] = [
        NewPage(b"<p>%d</p>" % n, id=f"https://a.example/{n}") for n in range(3)
    ]
    answers, stats = _checked(httpx.MockTransport(down), pages)
    assert [answer.error for answer in answers] == ["unreachable"] * 3
    assert stats.values["neardup/error/unreachable"] == 3
    # 3 retries of each request: the collection's check, the first page (sent at once),
    # the two that came while it was in flight (one batch).
    assert stats.values["neardup/retries"] == 3 * 3
