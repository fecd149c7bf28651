"""The service: collections of documents over the core indexes, clusters, merge scheduling.

A Collection's writes are serialised by its lock: a batch is matched against the indexes
and against its own earlier documents, queued for the Store's next group commit and
published to the indexes; the lock is released and the answer waits for the commit. The
next writer therefore matches against it without waiting for its fsync, and concurrent
inserts share one commit. A commit that fails takes its documents out of the indexes
again (tombstones) and answers 503: nothing unacknowledged stays, and nothing
acknowledged is lost. A search may see a document a few milliseconds before its commit
returns. Replacements and deletes commit first and change memory after.
Reads take no lock: the indexes give them consistent snapshots, and every row an index
returns was fully recorded in the per-row lists before it entered the index.

Time. Every document has a timestamp (microseconds; the client's, else the insert time).
Searches filter by since / until, inserts also by the collection's match_window, exactly:
the filters apply to everything the indexes found, before the limit. Retention
(max_age, max_documents) expires documents oldest first by (timestamp, row): an expired
document disappears from every answer at once (its state turns to HIDDEN under the write
lock, and a max_age is checked against the clock by every read), and is evicted in the
background, EVICTION_CHUNK rows per hold of the write lock (``evict``): index tombstones,
per-row records and their memory (by whole pages, see app/core/row_array.py), then the
durable record. The retention mark (every (timestamp, row) at or below it expired)
travels with the commits, so that a restart brings nothing expired back. A TimeOrder
holds the rows by time: expiring k documents costs O(k log), not a scan.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints, fingerprint_nonempty
from app.core.row_array import PagedList, RowArray, sorted_unique
from app.core.rule import METHODS_OF_BITS, Pairs, Part, combined, pairs_within_batch, score
from app.core.time_order import TimeOrder
from app.core.types import Backlog, Rows
from app.errors import (
    DocumentExists,
    DuplicateId,
    InsufficientStorage,
    InvalidDocument,
    NeardupError,
    StorageUnavailable,
    UnknownDocument,
)
from app.service.budget import DocumentBudget
from app.service.coalesce import Options, SingleInserts
from app.service.indexes import ExactMatcher, Found, MinHashMatcher, NgramMatcher, build_indexes
from app.service.matching import check_query, check_range
from app.service.times import MICROSECONDS, Clock, iso_time_us, now_us
from app.service.types import (
    INSERT_MATCH_LIMIT,
    InsertResult,
    Match,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    StoredDocument,
    iso_time,
    new_document_id,
)
from app.storage.base import DocumentBatch, Eviction, Store, StoredCollection
from app.storage.commit import Commit

# Expired documents evicted per hold of the write lock: ~2.5 ms of Python, which holds the
# GIL throughout, so a search arriving meanwhile waits for it. 2048 (~5 ms, the
# interpreter's switch interval) cost ~10% less CPU per document.
EVICTION_CHUNK = 1024
# A merge is due once an index holds this many tombstones, or an eighth of the documents
# (evictions alone, with no inserts to fill the buffer, must still free the tables).
TOMBSTONE_MERGE_MIN = 65_536
MERGE_CHECK_DOCUMENTS = 64
# Row states, a byte per row (given back by pages, like the other per-row columns).
# GONE is 0, what a released page reads as: rows never used are GONE too.
GONE, LIVE, HIDDEN = 0, 1, 2  # HIDDEN: expired, not evicted yet; GONE: out of memory
_NO_MARK = (np.iinfo(np.int64).min, -1)


# A cluster's members: [head, count, end, row, row, ...] with room to grow; rows[head:end]
# hold every member not GONE (and some GONE ones, dropped lazily), oldest first.
_HEAD, _COUNT, _END, _FIRST = 0, 1, 2, 3


class _Members:
    """The rows that joined each cluster, oldest first (the row naming a cluster is not
    listed: most documents are alone in their cluster and cost nothing here). A row that
    leaves is dropped lazily (when it reaches the front, or by a compaction once the
    departed outnumber the rest), so that evicting a large cluster oldest first costs
    O(1) per row.

    A cluster's rows are one int64 array in a dict of ints: the garbage collector tracks
    neither, where an object and a list per cluster made every full collection visit them
    in memory the stream had scattered (40 of its 48 ms of CPU, holding the GIL, at
    500,000 documents held, every few seconds under inserts)."""

    __slots__ = ("_clusters",)

    def __init__(self) -> None:
        self._clusters: dict[int, npt.NDArray[np.int64]] = {}

    def __contains__(self, cluster: int) -> bool:
        return cluster in self._clusters

    def __len__(self) -> int:
        return len(self._clusters)

    def add(self, cluster: int, row: int) -> None:
        members = self._clusters.get(cluster)
        if members is None:
            members = self._clusters[cluster] = np.zeros(_FIRST + 1, dtype=np.int64)
            members[_HEAD] = members[_END] = _FIRST
        end = int(members[_END])
        if end == len(members):
            grown = np.zeros(2 * end, dtype=np.int64)
            grown[:end] = members
            members = self._clusters[cluster] = grown
        members[end] = row
        members[_END] = end + 1
        members[_COUNT] += 1

    def leave(self, cluster: int, state: npt.NDArray[np.uint8]) -> bool:
        """One row of the cluster left (its state is GONE already). True when it was the
        last: the cluster has no members any more."""
        members = self._clusters[cluster]
        count = int(members[_COUNT]) - 1
        if count == 0:
            del self._clusters[cluster]
            return True
        members[_COUNT] = count
        head, end = int(members[_HEAD]), int(members[_END])
        if end - head > 2 * count + 8:
            rows = members[head:end]
            kept = rows[state[rows] != GONE]
            members[_FIRST : _FIRST + len(kept)] = kept
            members[_HEAD], members[_END] = _FIRST, _FIRST + len(kept)
        return False

    def first_live(self, cluster: int, state: npt.NDArray[np.uint8], block: int = 64) -> int | None:
        """The oldest LIVE row of the cluster (HIDDEN ones are skipped, GONE ones at the
        front dropped), looked for a block of rows at a time."""
        members = self._clusters.get(cluster)
        if members is None:
            return None
        at, end = int(members[_HEAD]), int(members[_END])
        front = True  # every row before ``at`` is GONE
        while at < end:
            rows = members[at : min(end, at + block)]
            states = state[rows]
            if front:
                held = np.flatnonzero(states != GONE)
                front = not len(held)
                members[_HEAD] = at + (int(held[0]) if len(held) else len(rows))
            live = np.flatnonzero(states == LIVE)
            if len(live):
                return int(rows[live[0]])
            at += len(rows)
        return None

    def rows(self, cluster: int) -> npt.NDArray[np.int64]:
        """The rows listed (GONE ones not dropped yet included), oldest first."""
        members = self._clusters[cluster]
        return members[int(members[_HEAD]) : int(members[_END])]

    def count(self, cluster: int) -> int:
        """Members not GONE."""
        return int(self._clusters[cluster][_COUNT])

    def clusters(self) -> list[int]:
        return list(self._clusters)


class Collection:
    """Documents of one collection: their fingerprints, indexes and clusters."""

    blocking = False  # in-memory reads: the async handlers call them on the event loop

    def __init__(
        self,
        name: str,
        config: CollectionConfig,
        store: Store,
        wake_merger: Callable[[], None] = lambda: None,
        *,
        clock: Clock = time.time,
        budget: DocumentBudget | None = None,
        wake_evictor: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self._wake_merger = wake_merger
        self._wake_evictor = wake_evictor
        self._clock = clock
        self._budget = budget or DocumentBudget()
        self.config = config
        self._store = store
        self._params = config.fingerprint_params
        self._num_perm = config.minhash.num_perm if config.minhash.enabled else 0
        self._use_settings(config)
        # Every index through one interface (app/service/indexes.py); two are also kept
        # by kind for what only they hold: the exact hashes and the MinHash signatures.
        self._indexes = build_indexes(config)
        self._exact = next(i for i in self._indexes if isinstance(i, ExactMatcher)).index
        self._lsh = next((i.index for i in self._indexes if isinstance(i, MinHashMatcher)), None)
        self._ngram = next((i for i in self._indexes if isinstance(i, NgramMatcher)), None)
        self._write_lock = threading.Lock()
        # The newest group commit queued by an insert (commits complete in queue order).
        self._last_commit: Commit | None = None
        self._last_eviction: Commit | None = None
        # Per-row records, written before a row enters any index (readers rely on it);
        # their memory is given back by pages once the rows are gone.
        self._ids = PagedList[str]()
        self._metadata = PagedList[dict[str, Any]]()
        self._texts = PagedList[str]()
        # Numbers as numpy columns: 8 bytes a row where a list of Python objects costs 36.
        self._created = RowArray(np.float64)  # row -> unix time of the insert
        self._timestamp = RowArray(np.int64)  # row -> the document's time, microseconds
        self._cluster = RowArray(np.int64)  # row -> row of the document naming its cluster
        self._simhash = RowArray(np.uint64)
        self._state = RowArray(np.uint8)  # LIVE, HIDDEN or GONE
        self._next_row = 0
        self._low_row = 0  # every row below is GONE (see _low_row_locked)
        self._row_of: dict[str, int] = {}
        self._members = _Members()  # cluster row -> the other rows that joined it
        self._visible = 0  # LIVE documents
        self._duplicates = 0  # LIVE documents listed in a cluster's members
        # Retention: held rows by time; the expired rows waiting for eviction; the mark.
        self._order = TimeOrder()
        self._order_gone = 0  # entries of the order whose rows are GONE already
        self._expiring: list[Rows] = []
        self._expiring_count = 0
        self._expired_through: tuple[int, int] = _NO_MARK
        self._persisted_mark: tuple[int, int] = _NO_MARK
        self._clock_floor = np.iinfo(np.int64).min  # the clock never goes back for us
        self.merges = 0
        self._unchecked_documents = 0  # inserted since the last needs_merge()
        self._single_inserts = SingleInserts(self._insert_many_async)
        self.evicted = 0
        self.eviction_seconds = 0.0  # CPU time of the evictions in memory
        self.last_eviction_hold = 0.0  # seconds the last eviction held the write lock

    def _use_settings(self, config: CollectionConfig) -> None:
        """The time settings as numbers (they may change: reconfigure)."""
        self._window = config.match_window_us
        self._max_age = config.retention.max_age_us
        self._max_kept = config.retention.max_documents
        self._limit = config.limits.max_documents

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        """Documents visible now (expired ones, evicted or not, are not)."""
        return self._visible

    def _now(self) -> int:
        return max(now_us(self._clock), self._clock_floor)

    def _now_locked(self) -> int:
        now = self._now()
        self._clock_floor = now
        return now

    def get(self, document_id: str) -> StoredDocument:
        row = self._visible_row(document_id)
        stored = StoredDocument(
            id=document_id,
            metadata=self._metadata[row],
            created_at=iso_time(float(self._created.array[row])),
            cluster_id=self._ids[int(self._cluster.array[row])] or document_id,
            simhash=f"{int(self._simhash.array[row]):016x}",
            text=self._texts[row],
            timestamp=iso_time_us(int(self._timestamp.array[row])),
        )
        if self._row_of.get(document_id) != row or self._state.array[row] != LIVE:
            raise UnknownDocument(self.name, document_id)  # evicted while we read it
        return stored

    def _visible_row(self, document_id: str, now: int | None = None) -> int:
        row = self._row_of.get(document_id)
        if row is None or not self._is_visible(row, self._now() if now is None else now):
            raise UnknownDocument(self.name, document_id)
        return row

    def _is_visible(self, row: int, now: int) -> bool:
        if self._state.array[row] != LIVE:
            return False
        return self._max_age is None or int(self._timestamp.array[row]) >= now - self._max_age

    def _visible_mask(
        self,
        rows: Rows,
        query: Query,
        stamps: npt.NDArray[np.int64] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which rows a read may return: LIVE, not past max_age by the clock, within the
        query's since / until, and, with ``stamps`` (the time of the document each row
        would match), within the match window of it."""
        timestamps = self._timestamp.array[rows]
        keep: npt.NDArray[np.bool_] = self._state.array[rows] == LIVE
        if self._max_age is not None:
            keep &= timestamps >= self._now() - self._max_age
        if query.since is not None:
            keep &= timestamps >= query.since
        if query.until is not None:
            keep &= timestamps <= query.until
        if stamps is not None and self._window is not None:
            keep &= np.abs(timestamps - stamps) <= self._window
        return keep

    def search(self, text: str, query: Query) -> list[Match]:
        """Documents matching a text, best first; nothing is stored."""
        self._validate(query)
        fingerprints = self._fingerprint([text])
        pairs = self._match_indexes(fingerprints, query)
        return self._matches(pairs, (0, len(pairs.rows)), query.limit)  # one query: all

    async def get_async(self, document_id: str) -> StoredDocument:
        """``get``, on the event loop (as ``search_async``)."""
        return self.get(document_id)

    async def search_async(self, text: str, query: Query) -> list[Match]:
        """``search``, on the event loop: in-memory work, cheaper there than a thread hop."""
        return self.search(text, query)

    async def similar_async(self, document_id: str, query: Query) -> list[Match]:
        """``similar``, on the event loop (as ``search_async``)."""
        return self.similar(document_id, query)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded."""
        self._validate(query)
        row = self._visible_row(document_id)
        stored = self._stored_fingerprints(np.array([row]))
        pairs = self._match_indexes(stored, query, exclude=np.array([row]))
        return self._matches(pairs, pairs.span(0), query.limit)

    def _validate(self, query: Query) -> None:
        check_query(query, self.config.simhash.max_distance)

    def stats(self) -> dict[str, Any]:
        with self._write_lock:
            self._expire_locked(self._now_locked())
            oldest = self._order.oldest_alive(lambda rows: self._state.array[rows] == LIVE)
            return {
                "documents": len(self),
                "duplicates": self._duplicates,
                "merges": self.merges,
                "index_bytes": sum(index.memory_bytes() for index in self._indexes),
                "evicted": self.evicted,
                "expiring": self._expiring_count,
                "oldest_timestamp": None if oldest is None else iso_time_us(oldest[0]),
                "oldest_seconds": None if oldest is None else oldest[0] / MICROSECONDS,
            }

    def backlogs(self) -> dict[str, Backlog]:
        """Per index (exact, simhash, minhash, ngram): entries not merged yet, tombstones."""
        return {index.name: index.backlog() for index in self._indexes}

    # ------------------------------------------------------------------ matching

    def _fingerprint(self, texts: Sequence[str]) -> Fingerprints:
        fingerprints, kept = self._fingerprint_nonempty(texts)
        if len(kept) < len(texts):
            raise InvalidDocument("text is empty after normalisation")
        return fingerprints

    def _fingerprint_nonempty(
        self, texts: Sequence[str]
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        """Fingerprints of the texts not empty once normalised, and their positions."""
        fingerprints, kept = fingerprint_nonempty(
            list(texts), self._params, short_chars=self.config.short_chars
        )
        if not self._num_perm:  # MinHash off: keep no signatures
            fingerprints = Fingerprints(
                fingerprints.simhash,
                fingerprints.minhash[:, :0],
                fingerprints.exact,
                fingerprints.shorts,
            )
        return fingerprints, kept

    def _stored_fingerprints(self, rows: npt.NDArray[np.int64]) -> Fingerprints:
        if self._lsh is not None:
            signatures = self._lsh.signatures(rows)
        else:
            signatures = np.zeros((len(rows), 0), dtype=np.uint32)
        shorts = self._ngram.stored_texts(rows) if self._ngram is not None else None
        return Fingerprints(self._simhash.array[rows], signatures, self._exact.hashes(rows), shorts)

    def _match_indexes(
        self,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        stamps: npt.NDArray[np.int64] | None = None,
    ) -> Pairs:
        """Every visible indexed document matching each of a batch of documents, by any
        method: one batched search per index, filtered (retention, since / until, and
        with ``stamps``, the times of the batch's documents, the match window), then
        scored (see Pairs)."""
        found = [
            _part(index.search_many(fingerprints, query), index.bit) for index in self._indexes
        ]
        if not any(len(part[1]) for part in found):
            return Pairs.empty()  # the usual answer for a new text: nothing to score
        positions, rows, methods, exact_similarity = combined(found)
        keep = self._visible_mask(rows, query, None if stamps is None else stamps[positions])
        if exclude is not None:
            keep &= rows != exclude[positions]
        if not keep.all():
            positions, rows = positions[keep], rows[keep]
            methods, exact_similarity = methods[keep], exact_similarity[keep]
            if not len(rows):
                return Pairs.empty()
        if self._lsh is not None:
            signatures = self._lsh.signatures(rows)
        else:
            signatures = np.zeros((len(rows), 0), dtype=np.uint32)
        return score(
            self._num_perm,
            fingerprints,
            positions,
            rows,
            methods,
            self._simhash.array[rows],
            signatures,
            rows,  # rows are in insertion order: the lower, the older
            exact_similarity,
            query.min_similarity,
        )

    def _match_within(
        self, fingerprints: Fingerprints, stamps: npt.NDArray[np.int64], query: Query
    ) -> Pairs:
        """Pairs (later position, earlier position) of one batch matching by the rules the
        indexes apply (MinHash: a whole band in common, then verified), so that a batch
        answers as the same documents inserted one by one would: the earlier one within
        the query's since / until and the match window of the later one."""
        found = [_part(index.pairs_within(fingerprints), index.bit) for index in self._indexes]
        return pairs_within_batch(
            found,
            fingerprints,
            stamps,
            self._num_perm,
            self._window,
            query.since,
            query.until,
        )

    def _matches(
        self,
        pairs: Pairs,
        span: tuple[int, int],
        limit: int,
        ids: Callable[[int], str | None] | None = None,
    ) -> list[Match]:
        start, end = span[0], min(span[1], span[0] + limit)
        if start == end:
            return []  # most inserted documents: nothing to build
        id_of = ids or self._ids.__getitem__
        matches = []
        for row, similarity, distance, bits in zip(
            pairs.rows[start:end].tolist(),
            pairs.similarity[start:end].tolist(),
            pairs.distances[start:end].tolist(),
            pairs.methods[start:end].tolist(),
            strict=True,
        ):
            document_id = id_of(row)
            if document_id is not None:  # None: evicted since the search found it
                matches.append(Match(document_id, similarity, distance, METHODS_OF_BITS[bits]))
        return matches

    # ------------------------------------------------------------------ writes

    def insert(
        self,
        documents: Sequence[NewDocument],
        on_duplicate: OnDuplicate = "insert",
        *,
        replace: bool = False,
        since: int | None = None,
        until: int | None = None,
    ) -> list[InsertResult | Refused]:
        """Insert documents in order; each is matched against the collection and the
        earlier accepted documents of its batch (those with a timestamp from ``since``
        to ``until`` and within the match window of its own). With ``replace``, an
        existing id is replaced. A document is refused on its own (``Refused`` at its
        position, nothing of it stored) when its text is empty once normalised, its id
        came earlier in the batch, its id exists with other content, or the collection
        or the service is full (limits). An id that exists with the same normalised text
        and metadata is a retry: answered as a duplicate of itself, nothing changed. A
        document already expired by the retention when it arrives is answered (matched)
        but not stored (``inserted`` false). Blocks until the documents are committed."""
        check_range(since, until)
        insertion = self._prepare(documents, since, until)
        with self._write_lock:
            self._apply(insertion, on_duplicate, replace)
        if insertion.committed is not None:
            try:
                insertion.committed.result()
            except Exception:
                self._undo(insertion)
                raise
        return self._settled(insertion)

    async def insert_async(
        self,
        document: NewDocument,
        on_duplicate: OnDuplicate = "insert",
        *,
        since: int | None = None,
        until: int | None = None,
    ) -> InsertResult | Refused:
        """``insert`` of one document on the event loop, without a hop through the thread
        pool. The single inserts of one turn of the loop go in together as one batch
        (app/service/coalesce.py: the same answers, at a fraction of the CPU)."""
        check_range(since, until)
        return await self._single_inserts.insert(document, (on_duplicate, since, until))

    async def _insert_many_async(
        self, documents: list[NewDocument], options: Options
    ) -> list[InsertResult | Refused]:
        """``insert`` on the event loop: fingerprinting and matching take a few hundred
        microseconds of CPU, and the commit is awaited, not waited for. When a batch
        holds the write lock, the insert goes to a thread instead of stalling the loop
        behind it."""
        on_duplicate, since, until = options
        insertion = self._prepare(documents, since, until)
        if self._write_lock.acquire(blocking=False):
            try:
                self._apply(insertion, on_duplicate, replace=False)
            finally:
                self._write_lock.release()
        else:
            await asyncio.to_thread(self._apply_locked, insertion, on_duplicate)
        if insertion.committed is not None:
            failure = await insertion.committed.wait()
            if failure is not None:
                await asyncio.to_thread(self._undo, insertion)
                raise failure
        if insertion.retry_commit is not None:
            await insertion.retry_commit.wait()
        return self._settled(insertion)

    def _prepare(
        self,
        documents: Sequence[NewDocument],
        since: int | None = None,
        until: int | None = None,
    ) -> _Insertion:
        """What needs no lock: ids, times, fingerprints, refusals of empty texts and ids
        repeated within the batch."""
        ids = [document.id or new_document_id() for document in documents]
        fingerprints, kept = self._fingerprint_nonempty([document.text for document in documents])
        now = self._now()
        stamps = np.array(
            [now if d.timestamp is None else d.timestamp for d in documents], dtype=np.int64
        )
        insertion = _Insertion(documents, ids, fingerprints, kept, stamps, since, until)
        first_position: dict[str, int] = {}
        for position, document_id in enumerate(ids):
            if insertion.fingerprint_at[position] < 0:
                insertion.refused[position] = InvalidDocument("text is empty after normalisation")
            elif document_id in first_position:
                insertion.refused[position] = DuplicateId(document_id, first_position[document_id])
            else:
                first_position[document_id] = position
        return insertion

    def _apply_locked(self, insertion: _Insertion, on_duplicate: OnDuplicate) -> None:
        with self._write_lock:
            self._apply(insertion, on_duplicate, replace=False)

    def _apply(self, insertion: _Insertion, on_duplicate: OnDuplicate, replace: bool) -> None:
        """Under the write lock: retries and conflicts of stored ids, then matching,
        recording and publishing of the accepted documents."""
        documents, ids, refused = insertion.documents, insertion.ids, insertion.refused
        now = self._now_locked()
        self._expire_locked(now)
        if not replace:
            for position, document_id in enumerate(ids):
                row = self._row_of.get(document_id)
                if row is None or position in refused or self._state.array[row] != LIVE:
                    continue  # an expired document's id is free again
                exact = insertion.fingerprints.exact[insertion.fingerprint_at[position]]
                if self._same_document(row, exact, documents[position].metadata):
                    insertion.retried[position] = row
                    insertion.results[position] = self._retry_result(row)
                else:
                    refused[position] = DocumentExists(document_id)
        accepted = [
            position
            for position in range(len(documents))
            if position not in refused and position not in insertion.retried
        ]
        if accepted:
            query = Query(limit=INSERT_MATCH_LIMIT, since=insertion.since, until=insertion.until)
            everything = len(accepted) == len(insertion.fingerprints) == len(documents)
            inserted, insertion.committed, insertion.batch = self._insert_locked(
                insertion.fingerprints
                if everything  # the usual: no copy
                else insertion.fingerprints.select(insertion.fingerprint_at[accepted]),
                [documents[position] for position in accepted],
                [ids[position] for position in accepted],
                insertion.stamps[accepted],
                on_duplicate,
                replace,
                query,
                now,
            )
            for position, result in zip(accepted, inserted, strict=True):
                insertion.results[position] = result
        if insertion.retried:
            # A retry answers only once what it found is committed (its first attempt
            # may still wait for its commit): the newest queued commit covers it.
            insertion.retry_commit = self._last_commit

    def _undo(self, insertion: _Insertion) -> None:
        """Its commit failed: take its documents out again."""
        if insertion.batch is not None:
            with self._write_lock:
                self._remove(insertion.batch.rows.tolist())

    def _settled(self, insertion: _Insertion) -> list[InsertResult | Refused]:
        """The answers, once every commit they depend on is done (waits for the commit
        a retry depends on). A retry whose first attempt failed to commit is refused on
        its own: the others of its batch are stored."""
        failure = None
        if insertion.retry_commit is not None:
            failure = insertion.retry_commit.exception()
        for position, row in insertion.retried.items():
            if failure is not None or self._row_of.get(insertion.ids[position]) != row:
                insertion.results[position] = None
                insertion.refused[position] = StorageUnavailable(
                    f"document {insertion.ids[position]!r}: its first attempt was not stored "
                    f"({failure or 'its commit failed'}); send it again"
                )
        # Merges are due after tens of thousands of entries: asking every index after
        # each single insert cost it ~20 us, after every MERGE_CHECK_DOCUMENTS is enough.
        self._unchecked_documents += len(insertion.documents)
        if self._unchecked_documents >= MERGE_CHECK_DOCUMENTS:
            self._unchecked_documents = 0
            if self.needs_merge():
                self._wake_merger()
        if self._expiring_count >= EVICTION_CHUNK:
            self._wake_evictor()
        for position, error in insertion.refused.items():
            given = insertion.documents[position].id
            insertion.results[position] = Refused(insertion.ids[position] if given else None, error)
        return [result for result in insertion.results if result is not None]

    def _same_document(
        self, row: int, exact: npt.NDArray[np.uint64], metadata: dict[str, Any] | None
    ) -> bool:
        """Whether a stored row holds this text (equal once normalised) and metadata."""
        stored = self._exact.hashes(np.array([row]))[0]
        return bool((stored == exact).all()) and self._metadata[row] == metadata

    def _retry_result(self, row: int) -> InsertResult:
        """The answer to a document sent again: a duplicate of itself, nothing changed."""
        document_id = self._ids[row] or ""
        bits = 0
        for index in self._indexes:
            if index.name != "ngram" or self._ngram_holds(row):
                bits |= index.bit
        methods = METHODS_OF_BITS[bits]
        return InsertResult(
            id=document_id,
            inserted=False,
            duplicate_of=document_id,
            cluster_id=self._ids[int(self._cluster.array[row])] or document_id,
            matches=[Match(document_id, 1.0, 0, methods)],
        )

    def _room(self, new_documents: int) -> tuple[int, bool]:
        """(granted, unlimited) for a batch that may add ``new_documents``: at most
        ``granted`` may be stored, or any number when ``unlimited`` (the retention
        evicts one for each past that point, so they add nothing). Reserved from the
        service's budget: release it once the batch is published."""
        visible = len(self)
        adds = new_documents
        if self._max_kept is not None:
            adds = max(0, min(new_documents, self._max_kept - visible))
        wanted = adds if self._limit is None else min(adds, max(0, self._limit - visible))
        granted = self._budget.reserve(wanted)
        return granted, granted >= adds

    def _refusal(self, added: int = 0) -> InsufficientStorage:
        """Why a document is refused for room, ``added`` documents of its batch in before
        it (not counted in len(self) until the batch is published)."""
        if self._limit is not None and len(self) + added >= self._limit:
            return InsufficientStorage(
                f"collection {self.name!r} holds its limit of {self._limit} documents "
                "(limits.max_documents): delete documents, raise the limit, or set a retention"
            )
        return InsufficientStorage(
            f"the service holds its limit of {self._budget.limit} documents over all "
            "collections (NEARDUP_MAX_DOCUMENTS): delete documents or collections"
        )

    def _insert_locked(
        self,
        fingerprints: Fingerprints,
        documents: Sequence[NewDocument],
        ids: list[str],
        stamps: npt.NDArray[np.int64],
        on_duplicate: OnDuplicate,
        replace: bool,
        query: Query,
        now: int,
    ) -> tuple[list[InsertResult | Refused], Commit | None, DocumentBatch]:
        """Match, record and publish documents that may be inserted (under the write
        lock): the answers, the commit to wait for (outside the lock) and the batch."""
        replaced: list[int] = []
        pending = _PendingBatch(self, fingerprints, self._next_row, now / MICROSECONDS)
        old_rows = np.array(
            [
                r if (r := self._row_of.get(i, -1)) >= 0 and self._is_visible(r, now) else -1
                for i in ids
            ],
            dtype=np.int64,
        )
        from_index = self._match_indexes(fingerprints, query, exclude=old_rows, stamps=stamps)
        if len(documents) > 1:
            within = self._match_within(fingerprints, stamps, query)
        else:
            within = Pairs.empty()
        # Already expired when it arrives: matched, answered, not stored. (A new row is
        # above every row of the mark, so its key is at or below it exactly when its
        # timestamp is below the mark's.)
        expired = stamps < self._expired_through[0]
        if self._max_age is not None:
            expired |= stamps < now - self._max_age
        granted, unlimited = self._room(int(np.count_nonzero((old_rows < 0) & ~expired)))
        added = 0
        # Position -> provisional row of the accepted documents, -1 for skipped ones.
        row_at = np.full(len(documents), -1, dtype=np.int64)
        index_spans = from_index.spans(len(documents))
        batch_spans = within.spans(len(documents))
        results: list[InsertResult | Refused] = []
        for position, document in enumerate(documents):
            span = index_spans[position]
            matches = self._matches(from_index, span, INSERT_MATCH_LIMIT)
            best_row = int(from_index.rows[span[0]]) if matches else -1
            if batch_spans[position][1] > batch_spans[position][0]:
                matches, best_row = self._with_batch_matches(
                    from_index, span, within, batch_spans[position], row_at, pending
                )
            old_row = int(old_rows[position])
            adds = (
                old_row < 0 and not expired[position] and not (matches and on_duplicate == "skip")
            )
            if adds and not unlimited and added >= granted:
                results.append(Refused(document.id, self._refusal(added)))
                continue
            cluster_row = self._cluster_of_row(best_row, pending) if matches else None
            skipped = (bool(matches) and on_duplicate == "skip") or bool(expired[position])
            if not skipped:
                if old_row >= 0:
                    replaced.append(old_row)
                else:
                    added += 1
                text = document.text if self.config.store_text else None
                row = pending.add(
                    position,
                    ids[position],
                    cluster_row,
                    document.metadata,
                    text,
                    int(stamps[position]),
                )
                row_at[position] = row
                cluster_row = row if cluster_row is None else cluster_row
            assert cluster_row is not None or skipped
            results.append(
                InsertResult(
                    id=ids[position],
                    inserted=not skipped,
                    duplicate_of=self._oldest_member(cluster_row, pending) if matches else None,
                    cluster_id=(
                        self._id_of(cluster_row, pending) if cluster_row is not None else None
                    )
                    or ids[position],
                    matches=matches,
                    replaced=old_row >= 0 and not skipped,
                )
            )
        batch = pending.batch()
        committed: Commit | None = None
        try:
            if replaced:
                # A replacement commits before anything changes in memory: undoing it
                # would mean bringing back the replaced document.
                self._store.delete_documents(self.name, replaced)
                self._store.add_documents(self.name, batch)
                self._remove(replaced)
                self._publish(batch)
                self._expire_locked(now)
                mark = self._mark_to_record()
                if mark is not None:
                    self._store.begin_evict(
                        self.name, Eviction([], [], mark, self._next_row)
                    ).result()
            elif len(batch):
                # Plain inserts are published at once and queued for the next group
                # commit, so that the next writer of this collection matches against
                # them without waiting for this fsync; the retention mark they moved
                # commits with them. The answer waits for the commit (after the lock); a
                # failed commit takes the documents out again.
                self._publish(batch)
                self._expire_locked(now)
                committed = self._store.begin_add_documents(
                    self.name, batch, self._mark_to_record()
                )
                self._last_commit = committed
        finally:
            self._budget.release(granted)
        return results, committed, batch

    def _with_batch_matches(
        self,
        from_index: Pairs,
        index_span: tuple[int, int],
        within: Pairs,
        batch_span: tuple[int, int],
        row_at: Rows,
        pending: _PendingBatch,
    ) -> tuple[list[Match], int]:
        """The matches of one document among indexed documents and the accepted earlier
        documents of its batch, best first, and the row of the best."""
        first, last = index_span
        start, end = batch_span
        rows = row_at[within.rows[start:end]]
        accepted = rows >= 0
        merged_rows = np.concatenate([from_index.rows[first:last], rows[accepted]])
        merged = Pairs(
            np.zeros(last - first + int(accepted.sum()), dtype=np.int64),
            merged_rows,
            np.concatenate([from_index.methods[first:last], within.methods[start:end][accepted]]),
            np.concatenate(
                [from_index.similarity[first:last], within.similarity[start:end][accepted]]
            ),
            np.concatenate(
                [from_index.distances[first:last], within.distances[start:end][accepted]]
            ),
            merged_rows,
        ).sorted()
        matches = self._matches(
            merged, (0, len(merged.rows)), INSERT_MATCH_LIMIT, lambda row: self._id_of(row, pending)
        )
        return matches, int(merged.rows[0]) if matches else -1

    def _cluster_of_row(self, row: int, pending: _PendingBatch) -> int:
        if row < pending.first_row:
            return int(self._cluster.array[row])
        return pending.clusters[row - pending.first_row]

    def _id_of(self, row: int, pending: _PendingBatch) -> str | None:
        if row < pending.first_row:
            return self._ids[row]
        return pending.ids[row - pending.first_row]

    def _oldest_member(self, cluster_row: int | None, pending: _PendingBatch) -> str | None:
        if cluster_row is None:
            return None
        if cluster_row >= pending.first_row or self._state.array[cluster_row] == LIVE:
            return self._id_of(cluster_row, pending)
        oldest = self._members.first_live(cluster_row, self._state.array)
        if oldest is None:
            joined = pending.members(cluster_row)
            oldest = joined[0] if joined else None
        return None if oldest is None else self._id_of(oldest, pending)

    def delete(self, document_id: str) -> None:
        with self._write_lock:
            now = self._now_locked()
            self._expire_locked(now)
            row = self._visible_row(document_id, now)
            self._store.delete_documents(self.name, [row])
            self._remove([row])

    # ------------------------------------------------------------------ retention

    def _expire_locked(self, now: int) -> None:
        """Hide what the retention expires now (under the write lock): documents older
        than max_age, then the oldest past max_documents. O(expired x log) each."""
        if self._max_age is not None:
            self._expired(*self._order.take_before(now - self._max_age))
        if self._max_kept is not None:
            while len(self) > self._max_kept:
                stamps, rows = self._order.take_oldest(len(self) - self._max_kept)
                if not len(rows):
                    break
                self._expired(stamps, rows)
        if self._order_gone > len(self._order) // 2 + 4096:
            self._order.compact(lambda rows: self._state.array[rows] != GONE)
            self._order_gone = 0

    def _expired(self, stamps: npt.NDArray[np.int64], rows: Rows) -> None:
        """Entries taken off the time order, oldest first: LIVE rows turn HIDDEN and wait
        for eviction; the mark moves to the last of them. Deleted rows (still in the order)
        do not move it: whether a document arriving later counts as expired must not
        depend on what was deleted."""
        if not len(rows):
            return
        state = self._state.array
        is_live = state[rows] == LIVE
        live = rows[is_live]
        self._order_gone -= len(rows) - len(live)
        if not len(live):
            return
        last = int(np.flatnonzero(is_live)[-1])
        self._expired_through = max(self._expired_through, (int(stamps[last]), int(rows[last])))
        state[live] = HIDDEN
        self._visible -= len(live)
        self._budget.remove(len(live))
        clusters = self._cluster.array[live]
        self._duplicates -= int(np.count_nonzero(clusters != live))
        self._expiring.append(live)
        self._expiring_count += len(live)

    def _mark_to_record(self) -> tuple[int, int] | None:
        """The retention mark, when it moved since it was last handed to the store."""
        if self._expired_through == self._persisted_mark:
            return None
        self._persisted_mark = self._expired_through
        return self._expired_through

    def expiring(self) -> int:
        """Expired documents not evicted yet."""
        return self._expiring_count

    def expire(self) -> None:
        """Hide what the retention expires by now (the evictor calls it every second, so
        that documents past max_age are evicted while nothing is written)."""
        if self._max_age is None:
            return
        with self._write_lock:
            self._expire_locked(self._now_locked())

    def evict(self, limit: int = EVICTION_CHUNK) -> int:
        """Evict up to ``limit`` expired documents (from memory now, from the store at its
        next commit), holding the write lock for this chunk only. Returns how many."""
        cpu = time.thread_time()
        with self._write_lock:
            held = time.perf_counter()
            self._expire_locked(self._now_locked())
            rows = self._take_expiring(limit)
            if not len(rows):
                return 0
            removed, named = self._remove(rows.tolist())
            self.evicted += len(rows)
            eviction = Eviction(removed, named, self._expired_through, self._next_row)
            self._persisted_mark = self._expired_through
            self._last_eviction = self._store.begin_evict(self.name, eviction)
            self.last_eviction_hold = time.perf_counter() - held
        self.eviction_seconds += time.thread_time() - cpu
        return len(rows)

    def _take_expiring(self, limit: int) -> Rows:
        taken: list[Rows] = []
        count = 0
        while self._expiring and count < limit:
            first = self._expiring[0]
            part, rest = first[: limit - count], first[limit - count :]
            taken.append(part)
            count += len(part)
            if len(rest):
                self._expiring[0] = rest
            else:
                self._expiring.pop(0)
        self._expiring_count -= count
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)

    def flush(self) -> None:
        """Wait until every eviction and insert queued so far is durable (tests)."""
        for future in (self._last_eviction, self._last_commit):
            if future is not None:
                future.exception()

    def reconfigure(self, config: CollectionConfig) -> None:
        """New time settings (match_window, retention, limits); the others must be equal.
        What the old retention expired stays expired: it is applied up to now first, and
        its mark recorded with the new settings."""
        if config.fixed() != self.config.fixed():
            raise ValueError("only match_window, retention and limits can change")
        with self._write_lock:
            now = self._now_locked()
            self._expire_locked(now)
            self._store.update_collection(self.name, config.to_dict(), self._mark_to_record())
            self.config = config
            self._use_settings(config)
            self._expire_locked(now)
        if self._expiring_count:
            self._wake_evictor()

    # ------------------------------------------------------------------ memory

    def _remove(self, rows: list[int]) -> tuple[list[int], list[int]]:
        """Take rows out of memory (deleted, replaced, evicted, or whose commit failed),
        giving back their per-row memory. Returns what the store may forget:
        (rows no longer needed at all, rows whose id still names a cluster).
        O(rows), in numpy but for the dictionaries (ids, cluster members)."""
        if not rows:
            return [], []
        array = sorted_unique(rows)
        state = self._state.array
        was = state[array]
        array, was = array[was != GONE], was[was != GONE]
        if not len(array):
            return [], []
        # Tombstones first: a row is GONE only once no index returns it (merge relies on it).
        for index in self._indexes:
            index.remove(array)
        clusters = self._cluster.array[array]
        joined = clusters != array
        live = int(np.count_nonzero(was == LIVE))
        self._visible -= live
        self._budget.remove(live)
        self._order_gone += live  # their entries are still in the time order
        self._duplicates -= int(np.count_nonzero((was == LIVE) & joined))
        state[array] = GONE
        row_of = self._row_of
        for row, document_id in zip(
            array.tolist(), self._ids.get_many(array.tolist()), strict=True
        ):
            if document_id is not None and row_of.get(document_id) == row:
                del row_of[document_id]
        orphans: list[int] = []  # clusters nobody is in now, named by a gone row
        for cluster in clusters[joined].tolist():
            if self._members.leave(cluster, state) and state[cluster] == GONE:
                orphans.append(cluster)
        roots = array[~joined]
        naming = np.array([row in self._members for row in roots.tolist()], dtype=np.bool_)
        named = roots[naming]  # their ids name clusters that live on
        released = sorted_unique(
            np.concatenate([array[joined], roots[~naming], np.array(orphans, dtype=np.int64)])
        )
        self._release(array, released)
        return released.tolist(), named.tolist()

    def _release(self, rows: Rows, ids: Rows) -> None:
        """Give back the per-row memory of GONE rows (ids: of those naming no cluster)."""
        self._ids.release(ids)
        self._metadata.release(rows)
        self._texts.release(rows)

        def gone(at: Rows) -> npt.NDArray[np.bool_]:
            dead: npt.NDArray[np.bool_] = self._state.array[at] == GONE
            return dead

        for column in (self._created, self._timestamp, self._cluster, self._simhash, self._state):
            column.release(rows, gone)
        for index in self._indexes:
            index.release(rows)

    def _ngram_holds(self, row: int) -> bool:
        return self._ngram is not None and self._ngram.stored_texts(np.array([row]))[0] is not None

    def _publish(self, batch: DocumentBatch) -> None:
        """Make committed documents visible: per-row records first, then the indexes."""
        if len(batch) == 0:
            return
        size = int(batch.rows[-1]) + 1
        first = self._next_row
        if int(batch.rows[0]) < first:
            raise AssertionError("rows are appended in ascending order, never reused")
        rows = batch.rows
        self._ids.assign(rows, batch.ids)
        self._metadata.assign(rows, batch.metadata)
        if batch.texts is not None:
            self._texts.assign(rows, batch.texts)
        for column in (self._created, self._timestamp, self._cluster, self._state):
            column.ensure(size)
        # Rows of documents deleted before a restart leave gaps: GONE (zero) from the start.
        self._state.array[rows] = LIVE
        self._next_row = size
        timestamps = batch.timestamp_column()
        self._created.array[rows] = batch.created_at
        self._timestamp.array[rows] = timestamps
        self._cluster.array[rows] = batch.clusters
        joined = batch.clusters != rows
        for root, row in zip(batch.clusters[joined].tolist(), rows[joined].tolist(), strict=True):
            self._members.add(root, row)
        self._visible += len(batch)
        self._duplicates += int(np.count_nonzero(joined))
        self._budget.add(len(batch))
        self._order.insert(timestamps, rows)
        # What scoring reads of a row found by any index is written before the row enters
        # any index: its SimHash here, its signature by the LSH index (which stores it
        # before its own tables take the row). A search running now sees none or all.
        self._simhash.ensure(size)
        self._simhash.array[rows] = batch.simhash
        for index in self._indexes:  # MinHash first: it holds the signatures
            index.insert(batch, rows)
        self._row_of.update(zip(batch.ids, rows.tolist(), strict=True))

    def restore(self, stored: StoredCollection) -> None:
        """Rebuild from the store (live documents, rows ascending), apply the retention
        (what was expired stays so), then merge the indexes."""
        with self._write_lock:
            self._publish(stored.documents)
            size = max(stored.next_row, self._next_row)
            for column in (self._created, self._timestamp, self._cluster, self._state):
                column.ensure(size)
            self._next_row = size  # the rows in between are GONE (zero)
            names = sorted(stored.names.items())
            self._ids.assign(
                np.array([row for row, _ in names], dtype=np.int64), [n for _, n in names]
            )
            if stored.expired_through is not None:
                mark = (int(stored.expired_through[0]), int(stored.expired_through[1]))
                self._expired_through = self._persisted_mark = mark
                self._expired(*self._order.take_through(*mark))
            self._expire_locked(self._now_locked())
            self._merge(force=True, below=self._low_row_locked())
        if self._expiring_count:
            self._wake_evictor()

    def merge(self, *, force: bool = False) -> bool:
        """Merge every index whose buffer, or count of tombstones, has grown enough (all
        of them with ``force``), off the write lock."""
        with self._write_lock:
            below = self._low_row_locked()
        return self._merge(force=force, below=below)

    def _merge(self, *, force: bool, below: int) -> bool:
        merged = False
        for index in self._indexes:
            if force or self._index_needs_merge(index):
                merged = index.merge(below) or merged
        if merged:
            self.merges += 1
        return merged

    def _low_row_locked(self) -> int:
        """The lowest row not GONE (under the write lock): every row below it was
        tombstoned in every index, so a merge starting now drops them all and the
        indexes' flags below it can go. O(rows it moves past), amortised O(1) a row."""
        state, end = self._state.array, min(self._next_row, len(self._state.array))
        low = self._low_row
        while low < end:
            held = np.flatnonzero(state[low : min(end, low + 65_536)])
            if len(held):
                low += int(held[0])
                break
            low = min(end, low + 65_536)
        self._low_row = low
        return low

    def _index_needs_merge(self, index: Any) -> bool:
        if index.needs_merge():
            return True
        tombstones: int = index.backlog().tombstones
        return tombstones >= max(TOMBSTONE_MERGE_MIN, len(self) // 8)

    def needs_merge(self) -> bool:
        return any(self._index_needs_merge(index) for index in self._indexes)

    def _check(self) -> None:
        """Assert the bookkeeping (tests): states, counts, ids, clusters, the time order."""
        with self._write_lock:
            state = self._state.array[: self._next_row]
            live = np.flatnonzero(state == LIVE)
            hidden = np.flatnonzero(state == HIDDEN)
            assert self._visible == len(live), f"visible {self._visible} != {len(live)}"
            assert self._expiring_count == len(hidden) == sum(map(len, self._expiring))
            held = {row: self._ids[row] for row in np.concatenate([live, hidden]).tolist()}
            assert all(document_id is not None for document_id in held.values())
            for document_id, row in self._row_of.items():
                assert state[row] != GONE and held[row] == document_id, (document_id, row)
            assert {row for row in held if self._row_of.get(held[row] or "") == row} <= set(
                self._row_of.values()
            )
            clusters = self._cluster.array[live]
            assert self._duplicates == int(np.count_nonzero(clusters != live))
            for row, cluster in zip(live.tolist(), clusters.tolist(), strict=True):
                if cluster != row:
                    assert row in self._members.rows(cluster).tolist(), (row, cluster)
                    assert self._ids[cluster] is not None, f"cluster {cluster} lost its name"
            for cluster in self._members.clusters():
                counted = [r for r in self._members.rows(cluster).tolist() if state[r] != GONE]
                count = self._members.count(cluster)
                assert count == len(counted) > 0, (cluster, count, counted)
            self._order._check()
            assert len(self._order) - self._order_gone == len(live)
            mark = self._expired_through
            for row in live.tolist():
                assert (int(self._timestamp.array[row]), row) > mark, (row, mark)


def _part(found: Found, bit: int) -> Part:
    """What one index found, as the rule's Part."""
    return found.positions, found.rows, bit, found.similarity


@dataclass(slots=True)
class _Insertion:
    """One insert call on its way through _prepare, _apply and _settled."""

    documents: Sequence[NewDocument]
    ids: list[str]
    fingerprints: Fingerprints  # of the documents not empty once normalised
    kept: npt.NDArray[np.int64]  # their positions
    stamps: npt.NDArray[np.int64]  # each document's time, microseconds
    since: int | None = None  # the matching of the batch: from since to until
    until: int | None = None
    refused: dict[int, NeardupError] = field(default_factory=dict)
    retried: dict[int, int] = field(default_factory=dict)  # position -> its stored row
    results: list[InsertResult | Refused | None] = field(default_factory=list)
    committed: Commit | None = None  # the group commit of the inserted documents
    batch: DocumentBatch | None = None
    retry_commit: Commit | None = None  # the newest commit when retries were found
    # Position -> row of ``fingerprints``, -1 for an empty text.
    fingerprint_at: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.documents)
        self.fingerprint_at = np.full(len(self.documents), -1, dtype=np.int64)
        self.fingerprint_at[self.kept] = np.arange(len(self.kept))


