"""The framework's ceiling: a bare FastAPI app that takes neardup's bodies and does nothing.

    .venv/bin/python -m uvicorn bench.bare_app:app --loop uvloop --http httptools \\
        --workers 1 --no-access-log --port 8001

The reference of issue 11 (bench/bare_wrk.py runs it beside ``neardup serve``): the same
routes, bodies validated by the same pydantic models (imported from app.api.schemas, so the
validation is literally neardup's), and answers of the same shapes, with none of the work:
an insert answers 201 with InsertOut (a new id when the body has none, no matches), a
search ``{"matches": []}``. Idiomatic FastAPI: ``async def`` handlers (nothing to wait
for, so no thread-pool hop) returning the response models, which FastAPI serialises; no
middleware, no dependencies, no logging per request. Served by uvicorn as ``neardup
serve`` is: uvloop, httptools, one worker.
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI

from app.api.schemas import DocumentIn, InsertOut, MatchesOut, SearchIn

app = FastAPI(title="bare: neardup's bodies, no work")


@app.get("/readyz")
@app.get("/healthz")
async def ready() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/collections/{name}/documents", status_code=201)
async def insert_document(name: str, body: DocumentIn) -> InsertOut:
    document_id = body.id or uuid.uuid4().hex
    return InsertOut(
        id=document_id, inserted=True, duplicate_of=None, cluster_id=document_id, matches=[]
    )


@app.post("/v1/collections/{name}/search")
async def search(name: str, body: SearchIn) -> MatchesOut:
    return MatchesOut(matches=[])
