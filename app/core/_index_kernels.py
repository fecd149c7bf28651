"""Compiled searches of the indexes (numba, nogil: they run beside merges and writers):
SimHash within a Hamming distance, MinHash LSH bands verified, equal keys of a batch, and
the merge of what several methods found. The sorted runs they walk, and the searches
and merges of a run, are in ``_run_kernels.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._kernels import fmix64
from app.core._run_kernels import (
    bucket_guess,
    bucket_lower_bound,
    bucket_shift,
    directed_bounds,
    is_deleted,
    lower_bound,
    prefetch,
    prefetch_bucket,
    upper_bound,
)
from app.core._shared_kernels import (
    as_int,
    best_first,
    gallop,
    grow,
    key_bits,
    popcount64,
    sort_range,
)

_U64 = np.uint64
EQUAL_PREFETCH = 32  # keys ahead whose directory entries equal_rows_many prefetches
_BAND_MULTIPLIER = 0x100000001B3
_BAND_SEED = 0x9E3779B97F4A7C15


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
    runs: tuple,  # type: ignore[type-arg]  # SortedTable's kernel_arrays()
    deleted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every live row within ``max_distance`` of each query, once per query.

    ``queries`` is (q, T): query i permuted for each table. In table t, candidates are
    the keys sharing the query's prefix ``prefix_masks[t]``: a binary search for the
    range [q & mask, q | ~mask] in each sorted run. Returns (query_ends, rows,
    distances): the matches of query i are at [query_ends[i-1], query_ends[i]).
    """
    (
        main_keys, main_rows, main_directory, middle_keys, middle_rows, _middle_directory,
        buffer_keys, buffer_rows, _buffer_directory, tail_keys, tail_rows, tail_count,
    ) = runs  # fmt: skip
    tables = queries.shape[1]
    rows = np.empty(64, dtype=np.int64)
    distances = np.empty(64, dtype=np.int64)
    count = 0
    query_ends = np.empty(queries.shape[0], dtype=np.int64)
    shift = bucket_shift(main_directory, main_keys) if main_directory.shape[0] > 0 else _U64(64)
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
                    keys, run_rows = middle_keys[t], middle_rows[t]
                else:
                    keys, run_rows = buffer_keys[t], buffer_rows[t]
                if keys.shape[0] == 0:
                    continue
                if run == 0 and main_directory.shape[0] > 0:
                    first, last = directed_bounds(keys, main_directory[t], shift, low, high)
                else:
                    first, last = lower_bound(keys, low), upper_bound(keys, high)
                rows, distances = _reserve(rows, distances, as_int(count), last - first)
                for i in range(first, last):
                    distance = popcount64(keys[i] ^ query)
                    row = np.int64(run_rows[i])
                    if distance <= max_distance and not is_deleted(row, deleted):
                        rows[count] = row
                        distances[count] = distance
                        count += 1
        rows, distances = _reserve(rows, distances, as_int(count), tail_count)
        for i in range(tail_count):
            distance = popcount64(tail_keys[0, i] ^ queries[qi, 0])
            row = np.int64(tail_rows[i])
            if distance <= max_distance and not is_deleted(row, deleted):
                rows[count] = row
                distances[count] = distance
                count += 1
        count = _unique_by_row(rows, distances, as_int(start), as_int(count))
        query_ends[qi] = count
    return query_ends, rows[:count], distances[:count]


@njit(cache=True, nogil=True, inline="always")
def _band_key(signatures: np.ndarray, i: int, band: int, rows_per_band: int) -> np.uint64:
    """Hash of values [band r, (band + 1) r) of signature i."""
    key = fmix64(_U64(_BAND_SEED) * _U64(band + 1))
    for offset in range(band * rows_per_band, (band + 1) * rows_per_band):
        key = (key ^ _U64(signatures[i, offset])) * _U64(_BAND_MULTIPLIER)
    return fmix64(key)


@njit(cache=True, nogil=True)
def band_keys(signatures: np.ndarray, bands: int, rows_per_band: int) -> np.ndarray:
    """(m, bands) uint64: band j hashes values [j r, (j + 1) r) of each signature."""
    out = np.empty((signatures.shape[0], bands), dtype=np.uint64)
    for i in range(signatures.shape[0]):
        for band in range(bands):
            out[i, band] = _band_key(signatures, i, band, rows_per_band)
    return out


