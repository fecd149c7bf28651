"""Compiled inner loops of fingerprinting (numba, compiled on first use and cached on disk).

Everything here works on code point arrays and returns numbers; the meaning of each
number is defined in ``fingerprint.py``, and ``tests/core/test_fingerprint.py`` re-computes all
of it with a plain Python loop per shingle. numba was chosen over plain numpy after
measurement (docs/benchmarks.md): numpy must materialise an (shingles x 64) bit matrix for
SimHash and an (shingles x K) matrix for classic MinHash, while one compiled pass over the
shingle hashes does both from cache-resident data.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_U64 = np.uint64
# The 64-bit FNV prime: an odd multiplier with well-spread bits, used for polynomial
# hashing of code points and of token hashes; fmix64 afterwards removes its weaknesses.
POLY_MULTIPLIER = 0x100000001B3
# Distinct odd constants so that densification probes never coincide with shingle hashes.
DENSIFY_BIN_MULTIPLIER = 0x9E3779B97F4A7C15
DENSIFY_ATTEMPT_MULTIPLIER = 0xC2B2AE3D27D4EB4F

CLASS_SEPARATOR = 0
CLASS_WORD = 1
CLASS_SINGLE_CHAR_TOKEN = 2


@njit(cache=True, nogil=True, inline="always")
def fmix64(h: np.uint64) -> np.uint64:
    """MurmurHash3's 64-bit finaliser: every input bit affects every output bit."""
    h ^= h >> _U64(33)
    h *= _U64(0xFF51AFD7ED558CCD)
    h ^= h >> _U64(33)
    h *= _U64(0xC4CEB93F40A6BEC5)
    h ^= h >> _U64(33)
    return h


@njit(cache=True, nogil=True)
def char_shingle_hashes(
    code_points: np.ndarray, size: int, seed_mix: np.uint64, out: np.ndarray
) -> int:
    """Hashes of every character n-gram of ``code_points`` into ``out``; returns the count.

    A text shorter than ``size`` gives one shingle: the whole text.
    """
    length: int = code_points.shape[0]
    width = min(size, length)
    count = length - width + 1
    multiplier = _U64(POLY_MULTIPLIER)
    for start in range(count):
        poly = _U64(0)
        for offset in range(width):
            poly = poly * multiplier + _U64(code_points[start + offset]) + _U64(1)
        out[start] = fmix64(poly ^ seed_mix)
    return count


@njit(cache=True, nogil=True)
def word_shingle_hashes(
    code_points: np.ndarray,
    size: int,
    seed_mix: np.uint64,
    char_classes: np.ndarray,
    token_scratch: np.ndarray,
    out: np.ndarray,
) -> int:
    """Hashes of every word n-gram into ``out``; returns the count.

    Tokens are maximal runs of word characters; each character of a script written
    without spaces is a token of its own. A text with fewer than ``size`` tokens gives one
    shingle of all its tokens, and a text with no token at all (only punctuation) is
    taken as one token.
    """
    multiplier = _U64(POLY_MULTIPLIER)
    tokens = 0
    poly = _U64(0)
    in_token = False
    for position in range(code_points.shape[0]):
        code_point = code_points[position]
        kind = char_classes[code_point]
        if kind == CLASS_WORD:
            poly = poly * multiplier + _U64(code_point) + _U64(1)
            in_token = True
            continue
        if in_token:
            token_scratch[tokens] = fmix64(poly)
            tokens += 1
            poly = _U64(0)
            in_token = False
        if kind == CLASS_SINGLE_CHAR_TOKEN:
            token_scratch[tokens] = fmix64(_U64(code_point) + _U64(1))
            tokens += 1
    if in_token:
        token_scratch[tokens] = fmix64(poly)
        tokens += 1
    if tokens == 0:
        poly = _U64(0)
        for position in range(code_points.shape[0]):
            poly = poly * multiplier + _U64(code_points[position]) + _U64(1)
        token_scratch[0] = fmix64(poly)
        tokens = 1
    width = min(size, tokens)
    count = tokens - width + 1
    for start in range(count):
        poly = _U64(0)
        for offset in range(width):
            poly = poly * multiplier + token_scratch[start + offset]
        out[start] = fmix64(poly ^ seed_mix)
    return count


