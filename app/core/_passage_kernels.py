"""Compiled inner loops of the passage index (app/core/passages.py): tokens with their
offsets, k-gram hashes, winnowing, and the extension of seeds to maximal equal runs.
tests/core/test_passages.py re-computes each with plain Python."""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._kernels import CLASS_SINGLE_CHAR_TOKEN, CLASS_WORD, POLY_MULTIPLIER, fmix64

_U64 = np.uint64


@njit(cache=True, nogil=True)
def token_spans(
    code_points: np.ndarray,
    classes: np.ndarray,
    folded: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    hashes: np.ndarray,
) -> int:
    """Tokens of a text into ``starts``/``ends`` (code point offsets, end exclusive) and
    ``hashes`` (of each token's folded code points); returns the count. A token is a
    maximal run of word characters, or one character of a script written without spaces.
    O(length)."""
    multiplier = _U64(POLY_MULTIPLIER)
    count = 0
    poly = _U64(0)
    start = -1
    for position in range(code_points.shape[0]):
        code_point = code_points[position]
        kind = classes[code_point]
        if kind == CLASS_WORD:
            if start < 0:
                start = position
                poly = _U64(0)
            poly = poly * multiplier + _U64(folded[code_point]) + _U64(1)
            continue
        if start >= 0:
            starts[count], ends[count], hashes[count] = start, position, fmix64(poly)
            count += 1
            start = -1
        if kind == CLASS_SINGLE_CHAR_TOKEN:
            starts[count], ends[count] = position, position + 1
            hashes[count] = fmix64(_U64(folded[code_point]) + _U64(1))
            count += 1
    if start >= 0:
        starts[count], ends[count], hashes[count] = start, code_points.shape[0], fmix64(poly)
        count += 1
    return count


@njit(cache=True, nogil=True)
def kgram_hashes(tokens: np.ndarray, k: int, out: np.ndarray) -> int:
    """The hash of every k consecutive tokens into ``out``; returns the count (0 for
    fewer than k tokens). O(n k)."""
    count: int = tokens.shape[0] - k + 1
    if count <= 0:
        return 0
    multiplier = _U64(POLY_MULTIPLIER)
    for start in range(count):
        poly = _U64(0)
        for offset in range(k):
            poly = poly * multiplier + tokens[start + offset]
        out[start] = fmix64(poly)
    return count


@njit(cache=True, nogil=True)
def winnow(hashes: np.ndarray, window: int, positions: np.ndarray) -> int:
    """Robust winnowing (Schleimer, Wilkerson, Aiken 2003): in each window of ``window``
    consecutive hashes the smallest is chosen, the rightmost on a tie, and recorded once
    per run of windows that chose it. Any run of ``window`` hashes equal in two texts
    shares a chosen one. Fewer hashes than a window: the smallest of them. Positions
    into ``positions``; returns the count. The window is scanned again only when its
    smallest leaves it: O(n) expected for random hashes, O(n window) at worst."""
    n = hashes.shape[0]
    if n == 0:
        return 0
    width = min(window, n)
    count = 0
    last = -1
    best = -1
    for start in range(n - width + 1):
        end = start + width - 1  # the hash that entered the window
        if best < start:  # the smallest left: scan the whole window
            best = start
            for at in range(start + 1, end + 1):
                if hashes[at] <= hashes[best]:
                    best = at
        elif hashes[end] <= hashes[best]:  # the rightmost smallest: a tie moves right
            best = end
        if best != last:
            positions[count] = best
            count += 1
            last = best
    return count


@njit(cache=True, nogil=True)
def equal_runs(
    query: np.ndarray,
    stored: np.ndarray,
    seed_query: np.ndarray,
    seed_stored: np.ndarray,
    k: int,
    minimum: int,
    out: np.ndarray,
) -> int:
    """The maximal runs of equal tokens through each seed (a k-gram starting at
    ``seed_query[i]`` in ``query`` and ``seed_stored[i]`` in ``stored``, verified token by
    token), at least ``minimum`` tokens long, each once: rows of ``out`` are (query
    start, query end, stored start, stored end), token indexes, end exclusive; returns
    the count. Seeds must come sorted by diagonal (stored - query), then query start: a
    seed inside the run found last on its diagonal is skipped. O(seeds + run lengths)."""
    count = 0
    last_diagonal = np.int64(-(1 << 62))
    last_end = np.int64(-1)
    for i in range(seed_query.shape[0]):
        q = np.int64(seed_query[i])
        s = np.int64(seed_stored[i])
        diagonal = s - q
        if diagonal == last_diagonal and q < last_end:
            continue
        same = True
        for offset in range(k):
            if query[q + offset] != stored[s + offset]:
                same = False
                break
        if not same:
            continue
        q_start, s_start = q, s
        while q_start > 0 and s_start > 0 and query[q_start - 1] == stored[s_start - 1]:
            q_start -= 1
            s_start -= 1
        q_end, s_end = q + k, s + k
        while q_end < query.shape[0] and s_end < stored.shape[0] and query[q_end] == stored[s_end]:
            q_end += 1
            s_end += 1
        last_diagonal, last_end = diagonal, q_end
        if q_end - q_start >= minimum:
            out[count, 0], out[count, 1] = q_start, q_end
            out[count, 2], out[count, 3] = s_start, s_end
            count += 1
    return count


