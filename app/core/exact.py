"""ExactIndex: documents whose normalised text is identical, by its 128-bit hash."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.row_array import RowArray
from app.core.table_index import TableIndex
from app.core.types import ExactHashes, Rows


class ExactIndex(TableIndex):
    """Rows by 128-bit content hash: the low word is the sorted key, both words verified.

    >>> index = ExactIndex()
    >>> index.insert(np.array([[1, 2], [3, 4]], dtype=np.uint64), np.array([0, 1]))
    >>> index.search(np.array([3, 4], dtype=np.uint64)).tolist()
    [1]
    """

    def __init__(self) -> None:
        self._hashes = RowArray(np.uint64, (2,))
        super().__init__(lanes=1, values=self._hashes)

    def insert(self, hashes: ExactHashes, rows: npt.NDArray[np.integer]) -> None:
        """Store (m, 2) hashes under new row numbers."""
        hashes = np.asarray(hashes, dtype=np.uint64).reshape(-1, 2)
        rows = self._rows.claim(rows)
        self._hashes.ensure(self._rows.present.size)
        self._hashes.array[rows] = hashes
        self._table.insert(hashes[:, 1:], rows)

    def search(self, exact_hash: ExactHashes) -> Rows:
        """Live rows with this exact hash, in row order. O(log N)."""
        wanted = np.asarray(exact_hash, dtype=np.uint64).reshape(2)
        candidates = self._table.lookup_equal(0, int(wanted[1]))
        if not len(candidates):  # a new text: nothing to check
            return candidates
        stored = self._hashes.array  # read after the lookup: holds every candidate
        deleted = self._rows.deleted.array
        keep = (stored[candidates, 0] == wanted[0]) & ~deleted[candidates]
        return np.sort(candidates[keep])

    def search_many(self, exact_hashes: ExactHashes) -> tuple[Rows, Rows]:
        """(query positions, rows) of live rows equal to each of (m, 2) hashes."""
        wanted = np.asarray(exact_hashes, dtype=np.uint64).reshape(-1, 2)
        if len(wanted) == 1:  # a search: the scalar lookup has less numpy overhead
            rows = self.search(wanted[0])
            return np.zeros(len(rows), dtype=np.int64), rows
        positions, candidates = self._table.lookup_equal_many(0, wanted[:, 1])
        stored = self._hashes.array  # read after the lookup: holds every candidate
        deleted = self._rows.deleted.array
        keep = (stored[candidates, 0] == wanted[positions, 0]) & ~deleted[candidates]
        return positions[keep], candidates[keep]

    def hashes(self, rows: npt.NDArray[np.integer]) -> ExactHashes:
        """The stored (high, low) hashes of rows."""
        stored: ExactHashes = self._hashes.array[np.asarray(rows, dtype=np.int64)]
        return stored

    def _check(self) -> None:
        self._check_rows()
        state = self._table.snapshot()
        deleted = self._rows.deleted.array  # a deleted row's hash may be given back
        for run in (state.main, state.middle, state.buffer):
            live = ~deleted[run.rows[0]]
            assert np.array_equal(run.keys[0][live], self._hashes.array[run.rows[0][live], 1])
