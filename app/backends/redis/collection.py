"""A collection kept in Redis (``NEARDUP_BACKEND=redis://...``): the process holds nothing.

Every document, fingerprint, index table, cluster and setting lives in Redis (the
documents and tables in a RedisStore, app/backends/redis/store), so any number of processes serve
the same collection and each sees the others' acknowledged writes at once. The answers
are the embedded Collection's: the same fingerprints (app/core), the same match rule and
scores, the same retries, clusters and errors.

Per document, beside the store's fixed fields and signature, a JSON record:
``{"s": seq, "c": created_at, "k": cluster seq, "n": cluster name, "m": metadata, "t":
text}``. ``seq`` numbers a collection's inserts in order (one ``HINCRBY`` a batch): it is
what "older" means where the embedded service compares rows (the store's row numbers
are per row group, not in insert order). A cluster is named by its first document's
seq (``k``; ``n`` is that document's id, kept when it goes), and its members are a sorted
set by seq, ``{nd:<collection>:c<k>}``, so that ``duplicate_of`` (the oldest live member)
is its first member still held.

An insert (a batch), in round trips: the collection's settings (``HGET``), the ids
(lookup: retries and conflicts), the seqs, the search (2), the clusters' member sets, the
store's insert (3), the counters, and for the documents whose cluster's first document
is not known to be live, the member sets read and looked up (2). A process's inserts
into one collection are serialised by a lock, so that each matches the ones before it
as in the embedded service; inserts from other processes at the same moment do not see
each other until acknowledged (a near-duplicate pair sent at once to two processes may
start two clusters), and the store's functions keep ids unique across processes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from app.backends.redis.check import check_collection
from app.backends.redis.context import CollectionContext
from app.backends.redis.failures import storage_errors
from app.backends.redis.insert import insert_documents
from app.backends.redis.reads import Reads
from app.backends.redis.records import Held
from app.backends.redis.resolved import Backend, Resolved
from app.backends.redis.retention import (
    Mark,
    parse_member,
    time_member,
)
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.collection_config import CollectionConfig
from app.errors import (
    StorageUnavailable,
)
from app.service.coalesce import SingleInserts
from app.service.times import MICROSECONDS, iso_time_us
from app.service.types import (
    PLAIN_INSERT,
    InsertOptions,
    InsertResult,
    Match,
    NewDocument,
    Query,
    Refused,
    StoredDocument,
)

# A delete reads the document, then removes it if it is still the one read.
DELETE_ATTEMPTS = 3


class RedisCollection:
    """One collection over Redis, as the API uses it (ServiceCollection). Holds no data:
    a handle that reads the collection's settings at every call, so that a collection
    created, changed or dropped by another process is seen at once."""

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self._backend = backend
        self._write_lock = threading.Lock()
        # One batch at a time (the write lock serialises them anyway): the documents that
        # arrive while one is in flight go in together next.
        self._single_inserts = SingleInserts(self._insert_many_async, serial=True)
        self._context = CollectionContext(name, backend)
        self._reads = Reads(self._context, backend)

    @property
    def config(self) -> CollectionConfig:
        with storage_errors(self._backend.failures):
            return self._backend.resolve(self.name).config

    def _check(self) -> None:
        """Assert that this collection's keys agree with its stored documents (tests;
        check.check_collection reads the whole collection)."""
        check_collection(*self._context.opened())

    # ------------------------------------------------------------------ reads

    def get(self, document_id: str) -> StoredDocument:
        return self._reads.get(document_id)

    async def get_async(self, document_id: str, kept_text: bool = False) -> StoredDocument:
        return await self._reads.get_async(document_id, kept_text)

    def search(self, text: str, query: Query) -> list[Match]:
        """Documents matching a text, best first; nothing is stored."""
        return self._reads.search(text, query)

    async def search_async(self, text: str, query: Query) -> list[Match]:
        return await self._reads.search_async(text, query)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded."""
        return self._reads.similar(document_id, query)

    async def similar_async(self, document_id: str, query: Query) -> list[Match]:
        return await self._reads.similar_async(document_id, query)

    def _held(self, store: RedisStore, document_id: str, mark: Mark) -> tuple[Held, int]:
        """The stored document with this id, if it is visible (not expired)."""
        rows, data = store.lookup([document_id])
        return self._reads.held_of(rows, data, document_id, mark)

    def stats(self) -> dict[str, Any]:
        """Documents: the store's count (a round trip over its row groups), or with a
        retention the time index's entries above the mark (the retention applied
        first, as in the embedded service); duplicates and evicted: counters the writers
        and evictors keep (over every process); expiring: entries at or below the mark;
        the oldest timestamp: the time index's first entry above the mark. No merges."""
        with storage_errors(self._backend.failures):
            resolved, store = self._context.opened()
            mark = self._context.expire(resolved, store)
            member = mark.member if mark.member else None
            above = b"(" + member if member else b"-"
            time_key = resolved.time_key()
            commands: list[Command] = [
                ("HMGET", resolved.counters_key(), "duplicates", "evicted"),
                ("ZRANGE", time_key, above, b"+", "BYLEX", "LIMIT", 0, 1),
            ]
            if member:
                commands += [
                    ("ZLEXCOUNT", time_key, above, b"+"),
                    ("ZLEXCOUNT", time_key, b"-", b"[" + member),
                ]
            counters, first, *counts = store.wire.send(commands)
            documents = int(counts[0]) if member else store.count()
        oldest = parse_member(first[0])[0] if first else None
        return {
            "documents": documents,
            "duplicates": max(0, int(counters[0] or 0)),
            "merges": 0,
            "index_bytes": 0,
            "evicted": int(counters[1] or 0),
            "expiring": int(counts[1]) if member else 0,
            "oldest_timestamp": None if oldest is None else iso_time_us(oldest),
            "oldest_seconds": None if oldest is None else oldest / MICROSECONDS,
        }

    # ------------------------------------------------------------------ matching

    # ------------------------------------------------------------------ writes

    def insert(
        self, documents: Sequence[NewDocument], options: InsertOptions = PLAIN_INSERT
    ) -> list[InsertResult | Refused]:
        """Insert documents in order, as Collection.insert does (the same answers, the
        same refusals at their positions). Answers once Redis has every write (and, with
        NEARDUP_REDIS_WAIT_REPLICAS, the replicas); a Redis failure is 503 and a retry
        of the request finishes what it started."""
        with storage_errors(self._backend.failures):
            resolved, store = self._context.opened()
            with self._write_lock:
                return insert_documents(self._context, resolved, store, documents, options)

    async def insert_async(
        self, document: NewDocument, options: InsertOptions = PLAIN_INSERT
    ) -> InsertResult | Refused:
        """One document; the single inserts of one turn of the event loop go in together
        as one batch (app/service/coalesce.py), in the thread pool."""
        return await self._single_inserts.insert(document, options)

    async def _insert_many_async(
        self, documents: list[NewDocument], options: InsertOptions
    ) -> list[InsertResult | Refused]:
        return await asyncio.to_thread(self.insert, documents, options)

    def delete(self, document_id: str) -> None:
        """Remove the document with this id (404 if none is visible). The document read
        is the one removed, with its cluster membership, entries and counters: if another
        process replaced it meanwhile, the new one is read and removed instead."""
        with storage_errors(self._backend.failures):
            resolved, store = self._context.opened()
            mark = self._context.expire(resolved, store)
            for _ in range(DELETE_ATTEMPTS):
                held, at = self._held(store, document_id, mark)
                if store.remove([document_id], held.data.rows[at : at + 1])[0] >= 0:
                    break
            else:
                raise StorageUnavailable(
                    f"document {document_id!r} keeps changing while it is deleted; retry"
                )
            record = held.record(at)
            stamp = int(held.data.timestamps[at])
            commands: list[Command] = [
                ("ZREM", resolved.members_key(record.cluster), document_id),
                ("ZREM", resolved.time_key(), time_member(stamp, record.seq, document_id)),
            ]
            commands += resolved.side_entries("ZREM", [record], held.data.rows[at : at + 1])
            if record.cluster != record.seq:
                commands.append(("HINCRBY", resolved.counters_key(), "duplicates", -1))
            store.wire.send(commands, durable=True)

    # ------------------------------------------------------------------ the registry's

    def opened(self) -> tuple[Resolved, RedisStore]:
        """The collection's settings now and this thread's store of it."""
        return self._context.opened()

    def expire(self, resolved: Resolved, store: RedisStore) -> Mark:
        """The retention applied now (CollectionContext.expire)."""
        return self._context.expire(resolved, store)

    def evict(self, resolved: Resolved, store: RedisStore, members: list[bytes]) -> int:
        """The documents of expired time index entries removed (CollectionContext.evict)."""
        return self._context.evict(resolved, store, members)
