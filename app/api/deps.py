"""Shared dependencies of the routers.

They are ``async def``: they only read app state, and a plain ``def`` dependency would
cost each request a hop through the threadpool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Request
from starlette.concurrency import run_in_threadpool

from app.api.schemas import COLLECTION_NAME_PATTERN, ErrorOut
from app.config import Settings
from app.errors import NeardupError, NotReady
from app.service.protocols import ServiceCollection, ServiceRegistry

T = TypeVar("T")


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def ready_registry(app: Any) -> ServiceRegistry:
    """The app's registry, once the start-up rebuild is done (503 before)."""
    registry: ServiceRegistry | None = app.state.registry
    if registry is None or not app.state.ready.is_set():
        raise NotReady("the service is starting: indexes are being rebuilt, retry shortly")
    return registry


def registry_of(request: Request) -> ServiceRegistry:
    return ready_registry(request.app)


def collection_of(request: Request, name: str) -> ServiceCollection:
    """The hot routes (documents, search) call this instead of depending on
    CollectionDep: FastAPI's dependency solving is a per-request cost these routes do not
    need (bench/bare_wrk.py; docs/journal.md, "Issue 11")."""
    return registry_of(request).get(name)


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_registry(request: Request) -> ServiceRegistry:
    return registry_of(request)


@contextlib.contextmanager
def found_first(collection: ServiceCollection) -> Iterator[None]:
    """Checks of the request itself (limits) inside: when one refuses it, an unknown
    collection answers 404 instead, as the embedded service does (its registry finds
    the collection before any check; a Redis registry's handles find out when used)."""
    try:
        yield
    except NeardupError:
        _ = collection.config  # UnknownCollection if it does not exist
        raise


@contextlib.asynccontextmanager
async def found_first_async(collection: ServiceCollection) -> AsyncIterator[None]:
    """found_first, with the collection's lookup in the thread pool (it may wait on the
    network; a refused request only)."""
    try:
        yield
    except NeardupError:
        await run_in_threadpool(lambda: collection.config)
        raise


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


# The errors every /v1 operation may answer, in the contract's error body.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("A path or query parameter is invalid"),
    401: _error("No API key, or an unknown one (when the service has keys)"),
    403: _error("A read-only API key asked to write"),
    404: _error("Unknown collection or document"),
    409: _error("Conflict: the document or collection exists otherwise"),
    413: _error("A body, text, batch, metadata or limit above its configured limit"),
    422: _error("The body is not valid JSON, or not what the operation takes"),
    503: _error("Starting up, or the storage cannot take writes"),
    507: _error("The collection or the service holds as many documents as it may"),
}

SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ServiceRegistry, Depends(get_registry)]
CollectionName = Annotated[str, Path(pattern=COLLECTION_NAME_PATTERN)]


async def get_collection(name: CollectionName, registry: RegistryDep) -> ServiceCollection:
    return registry.get(name)


CollectionDep = Annotated[ServiceCollection, Depends(get_collection)]
