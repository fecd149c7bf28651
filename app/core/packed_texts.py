"""The texts of an n-gram index (app/core/ngram.py), packed: 1, 2 or 4 bytes a character,
as each text's widest needs, end to end, with per-row columns. No I/O."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from app.core import _gram_kernels as kernels
from app.core.row_array import RowArray
from app.core.saved import ROWS_SUFFIX, SavedArrays, wanted
from app.core.types import Rows


class PackedTexts:
    """The texts of an n-gram index, packed: every text's code points end to end (1, 2
    or 4 bytes a character, as its widest needs), and per row where its text starts, its
    characters, its bytes per character, its number of distinct q-grams and, with the
    template rule, its figures key. One writer (the index's lock); readers read rows
    stored before their rows entered the index."""

    def __init__(self) -> None:
        self.data = RowArray(np.uint8)
        self.starts = RowArray(np.int64)
        self.chars = RowArray(np.int32)
        self.widths = RowArray(np.uint8)
        self.sizes = RowArray(np.int32)  # written when the row's postings are made
        self.figures = RowArray(np.uint64)  # with same_numbers only (made at insert)

    def _columns(self) -> dict[str, RowArray]:
        return {
            "data": self.data,
            "starts": self.starts,
            "chars": self.chars,
            "widths": self.widths,
            "sizes": self.sizes,
            "figures": self.figures,
        }

    def store(
        self,
        rows: Rows,
        size: int,
        data: npt.NDArray[np.uint8],
        starts: npt.NDArray[np.int64],
        chars: npt.NDArray[np.int32],
        widths: npt.NDArray[np.uint8],
        figure_keys: npt.NDArray[np.uint64] | None,
    ) -> None:
        """Append packed texts (``pack_texts``) under new rows; per-row columns grown to
        ``size`` rows. O(bytes + rows)."""
        used = self.data.size
        self.data.ensure(used + len(data))
        self.data.array[used : used + len(data)] = data
        for column in (self.starts, self.chars, self.widths, self.sizes, self.figures):
            if column is not self.figures or figure_keys is not None:
                column.ensure(size)
        self.starts.array[rows] = starts + used
        self.chars.array[rows] = chars
        self.widths.array[rows] = widths
        if figure_keys is not None:
            self.figures.array[rows] = figure_keys

    def kernel_arrays(
        self,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
        """The arrays a kernel reads stored texts from, in the order the kernels take
        them: data, starts, chars, widths."""
        return self.data.array, self.starts.array, self.chars.array, self.widths.array

    def text(self, row: int) -> str:
        start, chars = int(self.starts.array[row]), int(self.chars.array[row])
        width = int(self.widths.array[row])
        points = kernels.unpack_text(self.data.array, start, width, chars)
        return points.tobytes().decode("utf-32-le", "surrogatepass")

    @property
    def nbytes(self) -> int:
        return sum(column.nbytes for column in self._columns().values())

    def saved_arrays(self) -> SavedArrays:
        return {name + ROWS_SUFFIX: column.saved() for name, column in self._columns().items()}

    def adopt_saved(self, arrays: SavedArrays) -> None:
        for name, column in self._columns().items():
            column.take(wanted(arrays, name + ROWS_SUFFIX))
