"""Per-row storage that grows without invalidating readers, and gives back dead rows.

RowArray holds a numpy array by row number (app/core/paged_list.py: Python objects by
row number). Both release the memory of rows that are gone (evicted or deleted) by whole
pages, so a collection that expires its oldest documents forever keeps memory
proportional to the rows it holds, not to every row it ever had: row numbers are never
reused (indexes and the durable record name documents by them), the storage of dead
ones is.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.reservations import PAGE_BYTES, _allocate
from app.core.saved import ROWS_SUFFIX as ROWS
from app.core.saved import SavedArrays, SavedStateError, read_scalars, scalars, wanted
from app.core.sorted_table import SortedTable

# Growing by half keeps the copies amortised O(1) per row; the untouched half of a new
# array is not resident until written, so the slack costs address space, not memory.
GROWTH_FACTOR = 1.5
INITIAL_CAPACITY = 1024

DeadRows = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]


def sorted_unique(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Distinct values, ascending: a sort (fast on the nearly sorted rows of an eviction)
    and a comparison of neighbours, instead of np.unique's hash table."""
    ordered = np.sort(np.asarray(values, dtype=np.int64).reshape(-1))
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def ascending_run(rows: npt.NDArray[np.integer]) -> tuple[int, int] | None:
    """(first, end) where ``rows`` are first, first + 1, ..., end - 1 (two or more), else
    None. O(rows) comparisons."""
    if len(rows) < 2:
        return None
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 != len(rows) or not bool(np.all(rows[1:] > rows[:-1])):
        return None
    return first, last + 1


def gathered(values: npt.NDArray[Any], rows: npt.NDArray[np.integer]) -> npt.NDArray[Any]:
    """``values[rows]``, read-only: a view of one slice where the rows are one ascending
    run (a restart's live rows, when none below or only the oldest are gone), else a
    gather. O(rows) comparisons, against a gather's O(rows) random reads (bench/restart.py;
    docs/journal.md, "Issue 27")."""
    run = ascending_run(rows)
    if run is None or run[0] < 0 or run[1] > len(values):
        gather: npt.NDArray[Any] = values[rows]
        return gather
    view = values[run[0] : run[1]]
    view.flags.writeable = False
    return view


