"""Compiled inner loops of the indexes (numba, nogil: they run beside merges and writers).

The layout they work on is SortedTable's (sorted_table.py): per run, keys and rows of
shape (lanes, n), each lane sorted; plus an unsorted tail. ``deleted`` marks tombstoned
rows; a row past its end (inserted after the reader's copy of it) counts as live.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
from numba import njit

from app.core._kernels import fmix64

_U64 = np.uint64
Scalar: TypeAlias = int | np.integer[Any]
_BAND_MULTIPLIER = 0x100000001B3
_BAND_SEED = 0x9E3779B97F4A7C15


@njit(cache=True, nogil=True, inline="always")
def popcount64(x: np.uint64) -> np.int64:
    """Number of set bits (SWAR: no per-bit loop)."""
    x = x - ((x >> _U64(1)) & _U64(0x5555555555555555))
    x = (x & _U64(0x3333333333333333)) + ((x >> _U64(2)) & _U64(0x3333333333333333))
    x = (x + (x >> _U64(4))) & _U64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * _U64(0x0101010101010101)) >> _U64(56))


@njit(cache=True, nogil=True, inline="always")
def is_deleted(row: Scalar, deleted: np.ndarray) -> bool:
    return bool(row < deleted.shape[0] and deleted[row])


@njit(cache=True, nogil=True, inline="always")
def lower_bound(keys: np.ndarray, value: np.uint64) -> int:
    """First index whose key is >= value."""
    low, high = 0, keys.shape[0]
    while low < high:
        middle = (low + high) >> 1
        if keys[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


@njit(cache=True, nogil=True, inline="always")
def upper_bound(keys: np.ndarray, value: np.uint64) -> int:
    """First index whose key is > value."""
    low, high = 0, keys.shape[0]
    while low < high:
        middle = (low + high) >> 1
        if keys[middle] <= value:
            low = middle + 1
        else:
            high = middle
    return low


DIRECTORY_SHIFT = 64 - 16  # app.core.sorted_table.DIRECTORY_BITS


@njit(cache=True, nogil=True, inline="always")
def directed_bounds(
    keys: np.ndarray, directory: np.ndarray, low: np.uint64, high: np.uint64
) -> tuple[int, int]:
    """(first index with key >= low, first index with key > high), through the lane's
    directory when it has one (only the bucket of each bound is searched)."""
    if directory.shape[0] == 0:
        return lower_bound(keys, low), upper_bound(keys, high)
    low_bucket = np.int64(low >> _U64(DIRECTORY_SHIFT))
    high_bucket = np.int64(high >> _U64(DIRECTORY_SHIFT))
    start, end = directory[low_bucket], directory[low_bucket + 1]
    while start < end:
        middle = (start + end) >> 1
        if keys[middle] < low:
            start = middle + 1
        else:
            end = middle
    first = start
    start, end = directory[high_bucket], directory[high_bucket + 1]
    while start < end:
        middle = (start + end) >> 1
        if keys[middle] <= high:
            start = middle + 1
        else:
            end = middle
    return first, start


@njit(cache=True, nogil=True)
def merge_sorted_lanes(
    first_keys: np.ndarray,
    first_rows: np.ndarray,
    second_keys: np.ndarray,
    second_rows: np.ndarray,
    dropped: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two runs lane by lane, leaving out rows marked in ``dropped``. O(L (n + m))."""
    lanes = first_keys.shape[0]
    kept = 0
    for i in range(first_rows.shape[1]):
        if not is_deleted(first_rows[0, i], dropped):
            kept += 1
    for i in range(second_rows.shape[1]):
        if not is_deleted(second_rows[0, i], dropped):
            kept += 1
    out_keys = np.empty((lanes, kept), dtype=np.uint64)
    out_rows = np.empty((lanes, kept), dtype=np.int32)
    n, m = first_keys.shape[1], second_keys.shape[1]
    for lane in range(lanes):
        i = j = out = 0
        while i < n or j < m:
            take_first = j >= m or (i < n and first_keys[lane, i] <= second_keys[lane, j])
            if take_first:
                key, row = first_keys[lane, i], first_rows[lane, i]
                i += 1
            else:
                key, row = second_keys[lane, j], second_rows[lane, j]
                j += 1
            if not is_deleted(row, dropped):
                out_keys[lane, out] = key
                out_rows[lane, out] = row
                out += 1
    return out_keys, out_rows


