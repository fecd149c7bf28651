"""/v1/collections/{name}/documents: insert, batch, upsert, get, delete, similar."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Query, Response
from pydantic import AfterValidator

from app.api import limits
from app.api.deps import ERROR_RESPONSES, CollectionDep, SettingsDep
from app.api.schemas import (
    MAX_ID_LENGTH,
    BatchIn,
    BatchOut,
    DocumentIn,
    DocumentOut,
    DocumentPut,
    InsertOut,
    MatchesOut,
    check_document_id,
)
from app.service import InsertResult, NewDocument
from app.service import Query as SearchQuery

router = APIRouter(
    prefix="/v1/collections/{name}/documents",
    tags=["documents"],
    responses=ERROR_RESPONSES,
)
DocumentId = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(check_document_id)
]


def insert_json(result: InsertResult) -> dict[str, Any]:
    """InsertOut as plain data. Every insert and match answer is written by orjson from
    the service's dataclasses (Match encodes as is), far faster than building pydantic
    models; the response_model of each route documents the shape, and the schemathesis
    test checks the answers against it."""
    return {
        "id": result.id,
        "inserted": result.inserted,
        "duplicate_of": result.duplicate_of,
        "cluster_id": result.cluster_id,
        "matches": result.matches,
    }


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code, media_type="application/json")


@router.post("", status_code=201, response_model=InsertOut, responses={200: {"model": InsertOut}})
def insert_document(body: DocumentIn, collection: CollectionDep, settings: SettingsDep) -> Response:
    """Insert one document (201), or report the duplicate it is and skip it (200)."""
    limits.check_documents(settings, [body])
    document = NewDocument(text=body.text, id=body.id, metadata=body.metadata)
    [result] = collection.insert([document], body.on_duplicate, html=body.html)
    return json_response(insert_json(result), 201 if result.inserted else 200)


@router.post("/batch", response_model=BatchOut)
def insert_batch(body: BatchIn, collection: CollectionDep, settings: SettingsDep) -> Response:
    """Insert documents in order; each also matches the earlier ones of the batch."""
    limits.check_batch(settings, len(body.documents))
    limits.check_documents(settings, body.documents)
    html = {document.html for document in body.documents}
    documents = [NewDocument(text=d.text, id=d.id, metadata=d.metadata) for d in body.documents]
    if len(html) > 1:
        results = [
            collection.insert([document], body.on_duplicate, html=item.html)[0]
            for document, item in zip(documents, body.documents, strict=True)
        ]
    else:
        results = collection.insert(documents, body.on_duplicate, html=html.pop())
    return json_response({"results": [insert_json(result) for result in results]})


@router.get("/{document_id}")
async def get_document(document_id: DocumentId, collection: CollectionDep) -> DocumentOut:
    stored = collection.get(document_id)
    return DocumentOut(
        id=stored.id,
        metadata=stored.metadata,
        created_at=stored.created_at,
        cluster_id=stored.cluster_id,
        simhash=stored.simhash,
        text=stored.text,
    )


@router.put(
    "/{document_id}",
    status_code=201,
    response_model=InsertOut,
    responses={200: {"model": InsertOut}},
)
def put_document(
    document_id: DocumentId, body: DocumentPut, collection: CollectionDep, settings: SettingsDep
) -> Response:
    """Insert (201) or replace (200) the document with this id."""
    limits.check_documents(settings, [body])
    document = NewDocument(text=body.text, id=document_id, metadata=body.metadata)
    [result] = collection.insert([document], "insert", replace=True, html=body.html)
    return json_response(insert_json(result), 200 if result.replaced else 201)


@router.delete("/{document_id}", status_code=204)
def delete_document(document_id: DocumentId, collection: CollectionDep) -> Response:
    collection.delete(document_id)
    return Response(status_code=204)


@router.get("/{document_id}/similar", response_model=MatchesOut)
async def similar_documents(
    document_id: DocumentId,
    collection: CollectionDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1)] = 10,
    min_similarity: Annotated[float | None, Query(ge=0.0, le=1.0, allow_inf_nan=False)] = None,
    max_distance: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """Documents near this one, itself excluded, best first."""
    limits.check_limit(settings, limit)
    query = SearchQuery(limit=limit, max_distance=max_distance, min_similarity=min_similarity)
    return json_response({"matches": collection.similar(document_id, query)})