@njit(cache=True, nogil=True)
def fingerprint_keys(tokens: np.ndarray, k: int, window: int, out: np.ndarray) -> int:
    """A text's winnowed k-gram hashes (``winnow`` of ``kgram_hashes``), sorted, each
    once, into ``out`` (as long as the k-grams); returns the count. One pass each, then
    a sort of the chosen ones: O(n (k + window) + f log f)."""
    count = kgram_hashes(tokens, k, out)
    if count == 0:
        return 0
    positions = np.empty(count, dtype=np.int64)
    chosen = winnow(out[:count], window, positions)
    keys = np.sort(out[positions[:chosen]])
    unique = 0
    for at in range(chosen):
        if unique == 0 or keys[at] != out[unique - 1]:
            out[unique] = keys[at]
            unique += 1
    return unique


@njit(cache=True, nogil=True)
def passage_runs(
    query: np.ndarray, stored: np.ndarray, k: int, minimum: int, per_kgram: int
) -> np.ndarray:
    """``equal_runs`` of two token hash arrays, seeded by every k-gram they share (at
    most ``per_kgram`` occurrences of one in ``stored``): rows (query start, query end,
    stored start, stored end), sorted by query start. O((n + m) log m + seeds + runs)."""
    n, m = query.shape[0] - k + 1, stored.shape[0] - k + 1
    if n <= 0 or m <= 0:
        return np.empty((0, 4), dtype=np.int64)
    query_grams = np.empty(n, dtype=np.uint64)
    stored_grams = np.empty(m, dtype=np.uint64)
    kgram_hashes(query, k, query_grams)
    kgram_hashes(stored, k, stored_grams)
    order = np.argsort(stored_grams, kind="mergesort")
    sorted_grams = stored_grams[order]
    seed_query = np.empty(n * per_kgram, dtype=np.int64)
    seed_stored = np.empty(n * per_kgram, dtype=np.int64)
    seeds = 0
    for q in range(n):
        at = np.searchsorted(sorted_grams, query_grams[q])
        taken = 0
        while at < m and sorted_grams[at] == query_grams[q] and taken < per_kgram:
            seed_query[seeds] = q
            seed_stored[seeds] = order[at]
            seeds += 1
            at += 1
            taken += 1
    if seeds == 0:
        return np.empty((0, 4), dtype=np.int64)
    # By diagonal (stored - query), then query start: offset so that the key is >= 0.
    keys = (seed_stored[:seeds] - seed_query[:seeds] + n) * (n + 1) + seed_query[:seeds]
    by_diagonal = np.argsort(keys, kind="mergesort")
    runs = np.empty((seeds, 4), dtype=np.int64)
    count = equal_runs(
        query, stored, seed_query[by_diagonal], seed_stored[by_diagonal], k, minimum, runs
    )
    runs = runs[:count]
    return runs[np.argsort(runs[:, 0] * (m + k + 1) + runs[:, 2], kind="mergesort")]


@njit(cache=True, nogil=True)
def fingerprint_texts(
    code_points: np.ndarray,
    bounds: np.ndarray,
    classes: np.ndarray,
    folded: np.ndarray,
    k: int,
    window: int,
    keys: np.ndarray,
    key_bounds: np.ndarray,
) -> None:
    """``fingerprint_keys`` of several texts in one call: text i is code points
    ``[bounds[i], bounds[i + 1])``; its keys go to ``keys[key_bounds[i]:key_bounds[i + 1]]``
    (``keys`` as long as the code points, ``key_bounds`` one longer than the texts).
    No token offsets are kept: an insert needs them only for the few texts with
    candidates. O(length (k + window))."""
    longest = 0
    for text in range(bounds.shape[0] - 1):
        longest = max(longest, bounds[text + 1] - bounds[text])
    starts = np.empty(longest, dtype=np.int64)
    ends = np.empty(longest, dtype=np.int64)
    hashes = np.empty(longest, dtype=np.uint64)
    key_bounds[0] = 0
    for text in range(bounds.shape[0] - 1):
        count = token_spans(
            code_points[bounds[text] : bounds[text + 1]], classes, folded, starts, ends, hashes
        )
        at = key_bounds[text]
        key_bounds[text + 1] = at + fingerprint_keys(hashes[:count], k, window, keys[at:])
