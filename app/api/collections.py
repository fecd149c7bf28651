"""/v1/collections: create, list, inspect and drop collections."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import ValidationError

from app.api.auth import key_of
from app.api.deps import ERROR_RESPONSES, CollectionDep, CollectionName, RegistryDep
from app.api.errors import describe_validation_errors
from app.api.schemas import (
    CollectionInfo,
    CollectionList,
    CollectionPatch,
    CollectionSettings,
    CollectionStats,
)
from app.errors import InvalidBody
from app.service.protocols import ServiceCollection

router = APIRouter(prefix="/v1/collections", tags=["collections"], responses=ERROR_RESPONSES)


def describe(collection: ServiceCollection) -> CollectionInfo:
    return CollectionInfo(
        name=collection.name,
        settings=CollectionSettings.from_config(collection.config),
        stats=CollectionStats(**collection.stats()),
    )


@router.put("/{name}", status_code=201, responses={200: {"model": CollectionInfo}})
def create_collection(
    name: CollectionName,
    registry: RegistryDep,
    response: Response,
    settings: Annotated[CollectionSettings | None, Body()] = None,
) -> CollectionInfo:
    """Create a collection (201). On an existing collection: the same settings answer 200;
    new match_window, retention or limits are applied (200); any other setting that
    differs is 409 settings_conflict, naming it."""
    collection, created = registry.create(name, (settings or CollectionSettings()).to_config())
    response.status_code = 201 if created else 200
    return describe(collection)


@router.patch("/{name}", responses={409: {"description": "A fixed setting differs"}})
def patch_collection(
    name: CollectionName, registry: RegistryDep, changes: CollectionPatch
) -> CollectionInfo:
    """Change settings, as a JSON merge patch of them (a field left out keeps its value,
    null clears it): match_window, retention and limits may change; a fixed setting
    (shingle, simhash, minhash, ngram, store_text) sent with another value is 409
    settings_conflict. What the old retention expired stays expired."""
    current = CollectionSettings.from_config(registry.get(name).config).model_dump()
    merged = _merge_patch(current, changes.model_dump(exclude_unset=True))
    try:
        asked = CollectionSettings.model_validate(merged)
    except ValidationError as error:
        raise InvalidBody(describe_validation_errors(error.errors(include_url=False))) from None
    return describe(registry.update(name, asked.to_config()))


def _merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7396: objects merge field by field, null removes (here: back to unset)."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged[key] = None
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged


# Plain def: the statistics take the collection's write lock (to expire what is due).
@router.get("")
def list_collections(registry: RegistryDep, request: Request) -> CollectionList:
    """Every collection the request's key may see."""
    key = key_of(request.scope)
    visible = [c for c in registry.list() if key is None or key.may_see(c.name)]
    return CollectionList(collections=[describe(c) for c in visible])


@router.get("/{name}")
def get_collection(collection: CollectionDep) -> CollectionInfo:
    return describe(collection)


@router.delete("/{name}", status_code=204)
def drop_collection(name: CollectionName, registry: RegistryDep) -> Response:
    registry.drop(name)
    return Response(status_code=204)
