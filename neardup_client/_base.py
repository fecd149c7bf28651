"""What the sync and async clients share: the requests of every endpoint, the retry
policy, batch chunking and the reading of answers. Neither sends anything here."""

from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from neardup_client._errors import APIError, api_error
from neardup_client._models import (
    ApiKey,
    BatchItem,
    CollectionInfo,
    CollectionSettings,
    Document,
    DocumentError,
    Explained,
    InsertResult,
    Match,
    NewDocument,
    NewPage,
    OnDuplicate,
    TimeLike,
    time_value,
)

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0
# The service's defaults (NEARDUP_MAX_BATCH_DOCUMENTS, NEARDUP_MAX_BODY_BYTES): pass the
# values of your service when it sets others. A batch refused whole as too large is
# split in two and sent again, so a smaller limit on the service costs requests, not
# errors.
DEFAULT_MAX_BATCH_DOCUMENTS = 1000
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024
# Room for {"documents": [...], "on_duplicate": ...} around the documents.
_BATCH_OVERHEAD_BYTES = 64
USER_AGENT = "neardup-client/0.1"


@dataclass(frozen=True, slots=True)
class Retry:
    """When to send a request again.

    Connection errors (refused, reset, timed out) and the answers in ``statuses`` (503:
    the service is starting or its storage cannot write; 429: a proxy's rate limit) are
    retried up to ``retries`` times. The wait is the answer's ``Retry-After`` when it has
    one (at most ``max_retry_after`` seconds), else ``backoff`` seconds doubled per retry
    up to ``max_backoff``, with jitter (each wait is drawn between half and all of that).
    """

    retries: int = 5
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.backoff * 2 ** (retry - 1), self.max_backoff)
        return float(ceiling * random.uniform(0.5, 1.0))


NO_RETRY = Retry(retries=0)


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """Given to ``on_retry`` before each wait: which attempt failed (1 for the first),
    how (an HTTP ``status`` or a transport ``error``), and how long the client waits."""

    method: str
    path: str
    attempt: int
    delay: float
    status: int | None = None
    code: str | None = None
    retry_after: float | None = None
    error: Exception | None = None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header: delay-seconds or an HTTP-date (RFC 9110)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its successful answer. ``idempotent`` calls are sent
    again after a connection error that may have reached the service; the others only
    when the connection was never made. ``gone_ok``: a 404 on a retry means the first
    attempt did it (a DELETE whose answer was lost)."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, str | int | float] | None = None
    idempotent: bool = True
    gone_ok: bool = False


def _path(*parts: str) -> str:
    """A URL path of quoted segments (ids may hold spaces, ``?``, ``#``, non-ASCII)."""
    return "/".join(quote(part, safe="") for part in parts)


def _collection(name: str) -> str:
    return "/v1/collections/" + _path(name)


def _none(response: httpx.Response) -> None:
    return None


def _matches(response: httpx.Response) -> list[Match]:
    return [Match.from_json(match) for match in response.json()["matches"]]


def _explained(response: httpx.Response) -> Explained:
    return Explained.from_json(response.json())


def _query(**values: Any) -> dict[str, Any]:
    """The fields that are set; times as the service takes them."""
    return {
        key: time_value(value) if key in ("since", "until", "timestamp") else value
        for key, value in values.items()
        if value is not None
    }


