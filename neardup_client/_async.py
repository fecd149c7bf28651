"""AsyncClient: the asynchronous twin of Client (httpx.AsyncClient)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx

from neardup_client._base import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_DOCUMENTS,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    Call,
    Calls,
    Chunker,
    DocumentLike,
    Retry,
    RetryEvent,
    batch_call,
    build_headers,
    documents_of,
    error_of,
    key_body,
    parse_retry_after,
    too_large,
)
from neardup_client._errors import TooLarge, TransportError
from neardup_client._models import (
    ApiKey,
    BatchItem,
    BatchResult,
    CollectionInfo,
    CollectionSettings,
    Document,
    Explained,
    IndexHealth,
    InsertResult,
    Match,
    MetricSample,
    OnDuplicate,
    TimeLike,
    parse_metrics,
)

T = TypeVar("T")


class AsyncClient:
    """The same methods as Client, to be awaited::

        async with AsyncClient("http://127.0.0.1:8000") as neardup:
            answer = await neardup.insert("news", text="...", id="story-1")
            matches = await neardup.search("news", text="...")

    ``insert_many`` takes an iterable or an async iterable and is an async iterator.
    ``on_retry`` may be a plain function or a coroutine function.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        max_batch_documents: int = DEFAULT_MAX_BATCH_DOCUMENTS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        generate_ids: bool = True,
        on_retry: Callable[[RetryEvent], Awaitable[None] | None] | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry if retry is not None else Retry()
        self.max_batch_documents = max_batch_documents
        self.max_batch_bytes = max_batch_bytes
        self.on_retry = on_retry
        self._calls = Calls(generate_ids)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=build_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    # ------------------------------------------------------------ plumbing

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        retried_after_transport_error = False
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except httpx.TransportError as error:
                never_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
                if attempt > self.retry.retries or not (call.idempotent or never_sent):
                    raise TransportError(f"{call.method} {self.url}{call.path}: {error}") from error
                delay = self.retry.delay(attempt, None)
                await self._wait(RetryEvent(call.method, call.path, attempt, delay, error=error))
                retried_after_transport_error = True
                continue
            if response.is_success:
                return call.parse(response)
            if response.status_code == 404 and call.gone_ok and retried_after_transport_error:
                return call.parse(response)
            failure = error_of(response)
            if response.status_code not in self.retry.statuses or attempt > self.retry.retries:
                raise failure
            delay = self.retry.delay(attempt, failure.retry_after)
            await self._wait(
                RetryEvent(
                    call.method,
                    call.path,
                    attempt,
                    delay,
                    status=failure.status,
                    code=failure.code,
                    retry_after=failure.retry_after,
                )
            )

    async def _wait(self, event: RetryEvent) -> None:
        if self.on_retry is not None:
            outcome = self.on_retry(event)
            if outcome is not None:
                await outcome
        await self._sleep(event.delay)

    # ------------------------------------------------------------ collections

    async def create_collection(
        self, name: str, settings: CollectionSettings | Mapping[str, Any] | None = None
    ) -> CollectionInfo:
        return await self._run(self._calls.create_collection(name, settings))

    async def update_collection(self, name: str, changes: Mapping[str, Any]) -> CollectionInfo:
        """PATCH: change a collection's changeable settings (match_window, retention,
        limits) as a JSON merge patch; another setting that differs raises Conflict."""
        return await self._run(self._calls.update_collection(name, changes))

    async def list_collections(self) -> list[CollectionInfo]:
        return await self._run(self._calls.list_collections())

    async def get_collection(self, name: str) -> CollectionInfo:
        return await self._run(self._calls.get_collection(name))

    async def delete_collection(self, name: str) -> None:
        await self._run(self._calls.delete_collection(name))

    # ------------------------------------------------------------ keys (admin key)

    async def create_key(
        self,
        name: str,
        actions: Iterable[str],
        collections: Iterable[str],
        description: str = "",
        expires_at: TimeLike | None = None,
        requests_per_second: float | None = None,
        documents_per_second: float | None = None,
    ) -> ApiKey:
        """A new key that may do ``actions`` (search, documents.add, documents.delete,
        collections.create, collections.delete, collections.settings, export, metrics,
        or *) on ``collections`` (names, ``prefix-*`` patterns or *). Its secret is in
        ``key`` of this answer only. Needs an admin key."""
        body = key_body(
            name,
            actions,
            collections,
            description,
            expires_at,
            requests_per_second,
            documents_per_second,
        )
        return await self._run(self._calls.create_key(body))

    async def list_keys(self) -> list[ApiKey]:
        return await self._run(self._calls.list_keys())

    async def get_key(self, key_id: str) -> ApiKey:
        return await self._run(self._calls.get_key(key_id))

    async def update_key(self, key_id: str, changes: Mapping[str, Any]) -> ApiKey:
        """PATCH: the fields of ``changes`` (name, description, actions, collections,
        expires_at, rate) replace the key's; a null expires_at or rate removes it."""
        return await self._run(self._calls.update_key(key_id, changes))

    async def delete_key(self, key_id: str) -> None:
        """Revoke the key: every process of the service refuses it within a second."""
        await self._run(self._calls.delete_key(key_id))

    # ------------------------------------------------------------ documents

    async def insert(
        self,
        collection: str,
        text: str,
        *,
        id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        html: bool = False,
        on_duplicate: OnDuplicate = "insert",
        timestamp: TimeLike | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> InsertResult:
        return await self._run(
            self._calls.insert(
                collection, text, id, metadata, html, on_duplicate, timestamp, since, until
            )
        )

    async def insert_many(
        self,
        collection: str,
        documents: Iterable[DocumentLike] | AsyncIterable[DocumentLike],
        *,
        on_duplicate: OnDuplicate = "insert",
        batch_size: int | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> AsyncIterator[BatchItem]:
        chunker = Chunker(
            batch_size or self.max_batch_documents, self.max_batch_bytes, self._calls.generate_ids
        )
        async for document in _each(documents):
            chunk = chunker.add(document)
            if chunk:
                for item in await self._send_batch(
                    collection, chunk, on_duplicate, chunker, (since, until)
                ):
                    yield item
        chunk = chunker.flush()
        if chunk:
            for item in await self._send_batch(
                collection, chunk, on_duplicate, chunker, (since, until)
            ):
                yield item

    async def insert_batch(
        self,
        collection: str,
        documents: Iterable[DocumentLike] | AsyncIterable[DocumentLike],
        *,
        on_duplicate: OnDuplicate = "insert",
        batch_size: int | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> BatchResult:
        items = self.insert_many(
            collection,
            documents,
            on_duplicate=on_duplicate,
            batch_size=batch_size,
            since=since,
            until=until,
        )
        return BatchResult(tuple([item async for item in items]))

    async def _send_batch(
        self,
        collection: str,
        chunk: list[tuple[int, dict[str, Any]]],
        on_duplicate: OnDuplicate,
        chunker: Chunker,
        times: tuple[TimeLike | None, TimeLike | None] = (None, None),
    ) -> list[BatchItem]:
        try:
            return await self._run(batch_call(collection, chunk, on_duplicate, *times))
        except TooLarge as error:
            if len(chunk) == 1:
                return too_large(chunk, error)
            chunker.refused_whole(len(chunk))
            half = len(chunk) // 2
            return [
                *await self._send_batch(collection, chunk[:half], on_duplicate, chunker, times),
                *await self._send_batch(collection, chunk[half:], on_duplicate, chunker, times),
            ]

    async def replace(
        self,
        collection: str,
        id: str,
        text: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        html: bool = False,
        timestamp: TimeLike | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> InsertResult:
        return await self._run(
            self._calls.replace(collection, id, text, metadata, html, timestamp, since, until)
        )

    async def get(self, collection: str, id: str) -> Document:
        return await self._run(self._calls.get(collection, id))

    async def delete(self, collection: str, id: str) -> None:
        await self._run(self._calls.delete(collection, id))

    async def similar(
        self,
        collection: str,
        id: str,
        *,
        limit: int | None = None,
        min_similarity: float | None = None,
        max_distance: int | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_coverage: float | None = None,
    ) -> list[Match]:
        return await self._run(
            self._calls.similar(
                collection, id, limit, min_similarity, max_distance, since, until, min_coverage
            )
        )

    async def search(
        self,
        collection: str,
        text: str,
        *,
        limit: int | None = None,
        min_similarity: float | None = None,
        max_distance: int | None = None,
        html: bool = False,
        method: Literal["POST", "GET"] = "POST",
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_coverage: float | None = None,
    ) -> list[Match]:
        return await self._run(
            self._calls.search(
                collection,
                text,
                limit,
                min_similarity,
                max_distance,
                html,
                method,
                since,
                until,
                min_coverage,
            )
        )

    async def explain(
        self,
        collection: str,
        text: str,
        *,
        limit: int | None = None,
        min_similarity: float | None = None,
        max_distance: int | None = None,
        html: bool = False,
    ) -> Explained:
        """``search`` with ``explain``: its matches, and the documents the methods matched
        and a rule refused, each with its reason (a second search on the service)."""
        return await self._run(
            self._calls.explain(collection, text, limit, min_similarity, max_distance, html)
        )

    # ------------------------------------------------------------ operations

    async def is_live(self) -> bool:
        return await self._probe("/healthz")

    async def is_ready(self) -> bool:
        return await self._probe("/readyz")

    async def _probe(self, path: str) -> bool:
        try:
            return (await self._http.get(path)).status_code == 200
        except httpx.TransportError:
            return False

    async def wait_until_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.get("/readyz")
            except httpx.TransportError as error:
                if time.monotonic() >= deadline:
                    raise TransportError(f"GET {self.url}/readyz: {error}") from error
                wait = self.retry.delay(attempt, None)
            else:
                if response.status_code == 200:
                    return
                if time.monotonic() >= deadline:
                    raise error_of(response)
                wait = self.retry.delay(
                    attempt, parse_retry_after(response.headers.get("retry-after"))
                )
            await self._sleep(max(0.0, min(wait, deadline - time.monotonic())))

    async def metrics_text(self) -> str:
        return await self._run(self._calls.metrics_text())

    async def metrics(self) -> list[MetricSample]:
        return parse_metrics(await self.metrics_text())

    async def index_health(self, collection: str) -> IndexHealth:
        return IndexHealth.from_samples(collection, await self.metrics())

    async def openapi(self) -> dict[str, Any]:
        return await self._run(self._calls.openapi())


async def _each(
    documents: Iterable[DocumentLike] | AsyncIterable[DocumentLike],
) -> AsyncIterator[DocumentLike]:
    if isinstance(documents, AsyncIterable):
        async for document in documents:
            yield document
    else:
        for document in documents_of(documents):
            yield document
