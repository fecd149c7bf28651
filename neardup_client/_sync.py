"""Client: the synchronous client (httpx.Client)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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


class Client:
    """A neardup service over HTTP::

        with Client("http://127.0.0.1:8000") as neardup:
            answer = neardup.insert("news", text="...", id="story-1")
            matches = neardup.search("news", text="...")

    Errors raise APIError subclasses (NotFound, Conflict...) with the contract's code and
    message; 503 and 429 answers and connection errors are retried (see Retry; the
    default ``Retry()``, ``retry=NO_RETRY`` for none).
    Documents sent without an id get one here (a UUID, as the service would make), so
    that an insert whose answer was lost can be sent again safely: the service answers
    it as a retry. ``generate_ids=False`` leaves ids to the service (and such inserts are
    then retried only when the connection was never made).
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
        on_retry: Callable[[RetryEvent], None] | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry if retry is not None else Retry()
        self.max_batch_documents = max_batch_documents
        self.max_batch_bytes = max_batch_bytes
        self.on_retry = on_retry
        self._calls = Calls(generate_ids)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.url,
            headers=build_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    # ------------------------------------------------------------ plumbing

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        retried_after_transport_error = False
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except httpx.TransportError as error:
                never_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
                if attempt > self.retry.retries or not (call.idempotent or never_sent):
                    raise TransportError(f"{call.method} {self.url}{call.path}: {error}") from error
                delay = self.retry.delay(attempt, None)
                self._wait(RetryEvent(call.method, call.path, attempt, delay, error=error))
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
            self._wait(
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

    def _wait(self, event: RetryEvent) -> None:
        if self.on_retry is not None:
            self.on_retry(event)
        self._sleep(event.delay)

    # ------------------------------------------------------------ collections

    def create_collection(
        self, name: str, settings: CollectionSettings | Mapping[str, Any] | None = None
    ) -> CollectionInfo:
        """Create a collection (``created`` True), or find it with the same settings
        (``created`` False); other settings raise Conflict (``settings_conflict``)."""
        return self._run(self._calls.create_collection(name, settings))

    def update_collection(self, name: str, changes: Mapping[str, Any]) -> CollectionInfo:
        """PATCH: change a collection's changeable settings (match_window, retention,
        limits) as a JSON merge patch; another setting that differs raises Conflict."""
        return self._run(self._calls.update_collection(name, changes))

    def list_collections(self) -> list[CollectionInfo]:
        return self._run(self._calls.list_collections())

    def get_collection(self, name: str) -> CollectionInfo:
        return self._run(self._calls.get_collection(name))

    def delete_collection(self, name: str) -> None:
        """Drop the collection and its documents."""
        self._run(self._calls.delete_collection(name))

    # ------------------------------------------------------------ keys (admin key)

    def create_key(
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
        return self._run(self._calls.create_key(body))

    def list_keys(self) -> list[ApiKey]:
        return self._run(self._calls.list_keys())

    def get_key(self, key_id: str) -> ApiKey:
        return self._run(self._calls.get_key(key_id))

    def update_key(self, key_id: str, changes: Mapping[str, Any]) -> ApiKey:
        """PATCH: the fields of ``changes`` (name, description, actions, collections,
        expires_at, rate) replace the key's; a null expires_at or rate removes it."""
        return self._run(self._calls.update_key(key_id, changes))

    def delete_key(self, key_id: str) -> None:
        """Revoke the key: every process of the service refuses it within a second."""
        self._run(self._calls.delete_key(key_id))

    # ------------------------------------------------------------ documents

    def insert(
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
        """Insert one document and learn whether it is new or a near-duplicate."""
        return self._run(
            self._calls.insert(
                collection, text, id, metadata, html, on_duplicate, timestamp, since, until
            )
        )

    def insert_many(
        self,
        collection: str,
        documents: Iterable[DocumentLike],
        *,
        on_duplicate: OnDuplicate = "insert",
        batch_size: int | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> Iterator[BatchItem]:
        """Insert documents (NewDocument or dicts) in batches of at most ``batch_size``
        (default: the client's ``max_batch_documents``) and ``max_batch_bytes``, lazily:
        yields one InsertResult or DocumentError per document, in order, as each batch
        is answered. A refused document does not stop the others."""
        chunker = Chunker(
            batch_size or self.max_batch_documents, self.max_batch_bytes, self._calls.generate_ids
        )
        for document in documents_of(documents):
            chunk = chunker.add(document)
            if chunk:
                yield from self._send_batch(
                    collection, chunk, on_duplicate, chunker, (since, until)
                )
        chunk = chunker.flush()
        if chunk:
            yield from self._send_batch(collection, chunk, on_duplicate, chunker, (since, until))

    def insert_batch(
        self,
        collection: str,
        documents: Iterable[DocumentLike],
        *,
        on_duplicate: OnDuplicate = "insert",
        batch_size: int | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> BatchResult:
        """insert_many, collected: ``.results`` in order, ``.errors`` the refused
        documents with their positions, ``.raise_for_errors()``."""
        items = self.insert_many(
            collection,
            documents,
            on_duplicate=on_duplicate,
            batch_size=batch_size,
            since=since,
            until=until,
        )
        return BatchResult(tuple(items))

    def _send_batch(
        self,
        collection: str,
        chunk: list[tuple[int, dict[str, Any]]],
        on_duplicate: OnDuplicate,
        chunker: Chunker,
        times: tuple[TimeLike | None, TimeLike | None] = (None, None),
    ) -> list[BatchItem]:
        try:
            return self._run(batch_call(collection, chunk, on_duplicate, *times))
        except TooLarge as error:
            if len(chunk) == 1:
                return too_large(chunk, error)
            chunker.refused_whole(len(chunk))
            half = len(chunk) // 2
            return [
                *self._send_batch(collection, chunk[:half], on_duplicate, chunker, times),
                *self._send_batch(collection, chunk[half:], on_duplicate, chunker, times),
            ]

    def replace(
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
        """Insert or replace the document with this id (PUT); ``replaced`` says which."""
        return self._run(
            self._calls.replace(collection, id, text, metadata, html, timestamp, since, until)
        )

    def get(self, collection: str, id: str) -> Document:
        return self._run(self._calls.get(collection, id))

    def delete(self, collection: str, id: str) -> None:
        self._run(self._calls.delete(collection, id))

    def similar(
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
        """Stored documents near a stored one, itself excluded, best first
        (``min_coverage``: see search)."""
        return self._run(
            self._calls.similar(
                collection, id, limit, min_similarity, max_distance, since, until, min_coverage
            )
        )

    def search(
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
        """Stored documents near a text, best first; nothing is stored. In a collection
        with passages on, ``min_coverage`` drops the matches found by shared passages
        alone that cover less than it of either text (None: the service's default, 0.5,
        copies and containments; 0: every shared passage, quotes too)."""
        return self._run(
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

    def explain(
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
        return self._run(
            self._calls.explain(collection, text, limit, min_similarity, max_distance, html)
        )

    # ------------------------------------------------------------ operations

    def is_live(self) -> bool:
        """GET /healthz, once, without retries."""
        return self._probe("/healthz")

    def is_ready(self) -> bool:
        """GET /readyz, once, without retries: False while the indexes are rebuilt."""
        return self._probe("/readyz")

    def _probe(self, path: str) -> bool:
        try:
            return self._http.get(path).status_code == 200
        except httpx.TransportError:
            return False

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Wait for /readyz to answer 200, at the pace the service's Retry-After asks;
        ServiceUnavailable or TransportError when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.get("/readyz")
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
            self._sleep(max(0.0, min(wait, deadline - time.monotonic())))

    def metrics_text(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        return self._run(self._calls.metrics_text())

    def metrics(self) -> list[MetricSample]:
        return parse_metrics(self.metrics_text())

    def index_health(self, collection: str) -> IndexHealth:
        """What /metrics knows of a collection: documents, merges, and per index the
        unmerged entries (insert buffer) and tombstones."""
        return IndexHealth.from_samples(collection, self.metrics())

    def openapi(self) -> dict[str, Any]:
        """The service's OpenAPI document."""
        return self._run(self._calls.openapi())
