"""One embedded collection: documents over the core indexes, clusters, retention, merges.

Its parts each own their state (parts.py: the per-row records and clusters, the
retention, what a read sees and the clock, the indexes and matching, and what changes
several of them at once: publishing, removing); the writes (writes.py) are the insert
pipeline's backend over the same parts. This class holds the write lock, and the reads,
deletes, evictions, restores and merges.

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
durable record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.backends.embedded.parts import Parts
from app.backends.embedded.saving import (
    SegmentKeeper,
    Taken,
    restore_from_segment,
    saved_arrays,
)
from app.backends.embedded.states import GONE, HIDDEN, LIVE
from app.backends.embedded.writes import EVICTION_CHUNK, Writes
from app.collection_config import CollectionConfig
from app.core.row_array import gathered
from app.core.types import Backlog, Rows
from app.errors import UnknownDocument
from app.service.budget import DocumentBudget
from app.service.matching import check_query, matches_of
from app.service.passages import PassageQuery, with_passages
from app.service.times import MICROSECONDS, Clock, iso_time_us
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
from app.storage.base import Eviction, Store, StoredCollection
from app.storage.commit import Commit
from app.storage.segments import Segment, Written

__all__ = ["EVICTION_CHUNK", "GONE", "HIDDEN", "LIVE", "Collection"]

_NO_ROWS = np.zeros(0, dtype=np.int64)


class Collection:
    """Documents of one collection: their fingerprints, indexes and clusters."""

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
        self._wake_evictor = wake_evictor
        self._budget = budget or DocumentBudget()
        self._store = store
        self._write_lock = threading.Lock()
        self._parts = parts = Parts(name, config, store, self._budget, clock)
        self._rows, self._retention, self._matcher = parts.rows, parts.retention, parts.matcher
        self._visibility = parts.visibility
        self._writes = Writes(parts, self._write_lock, wake_merger, wake_evictor)
        self._last_eviction: Commit | None = None
        self._segment = SegmentKeeper(name, store.segments, config.fixed())
        self.evicted = 0
        self.eviction_seconds = 0.0  # CPU time of the evictions in memory
        self.last_eviction_hold = 0.0  # seconds the last eviction held the write lock

    # ------------------------------------------------------------------ the clock

    def __len__(self) -> int:
        """Documents visible now (expired ones, evicted or not, are not)."""
        return len(self._rows)

    @property
    def rows_taken(self) -> int:
        """Row numbers handed out so far (every insert and replacement takes one; none is
        given back): what moves while the collection is written. O(1), no lock."""
        return self._rows.next_row

    @property
    def config(self) -> CollectionConfig:
        return self._parts.config

    def now(self) -> int:
        return self._visibility.now()

    @property
    def merges(self) -> int:
        return self._matcher.merges

    # ------------------------------------------------------------------ reads

    def get(self, document_id: str, kept_text: bool = False) -> StoredDocument:
        """A visible document; its text with store_text, or with ``kept_text`` wherever
        the collection keeps it (passages keep it without giving it out)."""
        row = self._visible_row(document_id)
        stored = self._rows.stored(document_id, row, self.config.store_text or kept_text)
        if stored is None:
            raise UnknownDocument(self.name, document_id)
        return stored

    def _visible_row(self, document_id: str, now: int | None = None) -> int:
        row = self._rows.row_of.get(document_id)
        if row is None or not self._visibility.row(row, self.now() if now is None else now):
            raise UnknownDocument(self.name, document_id)
        return row

    def search(self, text: str, query: Query) -> list[Match]:
        """Documents matching a text, best first; nothing is stored. What it reads was
        shown before it started (Visibility.horizon)."""
        self._validate(query)
        horizon = self._visibility.horizon()
        fingerprints = self._matcher.fingerprint([text])
        pairs = self._matcher.match(fingerprints, query, horizon=horizon)
        matches = matches_of(pairs, (0, len(pairs)), query.limit, self._rows.ids.__getitem__)
        simhash = int(fingerprints.simhash[0])
        return self._with_passages(matches, text, simhash, query, horizon, near=pairs.rows)

    def _with_passages(
        self,
        matches: list[Match],
        text: str,
        simhash: int,
        query: Query,
        horizon: int,
        exclude: int = -1,
        near: Rows = _NO_ROWS,
    ) -> list[Match]:
        """A search's or similar's matches (their rows ``near``) with the passages the
        text shares: with a ``min_coverage``, only candidates that may reach it are
        verified, and the near-duplicates, whose matches the passages annotate."""
        passages = self._matcher.passages
        if passages is None:
            return matches
        host = query.host if exclude < 0 else int(passages.index.hosts(np.array([exclude]))[0])
        asked = PassageQuery.of(text, simhash, self.config.passages, exclude, host)
        near_pairs = (np.zeros(len(near), dtype=np.int64), near)
        [candidates] = passages.candidates_of([asked], query.min_coverage, near_pairs)
        return with_passages(
            matches, self._parts.passages_of(asked, query, None, candidates, horizon) or [], query
        )

    async def get_async(self, document_id: str, kept_text: bool = False) -> StoredDocument:
        """``get``, on the event loop (as ``search_async``)."""
        return self.get(document_id, kept_text)

    async def search_async(self, text: str, query: Query) -> list[Match]:
        """``search``, on the event loop: in-memory work, cheaper there than a thread hop."""
        return self.search(text, query)

    async def similar_async(self, document_id: str, query: Query) -> list[Match]:
        """``similar``, on the event loop (as ``search_async``)."""
        return self.similar(document_id, query)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded (what was shown before it
        started, as ``search``)."""
        self._validate(query)
        horizon = self._visibility.horizon()
        row = np.array([self._visible_row(document_id)])
        stored = self._matcher.stored(row, self._rows.simhash.array[row])
        pairs = self._matcher.match(stored, query, exclude=row, horizon=horizon)
        matches = matches_of(pairs, pairs.span(0), query.limit, self._rows.ids.__getitem__)
        text = self._rows.texts[int(row[0])]
        if text is None:
            return matches
        simhash = int(stored.simhash[0])
        return self._with_passages(matches, text, simhash, query, horizon, int(row[0]), pairs.rows)

    def _validate(self, query: Query) -> None:
        check_query(query, self.config.simhash.max_distance)

    def stats(self) -> dict[str, Any]:
        with self._write_lock:
            self._retention.expire(self._visibility.now_locked())
            oldest = self._retention.oldest()
            return {
                "documents": len(self),
                "duplicates": self._rows.duplicates,
                "merges": self.merges,
                "index_bytes": self._matcher.memory_bytes(),
                "evicted": self.evicted,
                "expiring": self._retention.expiring,
                "oldest_timestamp": None if oldest is None else iso_time_us(oldest[0]),
                "oldest_seconds": None if oldest is None else oldest[0] / MICROSECONDS,
            }

    def backlogs(self) -> dict[str, Backlog]:
        """Per index (exact, simhash, minhash, ngram): entries not merged yet, tombstones."""
        return self._matcher.backlogs()

    # ------------------------------------------------------------------ writes

    def insert(
        self, documents: Sequence[NewDocument], options: InsertOptions = PLAIN_INSERT
    ) -> list[InsertResult | Refused]:
        """Insert documents in order (Writes.insert): each is matched against the
        collection and the earlier accepted documents of its batch; blocks until they
        are committed."""
        return self._writes.insert(documents, options)

    async def insert_async(
        self, document: NewDocument, options: InsertOptions = PLAIN_INSERT
    ) -> InsertResult | Refused:
        """``insert`` of one document on the event loop (Writes.insert_async)."""
        return await self._writes.insert_async(document, options)

    def delete(self, document_id: str) -> None:
        with self._write_lock:
            now = self._visibility.now_locked()
            self._retention.expire(now)
            row = self._visible_row(document_id, now)
            self._parts.forget_durably([row])
            self._parts.remove([row])
            self._rows.texts.release(np.array([row]))

    # ------------------------------------------------------------------ retention

    def expiring(self) -> int:
        """Expired documents not evicted yet."""
        return self._retention.expiring

    def expire(self) -> None:
        """Hide what the retention expires by now (the evictor calls it every second, so
        that documents past max_age are evicted while nothing is written)."""
        if self._retention.max_age is None:
            return
        with self._write_lock:
            self._retention.expire(self._visibility.now_locked())

    def evict(self, limit: int = EVICTION_CHUNK) -> int:
        """Evict up to ``limit`` expired documents (from memory now, from the store at its
        next commit), holding the write lock for this chunk only. Returns how many."""
        cpu = time.thread_time()
        with self._write_lock:
            held = time.perf_counter()
            self._retention.expire(self._visibility.now_locked())
            rows = self._retention.take_expiring(limit)
            if not len(rows):
                return 0
            removed, named = self._parts.remove(rows.tolist())
            self.evicted += len(rows)
            mark = self._retention.expired_through
            eviction = Eviction(removed, named, mark, self._rows.next_row)
            self._retention.recorded()
            self._last_eviction = self._store.begin_evict(self.name, eviction)
            self.last_eviction_hold = time.perf_counter() - held
        self.eviction_seconds += time.thread_time() - cpu
        return len(rows)

    def flush(self) -> None:
        """Wait until every eviction and insert queued so far is durable (tests)."""
        for future in (self._last_eviction, self._writes.commits.last):
            if future is not None:
                future.exception()

    def reconfigure(self, config: CollectionConfig) -> None:
        """New time settings (match_window, retention, limits); the others must be equal.
        What the old retention expired stays expired: it is applied up to now first, and
        its mark recorded with the new settings."""
        if config.fixed() != self.config.fixed():
            raise ValueError("only match_window, retention and limits can change")
        with self._write_lock:
            now = self._visibility.now_locked()
            self._retention.expire(now)
            mark = self._retention.mark_to_record()
            self._store.update_collection(self.name, config.to_dict(), mark)
            self._parts.use_settings(config)
            self._retention.expire(now)
        if self._retention.expiring:
            self._wake_evictor()

    # ------------------------------------------------------------------ start, merges

    def restore(self, stored: StoredCollection, segment: Segment | None = None) -> None:
        """Rebuild from the store (live documents, rows ascending), the indexes of the
        rows a ``segment`` covers taken from it (app/backends/embedded/saving.py), apply
        the retention (what was expired stays so), then merge the indexes: all of them
        when everything was inserted, those that need it otherwise."""
        with self._write_lock:
            if segment is None:
                self._parts.publish(stored.documents)
            else:
                if stored.fingerprints_from != segment.rows_below:
                    raise ValueError("the documents were not read for this segment")
                live, later = restore_from_segment(self._matcher, self._rows, stored, segment)
                self._budget.add(len(live))
                self._retention.held(gathered(self._rows.timestamp.array, live), live)
                self._parts.publish(later)
                self._segment.adopted(segment)
            # Past every row the segment holds, stored or not (a commit that failed, or
            # never became durable, after it took them): a row number is never reused.
            at_least = 0 if segment is None else segment.rows_below
            self._rows.restored(stored, stored.names, at_least)
            if stored.expired_through is not None:
                mark = (int(stored.expired_through[0]), int(stored.expired_through[1]))
                self._retention.restore(mark)
            self._retention.expire(self._visibility.now_locked())
            below = self._rows.low_row()
            self._matcher.merge(force=segment is None, below=below, documents=len(self))
        self._rows.compact(self._write_lock)
        if self._retention.expiring:
            self._wake_evictor()

    def open_segment(self) -> Segment | None:
        """This collection's verified segment, if it has one (SegmentDamaged if it does
        not verify)."""
        return self._segment.open()

    def save_segment(self, *, everything: bool = False) -> Written | None:
        """Write the index segment when enough rows came since the last one (with
        ``everything``: any); None when none was written."""
        with self._write_lock:
            due = self._segment.due(self._rows.next_row, len(self), everything=everything)
        if not due:
            return None

        def take() -> Taken:
            with self._write_lock:
                commits = self._writes.commits.unsettled()
                if self._last_eviction is not None:
                    commits.append(self._last_eviction)
                mark = self._store.removal_mark()
                return saved_arrays(self._rows, self._matcher, mark, commits)

        return self._segment.write(
            take, lambda through: self._store.forget_removals(self.name, through)
        )

    def merge(self, *, force: bool = False) -> bool:
        """Merge every index whose buffer, or count of tombstones, has grown enough (all
        of them with ``force``), off the write lock."""
        with self._write_lock:
            below = self._rows.low_row()
        merged = self._matcher.merge(force=force, below=below, documents=len(self))
        self._rows.compact(self._write_lock)
        return merged

    def needs_merge(self) -> bool:
        return self._matcher.needs_merge(len(self))

    def _check(self) -> None:
        """Assert the bookkeeping (tests): states, counts, ids, clusters, the time order,
        every index's invariants."""
        with self._write_lock:
            self._matcher._check()
            live = self._rows._check()
            state = self._rows.state.array[: self._rows.next_row]
            hidden = int(np.count_nonzero(state == HIDDEN))
            self._retention._check(live, hidden)
            # Every row the indexes hold untombstoned is LIVE or HIDDEN (GONE ones removed).
            held = self._matcher.indexed()
            assert held == len(live) + hidden, f"indexes hold {held}, not {len(live) + hidden}"
