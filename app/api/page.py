"""The page at ``/``: plain HTML, CSS and JavaScript files in app/api/static, no build step
and nothing fetched from elsewhere. It calls /v1 from the browser like any client, so the
API key middleware lets ``/`` and ``/static/*`` through (only /v1, and /metrics when
configured, need a key) and the page sends the key the user typed."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response
from starlette.staticfiles import PathLike, StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).parent / "static"
# The page loads only its own files and talks only to this service; texts and ids are
# put in the page as text, never as markup, and no inline script or style may run.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (ETag, Last-Modified): an upgraded service serves its page.
    "Cache-Control": "no-cache",
}


class _StaticFiles(StaticFiles):
    def file_response(
        self,
        full_path: PathLike,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(HEADERS)
        return response


router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", headers=HEADERS)


router.mount("/static", _StaticFiles(directory=STATIC_DIR), name="static")
