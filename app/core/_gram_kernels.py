"""Compiled loops of the n-gram index's q-gram codes (numba, nogil): texts packed and read,
q-gram codes, the global token order and its sort, sets and postings of stored texts.
The search over the index is in ``_ngram_kernels.py``.

Texts are stored packed: each text's code points at one width, 1, 2 or 4 bytes (the
smallest that holds its largest code point), little-endian, in one flat uint8 array.
Queries are packed the same way (code points viewed as bytes, width 4), so one routine
reads both.

A q-gram's *code* is a 64-bit value naming it:

- q <= 3: the code points packed exactly, 21 bits each (``c0 << 42 | c1 << 21 | c2``),
  so distinct q-grams have distinct codes and the Jaccard similarity computed on codes is
  that of the q-gram sets themselves;
- q > 3: ``fmix64`` of the polynomial ``p = p * 0x100000001B3 + (c + 1)`` over the gram,
  exact up to 64-bit hash collisions (about one pair in 2^64);
- a text shorter than q has one q-gram, the whole text: for q <= 3 its code is
  ``1 << 63 | length << 56 | packed``, for q > 3 the hash of the whole text with the top
  bit set, so it can equal no full-length q-gram;
- with two q (``cjk_size`` other than ``size``: the q of a gram is that of its first
  character's script), the code is a function of the string alone, whatever made it a
  gram (``string_code``): up to 3 code points packed (below 3 with ``1 << 63 | length <<
  56``), more hashed with the top bit clear.

The layout of index entries and the global token order are described in ``ngram.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._kernels import POLY_MULTIPLIER, fmix64
from app.core._shared_kernels import as_int
from app.core._template_kernels import figures_keys

_U64 = np.uint64
CHAR_BITS = 21
MAX_PACKED_SIZE = 3  # q-grams of up to 3 code points are packed exactly in 63 bits
_SHORT_FLAG = 1 << 63
# An entry key: the token's hash in the top 48 bits, then the set size and the token's
# position in the set's order, 8 bits each (capped at FIELD_MAX).
FIELD_BITS = 8
FIELD_MAX = (1 << FIELD_BITS) - 1
TOKEN_MASK = ~((1 << (2 * FIELD_BITS)) - 1) & ((1 << 64) - 1)
ORDER_CLASS_SHIFT = 48  # order key: frequency class (16 bits) above 48 bits of the hash
MAX_CLASS = (1 << (64 - ORDER_CLASS_SHIFT)) - 1
# Ranges of up to this many tokens are sorted by insertion, larger ones by quicksort.
SORT_INSERTION_MAX = 16
# Relative slack of the bounds computed from a float threshold: a bound may only ever be
# loosened by it, never tightened, so rounding cannot drop a match (the final decision
# is the exact float comparison ``inter / union >= threshold``).
_SLACK = 1e-9


@njit(cache=True, nogil=True, inline="always")
def at_least(value: float) -> int:
    """The smallest integer >= value, less a hair for floating point error (never more)."""
    return int(np.ceil(value - _SLACK * max(1.0, abs(value))))


@njit(cache=True, nogil=True, inline="always")
def at_most(value: float) -> int:
    """The largest integer <= value, plus a hair for floating point error (never less)."""
    return int(np.floor(value + _SLACK * max(1.0, abs(value))))


@njit(cache=True, nogil=True, inline="always")
def prefix_length(count: int, threshold: float, shared: int) -> int:
    """Tokens of a set of ``count`` that must be indexed (or probed) for the threshold so
    that two sets with Jaccard >= t meet in ``shared`` of them (when they share that
    many): such a set y shares o >= ceil(t |y|) tokens with the other, at most |y| - o of
    its tokens are not shared, so its first |y| - ceil(t |y|) + shared tokens in any
    fixed order hold the first ``shared`` shared ones."""
    if count == 0:
        return 0
    return min(count, count - at_least(threshold * count) + shared)


@njit(cache=True, nogil=True, inline="always")
def min_overlap(threshold: float, first: int, second: int) -> int:
    """Fewest shared tokens two sets of these sizes need for Jaccard >= threshold:
    o / (a + b - o) >= t  <=>  o >= t (a + b) / (1 + t)."""
    return max(1, at_least(threshold * (first + second) / (1.0 + threshold)))


@njit(cache=True, nogil=True, inline="always")
def char_at(data: np.ndarray, start: int, width: int, k: int) -> np.uint64:
    """Code point k of the text packed at data[start:] with ``width`` bytes per character."""
    if width == 1:
        return _U64(data[start + k])
    if width == 2:
        p = start + 2 * k
        return _U64(data[p]) | (_U64(data[p + 1]) << _U64(8))
    p = start + 4 * k
    return (
        _U64(data[p])
        | (_U64(data[p + 1]) << _U64(8))
        | (_U64(data[p + 2]) << _U64(16))
        | (_U64(data[p + 3]) << _U64(24))
    )


@njit(cache=True, nogil=True, inline="always")
def gram_count(chars: int, size: int, cjk_size: int) -> int:
    """q-grams (with repeats) of a text of ``chars`` code points: exactly with one q, at
    most with two."""
    if chars == 0:
        return 0
    least = min(size, cjk_size)
    if chars < least:
        return 1
    return chars - least + 1


@njit(cache=True, nogil=True, inline="always")
def is_cjk(code: np.uint64) -> bool:
    """A character whose q-grams have ``cjk_size`` characters (``CJK_RANGES`` in ngram.py:
    Han, kana, Hangul, Bopomofo, CJK radicals, symbols and punctuation)."""
    if code < 0x1100:
        return False
    if code <= 0x11FF:  # Hangul Jamo
        return True
    if code < 0x2E80:
        return False
    if code <= 0x2FDF:  # CJK radicals, Kangxi radicals
        return True
    if code < 0x3000:
        return False
    if code <= 0x303F or 0x3040 <= code <= 0x30FF:  # CJK symbols, punctuation; kana
        return True
    if 0x3100 <= code <= 0x318F or 0x31A0 <= code <= 0x31BF or 0x31F0 <= code <= 0x31FF:
        return True  # Bopomofo, Hangul compatibility Jamo, Bopomofo extended, kana ext.
    if 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF:  # CJK ext. A, unified
        return True
    if 0xA960 <= code <= 0xA97F or 0xAC00 <= code <= 0xD7FF:  # Hangul
        return True
    if 0xF900 <= code <= 0xFAFF:  # CJK compatibility ideographs
        return True
    return bool(0x20000 <= code <= 0x323AF)  # CJK extensions B to H, compatibility suppl.


@njit(cache=True, nogil=True)
def _packed(data: np.ndarray, start: int, width: int, first: int, length: int) -> np.uint64:
    """The ``length`` code points at ``first``, CHAR_BITS each, the first one highest."""
    packed = _U64(0)
    for k in range(first, first + length):
        packed = (packed << _U64(CHAR_BITS)) | char_at(data, start, width, k)
    return packed


@njit(cache=True, nogil=True)
def _poly(data: np.ndarray, start: int, width: int, first: int, length: int) -> np.uint64:
    """The polynomial of the ``length`` code points at ``first`` (before ``fmix64``)."""
    poly = _U64(0)
    for k in range(first, first + length):
        poly = poly * _U64(POLY_MULTIPLIER) + char_at(data, start, width, k) + _U64(1)
    return poly


@njit(cache=True, nogil=True)
def string_code(data: np.ndarray, start: int, width: int, first: int, length: int) -> np.uint64:
    """With two q (per script), the code of the ``length`` code points at ``first``, a
    function of the string alone (so a whole short text and a q-gram that are the same
    string have one code): up to 3 of them packed exactly, below 3 with the length and
    the top bit; more hashed, top bit clear."""
    if length <= MAX_PACKED_SIZE:
        packed = _packed(data, start, width, first, length)
        if length == MAX_PACKED_SIZE:
            return packed
        return _U64(_SHORT_FLAG) | (_U64(length) << _U64(56)) | packed
    return fmix64(_poly(data, start, width, first, length)) & _U64((1 << 63) - 1)


@njit(cache=True, nogil=True)
def _script_codes(text: tuple, grams: tuple, out: np.ndarray) -> int:  # type: ignore[type-arg]
    """``gram_codes`` with two q: the gram starting at a character has ``cjk_size``
    characters if that character ``is_cjk``, else ``size``; a start whose gram would run
    past the end has none; a text with no gram has one, itself. O(chars q)."""
    data, start, width, chars = text
    size, cjk_size = grams
    count = 0
    for first in range(chars):
        length = cjk_size if is_cjk(char_at(data, start, width, first)) else size
        if first + length <= chars:
            out[count] = string_code(data, start, width, first, length)
            count += 1
    if count == 0:
        out[0] = string_code(data, start, width, 0, chars)
        count = 1
    return count


@njit(cache=True, nogil=True)
def _short_code(text: tuple, size: int) -> np.uint64:  # type: ignore[type-arg]
    """The code of a whole text shorter than ``size`` (its only q-gram)."""
    data, start, width, chars = text
    if size <= MAX_PACKED_SIZE:  # below 3 characters: packed with its length and flag
        return string_code(data, start, width, 0, chars)
    return fmix64(_poly(data, start, width, 0, chars)) | _U64(_SHORT_FLAG)


@njit(cache=True, nogil=True)
def _rolling_codes(text: tuple, q: int, tag: np.uint64, out: np.ndarray) -> int:  # type: ignore[type-arg]
    """The packed codes (q <= 3) of every q-gram of a text of at least q characters, each
    ORed with ``tag``, into ``out``: a window rolled one character a gram, O(chars)."""
    data, start, width, chars = text
    count = as_int(chars - q + 1)
    mask = (_U64(1) << _U64(CHAR_BITS * q)) - _U64(1)
    code = _packed(data, start, width, 0, q - 1)
    for g in range(count):
        code = ((code << _U64(CHAR_BITS)) | char_at(data, start, width, g + q - 1)) & mask
        out[g] = code | tag
    return count


@njit(cache=True, nogil=True)
def _two_q_codes(text: tuple, grams: tuple, out: np.ndarray) -> int:  # type: ignore[type-arg]
    """``_script_codes``; for a text of one script (every character CJK, or none: most
    texts), the same codes from a rolling window over its characters, 2-3 times faster."""
    data, start, width, chars = text
    size, cjk_size = grams
    cjk = 0
    for k in range(chars):
        cjk += is_cjk(char_at(data, start, width, k))
    if 0 < cjk < chars:
        return _script_codes(text, grams, out)
    q = cjk_size if cjk == chars else size
    if chars < q or q > MAX_PACKED_SIZE:
        # A whole short text, or hashed grams: string_code is O(q) a gram anyway.
        return _script_codes(text, grams, out)
    tag = _U64(0) if q == MAX_PACKED_SIZE else _U64(_SHORT_FLAG) | (_U64(q) << _U64(56))
    return _rolling_codes(text, q, tag, out)


@njit(cache=True, nogil=True)
def gram_codes(text: tuple, grams: tuple, out: np.ndarray) -> int:  # type: ignore[type-arg]
    """Codes of every q-gram of one packed ``text`` (data, start, width, chars), in text
    order (with repeats) into ``out``; returns their number. ``grams`` is (size,
    cjk_size). O(chars) for q <= 3, O(chars q) above. With ``cjk_size`` other than
    ``size``, the q of a gram is that of its first character's script
    (``_script_codes``)."""
    data, start, width, chars = text
    size, cjk_size = grams
    if chars == 0:
        return 0
    if cjk_size != size:
        return _two_q_codes(text, grams, out)
    if chars < size:
        out[0] = _short_code(text, size)
        return 1
    if size <= MAX_PACKED_SIZE:
        return _rolling_codes(text, size, _U64(0), out)
    count = as_int(chars - size + 1)
    for g in range(count):
        out[g] = string_code(data, start, width, g, size)  # hashed: q > 3
    return count


@njit(cache=True, nogil=True)
def distinct_codes(text: tuple, grams: tuple, out: np.ndarray) -> int:  # type: ignore[type-arg]
    """The distinct q-gram codes of one text, ascending, into ``out``; returns how many.
    O(g log g) for g q-grams."""
    count = gram_codes(text, grams, out)
    if count <= 1:
        return count
    out[:count].sort()
    distinct = 1
    for g in range(1, count):
        if out[g] != out[distinct - 1]:
            out[distinct] = out[g]
            distinct += 1
    return distinct


@njit(cache=True, nogil=True, inline="always")
def order_class(code: np.uint64, table_codes: np.ndarray, table_classes: np.ndarray) -> int:
    """The frequency class of a code (0, the rarest, when the table does not hold it).

    The table is open addressing on ``fmix64(code)``: its low bits pick the slot, its
    high 32 bits are the fingerprint kept there; class 0 marks an empty slot. Two codes
    with one fingerprint share a class: the order is still a fixed function of the code,
    which is all exactness needs (a rare code given a common one's class is only probed
    later). 6 bytes a slot keep the table in L2.
    """
    capacity = table_codes.shape[0]
    if capacity == 0:
        return 0
    mask = _U64(capacity - 1)
    h = fmix64(code)
    fingerprint = np.uint32(h >> _U64(32))
    slot = h & mask
    while table_classes[slot] != 0:
        if table_codes[slot] == fingerprint:
            return int(table_classes[slot])
        slot = (slot + _U64(1)) & mask
    return 0


@njit(cache=True, nogil=True)
def build_order_table(
    codes: np.ndarray, classes: np.ndarray, capacity: int
) -> tuple[np.ndarray, np.ndarray]:
    """(fingerprints, classes) for ``order_class``: capacity a power of two above the
    number of codes, every class >= 1. Of codes sharing a fingerprint the first wins."""
    table_codes = np.zeros(capacity, dtype=np.uint32)
    table_classes = np.zeros(capacity, dtype=np.uint16)
    mask = _U64(capacity - 1)
    for i in range(codes.shape[0]):
        h = fmix64(codes[i])
        fingerprint = np.uint32(h >> _U64(32))
        slot = h & mask
        while table_classes[slot] != 0 and table_codes[slot] != fingerprint:
            slot = (slot + _U64(1)) & mask
        if table_classes[slot] == 0:
            table_codes[slot] = fingerprint
            table_classes[slot] = classes[i]
    return table_codes, table_classes


@njit(cache=True, nogil=True, inline="always")
def _before(keys: np.ndarray, codes: np.ndarray, a: int, b: int) -> bool:
    """Token a comes before token b: by order key, ties (equal top 48 bits) by code."""
    return bool(keys[a] < keys[b] or (keys[a] == keys[b] and codes[a] < codes[b]))


@njit(cache=True, nogil=True, inline="always")
def _swap(keys: np.ndarray, codes: np.ndarray, a: int, b: int) -> None:
    keys[a], keys[b] = keys[b], keys[a]
    codes[a], codes[b] = codes[b], codes[a]


@njit(cache=True, nogil=True, inline="always")
def _insertion_sort(keys: np.ndarray, codes: np.ndarray, low: int, high: int) -> None:
    for i in range(low + 1, high):
        j = i
        while j > low and _before(keys, codes, j, j - 1):
            _swap(keys, codes, j, j - 1)
            j -= 1


@njit(cache=True, nogil=True)
def _sort_tokens(keys: np.ndarray, codes: np.ndarray, count: int) -> None:
    """Sort tokens [0, count) by (key, code) in place, without allocating: quicksort on
    the median of three with an explicit stack (the larger side is pushed, so at most
    log2(count) ranges wait), insertion sort below SORT_INSERTION_MAX tokens."""
    stack = np.empty(2 * 64, dtype=np.int64)  # numba keeps a fixed small array off the heap
    depth = 0
    low, high = 0, count
    while True:
        while high - low > SORT_INSERTION_MAX:
            middle = (low + high) >> 1
            last = high - 1
            if _before(keys, codes, middle, low):
                _swap(keys, codes, middle, low)
            if _before(keys, codes, last, low):
                _swap(keys, codes, last, low)
            if _before(keys, codes, last, middle):
                _swap(keys, codes, last, middle)
            pivot = last - 1
            _swap(keys, codes, middle, pivot)  # keys[low] <= pivot <= keys[last]: sentinels
            i, j = low, pivot
            while True:
                i += 1
                while _before(keys, codes, i, pivot):
                    i += 1
                j -= 1
                while _before(keys, codes, pivot, j):
                    j -= 1
                if i >= j:
                    break
                _swap(keys, codes, i, j)
            _swap(keys, codes, i, pivot)
            if i - low < high - i - 1:
                stack[depth], stack[depth + 1] = i + 1, high
                high = i
            else:
                stack[depth], stack[depth + 1] = low, i
                low = i + 1
            depth += 2
        _insertion_sort(keys, codes, low, high)
        if depth == 0:
            return
        depth -= 2
        low, high = stack[depth], stack[depth + 1]


@njit(cache=True, nogil=True)
def ordered_set(
    text: tuple,  # type: ignore[type-arg]
    grams: tuple,  # type: ignore[type-arg]
    order: tuple,  # type: ignore[type-arg]
    codes: np.ndarray,
    keys: np.ndarray,
) -> int:
    """The distinct q-gram codes of one text in the global token order (``order``, the
    table's codes and classes), into ``codes``, with their order keys in ``keys``;
    returns how many. The order: rarer frequency class first, then ``fmix64(code)``
    (ties, which need equal top 48 bits, by the code). One in-place sort, no allocation:
    O(g log g) for g q-grams."""
    table_codes, table_classes = order
    count = gram_codes(text, grams, codes)
    for g in range(count):
        cls = order_class(codes[g], table_codes, table_classes)
        keys[g] = (_U64(cls) << _U64(ORDER_CLASS_SHIFT)) | (
            fmix64(codes[g]) >> _U64(64 - ORDER_CLASS_SHIFT)
        )
    _sort_tokens(keys, codes, count)
    if count <= 1:
        return count
    distinct = 1
    for g in range(1, count):  # equal codes have equal keys: adjacent once sorted
        if codes[g] != codes[distinct - 1]:
            codes[distinct] = codes[g]
            keys[distinct] = keys[g]
            distinct += 1
    return distinct


@njit(cache=True, nogil=True, inline="always")
def token_bits(order_key: np.uint64) -> np.uint64:
    """A token's part of its index keys: the top 48 bits of ``fmix64(code)``, which the
    order key holds below its 16 class bits."""
    return (order_key << _U64(64 - ORDER_CLASS_SHIFT)) & _U64(TOKEN_MASK)


@njit(cache=True, nogil=True, inline="always")
def entry_key(order_key: np.uint64, set_size: int, position: int) -> np.uint64:
    """The index key of a set's token at ``position`` of its order."""
    return (
        token_bits(order_key)
        | (_U64(min(set_size, FIELD_MAX)) << _U64(FIELD_BITS))
        | _U64(min(position, FIELD_MAX))
    )


@njit(cache=True, nogil=True)
def pack_texts(code_points: np.ndarray, offsets: np.ndarray, with_figures: bool) -> tuple:  # type: ignore[type-arg]
    """(data, starts, chars, widths, figure_keys): texts laid end to end as code points
    (text d at offsets[d:d+2]) packed at 1, 2 or 4 bytes per character each, and, when
    asked, each text's figures key (app/core/_template_kernels.py; zeros otherwise): made
    in the same call, since an insert's call costs more to dispatch than the key to make.
    O(total characters)."""
    texts = offsets.shape[0] - 1
    if with_figures:
        figure_keys = figures_keys(code_points, offsets)
    else:
        figure_keys = np.zeros(texts, dtype=np.uint64)
    starts = np.empty(texts, dtype=np.int64)
    chars = np.empty(texts, dtype=np.int32)
    widths = np.empty(texts, dtype=np.uint8)
    total = 0
    for d in range(texts):
        largest = 0
        for k in range(offsets[d], offsets[d + 1]):
            largest = max(largest, int(code_points[k]))
        width = 1 if largest < 0x100 else (2 if largest < 0x10000 else 4)
        starts[d] = total
        chars[d] = offsets[d + 1] - offsets[d]
        widths[d] = width
        total += width * chars[d]
    data = np.empty(total, dtype=np.uint8)
    for d in range(texts):
        width = widths[d]
        p = starts[d]
        for k in range(offsets[d], offsets[d + 1]):
            value = code_points[k]
            for b in range(width):
                data[p] = (value >> np.uint32(8 * b)) & np.uint32(0xFF)
                p += 1
    return data, starts, chars, widths, figure_keys


@njit(cache=True, nogil=True)
def unpack_text(data: np.ndarray, start: int, width: int, chars: int) -> np.ndarray:
    """The code points of one packed text."""
    out = np.empty(chars, dtype=np.uint32)
    for k in range(chars):
        out[k] = np.uint32(char_at(data, start, width, k))
    return out


@njit(cache=True, nogil=True)
def _most_grams(chars: np.ndarray, rows: np.ndarray, grams: tuple) -> tuple[int, int]:  # type: ignore[type-arg]
    """(the most q-grams of one of the texts ``rows``, at least 1; their total): the
    sizes of the scratch and output arrays."""
    size, cjk_size = grams
    longest = 1
    total = 0
    for i in range(rows.shape[0]):
        count = gram_count(chars[rows[i]], size, cjk_size)
        longest = max(longest, count)
        total += count
    return longest, total


@njit(cache=True, nogil=True, inline="always")
def text_at(texts: tuple, row: int) -> tuple:  # type: ignore[type-arg]
    """The packed text (data, start, width, chars) of stored ``row`` of ``texts``
    (PackedTexts' kernel_arrays: data, starts, chars, widths)."""
    data, starts, chars, widths = texts
    return data, starts[row], as_int(widths[row]), as_int(chars[row])


@njit(cache=True, nogil=True)
def set_postings(
    texts: tuple,  # type: ignore[type-arg]
    rows: np.ndarray,
    grams: tuple,  # type: ignore[type-arg]
    prefix: tuple,  # type: ignore[type-arg]
    order: tuple,  # type: ignore[type-arg]
) -> tuple:  # type: ignore[type-arg]
    """(keys, entry_rows, set_sizes) for stored ``texts`` ``rows`` in ``order``: one entry
    per token of each set's prefix for ``prefix`` (threshold, shared). O(g log g) per
    text of g q-grams."""
    threshold, shared = prefix
    longest, total = _most_grams(texts[2], rows, grams)
    codes = np.empty(longest, dtype=np.uint64)
    order_keys = np.empty(longest, dtype=np.uint64)
    keys = np.empty(total, dtype=np.uint64)
    entry_rows = np.empty(total, dtype=np.int64)
    set_sizes = np.empty(rows.shape[0], dtype=np.int32)
    count = 0
    for i in range(rows.shape[0]):
        row = rows[i]
        n = ordered_set(text_at(texts, row), grams, order, codes, order_keys)
        set_sizes[i] = n
        for position in range(prefix_length(n, threshold, shared)):
            keys[count] = entry_key(order_keys[position], n, position)
            entry_rows[count] = row
            count += 1
    return keys[:count], entry_rows[:count], set_sizes


@njit(cache=True, nogil=True)
def code_sets(texts: tuple, rows: np.ndarray, grams: tuple) -> tuple:  # type: ignore[type-arg]
    """(codes, ends): the distinct q-gram codes of each stored text ``rows[i]`` of
    ``texts``, ascending, at codes[ends[i-1]:ends[i]]."""
    longest, total = _most_grams(texts[2], rows, grams)
    scratch = np.empty(longest, dtype=np.uint64)
    codes = np.empty(total, dtype=np.uint64)
    ends = np.empty(rows.shape[0], dtype=np.int64)
    count = 0
    for i in range(rows.shape[0]):
        n = distinct_codes(text_at(texts, rows[i]), grams, scratch)
        codes[count : count + n] = scratch[:n]
        count += n
        ends[i] = count
    return codes[:count], ends
