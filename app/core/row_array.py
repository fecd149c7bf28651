"""Per-row arrays that grow without invalidating readers."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.sorted_table import SortedTable

# Growing by half keeps the copies amortised O(1) per row; the untouched half of a new
# array is not resident until written, so the slack costs address space, not memory.
GROWTH_FACTOR = 1.5
INITIAL_CAPACITY = 1024


class RowArray:
    """A numpy array indexed by row number, shape (capacity, *width), that only grows.

    Growth copies into a new array and publishes it with one reference assignment, so a
    reader holding the old array keeps a consistent (shorter) view. One writer at a time.

    >>> flags = RowArray(np.bool_)
    >>> flags.ensure(5000); flags.array[4999] = True
    >>> bool(flags.array[4999]), flags.array.shape[0] >= 5000
    (True, True)
    """

    def __init__(self, dtype: type[np.generic], width: tuple[int, ...] = ()) -> None:
        self._dtype = np.dtype(dtype)
        self._width = width
        self.array: npt.NDArray[Any] = np.zeros((0, *width), dtype=self._dtype)
        self.size = 0  # rows in use; the capacity beyond is not resident until written

    def ensure(self, size: int) -> None:
        """Make rows [0, size) addressable; new rows are zero."""
        self.size = max(self.size, size)
        capacity = self.array.shape[0]
        if size <= capacity:
            return
        new_capacity = max(size, int(capacity * GROWTH_FACTOR), INITIAL_CAPACITY)
        grown = np.zeros((new_capacity, *self._width), dtype=self._dtype)
        grown[:capacity] = self.array
        self.array = grown

    @property
    def nbytes(self) -> int:
        """Bytes of the rows in use (np.zeros capacity is not resident until touched)."""
        row_bytes = self.array.itemsize * int(np.prod(self._width, dtype=np.int64))
        return self.size * row_bytes


def claim_rows(
    rows: npt.NDArray[np.integer], present: RowArray, deleted: RowArray
) -> npt.NDArray[np.int64]:
    """Mark new row numbers present; a row stored before (even deleted) is an error."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if len(rows) == 0:
        return rows
    if len(rows) == 1:  # a single insert: scalar checks, no array reductions (~10 us less)
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
    rows = np.unique(rows[present.array[rows] & ~deleted.array[rows]])
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

    def tombstone(self, rows: npt.NDArray[np.integer]) -> None:
        newly = tombstone_rows(rows, self.present, self.deleted)
        self.live -= newly
        self._deleted_count += newly

    def merge(self, table: SortedTable) -> bool:
        """Merge the table's buffer, dropping the tombstones set since the last merge."""
        deleted = self._deleted_count
        merged = table.merge(tombstones_to_drop(self.deleted, deleted, self._dropped_count))
        if merged:
            self._dropped_count = deleted
        return merged

    @property
    def pending_tombstones(self) -> int:
        """Tombstones set since the last merge, still held by the tables."""
        return self._deleted_count - self._dropped_count

    @property
    def nbytes(self) -> int:
        return self.present.nbytes + self.deleted.nbytes

    def check(self, stored: npt.NDArray[np.integer]) -> None:
        check_rows(stored, self.present, self.deleted, self.live)
