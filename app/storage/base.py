"""The interface between the service and its durable record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.core.types import ExactHashes, MinHashes, SimHashes
from app.storage.commit import Commit
from app.storage.segments import SegmentStore

# The embedded service's database, in its data directory (its segments beside it).
DATABASE_FILE = "neardup.db"

# (timestamp, row): a retention expired every document at or below it.
Mark = tuple[int, int]


@dataclass(frozen=True, slots=True)
class DocumentBatch:
    """Documents as columns: everything needed to rebuild the indexes without re-hashing."""

    ids: Sequence[str]  # a restart's are PackedStrings (app/core/paged_list.py)
    rows: npt.NDArray[np.int64]
    created_at: npt.NDArray[np.float64]
    clusters: npt.NDArray[np.int64]  # row of the document that names the cluster
    metadata: list[dict[str, Any] | None]
    simhash: SimHashes
    minhash: MinHashes  # (m, K), or (m, 0) when MinHash is off
    exact: ExactHashes
    # The texts, for collections that keep them (None: this batch keeps none).
    texts: list[str | None] | None = None
    # The normalised text of each short document, what the n-gram index holds (None: no
    # short document in this batch, or no n-gram index).
    shorts: list[str | None] | None = None
    # Each document's time, int64 microseconds since the epoch (None: the insert times).
    timestamps: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def timestamp_column(self) -> npt.NDArray[np.int64]:
        """The documents' times in microseconds: given, else their insert times."""
        if self.timestamps is not None:
            return self.timestamps
        return np.round(np.asarray(self.created_at, dtype=np.float64) * 1e6).astype(np.int64)

    def text_column(self) -> list[str | None]:
        return list(self.texts) if self.texts is not None else [None] * len(self.ids)

    def short_column(self) -> list[str | None]:
        return list(self.shorts) if self.shorts is not None else [None] * len(self.ids)

    def select(self, positions: npt.NDArray[np.int64]) -> DocumentBatch:
        return DocumentBatch(
            ids=[self.ids[i] for i in positions.tolist()],
            rows=self.rows[positions],
            created_at=self.created_at[positions],
            clusters=self.clusters[positions],
            metadata=[self.metadata[i] for i in positions.tolist()],
            simhash=self.simhash[positions],
            minhash=self.minhash[positions],
            exact=self.exact[positions],
            texts=None if self.texts is None else [self.texts[i] for i in positions.tolist()],
            shorts=None if self.shorts is None else [self.shorts[i] for i in positions.tolist()],
            timestamps=None if self.timestamps is None else self.timestamps[positions],
        )

    def since(self, position: int) -> DocumentBatch:
        """The documents from ``position`` on, their columns views (no copy: a restart's
        documents after its segment are a tail of everything it read)."""
        return DocumentBatch(
            ids=self.ids[position:],
            rows=self.rows[position:],
            created_at=self.created_at[position:],
            clusters=self.clusters[position:],
            metadata=self.metadata[position:],
            simhash=self.simhash[position:],
            minhash=self.minhash[position:],
            exact=self.exact[position:],
            texts=None if self.texts is None else self.texts[position:],
            shorts=None if self.shorts is None else self.shorts[position:],
            timestamps=None if self.timestamps is None else self.timestamps[position:],
        )

    @staticmethod
    def concatenate(batches: list[DocumentBatch], num_perm: int) -> DocumentBatch:
        if not batches:
            return DocumentBatch(
                [],
                np.zeros(0, np.int64),
                np.zeros(0, np.float64),
                np.zeros(0, np.int64),
                [],
                np.zeros(0, np.uint64),
                np.zeros((0, num_perm), np.uint32),
                np.zeros((0, 2), np.uint64),
                timestamps=np.zeros(0, np.int64),
            )
        return DocumentBatch(
            ids=[i for batch in batches for i in batch.ids],
            rows=np.concatenate([batch.rows for batch in batches]),
            created_at=np.concatenate([batch.created_at for batch in batches]),
            clusters=np.concatenate([batch.clusters for batch in batches]),
            metadata=[m for batch in batches for m in batch.metadata],
            simhash=np.concatenate([batch.simhash for batch in batches]),
            minhash=np.concatenate([batch.minhash for batch in batches]),
            exact=np.concatenate([batch.exact for batch in batches]),
            texts=[text for batch in batches for text in batch.text_column()],
            shorts=[short for batch in batches for short in batch.short_column()],
            timestamps=np.concatenate([batch.timestamp_column() for batch in batches]),
        )


