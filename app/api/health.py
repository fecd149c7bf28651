"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from app.api.errors import RETRY_AFTER, error_response
from app.errors import StorageUnavailable

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
    """Prometheus text format."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
