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
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from app.backends.redis.check import check_collection
from app.backends.redis.failures import storage_errors
from app.backends.redis.insert import insert_documents
from app.backends.redis.reads import Reads
from app.backends.redis.records import Held, Record, joined
from app.backends.redis.resolved import Backend, Resolved
from app.backends.redis.retention import (
    EXPIRE,
    NO_RETENTION,
    Mark,
    cutoff_of,
    parse_member,
    time_bytes,
    time_member,
)
from app.backends.redis.store.rows import RowData
from app.backends.redis.store.steps import Steps
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints
from app.core.rule import (
    EXACT,
    MINHASH,
    NGRAM,
    SIMHASH,
    Pairs,
    Part,
    combined,
    in_time,
    pairs_within_batch,
    score,
)
from app.core.types import Rows
from app.core.verify import ExactMinHash, candidate_threshold, search_bar
from app.errors import (
    StorageUnavailable,
)
from app.service.coalesce import SingleInserts
from app.service.times import MICROSECONDS, iso_time_us, now_us
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

T = TypeVar("T")


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
        self._reads = Reads(self, backend)

    @property
    def config(self) -> CollectionConfig:
        with storage_errors(self._backend.failures):
            return self._backend.resolve(self.name).config

    def opened(self) -> tuple[Resolved, RedisStore]:
        resolved = self._backend.resolve(self.name)
        return resolved, self._backend.store(resolved)

    def _check(self) -> None:
        """Assert that this collection's keys agree with its stored documents (tests;
        check.check_collection reads the whole collection)."""
        check_collection(*self.opened())

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

    def cutoff(self, resolved: Resolved) -> int | None:
        return cutoff_of(resolved.config.retention.max_age_us, self.clock_us())

    def expire(self, resolved: Resolved, store: RedisStore) -> Mark:
        """Move the mark up to what the retention expires now (atomic in Redis: every
        process agrees), and answer it with the count of documents held. One round trip,
        for collections with a retention or a limit."""
        expiring = self.expire_command(resolved)
        if expiring is None:
            return NO_RETENTION
        command, cutoff = expiring
        (reply,) = store.wire.send([command], durable=True)
        return self.expired(reply, cutoff)

    def expire_command(self, resolved: Resolved) -> tuple[Command, int | None] | None:
        """The EXPIRE call of ``expire`` (to send with other commands), and the max_age
        cutoff it applies; None for a collection without a retention or a limit."""
        if not resolved.retains and resolved.config.limits.max_documents is None:
            return None
        cutoff = self.cutoff(resolved)
        kept = resolved.config.retention.max_documents or 0
        cut = b"" if cutoff is None else time_bytes(cutoff)
        keys = (resolved.counters_key(), resolved.time_key())
        return ("EVAL", EXPIRE, 2, *keys, cut, kept), cutoff

    @staticmethod
    def expired(reply: Any, cutoff: int | None) -> Mark:
        """The mark of an EXPIRE reply."""
        member, held = reply
        return Mark.of(member, cutoff, int(held))

    def stats(self) -> dict[str, Any]:
        """Documents: the store's count (a round trip over its row groups), or with a
        retention the time index's entries above the mark (the retention applied
        first, as in the embedded service); duplicates and evicted: counters the writers
        and evictors keep (over every process); expiring: entries at or below the mark;
        the oldest timestamp: the time index's first entry above the mark. No merges."""
        with storage_errors(self._backend.failures):
            resolved, store = self.opened()
            mark = self.expire(resolved, store)
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

    def fingerprint_nonempty_of(
        self, resolved: Resolved, texts: Sequence[str]
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        return resolved.config.fingerprints(list(texts))

    def match_store_steps(
        self,
        resolved: Resolved,
        store: RedisStore,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        also: Sequence[Command] = (),
        stamps: Rows | None = None,
        mark: Mark = NO_RETENTION,
        read_mark: bool = False,
    ) -> Steps[tuple[Pairs, Held, list[Any]]]:
        """Every visible stored document (``mark``, or with ``read_mark`` the mark read in
        the first round trip) matching each of a batch of documents, by any method (two
        round trips; a third for short texts found by the n-gram index alone), within
        since / until, and with ``stamps`` (the times of a batch being inserted) within
        the collection's match window of each, scored and sorted best first. The
        replies to ``also`` (sent in the first round trip) come last."""
        ngram = resolved.ngram
        probes = ngram.probes(fingerprints.shorts) if ngram is not None else None
        probing = probes.commands if probes is not None else []
        read_mark = read_mark and resolved.retains
        reading: list[Command] = [("HGET", resolved.counters_key(), "mark")] if read_mark else []
        found = yield from store.search_steps(
            fingerprints.simhash,
            fingerprints.minhash if resolved.num_perm else None,
            fingerprints.exact,
            max_distance=query.max_distance,
            threshold=candidate_threshold(
                search_bar(resolved.config.minhash.threshold, query.min_similarity),
                resolved.config.verifies_exactly,
            ),
            also=[*also, *reading, *probing],
        )
        if read_mark:
            mark = Mark.of(found.also[len(also)], self.cutoff(resolved))
        also_replies = found.also[: len(also)]
        found = dataclasses.replace(found, also=found.also[len(also) + len(reading) :])
        data = found.rows
        parts: list[Part] = [
            (found.exact.positions, found.exact.rows, EXACT, None),
            (found.simhash.positions, found.simhash.rows, SIMHASH, None),
            (found.minhash.positions, found.minhash.rows, MINHASH, None),
        ]
        if ngram is not None and probes is not None and probes.commands:
            positions, rows = ngram.candidates(probes, found.also)
            missing = np.setdiff1d(rows, data.rows)
            if len(missing):  # found by the n-gram index alone: their records now
                data = joined(data, (yield from store.rows_steps(missing)))
            live = np.isin(rows, data.rows)
            positions, rows = positions[live], rows[live]
            held = Held(data)
            texts = [held.record(i).short for i in data.index(rows).tolist()]
            bar = max(ngram.threshold, query.min_similarity or 0.0)
            positions, rows, similarity = ngram.verified(
                probes, positions, rows, texts, bar, query.same_numbers
            )
            parts.append((positions, rows, NGRAM, similarity))
        held = Held(data)
        positions, rows, bits, exact_similarity = combined([p for p in parts if len(p[1])])
        keep = np.ones(len(rows), dtype=np.bool_)
        if exclude is not None:
            keep &= rows != exclude[positions]
        at = data.index(rows)
        if mark is not NO_RETENTION:
            keep &= mark.visible_many(data.timestamps[at], held.seqs(at))
        keep &= in_time(data.timestamps[at], query.since, query.until)
        window = resolved.config.match_window_us
        if stamps is not None and window is not None:
            keep &= np.abs(data.timestamps[at] - stamps[positions]) <= window
        positions, rows, bits, at = positions[keep], rows[keep], bits[keep], at[keep]
        scored = score(
            resolved.num_perm,
            fingerprints,
            positions,
            rows,
            bits,
            data.simhash[at],
            data.signatures[at],
            held.seqs(at),
            exact_similarity[keep],
            query.min_similarity,
            self._minhash_decision(resolved, query, fingerprints, held, data),
        )
        return scored, held, also_replies

    @staticmethod
    def _minhash_decision(
        resolved: Resolved, query: Query, fingerprints: Fingerprints, held: Held, data: RowData
    ) -> ExactMinHash | None:
        """How the search's MinHash pairs are decided: the stored texts are in the records
        the search read (None: the estimate decides)."""

        def stored_text(row: int) -> str | None:
            return held.record(int(data.index(np.array([row]))[0])).text

        texts = fingerprints.texts if query.exact_minhash else None
        return resolved.config.minhash_decision(query.min_similarity, texts, stored_text)

    def match_within(
        self, resolved: Resolved, fingerprints: Fingerprints, stamps: Rows, query: Query
    ) -> Pairs:
        """(later, earlier) documents of one batch matching by the indexes' own rules
        (the shared rule's pairs_within_batch)."""
        parts: list[Part] = []
        for matcher in resolved.matchers:
            pairs = matcher.pairs_within(fingerprints)
            parts.append((pairs.positions, pairs.rows, matcher.bit, pairs.similarity))
        config = resolved.config
        return pairs_within_batch(
            parts,
            fingerprints,
            stamps,
            resolved.num_perm,
            config.match_window_us,
            query.since,
            query.until,
            config.minhash_decision(None, fingerprints.texts),
        )

    # ------------------------------------------------------------------ writes

    def insert(
        self, documents: Sequence[NewDocument], options: InsertOptions = PLAIN_INSERT
    ) -> list[InsertResult | Refused]:
        """Insert documents in order, as Collection.insert does (the same answers, the
        same refusals at their positions). Answers once Redis has every write (and, with
        NEARDUP_REDIS_WAIT_REPLICAS, the replicas); a Redis failure is 503 and a retry
        of the request finishes what it started."""
        with storage_errors(self._backend.failures):
            resolved, store = self.opened()
            with self._write_lock:
                return insert_documents(self, resolved, store, documents, options)

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
            resolved, store = self.opened()
            mark = self.expire(resolved, store)
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

    def budget(self) -> int | None:
        """NEARDUP_MAX_DOCUMENTS: the documents of every collection together."""
        return self._backend.max_documents

    def held_everywhere(self) -> int:
        return self._backend.held_everywhere()

    def clock_us(self) -> int:
        return now_us(self._backend.clock)

    def evict(self, resolved: Resolved, store: RedisStore, members: list[bytes]) -> int:
        """Remove the documents of expired time index entries: those whose record's
        seq is the entry's (an id stored again since is another document); then the
        entries, and what each document has beside its fields: its cluster membership,
        its n-gram entries, the counters. Returns the documents removed."""
        if not members:
            return 0
        entries = [parse_member(member) for member in members]
        ids = [document_id for _, _, document_id in entries]
        rows, data = store.lookup(ids)
        held = Held(data)
        doomed: list[tuple[str, Record, int]] = []
        for (_, seq, document_id), row in zip(entries, rows.tolist(), strict=True):
            if row >= 0:
                record = held.record(int(data.index(np.array([row]))[0]))
                if record.seq == seq:
                    doomed.append((document_id, record, row))
        # Only if still under the row read: an id stored again since is another document.
        rows_held = np.array([d[2] for d in doomed], dtype=np.int64)
        removed = (
            store.remove([d[0] for d in doomed], rows_held) if doomed else np.zeros(0, np.int64)
        )
        commands: list[Command] = [("ZREM", resolved.time_key(), *members)]
        evicted = joined = 0
        for (document_id, record, row), gone in zip(doomed, removed.tolist(), strict=True):
            if gone != row:
                continue  # removed, or stored again, meanwhile
            evicted += 1
            joined += record.cluster != record.seq
            commands.append(("ZREM", resolved.members_key(record.cluster), document_id))
            commands += resolved.side_entries("ZREM", [record], np.array([row]))
        counters = resolved.counters_key()
        if evicted:  # (none: the collection may be gone, and its counters with it)
            commands.append(("HINCRBY", counters, "evicted", evicted))
        if joined:
            commands.append(("HINCRBY", counters, "duplicates", -joined))
        store.wire.send(commands, durable=True)
        return evicted
