"""neardup_client against real server processes: every method, sync and async, retries
during the start-up rebuild and after connection errors, batches cut to the server's
limits with per-document errors, export iteration, and `neardup search` / `insert`."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from devkit.corpus import english_like_text, mutate_words
from devkit.server import STARTUP_SECONDS, Server, free_port, neardup_command
from neardup_client import (
    APIError,
    AsyncClient,
    BatchError,
    Client,
    CollectionSettings,
    Conflict,
    ExportedCollection,
    ExportedDocument,
    InsertResult,
    InsufficientStorage,
    InvalidBody,
    NewDocument,
    NotFound,
    PassageSettings,
    RateLimited,
    RetentionSettings,
    Retry,
    RetryEvent,
    ServiceUnavailable,
    TransportError,
    exported_documents,
    parse_metrics,
    parse_retry_after,
    read_export,
)

ROOT = Path(__file__).resolve().parents[2]
BATCH_LIMIT = 4  # the server's NEARDUP_MAX_BATCH_DOCUMENTS in these tests
BODY_LIMIT = 65536  # and its NEARDUP_MAX_BODY_BYTES
BATCH_ROUTE = "/v1/collections/{name}/documents/batch"


def story(seed: int, length: int = 1500) -> str:
    return english_like_text(random.Random(seed), length)


def near_copy(text: str, seed: int) -> str:
    return mutate_words(random.Random(seed), text, 0.005)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("client") / "data"
    with Server(
        data_dir,
        NEARDUP_MAX_BATCH_DOCUMENTS=str(BATCH_LIMIT),
        NEARDUP_MAX_BODY_BYTES=str(BODY_LIMIT),
        NEARDUP_LOG_LEVEL="warning",
    ) as running:
        yield running


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, max_batch_documents=BATCH_LIMIT, max_batch_bytes=BODY_LIMIT) as c:
        yield c


def batch_requests(client: Client, status: int) -> float:
    """Batch requests the server has answered with this status (its own count)."""
    return sum(
        sample.value
        for sample in client.metrics()
        if sample.name == "neardup_requests_total"
        and sample.labels.get("route") == BATCH_ROUTE
        and sample.labels.get("status") == str(status)
    )


# ---------------------------------------------------------------- every method, sync


def test_collections(client: Client) -> None:
    created = client.create_collection("c-life", {"store_text": True, "shingle": {"size": 3}})
    assert created.created is True and created.name == "c-life"
    assert created.settings.store_text and created.settings.shingle.size == 3
    assert created.stats.documents == 0
    again = client.create_collection("c-life", {"store_text": True, "shingle": {"size": 3}})
    assert again.created is False and again.settings == created.settings
    with pytest.raises(Conflict) as conflict:
        client.create_collection("c-life", CollectionSettings())
    assert conflict.value.status == 409 and conflict.value.code == "settings_conflict"
    assert conflict.value.request_id  # the service's X-Request-ID, to quote in a report
    # CollectionSettings() holds the service's defaults (a drift fails here).
    assert client.create_collection("c-defaults").settings == CollectionSettings()
    names = [collection.name for collection in client.list_collections()]
    assert "default" in names and "c-life" in names
    assert client.get_collection("c-life").settings == created.settings
    client.delete_collection("c-life")
    with pytest.raises(NotFound) as missing:
        client.get_collection("c-life")
    assert missing.value.code == "collection_not_found"


def test_documents_search_and_similar(client: Client) -> None:
    client.create_collection("c-docs", {"store_text": True})
    original = story(1)
    first = client.insert("c-docs", text=original, id="a", metadata={"source": "wire"})
    assert first == InsertResult("a", True, None, "a", (), contains=(), contained_in=())
    copy = near_copy(original, 2)
    second = client.insert("c-docs", text=copy, id="b")
    assert second.inserted and second.duplicate_of == "a" and second.cluster_id == "a"
    assert second.is_duplicate and [m.id for m in second.matches] == ["a"]
    match = second.matches[0]
    assert 0.5 < match.similarity < 1 and match.hamming_distance >= 0
    assert "minhash" in match.methods
    # The same id, text and metadata again: a retry, not a conflict.
    retried = client.insert("c-docs", text=original, id="a", metadata={"source": "wire"})
    assert retried.inserted is False and retried.duplicate_of == "a"
    with pytest.raises(Conflict) as exists:
        client.insert("c-docs", text=story(3), id="a")
    assert exists.value.code == "document_exists"
    skipped = client.insert("c-docs", text=copy, on_duplicate="skip")
    assert skipped.inserted is False and skipped.duplicate_of == "a"
    generated = client.insert("c-docs", text=story(4))
    assert generated.inserted and len(generated.id) == 32  # a UUID, made by the client

    document = client.get("c-docs", "a")
    assert document.text == original and document.metadata == {"source": "wire"}
    assert document.cluster_id == "a" and len(document.simhash) == 16
    assert document.created_at.endswith("Z")

    found = client.search("c-docs", text=original)
    assert [m.id for m in found][:2] == ["a", "b"] and found[0].similarity == 1.0
    assert set(found[0].methods) >= {"exact", "simhash", "minhash"}
    assert client.search("c-docs", text=original, limit=1) == found[:1]
    strict = client.search("c-docs", text=original, min_similarity=0.99)
    # b is no near-duplicate at 0.99, but its passages cover 99% of both texts.
    assert strict[0] == found[0] and [(m.id, m.methods) for m in strict[1:]] == [
        ("b", ("passage",))
    ]
    client.insert("c-docs", text="Breaking: quake hits Tokyo", id="t1")
    by_get = client.search("c-docs", text="Breaking: quake hits Tokyo, 5 dead", method="GET")
    assert [(m.id, m.methods) for m in by_get] == [("t1", ("ngram",))]
    assert by_get == client.search("c-docs", text="Breaking: quake hits Tokyo, 5 dead")
    html = client.search("c-docs", text=f"<p>{original}</p><script>x()</script>", html=True)
    assert html[0].id == "a" and html[0].similarity == 1.0
    page = f"<html><head><title>Oil</title></head><body><p>{original}</p></body></html>"
    as_page = client.insert("c-docs", text=page, id="page", html=True)
    assert (as_page.extracted, as_page.title, as_page.duplicate_of) == ("main", "Oil", "a")
    assert client.insert("c-docs", text=original, id="plain").extracted is None
    client.delete("c-docs", "page")
    client.delete("c-docs", "plain")
    assert [m.id for m in client.similar("c-docs", "b")] == ["a"]
    assert client.similar("c-docs", "b", min_similarity=0.999) == []

    replaced = client.replace("c-docs", "b", story(5), metadata={"v": 2})
    assert replaced.replaced is True and replaced.duplicate_of is None
    created = client.replace("c-docs", "c", copy)
    assert created.replaced is False and created.duplicate_of == "a"
    assert client.get("c-docs", "b").metadata == {"v": 2}

    client.delete("c-docs", "b")
    with pytest.raises(NotFound) as gone:
        client.get("c-docs", "b")
    assert gone.value.status == 404
    with pytest.raises(NotFound):
        client.delete("c-docs", "b")
    with pytest.raises(InvalidBody) as empty:
        client.insert("c-docs", text=" \u0000 ")
    assert empty.value.code == "invalid_document"
    client.insert("c-docs", text=story(6), id="odd id?#é%")  # quoted in the path
    assert client.get("c-docs", "odd id?#é%").id == "odd id?#é%"


def test_operations(client: Client) -> None:
    assert client.is_live() and client.is_ready()
    client.wait_until_ready(timeout=5)
    client.create_collection("c-ops")
    client.insert_batch("c-ops", [NewDocument(story(seed)) for seed in range(10, 13)])
    health = client.index_health("c-ops")
    assert health.collection == "c-ops" and health.documents == 3
    assert set(health.unmerged_entries) == {"exact", "simhash", "minhash", "ngram", "passage"}
    assert sum(health.unmerged_entries.values()) + health.merges > 0
    assert all(count == 0 for count in health.tombstones.values())
    assert "neardup_requests_total" in client.metrics_text()
    assert "/v1/collections/{name}/search" in client.openapi()["paths"]


def test_document_times_windows_and_limits(client: Client) -> None:
    client.create_collection("c-times", {"store_text": True, "match_window": "48h"})
    original, copy = story(170), near_copy(story(170), 171)
    client.insert("c-times", text=original, id="a", timestamp="2024-05-01T12:00:00Z")
    late = client.insert("c-times", text=copy, id="b", timestamp=datetime(2024, 5, 5, tzinfo=UTC))
    assert late.inserted and late.duplicate_of is None  # four days later: outside the window
    near = client.insert("c-times", text=copy, id="c", timestamp=1714568400)  # 13:00 that day
    assert near.duplicate_of == "a"
    assert client.get("c-times", "a").timestamp == "2024-05-01T12:00:00Z"
    since = client.search("c-times", text=original, since="2024-05-02T00:00:00Z")
    assert [m.id for m in since] == ["b"]
    until = client.search(
        "c-times", text=original, until=datetime(2024, 5, 2, tzinfo=UTC), method="GET"
    )
    assert [m.id for m in until] == ["a", "c"]
    assert [m.id for m in client.similar("c-times", "c", since=1714564801)] == ["b"]

    patched = client.update_collection("c-times", {"limits": {"max_documents": 3}})
    assert patched.settings.limits.max_documents == 3 and patched.settings.match_window == "48h"
    assert patched.stats.oldest_timestamp == "2024-05-01T12:00:00Z"
    with pytest.raises(InsufficientStorage) as full:
        client.insert("c-times", text=story(172))
    assert full.value.status == 507
    refused = client.insert_batch("c-times", [NewDocument(story(173), id="d")])
    assert [(e.id, e.code) for e in refused.errors] == [("d", "insufficient_storage")]
    with pytest.raises(Conflict) as fixed:
        client.update_collection("c-times", {"store_text": False})
    assert fixed.value.code == "settings_conflict"


# ---------------------------------------------------------------- batches


def test_batch_is_cut_to_the_limit_and_refused_documents_come_back_in_place(
    client: Client,
) -> None:
    client.create_collection("c-batch")
    documents: list[NewDocument | dict[str, object]] = [
        NewDocument(story(20 + i), id=f"d{i}", metadata={"i": i}) for i in range(10)
    ]
    documents[3] = {"id": "d3", "text": " \u0000 "}  # nothing left to fingerprint
    documents[5] = {"id": "twice", "text": story(40)}
    documents[6] = {"id": "twice", "text": story(41)}  # an id earlier in the same request
    documents[8] = {"id": "d8", "text": 5}  # not a text
    documents[9] = {"id": "d0", "text": story(42)}  # stored just before with other content
    before = batch_requests(client, 200)
    result = client.insert_batch("c-batch", documents)
    assert batch_requests(client, 200) - before == 3  # 10 documents, 4 a request
    assert len(result) == 10 and not result.ok
    assert [(e.position, e.id, e.code) for e in result.errors] == [
        (3, "d3", "invalid_document"),
        (6, "twice", "duplicate_id"),
        (8, "d8", "invalid_body"),
        (9, "d0", "document_exists"),
    ]
    assert all(error.message for error in result.errors)
    assert [r.id for r in result.inserted] == ["d0", "d1", "d2", "d4", "twice", "d7"]
    assert client.get_collection("c-batch").stats.documents == 6
    with pytest.raises(BatchError) as raised:
        result.raise_for_errors()
    assert [error.position for error in raised.value.errors] == [3, 6, 8, 9]
    # Sent again (a crawler's retry): every stored document is answered as a retry.
    again = client.insert_batch("c-batch", documents[:3])
    assert [(r.id, r.inserted) for r in again.inserted] == [(f"d{i}", False) for i in range(3)]


def test_a_batch_above_the_server_limits_is_split(server: Server) -> None:
    """A client that does not know the server's limits (here 1000 documents and 16 MiB,
    the defaults, against 4 and 64 KiB) still gets every document in: a batch refused
    whole as too large is sent again in halves, and a document too large alone for a
    request gets its own too_large error at its position."""
    with Client(server.url) as client:
        client.create_collection("c-split")
        documents = [NewDocument(story(60 + i, 800), id=f"s{i}") for i in range(11)]
        documents[7] = NewDocument("x " * 40_000, id="huge")  # 80 KB: above the body limit
        refused_before = batch_requests(client, 413)
        result = client.insert_batch("c-split", documents)
        assert batch_requests(client, 413) > refused_before
        assert [type(r) for r in result.results].count(InsertResult) == 10
        [error] = result.errors
        assert (error.position, error.id, error.code) == (7, "huge", "too_large")
        assert client.get_collection("c-split").stats.documents == 10


def test_insert_many_is_lazy(client: Client) -> None:
    client.create_collection("c-lazy")
    taken = []

    def documents() -> Iterator[dict[str, str]]:
        for i in range(9):
            taken.append(i)
            yield {"id": f"l{i}", "text": story(80 + i, 400)}

    results = client.insert_many("c-lazy", documents(), batch_size=3)
    first = next(results)
    assert isinstance(first, InsertResult) and first.id == "l0"
    assert len(taken) <= 4  # one batch of 3, and the document that closed it
    assert [r.id for r in results] == [f"l{i}" for i in range(1, 9)]


# ---------------------------------------------------------------- the async twin


def test_async_client_does_the_same(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, max_batch_documents=BATCH_LIMIT) as client:
            assert await client.is_live() and await client.is_ready()
            await client.wait_until_ready(timeout=5)
            created = await client.create_collection("c-async", {"store_text": True})
            assert created.created
            assert "c-async" in [c.name for c in await client.list_collections()]
            original = story(100)
            first = await client.insert("c-async", text=original, id="x")
            assert first.inserted and first.duplicate_of is None

            async def documents() -> AsyncIterator[NewDocument]:
                for i in range(5):
                    yield NewDocument(near_copy(original, 101 + i), id=f"y{i}")
                yield NewDocument(" ", id="blank")

            result = await client.insert_batch("c-async", documents())
            assert [r.duplicate_of for r in result.inserted] == ["x"] * 5
            assert [(e.position, e.code) for e in result.errors] == [(5, "invalid_document")]
            assert (await client.get("c-async", "y0")).text is not None
            assert (await client.search("c-async", text=original))[0].id == "x"
            assert (await client.search("c-async", text="short", method="GET")) == []
            assert "x" in [m.id for m in await client.similar("c-async", "y0")]
            assert (await client.replace("c-async", "x", story(110))).replaced is True
            await client.delete("c-async", "y0")
            with pytest.raises(NotFound):
                await client.get("c-async", "y0")
            health = await client.index_health("c-async")
            assert health.documents == (await client.get_collection("c-async")).stats.documents
            assert "neardup_documents" in await client.metrics_text()
            assert "paths" in await client.openapi()
            await client.delete_collection("c-async")
            with pytest.raises(NotFound):
                await client.get_collection("c-async")

    asyncio.run(scenario())


# ---------------------------------------------------------------- retries


class HeldServer:
    """tests/held_server.py in a child process: up, but rebuilding until released."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / "held.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.held_server", str(self.port), str(data_dir)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.released = False

    def wait_until_live(self) -> None:
        """Until it listens: the client's own retries of connection errors wait for it,
        on /metrics, which answers during the rebuild."""
        retry = Retry(retries=STARTUP_SECONDS * 10, backoff=0.05, max_backoff=0.1)
        with Client(self.url, retry=retry) as client:
            client.metrics_text()
            assert self.process.poll() is None, self.log.read_text()
            assert not client.is_ready()

    def release(self) -> None:
        if not self.released:
            assert self.process.stdin is not None
            self.process.stdin.write(b"go\n")
            self.process.stdin.flush()
            self.released = True

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        assert self.process.stdin is not None
        self.process.stdin.close()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[HeldServer]:
    server = HeldServer(tmp_path / "data")
    try:
        server.wait_until_live()
        yield server
    finally:
        server.stop()


