"""Compiled figures of short texts (app/core/template.py): the digit counts of the numbers
a text states, read from its code points, and the 64-bit key made of them.

A text's figures are the digits of its numbers, sorted (``template.figures``, a regex
reference that tests/api/test_short_templates.py compares these with): sorted digits are
the same thing as the count of each digit 0-9, which a kernel keeps in ten counters. The
code points are classed by one table (``template.figure_table``): a decimal digit (any
script's, by its value), a Chinese numeral digit or unit; ASCII letter runs are looked up
among the English number words, packed five bits a letter (``template.pack_word``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.core._kernels import fmix64

NOTHING = -1
CHINESE_DIGIT = 16  # + the digit's value
CHINESE_UNIT = 32  # + the power of ten: 十 1, 百 2, 千 3, 万 4
NO_FIGURES = 1  # the key of a text that states no number (0 is "not known yet")
LONGEST_NUMBER_WORD = 9  # "seventeen"
_U64 = np.uint64


@njit(cache=True, nogil=True)
def _add_digits(value: int, counts: np.ndarray) -> None:
    """Count the decimal digits of a non-negative value (0 has one digit, 0)."""
    if value == 0:
        counts[0] += 1
    while value > 0:
        counts[value % 10] += 1
        value //= 10


@njit(cache=True, nogil=True)
def _chinese_run(
    points: np.ndarray, start: int, end: int, table: np.ndarray, counts: np.ndarray
) -> None:
    """Count the digits of the value of a run of Chinese numerals (``template.chinese_value``):
    digit by digit when the run has no unit (leading zeros dropped, as int() does)."""
    has_unit = False
    for at in range(start, end):
        if table[points[at]] >= CHINESE_UNIT:
            has_unit = True
    if not has_unit:
        leading = True
        for at in range(start, end):
            digit = table[points[at]] - CHINESE_DIGIT
            if digit == 0 and leading:
                continue
            leading = False
            counts[digit] += 1
        if leading:  # all zeros: the value 0
            counts[0] += 1
        return
    total, section, digit = 0, 0, 0
    for at in range(start, end):
        kind = table[points[at]]
        if kind < CHINESE_UNIT:
            digit = kind - CHINESE_DIGIT
            continue
        unit = 10 ** (kind - CHINESE_UNIT)
        if unit == 10_000:
            total += (section + digit) * unit
            section = 0
        else:
            section += (digit if digit else 1) * unit
        digit = 0
    _add_digits(total + section + digit, counts)


@njit(cache=True, nogil=True)
def _count_figures(
    points: np.ndarray,
    start: int,
    end: int,
    table: np.ndarray,
    words: np.ndarray,
    values: np.ndarray,
    counts: np.ndarray,
) -> None:
    """Add the digits of the numbers of points[start:end] to ``counts``. O(length)."""
    size = table.shape[0]
    at = start
    while at < end:
        point = points[at]
        kind = table[point] if point < size else NOTHING
        if 0 <= kind <= 9:
            counts[kind] += 1
            at += 1
        elif kind >= CHINESE_DIGIT:
            run = at + 1
            while run < end and points[run] < size and table[points[run]] >= CHINESE_DIGIT:
                run += 1
            _chinese_run(points, at, run, table, counts)
            at = run
        elif (65 <= point <= 90) or (97 <= point <= 122):
            run, packed = at, 0
            while run < end and ((65 <= points[run] <= 90) or (97 <= points[run] <= 122)):
                if run - at < LONGEST_NUMBER_WORD:
                    packed = packed * 32 + ((points[run] | 32) - 96)  # lower case
                run += 1
            if run - at <= LONGEST_NUMBER_WORD:
                found = np.searchsorted(words, packed)
                if found < words.shape[0] and words[found] == packed:
                    _add_digits(values[found], counts)
            at = run
        else:
            at += 1


@njit(cache=True, nogil=True)
def figure_counts(
    points: np.ndarray,
    offsets: np.ndarray,
    table: np.ndarray,
    words: np.ndarray,
    values: np.ndarray,
) -> np.ndarray:
    """(texts, 10) count of each digit among the figures of each text. O(length)."""
    texts = offsets.shape[0] - 1
    counts = np.zeros((texts, 10), dtype=np.int64)
    for text in range(texts):
        _count_figures(points, offsets[text], offsets[text + 1], table, words, values, counts[text])
    return counts


@njit(cache=True, nogil=True)
def _key_of(counts: np.ndarray) -> np.uint64:
    """The 64-bit key of ten digit counts: NO_FIGURES for none, else a mix never 0 or 1."""
    if counts.sum() == 0:
        return _U64(NO_FIGURES)
    key = _U64(0x9E3779B97F4A7C15)
    for digit in range(10):
        key = fmix64(key ^ (_U64(counts[digit]) + (_U64(digit) << _U64(40))))
    return key if key > _U64(NO_FIGURES) else _U64(NO_FIGURES + 1)


@njit(cache=True, nogil=True)
def figures_keys(
    points: np.ndarray,
    offsets: np.ndarray,
    table: np.ndarray,
    words: np.ndarray,
    values: np.ndarray,
) -> np.ndarray:
    """The figures key of each text (texts with the same figures, and only those but for
    a hash collision, share it). O(length)."""
    texts = offsets.shape[0] - 1
    keys = np.empty(texts, dtype=np.uint64)
    counts = np.zeros(10, dtype=np.int64)
    for text in range(texts):
        counts[:] = 0
        _count_figures(points, offsets[text], offsets[text + 1], table, words, values, counts)
        keys[text] = _key_of(counts)
    return keys


@njit(cache=True, nogil=True)
def disagreeing(
    points: np.ndarray,
    offsets: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    row_keys: np.ndarray,
    table: np.ndarray,
    words: np.ndarray,
    values: np.ndarray,
) -> np.ndarray:
    """Positions in ``rows`` (query i's at [ends[i-1], ends[i])) whose stored figures key
    is not the query's while both state figures: the only matches worth comparing text by
    text. A query's key is read only when it has matches. O(length of those queries +
    matches)."""
    found = np.empty(rows.shape[0], dtype=np.int64)
    count = 0
    start = 0
    counts = np.zeros(10, dtype=np.int64)
    for query in range(ends.shape[0]):
        end = ends[query]
        if end > start:
            counts[:] = 0
            _count_figures(points, offsets[query], offsets[query + 1], table, words, values, counts)
            key = _key_of(counts)
            for at in range(start, end):
                stored = row_keys[rows[at]]
                if stored != key and stored != _U64(NO_FIGURES) and key != _U64(NO_FIGURES):
                    found[count] = at
                    count += 1
        start = end
    return found[:count]
