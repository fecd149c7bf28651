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
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints, fingerprint_nonempty
from app.core.row_array import RowArray
from app.core.types import Backlog, Rows
from app.errors import (
    DocumentExists,
    DuplicateId,
    InvalidDocument,
    InvalidParameter,
    NeardupError,
    StorageUnavailable,
    UnknownDocument,
)
from app.service.indexes import ExactMatcher, Found, MinHashMatcher, NgramMatcher, build_indexes
from app.service.matching import METHODS_OF_BITS, Pairs
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
)
from app.storage.base import DocumentBatch, Store, StoredCollection


class Collection:
    """Documents of one collection: their fingerprints, indexes and clusters."""

    def __init__(
        self,
        name: str,
        config: CollectionConfig,
        store: Store,
        wake_merger: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self._wake_merger = wake_merger
        self.config = config
        self._store = store
        self._params = config.fingerprint_params
        self._num_perm = config.minhash.num_perm if config.minhash.enabled else 0
        # Every index through one interface (app/service/indexes.py); two are also kept
        # by kind for what only they hold: the exact hashes and the MinHash signatures.
        self._indexes = build_indexes(config)
        self._exact = next(i for i in self._indexes if isinstance(i, ExactMatcher)).index
        self._lsh = next((i.index for i in self._indexes if isinstance(i, MinHashMatcher)), None)
        self._ngram = next((i for i in self._indexes if isinstance(i, NgramMatcher)), None)
        self._write_lock = threading.Lock()
        # The newest group commit queued by an insert (commits complete in queue order).
        self._last_commit: Future[None] | None = None
        # Per-row records, appended before a row enters any index (readers rely on it).
        self._ids: list[str] = []
        self._metadata: list[dict[str, Any] | None] = []
        self._texts: list[str | None] = []
        # Numbers as numpy columns: 8 bytes a row where a list of Python objects costs 36.
        self._created = RowArray(np.float64)  # row -> unix time of the insert
        self._cluster = RowArray(np.int64)  # row -> row of the document naming its cluster
        self._simhash = RowArray(np.uint64)
        self._row_of: dict[str, int] = {}
        # Cluster row -> its other live rows, oldest first. The row naming a cluster is not
        # listed: most documents are alone in their cluster and cost nothing here.
        self._members: dict[int, list[int]] = {}
        self.merges = 0

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        return len(self._row_of)

    def get(self, document_id: str) -> StoredDocument:
        row = self._row(document_id)
        return StoredDocument(
            id=document_id,
            metadata=self._metadata[row],
            created_at=iso_time(float(self._created.array[row])),
            cluster_id=self._ids[int(self._cluster.array[row])],
            simhash=f"{int(self._simhash.array[row]):016x}",
            text=self._texts[row],
        )

    def _row(self, document_id: str) -> int:
        row = self._row_of.get(document_id)
        if row is None:
            raise UnknownDocument(self.name, document_id)
        return row

    def search(self, text: str, query: Query, *, html: bool = False) -> list[Match]:
        """Documents matching a text, best first; nothing is stored."""
        self._validate(query)
        fingerprints = self._fingerprint([text], html)
        pairs = self._match_indexes(fingerprints, query)
        return self._matches(pairs, pairs.span(0), query.limit)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded."""
        self._validate(query)
        row = self._row(document_id)
        stored = self._stored_fingerprints(np.array([row]))
        pairs = self._match_indexes(stored, query, exclude=np.array([row]))
        return self._matches(pairs, pairs.span(0), query.limit)

    def _validate(self, query: Query) -> None:
        k = self.config.simhash.max_distance
        if query.max_distance is not None and not 0 <= query.max_distance <= k:
            raise InvalidParameter(
                f"max_distance must be between 0 and the collection's max_distance {k}, "
                f"not {query.max_distance}"
            )
        if query.min_similarity is not None and not 0.0 <= query.min_similarity <= 1.0:
            raise InvalidParameter(f"min_similarity must be 0 to 1, not {query.min_similarity}")
        if query.limit < 1:
            raise InvalidParameter(f"limit must be at least 1, not {query.limit}")

    def stats(self) -> dict[str, Any]:
        return {
            "documents": len(self),
            "duplicates": sum(len(members) for members in self._members.values()),
            "merges": self.merges,
            "index_bytes": sum(index.memory_bytes() for index in self._indexes),
        }

    def backlogs(self) -> dict[str, Backlog]:
        """Per index (exact, simhash, minhash, ngram): entries not merged yet, tombstones."""
        return {index.name: index.backlog() for index in self._indexes}

    # ------------------------------------------------------------------ matching

    def _fingerprint(self, texts: Sequence[str], html: bool) -> Fingerprints:
        fingerprints, kept = self._fingerprint_nonempty(texts, html)
        if len(kept) < len(texts):
            raise InvalidDocument("text is empty after normalisation")
        return fingerprints

    def _fingerprint_nonempty(
        self, texts: Sequence[str], html: bool
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        """Fingerprints of the texts not empty once normalised, and their positions."""
        fingerprints, kept = fingerprint_nonempty(
            list(texts), self._params, html=html, short_chars=self.config.short_chars
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
        self, fingerprints: Fingerprints, query: Query, exclude: Rows | None = None
    ) -> Pairs:
        """Every indexed document matching each of a batch of documents, by any method:
        one batched search per index, then scored (see Pairs)."""
        found = [(index.search_many(fingerprints, query), index.bit) for index in self._indexes]
        if not any(len(part.rows) for part, _ in found):
            return Pairs.empty()  # the usual answer for a new text: nothing to score
        positions, rows, methods, exact_similarity = _combined(found, exclude)
        if self._lsh is not None:
            signatures = self._lsh.signatures(rows)
        else:
            signatures = np.zeros((len(rows), 0), dtype=np.uint32)
        return self._scored(
            fingerprints,
            positions,
            rows,
            methods,
            self._simhash.array[rows],
            signatures,
            exact_similarity,
            query,
        )

    def _match_within(self, fingerprints: Fingerprints) -> Pairs:
        """Pairs (later position, earlier position) of one batch matching by the rules the
        indexes apply (MinHash: a whole band in common, then verified), so that a batch
        answers as the same documents inserted one by one would."""
        found = [(index.pairs_within(fingerprints), index.bit) for index in self._indexes]
        later, earlier, methods, exact_similarity = _combined(found, None)
        return self._scored(
            fingerprints,
            later,
            earlier,
            methods,
            fingerprints.simhash[earlier],
            fingerprints.minhash[earlier],
            exact_similarity,
            Query(),
        )

    def _scored(
        self,
        fingerprints: Fingerprints,
        positions: Rows,
        rows: Rows,
        methods: npt.NDArray[np.uint8],
        simhashes: npt.NDArray[np.uint64],
        signatures: npt.NDArray[np.uint32],
        exact_similarity: npt.NDArray[np.float64],
        query: Query,
    ) -> Pairs:
        """Similarity is the MinHash estimate, or the exact q-gram Jaccard where the
        n-gram index found the pair and that is higher; with MinHash off, that Jaccard
        where there is one, else 1 - distance / 64. Ties go to the nearer SimHash, then
        the older document."""
        distances = np.bitwise_count(simhashes ^ fingerprints.simhash[positions]).astype(np.int64)
        if self._num_perm:
            agree = np.count_nonzero(signatures == fingerprints.minhash[positions], axis=1)
            similarity = agree / self._num_perm
        else:
            similarity = 1.0 - distances / 64.0
        if self._num_perm:
            # The n-gram Jaccard where that index found the pair (NaN elsewhere) when it
            # is the higher: a short text's few word shingles make the estimate coarse.
            similarity = np.fmax(similarity, exact_similarity)
        else:
            similarity = np.where(np.isnan(exact_similarity), similarity, exact_similarity)
        similarity = np.round(similarity, 6)
        if query.min_similarity is not None:
            keep = similarity >= query.min_similarity
            positions, rows, methods = positions[keep], rows[keep], methods[keep]
            similarity, distances = similarity[keep], distances[keep]
        order = np.lexsort((rows, distances, -similarity, positions))
        return Pairs(
            positions[order], rows[order], methods[order], similarity[order], distances[order]
        )

    def _matches(
        self,
        pairs: Pairs,
        span: tuple[int, int],
        limit: int,
        ids: Callable[[int], str] | None = None,
    ) -> list[Match]:
        start, end = span[0], min(span[1], span[0] + limit)
        if start == end:
            return []  # most inserted documents: nothing to build
        id_of = ids or self._ids.__getitem__
        return [
            Match(id_of(row), similarity, distance, METHODS_OF_BITS[bits])
            for row, similarity, distance, bits in zip(
                pairs.rows[start:end].tolist(),
                pairs.similarity[start:end].tolist(),
                pairs.distances[start:end].tolist(),
                pairs.methods[start:end].tolist(),
                strict=True,
            )
        ]

    # ------------------------------------------------------------------ writes

    def insert(
        self,
        documents: Sequence[NewDocument],
        on_duplicate: OnDuplicate = "insert",
        *,
        replace: bool = False,
        html: bool = False,
    ) -> list[InsertResult | Refused]:
        """Insert documents in order; each is matched against the collection and the
        earlier accepted documents of its batch. With ``replace``, an existing id is
        replaced. A document is refused on its own (``Refused`` at its position, nothing
        of it stored) when its text is empty once normalised, its id came earlier in the
        batch, or its id exists with other content. An id that exists with the same
        normalised text and metadata is a retry: answered as a duplicate of itself,
        nothing changed. Blocks until the documents are committed."""
        insertion = self._prepare(documents, html)
        with self._write_lock:
            self._apply(insertion, on_duplicate, replace)
        if insertion.committed is not None:
            try:
                insertion.committed.result()
            except Exception:
                self._undo(insertion)
                raise
        if insertion.retry_commit is not None:
            _retry_committed(insertion.retry_commit.exception())
        return self._settled(insertion)

    async def insert_async(
        self, document: NewDocument, on_duplicate: OnDuplicate = "insert", *, html: bool = False
    ) -> InsertResult | Refused:
        """``insert`` of one document on the event loop, without a hop through the thread
        pool: fingerprinting and matching take a few hundred microseconds of CPU, and the
        commit is awaited, not waited for. When a batch holds the write lock, the insert
        goes to a thread instead of stalling the loop behind it."""
        insertion = self._prepare([document], html)
        if self._write_lock.acquire(blocking=False):
            try:
                self._apply(insertion, on_duplicate, replace=False)
            finally:
                self._write_lock.release()
        else:
            await asyncio.to_thread(self._apply_locked, insertion, on_duplicate)
        if insertion.committed is not None:
            try:
                await asyncio.wrap_future(insertion.committed)
            except Exception:
                await asyncio.to_thread(self._undo, insertion)
                raise
        if insertion.retry_commit is not None:
            await asyncio.wait([asyncio.wrap_future(insertion.retry_commit)])
            _retry_committed(insertion.retry_commit.exception())
        return self._settled(insertion)[0]

    def _prepare(self, documents: Sequence[NewDocument], html: bool) -> _Insertion:
        """What needs no lock: ids, fingerprints, refusals of empty texts and ids repeated
        within the batch."""
        ids = [document.id or uuid.uuid4().hex for document in documents]
        fingerprints, kept = self._fingerprint_nonempty(
            [document.text for document in documents], html
        )
        insertion = _Insertion(documents, ids, fingerprints, kept)
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
        if not replace:
            for position, document_id in enumerate(ids):
                row = self._row_of.get(document_id)
                if row is None or position in refused:
                    continue
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
            inserted, insertion.committed, insertion.batch = self._insert_locked(
                insertion.fingerprints.select(insertion.fingerprint_at[accepted]),
                [documents[position] for position in accepted],
                [ids[position] for position in accepted],
                on_duplicate,
                replace,
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
        """The answers, once every commit they depend on is done."""
        for position, row in insertion.retried.items():
            if self._row_of.get(insertion.ids[position]) != row:
                raise StorageUnavailable(
                    f"document {insertion.ids[position]!r} was not stored after all; send it again"
                )
        if self.needs_merge():
            self._wake_merger()
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
        document_id = self._ids[row]
        bits = 0
        for index in self._indexes:
            if index.name != "ngram" or self._ngram_holds(row):
                bits |= index.bit
        methods = METHODS_OF_BITS[bits]
        return InsertResult(
            id=document_id,
            inserted=False,
            duplicate_of=document_id,
            cluster_id=self._ids[int(self._cluster.array[row])],
            matches=[Match(document_id, 1.0, 0, methods)],
        )

    def _insert_locked(
        self,
        fingerprints: Fingerprints,
        documents: Sequence[NewDocument],
        ids: list[str],
        on_duplicate: OnDuplicate,
        replace: bool,
    ) -> tuple[list[InsertResult], Future[None] | None, DocumentBatch]:
        """Match, record and publish documents that may be inserted (under the write
        lock): the answers, the commit to wait for (outside the lock) and the batch."""
        replaced: list[int] = []
        pending = _PendingBatch(self, fingerprints, first_row=len(self._ids))
        old_rows = np.array([self._row_of.get(i, -1) for i in ids], dtype=np.int64)
        query = Query(limit=INSERT_MATCH_LIMIT)
        from_index = self._match_indexes(fingerprints, query, exclude=old_rows)
        within = self._match_within(fingerprints) if len(documents) > 1 else Pairs.empty()
        # Position -> provisional row of the accepted documents, -1 for skipped ones.
        row_at = np.full(len(documents), -1, dtype=np.int64)
        index_spans = from_index.spans(len(documents))
        batch_spans = within.spans(len(documents))
        results = []
        for position, document in enumerate(documents):
            span = index_spans[position]
            matches = self._matches(from_index, span, INSERT_MATCH_LIMIT)
            best_row = int(from_index.rows[span[0]]) if matches else -1
            if batch_spans[position][1] > batch_spans[position][0]:
                matches, best_row = self._with_batch_matches(
                    from_index, span, within, batch_spans[position], row_at, pending
                )
            cluster_row = self._cluster_of_row(best_row, pending) if matches else None
            skipped = bool(matches) and on_duplicate == "skip"
            old_row = int(old_rows[position])
            if not skipped:
                if old_row >= 0:
                    replaced.append(old_row)
                text = document.text if self.config.store_text else None
                row = pending.add(position, ids[position], cluster_row, document.metadata, text)
                row_at[position] = row
                cluster_row = row if cluster_row is None else cluster_row
            assert cluster_row is not None or skipped
            results.append(
                InsertResult(
                    id=ids[position],
                    inserted=not skipped,
                    duplicate_of=self._oldest_member(cluster_row, pending) if matches else None,
                    cluster_id=self._id_of(cluster_row, pending)
                    if cluster_row is not None
                    else ids[position],
                    matches=matches,
                    replaced=old_row >= 0 and not skipped,
                )
            )
        batch = pending.batch()
        committed: Future[None] | None = None
        if replaced:
            # A replacement commits before anything changes in memory: undoing it
            # would mean bringing back the replaced document.
            self._store.delete_documents(self.name, replaced)
            self._store.add_documents(self.name, batch)
            self._remove(replaced)
        elif len(batch):
            # Plain inserts are queued for the next group commit and published at
            # once, so that the next writer of this collection matches against them
            # without waiting for this fsync. The answer waits for the commit (after
            # the lock); a failed commit takes the documents out again.
            committed = self._store.begin_add_documents(self.name, batch)
            self._last_commit = committed
        self._publish(batch)
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
        merged = Pairs(
            np.zeros(last - first + int(accepted.sum()), dtype=np.int64),
            np.concatenate([from_index.rows[first:last], rows[accepted]]),
            np.concatenate([from_index.methods[first:last], within.methods[start:end][accepted]]),
            np.concatenate(
                [from_index.similarity[first:last], within.similarity[start:end][accepted]]
            ),
            np.concatenate(
                [from_index.distances[first:last], within.distances[start:end][accepted]]
            ),
        ).sorted()
        matches = self._matches(
            merged, (0, len(merged.rows)), INSERT_MATCH_LIMIT, lambda row: self._id_of(row, pending)
        )
        return matches, int(merged.rows[0]) if matches else -1

    def _cluster_of_row(self, row: int, pending: _PendingBatch) -> int:
        if row < pending.first_row:
            return int(self._cluster.array[row])
        return pending.clusters[row - pending.first_row]

    def _id_of(self, row: int, pending: _PendingBatch) -> str:
        return self._ids[row] if row < len(self._ids) else pending.ids[row - pending.first_row]

    def _oldest_member(self, cluster_row: int | None, pending: _PendingBatch) -> str | None:
        if cluster_row is None:
            return None
        root_is_live = (
            cluster_row >= len(self._ids) or self._row_of.get(self._ids[cluster_row]) == cluster_row
        )
        if root_is_live:
            return self._id_of(cluster_row, pending)
        members = self._members.get(cluster_row, []) + pending.members(cluster_row)
        return self._id_of(members[0], pending) if members else None

    def delete(self, document_id: str) -> None:
        with self._write_lock:
            row = self._row(document_id)
            self._store.delete_documents(self.name, [row])
            self._remove([row])

    def _remove(self, rows: list[int]) -> None:
        if not rows:
            return
        array = np.array(rows, dtype=np.int64)
        for index in self._indexes:
            index.remove(array)
        for row in rows:
            del self._row_of[self._ids[row]]
            cluster = int(self._cluster.array[row])
            if cluster != row:
                self._members[cluster].remove(row)

    def _ngram_holds(self, row: int) -> bool:
        return self._ngram is not None and self._ngram.stored_texts(np.array([row]))[0] is not None

    def _publish(self, batch: DocumentBatch) -> None:
        """Make committed documents visible: per-row records first, then the indexes."""
        if len(batch) == 0:
            return
        size = int(batch.rows[-1]) + 1
        first = len(self._ids)
        if int(batch.rows[0]) < first:
            raise AssertionError("rows are appended in ascending order, never reused")
        # Columns, not a loop per row: a restart publishes millions of rows at once. Rows
        # of documents deleted before a restart leave gaps that stay empty.
        offsets = batch.rows - first
        ids: list[Any] = [""] * (size - first)
        metadata: list[Any] = [None] * (size - first)
        texts: list[Any] = [None] * (size - first)
        if len(batch) == size - first:
            ids, metadata, texts = list(batch.ids), list(batch.metadata), batch.text_column()
        else:
            id_column, metadata_column = np.array(ids, dtype=object), np.array(metadata)
            id_column[offsets] = batch.ids
            metadata_column[offsets] = batch.metadata
            text_column = np.array(texts, dtype=object)
            text_column[offsets] = batch.text_column()
            ids, metadata = id_column.tolist(), metadata_column.tolist()
            texts = text_column.tolist()
        self._ids += ids
        self._metadata += metadata
        self._texts += texts
        for column in (self._created, self._cluster):
            column.ensure(size)
        self._created.array[batch.rows] = batch.created_at
        self._cluster.array[batch.rows] = batch.clusters
        joined = batch.clusters != batch.rows
        for root, row in zip(
            batch.clusters[joined].tolist(), batch.rows[joined].tolist(), strict=True
        ):
            self._members.setdefault(root, []).append(row)
        # What scoring reads of a row found by any index is written before the row enters
        # any index: its SimHash here, its signature by the LSH index (which stores it
        # before its own tables take the row). A search running now sees none or all.
        self._simhash.ensure(size)
        self._simhash.array[batch.rows] = batch.simhash
        for index in self._indexes:  # MinHash first: it holds the signatures
            index.insert(batch, batch.rows)
        self._row_of.update(zip(batch.ids, batch.rows.tolist(), strict=True))

    def restore(self, stored: StoredCollection) -> None:
        """Rebuild from the store (live documents, rows ascending), then merge the indexes."""
        with self._write_lock:
            self._publish(stored.documents)
            gap = stored.next_row - len(self._ids)
            self._ids += [""] * gap
            self._metadata += [None] * gap
            self._texts += [None] * gap
            self._created.ensure(stored.next_row)
            self._cluster.ensure(stored.next_row)
            for row, name in stored.names.items():
                self._ids[row] = name
            self.merge(force=True)

    def merge(self, *, force: bool = False) -> bool:
        """Merge every index whose buffer has grown enough (all of them with ``force``)."""
        merged = False
        for index in self._indexes:
            if force or index.needs_merge():
                merged = index.merge() or merged
        if merged:
            self.merges += 1
        return merged

    def needs_merge(self) -> bool:
        return any(index.needs_merge() for index in self._indexes)


def _combined(
    found: list[tuple[Found, int]], exclude: Rows | None
) -> tuple[Rows, Rows, npt.NDArray[np.uint8], npt.NDArray[np.float64]]:
    """(positions, rows, method bits, exact similarity or NaN): one entry per (position,
    row) found by any index, with the bits of every index that found it."""
    positions = np.concatenate([part.positions for part, _ in found]).astype(np.int64)
    rows = np.concatenate([part.rows for part, _ in found]).astype(np.int64)
    bits = np.concatenate([np.full(len(part.rows), bit, np.uint8) for part, bit in found])
    known = np.concatenate(
        [
            np.full(len(part.rows), np.nan) if part.similarity is None else part.similarity
            for part, _ in found
        ]
    )
    if exclude is not None:
        keep = rows != exclude[positions]
        positions, rows, bits, known = positions[keep], rows[keep], bits[keep], known[keep]
    unique, inverse = np.unique((positions << 32) | rows, return_inverse=True)
    methods = np.zeros(len(unique), dtype=np.uint8)
    np.bitwise_or.at(methods, inverse, bits)
    exact_similarity = np.full(len(unique), np.nan)
    np.fmax.at(exact_similarity, inverse, known)  # fmax keeps a number over NaN
    return unique >> 32, unique & 0xFFFFFFFF, methods, exact_similarity


def _retry_committed(error: BaseException | None) -> None:
    """A retry found a document whose commit then failed: it is not stored after all."""
    if error is not None:
        raise StorageUnavailable(
            f"the document's first attempt was not stored ({error}); send it again"
        )


@dataclass(slots=True)
class _Insertion:
    """One insert call on its way through _prepare, _apply and _settled."""

    documents: Sequence[NewDocument]
    ids: list[str]
    fingerprints: Fingerprints  # of the documents not empty once normalised
    kept: npt.NDArray[np.int64]  # their positions
    refused: dict[int, NeardupError] = field(default_factory=dict)
    retried: dict[int, int] = field(default_factory=dict)  # position -> its stored row
    results: list[InsertResult | Refused | None] = field(default_factory=list)
    committed: Future[None] | None = None  # the group commit of the inserted documents
    batch: DocumentBatch | None = None
    retry_commit: Future[None] | None = None  # the newest commit when retries were found
    # Position -> row of ``fingerprints``, -1 for an empty text.
    fingerprint_at: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.documents)
        self.fingerprint_at = np.full(len(self.documents), -1, dtype=np.int64)
        self.fingerprint_at[self.kept] = np.arange(len(self.kept))


class _PendingBatch:
    """Documents of a batch accepted so far, not yet committed: matched by brute force
    (a batch is small), under provisional rows that continue the collection's."""

    def __init__(self, collection: Collection, fingerprints: Fingerprints, first_row: int) -> None:
        self.collection = collection
        self.fingerprints = fingerprints
        self.first_row = first_row
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
    ) -> int:
        row = self.first_row + len(self.ids)
        self.ids.append(document_id)
        self.positions.append(position)
        self.clusters.append(row if cluster is None else cluster)
        self.metadata.append(metadata)
        self.texts.append(text)
        self.created.append(time.time())
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
        )