def test_a_503_during_the_rebuild_is_retried_after_retry_after(held: HeldServer) -> None:
    events: list[RetryEvent] = []

    def on_retry(event: RetryEvent) -> None:
        events.append(event)
        held.release()  # the rebuild goes on once the client has been told to wait

    # Retries enough for a rebuild that compiles the kernels (an install without warm-up).
    with Client(held.url, on_retry=on_retry, retry=Retry(retries=60)) as client:
        assert not client.is_ready()
        created = client.create_collection("after-rebuild", {"store_text": True})
        assert created.created
        assert client.insert("after-rebuild", text=story(120), id="r").inserted
    first = events[0]
    assert (first.method, first.path, first.attempt) == ("PUT", "/v1/collections/after-rebuild", 1)
    assert (first.status, first.code, first.retry_after) == (503, "not_ready", 1.0)
    assert first.delay == 1.0  # the wait the service asked for
    assert all(event.status == 503 for event in events)


def test_the_async_client_retries_the_rebuild_too(held: HeldServer) -> None:
    events: list[RetryEvent] = []

    async def on_retry(event: RetryEvent) -> None:
        events.append(event)
        held.release()

    async def scenario() -> None:
        async with AsyncClient(held.url, on_retry=on_retry, retry=Retry(retries=60)) as client:
            assert [c.name for c in await client.list_collections()] == ["default"]

    asyncio.run(scenario())
    assert events and events[0].status == 503 and events[0].delay == 1.0


