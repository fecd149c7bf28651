"""ExactIndex: documents whose normalised text is identical, by its 128-bit hash."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.row_array import (
    RowArray,
    check_rows,
    claim_rows,
    tombstone_rows,
    tombstones_to_drop,
)
from app.core.sorted_table import SortedTable
from app.core.types import ExactHashes, Rows


class ExactIndex:
    """Rows by 128-bit content hash: the low word is the sorted key, both words verified.

    >>> index = ExactIndex()
    >>> index.insert(np.array([[1, 2], [3, 4]], dtype=np.uint64), np.array([0, 1]))
    >>> index.search(np.array([3, 4], dtype=np.uint64)).tolist()
    [1]
    """

    def __init__(self) -> None:
        self._table = SortedTable(lanes=1)
        self._hashes = RowArray(np.uint64, (2,))
        self._present = RowArray(np.bool_)
        self._deleted = RowArray(np.bool_)
        self._live = 0
        self._deleted_count = 0  # tombstones ever set
        self._dropped_count = 0  # of which the last merge dropped

    def __len__(self) -> int:
        return self._live

    def insert(self, hashes: ExactHashes, rows: npt.NDArray[np.integer]) -> None:
        """Store (m, 2) hashes under new row numbers."""
        hashes = np.asarray(hashes, dtype=np.uint64).reshape(-1, 2)
        rows = claim_rows(rows, self._present, self._deleted)
        self._hashes.ensure(self._present.size)
        self._hashes.array[rows] = hashes
        self._table.insert(hashes[:, 1:], rows)
        self._live += len(rows)

    def delete(self, rows: npt.NDArray[np.integer]) -> None:
        newly = tombstone_rows(rows, self._present, self._deleted)
        self._live -= newly
        self._deleted_count += newly

    def search(self, exact_hash: ExactHashes) -> Rows:
        """Live rows with this exact hash, in row order. O(log N)."""
        wanted = np.asarray(exact_hash, dtype=np.uint64).reshape(2)
        candidates = self._table.lookup_equal(0, int(wanted[1])).astype(np.int64)
        stored = self._hashes.array  # read after the lookup: holds every candidate
        deleted = self._deleted.array
        keep = (stored[candidates, 0] == wanted[0]) & ~deleted[candidates]
        return np.sort(candidates[keep])

    def hashes(self, rows: npt.NDArray[np.integer]) -> ExactHashes:
        """The stored (high, low) hashes of rows."""
        stored: ExactHashes = self._hashes.array[np.asarray(rows, dtype=np.int64)]
        return stored

    def needs_merge(self) -> bool:
        return self._table.needs_merge()

    def merge(self) -> bool:
        deleted = self._deleted_count
        merged = self._table.merge(tombstones_to_drop(self._deleted, deleted, self._dropped_count))
        if merged:
            self._dropped_count = deleted
        return merged

    def memory_bytes(self) -> int:
        arrays = (self._hashes, self._present, self._deleted)
        return self._table.memory_bytes() + sum(array.nbytes for array in arrays)

    def _check(self) -> None:
        self._table._check()
        state = self._table.snapshot()
        for run in (state.main, state.frozen, state.buffer):
            assert np.array_equal(run.keys[0], self._hashes.array[run.rows[0], 1])
        check_rows(self._table.rows(), self._present, self._deleted, self._live)
