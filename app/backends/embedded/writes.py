"""The writes of an embedded collection: an insert call prepared off the lock (ids, times,
fingerprints, refusals within the batch), applied under the write lock (retries and
conflicts of stored ids, matching against the indexes and the batch's earlier documents,
room, the cluster each joins), queued for the store's group commit and published, then
answered once its commit is done. A commit that fails takes its documents out again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.backends.embedded.matcher import Matcher, matches_of
from app.backends.embedded.passages import CANDIDATES
from app.backends.embedded.pending import Insertion, PendingBatch
from app.backends.embedded.retention import Retention
from app.backends.embedded.rows import RowTable
from app.backends.embedded.states import LIVE
from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints
from app.core.passages import Candidates
from app.core.rule import Pairs
from app.core.types import Rows
from app.errors import InsufficientStorage, StorageUnavailable
from app.service import decide
from app.service.budget import DocumentBudget
from app.service.coalesce import SingleInserts
from app.service.passages import (
    CONTAINED,
    BatchPassages,
    Found,
    PassageQuery,
    annotated,
    relations,
)
from app.service.times import MICROSECONDS
from app.service.types import (
    INSERT_MATCH_LIMIT,
    PLAIN_INSERT,
    InsertOptions,
    InsertResult,
    Match,
    NewDocument,
    Query,
    Refused,
    new_document_id,
)
from app.storage.base import DocumentBatch, Eviction, Store
from app.storage.commit import Commit

# The commits not known durable are pruned of the settled ones past this many.
_INFLIGHT_PRUNE = 256
# Merges are due after tens of thousands of entries: asking every index after each single
# insert was a cost a single insert felt (docs/journal.md, "Issue 11"); after every
# MERGE_CHECK_DOCUMENTS is enough.
MERGE_CHECK_DOCUMENTS = 64
# Expired documents evicted per hold of the write lock (Collection.evict).
EVICTION_CHUNK = 1024


class WriteHost(Protocol):
    """What the writes ask of their collection."""

    @property
    def config(self) -> CollectionConfig: ...

    def now(self) -> int: ...

    def now_locked(self) -> int: ...

    def is_visible(self, row: int, now: int) -> bool: ...

    def expire_locked(self, now: int) -> None: ...

    def match(
        self,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        stamps: npt.NDArray[np.int64] | None = None,
    ) -> Pairs: ...

    def publish(self, batch: DocumentBatch) -> None: ...

    def remove(self, rows: list[int]) -> tuple[list[int], list[int]]: ...

    def forget_durably(self, rows: list[int]) -> None: ...

    def passages_of(
        self,
        asked: PassageQuery,
        query: Query,
        stamp: int | None = None,
        candidates: Candidates | None = None,
    ) -> list[Found] | None: ...


class Writes:
    """Inserts into one collection. ``lock`` is the collection's write lock."""

    def __init__(
        self,
        name: str,
        host: WriteHost,
        rows: RowTable,
        matcher: Matcher,
        retention: Retention,
        store: Store,
        budget: DocumentBudget,
        lock: threading.Lock,
        wake_merger: Callable[[], None],
        wake_evictor: Callable[[], None],
    ) -> None:
        self.name = name
        self._host = host
        self._rows = rows
        self._matcher = matcher
        self._retention = retention
        self._store = store
        self._budget = budget
        self._write_lock = lock
        self._wake_merger = wake_merger
        self._wake_evictor = wake_evictor
        # The newest group commit queued by an insert (commits complete in queue order).
        self.last_commit: Commit | None = None
        # Commits queued and not yet known durable, or failed and not undone yet: a
        # segment taken meanwhile holds rows the database may never have.
        self._inflight: list[Commit] = []
        self._unchecked_documents = 0  # inserted since the last needs_merge()
        self.single_inserts = SingleInserts(self._insert_many_async, serial=True)

    def insert(
        self, documents: Sequence[NewDocument], options: InsertOptions = PLAIN_INSERT
    ) -> list[InsertResult | Refused]:
        """Insert documents in order; each is matched against the collection and the
        earlier accepted documents of its batch (those with a timestamp from
        ``options.since`` to ``options.until`` and within the match window of its own).
        With ``options.replace``, an existing id is replaced. A document is refused on
        its own (``Refused`` at its position, nothing of it stored) when its text is
        empty once normalised, its id came earlier in the batch, its id exists with
        other content, or the collection or the service is full (limits). An id that
        exists with the same normalised text and metadata is a retry: answered as a
        duplicate of itself, nothing changed. A document already expired by the
        retention when it arrives is answered (matched) but not stored (``inserted``
        false). Blocks until the documents are committed."""
        insertion = self._prepare(documents, options)
        with self._write_lock:
            self._apply(insertion)
        if insertion.committed is not None:
            try:
                insertion.committed.result()
            except Exception:
                self._undo(insertion)
                raise
        return self._settled(insertion)

    async def insert_async(
        self, document: NewDocument, options: InsertOptions = PLAIN_INSERT
    ) -> InsertResult | Refused:
        """``insert`` of one document on the event loop, without a hop through the thread
        pool. The single inserts that arrive while a batch is in flight go in together
        as the next batch (app/service/coalesce.py, serial: the same answers, at a
        fraction of the CPU)."""
        return await self.single_inserts.insert(document, options)

    async def _insert_many_async(
        self, documents: list[NewDocument], options: InsertOptions
    ) -> list[InsertResult | Refused]:
        """``insert`` on the event loop: fingerprinting and matching take a few hundred
        microseconds of CPU, and the commit is awaited, not waited for. When a batch
        holds the write lock, the insert goes to a thread instead of stalling the loop
        behind it."""
        insertion = self._prepare(documents, options)
        if self._write_lock.acquire(blocking=False):
            try:
                self._apply(insertion)
            finally:
                self._write_lock.release()
        else:
            await asyncio.to_thread(self._apply_locked, insertion)
        if insertion.committed is not None:
            failure = await insertion.committed.wait()
            if failure is not None:
                await asyncio.to_thread(self._undo, insertion)
                raise failure
        if insertion.retry_commit is not None:
            await insertion.retry_commit.wait()
        return self._settled(insertion)

    def _prepare(self, documents: Sequence[NewDocument], options: InsertOptions) -> Insertion:
        """What needs no lock: ids, times, fingerprints, refusals of empty texts and ids
        repeated within the batch."""
        ids = [document.id or new_document_id() for document in documents]
        fingerprints, kept = self._matcher.fingerprint_nonempty(
            [document.text for document in documents]
        )
        now = self._host.now()
        stamps = np.array(
            [now if d.timestamp is None else d.timestamp for d in documents], dtype=np.int64
        )
        insertion = Insertion(documents, ids, fingerprints, kept, stamps, options)
        insertion.refused = decide.refused_within(ids, insertion.fingerprint_at)
        return insertion

    def _apply_locked(self, insertion: Insertion) -> None:
        with self._write_lock:
            self._apply(insertion)

    def _apply(self, insertion: Insertion) -> None:
        """Under the write lock: retries and conflicts of stored ids, then matching,
        recording and publishing of the accepted documents."""
        documents, ids, refused = insertion.documents, insertion.ids, insertion.refused
        now = self._host.now_locked()
        self._host.expire_locked(now)
        if not insertion.options.replace:
            for position, document_id in enumerate(ids):
                row = self._rows.row_of.get(document_id)
                if row is None or position in refused or self._rows.state.array[row] != LIVE:
                    continue  # an expired document's id is free again
                exact = insertion.fingerprints.exact[insertion.fingerprint_at[position]]
                conflict = decide.sent_again(
                    document_id,
                    self._matcher.same_text(row, exact),
                    self._rows.metadata[row] == documents[position].metadata,
                )
                if conflict is None:
                    insertion.retried[position] = row
                    insertion.results[position] = self._retry_result(row)
                else:
                    refused[position] = conflict
        accepted = [
            position
            for position in range(len(documents))
            if position not in refused and position not in insertion.retried
        ]
        if accepted:
            options = insertion.options
            query = Query(limit=INSERT_MATCH_LIMIT, since=options.since, until=options.until)
            everything = len(accepted) == len(insertion.fingerprints) == len(documents)
            inserted, insertion.committed, insertion.batch = self._insert_locked(
                insertion.fingerprints
                if everything  # the usual: no copy
                else insertion.fingerprints.select(insertion.fingerprint_at[accepted]),
                [documents[position] for position in accepted],
                [ids[position] for position in accepted],
                insertion.stamps[accepted],
                options,
                query,
                now,
            )
            for position, result in zip(accepted, inserted, strict=True):
                insertion.results[position] = result
        if insertion.retried:
            # A retry answers only once what it found is committed (its first attempt
            # may still wait for its commit): the newest queued commit covers it.
            insertion.retry_commit = self.last_commit

    def _undo(self, insertion: Insertion) -> None:
        """Its commit failed: take its documents out again."""
        if insertion.batch is not None:
            with self._write_lock:
                self._host.remove(insertion.batch.rows.tolist())
                if insertion.committed in self._inflight:
                    self._inflight.remove(insertion.committed)

    def unsettled(self) -> list[Commit]:
        """The commits queued that are not known durable yet, or that failed and whose
        documents are not out again (under the write lock). O(commits since the last
        call)."""
        self._inflight = [c for c in self._inflight if not c.done() or c.exception() is not None]
        return list(self._inflight)

    def _settled(self, insertion: Insertion) -> list[InsertResult | Refused]:
        """The answers, once every commit they depend on is done (waits for the commit
        a retry depends on). A retry whose first attempt failed to commit is refused on
        its own: the others of its batch are stored."""
        failure = None
        if insertion.retry_commit is not None:
            failure = insertion.retry_commit.exception()
        for position, row in insertion.retried.items():
            if failure is not None or self._rows.row_of.get(insertion.ids[position]) != row:
                insertion.results[position] = None
                insertion.refused[position] = StorageUnavailable(
                    f"document {insertion.ids[position]!r}: its first attempt was not stored "
                    f"({failure or 'its commit failed'}); send it again"
                )
        # Merges are due after tens of thousands of entries: asking every index after
        # each single insert is not needed, after every MERGE_CHECK_DOCUMENTS is enough.
        self._unchecked_documents += len(insertion.documents)
        if self._unchecked_documents >= MERGE_CHECK_DOCUMENTS:
            self._unchecked_documents = 0
            if self._matcher.needs_merge(len(self._rows)):
                self._wake_merger()
        if self._retention.expiring >= EVICTION_CHUNK:
            self._wake_evictor()
        for position, error in insertion.refused.items():
            given = insertion.documents[position].id
            insertion.results[position] = Refused(insertion.ids[position] if given else None, error)
        return [result for result in insertion.results if result is not None]

    def _retry_result(self, row: int) -> InsertResult:
        """The answer to a document sent again: a duplicate of itself, nothing changed."""
        document_id = self._rows.ids[row] or ""
        cluster_id = self._rows.ids[int(self._rows.cluster.array[row])] or document_id
        return decide.retry_answer(document_id, cluster_id, self._matcher.methods_holding(row))

    def _room(self, new_documents: int) -> tuple[int, bool]:
        """(granted, unlimited) for a batch that may add ``new_documents``: at most
        ``granted`` may be stored, or any number when ``unlimited`` (the retention
        evicts one for each past that point, so they add nothing). Reserved from the
        service's budget: release it once the batch is published."""
        adds, wanted = decide.wanted_room(new_documents, len(self._rows), self._host.config)
        granted = self._budget.reserve(wanted)
        return granted, granted >= adds

    def _refusal(self, added: int = 0) -> InsufficientStorage:
        """Why a document is refused for room, ``added`` documents of its batch in before
        it (not counted in len(self._rows) until the batch is published)."""
        limit = self._host.config.limits.max_documents
        if limit is not None and len(self._rows) + added >= limit:
            return decide.collection_full(self.name, limit)
        return decide.service_full(self._budget.limit)

    def _insert_locked(
        self,
        fingerprints: Fingerprints,
        documents: Sequence[NewDocument],
        ids: list[str],
        stamps: npt.NDArray[np.int64],
        options: InsertOptions,
        query: Query,
        now: int,
    ) -> tuple[list[InsertResult | Refused], Commit | None, DocumentBatch]:
        """Match, record and publish documents that may be inserted (under the write
        lock): the answers, the commit to wait for (outside the lock) and the batch."""
        replaced: list[int] = []
        pending = PendingBatch(fingerprints, self._rows, now / MICROSECONDS)
        old_rows = np.array(
            [
                r
                if (r := self._rows.row_of.get(i, -1)) >= 0 and self._host.is_visible(r, now)
                else -1
                for i in ids
            ],
            dtype=np.int64,
        )
        from_index = self._host.match(fingerprints, query, exclude=old_rows, stamps=stamps)
        if len(documents) > 1:
            within = self._matcher.match_within(
                fingerprints, stamps, self._host.config.match_window_us, query
            )
        else:
            within = Pairs.empty()
        # Already expired when it arrives: matched, answered, not stored.
        expired = self._retention.expired_on_arrival(stamps, now)
        granted, unlimited = self._room(int(np.count_nonzero((old_rows < 0) & ~expired)))
        passages = self._matcher.passages  # None: the collection has passages off
        batch_passages: BatchPassages | None = None
        stored_candidates: list[Candidates] = []
        if passages is not None:
            asked_all = PassageQuery.batch(
                [d.text for d in documents],
                fingerprints.simhash.tolist(),
                old_rows.tolist(),
                passages.config,
                [d.host_key() for d in documents],
            )
            window = self._host.config.match_window_us
            batch_passages = BatchPassages(passages.config, CANDIDATES, asked_all, query, window)
            # Only what can be a containment (CONTAINED) or annotates a match is verified.
            stored_candidates = passages.read_ahead(
                asked_all,
                passages.candidates_of(
                    asked_all, CONTAINED, (from_index.positions, from_index.rows)
                ),
            )

        admission = decide.Admission(options.on_duplicate, granted, unlimited)
        # Position -> provisional row of the accepted documents, -1 for skipped ones.
        row_at = np.full(len(documents), -1, dtype=np.int64)
        index_spans = from_index.spans(len(documents))
        batch_spans = within.spans(len(documents))
        results: list[InsertResult | Refused] = []
        for position, document in enumerate(documents):
            span = index_spans[position]
            matches = matches_of(from_index, span, INSERT_MATCH_LIMIT, self._rows.ids.__getitem__)
            best_row = int(from_index.rows[span[0]]) if matches else -1
            if batch_spans[position][1] > batch_spans[position][0]:
                matches, best_row = self._with_batch_matches(
                    from_index, span, within, batch_spans[position], row_at, pending
                )
            old_row = int(old_rows[position])
            fate = admission.decide(bool(matches), old_row >= 0, bool(expired[position]))
            if fate is decide.Fate.REFUSED:
                results.append(Refused(document.id, self._refusal(admission.added)))
                continue
            cluster_row = pending.cluster_of(best_row) if matches else None
            skipped = fate is decide.Fate.SKIPPED
            if not skipped:
                if old_row >= 0:
                    replaced.append(old_row)
                text = document.text if self._host.config.keeps_text else None
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
            found: list[Found] | None = None
            if passages is not None and batch_passages is not None:
                stamp, simhash = int(stamps[position]), int(fingerprints.simhash[position])
                near_ids = {m.id for m in matches}
                asked = batch_passages.queries[position]
                from_store: list[Found] = []
                if len(stored_candidates[position]):
                    candidates = stored_candidates[position]
                    from_store = self._host.passages_of(asked, query, stamp, candidates) or []
                found = batch_passages.find(position, simhash, stamp, near_ids, from_store)
                if not skipped:
                    batch_passages.stored(position, ids[position], simhash, stamp)
                    passages.prepare(int(row_at[position]), asked)
            contains, contained_in = (None, None) if found is None else relations(found, matches)
            if found:
                matches = annotated(matches, found)
            results.append(
                InsertResult(
                    id=ids[position],
                    inserted=not skipped,
                    duplicate_of=pending.oldest_member(cluster_row) if matches else None,
                    cluster_id=(pending.id_of(cluster_row) if cluster_row is not None else None)
                    or ids[position],
                    matches=matches,
                    replaced=old_row >= 0 and not skipped,
                    contains=contains,
                    contained_in=contained_in,
                )
            )
        batch = pending.batch()
        committed: Commit | None = None
        try:
            if replaced:
                # A replacement commits before anything changes in memory: undoing it
                # would mean bringing back the replaced document.
                self._host.forget_durably(replaced)
                self._store.add_documents(self.name, batch)
                self._host.remove(replaced)
                self._rows.texts.release(np.array(replaced, dtype=np.int64))
                self._host.publish(batch)
                self._host.expire_locked(now)
                mark = self._retention.mark_to_record()
                if mark is not None:
                    self._store.begin_evict(
                        self.name, Eviction([], [], mark, self._rows.next_row)
                    ).result()
            elif len(batch):
                # Plain inserts are published at once and queued for the next group
                # commit, so that the next writer of this collection matches against
                # them without waiting for this fsync; the retention mark they moved
                # commits with them. The answer waits for the commit (after the lock); a
                # failed commit takes the documents out again.
                # Kept texts are read from the store once durable; until then from here.
                kept = batch.texts is not None
                if kept:
                    self._rows.texts.hold(batch.rows, batch.text_column())
                try:
                    self._host.publish(batch)
                    self._host.expire_locked(now)
                    committed = self._store.begin_add_documents(
                        self.name, batch, self._retention.mark_to_record()
                    )
                finally:
                    if kept:
                        self._rows.texts.until(committed)
                self.last_commit = committed
                if len(self._inflight) >= _INFLIGHT_PRUNE:  # without segments, none asks
                    self.unsettled()
                self._inflight.append(committed)
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
        pending: PendingBatch,
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
        matches = matches_of(merged, (0, len(merged.rows)), INSERT_MATCH_LIMIT, pending.id_of)
        return matches, int(merged.rows[0]) if matches else -1