@njit(cache=True, nogil=True)
def permute_blocks(values: np.ndarray, shifts: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """(m, T) keys: for table t, the blocks ``shifts[t], widths[t]`` of each value moved,
    in that order, to the top of the word. A bit permutation, so Hamming distances of
    permuted keys equal those of the values.
    """
    tables, blocks = shifts.shape
    out = np.zeros((values.shape[0], tables), dtype=np.uint64)
    for i in range(values.shape[0]):
        value = values[i]
        for t in range(tables):
            position = 64
            key = _U64(0)
            for b in range(blocks):
                width = widths[t, b]
                if width == 0:
                    continue
                position -= width
                if width == 64:
                    key = value
                else:
                    block = (value >> _U64(shifts[t, b])) & ((_U64(1) << _U64(width)) - _U64(1))
                    key |= block << _U64(position)
            out[i, t] = key
    return out


@njit(cache=True, nogil=True)
def _append(
    rows: np.ndarray, values: np.ndarray, count: int, row: Scalar, value: Scalar
) -> tuple[np.ndarray, np.ndarray]:
    if count == rows.shape[0]:
        grown_rows = np.empty(rows.shape[0] * 2, dtype=rows.dtype)
        grown_values = np.empty(values.shape[0] * 2, dtype=values.dtype)
        grown_rows[:count] = rows[:count]
        grown_values[:count] = values[:count]
        rows, values = grown_rows, grown_values
    rows[count] = row
    values[count] = value
    return rows, values


@njit(cache=True, nogil=True)
def _reserve(
    rows: np.ndarray, values: np.ndarray, count: int, extra: int
) -> tuple[np.ndarray, np.ndarray]:
    """Room for ``extra`` more entries after ``count``: the scan loops then write directly."""
    needed = count + extra
    if needed <= rows.shape[0]:
        return rows, values
    capacity = max(needed, rows.shape[0] * 2)
    grown_rows = np.empty(capacity, dtype=rows.dtype)
    grown_values = np.empty(capacity, dtype=values.dtype)
    grown_rows[:count] = rows[:count]
    grown_values[:count] = values[:count]
    return grown_rows, grown_values


@njit(cache=True, nogil=True)
def _unique_by_row(rows: np.ndarray, values: np.ndarray, start: int, end: int) -> int:
    """Sort rows[start:end] (with values) by row and drop repeats in place; new end."""
    if end - start <= 1:
        return end
    order = np.argsort(rows[start:end])
    sorted_rows = rows[start:end][order]
    sorted_values = values[start:end][order]
    out = start
    for i in range(sorted_rows.shape[0]):
        if i == 0 or sorted_rows[i] != sorted_rows[i - 1]:
            rows[out] = sorted_rows[i]
            values[out] = sorted_values[i]
            out += 1
    return out


@njit(cache=True, nogil=True)
def hamming_search(
    queries: np.ndarray,
    prefix_masks: np.ndarray,
    max_distance: int,
    main_keys: np.ndarray,
    main_rows: np.ndarray,
    main_directory: np.ndarray,
    frozen_keys: np.ndarray,
    frozen_rows: np.ndarray,
    buffer_keys: np.ndarray,
    buffer_rows: np.ndarray,
    tail_keys: np.ndarray,
    tail_rows: np.ndarray,
    tail_count: int,
    deleted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every live row within ``max_distance`` of each query, once per query.

    ``queries`` is (q, T): query i permuted for each table. In table t, candidates are
    the keys sharing the query's prefix ``prefix_masks[t]``: a binary search for the
    range [q & mask, q | ~mask] in each sorted run. Returns (query_ends, rows,
    distances): the matches of query i are at [query_ends[i-1], query_ends[i]).
    """
    tables = queries.shape[1]
    rows = np.empty(64, dtype=np.int64)
    distances = np.empty(64, dtype=np.int64)
    count = 0
    query_ends = np.empty(queries.shape[0], dtype=np.int64)
    for qi in range(queries.shape[0]):
        start = count
        for t in range(tables):
            query = queries[qi, t]
            low = query & prefix_masks[t]
            high = low | ~prefix_masks[t]
            for run in range(3):
                if run == 0:
                    keys, run_rows = main_keys[t], main_rows[t]
                elif run == 1:
                    keys, run_rows = frozen_keys[t], frozen_rows[t]
                else:
                    keys, run_rows = buffer_keys[t], buffer_rows[t]
                if keys.shape[0] == 0:
                    continue
                if run == 0 and main_directory.shape[0] > 0:
                    first, last = directed_bounds(keys, main_directory[t], low, high)
                else:
                    first, last = lower_bound(keys, low), upper_bound(keys, high)
                rows, distances = _reserve(rows, distances, count, last - first)
                for i in range(first, last):
                    distance = popcount64(keys[i] ^ query)
                    row = np.int64(run_rows[i])
                    if distance <= max_distance and not is_deleted(row, deleted):
                        rows[count] = row
                        distances[count] = distance
                        count += 1
        rows, distances = _reserve(rows, distances, count, tail_count)
        for i in range(tail_count):
            distance = popcount64(tail_keys[0, i] ^ queries[qi, 0])
            row = np.int64(tail_rows[i])
            if distance <= max_distance and not is_deleted(row, deleted):
                rows[count] = row
                distances[count] = distance
                count += 1
        count = _unique_by_row(rows, distances, start, count)
        query_ends[qi] = count
    return query_ends, rows[:count], distances[:count]


@njit(cache=True, nogil=True)
def band_keys(signatures: np.ndarray, bands: int, rows_per_band: int) -> np.ndarray:
    """(m, bands) uint64: band j hashes values [j r, (j + 1) r) of each signature."""
    out = np.empty((signatures.shape[0], bands), dtype=np.uint64)
    for i in range(signatures.shape[0]):
        for band in range(bands):
            key = fmix64(_U64(_BAND_SEED) * _U64(band + 1))
            for offset in range(band * rows_per_band, (band + 1) * rows_per_band):
                key = (key ^ _U64(signatures[i, offset])) * _U64(_BAND_MULTIPLIER)
            out[i, band] = fmix64(key)
    return out


@njit(cache=True, nogil=True)
def lsh_search(
    query_bands: np.ndarray,
    query_signatures: np.ndarray,
    signatures: np.ndarray,
    min_matches: int,
    main_keys: np.ndarray,
    main_rows: np.ndarray,
    main_directory: np.ndarray,
    frozen_keys: np.ndarray,
    frozen_rows: np.ndarray,
    buffer_keys: np.ndarray,
    buffer_rows: np.ndarray,
    tail_keys: np.ndarray,
    tail_rows: np.ndarray,
    tail_count: int,
    deleted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Live rows sharing a band with each query whose signatures agree in at least
    ``min_matches`` of K positions. Returns (query_ends, rows, matching positions).
    """
    bands = query_bands.shape[1]
    num_perm = query_signatures.shape[1]
    candidates = np.empty(64, dtype=np.int64)
    unused = np.empty(64, dtype=np.int64)
    rows = np.empty(64, dtype=np.int64)
    matches = np.empty(64, dtype=np.int64)
    count = 0
    query_ends = np.empty(query_bands.shape[0], dtype=np.int64)
    for qi in range(query_bands.shape[0]):
        found = 0
        for band in range(bands):
            key = query_bands[qi, band]
            for run in range(3):
                if run == 0:
                    keys, run_rows = main_keys[band], main_rows[band]
                elif run == 1:
                    keys, run_rows = frozen_keys[band], frozen_rows[band]
                else:
                    keys, run_rows = buffer_keys[band], buffer_rows[band]
                if keys.shape[0] == 0:
                    continue
                if run == 0 and main_directory.shape[0] > 0:
                    i, _ = directed_bounds(keys, main_directory[band], key, key)
                else:
                    i = lower_bound(keys, key)
                while i < keys.shape[0] and keys[i] == key:
                    row = np.int64(run_rows[i])
                    if not is_deleted(row, deleted):
                        candidates, unused = _append(candidates, unused, found, row, 0)
                        found += 1
                    i += 1
            for i in range(tail_count):
                row = np.int64(tail_rows[i])
                if tail_keys[band, i] == key and not is_deleted(row, deleted):
                    candidates, unused = _append(candidates, unused, found, row, 0)
                    found += 1
        found = _unique_by_row(candidates, unused, 0, found)
        for c in range(found):
            row = candidates[c]
            agree = 0
            for position in range(num_perm):
                if signatures[row, position] == query_signatures[qi, position]:
                    agree += 1
            if agree >= min_matches:
                rows, matches = _append(rows, matches, count, row, agree)
                count += 1
        query_ends[qi] = count
    return query_ends, rows[:count], matches[:count]