@njit(cache=True, nogil=True)
def simhash64(hashes: np.ndarray, count: int) -> np.uint64:
    """Charikar's SimHash over the distinct shingles, weight 1 each.

    Bit b is set when more than half of the distinct shingle hashes have bit b set (a
    tie leaves it clear). Counting distinct shingles, not occurrences, keeps a shingle
    repeated many times (rows of dots in a table) from pulling unrelated texts together.
    Repeats are found with an open-addressing set (linear in the shingles, no sort).
    """
    capacity = 16
    while capacity < 2 * count:
        capacity *= 2
    mask = _U64(capacity - 1)
    seen = np.zeros(capacity, dtype=np.uint64)
    seen_zero = False  # 0 marks an empty slot, so the hash 0 is tracked apart
    ones = np.zeros(64, dtype=np.int64)
    total = 0
    for i in range(count):
        h = hashes[i]
        if h == 0:
            if seen_zero:
                continue
            seen_zero = True
        else:
            # The high half indexes the table (the hashes are fmix64 outputs, well spread).
            slot = (h >> _U64(32)) & mask
            duplicate = False
            while seen[slot] != 0:
                if seen[slot] == h:
                    duplicate = True
                    break
                slot = (slot + _U64(1)) & mask
            if duplicate:
                continue
            seen[slot] = h
        total += 1
        for bit in range(64):
            ones[bit] += np.int64((h >> _U64(bit)) & _U64(1))
    fingerprint = _U64(0)
    for bit in range(64):
        if 2 * ones[bit] > total:
            fingerprint |= _U64(1) << _U64(bit)
    return fingerprint


@njit(cache=True, nogil=True)
def one_permutation_minhash(
    hashes: np.ndarray, count: int, seed_mix: np.uint64, out: np.ndarray
) -> None:
    """One-permutation MinHash with optimal densification into ``out`` (K uint32 values).

    The high 32 bits of a shingle hash pick its bin (multiply-shift onto 0..K-1), the low
    32 bits are its value; each bin keeps its minimum. An empty bin j copies the value of
    the first non-empty bin among probes fmix64(seed ^ (j * A + attempt * B)) mod K,
    attempt = 1, 2, ... (Shrivastava 2017), so two documents with the same non-empty bins
    fill their empty ones identically.
    """
    num_bins = out.shape[0]
    filled = np.zeros(num_bins, dtype=np.bool_)
    for i in range(count):
        h = hashes[i]
        bin_index = np.int64(((h >> _U64(32)) * _U64(num_bins)) >> _U64(32))
        value = np.uint32(h & _U64(0xFFFFFFFF))
        if not filled[bin_index] or value < out[bin_index]:
            out[bin_index] = value
            filled[bin_index] = True
    empty_bins = []
    for j in range(num_bins):
        if not filled[j]:
            empty_bins.append(j)
    for j in empty_bins:
        attempt = 1
        while True:
            probe = fmix64(
                seed_mix
                ^ (
                    _U64(j) * _U64(DENSIFY_BIN_MULTIPLIER)
                    + _U64(attempt) * _U64(DENSIFY_ATTEMPT_MULTIPLIER)
                )
            )
            source = np.int64(probe % _U64(num_bins))
            if filled[source]:
                out[j] = out[source]
                break
            attempt += 1


@njit(cache=True, nogil=True)
def classic_minhash(
    hashes: np.ndarray, count: int, multipliers: np.ndarray, increments: np.ndarray, out: np.ndarray
) -> None:
    """Classic K-permutation MinHash: value k is min over shingles of (a_k h + b_k) >> 32."""
    num_perm = out.shape[0]
    for k in range(num_perm):
        out[k] = np.uint32(0xFFFFFFFF)
    for i in range(count):
        h = hashes[i]
        for k in range(num_perm):
            value = np.uint32((multipliers[k] * h + increments[k]) >> _U64(32))
            if value < out[k]:
                out[k] = value


