"""The Registry of a service's collections, and the background merger that keeps them fast."""

from __future__ import annotations

import threading
import time

from app.collection_config import CollectionConfig, ShingleConfig
from app.errors import SettingsConflict, TooManyCollections, UnknownCollection
from app.memory import release_free_memory
from app.service.collection import Collection
from app.service.types import MergeObserver, NewDocument, Query
from app.storage.base import Store
from app.storage.memory import MemoryStore

# The merger wakes when a writer asks, and at least this often to catch up after bursts.
MERGE_POLL_SECONDS = 1.0
DEFAULT_COLLECTION = "default"


def warm_up() -> None:
    """Run every compiled kernel once (numba loads or compiles them on first use)."""
    for unit in ("char", "word"):
        config = CollectionConfig(shingle=ShingleConfig(unit=unit))
        store = MemoryStore()
        store.create_collection("warm-up", config.to_dict())
        collection = Collection("warm-up", config, store)
        collection.insert([NewDocument("warm up the kernels", "a")])
        collection.search("warm up the kernels", Query())
        collection.merge(force=True)


class Registry:
    """Every collection of a service, and the background merger that keeps them fast."""

    def __init__(self, store: Store, max_collections: int = 1000) -> None:
        self._store = store
        self._max_collections = max_collections
        self._collections: dict[str, Collection] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._merger: threading.Thread | None = None
        self._observe_merge: MergeObserver = lambda collection, seconds: None

    def open(self) -> None:
        """Rebuild every stored collection, create ``default`` if it is missing, and
        compile the kernels, so that the first request after /readyz is not slow."""
        for stored in self._store.load():
            config = CollectionConfig.from_dict(stored.config)
            collection = Collection(stored.name, config, self._store, self.wake_merger)
            collection.restore(stored)
            self._collections[stored.name] = collection
        if DEFAULT_COLLECTION not in self._collections:
            self.create(DEFAULT_COLLECTION, CollectionConfig())
        warm_up()

    def create(self, name: str, config: CollectionConfig) -> tuple[Collection, bool]:
        """(collection, created): the same settings again is fine, different ones conflict."""
        with self._lock:
            existing = self._collections.get(name)
            if existing is not None:
                if existing.config != config:
                    raise SettingsConflict(
                        f"collection {name!r} exists with other settings: "
                        f"{existing.config.to_dict()}; settings cannot change once created"
                    )
                return existing, False
            if len(self._collections) >= self._max_collections:
                raise TooManyCollections(
                    f"at most {self._max_collections} collections; delete one first"
                )
            self._store.create_collection(name, config.to_dict())
            collection = Collection(name, config, self._store, self.wake_merger)
            self._collections[name] = collection
            return collection, True

    def get(self, name: str) -> Collection:
        collection = self._collections.get(name)
        if collection is None:
            raise UnknownCollection(name)
        return collection

    def list(self) -> list[Collection]:
        return [self._collections[name] for name in sorted(self._collections)]

    def drop(self, name: str) -> None:
        with self._lock:
            self.get(name)
            self._store.drop_collection(name)
            del self._collections[name]

    def observe_merges(self, observer: MergeObserver) -> None:
        """Call ``observer(collection name, seconds)`` after each background merge."""
        self._observe_merge = observer

    def wake_merger(self) -> None:
        self._wake.set()

    def start_merger(self) -> None:
        self._merger = threading.Thread(target=self._merge_loop, name="merger", daemon=True)
        self._merger.start()

    def _merge_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(MERGE_POLL_SECONDS)
            self._wake.clear()
            for collection in list(self._collections.values()):
                if collection.needs_merge():
                    started = time.perf_counter()
                    if collection.merge():
                        self._observe_merge(collection.name, time.perf_counter() - started)
                        # The arrays a merge replaced are free now: give them back.
                        release_free_memory()

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._merger is not None:
            self._merger.join()
        self._store.close()