@dataclass(frozen=True, slots=True)
class StoredCollection:
    name: str
    config: dict[str, Any]
    documents: DocumentBatch  # live documents in row order
    # Ids of deleted documents that still name the cluster of a live one.
    names: dict[int, str] = field(default_factory=dict)
    # One past the highest row ever used: rows are never reused, deleted ones included.
    next_row: int = 0
    # Retention: every document with (timestamp, row) at or below this expired (None: none).
    expired_through: Mark | None = None
    # A segment holds the documents below this row (app/storage/segments.py): of those,
    # only the last SPOT_CHECK_ROWS live ones are in ``documents``, with the rows
    # removed since the segment (``removed``). Texts below are never read at a start:
    # a collection reads a kept text from the store when it verifies it (read_texts).
    fingerprints_from: int = 0
    removed: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))


# The records and fingerprints of this many live documents just below a segment's rows
# are read too: a start checks the segment's against them (a database restored from
# another copy).
SPOT_CHECK_ROWS = 512


@dataclass(frozen=True, slots=True)
class Covered:
    """What a collection's segment holds, which a start need not read."""

    rows_below: int  # every row below: records, fingerprints, whether it was live
    removed_through: int  # the last entry of the removal log it reflects
    texts: bool  # whether any document below rows_below has a text


# (collection name, its settings) -> what its segment holds (None: it has none).
SavedRows = Callable[[str, dict[str, Any]], Covered | None]


def no_saved_rows(name: str, config: dict[str, Any]) -> Covered | None:
    """No segment: everything is read."""
    return None


def not_among(
    values: npt.NDArray[np.int64], ascending: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """The distinct values not in ``ascending`` (sorted, distinct): np.setdiff1d without
    its two hash passes over every document (a visible part of a restart: docs/journal.md,
    "Issue 27"), as most documents name their own cluster. O(n + k log n) for k values
    that are not their own row."""
    others = (
        np.unique(values[values != ascending])
        if len(values) == len(ascending)
        else np.unique(values)
    )
    at = np.searchsorted(ascending, others)
    found = at < len(ascending)
    found[found] = ascending[at[found]] == others[found]
    missing: npt.NDArray[np.int64] = others[~found]
    return missing


@dataclass(frozen=True, slots=True)
class Eviction:
    """Expired documents taken out of the durable record, in one transaction."""

    removed: list[int]  # rows deleted outright
    named: list[int]  # rows kept, fingerprints dropped, because their id names a cluster
    expired_through: tuple[int, int]  # the collection's retention mark (see StoredCollection)
    next_row: int  # one past the highest row ever used, which the deletes may have removed


# Told after each commit: (changes in it, documents added by it, seconds it took).
CommitObserver = Callable[[int, int, float], None]


class Store(Protocol):
    """Where the service records what it acknowledges. Every method returns only once the
    change is durable (for stores that are durable at all)."""

    # Where the indexes' segments are kept beside the record (None: nowhere).
    segments: SegmentStore | None

    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        """Every collection with its live documents, for the start-up rebuild;
        fingerprints only from the row ``saved_rows`` gives (a segment holds those
        below); without ``texts``, none of their texts (a store may give them anyway:
        a start reads what it indexes through read_texts, a chunk at a time)."""
        ...

    def load_collection(
        self, name: str, covered: Covered | None = None, *, texts: bool = True
    ) -> StoredCollection:
        """One collection with every fingerprint, or around what a segment ``covered``."""
        ...

    def create_collection(self, name: str, config: dict[str, Any]) -> None: ...

    def drop_collection(self, name: str) -> None: ...

    def update_collection(self, name: str, config: dict[str, Any], mark: Mark | None) -> None:
        """Record new settings, and the retention mark reached under the old ones."""
        ...

    def add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> None: ...

    def begin_add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> Commit:
        """Queue documents for commit without waiting: the commit settles when they are
        durable, or fails with StorageUnavailable. ``mark``, when given, is
        the retention mark their insert moved, recorded in the same transaction."""
        ...

    def begin_evict(self, name: str, eviction: Eviction) -> Commit:
        """Queue expired documents for removal; the commit settles when it is durable."""
        ...

    def delete_documents(self, name: str, rows: list[int]) -> None:
        """Mark documents deleted; their ids may still name clusters."""
        ...

    def read_texts(self, name: str, rows: list[int]) -> list[str | None]:
        """The texts stored with rows (None: none, or deleted), in order: what a
        collection that keeps texts verifies against, read for the few candidates that
        get that far instead of held in memory. Safe from any thread, beside writes."""
        ...

    def removal_mark(self) -> int:
        """The last entry committed so far to the log of removed rows (which a store
        with segments keeps: deletes and evictions since a segment)."""
        ...

    def forget_removals(self, name: str, through: int) -> None:
        """A segment reflects the collection's removals up to ``through``."""
        ...

    def observe_commits(self, observer: CommitObserver) -> None:
        """Call ``observer`` after every commit (from the writer: it must be quick)."""
        ...

    def close(self) -> None: ...
