"""The writes of an embedded collection: the insert pipeline (app/service/insert.py) over
its parts (parts.py). An insert call is prepared off the lock, applied under the write
lock (``EmbeddedInsert``: the pipeline's backend), queued for the store's group commit
and published, then answered once its commit is done. A commit that fails takes its
documents out again."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.embedded.parts import Parts
from app.backends.embedded.passages import CANDIDATES
from app.backends.embedded.states import LIVE
from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints
from app.core.passages import Hits
from app.core.rule import Pairs
from app.core.types import Rows
from app.errors import InsufficientStorage, StorageUnavailable
from app.service import decide, insert
from app.service.beside import beside
from app.service.coalesce import SingleInserts
from app.service.insert_backend import Call, Pending, SentAgain
from app.service.passages import CONTAINED, Found, PassageQuery
from app.service.times import MICROSECONDS
from app.service.types import PLAIN_INSERT, InsertOptions, InsertResult, NewDocument, Query, Refused
from app.storage.base import DocumentBatch, Eviction, Mark
from app.storage.commit import Commit

# The commits not known durable are pruned of the settled ones past this many.
_INFLIGHT_PRUNE = 256
# Merges are due after tens of thousands of entries: asking every index after each single
# insert was a cost a single insert felt (docs/journal.md, "Issue 11"); after every
# MERGE_CHECK_DOCUMENTS is enough.
MERGE_CHECK_DOCUMENTS = 64
# Expired documents evicted per hold of the write lock (Collection.evict).
EVICTION_CHUNK = 1024


class Commits:
    """The group commits one collection's inserts queue, in queue order (they complete
    in that order): the newest, what a retry's answer waits for, and those not known
    durable yet, or failed and not undone, which a segment taken meanwhile must not
    count on. Under the collection's write lock."""

    def __init__(self) -> None:
        self.last: Commit | None = None
        self._inflight: list[Commit] = []

    def queued(self, commit: Commit) -> None:
        """A group commit an insert queued."""
        self.last = commit
        if len(self._inflight) >= _INFLIGHT_PRUNE:  # without segments, none asks
            self.unsettled()
        self._inflight.append(commit)

    def undone(self, commit: Commit) -> None:
        """A failed commit whose documents are out again."""
        if commit in self._inflight:
            self._inflight.remove(commit)

    def unsettled(self) -> list[Commit]:
        """The commits queued that are not known durable yet, or that failed and whose
        documents are not out again. O(commits since the last call)."""
        self._inflight = [c for c in self._inflight if not c.done() or c.exception() is not None]
        return list(self._inflight)