def error_of(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return api_error(
        response.status_code,
        body,
        response.text,
        response.headers.get("x-request-id"),
        parse_retry_after(response.headers.get("retry-after")),
    )


DocumentLike = NewDocument | NewPage | Mapping[str, Any]


def document_body(document: DocumentLike, generate_ids: bool) -> dict[str, Any]:
    body = document.to_json() if isinstance(document, (NewDocument, NewPage)) else dict(document)
    if generate_ids and body.get("id") is None:
        body["id"] = uuid.uuid4().hex
    return body


@dataclass(slots=True)
class Chunker:
    """Cuts documents into batches of at most ``max_documents`` and about ``max_bytes``
    of JSON, keeping each document's position in the input."""

    max_documents: int
    max_bytes: int
    generate_ids: bool
    pending: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    pending_bytes: int = _BATCH_OVERHEAD_BYTES
    position: int = 0

    def add(self, document: DocumentLike) -> list[tuple[int, dict[str, Any]]] | None:
        """Take a document; a full batch to send, if this one completes or overflows it."""
        body = document_body(document, self.generate_ids)
        size = len(json.dumps(body, ensure_ascii=False).encode()) + 1
        ready = None
        if self.pending and (
            len(self.pending) >= self.max_documents or self.pending_bytes + size > self.max_bytes
        ):
            ready = self.flush()
        self.pending.append((self.position, body))
        self.pending_bytes += size
        self.position += 1
        return ready

    def flush(self) -> list[tuple[int, dict[str, Any]]]:
        ready, self.pending, self.pending_bytes = self.pending, [], _BATCH_OVERHEAD_BYTES
        return ready

    def refused_whole(self, size: int) -> None:
        """The service refused a batch of ``size`` documents as too large: send fewer."""
        self.max_documents = max(1, min(self.max_documents, size // 2))


def batch_call(
    name: str,
    chunk: list[tuple[int, dict[str, Any]]],
    on_duplicate: OnDuplicate,
    since: TimeLike | None = None,
    until: TimeLike | None = None,
) -> Call[list[BatchItem]]:
    positions = [position for position, _ in chunk]

    def parse(response: httpx.Response) -> list[BatchItem]:
        results = response.json()["results"]
        if len(results) != len(positions):
            raise ValueError(f"{len(results)} results for a batch of {len(positions)}")
        return [
            DocumentError.from_json(result, position)
            if "error" in result
            else InsertResult.from_json(result)
            for position, result in zip(positions, results, strict=True)
        ]

    body: dict[str, Any] = {"documents": [document for _, document in chunk]}
    if on_duplicate != "insert":
        body["on_duplicate"] = on_duplicate
    body.update(_query(since=since, until=until))
    # Idempotent when every document has an id: the service answers a re-sent document
    # as a retry (200, inserted false) instead of storing it twice.
    idempotent = all(document.get("id") is not None for _, document in chunk)
    return Call("POST", _collection(name) + "/documents/batch", parse, body, None, idempotent)


def too_large(chunk: list[tuple[int, dict[str, Any]]], error: APIError) -> list[BatchItem]:
    """A document alone above the body limit: its error at its position."""
    [(position, document)] = chunk
    document_id = document.get("id")
    return [
        DocumentError(
            position,
            document_id if isinstance(document_id, str) else None,
            error.code,
            error.message,
        )
    ]


class Calls:
    """The request of every endpoint of the contract (v1)."""

    def __init__(self, generate_ids: bool) -> None:
        self.generate_ids = generate_ids

    # ------------------------------------------------------------ collections

    def create_collection(
        self, name: str, settings: CollectionSettings | Mapping[str, Any] | None
    ) -> Call[CollectionInfo]:
        body = settings.to_json() if isinstance(settings, CollectionSettings) else settings
        return Call(
            "PUT",
            _collection(name),
            lambda r: CollectionInfo.from_json(r.json(), created=r.status_code == 201),
            None if body is None else dict(body),
        )

    def update_collection(self, name: str, changes: Mapping[str, Any]) -> Call[CollectionInfo]:
        return Call(
            "PATCH",
            _collection(name),
            lambda r: CollectionInfo.from_json(r.json()),
            dict(changes),
        )

    def list_collections(self) -> Call[list[CollectionInfo]]:
        return Call(
            "GET",
            "/v1/collections",
            lambda r: [CollectionInfo.from_json(c) for c in r.json()["collections"]],
        )

    def get_collection(self, name: str) -> Call[CollectionInfo]:
        return Call("GET", _collection(name), lambda r: CollectionInfo.from_json(r.json()))

    def delete_collection(self, name: str) -> Call[None]:
        return Call("DELETE", _collection(name), _none, gone_ok=True)

    # ------------------------------------------------------------ keys (admin key)

    def create_key(self, body: Mapping[str, Any]) -> Call[ApiKey]:
        # Not sent again after a lost answer: a second key would be made.
        parse = ApiKey.from_json
        return Call("POST", "/v1/keys", lambda r: parse(r.json()), dict(body), idempotent=False)

    def list_keys(self) -> Call[list[ApiKey]]:
        return Call("GET", "/v1/keys", lambda r: [ApiKey.from_json(k) for k in r.json()["keys"]])

    def get_key(self, key_id: str) -> Call[ApiKey]:
        return Call("GET", "/v1/keys/" + _path(key_id), lambda r: ApiKey.from_json(r.json()))

    def update_key(self, key_id: str, changes: Mapping[str, Any]) -> Call[ApiKey]:
        path = "/v1/keys/" + _path(key_id)
        return Call("PATCH", path, lambda r: ApiKey.from_json(r.json()), dict(changes))

    def delete_key(self, key_id: str) -> Call[None]:
        return Call("DELETE", "/v1/keys/" + _path(key_id), _none, gone_ok=True)

    # ------------------------------------------------------------ documents

    def insert(
        self,
        name: str,
        text: str,
        id: str | None,
        metadata: Mapping[str, Any] | None,
        html: bool,
        on_duplicate: OnDuplicate,
        timestamp: TimeLike | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> Call[InsertResult]:
        document = NewDocument(text, id, metadata, html, timestamp)
        body = document_body(document, self.generate_ids)
        if on_duplicate != "insert":
            body["on_duplicate"] = on_duplicate
        body.update(_query(since=since, until=until))
        return Call(
            "POST",
            _collection(name) + "/documents",
            lambda r: InsertResult.from_json(r.json()),
            body,
            idempotent=body.get("id") is not None,
        )

    def replace(
        self,
        name: str,
        id: str,
        text: str,
        metadata: Mapping[str, Any] | None,
        html: bool,
        timestamp: TimeLike | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
    ) -> Call[InsertResult]:
        body = NewDocument(text, None, metadata, html, timestamp).to_json()
        body.update(_query(since=since, until=until))
        return Call(
            "PUT",
            _collection(name) + "/documents/" + _path(id),
            lambda r: InsertResult.from_json(r.json(), replaced=r.status_code == 200),
            body,
        )

    def get(self, name: str, id: str) -> Call[Document]:
        return Call(
            "GET",
            _collection(name) + "/documents/" + _path(id),
            lambda r: Document.from_json(r.json()),
        )

    def delete(self, name: str, id: str) -> Call[None]:
        return Call("DELETE", _collection(name) + "/documents/" + _path(id), _none, gone_ok=True)

    def similar(
        self,
        name: str,
        id: str,
        limit: int | None,
        min_similarity: float | None,
        max_distance: int | None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_coverage: float | None = None,
    ) -> Call[list[Match]]:
        return Call(
            "GET",
            _collection(name) + "/documents/" + _path(id) + "/similar",
            _matches,
            params=_query(
                limit=limit,
                min_similarity=min_similarity,
                max_distance=max_distance,
                since=since,
                until=until,
                min_coverage=min_coverage,
            ),
        )

    def search(
        self,
        name: str,
        text: str,
        limit: int | None,
        min_similarity: float | None,
        max_distance: int | None,
        html: bool,
        method: Literal["POST", "GET"],
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_coverage: float | None = None,
    ) -> Call[list[Match]]:
        path = _collection(name) + "/search"
        query = _query(
            limit=limit,
            min_similarity=min_similarity,
            max_distance=max_distance,
            since=since,
            until=until,
            min_coverage=min_coverage,
        )
        if method == "GET":
            if html:
                raise ValueError("html is a field of POST search only")
            return Call("GET", path, _matches, params={"text": text, **query})
        body: dict[str, Any] = {"text": text, **query}
        if html:
            body["html"] = True
        return Call("POST", path, _matches, body)

    def explain(
        self,
        name: str,
        text: str,
        limit: int | None,
        min_similarity: float | None,
        max_distance: int | None,
        html: bool,
    ) -> Call[Explained]:
        """``search`` (POST) with ``explain``: its matches and what a rule refused."""
        searched = self.search(name, text, limit, min_similarity, max_distance, html, "POST")
        return Call("POST", searched.path, _explained, {**searched.json, "explain": True})

    # ------------------------------------------------------------ operations

    def metrics_text(self) -> Call[str]:
        return Call("GET", "/metrics", lambda r: r.text)

    def openapi(self) -> Call[dict[str, Any]]:
        return Call("GET", "/openapi.json", lambda r: dict(r.json()))


def key_body(
    name: str,
    actions: Iterable[str],
    collections: Iterable[str],
    description: str = "",
    expires_at: TimeLike | None = None,
    requests_per_second: float | None = None,
    documents_per_second: float | None = None,
) -> dict[str, Any]:
    """The body of a new key (POST /v1/keys)."""
    body: dict[str, Any] = {
        "name": name,
        "description": description,
        "actions": list(actions),
        "collections": list(collections),
    }
    if expires_at is not None:
        body["expires_at"] = time_value(expires_at)
    if requests_per_second is not None or documents_per_second is not None:
        body["rate"] = {
            "requests_per_second": requests_per_second,
            "documents_per_second": documents_per_second,
        }
    return body


def build_headers(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    values = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        values["Authorization"] = f"Bearer {api_key}"
    values.update(extra or {})
    return values


def documents_of(documents: Iterable[DocumentLike]) -> Iterable[DocumentLike]:
    if isinstance(documents, (str, bytes)):
        raise TypeError("documents: an iterable of NewDocument, NewPage or dicts, not a string")
    return documents
