"""LSHIndex: MinHash signatures banded into SortedTable lanes, candidates verified.

Cut a K-value signature into b bands of r values; two documents whose signatures agree
on a whole band become candidates. For Jaccard s that happens with probability
1 - (1 - s^r)^b, an S-curve whose steepest part sits near (1/b)^(1/r). b and r are
chosen from the threshold t by minimising

    w_fp * integral_0^t P(s) ds  +  w_fn * integral_t^1 (1 - P(s)) ds,   b r <= K

(the areas of false positives and false negatives under the curve). The default weights
are 0.05 for false positives and 0.95 for false negatives: every candidate is verified
with the full signature, so a false positive costs only a comparison, while a false
negative is a duplicate let through. At t = 0.8, K = 128 this gives b = 16, r = 8: a pair
at exactly 0.8 is a candidate with probability 0.95 (0.74 with the 12 x 10 of weights
0.2 / 0.8, which lost 5 of the 14 misses of an earlier Reuters replay). The K - b r
values that no band uses still count in verification: the estimate uses all K values.

Verification compares the low 16 bits of each value (b-bit minwise hashing: Li and König,
WWW 2010), here, in the batch job and over Redis alike (``agreements``): two values that
differ agree in them once in 65,536, which raises an estimate by 1/K that rarely (the
pairs near the threshold are decided by the texts' exact Jaccard where they are kept), and
the index keeps half the bytes, 256 a 128-value signature. The band keys are made of the
whole values, so that a band's key says what it said before.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from app.core import _index_kernels as kernels
from app.core.row_array import RowArray
from app.core.sorted_table import top_halves
from app.core.table_index import TableIndex
from app.core.types import MinHashes, Rows

FALSE_POSITIVE_WEIGHT = 0.05
FALSE_NEGATIVE_WEIGHT = 0.95
_GRID = np.linspace(0.0, 1.0, 2001)
_PAIRS_AT_ONCE = 256  # (b, r) pairs per numpy call: 256 x 2,001 doubles, 4 MB a temporary
KEPT_BITS = 16  # of each signature value, compared in verification


def kept_values(signatures: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """The low KEPT_BITS bits of each signature value (a view where they are all there is)."""
    kept: npt.NDArray[np.uint16] = np.asarray(signatures).astype(np.uint16, copy=False)
    return kept


def agreements(first: npt.ArrayLike, second: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Per row of two (m, K) signature arrays (whole or kept values), the positions whose
    kept values are equal: the MinHash estimate's numerator. O(m K)."""
    equal = kept_values(first) == kept_values(second)
    counts: npt.NDArray[np.int64] = np.count_nonzero(equal, axis=-1).astype(np.int64, copy=False)
    return counts


def pair_agreements(
    first: npt.NDArray[np.unsignedinteger],
    first_at: Rows,
    second: npt.NDArray[np.unsignedinteger],
    second_at: Rows,
) -> Rows:
    """``agreements(first[first_at], second[second_at])`` in one compiled pass that makes
    neither (a batch of copies: 499,500 pairs of 128 values; a copy of 1,000 stored
    ones: 1,000 a copy). O(pairs K)."""
    counts: Rows = kernels.pair_agreements(
        np.ascontiguousarray(first),
        np.asarray(first_at, dtype=np.int64),
        np.ascontiguousarray(second),
        np.asarray(second_at, dtype=np.int64),
    )
    return counts


def candidate_probability(
    similarity: float | np.ndarray, bands: int | np.ndarray, rows: int | np.ndarray
) -> np.ndarray:
    """Probability that two signatures with Jaccard ``similarity`` share a band (arrays
    broadcast: a column of (b, r) pairs against a row of similarities)."""
    return np.asarray(1.0 - (1.0 - np.power(similarity, rows)) ** bands)