class Writes:
    """Inserts into one collection. ``lock`` is the collection's write lock."""

    def __init__(
        self,
        parts: Parts,
        lock: threading.Lock,
        wake_merger: Callable[[], None],
        wake_evictor: Callable[[], None],
    ) -> None:
        self._parts = parts
        self._write_lock = lock
        self._wake_merger = wake_merger
        self._wake_evictor = wake_evictor
        self.commits = Commits()
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

    def _prepare(self, documents: Sequence[NewDocument], options: InsertOptions) -> EmbeddedInsert:
        """What needs no lock (insert.prepare)."""
        parts = self._parts
        call = insert.prepare(
            documents,
            options,
            parts.matcher.fingerprint_nonempty,
            parts.visibility.now,
            parts.config.passages,
        )
        return EmbeddedInsert(parts, self.commits, call)

    def _apply_locked(self, insertion: EmbeddedInsert) -> None:
        with self._write_lock:
            self._apply(insertion)

    def _apply(self, insertion: EmbeddedInsert) -> None:
        """Under the write lock: the pipeline (insert.apply). Where it raised, the room it
        reserved is given back; where that was after its batch was queued and published
        (insert.apply publishes what began writing), the batch stays if its commit
        succeeds, as after a crash, and leaves memory if not: memory never holds what the
        store does not."""
        try:
            insert.apply(insertion.call, insertion)
        except BaseException:
            insertion.release_room()
            if insertion.committed is not None and insertion.committed.exception() is not None:
                self._take_out(insertion)
            raise

    def _undo(self, insertion: EmbeddedInsert) -> None:
        """Its commit failed: take its documents out again."""
        with self._write_lock:
            self._take_out(insertion)

    def _take_out(self, insertion: EmbeddedInsert) -> None:
        """Under the write lock: the documents of a failed commit out of memory, and the
        commit out of those a segment waits for."""
        if insertion.batch is not None:
            self._parts.remove(insertion.batch.rows.tolist())
            if insertion.committed is not None:
                self.commits.undone(insertion.committed)

    def _settled(self, insertion: EmbeddedInsert) -> list[InsertResult | Refused]:
        """The answers, once every commit they depend on is done (waits for the commit
        a retry depends on). A retry whose first attempt failed to commit is refused on
        its own: the others of its batch are stored."""
        call, rows = insertion.call, self._parts.rows
        failure = None
        if insertion.retry_commit is not None:
            failure = insertion.retry_commit.exception()
        for position, row in call.retried.items():
            if failure is not None or rows.row_of.get(call.ids[position]) != row:
                call.results[position] = None
                call.refused[position] = StorageUnavailable(
                    f"document {call.ids[position]!r}: its first attempt was not stored "
                    f"({failure or 'its commit failed'}); send it again"
                )
        # Merges are due after tens of thousands of entries: asking every index after
        # each single insert is not needed, after every MERGE_CHECK_DOCUMENTS is enough.
        self._unchecked_documents += len(call.documents)
        if self._unchecked_documents >= MERGE_CHECK_DOCUMENTS:
            self._unchecked_documents = 0
            if self._parts.matcher.needs_merge(len(rows)):
                self._wake_merger()
        if self._parts.retention.expiring >= EVICTION_CHUNK:
            self._wake_evictor()
        return insert.answers(call)


