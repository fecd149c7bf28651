"""TableIndex: what the indexes over a SortedTable share (exact hashes, SimHash tables,
MinHash bands, and any index kind added beside them): row numbers kept by a RowBook
(claimed once, tombstoned on delete, dropped at the next merge), an optional per-row
value array whose pages of deleted rows can be given back, backlog and memory figures.
A subclass adds its keys (``insert``) and its searches."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.row_array import RowArray, RowBook
from app.core.saved import ROWS_SUFFIX, SavedArrays, nested, part, wanted
from app.core.sorted_table import KeyType, SortedTable
from app.core.types import Backlog


class TableIndex:
    """Rows under ``lanes`` sorted key lanes, with ``values`` kept per row when given."""

    one_entry_a_row = True  # else several entries of a row in one lane (passages)

    def __init__(
        self,
        lanes: int,
        values: RowArray | None = None,
        *,
        uniform: bool = False,
        key_type: KeyType = np.uint64,
    ) -> None:
        self._table = SortedTable(lanes=lanes, uniform=uniform, key_type=key_type)
        self._rows = RowBook()
        self._values = values
        # Whether a restart's per-row values are held as they were loaded, not copied.
        self.adopted_values = False

    def __len__(self) -> int:
        """Live rows (inserted and not deleted)."""
        return self._rows.live

    def holds(self, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
        """Whether each row was stored here (deleted since or not). O(rows)."""
        return self._rows.holds(rows)

    def delete(self, rows: npt.NDArray[np.integer]) -> None:
        """Tombstone rows: filtered from results at once, dropped at the next merge."""
        self._rows.tombstone(rows)

    def release(self, rows: npt.NDArray[np.integer]) -> None:
        """Give back the per-row memory of deleted rows (whole pages of them): their
        values are never read again. O(rows x rows per page); nothing without values."""
        if self._values is not None:
            self._values.release(np.asarray(rows, dtype=np.int64), self._rows.dead)

    def backlog(self) -> Backlog:
        """What the next merge will fold in and drop."""
        return Backlog(self._table.unmerged(), self._rows.pending_tombstones)

    def needs_merge(self) -> bool:
        return self._table.needs_merge()

    def merge(self, release_below: int = 0) -> bool:
        """Fold the insert buffer into the sorted runs, dropping tombstoned rows."""
        # release_below: see RowBook.merge.
        return self._rows.merge(self._table, release_below)

    def saved_arrays(self) -> SavedArrays:
        """Everything the index holds, for a segment: the table's runs, the row book and
        the per-row values. O(tail); the caller holds the writers off meanwhile."""
        arrays = {
            **nested("table", self._table.saved_arrays()),
            **nested("book", self._rows.saved_arrays()),
        }
        if self._values is not None:
            arrays["values" + ROWS_SUFFIX] = self._values.saved()
        return arrays

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's arrays as this empty index's (``saved_arrays``)."""
        if self._values is not None:
            self.adopted_values = self._values.take(wanted(arrays, "values" + ROWS_SUFFIX))
        self._rows.adopt_saved(part(arrays, "book"))
        self._table.adopt_saved(part(arrays, "table"))

    def memory_bytes(self) -> int:
        values = 0 if self._values is None else self._values.nbytes
        return self._table.memory_bytes() + self._rows.nbytes + values

    def _check_rows(self) -> None:
        """The table's invariants, and its rows against the row book."""
        self._table._check(self.one_entry_a_row)
        self._rows.check(np.unique(self._table.rows()))
