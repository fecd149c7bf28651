"""Compiled loops of the local engine (numba, nogil: tables and bands run in threads).

Every pair kernel walks the runs of equal keys of one sorted table and emits each pair
of a run at most once over all tables: a pair whose keys are also equal in an earlier
table was emitted there. Kernels that emit pairs run twice, once to count (``fill``
False) and once to fill arrays of that size.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._shared_kernels import popcount64

_U64 = np.uint64


@njit(cache=True, nogil=True, inline="always")
def _run_end(sorted_keys: np.ndarray, start: int) -> int:
    """The end of the run of keys equal to the one at ``start``."""
    end = start + 1
    while end < sorted_keys.shape[0] and sorted_keys[end] == sorted_keys[start]:
        end += 1
    return end


@njit(cache=True, nogil=True, inline="always")
def _emit(out_a: np.ndarray, out_b: np.ndarray, count: int, a: int, b: int, fill: bool) -> int:
    """Pair (a, b) as (smaller, larger) at ``count`` when filling; the new count."""
    if fill:
        out_a[count] = min(a, b)
        out_b[count] = max(a, b)
    return count + 1


@njit(cache=True, nogil=True, inline="always")
def _equal_lane(keys: np.ndarray, a: int, b: int, lanes: int) -> bool:
    """Whether rows a and b of an (n, lanes) key matrix are equal in one of its first
    ``lanes`` lanes."""
    equal = False  # a loop, not any() over a generator: numba compiles a loop
    for lane in range(lanes):
        if keys[a, lane] == keys[b, lane]:
            equal = True
            break
    return equal


@njit(cache=True, nogil=True, inline="always")
def _agree(signatures: np.ndarray, a: int, b: int) -> int:
    """Positions where signatures a and b hold the same value, in its kept low bits
    (app/core/lsh.py, ``agreements``)."""
    agree = 0
    for v in range(signatures.shape[1]):
        if np.uint16(signatures[a, v]) == np.uint16(signatures[b, v]):
            agree += 1
    return agree


@njit(cache=True, nogil=True, inline="always")
def _first_met(a: int, b: int, table: int, pair_test: tuple) -> bool:  # type: ignore[type-arg]
    """Whether rows a and b, equal in ``table``, pair there. ``pair_test`` is (simhash,
    masks, max_distance, band_keys, signatures, signature_row, min_matches): with a
    ``simhash`` (a SimHash table), within ``max_distance`` bits and not sharing the
    leading blocks of an earlier table (``masks``); else (a band), equal in no earlier
    band and with at least ``min_matches`` equal signature values (row r's is
    ``signatures[signature_row[r]]``)."""
    simhash, masks, max_distance, band_keys, signatures, signature_row, min_matches = pair_test
    if simhash.shape[0] > 0:
        x = simhash[a] ^ simhash[b]
        if popcount64(x) > max_distance:
            return False
        met_before = False  # a loop, not any() over a generator: numba compiles a loop
        for earlier in range(table):
            if x & masks[earlier] == 0:
                met_before = True
                break
        return not met_before
    if _equal_lane(band_keys, a, b, table):
        return False
    return bool(_agree(signatures, signature_row[a], signature_row[b]) >= min_matches)


@njit(cache=True, nogil=True)
def table_pairs(
    sorted_keys: np.ndarray,
    order: np.ndarray,
    table: int,
    pair_test: tuple,  # type: ignore[type-arg]
    out_a: np.ndarray,
    out_b: np.ndarray,
    fill: bool,
) -> int:
    """Pairs (a < b) of one table, SimHash permutation table or MinHash band: equal keys
    (``sorted_keys`` ascending, ``order`` their rows: a SimHash table's ``simhash &
    masks[table]``, a band's keys) that pass ``_first_met`` with ``pair_test``. A SimHash
    table's test has empty band arrays, a band's an empty ``simhash``. O(sum of the runs'
    squares)."""
    count = 0
    start = 0
    while start < sorted_keys.shape[0]:
        end = _run_end(sorted_keys, start)
        for i in range(start, end):
            for j in range(i + 1, end):
                a, b = order[i], order[j]
                if _first_met(a, b, table, pair_test):
                    count = _emit(out_a, out_b, count, a, b, fill)
        start = end
    return count


@njit(cache=True, nogil=True)
def agreement(
    a: np.ndarray, b: np.ndarray, signatures: np.ndarray, signature_row: np.ndarray
) -> np.ndarray:
    """Equal values of the signatures of each pair (a[i], b[i])."""
    out = np.zeros(a.shape[0], dtype=np.int64)
    for i in range(a.shape[0]):
        out[i] = _agree(signatures, signature_row[a[i]], signature_row[b[i]])
    return out


@njit(cache=True, nogil=True)
def any_equal_lane(keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether rows a[i] and b[i] of an (n, lanes) key matrix are equal in some lane."""
    out = np.zeros(a.shape[0], dtype=np.bool_)
    for i in range(a.shape[0]):
        out[i] = _equal_lane(keys, a[i], b[i], keys.shape[1])
    return out


@njit(cache=True, nogil=True)
def components(count: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union-find over nodes 0..count-1 and edges (a[i], b[i]): each node's component
    named by its smallest node (union by smaller root, path halving)."""
    parent = np.arange(count, dtype=np.int64)
    for i in range(a.shape[0]):
        x = a[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        y = b[i]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y
    for node in range(count):
        root = node
        while parent[root] != root:
            root = parent[root]
        parent[node] = root
    return parent


@njit(cache=True, nogil=True)
def expand_pairs(
    pairs: tuple,  # type: ignore[type-arg]
    groups: tuple,  # type: ignore[type-arg]
    times: np.ndarray,
    window: int,
    across: tuple,  # type: ignore[type-arg]
    within: tuple,  # type: ignore[type-arg]
    fill: bool,
) -> tuple[int, int]:
    """Document pairs of representative ``pairs`` (a, b) and of ``groups`` (group_start,
    members) of identical documents, for the members whose ``times`` are at most
    ``window`` apart (all of them: equal times).

    Group g's members (positions) are ``members[group_start[g]:group_start[g+1]]``,
    sorted by time (``times[p]`` is member p's; by position among equal times). Every
    member of a's group pairs with the members of b's in its window: ``across`` gets (x,
    y, the index of the representative pair), x < y. Every two members of one group in
    the window pair too: ``within`` gets (x, y, the group). For member p of a's group the
    members of b's group in its window are a range that only moves forward as p does.
    Returns (pairs across groups, pairs within groups); writes them with ``fill`` (the
    output arrays sized by a first call without, or by the group sizes).
    """
    pair_a, pair_b = pairs
    group_start, members = groups
    out_x, out_y, out_pair = across
    within_x, within_y, within_group = within
    at = 0
    for i in range(pair_a.shape[0]):
        end = group_start[pair_b[i] + 1]
        lo = group_start[pair_b[i]]
        hi = lo
        for p in range(group_start[pair_a[i]], group_start[pair_a[i] + 1]):
            t = times[p]
            while lo < end and times[lo] < t - window:
                lo += 1
            hi = max(hi, lo)
            while hi < end and times[hi] <= t + window:
                hi += 1
            if not fill:
                at += hi - lo
                continue
            x = members[p]
            for q in range(lo, hi):
                y = members[q]
                out_x[at] = min(x, y)
                out_y[at] = max(x, y)
                out_pair[at] = i
                at += 1
    pairs_across = at
    at = 0
    for g in range(group_start.shape[0] - 1):
        end = group_start[g + 1]
        for p in range(group_start[g], end):
            q = p + 1
            while q < end and times[q] - times[p] <= window:
                if fill:
                    within_x[at] = min(members[p], members[q])
                    within_y[at] = max(members[p], members[q])
                    within_group[at] = g
                at += 1
                q += 1
    return pairs_across, at
