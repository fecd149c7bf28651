"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.errors import RETRY_AFTER, error_response

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (answers during the start-up rebuild too)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "still rebuilding the indexes"}})
async def readyz(request: Request) -> JSONResponse:
    """200 once the indexes are rebuilt and the service takes requests, 503 before."""
    if request.app.state.ready.is_set():
        return JSONResponse({"status": "ready"})
    failure = request.app.state.startup_error
    message = f"start-up failed: {failure}" if failure else "rebuilding indexes"
    return error_response(503, "not_ready", message, **RETRY_AFTER)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
