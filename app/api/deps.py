"""Shared dependencies of the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from app.api.schemas import COLLECTION_NAME_PATTERN
from app.config import Settings
from app.errors import NotReady
from app.service import Collection, Registry


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_registry(request: Request) -> Registry:
    """The registry, once the start-up rebuild is done (503 before)."""
    registry: Registry | None = request.app.state.registry
    if registry is None or not request.app.state.ready.is_set():
        raise NotReady("the service is starting: indexes are being rebuilt, retry shortly")
    return registry


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[Registry, Depends(get_registry)]
CollectionName = Annotated[str, Path(pattern=COLLECTION_NAME_PATTERN)]


def get_collection(name: CollectionName, registry: RegistryDep) -> Collection:
    return registry.get(name)


CollectionDep = Annotated[Collection, Depends(get_collection)]
