"""Compiled loops of the n-gram index's search (numba, nogil: they run beside merges and
writers): a query's prefix tokens probed in the sorted runs, candidates counted, admitted
by length and position, and verified by exact Jaccard, with the template rule's checks.
Codes, the token order and packed texts are in ``_gram_kernels.py``; the layout of index
entries and the global token order are described in ``ngram.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._gram_kernels import (
    FIELD_BITS,
    FIELD_MAX,
    TOKEN_MASK,
    at_least,
    at_most,
    char_at,
    gram_codes,
    gram_count,
    min_overlap,
    ordered_set,
    prefix_length,
    text_at,
    token_bits,
)
from app.core._kernels import fmix64
from app.core._run_kernels import (
    bucket_guess,
    bucket_shift,
    is_deleted,
    lower_bound,
    prefetch,
)
from app.core._shared_kernels import as_int, best_first, gallop, grow, sort_range
from app.core._template_kernels import count_figures, disagree, key_of

_U64 = np.uint64
# A candidate entry that can only be a later meeting of a row, never its first, is
# stored as LATER - row (negative): it counts for a row met before, and adds none.
LATER = -1
# Candidates are verified in blocks of this many, the memory of each block fetched at once.
VERIFY_BLOCK = 32
# Entries are counted with the table slot of the entry this many places on prefetched.
COUNT_AHEAD = 16


@njit(cache=True, nogil=True)
def _counted(
    values: np.ndarray,
    end: int,
    least: int,
    deleted: np.ndarray,
    table: np.ndarray,
    first_seen_end: int,
) -> tuple:  # type: ignore[type-arg]
    """Keep, once and in ascending order, the live rows found at least ``least`` times in
    values[:end]; returns (table, their number), the rows now at values[:number]. A row
    first met at ``first_seen_end`` or later cannot get there (it was found by the last
    least - 1 probes only, each of which holds a row once): those entries only count
    rows already met, and are never added to the table.

    Counts go to an open-addressing table (row + 1 in the high 44 bits, the count in the
    low 20; 0 marks an empty slot) twice the size of the entries: O(end) instead of the
    O(end log end) of sorting every entry, then only the survivors are sorted.
    """
    if least <= 1 or end <= 1:
        # One meeting is enough: the first one, so later-only entries add nothing.
        live = 0
        for i in range(end):
            if values[i] >= 0:
                values[live] = values[i]
                live += 1
        end = live
        kept = 0
        sort_range(values, as_int(0), end)
        for i in range(end):
            if (kept == 0 or values[i] != values[kept - 1]) and not is_deleted(values[i], deleted):
                values[kept] = values[i]
                kept += 1
        return table, kept
    capacity = 64
    firsts = 0
    for i in range(first_seen_end):
        firsts += values[i] >= 0
    while capacity < 2 * firsts:
        capacity *= 2
    if table.shape[0] < capacity:
        table = np.zeros(capacity, dtype=np.uint64)
    else:
        table[:capacity] = 0  # a memset of twice the entries: cheaper than remembering slots
    mask = _U64(capacity - 1)
    count_mask = _U64((1 << 20) - 1)
    kept = 0
    # At 1M texts a query counts ~12K entries into a table of ~256 KB: each slot is a
    # cache miss, so the slot of the entry COUNT_AHEAD places on is fetched while this one
    # is counted (bench/ngram.py measures the gain).
    table_2d = table.reshape((1, table.shape[0]))
    for i in range(end):
        if i + COUNT_AHEAD < end:
            upcoming = values[i + COUNT_AHEAD]
            if upcoming < 0:
                upcoming = LATER - upcoming
            future = _U64(upcoming + 1)
            prefetch(
                table_2d, 0, np.int64(((future * _U64(0x9E3779B97F4A7C15)) >> _U64(32)) & mask)
            )
        row = values[i]
        later = row < 0 or i >= first_seen_end
        if row < 0:
            row = LATER - row
        name = _U64(row + 1)
        tag = name << _U64(20)
        slot = ((name * _U64(0x9E3779B97F4A7C15)) >> _U64(32)) & mask
        while table[slot] != 0 and (table[slot] & ~count_mask) != tag:
            slot = (slot + _U64(1)) & mask
        if table[slot] == 0:
            if later:
                continue
            table[slot] = tag
        table[slot] += _U64(1)
        reached = (table[slot] & count_mask) == _U64(least)
        if reached and not is_deleted(row, deleted):  # kept once, when it gets there
            values[kept] = row
            kept += 1
    sort_range(values, as_int(0), kept)
    return table, kept


@njit(cache=True, nogil=True, inline="always")
def _fields(key: np.uint64) -> tuple[int, int]:
    """(set size, position in the set's order) of an entry key, each capped at FIELD_MAX."""
    return int((key >> _U64(FIELD_BITS)) & _U64(FIELD_MAX)), int(key & _U64(FIELD_MAX))


@njit(cache=True, nogil=True, inline="always")
def _admit(key: np.uint64, row: np.int64, position: int, bounds: tuple) -> bool:  # type: ignore[type-arg]
    """Length and positional filters on one index entry met at query token ``position``;
    ``bounds`` is the query's (query_size, low_size, high_size, overlaps, threshold,
    slack, sizes).

    If x and y have Jaccard >= t, their m-th shared token in the global order sits at
    position i of x and j of y with i <= |x| - o + m - 1 and j <= |y| - o + m - 1, where
    o >= the minimum overlap: only |x| - o tokens of x are not shared (PPJoin's
    positional filter, for the first m = slack + 1 shared tokens). Their entries pass.
    ``overlaps[s]`` is the minimum overlap with a set of size s < FIELD_MAX. Tombstones
    are checked later, once per candidate rather than once per entry.
    """
    query_size, low_size, high_size, overlaps, threshold, slack, sizes = bounds
    set_size, stored_position = _fields(key)  # a capped position only loosens the test
    if set_size == FIELD_MAX:  # capped: the real size is in the per-row array
        set_size = int(sizes[row])
        if set_size < low_size or set_size > high_size:
            return False
        overlap = min_overlap(threshold, query_size, set_size)
    else:
        overlap = int(overlaps[set_size])
    return not (
        position > query_size - overlap + slack or stored_position > set_size - overlap + slack
    )


@njit(cache=True, nogil=True)
def _scan(
    keys: np.ndarray,
    run_rows: np.ndarray,
    e: int,
    high: np.uint64,
    position: int,
    bounds: tuple,  # type: ignore[type-arg]
    candidates: np.ndarray,
    found: int,
) -> tuple:  # type: ignore[type-arg]
    """Append the rows of the entries from index e (the first in range) up to key
    ``high`` that pass ``_admit``; returns (candidates, found). Entries of one set size
    are sorted by position, so at the first past the positional bound the scan jumps to
    the next size."""
    overlaps, slack = bounds[3], bounds[5]
    end = keys.shape[0]
    while e < end and keys[e] <= high:
        key = keys[e]
        row = np.int64(run_rows[e])
        if _admit(key, row, position, bounds):
            if found == candidates.shape[0]:
                candidates = grow(candidates, found + 1)
            candidates[found] = row
            found += 1
            e += 1
            continue
        set_size, stored_position = _fields(key)
        if set_size < FIELD_MAX and stored_position > set_size - int(overlaps[set_size]) + slack:
            # Every later entry of this size sits further on: skip to the next size.
            e = gallop(keys, e + 1, end, e + 1, (key | _U64(FIELD_MAX)) + _U64(1))
        else:
            e += 1
    return candidates, found


@njit(cache=True, nogil=True)
def _scan_groups(
    keys: np.ndarray,
    run_rows: np.ndarray,
    e: int,
    high: np.uint64,
    position: int,
    query_size: int,
    overlaps: np.ndarray,
    slack: int,
    candidates: np.ndarray,
    found: int,
) -> tuple:  # type: ignore[type-arg]
    """``_scan`` for keys whose set sizes are all below FIELD_MAX (the uncapped part of a
    token's range), a (token, size) group at a time: the entries of a group are sorted by
    position, so those that pass the positional filter are the group's first ones, found
    by one gallop and copied without a test per entry, and a second gallop skips the
    rest of the group. O(groups x log(group) + entries admitted)."""
    end = keys.shape[0]
    while e < end and keys[e] <= high:
        key = keys[e]
        group = key & ~_U64(FIELD_MAX)  # token | size << FIELD_BITS
        set_size = _fields(key)[0]
        overlap = int(overlaps[set_size])
        bound = set_size - overlap + slack  # the largest stored position admitted
        admitted = e
        if position <= query_size - overlap + slack and bound >= 0:
            admitted = gallop(keys, e, end, e, _past(group, bound))
            # The first shared token of a match sits at positions <= |x| - o and <= |y| - o
            # (slack 0): entries past either bound can only be a later meeting.
            first = e
            if position <= query_size - overlap:
                first = gallop(keys, e, admitted, e, _past(group, set_size - overlap))
            count = admitted - e
            if found + count > candidates.shape[0]:
                candidates = grow(candidates, found + count)
            for i in range(first - e):
                candidates[found + i] = run_rows[e + i]
            for i in range(first - e, count):
                candidates[found + i] = LATER - np.int64(run_rows[e + i])
            found += count
        e = gallop(keys, admitted, end, admitted, group + _U64(FIELD_MAX + 1))
    return candidates, found


@njit(cache=True, nogil=True, inline="always")
def _past(group: np.uint64, bound: int) -> np.uint64:
    """The first key after the entries of a (token, size) group at positions <= bound."""
    if bound < 0:
        return group
    return group + _U64(bound + 1 if bound < FIELD_MAX else FIELD_MAX + 1)


@njit(cache=True, nogil=True)
def _shared_tokens(
    text: tuple,  # type: ignore[type-arg]
    grams: tuple,  # type: ignore[type-arg]
    needed: int,
    set_codes: np.ndarray,
    set_used: np.ndarray,
    set_stamp: np.ndarray,
    stamp: np.int64,
    scratch: np.ndarray,
) -> int:
    """Distinct q-grams of a stored text that are in the query's set (open addressing,
    a slot's stamp saying which candidate last counted it, so a repeated q-gram counts
    once); stops early, returning a number below ``needed``, once ``needed`` is out of
    reach. O(g) for g q-grams (q <= 3)."""
    count = gram_codes(text, grams, scratch)
    mask = _U64(set_codes.shape[0] - 1)
    shared = 0
    for g in range(count):
        if shared + count - g < needed:
            return shared
        code = scratch[g]
        slot = fmix64(code) & mask
        while set_used[slot]:
            if set_codes[slot] == code:
                if set_stamp[slot] != stamp:
                    set_stamp[slot] = stamp
                    shared += 1
                break
            slot = (slot + _U64(1)) & mask
    return shared


@njit(cache=True, nogil=True)
def within_one_edit(query_span: tuple, text: tuple) -> bool:  # type: ignore[type-arg]
    """Whether the query's code points ``query[first:end]`` (``query_span`` is (query,
    first, end)) and the packed stored ``text`` are at most one edit apart: one character
    substituted, inserted or deleted, or two adjacent ones swapped, as
    ``template.within_one_edit`` says (tests/api/test_short_templates.py compares them).
    O(length)."""
    query, first, end = query_span
    data, start, width, chars = text
    length = end - first
    if abs(length - chars) > 1:
        return False
    head = 0
    while head < min(length, chars) and _U64(query[first + head]) == char_at(
        data, start, width, head
    ):
        head += 1
    tail_query, tail_stored = length, chars
    while (
        tail_query > head
        and tail_stored > head
        and _U64(query[first + tail_query - 1]) == char_at(data, start, width, tail_stored - 1)
    ):
        tail_query -= 1
        tail_stored -= 1
    left, right = tail_query - head, tail_stored - head
    if left <= 1 and right <= 1:
        return True
    return bool(
        left == 2
        and right == 2
        and _U64(query[first + head]) == char_at(data, start, width, head + 1)
        and _U64(query[first + head + 1]) == char_at(data, start, width, head)
    )


@njit(cache=True, nogil=True)
def _same_figures(
    query_span: tuple,  # type: ignore[type-arg]
    texts: tuple,  # type: ignore[type-arg]
    figure_keys: np.ndarray,
    rows: np.ndarray,
    similarities: np.ndarray,
    start: int,
    count: int,
    counts: np.ndarray,
) -> int:
    """The template rule (``template.differing_numbers``) on one query's matches
    rows[start:count], in place: a match whose figures key is not the query's, both
    stating figures, is dropped unless the two texts are one edit apart (a typo). Returns
    the new count. The query's key is made once, O(its length); a match whose key
    differs costs one comparison of the two texts."""
    counts[:] = 0
    count_figures(query_span[0], query_span[1], query_span[2], counts)
    query_key = key_of(counts)
    kept = start
    for at in range(start, count):
        row = rows[at]
        if disagree(query_key, figure_keys[row]) and not within_one_edit(
            query_span, text_at(texts, row)
        ):
            continue
        rows[kept] = row
        similarities[kept] = similarities[at]
        kept += 1
    return kept


@njit(cache=True, nogil=True)
def ngram_search(
    query_texts: tuple,  # type: ignore[type-arg]
    grams: tuple,  # type: ignore[type-arg]
    prefix: tuple,  # type: ignore[type-arg]
    order: tuple,  # type: ignore[type-arg]
    texts: tuple,  # type: ignore[type-arg]
    sizes: np.ndarray,
    runs: tuple,  # type: ignore[type-arg]  # SortedTable's kernel_arrays()
    deleted: np.ndarray,
    figure_keys: np.ndarray,
) -> tuple:  # type: ignore[type-arg]
    """Every live stored set with Jaccard >= threshold to each query, with that Jaccard.

    ``query_texts`` is (data, offsets): the queries' code points as bytes, query i's at
    code points [offsets[i], offsets[i + 1]). ``grams`` is (size, cjk_size), ``prefix``
    (threshold, shared), ``order`` the token order's (table_codes, table_classes),
    ``texts`` PackedTexts' kernel_arrays().
    Returns (query_ends, rows, similarities, candidates): query i's matches at
    [query_ends[i-1], query_ends[i]), best first, ties by row; candidates[i] the distinct
    rows verified for it. With the rows' ``figure_keys`` (an empty array: not asked), the
    matches the template rule refuses are left out (``_same_figures``). Per query: its
    distinct codes in the global order; for each of its prefix tokens, the entries of
    that token whose set size passes the length filter (one key range per run: the size
    is the field below the token's hash), filtered by position; candidates deduplicated
    and verified by exact Jaccard against a hash set of the query's codes, stopping early
    when the overlap can no longer be reached.
    """
    (
        main_keys, main_rows, main_directory, middle_keys, middle_rows, _middle_directory,
        buffer_keys, buffer_rows, _buffer_directory, tail_keys, tail_rows, tail_count,
    ) = runs  # fmt: skip
    size, cjk_size = grams
    threshold, shared = prefix
    data, starts, chars, widths = texts
    query_data, query_offsets = query_texts
    queries = query_offsets.shape[0] - 1
    longest = 1
    for qi in range(queries):
        query_chars = query_offsets[qi + 1] - query_offsets[qi]
        longest = max(longest, gram_count(query_chars, size, cjk_size))
    codes = np.empty(longest, dtype=np.uint64)
    order_keys = np.empty(longest, dtype=np.uint64)
    slots = np.empty(longest, dtype=np.int64)
    overlaps = np.zeros(FIELD_MAX, dtype=np.int64)
    counts = np.zeros(1024, dtype=np.uint64)
    tokens = np.empty(64, dtype=np.uint64)
    main_starts = np.empty(64, dtype=np.int64)
    main_size = main_keys.shape[1]
    shift = bucket_shift(main_directory, main_keys) if main_directory.shape[0] > 0 else _U64(64)
    capacity = 16
    while capacity < 2 * longest:
        capacity *= 2
    set_codes = np.zeros(capacity, dtype=np.uint64)
    set_used = np.zeros(capacity, dtype=np.bool_)
    set_stamp = np.zeros(capacity, dtype=np.int64)
    set_mask = _U64(capacity - 1)
    stamp = np.int64(0)
    scratch = np.empty(256, dtype=np.uint64)
    candidates = np.empty(256, dtype=np.int64)
    rows = np.empty(64, dtype=np.int64)
    similarities = np.empty(64, dtype=np.float64)
    count = 0
    query_ends = np.empty(queries, dtype=np.int64)
    verified = np.zeros(queries, dtype=np.int64)
    figure_counts = np.zeros(10, dtype=np.int64)
    query_points = query_data.view(np.uint32)
    use_directory = main_directory.shape[0] > 0
    starts_2d = starts.reshape((1, starts.shape[0]))
    chars_2d = chars.reshape((1, chars.shape[0]))
    widths_2d = widths.reshape((1, widths.shape[0]))
    sizes_2d = sizes.reshape((1, sizes.shape[0]))
    data_2d = data.reshape((1, data.shape[0]))
    main_lane, middle_lane, buffer_lane = main_keys[0], middle_keys[0], buffer_keys[0]
    main_row_lane, middle_row_lane, buffer_row_lane = main_rows[0], middle_rows[0], buffer_rows[0]
    for qi in range(queries):
        query_text = (
            query_data,
            4 * query_offsets[qi],
            as_int(4),
            query_offsets[qi + 1] - query_offsets[qi],
        )
        n = ordered_set(query_text, grams, order, codes, order_keys)
        if n == 0:
            query_ends[qi] = count
            continue
        low_size = max(1, at_least(threshold * n))
        high_size = at_most(n / threshold)
        low_field = _U64(min(low_size, FIELD_MAX) << FIELD_BITS)
        high_field = _U64((min(high_size, FIELD_MAX) << FIELD_BITS) | FIELD_MAX)
        found = 0
        # Sets this small may share fewer than ``shared`` tokens and still match: then
        # one meeting is enough (the overlap grows with the size, so the smallest
        # admissible size decides for all).
        meetings = min(shared, min_overlap(threshold, n, low_size))
        slack = shared - 1
        # The minimum overlap with each uncapped admissible size, and, as the query
        # position i grows, the largest size whose overlap still allows a meeting at i
        # (the overlap grows with the size): i <= n - o(s) + slack.
        top = min(high_size, FIELD_MAX - 1)
        for set_size in range(low_size, top + 1):
            overlaps[set_size] = min_overlap(threshold, n, set_size)
        capped = high_size >= FIELD_MAX  # sets of FIELD_MAX or more tokens are admissible
        bounds = (n, low_size, high_size, overlaps, threshold, slack, sizes)
        probes = prefix_length(n, threshold, shared)
        tokens = grow(tokens, probes)
        main_starts = grow(main_starts, probes)
        for position in range(probes):
            tokens[position] = token_bits(order_keys[position])
        # Where each token's entries begin in main. Keys are hashes, uniform within a
        # directory bucket, so interpolation lands near the answer, and a gallop from
        # there finds it; every probe's lines are prefetched before any is read, so
        # their cache misses overlap instead of queueing.
        if main_size > 0 and use_directory:
            for position in range(probes):
                prefetch(main_directory, 0, tokens[position] >> shift)
            for position in range(probes):
                guess, bucket_low, bucket_high = bucket_guess(
                    main_directory, 0, shift, tokens[position]
                )
                main_starts[position] = guess
                if bucket_high > bucket_low:
                    prefetch(main_keys, 0, guess)
            for position in range(probes):
                token = tokens[position]
                bucket = np.int64(token >> shift)
                main_starts[position] = gallop(
                    main_lane, main_directory[0, bucket], main_directory[0, bucket + 1],
                    main_starts[position], token,
                )  # fmt: skip
                prefetch(main_rows, 0, main_starts[position])
        elif main_size > 0:
            for position in range(probes):
                main_starts[position] = lower_bound(main_lane, tokens[position])
        # The tail, unsorted, in one pass before the sorted runs: each entry's token is
        # looked up among the probes' (a small open-addressing table). Its entries are
        # all counted as possible first meetings, which only loosens the filter.
        if tail_count > 0:
            probe_capacity = 16
            while probe_capacity < 2 * probes:
                probe_capacity *= 2
            probe_mask = _U64(probe_capacity - 1)
            probe_slots = np.full(probe_capacity, -1, dtype=np.int64)
            for position in range(probes):
                slot = (tokens[position] >> _U64(2 * FIELD_BITS)) & probe_mask
                while probe_slots[slot] >= 0:
                    slot = (slot + _U64(1)) & probe_mask
                probe_slots[slot] = position
            for e in range(tail_count):
                key = tail_keys[0, e]
                token = key & _U64(TOKEN_MASK)
                field = key & ~_U64(TOKEN_MASK)
                if field < low_field or field > high_field:
                    continue  # no admissible size
                slot = (token >> _U64(2 * FIELD_BITS)) & probe_mask
                while probe_slots[slot] >= 0:
                    position = probe_slots[slot]
                    slot = (slot + _U64(1)) & probe_mask
                    if tokens[position] != token:
                        continue
                    row = np.int64(tail_rows[e])
                    if _admit(key, row, position, bounds):
                        candidates = grow(candidates, found + 1)
                        candidates[found] = row
                        found += 1
        # Rows first met by the last meetings - 1 probes cannot meet the query enough.
        first_seen_end = -1
        for position in range(probes):
            if position == probes - meetings + 1:
                first_seen_end = found
            while top >= low_size and position > n - int(overlaps[top]) + slack:
                top -= 1
            if top < low_size and not capped:
                break  # no admissible size can meet the query here or further on
            token = tokens[position]
            # The uncapped sizes that can still meet here, then the capped ones.
            for part in range(2):
                if part == 0:
                    if top < low_size:
                        continue
                    low = token | low_field
                    high = token | _U64((top << FIELD_BITS) | FIELD_MAX)
                else:
                    if not capped:
                        continue
                    low = token | _U64(FIELD_MAX << FIELD_BITS)
                    high = token | _U64((FIELD_MAX << FIELD_BITS) | FIELD_MAX)
                for run in range(3):
                    if run == 0:
                        lane, row_lane = main_lane, main_row_lane
                        if main_size == 0:
                            continue
                        start = main_starts[position]
                        e = gallop(main_lane, start, main_size, start, low)
                    else:
                        lane = middle_lane if run == 1 else buffer_lane
                        row_lane = middle_row_lane if run == 1 else buffer_row_lane
                        if lane.shape[0] == 0:
                            continue
                        e = lower_bound(lane, low)
                    if part == 0:
                        candidates, found = _scan_groups(
                            lane, row_lane, e, high, position, n, overlaps, slack,
                            candidates, as_int(found),
                        )  # fmt: skip
                    else:
                        candidates, found = _scan(
                            lane, row_lane, e, high, position, bounds, candidates, as_int(found)
                        )
        if first_seen_end < 0:
            first_seen_end = found
        counts, found = _counted(
            candidates, as_int(found), meetings, deleted, counts, first_seen_end
        )
        verified[qi] = found
        start = count
        if found > 0:
            for g in range(n):
                slot = fmix64(codes[g]) & set_mask
                while set_used[slot]:
                    slot = (slot + _U64(1)) & set_mask
                set_used[slot] = True
                set_codes[slot] = codes[g]
                slots[g] = np.int64(slot)
        for c in range(found):
            if c % VERIFY_BLOCK == 0:
                # A candidate's per-row values and text are cache misses: start those of
                # the next block together, so that they overlap instead of queueing.
                block_end = min(found, c + VERIFY_BLOCK)
                for b in range(c, block_end):
                    row = candidates[b]
                    prefetch(starts_2d, 0, row)
                    prefetch(chars_2d, 0, row)
                    prefetch(widths_2d, 0, row)
                    prefetch(sizes_2d, 0, row)
                for b in range(c, block_end):
                    row = candidates[b]
                    prefetch(data_2d, 0, starts[row])
                    prefetch(data_2d, 0, starts[row] + 64)
            row = candidates[c]
            set_size = int(sizes[row])
            needed = min_overlap(threshold, n, set_size)
            scratch = grow(scratch, gram_count(chars[row], size, cjk_size))
            stamp += 1
            overlap = _shared_tokens(
                text_at(texts, row), grams, needed, set_codes, set_used, set_stamp, stamp, scratch
            )
            if overlap < needed:
                continue
            similarity = overlap / (n + set_size - overlap)
            if similarity >= threshold:
                rows = grow(rows, count + 1)
                similarities = grow(similarities, count + 1)
                rows[count] = row
                similarities[count] = similarity
                count += 1
        if found > 0:
            for g in range(n):
                set_used[slots[g]] = False
        if figure_keys.shape[0] > 0 and count > start:
            count = _same_figures(
                (query_points, query_offsets[qi], query_offsets[qi + 1]), texts, figure_keys, rows,
                similarities, start, count, figure_counts,
            )  # fmt: skip
        best_first(rows, similarities, as_int(start), count)
        query_ends[qi] = count
    return query_ends, rows[:count], similarities[:count], verified
