"""Export and import of collections on the Redis backend, in app/transfer.py's JSON lines.

The same lines as the embedded service's export, so that a collection moves between the
backends both ways (``neardup export`` with one, ``neardup import`` with the other):

- **Export** reads each collection's row groups (``HGETALL`` of their fields and records,
  64 groups a round trip) and writes its documents in insert order (their seq), with
  their fingerprints, cluster names, metadata, texts and short texts.
- **Import** is an ``ImportTarget`` for ``import_lines``: a collection line creates the
  collection (refused if it exists); documents arrive as the embedded service's rows in
  file order, which become seqs in the same order (a block per chunk, ``HINCRBY``), with
  their clusters' seqs and names; they are written as an insert writes them (cluster
  members and time entries, the store's insert, n-gram entries, counters), without
  matching: their clusters come from the file. A cluster named by a deleted document is
  kept under a row imported and deleted at once, as app/transfer.py does.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any

from app.backends.redis.records import Record, digest
from app.backends.redis.registry import RedisRegistry
from app.backends.redis.retention import time_member
from app.backends.redis.store.rows import unpack_record
from app.backends.redis.store.store import NewDocuments, Status
from app.backends.redis.store.wire import Command
from app.collection_config import CollectionConfig
from app.core.hosts import host_key
from app.service.times import iso_time_us
from app.storage.base import DocumentBatch, Mark, StoredCollection
from app.transfer import ImportFailed

# Row groups read per round trip by an export.
EXPORT_GROUPS = 64


def export_lines(registry: RedisRegistry, names: Sequence[str] = ()) -> Iterator[str]:
    """JSON lines of the collections (all, or those named) and their documents."""
    for handle in registry.list():
        if names and handle.name not in names:
            continue
        resolved = registry.resolve(handle.name)
        yield json.dumps(
            {"type": "collection", "name": handle.name, "settings": resolved.config.to_dict()}
        )
        store = registry.store(resolved)
        layout = resolved.layout
        documents: list[tuple[int, dict[str, Any]]] = []
        for first in range(0, layout.groups, EXPORT_GROUPS):
            groups = range(first, min(layout.groups, first + EXPORT_GROUPS))
            commands: list[Command] = []
            for group in groups:
                _, s, r, _ = layout.group_keys(group)
                commands += [("HGETALL", s), ("HGETALL", r)]
            replies = store.wire.send(commands)
            for blobs_reply, records_reply in zip(replies[::2], replies[1::2], strict=True):
                blobs = _pairs(blobs_reply)
                records = dict(_pairs(records_reply))
                held = [(field, blob) for field, blob in blobs if field in records]
                if not held:
                    continue
                fixed, signatures = layout.parse_blobs([blob for _, blob in held])
                for i, (field, _) in enumerate(held):
                    document_id, payload = unpack_record(records[field])
                    record = Record.unpack(payload)
                    exact = fixed["exact"][i]
                    documents.append(
                        (
                            record.seq,
                            {
                                "type": "document",
                                "collection": handle.name,
                                "id": document_id,
                                "created_at": record.created,
                                "timestamp": iso_time_us(int(fixed["timestamp"][i])),
                                "cluster_id": record.cluster_name,
                                "metadata": record.metadata,
                                "simhash": f"{int(fixed['simhash'][i]):016x}",
                                "minhash": base64.b64encode(
                                    signatures[i].astype("<u4").tobytes()
                                ).decode(),
                                "exact": f"{int(exact[0]):016x}{int(exact[1]):016x}",
                                "text": record.text,
                                "short": record.short,
                            },
                        )
                    )
        documents.sort(key=lambda item: item[0])
        for _, line in documents:
            yield json.dumps(line)


def _pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    if isinstance(reply, dict):
        return list(reply.items())
    return list(zip(reply[::2], reply[1::2], strict=True))


class RedisImport:
    """Where ``app.transfer.import_lines`` writes on the Redis backend (ImportTarget)."""

    def __init__(self, registry: RedisRegistry) -> None:
        self.registry = registry
        # Per collection: row (the file's numbering) -> (seq, id).
        self._rows: dict[str, dict[int, tuple[int, str]]] = {}

    def load(self) -> list[StoredCollection]:
        """Nothing: whether a collection exists is asked when it is created."""
        return []

    def create_collection(self, name: str, config: dict[str, Any]) -> None:
        _, created = self.registry.create(name, CollectionConfig.from_dict(config))
        if not created:
            raise ImportFailed(
                f"collection {name!r} already exists: import into a collection that does not "
                "exist, or drop it first"
            )
        self._rows[name] = {}

    def add_documents(self, name: str, documents: DocumentBatch, mark: Mark | None = None) -> None:
        resolved = self.registry.resolve(name)
        store = self.registry.store(resolved)
        rows = self._rows[name]
        count = len(documents)
        (last,) = store.wire.send(
            [("HINCRBY", resolved.counters_key(), "seq", count)], durable=True
        )
        first_seq = int(last) - count + 1
        for i, (row, document_id) in enumerate(
            zip(documents.rows.tolist(), documents.ids, strict=True)
        ):
            rows[row] = (first_seq + i, document_id)
        texts = documents.text_column()
        shorts = documents.short_column() if resolved.ngram is not None else [None] * count
        timestamps = documents.timestamp_column()
        records: list[Record] = []
        commands: list[Command] = []
        for i, document_id in enumerate(documents.ids):
            seq = first_seq + i
            cluster, cluster_name = rows[int(documents.clusters[i])]
            record = Record(
                seq,
                float(documents.created_at[i]),
                cluster,
                cluster_name,
                documents.metadata[i],
                texts[i],
                shorts[i],
                host_key(documents.metadata[i]),
            )
            records.append(record)
            commands.append(("ZADD", resolved.members_key(cluster), seq, document_id))
            member = time_member(int(timestamps[i]), seq, document_id)
            commands.append(("ZADD", resolved.time_key(), 0, member))
        store.wire.send(commands, durable=True)
        minhash = documents.minhash if resolved.num_perm else documents.minhash[:, :0]
        written = store.insert(
            NewDocuments(
                ids=list(documents.ids),
                simhash=documents.simhash,
                minhash=minhash,
                exact=documents.exact,
                timestamps=timestamps,
                digests=[digest(documents.exact[i], documents.metadata[i]) for i in range(count)],
                records=[record.pack() for record in records],
            )
        )
        if (written.status != Status.INSERTED).any():
            raise ImportFailed(f"collection {name!r}: a document's id is stored already")
        finish = resolved.side_entries("ZADD", records, written.rows)
        joined = sum(record.cluster != record.seq for record in records)
        finish.append(("HINCRBY", resolved.counters_key(), "duplicates", joined))
        store.wire.send(finish, durable=True)

    def delete_documents(self, name: str, rows: list[int]) -> None:
        """A placeholder of a cluster name: imported, then deleted (its name stays)."""
        collection = self.registry.get(name)
        for row in rows:
            collection.delete(self._rows[name][row][1])
