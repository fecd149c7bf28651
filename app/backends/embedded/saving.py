"""An embedded collection's index segment: when it is written, what goes in it, and a
start that takes the indexes from it and replays only what the database holds beyond
(app/storage/segments.py is the file format).

A segment covers every row below ``rows_below`` (the collection's next row when it was
taken, under the write lock): the indexes and the per-row records (ids, metadata, times,
clusters, the id map). A start reads from the database only which rows below
``rows_below`` are live (and the records of the last SPOT_CHECK_ROWS of them, checked
against the segment), the texts where the collection keeps them, and the documents from
``rows_below`` on; the indexes and records are adopted from the segment, rows below
``rows_below`` that the database no longer holds are tombstoned, and the later rows are
inserted as any batch. Costs: a write O(segment bytes), off the write lock but for
O(tails + rows / 8 KB) taking the arrays; a start O(segment bytes) to verify, O(rows
below) numpy work, and the inserts of the later rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from app.backends.embedded.matcher import Matcher
from app.backends.embedded.rows import RowTable
from app.core.saved import ROWS_SUFFIX, SavedArrays, SavedStateError, nested, part, wanted
from app.core.types import Rows
from app.storage.base import DocumentBatch, StoredCollection, not_among
from app.storage.segments import Segment, SegmentStore, Written, settings_hash

# A segment is written once this many rows came since the last one, or an eighth of the
# documents, whichever is more: a restart replays at most that many documents, and the
# index is written at most ~8 times per doubling of the collection.
SEGMENT_MIN_ROWS = 100_000
SEGMENT_FRACTION = 8
_EXACT = "indexes/exact/values" + ROWS_SUFFIX
# (rows below, the arrays taken under the write lock, what is made of them off it)
Taken = tuple[int, SavedArrays, Callable[[], SavedArrays]]


class SegmentKeeper:
    """When a collection's segment is written, and what it holds: its indexes' arrays and
    the SimHash column (what scoring reads of a row beside the indexes)."""

    def __init__(
        self, name: str, segments: SegmentStore | None, fixed_settings: dict[str, object]
    ) -> None:
        self._name = name
        self._segments = segments
        self._settings = settings_hash(fixed_settings)
        self._lock = threading.Lock()  # one write at a time (merger, shutdown)
        self.rows_below = 0  # what the newest segment covers

    def due(self, next_row: int, documents: int, *, everything: bool = False) -> bool:
        """Whether enough rows came since the last segment (with ``everything``: any)."""
        if self._segments is None:
            return False
        unsaved = next_row - self.rows_below
        if everything:
            return unsaved > 0
        return unsaved >= max(SEGMENT_MIN_ROWS, documents // SEGMENT_FRACTION)

    def write(self, take: Callable[[], Taken]) -> Written | None:
        """Write a segment of what ``take`` returns (called under the collection's write
        lock). None without a segment store."""
        if self._segments is None:
            return None
        with self._lock:
            rows_below, arrays, later = take()
            arrays.update(later())
            written = self._segments.write(self._name, self._settings, rows_below, arrays)
            self.rows_below = rows_below
            return written

    def open(self) -> Segment | None:
        """The collection's verified segment (SegmentDamaged if it does not verify)."""
        if self._segments is None:
            return None
        return self._segments.open(self._name, self._settings)

    def adopted(self, segment: Segment) -> None:
        self.rows_below = segment.rows_below


def saved_arrays(rows: RowTable, matcher: Matcher) -> Taken:
    """What a segment of a collection holds now; under its write lock. O(tails + rows /
    8 KB) there; the returned function encodes the records off the lock."""
    arrays = nested("indexes", matcher.saved_arrays())
    records, encoded = rows.saved_arrays()
    arrays.update(nested("rows", records))
    return rows.next_row, arrays, lambda: nested("rows", encoded())


def restore_from_segment(
    matcher: Matcher, rows: RowTable, stored: StoredCollection, segment: Segment
) -> tuple[Rows, DocumentBatch]:
    """Take the indexes and records of rows below the segment's ``rows_below`` from it,
    tombstone those the database no longer holds, and return (the live rows below, the
    documents after them, still to be published). SavedStateError where the segment does
    not fit the database: a live document below ``rows_below`` that it does not hold, the
    name of such a document's cluster missing, or other exact hashes than the
    database's for the last covered documents (read for that: SPOT_CHECK_ROWS), as a
    segment beside another copy of the database would have."""
    below, batch = segment.rows_below, stored.documents
    split = int(np.searchsorted(batch.rows, below))
    live = np.concatenate([stored.covered, batch.rows[:split]])
    exact = wanted(segment.arrays, _EXACT)
    matcher.adopt_saved(part(segment.arrays, "indexes"))
    if not matcher.holds(live):
        raise SavedStateError("a live document below the segment's rows is not in it")
    if not np.array_equal(exact[batch.rows[:split]], batch.exact[:split]):  # held: in range
        raise SavedStateError("its exact hashes are not those the database holds")
    rows.adopt_saved(part(segment.arrays, "rows"), live, below)
    # Clusters of covered documents named by a row that is not live: the segment holds
    # their names (ids of a row that left, still naming a cluster, are kept).
    named = not_among(rows.cluster.array[live], np.concatenate([live, batch.rows[split:]]))
    if any(rows.ids[row] is None for row in named.tolist()):
        raise SavedStateError("the name of a cluster below the segment's rows is not in it")
    gone = np.ones(below, dtype=np.bool_)
    gone[live] = False
    gone_rows = np.flatnonzero(gone)
    matcher.remove(gone_rows)
    naming = np.zeros(below, dtype=np.bool_)
    naming[named] = True
    rows.release(gone_rows, gone_rows[~naming[gone_rows]])
    if stored.covered_texts is not None or batch.texts is not None:
        texts = (stored.covered_texts or [None] * len(stored.covered)) + list(
            batch.text_column()[:split]
        )
        rows.texts.assign(live, texts)
    return live, batch.since(split)