@lru_cache(maxsize=256)
def optimal_bands(
    threshold: float,
    num_perm: int,
    false_positive_weight: float = FALSE_POSITIVE_WEIGHT,
    false_negative_weight: float = FALSE_NEGATIVE_WEIGHT,
) -> tuple[int, int]:
    """(b, r) minimising the weighted false positive and false negative areas; the first
    (b, then r, ascending) of those within 1e-12 of the least. O(K log K) pairs, each
    integrated over a 2,001-point grid, _PAIRS_AT_ONCE pairs per numpy call (a start
    makes a collection's index with it, so one pair at a time would slow every start)."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be between 0 and 1 (exclusive), not {threshold}")
    below, above = _GRID[threshold >= _GRID], _GRID[threshold <= _GRID]
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    errors: list[float] = []
    for start in range(0, len(pairs), _PAIRS_AT_ONCE):
        chunk = np.array(pairs[start : start + _PAIRS_AT_ONCE], dtype=np.int64)
        bands, rows = chunk[:, :1], chunk[:, 1:]
        false_positive = np.trapezoid(candidate_probability(below, bands, rows), below, axis=1)
        false_negative = np.trapezoid(1 - candidate_probability(above, bands, rows), above, axis=1)
        errors += (
            false_positive_weight * false_positive + false_negative_weight * false_negative
        ).tolist()
    best: tuple[float, int, int] = (math.inf, 1, num_perm)
    for (bands_count, rows_count), error in zip(pairs, errors, strict=True):
        if error < best[0] - 1e-12:
            best = (error, bands_count, rows_count)
    return best[1], best[2]


def min_matches(threshold: float, num_perm: int) -> int:
    """Fewest agreeing positions whose estimate (matches / K) reaches the threshold."""
    return max(1, math.ceil(threshold * num_perm - 1e-9))


class LSHIndex(TableIndex):
    """Near-duplicates by estimated Jaccard >= threshold, verified, with their scores.

    >>> index = LSHIndex(threshold=0.8, num_perm=4)
    >>> index.bands, index.rows_per_band
    (2, 2)
    >>> index.insert(np.array([[1, 2, 3, 4], [9, 9, 9, 9]], dtype=np.uint32), np.array([0, 1]))
    >>> rows, scores = index.search(np.array([1, 2, 3, 4], dtype=np.uint32))
    >>> rows.tolist(), scores.tolist()
    ([0], [1.0])
    """

    def __init__(
        self,
        threshold: float = 0.8,
        num_perm: int = 128,
        bands: tuple[int, int] | None = None,
        whole_values: bool = False,
    ) -> None:
        """``whole_values``: keep each signature's 32-bit values, not only the bits that
        verification compares: for a collection that keeps no texts, whose search by a
        stored document's id takes that document's band keys from them."""
        self.threshold = threshold
        self.num_perm = num_perm
        self.bands, self.rows_per_band = bands or optimal_bands(threshold, num_perm)
        if self.bands * self.rows_per_band > num_perm:
            raise ValueError("bands x rows per band must not exceed num_perm")
        self.whole_values = whole_values
        self._signatures = RowArray(np.uint32 if whole_values else np.uint16, (num_perm,))
        # The table keeps the top 32 bits of each band key (8 bytes an entry with its
        # row): two bands that differ share them once in 2^32, and every candidate's
        # signature is verified anyway.
        super().__init__(lanes=self.bands, values=self._signatures, key_type=np.uint32)

    def band_keys(self, signatures: MinHashes) -> npt.NDArray[np.uint64]:
        """(m, b) uint64 band hashes of (m, K) signatures."""
        keys: npt.NDArray[np.uint64] = kernels.band_keys(
            self._as_signatures(signatures), self.bands, self.rows_per_band
        )
        return keys

    def _as_signatures(self, signatures: MinHashes) -> MinHashes:
        array = np.ascontiguousarray(signatures, dtype=np.uint32)
        if array.ndim == 1:
            array = array.reshape(1, -1)
        if array.shape[1] != self.num_perm:
            raise ValueError(f"signatures must have {self.num_perm} values, not {array.shape[1]}")
        return array

    def insert(self, signatures: MinHashes, rows: npt.NDArray[np.integer]) -> None:
        """Store signatures under new row numbers and index their bands."""
        signatures = self._as_signatures(signatures)
        rows = self._rows.claim(rows)
        # A restart's signatures, rows 0 .. n - 1 loaded into a reservation: held as they
        # are (app/storage/sqlite.py loads them so), not copied (512 bytes a document),
        # where the index keeps the whole values.
        adopted = (
            self.whole_values
            and self._signatures.size == 0
            and len(rows) > 0
            and int(rows[0]) == 0
            and bool((np.diff(rows) == 1).all())
            and self._signatures.adopt(signatures)
        )
        self.adopted_values = self.adopted_values or adopted
        self._signatures.ensure(self._rows.present.size)
        # The signature is written before the row enters a table: a reader that finds
        # the row can always verify it.
        if not adopted:
            # Into 16-bit values, the assignment's cast keeps each value's low bits (as
            # kept_values does) without a copy of them all: a restart's rebuild writes
            # every row at once.
            self._signatures.array[rows] = signatures
        self._table.insert(top_halves(self.band_keys(signatures)), rows)

    def signatures(self, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.unsignedinteger]:
        """The stored signatures of rows (deleted ones included): their kept values, or
        the whole ones with ``whole_values``."""
        stored: npt.NDArray[np.unsignedinteger] = self._signatures.array[
            np.asarray(rows, dtype=np.int64)
        ]
        return stored

    def agreements_with(self, queries: MinHashes, positions: Rows, rows: Rows) -> Rows:
        """``agreements`` of each query signature (``queries[positions[i]]``) with the
        stored one of ``rows[i]``, read in place. O(pairs K)."""
        return pair_agreements(queries, positions, self._signatures.array, rows)

    def search(
        self, signature: MinHashes, threshold: float | None = None, limit: int | None = None
    ) -> tuple[Rows, npt.NDArray[np.float64]]:
        """(rows, estimated Jaccard) of live documents at or above the threshold, best first."""
        _, rows, scores = self.search_many(signature, threshold)
        if limit is None:
            return rows, scores
        return rows[:limit], scores[:limit]

    def search_many(
        self, signatures: MinHashes, threshold: float | None = None
    ) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
        """Search a batch: (ends, rows, scores), query i's matches at [ends[i-1], ends[i]),
        best first (ties by row), exactly as ``search`` returns them.

        A threshold below the index's own finds only what its bands make candidates.
        """
        signatures = self._as_signatures(signatures)
        bar = self.threshold if threshold is None else threshold
        state = self._table.snapshot()
        stored = self._signatures.array  # read after the snapshot: holds all its rows
        ends, rows, scores = kernels.lsh_search(
            signatures,
            self.bands,
            self.rows_per_band,
            stored,
            min_matches(bar, self.num_perm),
            state.kernel_arrays(),
            self._rows.deleted.array,
        )
        return ends, rows, scores

    def _check(self) -> None:
        """Assert table invariants and, where the whole values are kept, that every live
        row's band key matches its signature (a deleted row's signature may be given
        back: zeros)."""
        self._check_rows()
        if not self.whole_values:
            return
        state = self._table.snapshot()
        deleted = self._rows.deleted.array
        for run in (state.main, state.middle, state.buffer):
            for band in range(self.bands):
                live = ~deleted[run.rows[band]]
                rows = run.rows[band][live]
                expected = top_halves(self.band_keys(self.signatures(rows)))[:, band]
                assert np.array_equal(run.keys[band][live], expected), "a band key is stale"
