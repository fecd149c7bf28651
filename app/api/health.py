"""Liveness, readiness and metrics."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from app.api.auth import key_of
from app.api.errors import RETRY_AFTER, error_response
from app.errors import StorageUnavailable
from app.service.keys import Grant

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (answers during the start-up rebuild too)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "still rebuilding the indexes"}})
async def readyz(request: Request) -> JSONResponse:
    """200 once the indexes are rebuilt and the service takes requests (and, on the Redis
    backend, Redis answers a PING), 503 otherwise."""
    if request.app.state.ready.is_set():
        try:
            await run_in_threadpool(request.app.state.registry.ping)
        except StorageUnavailable as error:
            return error_response(503, error.code, str(error), **RETRY_AFTER)
        return JSONResponse({"status": "ready"})
    failure = request.app.state.startup_error
    message = f"start-up failed: {failure}" if failure else "rebuilding indexes"
    return error_response(503, "not_ready", message, **RETRY_AFTER)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format; to a scoped key (NEARDUP_METRICS_REQUIRE_KEY), only the
    lines of the collections it may see."""
    registry = request.app.state.metrics.registry
    text = visible_lines(generate_latest(registry), key_of(request.scope))
    return Response(text, media_type=CONTENT_TYPE_LATEST)


_COLLECTION_LABEL = re.compile(rb'collection="([^"]*)"')


def visible_lines(text: bytes, key: Grant | None) -> bytes:
    """``text`` without the lines labelled with a collection ``key`` may not see:
    O(size of the text) for a key scoped to some collections, nothing for the rest."""
    if key is None or "*" in key.collections:
        return text
    kept = [
        line
        for line in text.split(b"\n")
        if (label := _COLLECTION_LABEL.search(line)) is None or key.may_see(label.group(1).decode())
    ]
    return b"\n".join(kept)
