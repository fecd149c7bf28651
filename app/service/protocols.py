"""What the API needs of a collection and of the registry of collections, whatever keeps
them: the embedded service (Collection, Registry: in-process indexes over SQLite) and the
Redis backend (RedisCollection, RedisRegistry: stateless over Redis) both meet these, so
that the handlers are written once.

``blocking`` says whether a collection's reads wait on the network: the async handlers
run them in the thread pool then, and on the event loop when they are in-memory work.
Gets and searches have ``*_async`` forms instead, which the Redis backend awaits on
the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from app.collection_config import CollectionConfig
from app.core.types import Backlog
from app.service.types import (
    EvictionObserver,
    InsertResult,
    Match,
    MergeObserver,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    StoredDocument,
)


class ServiceCollection(Protocol):
    """One collection as the API handlers use it."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> CollectionConfig: ...

    @property
    def eviction_seconds(self) -> float: ...

    @property
    def blocking(self) -> bool: ...

    def get(self, document_id: str) -> StoredDocument: ...

    async def get_async(self, document_id: str) -> StoredDocument: ...

    def search(self, text: str, query: Query) -> list[Match]: ...

    def similar(self, document_id: str, query: Query) -> list[Match]: ...

    async def search_async(self, text: str, query: Query) -> list[Match]:
        """``search`` from a coroutine: on the event loop, the Redis backend's round trips
        awaited there."""

    async def similar_async(self, document_id: str, query: Query) -> list[Match]: ...

    def insert(
        self,
        documents: Sequence[NewDocument],
        on_duplicate: OnDuplicate = "insert",
        *,
        replace: bool = False,
        since: int | None = None,
        until: int | None = None,
    ) -> list[InsertResult | Refused]: ...

    async def insert_async(
        self,
        document: NewDocument,
        on_duplicate: OnDuplicate = "insert",
        *,
        since: int | None = None,
        until: int | None = None,
    ) -> InsertResult | Refused: ...

    def delete(self, document_id: str) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def backlogs(self) -> dict[str, Backlog]: ...


class ServiceRegistry(Protocol):
    """Every collection of a service, as the API and the app's lifespan use them."""

    def open(self) -> None: ...

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise StorageUnavailable when the storage does not answer (/readyz)."""

    def start_merger(self) -> None: ...

    def create(self, name: str, config: CollectionConfig) -> tuple[ServiceCollection, bool]: ...

    def update(self, name: str, config: CollectionConfig) -> ServiceCollection: ...

    def get(self, name: str) -> ServiceCollection: ...

    def list(self) -> Sequence[ServiceCollection]: ...

    def drop(self, name: str) -> None: ...

    def observe_merges(self, observer: MergeObserver) -> None: ...

    def observe_evictions(self, observer: EvictionObserver) -> None: ...

    def store_eviction_seconds(self) -> float: ...

    def storage_counters(self) -> dict[str, float]:
        """Networked storage (Redis): ``round_trips`` so far, and failures by kind."""
