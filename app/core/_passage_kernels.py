"""Compiled inner loops of the passage index (app/core/passages.py): tokens with their
offsets, k-gram hashes, winnowing, and the extension of seeds to maximal equal runs.
Which candidates are worth extending is decided in ``_candidate_kernels.py``.
tests/core/test_passages.py re-computes each with plain Python."""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._kernels import CLASS_SINGLE_CHAR_TOKEN, CLASS_WORD, POLY_MULTIPLIER, fmix64
from app.core._shared_kernels import as_int, uniform_order

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
def text_tokens(
    code_points: np.ndarray, classes: np.ndarray, folded: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``token_spans`` of a text as exact-size arrays (hashes, starts, ends): one call
    from Python instead of one per array. O(length)."""
    size = code_points.shape[0]
    starts = np.empty(size, dtype=np.int64)
    ends = np.empty(size, dtype=np.int64)
    hashes = np.empty(size, dtype=np.uint64)
    count = token_spans(code_points, classes, folded, starts, ends, hashes)
    return hashes[:count].copy(), starts[:count].copy(), ends[:count].copy()


@njit(cache=True, nogil=True)
def spread_keys(keys: np.ndarray) -> np.ndarray:
    """``fmix64`` of each key, as a new array (app/core/passages.py: ``spread``). O(n)."""
    out = np.empty(keys.shape[0], dtype=np.uint64)
    for at in range(keys.shape[0]):
        out[at] = fmix64(keys[at])
    return out


@njit(cache=True, nogil=True)
def spread_sorted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``spread_keys``, the order that sorts them): a lookup's keys. O(n) expected."""
    spread = spread_keys(keys)
    return spread, uniform_order(spread)


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
def kgrams_distinct(tokens: np.ndarray, k: int) -> bool:
    """Whether no two runs of k tokens of a text hash alike (then no run of k tokens or
    more repeats in it; a collision only says it may). The k-gram hashes are fmix64's
    outputs, spread evenly: ordered by their top bits (``uniform_order``). O(n)
    expected."""
    count = tokens.shape[0] - k + 1
    if count <= 1:
        return True
    grams = np.empty(count, dtype=np.uint64)
    kgram_hashes(tokens, k, grams)
    order = uniform_order(grams)
    for at in range(1, count):  # noqa: SIM110 (numba compiles no generator for all())
        if grams[order[at]] == grams[order[at - 1]]:
            return False
    return True


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
    seeds: tuple,  # type: ignore[type-arg]
    walk: tuple[int, int, int],
    out: np.ndarray,
) -> int:
    """The maximal runs of equal tokens through each seed (``seeds`` is (seed_query,
    seed_stored): a k-gram starting at ``seed_query[i]`` in ``query`` and
    ``seed_stored[i]`` in ``stored``, verified token by token), at least ``minimum``
    tokens long (``walk`` is (k, minimum, per_kgram)), each once: rows of ``out`` are
    (query start, query end, stored start, stored end), token indexes, end exclusive;
    returns the count. Seeds must come sorted by diagonal (stored - query), then query
    start: a seed inside the run found last on its diagonal is skipped. O(seeds + run
    lengths)."""
    seed_query, seed_stored = seeds
    k, minimum, _ = walk
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
def text_query(
    code_points: np.ndarray, classes: np.ndarray, folded: np.ndarray, k: int, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A text's tokens (``text_tokens``) and its fingerprints (``fingerprint_keys``) in
    one call: what a search asks with. O(length (k + window))."""
    hashes, starts, ends = text_tokens(code_points, classes, folded)
    keys = np.empty(max(0, hashes.shape[0] - k + 1), dtype=np.uint64)
    count = fingerprint_keys(hashes, k, window, keys)
    return hashes, starts, ends, keys[:count].copy()


@njit(cache=True, nogil=True)
def gram_table(grams: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An open-addressing table of a query's k-gram hashes, made once a search: (slot
    hashes, slot first, slot count, positions): the query positions holding the hash of
    slot ``t`` are ``positions[first[t] : first[t] + count[t]]``, ascending; an empty slot
    has count 0. Twice as many slots as k-grams at least (a power of two). O(n)."""
    n = grams.shape[0]
    size = 16
    while size < 2 * n:
        size <<= 1
    mask = _U64(size - 1)
    slot_hash = np.zeros(size, dtype=np.uint64)
    count = np.zeros(size, dtype=np.int64)
    slot_of = np.empty(n, dtype=np.int64)
    for q in range(n):
        h = grams[q]
        at = np.int64(h & mask)
        while count[at] > 0 and slot_hash[at] != h:
            at = (at + np.int64(1)) & np.int64(size - 1)
        slot_hash[at] = h
        count[at] += 1
        slot_of[q] = at
    first = np.empty(size, dtype=np.int64)
    total = 0
    for slot in range(size):
        first[slot] = total
        total += count[slot]
    fill = first.copy()
    positions = np.empty(n, dtype=np.int64)
    for q in range(n):  # ascending: each slot's positions in query order
        positions[fill[slot_of[q]]] = q
        fill[slot_of[q]] += 1
    return slot_hash, first, count, positions


@njit(cache=True, nogil=True)
def _slot(slot_hash: np.ndarray, count: np.ndarray, h: np.uint64) -> int:
    """The slot of ``h`` in a gram_table, or -1 where the query has no such k-gram."""
    size = slot_hash.shape[0]
    mask = np.int64(size - 1)
    at = np.int64(h & _U64(size - 1))
    while count[at] > 0:
        if slot_hash[at] == h:
            return int(at)
        at = (at + np.int64(1)) & mask
    return -1


@njit(cache=True, nogil=True)
def _by_diagonal(seed_query: np.ndarray, seed_stored: np.ndarray, n: int, m: int) -> np.ndarray:
    """The order of seeds (query k-gram positions below n, stored ones below m) by
    diagonal (stored - query), then query start: a counting sort by diagonal, stable, as
    the seeds of one diagonal come in ascending stored (so query) positions. O(seeds + n
    + m), where a sort of them took most of verifying a copy."""
    starts = np.zeros(n + m + 1, dtype=np.int64)
    for i in range(seed_query.shape[0]):
        starts[seed_stored[i] - seed_query[i] + n + 1] += 1
    for diagonal in range(n + m):
        starts[diagonal + 1] += starts[diagonal]
    order = np.empty(seed_query.shape[0], dtype=np.int64)
    for i in range(seed_query.shape[0]):
        at = seed_stored[i] - seed_query[i] + n
        order[starts[at]] = i
        starts[at] += 1
    return order


@njit(cache=True, nogil=True)
def runs_against(
    query: np.ndarray,
    stored: np.ndarray,
    walk: tuple[int, int, int],
    scratch: tuple,  # type: ignore[type-arg]
) -> np.ndarray:
    """``passage_runs`` of a query (its token hashes) against one stored text's token
    hashes; ``walk`` is (k, minimum, per_kgram), ``scratch`` is ``_scratch``'s (the
    query's ``gram_table``; ``taken``, zero, one per slot and zero again on return;
    ``grams`` and ``slots``, as long as ``stored`` at least; ``seed_query`` and
    ``seed_stored``, ``per_kgram`` times the query's k-grams). Every stored k-gram is
    looked up once in the table: O(m + seeds log seeds + run lengths)."""
    k, _, per_kgram = walk
    (slot_hash, first, count, positions), taken, grams, slots, seed_query, seed_stored = scratch
    n, m = query.shape[0] - k + 1, stored.shape[0] - k + 1
    if n <= 0 or m <= 0:
        return np.empty((0, 4), dtype=np.int64)
    kgram_hashes(stored, k, grams)
    seeds = 0
    touched = 0
    for s in range(m):
        at = _slot(slot_hash, count, grams[s])
        # The first per_kgram occurrences of a k-gram in the stored text seed, each with
        # its first per_kgram occurrences in the query (ascending in the table).
        if at < 0 or taken[at] >= per_kgram:
            continue
        if taken[at] == 0:
            slots[touched] = at
            touched += 1
        taken[at] += 1
        for j in range(first[at], first[at] + min(count[at], per_kgram)):
            seed_query[seeds] = positions[j]
            seed_stored[seeds] = s
            seeds += 1
    for t in range(touched):  # taken back to zero for the next stored text
        taken[slots[t]] = 0
    if seeds == 0:
        return np.empty((0, 4), dtype=np.int64)
    by_diagonal = _by_diagonal(seed_query[:seeds], seed_stored[:seeds], n, m)
    runs = np.empty((seeds, 4), dtype=np.int64)
    found = equal_runs(
        query, stored, (seed_query[by_diagonal], seed_stored[by_diagonal]), walk, runs
    )
    runs = runs[:found]
    return runs[np.argsort(runs[:, 0] * (m + k + 1) + runs[:, 2], kind="mergesort")]


@njit(cache=True, nogil=True)
def passage_runs(query: np.ndarray, stored: np.ndarray, walk: tuple[int, int, int]) -> np.ndarray:
    """``equal_runs`` of two token hash arrays, seeded by every k-gram they share (at
    most ``per_kgram`` occurrences of one in each text, its first; ``walk`` is (k,
    minimum, per_kgram)): rows (query start, query end, stored start, stored end), sorted
    by query start. O(n + m + seeds log seeds + runs)."""
    if query.shape[0] < walk[0] or stored.shape[0] < walk[0]:
        return np.empty((0, 4), dtype=np.int64)
    bounds = np.array([0, stored.shape[0]], dtype=np.int64)
    return runs_against(query, stored, walk, _scratch(query, bounds, walk))


@njit(cache=True, nogil=True)
def _scratch(query: np.ndarray, bounds: np.ndarray, walk: tuple[int, int, int]) -> tuple:  # type: ignore[type-arg]
    """What verifying a query (at least k tokens) against several stored texts (text i
    of ``[bounds[i], bounds[i + 1])``) needs once: ``runs_against``'s scratch, the
    gram_table of the query's k-grams first. O(n + texts)."""
    k, _, per_kgram = walk
    n = query.shape[0] - k + 1
    query_grams = np.empty(n, dtype=np.uint64)
    kgram_hashes(query, k, query_grams)
    table = gram_table(query_grams)
    longest = 1
    for text in range(bounds.shape[0] - 1):
        longest = max(longest, bounds[text + 1] - bounds[text])
    return (
        table,
        np.zeros(table[0].shape[0], dtype=np.int64),
        np.empty(longest, dtype=np.uint64),
        np.empty(longest, dtype=np.int64),
        np.empty(n * per_kgram, dtype=np.int64),
        np.empty(n * per_kgram, dtype=np.int64),
    )


@njit(cache=True, nogil=True)
def passage_runs_many(
    query: tuple,  # type: ignore[type-arg]
    stored: tuple,  # type: ignore[type-arg]
    bounds: np.ndarray,
    walk: tuple[int, int, int],
) -> np.ndarray:
    """``passage_runs`` of one query against several stored texts in one call (a search's
    candidates), each (hashes, starts, ends) of its tokens (starts and ends in code
    points of the text): text i's tokens are ``[bounds[i], bounds[i + 1])`` of
    ``stored``'s. The query's k-grams are hashed and tabled once. Rows (text, query
    start, query end, stored start, stored end, tokens), offsets in code points, by text,
    then query start. O(n + M + seeds log seeds + runs) for M stored tokens in all."""
    hashes, starts, ends = stored
    out = np.empty((16, 6), dtype=np.int64)
    rows = 0
    if query[0].shape[0] < walk[0]:
        return out[:0]
    scratch = _scratch(query[0], bounds, walk)
    for text in range(bounds.shape[0] - 1):
        low, high = bounds[text], bounds[text + 1]
        runs = runs_against(query[0], hashes[low:high], walk, scratch)
        out, rows = _put_runs(
            out, as_int(rows), text, runs, query, (starts[low:high], ends[low:high])
        )
    return out[:rows]


@njit(cache=True, nogil=True)
def _put_runs(
    out: np.ndarray,
    rows: int,
    text: int,
    runs: np.ndarray,
    query: tuple,  # type: ignore[type-arg]
    stored_spans: tuple,  # type: ignore[type-arg]
) -> tuple[np.ndarray, int]:
    """Token runs of one stored text appended to ``out`` (grown when full) as rows (text,
    query start, query end, stored start, stored end, tokens) in code points: ``query``
    is its (hashes, starts, ends), ``stored_spans`` the text's (starts, ends)."""
    _, query_starts, query_ends = query
    stored_starts, stored_ends = stored_spans
    if rows + runs.shape[0] > out.shape[0]:
        grown = np.empty((max(2 * out.shape[0], rows + runs.shape[0]), 6), dtype=np.int64)
        grown[:rows] = out[:rows]
        out = grown
    for r in range(runs.shape[0]):
        q_start, q_end, s_start, s_end = runs[r, 0], runs[r, 1], runs[r, 2], runs[r, 3]
        out[rows, 0] = text
        out[rows, 1], out[rows, 2] = query_starts[q_start], query_ends[q_end - 1]
        out[rows, 3], out[rows, 4] = stored_starts[s_start], stored_ends[s_end - 1]
        out[rows, 5] = q_end - q_start
        rows += 1
    return out, rows


@njit(cache=True, nogil=True)
def passage_runs_texts(
    query: tuple,  # type: ignore[type-arg]
    code_points: np.ndarray,
    bounds: np.ndarray,
    tokenizer: tuple,  # type: ignore[type-arg]
    walk: tuple[int, int, int],
) -> np.ndarray:
    """``passage_runs_many`` against stored texts as code points (text i: ``[bounds[i],
    bounds[i + 1])``), each tokenised (``tokenizer`` is ``token_spans``' classes and
    folded) into one scratch as long as the longest and verified at once: no stored
    text's tokens are kept (a search's candidates). O(n + total length + seeds log seeds
    + runs)."""
    classes, folded = tokenizer
    out = np.empty((16, 6), dtype=np.int64)
    rows = 0
    if query[0].shape[0] < walk[0]:
        return out[:0]
    scratch = _scratch(query[0], bounds, walk)
    longest = scratch[2].shape[0]
    starts = np.empty(longest, dtype=np.int64)
    ends = np.empty(longest, dtype=np.int64)
    hashes = np.empty(longest, dtype=np.uint64)
    for text in range(bounds.shape[0] - 1):
        count = token_spans(
            code_points[bounds[text] : bounds[text + 1]], classes, folded, starts, ends, hashes
        )
        runs = runs_against(query[0], hashes[:count], walk, scratch)
        out, rows = _put_runs(out, as_int(rows), text, runs, query, (starts, ends))
    return out[:rows]


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
