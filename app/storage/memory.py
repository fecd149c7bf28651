"""MemoryStore: the Store interface in memory (tests, and a service that may forget)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from app.storage.base import (
    CommitObserver,
    Covered,
    DocumentBatch,
    Eviction,
    Mark,
    SavedRows,
    StoredCollection,
    no_saved_rows,
)
from app.storage.commit import Commit, settled
from app.storage.segments import SegmentStore


class MemoryStore:
    """Keeps collections and documents in this process only: gone at exit."""

    segments: SegmentStore | None = None  # nothing on disk

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, Any]] = {}
        self._batches: dict[str, list[DocumentBatch]] = {}
        self._deleted: dict[str, set[int]] = {}
        self._removed: dict[str, set[int]] = {}
        self._marks: dict[str, tuple[int, int] | None] = {}
        self._next_rows: dict[str, int] = {}
        self._texts: dict[str, dict[int, str]] = {}  # by row, while a document is held

    def load_collection(
        self, name: str, covered: Covered | None = None, *, texts: bool = True
    ) -> StoredCollection:
        return next(stored for stored in self.load() if stored.name == name)

    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        """(Texts are given whatever ``texts`` says: they are in memory anyway.)"""
        with self._lock:
            loaded = []
            for name, config in self._configs.items():
                saved_rows(name, config)  # nothing on disk: every fingerprint is here
                num_perm = int(config["minhash"]["num_perm"]) if config["minhash"]["enabled"] else 0
                everything = DocumentBatch.concatenate(self._batches[name], num_perm)
                everything = everything.select(
                    np.flatnonzero(~np.isin(everything.rows, list(self._removed[name])))
                )
                keep = ~np.isin(everything.rows, list(self._deleted[name]))
                live = everything.select(np.flatnonzero(keep))
                id_of = dict(zip(everything.rows.tolist(), everything.ids, strict=True))
                names = {
                    row: id_of[row] for row in set(live.clusters.tolist()) & self._deleted[name]
                }
                next_row = int(everything.rows.max()) + 1 if len(everything) else 0
                next_row = max(next_row, self._next_rows[name])
                loaded.append(
                    StoredCollection(name, config, live, names, next_row, self._marks[name])
                )
            return loaded

    def create_collection(self, name: str, config: dict[str, Any]) -> None:
        with self._lock:
            self._configs[name] = config
            self._batches[name] = []
            self._deleted[name] = set()
            self._removed[name] = set()
            self._marks[name] = None
            self._next_rows[name] = 0
            self._texts[name] = {}

    def drop_collection(self, name: str) -> None:
        with self._lock:
            for table in (
                self._configs,
                self._batches,
                self._deleted,
                self._removed,
                self._marks,
                self._next_rows,
                self._texts,
            ):
                table.pop(name, None)

    def update_collection(self, name: str, config: dict[str, Any], mark: Mark | None) -> None:
        with self._lock:
            self._configs[name] = config
            if mark is not None:
                self._marks[name] = mark

    def add_documents(self, name: str, documents: DocumentBatch, mark: Mark | None = None) -> None:
        with self._lock:
            self._batches[name].append(documents)
            if documents.texts is not None:
                texts = self._texts[name]
                for row, text in zip(documents.rows.tolist(), documents.texts, strict=True):
                    if text is not None:
                        texts[row] = text
            if mark is not None:
                self._marks[name] = mark

    def begin_add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> Commit:
        return _done(lambda: self.add_documents(name, documents, mark))

    def begin_evict(self, name: str, eviction: Eviction) -> Commit:
        def evict() -> None:
            with self._lock:
                if name not in self._configs:
                    return
                self._removed[name].update(eviction.removed)
                for row in [*eviction.removed, *eviction.named]:
                    self._texts[name].pop(row, None)
                self._deleted[name].difference_update(eviction.removed)
                self._deleted[name].update(eviction.named)
                self._marks[name] = eviction.expired_through
                self._next_rows[name] = max(self._next_rows[name], eviction.next_row)

        return _done(evict)

    def removal_mark(self) -> int:
        return 0  # no segments: no log

    def forget_removals(self, name: str, through: int) -> None:
        pass

    def delete_documents(self, name: str, rows: list[int]) -> None:
        with self._lock:
            self._deleted[name].update(rows)
            for row in rows:
                self._texts[name].pop(row, None)

    def read_texts(self, name: str, rows: list[int]) -> list[str | None]:
        with self._lock:
            texts = self._texts.get(name, {})
            return [texts.get(row) for row in rows]

    def observe_commits(self, observer: CommitObserver) -> None:
        """Nothing is committed here: the observer is never called."""

    def close(self) -> None:
        pass


def _done(change: Callable[[], None]) -> Commit:
    """The commit of a change made now."""
    try:
        change()
    except Exception as error:
        return settled(error)
    return settled()