class _PendingBatch:
    """Documents of a batch accepted so far, not yet committed: matched by brute force
    (a batch is small), under provisional rows that continue the collection's."""

    def __init__(
        self, collection: Collection, fingerprints: Fingerprints, first_row: int, now: float
    ) -> None:
        self.collection = collection
        self.fingerprints = fingerprints
        self.first_row = first_row
        self.now = now  # the insert time, Unix seconds
        self.timestamps: list[int] = []
        self.ids: list[str] = []
        self.positions: list[int] = []
        self.clusters: list[int] = []
        self.metadata: list[dict[str, Any] | None] = []
        self.texts: list[str | None] = []
        self.created: list[float] = []

    def add(
        self,
        position: int,
        document_id: str,
        cluster: int | None,
        metadata: dict[str, Any] | None,
        text: str | None,
        timestamp: int,
    ) -> int:
        row = self.first_row + len(self.ids)
        self.timestamps.append(timestamp)
        self.ids.append(document_id)
        self.positions.append(position)
        self.clusters.append(row if cluster is None else cluster)
        self.metadata.append(metadata)
        self.texts.append(text)
        self.created.append(self.now)
        return row

    def members(self, cluster_row: int) -> list[int]:
        return [
            self.first_row + i
            for i, cluster in enumerate(self.clusters)
            if cluster == cluster_row and self.first_row + i != cluster_row
        ]

    def batch(self) -> DocumentBatch:
        positions = np.array(self.positions, dtype=np.int64)
        chosen = self.fingerprints.select(positions)
        return DocumentBatch(
            ids=self.ids,
            rows=np.arange(self.first_row, self.first_row + len(self.ids), dtype=np.int64),
            created_at=np.array(self.created, dtype=np.float64),
            clusters=np.array(self.clusters, dtype=np.int64),
            metadata=self.metadata,
            texts=self.texts if any(text is not None for text in self.texts) else None,
            simhash=chosen.simhash,
            minhash=chosen.minhash,
            exact=chosen.exact,
            shorts=chosen.shorts
            if chosen.shorts is not None and any(s is not None for s in chosen.shorts)
            else None,
            timestamps=np.array(self.timestamps, dtype=np.int64),
        )