def test_a_503_outlasting_the_retries_is_raised(held: HeldServer) -> None:
    waits: list[float] = []
    client = Client(held.url, retry=Retry(retries=2), sleep=waits.append)
    with client, pytest.raises(ServiceUnavailable) as raised:
        client.get_collection("default")
    assert raised.value.code == "not_ready" and raised.value.retry_after == 1.0
    assert waits == [1.0, 1.0]


def test_connection_errors_are_retried_until_the_server_listens(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", NEARDUP_LOG_LEVEL="warning")  # not started yet
    events: list[RetryEvent] = []

    def on_retry(event: RetryEvent) -> None:
        events.append(event)
        if server.process is None:
            server.start()  # returns once the server is ready

    try:
        with Client(server.url, on_retry=on_retry, retry=Retry(backoff=0.01)) as client:
            assert [c.name for c in client.list_collections()] == ["default"]
    finally:
        server.kill()
    assert len(events) == 1 and isinstance(events[0].error, httpx.ConnectError)
    assert events[0].status is None and 0.005 <= events[0].delay <= 0.01


def test_connection_errors_outlasting_the_retries_are_raised() -> None:
    waits: list[float] = []
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = Client(url, retry=Retry(retries=3, backoff=0.5), sleep=waits.append)
    with client, pytest.raises(TransportError) as raised:
        client.list_collections()
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert len(waits) == 3
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0 and 1.0 <= waits[2] <= 2.0


def _replying(*answers: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport answering in turn (for what a real neardup never sends: 429)."""
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return queue.pop(0)

    return httpx.MockTransport(handle), seen


def _error(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": code.replace("_", " ")}}
    return httpx.Response(status, json=body, headers=headers)


def test_429_from_a_proxy_is_retried_after_its_retry_after() -> None:
    now = format_datetime(datetime.now(UTC), usegmt=True)
    transport, seen = _replying(
        _error(429, "rate_limited", **{"Retry-After": "3"}),
        _error(429, "rate_limited", **{"Retry-After": "999"}),
        _error(503, "not_ready", **{"Retry-After": now}),
        _error(503, "storage_unavailable"),
        httpx.Response(200, json={"matches": []}),
    )
    waits: list[float] = []
    retry = Retry(max_retry_after=30, backoff=2, max_backoff=8)
    with Client("http://neardup.test", transport=transport, retry=retry, sleep=waits.append) as c:
        assert c.search("news", text="x") == []
    assert len(seen) == 5 and all(r.url.path == "/v1/collections/news/search" for r in seen)
    assert waits[:2] == [3.0, 30.0]  # as asked; a wait past max_retry_after is cut to it
    assert 0.0 <= waits[2] <= 1.0  # an HTTP-date: now
    # No Retry-After: 2 s doubled per retry (16 s for the 4th), at most 8, jittered by half.
    assert 4.0 <= waits[3] <= 8.0


def test_errors_other_than_503_and_429_are_not_retried() -> None:
    transport, seen = _replying(_error(422, "invalid_body"))
    waits: list[float] = []
    client = Client("http://neardup.test", transport=transport, sleep=waits.append)
    with client, pytest.raises(InvalidBody):
        client.insert("news", text="")
    assert len(seen) == 1 and waits == []
    transport, seen = _replying(_error(429, "rate_limited"), _error(429, "rate_limited"))
    with (
        Client(
            "http://neardup.test", transport=transport, retry=Retry(retries=1), sleep=waits.append
        ) as client,
        pytest.raises(RateLimited),
    ):
        client.list_collections()
    assert len(seen) == 2


def test_an_error_body_outside_the_contract_still_raises_with_its_status() -> None:
    transport, _ = _replying(httpx.Response(502, text="<html>Bad gateway</html>"))
    client = Client("http://neardup.test", transport=transport)
    with client, pytest.raises(APIError) as raised:
        client.list_collections()
    assert (raised.value.status, raised.value.code) == (502, "http_502")
    assert "Bad gateway" in raised.value.message


def test_a_delete_whose_answer_was_lost_is_not_an_error() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ReadError("connection reset after the request was sent")
        return _error(404, "document_not_found")

    with Client(
        "http://neardup.test", transport=httpx.MockTransport(handle), sleep=lambda _: None
    ) as client:
        client.delete("news", "a")  # the first attempt deleted it
    assert calls == 2


def test_an_insert_without_a_client_id_is_not_resent_after_it_may_have_arrived() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("reset")

    transport = httpx.MockTransport(handle)
    client = Client("http://neardup.test", transport=transport, generate_ids=False)
    with client, pytest.raises(TransportError):
        client.insert("news", text="x")


INSERTED = {"id": "a", "inserted": True, "duplicate_of": None, "cluster_id": "a", "matches": []}
NEWER_COLLECTION = {
    "name": "news",
    "settings": {
        "shingle": {"unit": "word", "size": 5},
        "store_text": False,
        "match_window": "48h",
        "retention": {"max_age": "7d", "max_documents": None},
        "limits": {"max_documents": 1000},
        "a_later_setting": {"x": 1},
    },
    "stats": {
        "documents": 5,
        "duplicates": 1,
        "merges": 0,
        "index_bytes": 10,
        "evicted": 3,
        "expiring": 1,
        "oldest_timestamp": "2024-05-01T12:00:00Z",
    },
}


def test_document_times_and_the_time_settings_are_sent_as_the_service_takes_them() -> None:
    """Document times (timestamp; since / until of inserts and searches), the settings
    match_window, retention and limits, PATCH and 507, as the contract adds them."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path, method = request.url.path, request.method
        if method == "PATCH":
            return httpx.Response(200, json=NEWER_COLLECTION)
        if path.endswith(("/search", "/similar")):
            return httpx.Response(200, json={"matches": []})
        if path.endswith("/batch"):
            return httpx.Response(200, json={"results": [INSERTED]})
        if path.startswith("/v1/collections/full/"):
            return _error(507, "insufficient_storage")
        if method in ("POST", "PUT"):
            return httpx.Response(201, json=INSERTED)
        document = {
            "id": "a",
            "metadata": None,
            "created_at": "2024-05-03T00:00:00Z",
            "timestamp": "2024-05-01T12:00:00Z",
            "cluster_id": "a",
            "simhash": "0" * 16,
            "text": None,
        }
        return httpx.Response(200, json=document)

    def body() -> Any:
        return json.loads(seen[-1].content)

    when = datetime(2024, 5, 1, 12, tzinfo=UTC)
    client = Client("http://neardup.test", transport=httpx.MockTransport(handle))
    client.insert("news", text="x", id="a", timestamp=when, since=1714500000, until="2024-05-02Z")
    assert body() == {
        "text": "x",
        "id": "a",
        "timestamp": "2024-05-01T12:00:00+00:00",
        "since": 1714500000,
        "until": "2024-05-02Z",
    }
    client.insert_batch("news", [NewDocument("y", id="b", timestamp=1714564800)], since=when)
    assert body() == {
        "documents": [{"text": "y", "id": "b", "timestamp": 1714564800}],
        "since": "2024-05-01T12:00:00+00:00",
    }
    client.replace("news", "a", "z", timestamp="2024-05-01T12:00:00Z", until=when)
    assert body() == {
        "text": "z",
        "timestamp": "2024-05-01T12:00:00Z",
        "until": "2024-05-01T12:00:00+00:00",
    }
    client.search("news", text="x", since=when)
    assert body() == {"text": "x", "since": "2024-05-01T12:00:00+00:00"}
    client.search("news", text="x", method="GET", since=1714500000, until=when)
    assert dict(seen[-1].url.params) == {
        "text": "x",
        "since": "1714500000",
        "until": "2024-05-01T12:00:00+00:00",
    }
    client.similar("news", "a", since="2024-05-01T00:00:00Z")
    assert dict(seen[-1].url.params) == {"since": "2024-05-01T00:00:00Z"}
    assert client.get("news", "a").timestamp == "2024-05-01T12:00:00Z"

    patched = client.update_collection("news", {"retention": {"max_age": "7d"}})
    assert seen[-1].method == "PATCH" and body() == {"retention": {"max_age": "7d"}}
    settings = patched.settings
    assert settings.match_window == "48h" and settings.limits.max_documents == 1000
    assert settings.retention == RetentionSettings(max_age="7d")
    assert (patched.stats.evicted, patched.stats.expiring) == (3, 1)
    assert patched.stats.oldest_timestamp == "2024-05-01T12:00:00Z"
    # Set, the time settings are sent; unset, they are left out (older services refuse
    # fields they do not know).
    assert set(CollectionSettings().to_json()) == {
        "shingle",
        "simhash",
        "minhash",
        "ngram",
        "store_text",
    }
    with_times = CollectionSettings(match_window="1h", retention=RetentionSettings(max_age="7d"))
    assert with_times.to_json()["match_window"] == "1h"
    assert with_times.to_json()["retention"] == {"max_age": "7d"}
    assert "limits" not in with_times.to_json()
    assert CollectionSettings.from_json(with_times.to_json()) == with_times
    with pytest.raises(InsufficientStorage) as full:
        client.insert("full", text="x")
    assert full.value.status == 507 and full.value.code == "insufficient_storage"
    with pytest.raises(ValueError, match="time zone"):
        client.insert("news", text="x", timestamp=datetime(2024, 5, 1))
    client.close()


def test_retry_after_values() -> None:
    assert parse_retry_after("1") == 1.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_metrics_parsing() -> None:
    text = textwrap.dedent(
        """\
        # HELP neardup_documents Live documents per collection
        # TYPE neardup_documents gauge
        neardup_documents{collection="news"} 12.0
        neardup_index_tombstones{collection="news",index="simhash"} 3.0
        odd{path="a\\"b\\\\c"} 1e3
        """
    )
    samples = parse_metrics(text)
    assert [(s.name, s.value) for s in samples] == [
        ("neardup_documents", 12.0),
        ("neardup_index_tombstones", 3.0),
        ("odd", 1000.0),
    ]
    assert samples[1].labels == {"collection": "news", "index": "simhash"}
    assert samples[2].labels == {"path": 'a"b\\c'}


# ---------------------------------------------------------------- export iteration


def test_an_export_is_read_and_posted_again_under_other_settings(
    client: Client, server: Server, tmp_path: Path
) -> None:
    client.create_collection("c-export", {"store_text": True})
    texts = {f"e{i}": story(130 + i, 600) for i in range(5)}
    documents = [NewDocument(text, id=i, metadata={"n": 1}) for i, text in texts.items()]
    client.insert_batch("c-export", documents).raise_for_errors()
    export = tmp_path / "export.jsonl"
    subprocess.run(
        [
            neardup_command(),
            "export",
            "--data-dir",
            str(server.data_dir),
            "--collection",
            "c-export",
            "--output",
            str(export),
        ],
        check=True,
        capture_output=True,
    )
    records = list(read_export(export))
    assert isinstance(records[0], ExportedCollection) and records[0].name == "c-export"
    assert records[0].settings.store_text
    documents = [r for r in records if isinstance(r, ExportedDocument)]
    assert {d.id: d.text for d in documents} == texts
    assert all(d.metadata == {"n": 1} and d.cluster_id == d.id for d in documents)
    assert all(d.timestamp and d.timestamp.endswith("Z") for d in documents)
    with export.open("rb") as stream:  # a binary stream, and one collection's documents
        assert [d.id for d in exported_documents(stream, "c-export")] == list(texts)
    assert list(read_export(export, collection="other")) == []

    client.create_collection("c-reindexed", {"store_text": True, "shingle": {"size": 3}})
    reinserted = client.insert_batch(
        "c-reindexed", (d.to_new_document() for d in exported_documents(export))
    ).raise_for_errors()
    assert [r.id for r in reinserted.inserted] == list(texts)
    again = client.get("c-reindexed", "e2")
    assert again.text == texts["e2"] and again.timestamp == client.get("c-export", "e2").timestamp


def test_a_line_that_is_not_an_export_record_is_named(tmp_path: Path) -> None:
    from neardup_client import ExportFormatError

    lines = ['{"type": "collection", "name": "x", "settings": {}}', "", "not json"]
    with pytest.raises(ExportFormatError, match="line 3"):
        list(read_export(lines))


# ---------------------------------------------------------------- without the server's dependencies

# Fails any import of the server's dependencies (and, for the client alone, of the app).
BLOCKER = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, Blocked())
"""
SERVER_MODULES = {"numba", "numpy", "fastapi", "starlette", "uvicorn", "prometheus_client"}


def run_blocked(
    code: str, blocked: set[str], *arguments: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    program = f"BLOCKED = {sorted(blocked)!r}\n{BLOCKER}\n{textwrap.dedent(code)}"
    return subprocess.run(
        [sys.executable, "-c", program, *arguments],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_client_imports_without_the_server_dependencies(server: Server) -> None:
    done = run_blocked(
        """
        import sys
        from neardup_client import Client
        with Client(sys.argv[1]) as client:
            names = [c.name for c in client.list_collections()]
        assert "default" in names, names
        print(sorted(m for m in sys.modules if m.partition(".")[0] in {"app", "pydantic"}))
        """,
        SERVER_MODULES | {"app", "pydantic"},
        server.url,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_blocker_does_block() -> None:
    done = run_blocked("import app.main", SERVER_MODULES)
    assert done.returncode != 0 and "is blocked in this test" in done.stderr


# ---------------------------------------------------------------- neardup search / insert


def neardup(server: Server, *arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The console script, with the server's modules blocked: the commands must not
    import them."""
    return run_blocked(
        "import sys\nfrom app.cli import main\nmain(sys.argv[1:])",
        SERVER_MODULES,
        *arguments,
        "--url",
        server.url,
        stdin=stdin,
    )


def test_neardup_insert_and_search(server: Server, client: Client, tmp_path: Path) -> None:
    client.create_collection("c-cli")
    original = story(150)
    inserted = neardup(server, "insert", "c-cli", original, "--id", "one", "--metadata", '{"k": 1}')
    assert inserted.returncode == 0, inserted.stderr
    assert json.loads(inserted.stdout) == {
        "id": "one",
        "inserted": True,
        "duplicate_of": None,
        "cluster_id": "one",
        "matches": [],
    }
    query = tmp_path / "query.txt"
    query.write_text(near_copy(original, 151))
    found = neardup(server, "search", "c-cli", "--file", str(query))
    assert found.returncode == 0, found.stderr
    [match] = json.loads(found.stdout)["matches"]
    assert match["id"] == "one" and "minhash" in match["methods"]
    table = neardup(server, "search", "c-cli", "--file", str(query), "--format", "table")
    assert table.stdout.splitlines()[0].split() == ["id", "similarity", "hamming", "methods"]
    assert table.stdout.splitlines()[1].startswith("one ")
    missing = neardup(server, "search", "nowhere", "text")
    assert missing.returncode == 1
    assert "404 collection_not_found" in missing.stderr


def test_neardup_insert_json_lines(server: Server, client: Client) -> None:
    client.create_collection("c-lines")
    original = story(160)
    lines = [
        json.dumps({"id": "p", "text": original}),
        json.dumps({"id": "q", "text": near_copy(original, 161), "metadata": {"m": 1}}),
        "not json",
        json.dumps({"id": "r", "text": ""}),
        "",
        json.dumps({"text": story(162)}),
        json.dumps({"id": "p", "text": original}),
    ]
    done = neardup(
        server,
        "insert",
        "c-lines",
        "--jsonl",
        "-",
        "--batch-size",
        "2",
        stdin="\n".join(lines) + "\n",
    )
    assert done.returncode == 1, done.stderr  # some lines were refused
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in results] == [1, 2, 3, 4, 6, 7]
    assert results[0]["inserted"] and results[1]["duplicate_of"] == "p"
    assert results[2]["error"]["code"] == "invalid_line"
    assert results[3]["error"]["code"] == "invalid_body" and results[3]["id"] == "r"
    assert results[4]["inserted"] and len(results[4]["id"]) == 32
    retried = results[5]
    assert (retried["id"], retried["inserted"], retried["duplicate_of"]) == ("p", False, "p")
    assert "6 documents: 3 inserted" in done.stderr and "2 refused" in done.stderr
    assert client.get_collection("c-lines").stats.documents == 3


