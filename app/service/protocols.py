"""The seam between the HTTP layer and a backend, in two parts:

- the requests (ServiceRegistry, ServiceCollection): what the handlers call to create,
  read, insert, search and delete; the same answers on every backend;
- the operations (ServiceOperations): the background work a backend runs (merges,
  evictions) and the figures an operator reads (/metrics): each backend reports what it
  has, and nothing stands in for what it has not (Redis has no merges nor buffers).

The embedded service (Registry, Collection: in-process indexes over SQLite) and the Redis
backend (RedisRegistry, RedisCollection: stateless over Redis) both meet them, so that the
handlers are written once. Reads are ``*_async``: the embedded backend answers them on the
event loop (in-memory work), the Redis backend awaits its round trips there. A batch
insert and a delete block until durable: the handlers call them from the thread pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.collection_config import CollectionConfig
from app.core.types import Backlog
from app.service import types


class ServiceCollection(Protocol):
    """One collection as the request handlers use it."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> CollectionConfig: ...

    async def get_async(
        self, document_id: str, kept_text: bool = False
    ) -> types.StoredDocument: ...

    async def search_async(self, text: str, query: types.Query) -> list[types.Match]: ...

    async def similar_async(self, document_id: str, query: types.Query) -> list[types.Match]: ...

    def insert(
        self,
        documents: Sequence[types.NewDocument],
        options: types.InsertOptions = types.PLAIN_INSERT,
    ) -> list[types.InsertResult | types.Refused]: ...

    async def insert_async(
        self, document: types.NewDocument, options: types.InsertOptions = types.PLAIN_INSERT
    ) -> types.InsertResult | types.Refused: ...

    def delete(self, document_id: str) -> None: ...

    def stats(self) -> dict[str, Any]:
        """What GET /v1/collections/{name} answers under ``stats``."""


class ServiceRegistry(Protocol):
    """Every collection of a service, as the request handlers and the app's lifespan
    use them."""

    def open(self) -> None: ...

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise StorageUnavailable when the storage does not answer (/readyz)."""

    def create(self, name: str, config: CollectionConfig) -> tuple[ServiceCollection, bool]: ...

    def update(self, name: str, config: CollectionConfig) -> ServiceCollection: ...

    def get(self, name: str) -> ServiceCollection: ...

    def list(self) -> Sequence[ServiceCollection]: ...

    def drop(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class CollectionFigures:
    """One collection's figures for an operator. ``backlogs``: per index that buffers
    its inserts, entries not merged yet and tombstones; ``eviction_cpu_seconds``: CPU
    time spent evicting from memory, where the backend holds documents in memory."""

    name: str
    stats: dict[str, Any]
    backlogs: dict[str, Backlog] = field(default_factory=dict)
    eviction_cpu_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class ServiceFigures:
    """A backend's figures at one moment. ``round_trips`` and ``failures`` (by kind) of
    a networked storage; ``store_eviction_cpu_seconds`` where the store measures it."""

    collections: list[CollectionFigures]
    round_trips: float | None = None
    failures: dict[str, float] = field(default_factory=dict)
    store_eviction_cpu_seconds: float | None = None


class ServiceOperations(Protocol):
    """What a backend does in the background and what it tells an operator."""

    def start_background(self, observer: types.BackgroundObserver) -> None:
        """Start the background work (merges and evictions on the embedded backend,
        evictions on Redis), each reported to ``observer`` when done."""

    def figures(self) -> ServiceFigures:
        """The figures now; a collection whose figures cannot be read is left out (a
        networked storage out of reach says so in its failures)."""


class ServiceBackend(ServiceRegistry, ServiceOperations, Protocol):
    """A backend as the app's lifespan holds it: requests and operations."""
