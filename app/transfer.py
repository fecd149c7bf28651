"""Export and import of collections as JSON lines, for backups and moves between machines.

One line per collection, then one per live document, in the order they were inserted::

    {"type": "collection", "name": "default", "settings": {...}}
    {"type": "document", "collection": "default", "id": "a", "created_at": 1.7e9,
     "timestamp": "2024-05-01T12:00:00Z", "cluster_id": "a", "metadata": null,
     "simhash": "16 hex digits",
     "minhash": "base64 of K little-endian uint32", "exact": "32 hex digits",
     "text": "the text, or null", "short": "the normalised short text, or null"}

Documents carry their fingerprints, the normalised text the n-gram index holds for a
short one, and their text when the collection keeps texts (``store_text``): an import
restores a collection exactly under the same settings. To
re-index under new settings, keep texts and post them again to a new collection. A
cluster named by a deleted document keeps its name: the import records that name under a
deleted row, as the service does. ``timestamp`` is the document's time in ISO 8601 (UTC,
to the microsecond); an export written before documents had one has none, and the
document takes its created_at. An export holds the documents not evicted yet: a
retention expires again, at the next start, any whose time has passed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from app.service.times import BadTime, iso_time_us, parse_time
from app.storage.base import DocumentBatch, Mark, StoredCollection

# Documents written to the store per transaction during an import.
IMPORT_CHUNK = 10_000


class ImportFailed(ValueError):
    """The file cannot be imported as it is; the message says which line and why."""


class ImportTarget(Protocol):
    """What an import writes into: a Store (the embedded service's), or the Redis
    backend's importer (app/backends/redis/transfer.py)."""

    def load(self) -> list[StoredCollection]: ...

    def create_collection(self, name: str, config: dict[str, Any]) -> None: ...

    def add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> None: ...

    def delete_documents(self, name: str, rows: list[int]) -> None: ...


def export_lines(collections: list[StoredCollection]) -> Iterator[str]:
    """JSON lines of every collection and live document."""
    for stored in collections:
        yield json.dumps({"type": "collection", "name": stored.name, "settings": stored.config})
        documents = stored.documents
        names = dict(stored.names)
        names.update(zip(documents.rows.tolist(), documents.ids, strict=True))
        texts = documents.text_column()
        shorts = documents.short_column()
        timestamps = documents.timestamp_column().tolist()
        for i, document_id in enumerate(documents.ids):
            yield json.dumps(
                {
                    "type": "document",
                    "collection": stored.name,
                    "id": document_id,
                    "created_at": float(documents.created_at[i]),
                    "timestamp": iso_time_us(timestamps[i]),
                    "cluster_id": names[int(documents.clusters[i])],
                    "metadata": documents.metadata[i],
                    "simhash": f"{int(documents.simhash[i]):016x}",
                    "minhash": base64.b64encode(
                        documents.minhash[i].astype("<u4").tobytes()
                    ).decode(),
                    "exact": f"{int(documents.exact[i, 0]):016x}{int(documents.exact[i, 1]):016x}",
                    "text": texts[i],
                    "short": shorts[i],
                }
            )


class _CollectionImport:
    """Rows for one collection's documents, in file order, with placeholder rows for
    cluster names that no imported document carries."""

    def __init__(self, store: ImportTarget, name: str, settings: dict[str, Any]) -> None:
        self.store, self.name = store, name
        self.num_perm = (
            int(settings["minhash"]["num_perm"]) if settings["minhash"]["enabled"] else 0
        )
        self.next_row = 0
        self.row_of: dict[str, int] = {}
        self.pending: list[dict[str, Any]] = []
        self.count = 0

    def add(self, line_number: int, document: dict[str, Any]) -> None:
        document_id = document["id"]
        if document_id in self.row_of:
            raise ImportFailed(f"line {line_number}: document {document_id!r} appears twice")
        cluster_name = document["cluster_id"]
        if cluster_name not in self.row_of and cluster_name != document_id:
            # The cluster is named by a deleted document: keep the name on a deleted row.
            self.flush()
            placeholder = self._batch(
                [{**document, "id": cluster_name}], [self.next_row], [self.next_row]
            )
            self.store.add_documents(self.name, placeholder)
            self.store.delete_documents(self.name, [self.next_row])
            self.row_of[cluster_name] = self.next_row
            self.next_row += 1
        self.row_of[document_id] = self.next_row
        document["_row"] = self.next_row
        self.next_row += 1
        self.pending.append(document)
        if len(self.pending) >= IMPORT_CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        rows = [document["_row"] for document in self.pending]
        clusters = [self.row_of[document["cluster_id"]] for document in self.pending]
        self.store.add_documents(self.name, self._batch(self.pending, rows, clusters))
        self.count += len(self.pending)
        self.pending = []

    def _batch(
        self, documents: list[dict[str, Any]], rows: list[int], clusters: list[int]
    ) -> DocumentBatch:
        minhash = b"".join(base64.b64decode(document["minhash"]) for document in documents)
        created = np.array([document["created_at"] for document in documents], dtype=np.float64)
        return DocumentBatch(
            ids=[document["id"] for document in documents],
            rows=np.array(rows, dtype=np.int64),
            created_at=created,
            clusters=np.array(clusters, dtype=np.int64),
            metadata=[document.get("metadata") for document in documents],
            simhash=np.array(
                [int(document["simhash"], 16) for document in documents], dtype=np.uint64
            ),
            minhash=np.frombuffer(minhash, dtype="<u4")
            .astype(np.uint32)
            .reshape(len(documents), self.num_perm),
            exact=np.array(
                [
                    [int(document["exact"][:16], 16), int(document["exact"][16:], 16)]
                    for document in documents
                ],
                dtype=np.uint64,
            ).reshape(len(documents), 2),
            texts=[document.get("text") for document in documents],
            shorts=[document.get("short") for document in documents],
            timestamps=np.array(
                [
                    round(created[i] * 1e6) if d.get("timestamp") is None else _time(d)
                    for i, d in enumerate(documents)
                ],
                dtype=np.int64,
            ),
        )


def _time(document: dict[str, Any]) -> int:
    try:
        return parse_time(document["timestamp"])
    except BadTime as error:
        raise ValueError(f"timestamp: {error}") from None


def import_lines(store: ImportTarget, lines: Iterable[str]) -> dict[str, int]:
    """Write exported lines into a store that does not hold these collections yet.

    Returns the number of documents imported per collection.
    """
    existing = {stored.name for stored in store.load()}
    imports: dict[str, _CollectionImport] = {}
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record["type"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ImportFailed(f"line {line_number}: not an export line ({error})") from error
        if kind == "collection":
            name = record["name"]
            if name in existing or name in imports:
                raise ImportFailed(
                    f"line {line_number}: collection {name!r} already exists: import into a "
                    "fresh data directory, or drop the collection first"
                )
            store.create_collection(name, record["settings"])
            imports[name] = _CollectionImport(store, name, record["settings"])
        elif kind == "document":
            target = imports.get(record.get("collection"))
            if target is None:
                raise ImportFailed(f"line {line_number}: document before its collection line")
            try:
                target.add(line_number, record)
            except (KeyError, ValueError) as error:
                raise ImportFailed(f"line {line_number}: bad document ({error})") from error
        else:
            raise ImportFailed(f"line {line_number}: unknown line type {kind!r}")
    for target in imports.values():
        target.flush()
    return {name: target.count for name, target in imports.items()}