class EmbeddedInsert:
    """One insert call on the embedded backend: the pipeline's backend
    (app/service/insert_backend.py) over the collection's parts, under its write lock.
    Handles are rows."""

    passage_candidates = CANDIDATES

    def __init__(self, parts: Parts, commits: Commits, call: Call) -> None:
        self._parts = parts
        self._rows = parts.rows
        self._commits = commits
        self.call = call
        self._now = 0
        self._granted = 0
        self._matched = Pairs.empty()  # the stored matches: passages verify them
        self._asked: list[PassageQuery] = []
        self._hits: Callable[[], Hits] | None = None  # the passage lookup, made beside
        self.committed: Commit | None = None  # the group commit of the inserted documents
        self.batch: DocumentBatch | None = None
        self.retry_commit: Commit | None = None  # the newest commit when retries were found

    @property
    def config(self) -> CollectionConfig:
        return self._parts.config

    def held(
        self, call: Call, candidates: list[int]
    ) -> tuple[dict[int, int], dict[int, SentAgain]]:
        """Live rows under the candidates' ids, the retention applied first. O(candidates)."""
        self._now = now = self._parts.visibility.now_locked()
        self._parts.retention.expire(now)
        replaced: dict[int, int] = {}
        again: dict[int, SentAgain] = {}
        rows, visibility = self._rows, self._parts.visibility
        for position in candidates:
            row = rows.row_of.get(call.ids[position])
            if row is None or rows.state.array[row] != LIVE:
                continue  # an expired document's id is free again
            if call.options.replace:
                if visibility.row(row, now):
                    replaced[position] = row
                continue
            same_text = self._parts.matcher.same_text(row, call.exact(position))
            same_metadata = rows.metadata[row] == call.documents[position].metadata
            again[position] = (row, same_text, same_metadata)
        return replaced, again

    def match(self, fingerprints: Fingerprints, query: Query, exclude: Rows, stamps: Rows) -> Pairs:
        self._matched = self._parts.matcher.match(fingerprints, query, exclude, stamps)
        return self._matched

    def match_within(self, fingerprints: Fingerprints, stamps: Rows, query: Query) -> Pairs:
        window = self.config.match_window_us
        return self._parts.matcher.match_within(fingerprints, stamps, window, query)

    def expired_on_arrival(self, stamps: Rows) -> npt.NDArray[np.bool_]:
        return self._parts.retention.expired_on_arrival(stamps, self._now)

    def room(self, new: int) -> tuple[int, bool]:
        """Reserved from the service's budget: released once the batch is published (or
        nothing of it is)."""
        adds, wanted = decide.wanted_room(new, len(self._rows), self.config)
        self._granted = self._parts.budget.reserve(wanted)
        return self._granted, self._granted >= adds

    def release_room(self) -> None:
        """Give back what ``room`` reserved, once: when the batch is published, or when
        the call failed before it."""
        granted, self._granted = self._granted, 0
        if granted:
            self._parts.budget.release(granted)

    def refusal(self, added: int) -> InsufficientStorage:
        """``added`` documents of the batch are not counted in len(rows) until published."""
        limit = self.config.limits.max_documents
        if limit is not None and len(self._rows) + added >= limit:
            return decide.collection_full(self._parts.name, limit)
        return decide.service_full(self._parts.budget.limit)

    def look_up_passages(self, keys: list[npt.NDArray[np.uint64]]) -> None:
        """The batch's passage lookup on another core while this thread matches
        (app/service/beside.py): the index changes only under the write lock held."""
        passages = self._parts.matcher.passages
        if passages is not None:
            self._hits = beside(passages.index.hits, keys, len(keys))

    def stored_passages(
        self, asked: Sequence[PassageQuery], query: Query, stamps: Rows
    ) -> list[list[Found]]:
        """Only what can be a containment (CONTAINED) or annotates a match is verified:
        the candidates of the batch looked up at once (``look_up_passages``' lookup),
        their texts read ahead."""
        passages = self._parts.matcher.passages
        self._asked = list(asked)
        if passages is None:
            return [[] for _ in asked]
        near = (self._matched.positions, self._matched.rows)
        hits = None if self._hits is None else self._hits()
        found = passages.candidates_of(asked, CONTAINED, near, hits)
        candidates = passages.read_ahead(asked, found)
        return [
            (self._parts.passages_of(one, query, int(stamps[i]), candidates[i]) or [])
            if len(candidates[i])
            else []
            for i, one in enumerate(asked)
        ]

    def first_handle(self) -> int:
        return self._rows.next_row

    def id_of(self, handle: int) -> str | None:
        return self._rows.ids[handle]

    def cluster_of(self, handle: int) -> int:
        return int(self._rows.cluster.array[handle])

    def cluster_name(self, cluster: int) -> str | None:
        return self._rows.ids[cluster]

    def oldest_member(self, position: int, cluster: int, pending: Pending) -> str | None:
        """The oldest LIVE document of the cluster (a pending one when it has none
        stored)."""
        rows = self._rows
        if cluster >= pending.first or rows.state.array[cluster] == LIVE:
            return pending.id_of(cluster)
        oldest = rows.members.first_live(cluster, rows.state.array)
        if oldest is None:
            joined = pending.members(cluster)
            oldest = joined[0] if joined else None
        return None if oldest is None else pending.id_of(oldest)

    def retry_answer(self, document_id: str, stored: Any) -> InsertResult:
        row = int(stored)
        stored_id = self._rows.ids[row] or ""
        cluster_id = self._rows.ids[int(self._rows.cluster.array[row])] or stored_id
        return decide.retry_answer(stored_id, cluster_id, self._parts.matcher.methods_holding(row))

    def begin_writing(self, call: Call, pending: Pending) -> bool:
        """Plain inserts where the retention is still (the default): the batch queued for
        the group commit now, so that the store writes while the passages are verified
        and the answers made (10 to 30 us a document with passages on; docs/journal.md,
        "Issue 42"). A replacement commits in ``publish``, before anything changes in
        memory; a moving retention's mark commits with its batch, after the publish
        moved it. O(documents)."""
        if not len(pending) or pending.replaced or not self._parts.retention.still():
            return False
        self.batch = batch = self._batch(call, pending)
        self.committed = self._queue(batch, None)
        return True

    def publish(self, call: Call, pending: Pending | None) -> None:
        """Replacements commit before anything changes in memory; plain inserts are
        published at once and queued for the next group commit (the answer waits for it
        after the lock), where ``begin_writing`` did not queue them already."""
        if pending is not None:
            try:
                if self.batch is None:
                    self.batch = self._batch(call, pending)
                passages = self._parts.matcher.passages
                if passages is not None:  # their fingerprints, made as they were prepared
                    for row, position, number in zip(
                        itertools.count(pending.first), pending.positions, pending.numbers
                    ):
                        asked = self._asked[number] if self._asked else self._query_of(position)
                        passages.prepare(row, asked)
                self._write(pending.replaced, self.batch)
            finally:
                self.release_room()
        if call.retried:
            # A retry answers only once what it found is committed (its first attempt
            # may still wait for its commit): the newest queued commit covers it.
            self.retry_commit = self._commits.last

    def _query_of(self, position: int) -> PassageQuery:
        """The passage query of a stored document whose answers failed before they were
        made (``stored_passages`` makes them): from what ``prepare`` made. O(1)."""
        document, keys = self.call.documents[position], self.call.passage_keys
        assert keys is not None  # made whenever passages are on
        return PassageQuery(document.text, keys[position], 0, -1, document.host_key())

    def _batch(self, call: Call, pending: Pending) -> DocumentBatch:
        """The stored documents as the store and the indexes take them. O(documents)."""
        positions = pending.positions
        chosen = call.fingerprints.select(call.fingerprint_at[positions])
        keeps_text = self.config.keeps_text
        texts = [call.documents[p].text if keeps_text else None for p in positions]
        return DocumentBatch(
            ids=pending.ids,
            rows=np.arange(pending.first, pending.first + len(pending), dtype=np.int64),
            created_at=np.full(len(pending), self._now / MICROSECONDS, dtype=np.float64),
            clusters=np.array(pending.clusters, dtype=np.int64),
            metadata=[call.documents[p].metadata for p in positions],
            texts=texts if keeps_text and positions else None,
            simhash=chosen.simhash,
            minhash=chosen.minhash,
            exact=chosen.exact,
            shorts=chosen.shorts
            if chosen.shorts is not None and any(s is not None for s in chosen.shorts)
            else None,
            timestamps=call.stamps[positions],
        )

    def _write(self, replaced: list[int], batch: DocumentBatch) -> None:
        parts, name, now = self._parts, self._parts.name, self._now
        if replaced:
            # A replacement commits before anything changes in memory: undoing it
            # would mean bringing back the replaced document.
            parts.forget_durably(replaced)
            parts.store.add_documents(name, batch)
            parts.remove(replaced)
            self._rows.texts.release(np.array(replaced, dtype=np.int64))
            parts.publish(batch)
            parts.retention.expire(now)
            mark = parts.retention.mark_to_record()
            if mark is not None:
                parts.store.begin_evict(name, Eviction([], [], mark, self._rows.next_row)).result()
        elif self.committed is not None:  # queued by begin_writing
            parts.publish(batch)
            parts.retention.expire(now)
        elif len(batch):
            # Published at once, so that the next writer of this collection matches
            # against them without waiting for this fsync; the retention mark they moved
            # commits with them.
            self.committed = self._queue(batch, parts.retention.mark_to_record, publish=True)

    def _queue(
        self,
        batch: DocumentBatch,
        mark: Callable[[], Mark | None] | None,
        publish: bool = False,
    ) -> Commit:
        """The batch queued for the group commit: its kept texts held (read from the store
        once durable, from here until then); with ``publish``, published in memory first
        and the retention expired, so that the ``mark`` it moved commits with it."""
        parts, name = self._parts, self._parts.name
        kept = batch.texts is not None
        if kept:
            self._rows.texts.hold(batch.rows, batch.text_column())
        committed = None
        try:
            if publish:
                parts.publish(batch)
                parts.retention.expire(self._now)
            committed = parts.store.begin_add_documents(
                name, batch, None if mark is None else mark()
            )
        finally:
            if kept:
                self._rows.texts.until(committed)
        assert committed is not None  # begin_add_documents raised otherwise
        self._commits.queued(committed)
        return committed
