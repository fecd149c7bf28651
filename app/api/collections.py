"""/v1/collections: create, list, inspect and drop collections."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from app.api.deps import ERROR_RESPONSES, CollectionDep, CollectionName, RegistryDep
from app.api.schemas import CollectionInfo, CollectionList, CollectionSettings, CollectionStats
from app.service import Collection

router = APIRouter(prefix="/v1/collections", tags=["collections"], responses=ERROR_RESPONSES)


def describe(collection: Collection) -> CollectionInfo:
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
    """Create a collection (201); the same settings again answer 200, others 409."""
    collection, created = registry.create(name, (settings or CollectionSettings()).to_config())
    response.status_code = 201 if created else 200
    return describe(collection)


@router.get("")
async def list_collections(registry: RegistryDep) -> CollectionList:
    return CollectionList(collections=[describe(c) for c in registry.list()])


@router.get("/{name}")
async def get_collection(collection: CollectionDep) -> CollectionInfo:
    return describe(collection)


@router.delete("/{name}", status_code=204)
def drop_collection(name: CollectionName, registry: RegistryDep) -> Response:
    registry.drop(name)
    return Response(status_code=204)