# lsh_search works through its queries LSH_GROUP at a time, one phase for all of them
# before the next: the GROUP x bands lookups of a phase are independent, so their cache
# misses overlap instead of queuing behind each other, and the group's scratch arrays
# and fetched lines stay in L1/L2 until the next phase uses them.
LSH_GROUP = 32
# A signature is prefetched one cache line (16 uint32 values) at a time.
_LINE_VALUES = 16


@njit(cache=True, nogil=True)
def _sort_unique(values: np.ndarray, start: int, end: int) -> int:
    """Sort values[start:end] in place and drop repeats; the new end."""
    sort_range(values, start, end)
    out = start
    for i in range(start, end):
        if out == start or values[i] != values[out - 1]:
            values[out] = values[i]
            out += 1
    return out


@njit(cache=True, nogil=True, inline="always")
def _lane_lower_bound(keys: np.ndarray, lane: int, value: np.uint64) -> int:
    """lower_bound on keys[lane] without making a view of it (views cost refcounting)."""
    low, high = 0, keys.shape[1]
    while low < high:
        middle = (low + high) >> 1
        if keys[lane, middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


@njit(cache=True, nogil=True, inline="always")
def _equal_end(keys: np.ndarray, lane: int, start: int, end: int, value: np.uint64) -> int:
    """The end of the run of keys[lane] equal to value that begins at start (before end)."""
    while start < end and keys[lane, start] == value:
        start += 1
    return start


@njit(cache=True, nogil=True, inline="always")
def _live_rows(
    rows: np.ndarray,
    lane: int,
    start: int,
    end: int,
    deleted: np.ndarray,
    out: np.ndarray,
    count: int,
) -> int:
    """Append the live rows of rows[lane, start:end] to out at count; the new count."""
    for i in range(start, end):
        row = np.int64(rows[lane, i])
        if not is_deleted(row, deleted):
            out[count] = row
            count += 1
    return count


@njit(cache=True, nogil=True)
def lsh_search(
    query_signatures: np.ndarray,
    bands: int,
    rows_per_band: int,
    signatures: np.ndarray,
    min_matches: int,
    runs: tuple,  # type: ignore[type-arg]  # SortedTable's kernel_arrays()
    deleted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Live rows sharing a band with each query whose signatures agree in at least
    ``min_matches`` of K positions, compared in their low 16 bits (app/core/lsh.py).
    Returns (query_ends, rows, scores
    = agreeing positions / K), each query's rows best first, ties by row.

    Per group of queries: band keys; main bounds from the directory and a guess by
    interpolation; the first equal key near the guess; candidate rows from every run,
    sorted and deduplicated per query; verification against the stored signatures. Each
    step prefetches what the next one reads. The 2-D arrays are indexed directly, never
    sliced into lanes: a slice in a loop costs two atomic reference counts.
    """
    (
        main_keys, main_rows, main_directory, middle_keys, middle_rows, _middle_directory,
        buffer_keys, buffer_rows, _buffer_directory, tail_keys, tail_rows, tail_count,
    ) = runs  # fmt: skip
    queries, num_perm = query_signatures.shape
    main_size = main_keys.shape[1]
    directed = main_directory.shape[0] > 0 and main_size > 0
    group = max(1, min(LSH_GROUP, queries))
    pair_keys = np.empty(group * bands, dtype=np.uint64)  # pair p: query p // bands, band p % bands
    first = np.empty(group * bands, dtype=np.int64)  # main: first index with key >= the key
    stop = np.empty(group * bands, dtype=np.int64)  # main: where equal keys must end
    candidate_ends = np.empty(group, dtype=np.int64)
    candidates = np.empty(256, dtype=np.int64)
    rows = np.empty(64, dtype=np.int64)
    matches = np.empty(64, dtype=np.int64)
    count = 0
    query_ends = np.empty(queries, dtype=np.int64)
    shift = bucket_shift(main_directory, main_keys) if directed else _U64(64)
    # The band keys as the table keeps them: with 32-bit keys, their top halves.
    narrowed = _U64(64 - key_bits(main_keys))
    for begin in range(0, queries, group):
        members = min(group, queries - begin)
        pairs = members * bands
        for p in range(pairs):
            key = _band_key(query_signatures, begin + p // bands, p % bands, rows_per_band)
            pair_keys[p] = key >> narrowed
        if directed:
            for p in range(pairs):
                prefetch(main_directory, p % bands, pair_keys[p] >> shift)
            for p in range(pairs):
                band = p % bands
                guess, low, high = bucket_guess(main_directory, band, shift, pair_keys[p])
                first[p], stop[p] = guess, high
                if high > low:
                    prefetch(main_keys, band, guess)
            for p in range(pairs):
                band, key = p % bands, pair_keys[p]
                i, high = first[p], stop[p]
                if i < high and main_keys[band, i] < key:
                    i += 1
                    while i < high and main_keys[band, i] < key:
                        i += 1
                else:
                    low = main_directory[band, np.int64(key >> shift)]
                    while i > low and main_keys[band, i - 1] >= key:
                        i -= 1
                first[p] = i
                if i < high and main_keys[band, i] == key:
                    prefetch(main_rows, band, i)
        else:
            for p in range(pairs):
                first[p] = _lane_lower_bound(main_keys, p % bands, pair_keys[p])
                stop[p] = main_size
        found = 0
        for member in range(members):
            start = found
            for band in range(bands):
                p = member * bands + band
                key = pair_keys[p]
                main_first = first[p]
                main_end = _equal_end(main_keys, band, main_first, stop[p], key)
                middle_first = _lane_lower_bound(middle_keys, band, key)
                middle_end = _equal_end(middle_keys, band, middle_first, middle_keys.shape[1], key)
                buffer_first = _lane_lower_bound(buffer_keys, band, key)
                buffer_end = _equal_end(buffer_keys, band, buffer_first, buffer_keys.shape[1], key)
                # Room for all of this band's candidates, so the loops below need no checks.
                extra = main_end - main_first + middle_end - middle_first
                extra += buffer_end - buffer_first + tail_count
                while found + extra > candidates.shape[0]:
                    candidates = grow(candidates, candidates.shape[0] + 1)
                found = _live_rows(
                    main_rows, band, main_first, main_end, deleted, candidates, found
                )
                found = _live_rows(
                    middle_rows, band, middle_first, middle_end, deleted, candidates, found
                )
                found = _live_rows(
                    buffer_rows, band, buffer_first, buffer_end, deleted, candidates, found
                )
                for i in range(tail_count):
                    row = np.int64(tail_rows[i])
                    if tail_keys[band, i] == key and not is_deleted(row, deleted):
                        candidates[found] = row
                        found += 1
            found = _sort_unique(candidates, start, found)
            candidate_ends[member] = found
        for c in range(found):
            for position in range(0, num_perm, _LINE_VALUES):
                prefetch(signatures, candidates[c], position)
        c = 0
        for member in range(members):
            query = begin + member
            start = count
            while c < candidate_ends[member]:
                row = candidates[c]
                agree = 0
                for position in range(num_perm):
                    stored_value = np.uint16(signatures[row, position])
                    if stored_value == np.uint16(query_signatures[query, position]):
                        agree += 1
                if agree >= min_matches:
                    if count == rows.shape[0]:
                        rows = grow(rows, rows.shape[0] + 1)
                        matches = grow(matches, matches.shape[0] + 1)
                    rows[count] = row
                    matches[count] = agree
                    count += 1
                c += 1
            best_first(rows, matches, as_int(start), count)
            query_ends[query] = count
    return query_ends, rows[:count], matches[:count] / num_perm


@njit(cache=True, nogil=True)
def merge_found(
    positions: np.ndarray, rows: np.ndarray, bits: np.ndarray, known: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(positions, rows, bits, known) of what several methods found, each (position, row)
    once in (position, row) order, with the OR of its methods' bits and the highest of
    its known values (NaN: none known). Rows below 2^32. O(n log n); one call, where
    np.unique and two ufunc.at cost ~15 us for the few pairs of a search."""
    count = rows.shape[0]
    keys = (positions << 32) | rows
    order = np.argsort(keys, kind="mergesort")
    merged_keys = np.empty(count, dtype=np.int64)
    merged_bits = np.zeros(count, dtype=np.uint8)
    merged_known = np.full(count, np.nan)
    size = 0
    for i in range(count):
        at = order[i]
        if size == 0 or merged_keys[size - 1] != keys[at]:
            merged_keys[size] = keys[at]
            size += 1
        merged_bits[size - 1] |= bits[at]
        value = known[at]
        if value == value and not (merged_known[size - 1] >= value):  # fmax: NaN loses
            merged_known[size - 1] = value
    merged_keys = merged_keys[:size]
    return (
        merged_keys >> 32,
        merged_keys & 0xFFFFFFFF,
        merged_bits[:size].copy(),
        merged_known[:size].copy(),
    )


@njit(cache=True, nogil=True, inline="always")
def _equal_run(keys: np.ndarray, start: int, key: np.uint64, most: int) -> int:
    """The end of the run of ``key`` that begins at ``start``, looked at no further than
    ``most`` entries (a run that long is over the cap anyway)."""
    end = start
    limit = min(keys.shape[0], start + most)
    while end < limit and keys[end] == key:
        end += 1
    return end


@njit(cache=True, nogil=True)
def _equal_ranges(
    run: tuple,  # type: ignore[type-arg]
    lane: int,
    sought: tuple,  # type: ignore[type-arg]
    most: int,
    bounds: np.ndarray,
) -> None:
    """``bounds[0, step]``, ``bounds[1, step]``: where the entries equal to
    ``keys[order[step]]`` (``sought`` is (keys, order)) begin and end in one ``run``'s
    (keys, directory) lane (followed no further than ``most``). With a directory: in the
    key's bucket, whose directory entry and lines were prefetched while earlier keys were
    looked up; without: galloping from where the last key ended. A loop of its own per
    run: one loop over all runs was slower, most of it for runs that were empty."""
    run_keys, directory = run
    keys, order = sought
    lane_keys = run_keys[lane]
    queries = order.shape[0]
    if lane_keys.shape[0] == 0:
        bounds[:, :queries] = 0
        return
    if directory.shape[0] > 0:
        lane_directory = directory[lane]
        shift = bucket_shift(directory, run_keys)
        for step in range(queries):
            if step + EQUAL_PREFETCH < queries:
                prefetch(directory, lane, keys[order[step + EQUAL_PREFETCH]] >> shift)
            if step + EQUAL_PREFETCH // 2 < queries:
                ahead = keys[order[step + EQUAL_PREFETCH // 2]]
                prefetch_bucket(run_keys, directory, lane, shift, ahead)
            key = keys[order[step]]
            start = bucket_lower_bound(lane_keys, lane_directory, shift, key)
            bounds[0, step] = start
            bounds[1, step] = _equal_run(lane_keys, start, key, most)
        return
    start = 0
    for step in range(queries):
        key = keys[order[step]]
        start = gallop(lane_keys, start, lane_keys.shape[0], start, key)
        bounds[0, step] = start
        bounds[1, step] = _equal_run(lane_keys, start, key, most)


@njit(cache=True, nogil=True)
def equal_rows_many(
    runs: tuple,  # type: ignore[type-arg]  # SortedTable's kernel_arrays()
    lane: int,
    keys: np.ndarray,
    order: np.ndarray,
    max_rows: int,
    deleted: np.ndarray,
    capped: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(query positions, rows): the live rows whose key in ``lane`` equals ``keys[i]``,
    for every key held by at most ``max_rows`` entries (tombstoned ones counted: a key
    held more often finds nothing, and is marked True in ``capped`` where that is as
    long as ``keys``; an empty ``capped`` records nothing). The keys are looked up in
    ascending order (``order`` sorts them: numpy's sort is several times numba's), run
    by run (``_equal_ranges``:
    through a run's directory when it has one). One call for a batch's keys:
    O(q log(bucket) + q tail + found), O(q log(N / q)) in a run without a directory."""
    (
        main_keys, main_rows, main_directory, middle_keys, middle_rows, middle_directory,
        buffer_keys, buffer_rows, buffer_directory, tail_keys, tail_rows, tail_count,
    ) = runs  # fmt: skip
    queries = order.shape[0]
    most = min(max_rows, (1 << 62) - 1) + 1
    main = np.empty((2, queries), dtype=np.int64)
    middle = np.empty((2, queries), dtype=np.int64)
    buffer = np.empty((2, queries), dtype=np.int64)
    _equal_ranges((main_keys, main_directory), lane, (keys, order), most, main)
    _equal_ranges((middle_keys, middle_directory), lane, (keys, order), most, middle)
    _equal_ranges((buffer_keys, buffer_directory), lane, (keys, order), most, buffer)
    positions = np.empty(64, dtype=np.int64)
    rows = np.empty(64, dtype=np.int64)
    count = 0
    tail = tail_keys[lane]
    for step in range(queries):
        query = order[step]
        key = keys[query]
        held = main[1, step] - main[0, step] + middle[1, step] - middle[0, step]
        held += buffer[1, step] - buffer[0, step]
        for at in range(tail_count):
            if tail[at] == key:
                held += 1
        if held > max_rows and capped.shape[0] > 0:
            capped[query] = True
        if held == 0 or held > max_rows:
            continue
        while count + held > positions.shape[0]:
            positions = grow(positions, positions.shape[0] + 1)
            rows = grow(rows, rows.shape[0] + 1)
        for part_rows, first, last in (
            (main_rows, main[0, step], main[1, step]),
            (middle_rows, middle[0, step], middle[1, step]),
            (buffer_rows, buffer[0, step], buffer[1, step]),
        ):
            for at in range(first, last):
                row = np.int64(part_rows[lane, at])
                if not is_deleted(row, deleted):
                    positions[count], rows[count] = query, row
                    count += 1
        for at in range(tail_count):
            row = np.int64(tail_rows[at])
            if tail[at] == key and not is_deleted(row, deleted):
                positions[count], rows[count] = query, row
                count += 1
    return positions[:count], rows[:count]


@njit(cache=True, nogil=True)
def pairs_in_runs(
    keys: np.ndarray, members: np.ndarray, bounds: np.ndarray, lanes: np.ndarray
) -> np.ndarray:
    """The codes ``later * count + earlier`` of every two members of each run, each pair
    once: run r is ``members[bounds[r]:bounds[r + 1]]`` (ascending rows of ``keys``, an
    (count, lanes) matrix) equal in lane ``lanes[r]``; a pair equal in a lower lane too
    is left to that lane's run. O(pairs x lanes)."""
    count = keys.shape[0]
    total = 0
    for run in range(bounds.shape[0] - 1):
        size = bounds[run + 1] - bounds[run]
        total += size * (size - 1) // 2
    codes = np.empty(total, dtype=np.int64)
    at = 0
    for run in range(bounds.shape[0] - 1):
        lane = lanes[run]
        for second in range(bounds[run] + 1, bounds[run + 1]):
            later = members[second]
            for first in range(bounds[run], second):
                earlier = members[first]
                seen = False
                for lower in range(lane):
                    if keys[later, lower] == keys[earlier, lower]:
                        seen = True
                        break
                if not seen:
                    codes[at] = later * count + earlier
                    at += 1
    return codes[:at]


@njit(cache=True, nogil=True)
def pair_agreements(
    first: np.ndarray, first_at: np.ndarray, second: np.ndarray, second_at: np.ndarray
) -> np.ndarray:
    """Per pair i, the values whose low 16 bits (the kept values) are equal in row
    ``first_at[i]`` of ``first`` and row ``second_at[i]`` of ``second`` (signature
    matrices, whole or kept values): ``lsh.agreements`` of the pairs without making
    their rows. O(pairs x K)."""
    out = np.empty(first_at.shape[0], dtype=np.int64)
    mask = np.uint32(0xFFFF)
    for i in range(first_at.shape[0]):
        a, b = first_at[i], second_at[i]
        equal = 0
        for value in range(first.shape[1]):
            if (np.uint32(first[a, value]) & mask) == (np.uint32(second[b, value]) & mask):
                equal += 1
        out[i] = equal
    return out