def test_neardup_insert_warc_resumes_and_finds_the_pairs_dedup_finds(
    server: Server, client: Client, tmp_path: Path
) -> None:
    """A crawl's WARC into a running service: each HTML response a page (its URL the id,
    WARC-Date its time, its bytes in the charset of its Content-Type); the pages another
    site copied are its duplicates, as ``neardup dedup`` pairs them (the reference: which
    article each page carries); a second run after an interruption resumes."""
    from tests.batch.test_dedup_pages import crawl, expected_pairs, warc_record, write_warc

    client.create_collection("c-warc")
    pages = crawl()
    interrupted = write_warc(tmp_path / "first.warc.gz", pages[:5], "cp1252")
    whole = write_warc(tmp_path / "crawl.warc.gz", pages, "cp1252")
    empty = tmp_path / "empty.warc"
    empty.write_bytes(warc_record("https://site9.example/empty", "text/html", b"", 99))
    first = neardup(server, "insert", "c-warc", "--warc", str(interrupted))
    assert first.returncode == 0, first.stderr
    assert "5 pages: 5 new, 0 duplicates" in first.stderr
    done = neardup(server, "insert", "c-warc", "--warc", str(whole), str(empty))
    assert done.returncode == 1, done.stderr  # the empty page was refused
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [result["id"] for result in results] == [
        *(page["url"] for page in pages),
        "https://site9.example/empty",
    ]
    assert results[-1]["error"]["code"] == "invalid_body"
    pairs = {(r["duplicate_of"], r["id"]) for r in results[5:-1] if r["duplicate_of"]}
    assert pairs == expected_pairs(pages)
    assert all(not r["inserted"] and r["duplicate_of"] == r["id"] for r in results[:5])
    assert "13 pages: 1 new, 6 duplicates, 0 contained, 5 already stored, 1 refused" in done.stderr
    assert client.get_collection("c-warc").stats.documents == 12
    stored = client.get("c-warc", pages[7]["url"])
    assert stored.timestamp is not None and stored.timestamp.startswith("2024-05-01T12:00:14")
    assert stored.metadata is not None and stored.metadata["url"] == pages[7]["url"]
    mixed = neardup(server, "insert", "c-warc", "--warc", str(whole), "--jsonl", "-")
    assert mixed.returncode != 0 and "--warc takes" in mixed.stderr


