"""Compiled helpers every kernel module calls (the index's, the n-gram index's, the
passages' and the batch job's): bit counts, binary search over a sorted range, galloping
from a previous position, sorting a short range, ordering candidates best first, and
growing a scratch array.
Written once; a module that needs one imports it (numba links the callee into the
caller's compiled code, so a call costs what the inlined loop did).

numba's on-disk cache keys a kernel by its own source file: after a change here, the
callers' cached code is stale until their files change too or the cache is cleared
(``neardup warm-up`` after ``find app -name '*.nbi' -delete``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_U64 = np.uint64


@njit(cache=True, nogil=True, inline="always")
def as_int(value: int) -> int:
    """``value`` as an int64: a kernel called with a uint8 width, an int32 length or a
    literal is compiled again for each of those types (bench/compile_costs.py)."""
    return np.int64(value)  # type: ignore[return-value]


@njit(cache=True, nogil=True, inline="always")
def popcount64(x: np.uint64) -> np.int64:
    """Number of set bits (SWAR: no per-bit loop)."""
    x = x - ((x >> _U64(1)) & _U64(0x5555555555555555))
    x = (x & _U64(0x3333333333333333)) + ((x >> _U64(2)) & _U64(0x3333333333333333))
    x = (x + (x >> _U64(4))) & _U64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * _U64(0x0101010101010101)) >> _U64(56))


@njit(cache=True, nogil=True, inline="always")
def first_at_least(keys: np.ndarray, low: int, high: int, value: np.uint64) -> int:
    """The first index in [low, high) of sorted ``keys`` whose key is >= value (high if
    none): bisection, O(log (high - low))."""
    while low < high:
        middle = (low + high) >> 1
        if keys[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


@njit(cache=True, nogil=True, inline="always")
def first_above(keys: np.ndarray, low: int, high: int, value: np.uint64) -> int:
    """The first index in [low, high) of sorted ``keys`` whose key is > value (high if
    none): bisection, O(log (high - low))."""
    while low < high:
        middle = (low + high) >> 1
        if keys[middle] <= value:
            low = middle + 1
        else:
            high = middle
    return low


@njit(cache=True, nogil=True)
def gallop(keys: np.ndarray, low: int, high: int, guess: int, value: np.uint64) -> int:
    """The first index in [low, high) whose key is >= value (high if none), searching
    outwards from ``guess`` in doubling steps, then by bisection: O(log distance), so
    ascending lookups cost O(log distance) from the previous one."""
    if guess < high and keys[guess] < value:
        low = guess + 1  # the answer lies after the guess
        step = 1
        while True:
            probe = low + step - 1
            if probe >= high:
                break
            if keys[probe] >= value:
                high = probe
                break
            low = probe + 1
            step *= 2
    else:
        high = min(guess, high)  # the answer lies at or before the guess
        step = 1
        while True:
            probe = high - step
            if probe < low:
                break
            if keys[probe] < value:
                low = probe + 1
                break
            high = probe
            step *= 2
    return first_at_least(keys, low, high, value)


@njit(cache=True, nogil=True)
def sort_range(values: np.ndarray, start: int, end: int) -> None:
    """Sort values[start:end] in place: by insertion up to 32 values (a query's handful
    of candidates, too few for a library sort), by numpy's sort above."""
    if end - start > 32:
        values[start:end].sort()
        return
    for i in range(start + 1, end):
        value = values[i]
        j = i
        while j > start and values[j - 1] > value:
            values[j] = values[j - 1]
            j -= 1
        values[j] = value


@njit(cache=True, nogil=True)
def best_first(rows: np.ndarray, scores: np.ndarray, start: int, end: int) -> None:
    """Order [start, end), rows ascending on entry, by score descending, ties by row."""
    if end - start > 32:
        order = np.argsort(-scores[start:end], kind="mergesort")  # stable: rows stay sorted
        rows[start:end] = rows[start:end][order]
        scores[start:end] = scores[start:end][order]
        return
    for i in range(start + 1, end):
        row, score = rows[i], scores[i]
        j = i
        while j > start and scores[j - 1] < score:
            rows[j], scores[j] = rows[j - 1], scores[j - 1]
            j -= 1
        rows[j], scores[j] = row, score


@njit(cache=True, nogil=True)
def grow(values: np.ndarray, needed: int) -> np.ndarray:
    """``values`` with room for ``needed`` (at least twice as many, copied), or itself
    where it has it already. O(len) when it grows."""
    if needed <= values.shape[0]:
        return values
    grown = np.empty(max(needed, 2 * values.shape[0]), dtype=values.dtype)
    grown[: values.shape[0]] = values
    return grown


# A bucket of uniform_order holding more keys than this is sorted by argsort.
_INSERTION_SORT_MOST = 24


@njit(cache=True, nogil=True, inline="always")
def key_bits(keys: np.ndarray) -> int:
    """The width of ``keys``' type: 64, or 32 for a table of top halves
    (sorted_table.top_halves)."""
    return 8 * keys.itemsize


@njit(cache=True, nogil=True)
def uniform_order(keys: np.ndarray) -> np.ndarray:
    """The order that sorts ``keys`` when they are spread evenly over their type (uint64:
    ``fmix64``'s outputs; uint32: their top halves): each goes to one of about n buckets
    by its top bits, and each bucket is sorted by insertion (a larger one by argsort:
    keys that are not even cost more, never a wrong order). O(n) expected, where
    argsort's O(n log n) took most of a batch's lookup."""
    n = keys.shape[0]
    order = np.empty(n, dtype=np.int64)
    if n < 2:
        order[:n] = 0
        return order
    bits = 1
    while (1 << bits) < n:
        bits += 1
    shift = _U64(key_bits(keys) - bits)
    starts = np.zeros((1 << bits) + 1, dtype=np.int64)
    for at in range(n):
        starts[np.int64(keys[at] >> shift) + 1] += 1
    for bucket in range(1 << bits):
        starts[bucket + 1] += starts[bucket]
    fill = starts[:-1].copy()
    for at in range(n):
        home = np.int64(keys[at] >> shift)
        order[fill[home]] = at
        fill[home] += 1
    for bucket in range(1 << bits):
        low, high = starts[bucket], starts[bucket + 1]
        if high - low > _INSERTION_SORT_MOST:
            held = order[low:high].copy()
            order[low:high] = held[np.argsort(keys[held])]
            continue
        for at in range(low + 1, high):
            moving = order[at]
            key = keys[moving]
            to = at
            while to > low and keys[order[to - 1]] > key:
                order[to] = order[to - 1]
                to -= 1
            order[to] = moving
    return order
