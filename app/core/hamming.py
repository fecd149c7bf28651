"""HammingIndex: every stored 64-bit fingerprint within k bits of a query, exactly.

Manku, Jain and Das Sarma (WWW 2007). Cut the 64 bits into n >= k+1 blocks. Two
fingerprints that differ in at most k bits differ in at most k blocks, so at least n-k
blocks are equal (pigeonhole). For each of the C(n, k) choices of n-k "leading" blocks
keep one table of every fingerprint with its bits permuted so that those blocks come
first, sorted. A query permuted the same way finds, in each table, the range of keys
sharing its leading blocks by binary search, and checks the true distance of each.

Worked example, k = 3, n = 4 blocks of 16 bits A B C D, so 4 tables led by one block
each (A|BCD, B|ACD, C|ABD, D|ABC). A stored fingerprint differing from the query in
3 bits, all in blocks B and D, has A and C equal: table A|BCD and table C|ABD both hold it
in the query's 16-bit prefix range, so it is found (and reported once). One differing in
4 bits, one per block, shares no block and is rightly never a candidate.

The permutation moves bits around but keeps them, so distances are computed on permuted
keys directly and the original fingerprints need not be stored.

Memory: C(n, k) tables x 12 bytes (uint64 key, int32 row) per fingerprint. Candidates per
table and query: about N / 2^prefix_bits, prefix_bits = the bits of n-k blocks.

    k   n   tables  prefix bits  bytes/doc   candidates per query at N = 10M
    3   4       4       16           48          4 x 153
    3   5      10       25-26       120         10 x 0.2
    6   7       7        9-10        84          7 x 14,000
    6   8      28       16          336         28 x 153
    8   9       9        7-8        108          9 x 55,000
    8  10      45       12-13       540         45 x 1,700
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from app.core import _index_kernels as kernels
from app.core.table_index import TableIndex
from app.core.types import Rows, SimHashes

MAX_DISTANCE_LIMIT = 16


def block_layout(blocks: int) -> tuple[list[int], list[int]]:
    """(shifts, widths) of ``blocks`` contiguous blocks covering 64 bits, widths within one."""
    base, extra = divmod(64, blocks)
    widths = [base + 1 if i < extra else base for i in range(blocks)]
    shifts = [64 - sum(widths[: i + 1]) for i in range(blocks)]
    return shifts, widths


class HammingIndex(TableIndex):
    """Exact search of 64-bit fingerprints within ``max_distance`` bits.

    ``blocks`` (default k + 1, the fewest tables) trades memory for fewer candidates per
    query; see the module docstring for the table of layouts.

    >>> index = HammingIndex(max_distance=3)
    >>> index.insert(np.array([0b1111, 0xFFFF0000], dtype=np.uint64), np.array([0, 1]))
    >>> rows, distances = index.search(0b0111)
    >>> rows.tolist(), distances.tolist()
    ([0], [1])
    """

    def __init__(self, max_distance: int = 3, blocks: int | None = None) -> None:
        if not 0 <= max_distance <= MAX_DISTANCE_LIMIT:
            raise ValueError(f"max_distance must be 0 to {MAX_DISTANCE_LIMIT}, not {max_distance}")
        blocks = max_distance + 1 if blocks is None else blocks
        if not max_distance + 1 <= blocks <= 64:
            raise ValueError(f"blocks must be {max_distance + 1} to 64, not {blocks}")
        self.max_distance = max_distance
        self.blocks = blocks
        shifts, widths = block_layout(blocks)
        table_shifts, table_widths, masks = [], [], []
        for leading in itertools.combinations(range(blocks), blocks - max_distance):
            order = list(leading) + [b for b in range(blocks) if b not in leading]
            table_shifts.append([shifts[b] for b in order])
            table_widths.append([widths[b] for b in order])
            prefix_bits = sum(widths[b] for b in leading)
            masks.append(((1 << prefix_bits) - 1) << (64 - prefix_bits) if prefix_bits else 0)
        self._shifts = np.array(table_shifts, dtype=np.int64)
        self._widths = np.array(table_widths, dtype=np.int64)
        self._prefix_masks = np.array(masks, dtype=np.uint64)
        super().__init__(lanes=len(masks))

    @property
    def tables(self) -> int:
        return len(self._prefix_masks)

    def permute(self, fingerprints: SimHashes) -> npt.NDArray[np.uint64]:
        """(m, tables) permuted keys of each fingerprint."""
        values = np.ascontiguousarray(fingerprints, dtype=np.uint64).reshape(-1)
        permuted: npt.NDArray[np.uint64] = kernels.permute_blocks(
            values, self._shifts, self._widths
        )
        return permuted

    def insert(self, fingerprints: SimHashes, rows: npt.NDArray[np.integer]) -> None:
        """Add fingerprints under new row numbers (never reused). O(m tables) + buffer merge."""
        rows = self._rows.claim(rows)
        self._table.insert(self.permute(fingerprints), rows)

    def search(
        self, fingerprint: int | np.uint64, max_distance: int | None = None
    ) -> tuple[Rows, Rows]:
        """(rows, distances) of every live fingerprint within the distance, nearest first."""
        _, rows, distances = self.search_many(
            np.array([fingerprint], dtype=np.uint64), max_distance
        )
        order = np.lexsort((rows, distances))
        return rows[order], distances[order]

    def search_many(
        self, fingerprints: SimHashes, max_distance: int | None = None
    ) -> tuple[Rows, Rows, Rows]:
        """Search a batch: (ends, rows, distances), query i's matches at [ends[i-1], ends[i]).

        Cost per query: tables x (2 binary searches per run + candidates) + tail scan.
        """
        distance = self.max_distance if max_distance is None else max_distance
        if not 0 <= distance <= self.max_distance:
            raise ValueError(
                f"max_distance must be 0 to the index's {self.max_distance}, not {distance}"
            )
        state = self._table.snapshot()
        result: tuple[Rows, Rows, Rows] = kernels.hamming_search(
            self.permute(fingerprints),
            self._prefix_masks,
            distance,
            state.kernel_arrays(),
            self._rows.deleted.array,
        )
        return result

    def _check(self) -> None:
        """Assert the table invariants and that every table holds the same fingerprints."""
        self._check_rows()
        state = self._table.snapshot()
        for run in (state.main, state.middle, state.buffer):
            for lane in range(1, self.tables):
                assert np.array_equal(
                    np.sort(self._unpermute(run.keys[lane], lane)),
                    np.sort(self._unpermute(run.keys[0], 0)),
                ), "tables hold different fingerprints"

    def _unpermute(self, keys: npt.NDArray[np.uint64], table: int) -> npt.NDArray[np.uint64]:
        values = np.zeros(len(keys), dtype=np.uint64)
        position = 64
        for shift, width in zip(self._shifts[table], self._widths[table], strict=True):
            position -= int(width)
            mask = np.uint64((1 << int(width)) - 1) if width < 64 else np.uint64(2**64 - 1)
            values |= ((keys >> np.uint64(position)) & mask) << np.uint64(shift)
        return values