# ---------------------------------------------------------------- the README's example


def test_the_readme_example_runs(server: Server) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From Python") :]
    example = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    assert "http://127.0.0.1:8000" in example
    program = example.replace("http://127.0.0.1:8000", server.url)
    # Twice: the second run is all retries and stores nothing.
    for verdict in ("True story-1", "False story-2"):
        done = run_blocked(program, SERVER_MODULES | {"app", "pydantic"})
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == verdict
        assert lines[1].startswith("story-1 1.0 0 ") and lines[2].startswith("story-2 0.863014 ")
        assert lines[-2:] == ["1 t-2 invalid_document", "True"]
    with Client(server.url) as client:
        assert client.get_collection("news").stats.documents == 3


def test_passages_through_the_client(client: Client) -> None:
    """A collection with passages on: the roundup's insert says which stories it
    contains, a search of a story finds the roundup with offsets that hold the story."""
    settings = CollectionSettings(passages=PassageSettings(enabled=True))
    assert client.create_collection("c-passages", settings).settings.passages.enabled
    stories = [story(seed, 900) for seed in (71, 72, 73)]
    for number, text in enumerate(stories):
        client.insert("c-passages", text=text, id=f"s{number}")
    roundup = "ROUNDUP\n\n" + "\n\n".join(stories)
    answer = client.insert("c-passages", text=roundup, id="roundup")
    assert answer.contains is not None and answer.contained_in == ()
    assert {match.id for match in answer.contains} == {"s0", "s1", "s2"}
    matches = client.search("c-passages", text=stories[1], min_coverage=0.9)
    assert [match.id for match in matches] == ["s1", "roundup"]  # itself, then around it
    found = matches[1]
    assert found.methods == ("passage",)
    assert found.query_coverage is not None and found.query_coverage >= 0.9
    for passage in found.passages:
        assert roundup[passage.match_start : passage.match_end] in stories[1]
        assert (
            stories[1][passage.start : passage.end]
            == (roundup[passage.match_start : passage.match_end])
        )
    client.create_collection("c-plain", CollectionSettings(passages=PassageSettings(enabled=False)))
    assert client.insert("c-plain", text=stories[0]).contains is None  # passages off


def test_an_explained_search_through_the_client(client: Client) -> None:
    """Two reports of one template: the search leaves the earlier out, the explained
    search names it with the figures that differ; a re-issue stays a match."""
    client.create_collection("c-explain")
    client.insert("c-explain", "NYSE INDEX AT 1530 205.81 OFF 1.67", id="r1")
    other_report = "NYSE INDEX AT 1530 205.79 OFF 1.69"
    assert [m.id for m in client.search("c-explain", other_report)] == []
    explained = client.explain("c-explain", other_report)
    assert explained.matches == []
    assert [(r.id, r.methods, r.reason) for r in explained.refused] == [
        ("r1", ("ngram",), "numbers differ: 1.69 / 1.67")
    ]
    reissue = client.explain("c-explain", "NYSE INDEX AT 1530: 205.81, OFF 1.67")
    assert [m.id for m in reissue.matches] == ["r1"] and reissue.refused == []
