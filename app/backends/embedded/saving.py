"""An embedded collection's index segment: when it is written, what goes in it, and a
start that takes the indexes from it and replays only what the database holds beyond
(app/storage/segments.py is the file format).

A segment covers every row below ``rows_below`` (the collection's next row when it was
taken, under the write lock). A start reads the live documents' records (ids, times,
metadata, texts) from the database as before, but the fingerprints only from
``rows_below`` on; the indexes adopt the segment's arrays, rows below ``rows_below`` that
the database no longer holds are tombstoned, and the later rows are inserted as any
batch. Costs: a write O(index bytes), off the write lock but for O(tails) taking the
arrays; a start O(segment bytes) to verify and load, plus O(rows below) numpy work and the
inserts of the later rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from app.backends.embedded.matcher import Matcher
from app.backends.embedded.rows import RowTable
from app.core.saved import ROWS_SUFFIX, SavedArrays, SavedStateError, nested, part, wanted
from app.storage.base import SPOT_CHECK_ROWS, DocumentBatch
from app.storage.segments import Segment, SegmentStore, Written, settings_hash

# A segment is written once this many rows came since the last one, or an eighth of the
# documents, whichever is more: a restart replays at most that many documents, and the
# index is written at most ~8 times per doubling of the collection.
SEGMENT_MIN_ROWS = 100_000
SEGMENT_FRACTION = 8
_SIMHASH = "rows/simhash" + ROWS_SUFFIX
_EXACT = "indexes/exact/values" + ROWS_SUFFIX


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

    def write(self, take: Callable[[], tuple[int, SavedArrays]]) -> Written | None:
        """Write a segment of what ``take`` returns (called under the collection's write
        lock: (rows below, arrays)). None without a segment store."""
        if self._segments is None:
            return None
        with self._lock:
            rows_below, arrays = take()
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


def saved_arrays(rows: RowTable, matcher: Matcher) -> tuple[int, SavedArrays]:
    """(rows below, arrays) of a collection now; under its write lock. O(tails)."""
    arrays = nested("indexes", matcher.saved_arrays())
    arrays[_SIMHASH] = rows.simhash.saved()
    return rows.next_row, arrays


def restore_from_segment(matcher: Matcher, batch: DocumentBatch, segment: Segment) -> DocumentBatch:
    """Take the indexes of rows below the segment's ``rows_below`` from it, tombstone
    those the database no longer holds, and return the batch's later documents, still to
    be indexed (the batch's records are not written here). SavedStateError where the
    segment does not fit the database: a live document below ``rows_below`` that it does
    not hold, or other exact hashes than the database's for the last covered documents
    (read for that: SPOT_CHECK_ROWS), as a segment beside another copy of the database
    would have."""
    below = segment.rows_below
    split = int(np.searchsorted(batch.rows, below))
    covered = batch.rows[:split]
    simhash, exact = wanted(segment.arrays, _SIMHASH), wanted(segment.arrays, _EXACT)
    if len(simhash) < below or simhash.dtype != np.uint64:
        raise SavedStateError(f"the SimHash column holds {len(simhash)} rows, not {below}")
    matcher.adopt_saved(part(segment.arrays, "indexes"))
    if not matcher.holds(covered):
        raise SavedStateError("a live document below the segment's rows is not in it")
    spot = slice(max(0, split - SPOT_CHECK_ROWS), split)
    if not np.array_equal(exact[batch.rows[spot]], batch.exact[spot]):  # held: in range
        raise SavedStateError("its exact hashes are not those the database holds")
    # What scoring reads of a row is in the batch before the records are written.
    batch.simhash[:split] = simhash[covered]
    gone = np.ones(below, dtype=np.bool_)
    gone[covered] = False
    matcher.remove(np.flatnonzero(gone))
    return batch.since(split)
