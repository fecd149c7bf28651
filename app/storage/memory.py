"""MemoryStore: the Store interface in memory (tests, and a service that may forget)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from app.storage.base import CommitObserver, DocumentBatch, StoredCollection


class MemoryStore:
    """Keeps collections and documents in this process only: gone at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, Any]] = {}
        self._batches: dict[str, list[DocumentBatch]] = {}
        self._deleted: dict[str, set[int]] = {}

    def load(self) -> list[StoredCollection]:
        with self._lock:
            loaded = []
            for name, config in self._configs.items():
                num_perm = int(config["minhash"]["num_perm"]) if config["minhash"]["enabled"] else 0
                everything = DocumentBatch.concatenate(self._batches[name], num_perm)
                keep = ~np.isin(everything.rows, list(self._deleted[name]))
                live = everything.select(np.flatnonzero(keep))
                id_of = dict(zip(everything.rows.tolist(), everything.ids, strict=True))
                names = {
                    row: id_of[row] for row in set(live.clusters.tolist()) & self._deleted[name]
                }
                next_row = int(everything.rows.max()) + 1 if len(everything) else 0
                loaded.append(StoredCollection(name, config, live, names, next_row))
            return loaded

    def create_collection(self, name: str, config: dict[str, Any]) -> None:
        with self._lock:
            self._configs[name] = config
            self._batches[name] = []
            self._deleted[name] = set()

    def drop_collection(self, name: str) -> None:
        with self._lock:
            for table in (self._configs, self._batches, self._deleted):
                table.pop(name, None)

    def add_documents(self, name: str, documents: DocumentBatch) -> None:
        with self._lock:
            self._batches[name].append(documents)

    def begin_add_documents(self, name: str, documents: DocumentBatch) -> Future[None]:
        done: Future[None] = Future()
        try:
            self.add_documents(name, documents)
        except Exception as error:
            done.set_exception(error)
        else:
            done.set_result(None)
        return done

    def delete_documents(self, name: str, rows: list[int]) -> None:
        with self._lock:
            self._deleted[name].update(rows)

    def observe_commits(self, observer: CommitObserver) -> None:
        """Nothing is committed here: the observer is never called."""

    def close(self) -> None:
        pass
