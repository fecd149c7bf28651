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

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.backends.embedded.matcher import Matcher
from app.backends.embedded.rows import RowTable
from app.backends.embedded.states import GONE
from app.core.row_array import gathered
from app.core.saved import (
    ROWS_SUFFIX,
    SavedArrays,
    SavedStateError,
    nested,
    part,
    read_scalars,
    scalars,
    wanted,
)
from app.core.types import Rows
from app.storage.base import SPOT_CHECK_ROWS, Covered, DocumentBatch, StoredCollection, not_among
from app.storage.commit import Commit
from app.storage.segments import Segment, SegmentStore, Written, settings_hash

# A segment is written once this many rows came since the last one, or an eighth of the
# documents, whichever is more: a restart replays at most that many documents, and the
# index is written at most ~8 times per doubling of the collection.
log = logging.getLogger("neardup.segments")
SEGMENT_MIN_ROWS = 100_000
SEGMENT_FRACTION = 8
_EXACT = "indexes/exact/values" + ROWS_SUFFIX
_STATE = "rows/state"
_MARKS = "rows/marks"  # (the removal log's entry it reflects, documents with a text)


@dataclass(frozen=True, slots=True)
class Taken:
    """A segment as taken under the write lock: the rest is done off it."""

    rows_below: int
    arrays: SavedArrays
    later: Callable[[], SavedArrays]  # what is encoded off the lock
    removed_through: int
    # Commits queued before it: the segment is written only once all are durable (it
    # would hold documents the database never gets, or lack ones it keeps).
    commits: list[Commit]


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

    def write(self, take: Callable[[], Taken], forget: Callable[[int], None]) -> Written | None:
        """Write a segment of what ``take`` returns (called under the collection's write
        lock), once the commits queued before it are durable; then ``forget`` the
        removals it reflects. None without a segment store, or when one of those
        commits failed (the next try takes a new one)."""
        if self._segments is None:
            return None
        with self._lock:
            taken = take()
            for commit in taken.commits:
                error = commit.exception()
                if error is not None:
                    log.warning(
                        "no index segment of %r this time: a commit failed (%s)", self._name, error
                    )
                    return None
            arrays = dict(taken.arrays)
            arrays.update(taken.later())
            written = self._segments.write(self._name, self._settings, taken.rows_below, arrays)
            self.rows_below = taken.rows_below
            forget(taken.removed_through)
            return written

    def open(self) -> Segment | None:
        """The collection's verified segment (SegmentDamaged if it does not verify)."""
        if self._segments is None:
            return None
        return self._segments.open(self._name, self._settings)

    def adopted(self, segment: Segment) -> None:
        self.rows_below = segment.rows_below


def saved_arrays(
    rows: RowTable, matcher: Matcher, removed_through: int, commits: list[Commit]
) -> Taken:
    """What a segment of a collection holds now; under its write lock, with the removal
    log's last entry now and the commits not yet durable. O(tails + rows / 8 KB) there;
    the encoding of the records is left for after the lock."""
    arrays = nested("indexes", matcher.saved_arrays())
    records, encoded = rows.saved_arrays()
    arrays.update(nested("rows", records))
    # The second mark said whether texts were held below (a start read them): none are now.
    arrays[_MARKS] = scalars([removed_through, 0])
    return Taken(rows.next_row, arrays, lambda: nested("rows", encoded()), removed_through, commits)


def covered_by(segment: Segment) -> Covered:
    """What the segment holds, for the store to read the rest. SavedStateError where it
    says nothing of it."""
    removed_through, texts = read_scalars(segment.arrays, _MARKS, 2)
    return Covered(segment.rows_below, removed_through, texts > 0)


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
    spot = batch.rows[:split]
    # Live below: those the segment held, less those the database removed since.
    state = wanted(segment.arrays, _STATE)
    if state.shape != (below,) or state.dtype != np.uint8:
        raise SavedStateError(f"the states hold {state.shape}, not {below} rows")
    held = state != GONE
    removed = stored.removed[stored.removed < below]
    held[removed] = False
    live = np.flatnonzero(held)
    # The database's last live documents below are the segment's (a commit that failed,
    # or a segment beside another copy of the database, shows here).
    last = live[max(0, len(live) - len(spot)) :]
    if not np.array_equal(last, spot) or (len(spot) < SPOT_CHECK_ROWS and len(live) > len(spot)):
        raise SavedStateError("the last live documents below its rows are not the database's")
    exact = wanted(segment.arrays, _EXACT)
    matcher.adopt_saved(part(segment.arrays, "indexes"))
    if not matcher.holds(live):
        raise SavedStateError("a live document below the segment's rows is not in it")
    if not np.array_equal(exact[spot], batch.exact[:split]):  # held: in range
        raise SavedStateError("its exact hashes are not those the database holds")
    rows.adopt_saved(part(segment.arrays, "rows"), live, below)
    # Clusters named by a row below that is not live: the segment holds their names (the
    # id of a row that left is kept while it names a cluster).
    clusters = np.concatenate([gathered(rows.cluster.array, live), batch.clusters[split:]])
    named = not_among(clusters, np.concatenate([live, batch.rows[split:]]))
    named = named[named < below]  # the store looked up those after
    if any(rows.ids[row] is None for row in named.tolist()):
        raise SavedStateError("the name of a cluster below the segment's rows is not in it")
    gone_rows = np.flatnonzero(~held)
    matcher.remove(gone_rows)
    naming = np.zeros(below, dtype=np.bool_)
    naming[named] = True
    rows.release(gone_rows, gone_rows[~naming[gone_rows]])
    return live, batch.since(split)
