"""/v1/collections/{name}/documents: insert, batch, upsert, get, delete, similar."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import AfterValidator, ValidationError
from starlette.convertors import Convertor, register_url_convertor

from app.api import limits, pages
from app.api.auth import take_documents
from app.api.deps import (
    ERROR_RESPONSES,
    CollectionName,
    collection_of,
    found_first,
    found_first_async,
    settings_of,
)
from app.api.errors import describe_validation_errors
from app.api.parameters import MatchFilters
from app.api.schemas import (
    MAX_ID_LENGTH,
    BatchDocument,
    BatchIn,
    BatchOut,
    DocumentIn,
    DocumentOut,
    DocumentPut,
    InsertOut,
    MatchesOut,
    check_document_id,
)
from app.config import Settings
from app.core.page import Extraction, Page
from app.errors import InvalidBody, NeardupError
from app.service import InsertOptions, InsertResult, NewDocument, Refused
from app.service.explain import refusals
from app.service.protocols import ServiceCollection

router = APIRouter(
    prefix="/v1/collections/{name}/documents",
    tags=["documents"],
    responses=ERROR_RESPONSES,
)
DocumentId = Annotated[
    str, Path(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(check_document_id)
]


def insert_json(result: InsertResult | Refused, page: Page | None = None) -> dict[str, Any]:
    """InsertOut (or DocumentErrorOut) as plain data. Every insert and match answer is
    written by orjson from the service's dataclasses (Match encodes as is), far faster
    than building pydantic models; the response_model of each route documents the shape,
    and the schemathesis test checks the answers against it. A page's answer says which
    text of it was matched, and its title."""
    if isinstance(result, Refused):
        return {"id": result.id, "error": {"code": result.error.code, "message": str(result.error)}}
    answer = {
        "id": result.id,
        "inserted": result.inserted,
        "duplicate_of": result.duplicate_of,
        "cluster_id": result.cluster_id,
        "matches": result.matches,
    }
    if page is not None:
        answer["extracted"] = page.extracted
        answer["title"] = page.title
    if result.contains is not None:  # passages on
        answer["contains"] = result.contains
        answer["contained_in"] = result.contained_in
    return answer


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code, media_type="application/json")


def _inserted(result: InsertResult | Refused) -> InsertResult:
    """The result of a one-document insert; a refusal is the request's error."""
    if isinstance(result, Refused):
        raise result.error
    return result


@router.post("", status_code=201, response_model=InsertOut, responses={200: {"model": InsertOut}})
async def insert_document(body: DocumentIn, name: CollectionName, request: Request) -> Response:
    """Insert one document (201). A duplicate with `on_duplicate: skip`, or the same id
    with the same text and metadata again (a retry), answers 200 and stores nothing."""
    collection = collection_of(request, name)
    async with found_first_async(collection):
        take_documents(request, 1)
    status, answer = await insert_answer(collection, settings_of(request), body)
    return Response(answer, status, media_type="application/json")


async def insert_answer(
    collection: ServiceCollection, settings: Settings, body: DocumentIn
) -> tuple[int, bytes]:
    """The status and JSON answer of a one-document insert: for this route and for the
    hot path (app/api/hot.py)."""
    async with found_first_async(collection):
        read = await pages.read_off_loop(body, settings, collection)
        limits.check_metadata(settings, body.metadata)
        options = InsertOptions(body.on_duplicate, since=body.since, until=body.until)
    document = NewDocument(read.text, body.id, body.metadata, body.timestamp, read.host)
    # Async: the CPU work runs on the loop and the commit is awaited (Collection.insert_async).
    answer = await collection.insert_async(document, options)
    result = _inserted(answer)
    return 201 if result.inserted else 200, orjson.dumps(insert_json(result, read.page))


def _checked(
    raw: dict[str, Any], settings: Settings, extraction: Callable[[], Extraction]
) -> tuple[NewDocument, Page | None] | Refused:
    """One document of a batch, validated and read as a single insert would be."""
    raw_id = raw.get("id")
    try:
        document = BatchDocument.model_validate(raw)
        read = pages.read(document, settings, extraction() if document.is_page else "main")
        limits.check_metadata(settings, document.metadata)
    except ValidationError as error:
        return Refused(
            raw_id if isinstance(raw_id, str) else None,
            InvalidBody(describe_validation_errors(error.errors(include_url=False))),
        )
    except NeardupError as error:
        return Refused(raw_id if isinstance(raw_id, str) else None, error)
    new = NewDocument(read.text, document.id, document.metadata, document.timestamp, read.host)
    return new, read.page