class RowArray:
    """A numpy array indexed by row number, shape (capacity, *width), that only grows.

    A large array (MAPPED_MIN_BYTES or more) sits at the start of a mapping reserved for
    many more rows (RESERVE_ROWS), and grows by publishing a longer view of it with one
    reference assignment: nothing is copied, and a reader holding the old view keeps a
    consistent (shorter) one. Past the reservation, or for a small array, growth copies
    into a new array, published the same way. One writer at a time.

    ``release`` gives back the pages that hold only dead rows (a large array lives in its
    own anonymous mapping; madvise(MADV_DONTNEED) frees a page, which then reads as zeros):
    resident memory follows the live rows, not the rows ever stored, as long as dead rows
    come in runs of a page (8 rows of 512 bytes, 512 of 8 bytes), as they do when the
    oldest documents expire first. A released row must never be read for its value again
    (it reads as zero) nor written (rows are never reused). Growth copies only the pages
    still held. Costs: ``release`` O(rows released x rows per page) plus one system call
    per run of pages; growth O(1) within the reservation, else O(pages held).

    >>> flags = RowArray(np.bool_)
    >>> flags.ensure(5000); flags.array[4999] = True
    >>> bool(flags.array[4999]), flags.array.shape[0] >= 5000
    (True, True)
    """

    def __init__(self, dtype: type[np.generic], width: tuple[int, ...] = ()) -> None:
        self._dtype = np.dtype(dtype)
        self._width = width
        self._row_bytes = self._dtype.itemsize * int(np.prod(width, dtype=np.int64))
        self.array: npt.NDArray[Any] = np.zeros((0, *width), dtype=self._dtype)
        self._reserved = self.array  # the whole allocation; ``array`` is a view of its start
        self._mapping: Any = None
        self._released = np.zeros(0, dtype=np.bool_)  # per page of the current mapping
        self.released_pages = 0
        self._released_below = 0  # pages below this one are all released
        self.size = 0  # rows in use; the capacity beyond is not resident until written

    def ensure(self, size: int) -> None:
        """Make rows [0, size) addressable; new rows are zero. O(1) within the
        reservation, O(pages held) when it must move."""
        self.size = max(self.size, size)
        capacity = self.array.shape[0]
        if size <= capacity:
            return
        new_capacity = max(size, int(capacity * GROWTH_FACTOR), INITIAL_CAPACITY)
        if self._mapping is not None and new_capacity <= self._reserved.shape[0]:
            # Same memory, a longer view: readers of the shorter one are unaffected.
            self.array = self._reserved[:new_capacity]
            return
        reserved, mapping = _allocate((new_capacity, *self._width), self._dtype)
        grown = reserved[:new_capacity]
        if self.released_pages and mapping is not None:
            self._copy_held(grown)
        else:
            grown[:capacity] = self.array
            self._released = np.zeros(0, dtype=np.bool_)
            self.released_pages = 0
            self._released_below = 0
        self.array, self._reserved, self._mapping = grown, reserved, mapping

    def adopt(self, values: npt.NDArray[Any]) -> bool:
        """Take ``values`` (rows 0 .. len - 1) as this empty array's, without copying, when
        they are the start of a reservation (``reserved_rows``); False, nothing done,
        otherwise. The caller gives the memory up: a row released later reads as zeros
        through ``values`` too. O(1)."""
        if self.size or self.array.shape[0] or values.dtype != self._dtype:
            return False
        if values.shape[1:] != self._width or not values.flags.c_contiguous:
            return False
        # numpy keeps the owner of a view's memory: the flat array over the mapping.
        flat = values.base
        if not isinstance(flat, np.ndarray) or not isinstance(flat.base, memoryview):
            return False
        mapping = flat.base.obj
        if not isinstance(mapping, mmap.mmap) or flat.ctypes.data != values.ctypes.data:
            return False
        row_items = int(np.prod(self._width, dtype=np.int64))
        if row_items == 0 or flat.ndim != 1 or flat.shape[0] % row_items:
            return False
        self.array, self._mapping = values, mapping
        self._reserved = flat.reshape((-1, *self._width))
        self.size = values.shape[0]
        return True

    def saved(self) -> npt.NDArray[Any]:
        """The rows in use, for a segment: a view (rows written later lie past it, and
        a row is never written twice; a released page reads as zeros, and its rows are
        dead for every reader). O(1)."""
        return self.array[: self.size]

    def take(self, values: npt.NDArray[Any]) -> bool:
        """Hold ``values`` (rows 0 .. len - 1) as this empty array's: adopted when they
        are the start of a reservation (True), else copied. O(1), or O(values) for a
        copy."""
        if values.dtype != self._dtype or values.shape[1:] != self._width:
            raise SavedStateError(
                f"saved rows are {values.dtype}{values.shape[1:]}, not {self._dtype}{self._width}"
            )
        if self.size or self.array.shape[0]:
            raise ValueError("only an empty RowArray takes saved rows")
        if self.adopt(values):
            return True
        self.ensure(len(values))
        self.array[: len(values)] = values
        return False

    def _copy_held(self, grown: npt.NDArray[Any]) -> None:
        """Copy the pages not released (copying zeros would make them resident again)."""
        source = self.array.reshape(-1).view(np.uint8)
        target = grown.reshape(-1).view(np.uint8)
        pages = len(self._released)
        held = np.flatnonzero(~self._released)
        if len(held):
            breaks = np.flatnonzero(np.diff(held) != 1) + 1
            for run in np.split(held, breaks):
                start = int(run[0]) * PAGE_BYTES
                end = min((int(run[-1]) + 1) * PAGE_BYTES, len(source))
                target[start:end] = source[start:end]
        tail = pages * PAGE_BYTES
        target[tail : len(source)] = source[tail:]
        released = np.zeros(len(target) // PAGE_BYTES + 1, dtype=np.bool_)
        released[:pages] = self._released
        self._released = released

    def release(self, rows: npt.NDArray[np.integer], dead: DeadRows) -> int:
        """Give back the pages of these dead rows in which ``dead`` says every row is dead.
        Returns the pages released."""
        if self._mapping is None or self._row_bytes == 0 or len(rows) == 0:
            return 0
        row_bytes = self._row_bytes
        rows = np.asarray(rows, dtype=np.int64)
        if PAGE_BYTES % row_bytes == 0:
            per_page = PAGE_BYTES // row_bytes
            pages = sorted_unique(rows // per_page)
            pages = pages[(pages + 1) * per_page <= self.size]  # only pages wholly in use
            if not len(pages):
                return 0
            members = (pages[:, None] * per_page + np.arange(per_page)).reshape(-1)
            pages = pages[dead(members).reshape(len(pages), per_page).all(axis=1)]
        elif row_bytes % PAGE_BYTES == 0:
            span = row_bytes // PAGE_BYTES  # pages per row, each held by that row alone
            pages = (rows[:, None] * span + np.arange(span)).reshape(-1)
        else:
            return 0  # rows straddle pages unevenly: keep them (no array here is like that)
        return self._release_pages(pages)

    def release_below(self, row: int) -> int:
        """Give back every whole page below ``row``: the caller knows that no row below
        it is read or written again. O(pages released since the last call)."""
        if self._mapping is None or self._row_bytes == 0:
            return 0
        first = self._released_below
        end = min(row, self.size) * self._row_bytes // PAGE_BYTES
        if end <= first:
            return 0
        self._released_below = end
        return self._release_pages(np.arange(first, end, dtype=np.int64))

    def _release_pages(self, pages: npt.NDArray[np.int64]) -> int:
        if len(self._released) < self.array.nbytes // PAGE_BYTES + 1:
            grown = np.zeros(self.array.nbytes // PAGE_BYTES + 1, dtype=np.bool_)
            grown[: len(self._released)] = self._released
            self._released = grown
        pages = pages[~self._released[pages]]
        if not len(pages):
            return 0
        breaks = np.flatnonzero(np.diff(pages) != 1) + 1
        for run in np.split(pages, breaks):
            start = int(run[0]) * PAGE_BYTES
            self._mapping.madvise(mmap.MADV_DONTNEED, start, len(run) * PAGE_BYTES)
        self._released[pages] = True
        self.released_pages += len(pages)
        return len(pages)

    @property
    def nbytes(self) -> int:
        """Bytes of the rows in use (np.zeros capacity is not resident until touched),
        less the pages given back."""
        row_bytes = self.array.itemsize * int(np.prod(self._width, dtype=np.int64))
        return max(0, self.size * row_bytes - self.released_pages * PAGE_BYTES)


def claim_rows(
    rows: npt.NDArray[np.integer], present: RowArray, deleted: RowArray
) -> npt.NDArray[np.int64]:
    """Mark new row numbers present; a row stored before (even deleted) is an error."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if len(rows) == 0:
        return rows
    if len(rows) == 1:  # a single insert: scalar checks, no array reductions' fixed cost
        row = int(rows[0])
        if row < 0:
            raise ValueError("row numbers must not be negative")
        deleted.ensure(row + 1)
        present.ensure(row + 1)
        if present.array[row]:
            raise ValueError("row numbers must be new: rows are never stored twice or reused")
        present.array[row] = True
        return rows
    if int(rows.min()) < 0:
        raise ValueError("row numbers must not be negative")
    size = int(rows.max()) + 1
    deleted.ensure(size)
    present.ensure(size)
    # Ascending rows (the usual case, and every restart) are distinct without np.unique.
    ascending = bool(np.all(rows[1:] > rows[:-1]))
    if (not ascending and len(np.unique(rows)) != len(rows)) or bool(present.array[rows].any()):
        raise ValueError("row numbers must be new: rows are never stored twice or reused")
    present.array[rows] = True
    return rows


def tombstones_to_drop(
    deleted: RowArray, deleted_count: int, dropped_count: int
) -> npt.NDArray[np.bool_] | None:
    """The tombstones a merge should drop, or None when none came since the last merge:
    checking every entry against the tombstones is most of a merge's cost."""
    if deleted_count == dropped_count:
        return None
    snapshot: npt.NDArray[np.bool_] = deleted.array.copy()
    return snapshot


def tombstone_rows(rows: npt.NDArray[np.integer], present: RowArray, deleted: RowArray) -> int:
    """Mark stored, live rows deleted; returns how many were newly deleted."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    rows = rows[(rows >= 0) & (rows < present.array.shape[0])]
    rows = sorted_unique(rows[present.array[rows] & ~deleted.array[rows]])
    deleted.array[rows] = True
    return len(rows)


def check_rows(
    stored: npt.NDArray[np.integer], present: RowArray, deleted: RowArray, live: int
) -> None:
    """Assert that the stored rows are the present ones minus dropped tombstones."""
    stored = np.asarray(stored, dtype=np.int64)
    assert bool(present.array[stored].all()), "a stored row is not marked present"
    live_rows = np.flatnonzero(present.array & ~deleted.array)
    assert np.array_equal(np.intersect1d(live_rows, stored), live_rows), "a live row is lost"
    assert live == len(live_rows), f"live count {live} != {len(live_rows)}"


class RowBook:
    """The rows an index holds: which are present, which tombstoned, how many live, and
    which tombstones a merge may drop. Shared by every index class."""

    def __init__(self) -> None:
        self.present = RowArray(np.bool_)
        self.deleted = RowArray(np.bool_)
        self.live = 0
        self._deleted_count = 0  # tombstones ever set
        self._dropped_count = 0  # of which the last merge dropped

    def claim(self, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
        claimed = claim_rows(rows, self.present, self.deleted)
        self.live += len(claimed)
        return claimed

    def dead(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each row is tombstoned or was never stored here (the DeadRows of a
        RowArray.release: its per-row values are never read again)."""
        size = min(self.present.array.shape[0], self.deleted.array.shape[0])
        inside = rows < size
        dead = np.ones(len(rows), dtype=np.bool_)
        at = rows[inside]
        dead[inside] = self.deleted.array[at] | ~self.present.array[at]
        return dead

    def tombstone(self, rows: npt.NDArray[np.integer]) -> None:
        newly = tombstone_rows(rows, self.present, self.deleted)
        self.live -= newly
        self._deleted_count += newly

    def merge(self, table: SortedTable, release_below: int = 0) -> bool:
        """Merge the table's buffer, dropping the tombstones set since the last merge.
        ``release_below``: every row below it was tombstoned before this call, so once
        merged none is in the table and their flags are never read again: the flags'
        pages below it are given back (1 byte a row each, else kept for every row ever)."""
        deleted = self._deleted_count
        merged = table.merge(tombstones_to_drop(self.deleted, deleted, self._dropped_count))
        if merged:
            self._dropped_count = deleted
            if release_below:
                self.present.release_below(release_below)
                self.deleted.release_below(release_below)
        return merged

    def holds(self, rows: npt.NDArray[np.integer] | Sequence[int]) -> npt.NDArray[np.bool_]:
        """Whether each row was stored here (deleted since or not). O(rows)."""
        rows = np.asarray(rows, dtype=np.int64)
        present = self.present.array
        run = ascending_run(rows)
        if run is not None and run[0] >= 0 and run[1] <= present.shape[0]:
            return present[run[0] : run[1]].copy()  # one slice, not a gather
        inside = (rows >= 0) & (rows < present.shape[0])
        held = np.zeros(len(rows), dtype=np.bool_)
        held[inside] = present[rows[inside]]
        return held

    def saved_arrays(self) -> SavedArrays:
        """The flags and counters, for a segment (``adopt_saved`` takes them back)."""
        return {
            "present" + ROWS: self.present.saved(),
            "deleted" + ROWS: self.deleted.saved(),
            "counts": scalars([self._deleted_count, self._dropped_count]),
        }

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take saved flags as this empty book's; the live count is counted again.
        O(rows)."""
        present, deleted = wanted(arrays, "present" + ROWS), wanted(arrays, "deleted" + ROWS)
        if present.shape != deleted.shape:
            raise SavedStateError("saved present and deleted flags differ in length")
        self.present.take(present)
        self.deleted.take(deleted)
        self._deleted_count, self._dropped_count = read_scalars(arrays, "counts", 2)
        self.live = int(np.count_nonzero(present)) - int(np.count_nonzero(present & deleted))

    @property
    def pending_tombstones(self) -> int:
        """Tombstones set since the last merge, still held by the tables."""
        return self._deleted_count - self._dropped_count

    @property
    def nbytes(self) -> int:
        return self.present.nbytes + self.deleted.nbytes

    def check(self, stored: npt.NDArray[np.integer]) -> None:
        check_rows(stored, self.present, self.deleted, self.live)