@njit(cache=True, nogil=True, inline="always")
def _shingle_scratch(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shingle scratch, token scratch), each as long as the longest document of
    ``offsets`` (document d is ``[offsets[d], offsets[d + 1])``)."""
    longest = 1
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    return np.empty(longest, dtype=np.uint64), np.empty(longest, dtype=np.uint64)


@njit(cache=True, nogil=True, inline="always")
def _shingles(
    document: np.ndarray,
    unit: tuple,  # type: ignore[type-arg]
    char_classes: np.ndarray,
    token_scratch: np.ndarray,
    out: np.ndarray,
) -> int:
    """A document's shingle hashes into ``out`` (``unit``: (word unit, size, seed mix)),
    word or character shingles; returns the count."""
    word_unit, size, seed_mix = unit
    if word_unit:
        return word_shingle_hashes(document, size, seed_mix, char_classes, token_scratch, out)
    return char_shingle_hashes(document, size, seed_mix, out)


@njit(cache=True, nogil=True)
def fingerprint_documents(
    code_points: np.ndarray,
    offsets: np.ndarray,
    word_unit: bool,
    size: int,
    seed_mix: np.uint64,
    char_classes: np.ndarray,
    simhash_out: np.ndarray,
    minhash_out: np.ndarray,
) -> None:
    """SimHash and one-permutation MinHash of every document of a batch.

    Document d is ``code_points[offsets[d]:offsets[d + 1]]`` (never empty). The shingle
    hashes of one document live only in a scratch buffer reused by the next.
    """
    scratch, token_scratch = _shingle_scratch(offsets)
    unit = (word_unit, size, seed_mix)
    for d in range(offsets.shape[0] - 1):
        document = code_points[offsets[d] : offsets[d + 1]]
        count = _shingles(document, unit, char_classes, token_scratch, scratch)
        simhash_out[d] = simhash64(scratch, count)
        one_permutation_minhash(scratch, count, seed_mix, minhash_out[d])


@njit(cache=True, nogil=True)
def normalize_ascii(
    text: np.ndarray, offsets: np.ndarray, out: np.ndarray, out_offsets: np.ndarray
) -> None:
    """text.normalize for ASCII documents, without the GIL: lower-case, white space runs
    to one space, none at either end (what casefold and " ".join(split()) do to ASCII).

    Document d is ``text[offsets[d]:offsets[d + 1]]`` (uint8); its normal form is written
    to ``out[out_offsets[d]:out_offsets[d + 1]]``. White space is what str.split splits
    ASCII on (tab, line feed, vertical tab, form feed, carriage return, 0x1C-0x1F, space)
    and, as text.repair_controls decides, every other control character and DEL: every
    byte up to 32, and 127.
    """
    written = 0
    out_offsets[0] = 0
    for d in range(offsets.shape[0] - 1):
        pending_space = False
        start = written
        for i in range(offsets[d], offsets[d + 1]):
            byte = text[i]
            if byte <= 32 or byte == 127:
                pending_space = written > start
                continue
            if pending_space:
                out[written] = 32
                written += 1
                pending_space = False
            if 65 <= byte <= 90:
                byte += 32
            out[written] = byte
            written += 1
        out_offsets[d + 1] = written


@njit(cache=True, nogil=True)
def distinct_shingles(
    code_points: np.ndarray,
    offsets: np.ndarray,
    unit: tuple,  # type: ignore[type-arg]
    char_classes: np.ndarray,
    out: np.ndarray,
    out_bounds: np.ndarray,
) -> None:
    """Each text's distinct shingle hashes, sorted (the set MinHash estimates the
    Jaccard of), in one call: text d is ``code_points[offsets[d]:offsets[d + 1]]`` (an
    empty one has none), its set goes to ``out[out_bounds[d]:out_bounds[d + 1]]`` (``out``
    as long as the code points); ``unit`` is (word unit, size, seed mix). O(n log n) in
    each text's shingles."""
    scratch, token_scratch = _shingle_scratch(offsets)
    written = 0
    out_bounds[0] = 0
    for d in range(offsets.shape[0] - 1):
        text = code_points[offsets[d] : offsets[d + 1]]
        count = 0
        if text.shape[0] > 0:
            count = _shingles(text, unit, char_classes, token_scratch, scratch)
        hashes = np.sort(scratch[:count])
        for at in range(count):
            if at == 0 or hashes[at] != hashes[at - 1]:
                out[written] = hashes[at]
                written += 1
        out_bounds[d + 1] = written


@njit(cache=True, nogil=True)
def set_jaccards(
    first: tuple,  # type: ignore[type-arg]
    second: tuple,  # type: ignore[type-arg]
    out: np.ndarray,
) -> None:
    """The Jaccard of pairs of sorted sets of distinct hashes, by a merge each: ``first``
    is (values, bounds, at): set j is ``values[bounds[j]:bounds[j + 1]]`` and pair i's is
    set ``at[i]`` (-1: none, NaN out); ``second`` likewise. Two empty sets: 1; one: 0.
    O(a + b) a pair."""
    values_a, bounds_a, at_a = first
    values_b, bounds_b, at_b = second
    for i in range(out.shape[0]):
        if at_a[i] < 0 or at_b[i] < 0:
            out[i] = np.nan
            continue
        low_a, high_a = bounds_a[at_a[i]], bounds_a[at_a[i] + 1]
        low_b, high_b = bounds_b[at_b[i]], bounds_b[at_b[i] + 1]
        size_a, size_b = high_a - low_a, high_b - low_b
        if size_a == 0 or size_b == 0:
            out[i] = 1.0 if size_a == size_b else 0.0
            continue
        shared = 0
        x, y = low_a, low_b
        while x < high_a and y < high_b:
            if values_a[x] < values_b[y]:
                x += 1
            elif values_b[y] < values_a[x]:
                y += 1
            else:
                shared += 1
                x += 1
                y += 1
        out[i] = shared / (size_a + size_b - shared)