@router.post("/batch", response_model=BatchOut)
def insert_batch(body: BatchIn, name: CollectionName, request: Request) -> Response:
    """Insert documents in order; each also matches the earlier ones of the batch.

    Always 200 with one result per document, in order. A document refused on its own
    (invalid, empty once normalised, above a limit, an id of the batch again, an id
    stored with other content) gets `{"id", "error": {"code", "message"}}` at its
    position and changes nothing; the others are inserted and matched as usual. The
    error code is the one the document alone would get. The whole request is refused
    only when it is wrong itself (not JSON, not this shape, too many documents)."""
    collection, settings = collection_of(request, name), settings_of(request)
    with found_first(collection):
        limits.check_batch(settings, len(body.documents))
        take_documents(request, len(body.documents))
        options = InsertOptions(body.on_duplicate, since=body.since, until=body.until)
    # The collection's settings are read once, and only for a batch that holds a page.
    extraction = functools.cache(lambda: collection.config.html.extract)
    checked = [_checked(raw, settings, extraction) for raw in body.documents]
    valid = [(position, d) for position, d in enumerate(checked) if not isinstance(d, Refused)]
    results: list[dict[str, Any] | None] = [
        insert_json(d) if isinstance(d, Refused) else None for d in checked
    ]
    # Also with no valid document: the call is what finds an unknown collection (404) on
    # a backend whose registry answers handles without asking (Redis).
    answers = collection.insert([document for _, (document, _) in valid], options)
    for (position, (_, page)), answer in zip(valid, answers, strict=True):
        results[position] = insert_json(answer, page)
    return json_response({"results": results})


# Ids are often URLs: a document's routes take one whose "/" came quoted (%2F, which the
# server unquotes before routing). ".../similar" after any id is that id's similar, so
# the document's own routes take no id that ends so (a PUT there is a 405, as before).
class _DocumentIdConvertor(Convertor[str]):
    regex = r"(?!.*/similar$).+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("document_id", _DocumentIdConvertor())


@router.get("/{document_id:path}/similar", response_model=MatchesOut)
async def similar_documents(
    document_id: DocumentId,
    name: CollectionName,
    request: Request,
    filters: Annotated[MatchFilters, Depends()],
    explain: bool = False,
) -> Response:
    """Documents near this one, itself excluded, best first; with since / until, only
    those with a timestamp in that range; with ``explain``, also those a rule refused."""
    collection, settings = collection_of(request, name), settings_of(request)
    async with found_first_async(collection):
        limits.check_limit(settings, filters.limit)
    query = filters.query
    matches = await collection.similar_async(document_id, query)
    if not explain:
        return json_response({"matches": matches})
    text = (await collection.get_async(document_id, kept_text=True)).text or ""
    refused = await refusals(collection, text, query, matches, similar_to=document_id)
    return json_response({"matches": matches, "refused": refused})


@router.get("/{document_id:document_id}")
async def get_document(
    document_id: DocumentId, name: CollectionName, request: Request
) -> DocumentOut:
    collection = collection_of(request, name)
    stored = await collection.get_async(document_id)
    return DocumentOut(
        id=stored.id,
        metadata=stored.metadata,
        created_at=stored.created_at,
        timestamp=stored.timestamp,
        cluster_id=stored.cluster_id,
        simhash=stored.simhash,
        text=stored.text,
    )


@router.put(
    "/{document_id:document_id}",
    status_code=201,
    response_model=InsertOut,
    responses={200: {"model": InsertOut}},
)
def put_document(
    document_id: DocumentId, body: DocumentPut, name: CollectionName, request: Request
) -> Response:
    """Insert (201) or replace (200) the document with this id."""
    collection, settings = collection_of(request, name), settings_of(request)
    with found_first(collection):
        read = pages.read(
            body, settings, collection.config.html.extract if body.is_page else "main"
        )
        limits.check_metadata(settings, body.metadata)
        take_documents(request, 1)
        options = InsertOptions(replace=True, since=body.since, until=body.until)
    document = NewDocument(read.text, document_id, body.metadata, body.timestamp, read.host)
    answer = collection.insert([document], options)
    result = _inserted(answer[0])
    # 200: replaced, or not stored (expired on arrival); 201: a new document.
    return json_response(
        insert_json(result, read.page), 201 if result.inserted and not result.replaced else 200
    )


@router.delete("/{document_id:document_id}", status_code=204)
def delete_document(document_id: DocumentId, name: CollectionName, request: Request) -> Response:
    collection = collection_of(request, name)
    collection.delete(document_id)
    return Response(status_code=204)
