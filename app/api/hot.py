"""The two routes of a crawler's traffic, served from ASGI without FastAPI's per-request work.

POST /v1/collections/{name}/search and POST /v1/collections/{name}/documents are what
crawlers send, one text per request. Through FastAPI each paid CPU before and after the
work (routing, the Request object, dependency solving, the body validated through
FastAPI's field machinery, four middlewares): more than the search itself
(docs/benchmarks.md, "Against a bare FastAPI app"). ``HotRoutes`` serves them straight
from the ASGI call with the same pieces the FastAPI routes use: the same pydantic models
(``SearchIn``, ``DocumentIn``), limits and answers (``search_answer``,
``insert_answer``), error bodies, metrics, request ids and access log line.

Whatever is not the plain case goes on to the FastAPI app unchanged, with the body it has
already read: a body that does not parse or validate (FastAPI then writes its 422 as it
always has), another content type, no Content-Length, a collection name outside the
pattern, a key the gate refuses or whose rate it counts (the middleware answers those).
The FastAPI routes stay: they define the OpenAPI document and serve every request handed
on, so each check exists once.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import orjson
from fastapi import FastAPI
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import logs
from app.api import audit
from app.api.auth import Gate
from app.api.deps import ready_registry
from app.api.documents import insert_answer
from app.api.errors import error_response, service_error_response
from app.api.metrics import Metrics
from app.api.request_id import HEADER as REQUEST_ID_HEADER
from app.api.request_id import choose_request_id, log_request
from app.api.schemas import COLLECTION_NAME_PATTERN, DocumentIn, SearchIn
from app.api.search import search_answer
from app.errors import NeardupError
from app.service.keys import Grant

log = logging.getLogger("neardup")
access_log = logging.getLogger("neardup.access")

HOT_PATH = re.compile(r"/v1/collections/([^/]+)/(search|documents)")
COLLECTION_NAME = re.compile(COLLECTION_NAME_PATTERN)
SEARCH_TEMPLATE = "/v1/collections/{name}/search"
INSERT_TEMPLATE = "/v1/collections/{name}/documents"
JSON_TYPE = b"application/json"


def is_hot(scope: Scope) -> re.Match[str] | None:
    """The path's collection name and route when the request is one of the hot two."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    return HOT_PATH.fullmatch(scope["path"])


def _json_content_type(value: bytes | None) -> bool:
    """No Content-Type, or application/json with any parameters: what FastAPI parses as
    JSON as well (it also takes application/*+json, which is rare and goes on to it)."""
    return value is None or value.partition(b";")[0].strip().lower() == JSON_TYPE


def _replay(chunks: list[bytes], more: bool, receive: Receive) -> Receive:
    """``receive`` with the body already read given back first."""
    replayed = False

    async def receive_again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": more}
        return await receive()

    return receive_again


class HotRoutes:
    """Serves the hot two routes (``serve``); ``fallback`` is the whole FastAPI app."""

    def __init__(
        self,
        app: FastAPI,
        fallback: ASGIApp,
        gate: Gate,
        max_body_bytes: int,
        metrics: Metrics,
    ) -> None:
        self.app = app
        self.fallback = fallback
        self.gate = gate
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def serve(self, scope: Scope, receive: Receive, send: Send, hot: re.Match[str]) -> None:
        started = time.perf_counter()
        name, route = hot.group(1), hot.group(2)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if (
            declared is None
            or not declared.isdigit()
            or int(declared) > self.max_body_bytes
            or not _json_content_type(headers.get(b"content-type"))
            or not COLLECTION_NAME.fullmatch(name)
            or (key := self._allowed_key(scope)) is None
        ):
            await self.fallback(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # nobody to answer
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = message.get("more_body", False)
            if size > self.max_body_bytes:  # more than declared: the body limit refuses it
                await self.fallback(scope, _replay(chunks, more, receive), send)
                return
        body = b"".join(chunks)
        model: type[BaseModel] = SearchIn if route == "search" else DocumentIn
        try:
            parsed = orjson.loads(body)
            request = model.model_validate(parsed) if isinstance(parsed, dict) else None
        except (orjson.JSONDecodeError, ValidationError):
            request = None
        if request is None:  # FastAPI says what is wrong, in its words
            await self.fallback(scope, _replay([body], False, receive), send)
            return
        await self._answer(scope, send, headers, name, request, started, key)

    def _allowed_key(self, scope: Scope) -> Grant | None:
        """The key when the gate lets it through with no rate to count, else None: the
        middleware answers every other request (refusals, and rates, counted once)."""
        check = self.gate.check(scope)
        if check.refusal is not None or check.key is None or check.key.rate.limited:
            return None
        return check.key

    async def _answer(
        self,
        scope: Scope,
        send: Send,
        headers: dict[bytes, bytes],
        name: str,
        request: Any,
        started: float,
        key: Grant,
    ) -> None:
        request_id = choose_request_id(headers.get(REQUEST_ID_HEADER))
        token = logs.request_id.set(request_id)
        searching = isinstance(request, SearchIn)
        status = 500
        try:
            try:
                collection = ready_registry(self.app).get(name)
                settings = self.app.state.settings
                if searching:
                    status, answer = 200, await search_answer(collection, settings, request)
                else:
                    status, answer = await insert_answer(collection, settings, request)
                raw_headers = [
                    (b"content-type", JSON_TYPE),
                    (b"content-length", str(len(answer)).encode()),
                ]
            except NeardupError as error:
                refusal = service_error_response(error)
                status, answer, raw_headers = (
                    refusal.status_code,
                    bytes(refusal.body),
                    refusal.raw_headers,
                )
            except Exception:
                log.exception("the request failed")
                failure = error_response(500, "internal_error", "the request failed")
                status, answer, raw_headers = (
                    failure.status_code,
                    bytes(failure.body),
                    failure.raw_headers,
                )
            raw_headers.append((REQUEST_ID_HEADER, request_id.encode()))
            await send({"type": "http.response.start", "status": status, "headers": raw_headers})
            await send({"type": "http.response.body", "body": answer})
        finally:
            template = SEARCH_TEMPLATE if searching else INSERT_TEMPLATE
            self.metrics.record_request(template, "POST", status, time.perf_counter() - started)
            if not searching:
                ids = audit.ids_in_answer(answer) if status < 300 else None
                audit.record(key, "documents.add", name, status, ids)
            if access_log.isEnabledFor(logging.INFO):
                log_request(scope, status, started)
            logs.request_id.reset(token)


class NeardupApp(FastAPI):
    """FastAPI with the hot routes in front (``hot_routes``, set by create_app)."""

    hot_routes: HotRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hot_routes is not None and (hot := is_hot(scope)) is not None:
            await self.hot_routes.serve(scope, receive, send, hot)
            return
        await super().__call__(scope, receive, send)

    async def full_stack(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every request the hot routes hand on: FastAPI with its middlewares."""
        await super().__call__(scope, receive, send)
