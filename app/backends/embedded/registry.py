"""The Registry of a service's collections, and the background threads that keep them
fast (the merger) and within their retention (the evictor)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.backends.embedded.collection import EVICTION_CHUNK, Collection
from app.backends.embedded.saving import covered_by
from app.collection_config import CollectionConfig, NgramConfig, PassagesConfig, ShingleConfig
from app.core.saved import SavedStateError
from app.core.sorted_table import MIN_DIRECTORY_ENTRIES, TAIL_CAPACITY, SortedTable
from app.errors import TooManyCollections, UnknownCollection
from app.kernel_tables import ready_char_classes
from app.memory import IdleTrim, PeriodicTrim
from app.service.budget import DocumentBudget
from app.service.protocols import CollectionFigures, ServiceFigures
from app.service.times import Clock
from app.service.types import (
    DEFAULT_COLLECTION,
    BackgroundObserver,
    NewDocument,
    Query,
    Unobserved,
)
from app.storage.base import Covered, Store
from app.storage.memory import MemoryStore
from app.storage.segments import Segment, SegmentDamaged

log = logging.getLogger("neardup")

# The merger wakes when a writer asks, and at least this often to catch up after bursts.
MERGE_POLL_SECONDS = 1.0
# The evictor wakes when a writer expired documents, and this often to catch a max_age
# passing while nothing is written.
EVICT_POLL_SECONDS = 1.0
# The evictor's pause between chunks: the GIL goes to whichever thread waits for it (a
# search) rather than back to the evictor at once.
EVICTION_PAUSE_SECONDS = 0.0005
# Give freed memory back to the system after this many evicted documents.
EVICTIONS_PER_TRIM = 50_000


# Text that shares passages, so that a start loads the verification kernels too: each
# warm-up document is this passage and words of its own.
_WARM_PASSAGE = " ".join(f"passage{i % 37}w{i}" for i in range(120))


def warm_up(short_texts: bool = True) -> None:
    """Run every compiled kernel once (numba loads or compiles them on first use), the
    tables they use read where they were kept (and kept where they were not): inserts
    alone and in batches of documents sharing a passage, searches, a merge and a large
    run's directory, so that the first requests after /readyz load nothing. Without
    ``short_texts``, no n-gram index (``neardup warm-up`` leaves it to its helper)."""
    ready_char_classes()
    for unit in ("char", "word"):
        config = CollectionConfig(
            shingle=ShingleConfig(unit=unit),
            passages=PassagesConfig(enabled=unit == "word"),
            ngram=NgramConfig(enabled=short_texts),
        )
        store = MemoryStore()
        store.create_collection("warm-up", config.to_dict())
        collection = Collection("warm-up", config, store)
        collection.insert([NewDocument("warm up the kernels", "a")])
        collection.insert([NewDocument("warm up the kernels, 石油输出国组织部长", "b")])
        collection.insert([NewDocument(f"{_WARM_PASSAGE} one {unit}", "c")])
        collection.insert([NewDocument(f"{_WARM_PASSAGE} one {unit}", "copy")])  # identical
        collection.insert(
            [NewDocument(f"own{k} words {_WARM_PASSAGE} tail{k}", f"d{k}") for k in range(4)]
        )
        site = "https://warm-up.example/"  # pages of one site: its chrome counted
        collection.insert(
            [NewDocument(f"{_WARM_PASSAGE} p{k}", f"p{k}", {"url": f"{site}{k}"}) for k in range(3)]
        )
        collection.search("warm up the kernels", Query())
        collection.search(f"{_WARM_PASSAGE} query", Query())
        collection.merge(force=True)
        collection.search(f"{_WARM_PASSAGE} query", Query())
    large_run_directory()


def large_run_directory() -> None:
    """A table past MIN_DIRECTORY_ENTRIES, which small collections never reach: a run's
    directory built, then moved by a merge, and looked up through."""
    random = np.random.default_rng(0)
    table = SortedTable(lanes=1)
    first, second = MIN_DIRECTORY_ENTRIES, TAIL_CAPACITY + 1
    keys = random.integers(0, 2**63, (first + second, 1), dtype=np.uint64)
    table.insert(keys[:first], np.arange(first))  # a buffer with a directory
    table.insert(keys[first:], np.arange(first, first + second))  # the directory moved
    table.lookup_equal_many(0, keys[:100, 0])


class _Background:
    """A function run in a thread; ``join`` waits for it and raises what it raised."""

    def __init__(self, function: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                function()
            except BaseException as error:  # handed to join
                self._error = error

        self._thread = threading.Thread(target=run, name="warm-up", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


class Registry:
    """Every collection of a service, and the background merger that keeps them fast."""

    def __init__(
        self,
        store: Store,
        max_collections: int = 1000,
        *,
        clock: Clock = time.time,
        max_documents: int | None = None,
    ) -> None:
        self._store = store
        self._max_collections = max_collections
        self._clock = clock
        self.budget = DocumentBudget(max_documents)
        self._collections: dict[str, Collection] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._wake_evictions = threading.Event()
        self._stopping = threading.Event()
        self._trim = PeriodicTrim()
        self._idle_trim = IdleTrim()
        self._merger: threading.Thread | None = None
        self._evictor: threading.Thread | None = None
        self._observer: BackgroundObserver = Unobserved()

    def _new(self, name: str, config: CollectionConfig) -> Collection:
        return Collection(
            name,
            config,
            self._store,
            self.wake_merger,
            clock=self._clock,
            budget=self.budget,
            wake_evictor=self.wake_evictor,
        )

    def open(self) -> None:
        """Rebuild every stored collection (its indexes from its segment where one
        verifies, app/backends/embedded/saving.py), create ``default`` if it is missing,
        and compile the kernels, so that the first request after /readyz is not slow."""
        # The kernels load beside the reading: the checksums of the segment's files run
        # without the GIL, the warm-up with it, so the two overlap (docs/benchmarks.md,
        # "Start-up and restarts").
        warming = _Background(warm_up)
        # Made as the store reads each collection's settings: its segment, opened
        # then, says which fingerprints the store need not read.
        made: dict[str, tuple[Collection, Segment | None]] = {}

        def saved_rows(name: str, config: dict[str, Any]) -> Covered | None:
            collection = self._new(name, CollectionConfig.from_dict(config))
            covered = None
            try:
                segment = collection.open_segment()
                covered = None if segment is None else covered_by(segment)
            except (SegmentDamaged, SavedStateError) as error:
                self._drop_segment(name, error)
                segment = None
            made[name] = (collection, segment)
            return covered

        # No text is read here: the passage index reads its texts a chunk at a time.
        for stored in self._store.load(saved_rows, texts=False):
            collection, segment = made.pop(stored.name)
            try:
                collection.restore(stored, segment)
            except Exception as error:
                if segment is None:
                    raise
                # Whatever does not fit in a segment that verified (SavedStateError, or
                # arrays of other shapes): rebuilt, never a start that fails each time.
                self._drop_segment(stored.name, error)
                del collection, segment
                collection = self._new(stored.name, CollectionConfig.from_dict(stored.config))
                collection.restore(self._store.load_collection(stored.name, texts=False))
            self._collections[stored.name] = collection
        if self._store.segments is not None:
            self._store.segments.end_read_ahead()
            self._store.segments.remove_others(set(self._collections))
        if DEFAULT_COLLECTION not in self._collections:
            self.create(DEFAULT_COLLECTION, CollectionConfig())
        warming.join()

    def _drop_segment(self, name: str, error: Exception) -> None:
        """A segment that cannot be used: said, removed, and the collection rebuilt."""
        log.warning(
            "the index segment of collection %r cannot be used (%s): rebuilding its "
            "indexes from the database",
            name,
            error,
        )
        if self._store.segments is not None:
            self._store.segments.remove(name)

    def save_segments(self, *, everything: bool = False) -> int:
        """Write the segment of every collection that is due one (with ``everything``:
        every collection with rows since its last). Returns how many were written."""
        written = 0
        for collection in list(self._collections.values()):
            try:
                if collection.save_segment(everything=everything) is not None:
                    written += 1
            except OSError as error:
                # A full or read-only disk: the last segment stays, the record is whole,
                # and the next start replays more. Said, and tried again later.
                log.warning("could not write the index segment of %r: %s", collection.name, error)
        return written

    def create(self, name: str, config: CollectionConfig) -> tuple[Collection, bool]:
        """(collection, created). An existing collection with the same fixed settings takes
        the new time settings (match_window, retention, limits); other fixed settings
        conflict."""
        with self._lock:
            existing = self._collections.get(name)
            if existing is not None:
                self._change(existing, config)
                return existing, False
            if len(self._collections) >= self._max_collections:
                raise TooManyCollections(
                    f"at most {self._max_collections} collections; delete one first"
                )
            self._store.create_collection(name, config.to_dict())
            collection = self._new(name, config)
            self._collections[name] = collection
            return collection, True

    def update(self, name: str, config: CollectionConfig) -> Collection:
        """New settings for an existing collection (PATCH): its fixed settings must be
        those it has; the time settings (match_window, retention, limits) may differ."""
        with self._lock:
            collection = self.get(name)
            self._change(collection, config)
            return collection

    def _change(self, collection: Collection, config: CollectionConfig) -> None:
        collection.config.check_change(collection.name, config)
        if config != collection.config:
            collection.reconfigure(config)

    def ping(self) -> None:
        """The embedded store is this process's own: nothing to reach."""

    def get(self, name: str) -> Collection:
        collection = self._collections.get(name)
        if collection is None:
            raise UnknownCollection(name)
        return collection

    def list(self) -> list[Collection]:
        return [self._collections[name] for name in sorted(self._collections)]

    def drop(self, name: str) -> None:
        with self._lock:
            collection = self.get(name)
            self._store.drop_collection(name)
            del self._collections[name]
            self.budget.remove(len(collection))

    def wake_merger(self) -> None:
        self._wake.set()

    def wake_evictor(self) -> None:
        self._wake_evictions.set()

    def figures(self) -> ServiceFigures:
        """Each collection's stats, index backlogs and eviction CPU; the store's eviction
        CPU where it measures it (SQLite's writer). O(collections)."""
        collections = [
            CollectionFigures(
                collection.name,
                collection.stats(),
                collection.backlogs(),
                collection.eviction_seconds,
            )
            for collection in list(self._collections.values())
        ]
        measured: float | None = getattr(self._store, "eviction_seconds", None)
        return ServiceFigures(collections, store_eviction_cpu_seconds=measured)

    def start_background(self, observer: BackgroundObserver | None = None) -> None:
        """Start the background threads, the merger and the evictor, each reporting
        its work to ``observer``."""
        if observer is not None:
            self._observer = observer
        self._merger = threading.Thread(target=self._merge_loop, name="merger", daemon=True)
        self._merger.start()
        self._evictor = threading.Thread(target=self._evict_loop, name="evictor", daemon=True)
        self._evictor.start()

    def evict(self, *, everything: bool = True, pause: bool = False) -> int:
        """Evict the expired documents of every collection, a chunk at a time (the
        evictor's work; tests call it to evict at a moment of their choosing). Without
        ``everything``, only whole chunks: a chunk costs less per document than the few
        hundred one insert expires. With ``pause`` (the evictor), a short pause after
        each chunk lets a waiting thread take the GIL."""
        evicted = 0
        least = 1 if everything else EVICTION_CHUNK
        for collection in list(self._collections.values()):
            if everything:
                collection.expire()
            while not self._stopping.is_set() and collection.expiring() >= least:
                count = collection.evict()
                if not count:
                    break
                evicted += count
                self._observer.record_eviction(
                    collection.name, count, collection.last_eviction_hold
                )
                if pause:
                    time.sleep(EVICTION_PAUSE_SECONDS)
            if collection.needs_merge():
                self.wake_merger()
        return evicted

    def _evict_loop(self) -> None:
        """Whole chunks when a writer wakes it, everything at least once a second (what
        max_age expired meanwhile included)."""
        since_trim = 0
        last_sweep = time.monotonic()
        while not self._stopping.is_set():
            self._wake_evictions.wait(EVICT_POLL_SECONDS)
            self._wake_evictions.clear()
            sweep = time.monotonic() - last_sweep >= EVICT_POLL_SECONDS
            if sweep:
                last_sweep = time.monotonic()
            since_trim += self.evict(everything=sweep, pause=True)
            if since_trim >= EVICTIONS_PER_TRIM:
                self._trim()
                since_trim = 0

    def _merge_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(MERGE_POLL_SECONDS)
            self._wake.clear()
            for collection in list(self._collections.values()):
                if collection.needs_merge():
                    started = time.perf_counter()
                    if collection.merge():
                        self._observer.record_merge(collection.name, time.perf_counter() - started)
                        # The arrays a merge replaced are free now: give them back
                        # (now and then: see PeriodicTrim).
                        self._trim()
            self.save_segments()
            # And all a burst of writes freed, once it is over.
            self._idle_trim(sum(c.rows_taken for c in list(self._collections.values())))

    def close(self, *, save_segments: bool = True) -> None:
        """Stop the background threads, write the segments of collections with rows
        since their last (not with ``save_segments`` False: a start then replays them, as
        after a kill), and close the store."""
        self._stopping.set()
        self._wake.set()
        self._wake_evictions.set()
        for thread in (self._merger, self._evictor):
            if thread is not None:
                thread.join()
        # A start then replays nothing (a kill midway leaves the last segment, which
        # is as good, only older).
        if save_segments:
            self.save_segments(everything=True)
        self._store.close()
