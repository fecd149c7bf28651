"""/v1/collections/{name}/search: near-duplicates of a text that is not stored."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import AfterValidator

from app.api import limits, pages
from app.api.deps import (
    ERROR_RESPONSES,
    CollectionName,
    collection_of,
    found_first_async,
    settings_of,
)
from app.api.documents import json_response
from app.api.parameters import MatchFilters, search_query
from app.api.schemas import MatchesOut, SearchIn, check_text
from app.config import Settings
from app.service.explain import refusals
from app.service.protocols import ServiceCollection
from app.service.types import Query as SearchQuery

# Searches are async: the work is a few hundred microseconds of CPU on in-memory indexes,
# cheaper on the event loop than the hop through the thread pool (docs/benchmarks.md);
# over Redis, their round trips are awaited on the loop too (search_async).
router = APIRouter(
    prefix="/v1/collections/{name}/search",
    tags=["search"],
    responses=ERROR_RESPONSES,
)


@router.post("", response_model=MatchesOut)
async def search(body: SearchIn, name: CollectionName, request: Request) -> Response:
    """Documents matching the text, best first. Nothing is stored."""
    answer = await search_answer(collection_of(request, name), settings_of(request), body)
    return Response(answer, media_type="application/json")


async def search_answer(collection: ServiceCollection, settings: Settings, body: SearchIn) -> bytes:
    """The answer to a POST, as JSON: for this route and for the hot path (app/api/hot.py)."""
    async with found_first_async(collection):
        limits.check_limit(settings, body.limit)
        read = await pages.read_off_loop(body, settings, collection)
    query = search_query(
        body.limit,
        body.max_distance,
        body.min_similarity,
        body.since,
        body.until,
        body.min_coverage,
    )
    if read.host:  # a page: its host's chrome is no evidence against the host's pages
        query = replace(query, host=read.host)
    return orjson.dumps(await _answer(collection, read.text, query, body.explain))


async def _answer(
    collection: ServiceCollection, text: str, query: SearchQuery, explain: bool
) -> dict[str, Any]:
    """The matches of a search, and with ``explain`` what a rule refused."""
    matches = await collection.search_async(text, query)
    if not explain:
        return {"matches": matches}
    return {"matches": matches, "refused": await refusals(collection, text, query, matches)}


@router.get("", response_model=MatchesOut)
async def search_get(
    name: CollectionName,
    request: Request,
    text: Annotated[str, Query(min_length=1), AfterValidator(check_text)],
    filters: Annotated[MatchFilters, Depends()],
    explain: bool = False,
) -> Response:
    """The same as POST, for short texts in the query string."""
    collection, settings = collection_of(request, name), settings_of(request)
    async with found_first_async(collection):
        limits.check_limit(settings, filters.limit)
        limits.check_text(settings, text)
    query = filters.query
    return json_response(await _answer(collection, text, query, explain))
