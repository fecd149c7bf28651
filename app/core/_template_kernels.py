"""Compiled figures of short texts (app/core/template.py): the digit counts of the numbers
a text states, read from its code points, and the 64-bit key made of them.

A text's figures are the digits of its numbers, sorted (``template.figures``, a regex
reference that tests/api/test_short_templates.py compares these with): sorted digits are
the same thing as the count of each digit 0-9, which a kernel keeps in ten counters. The
code points are classed by ``figure_kind``: a decimal digit (any script's, by its value),
a Chinese numeral digit or unit; ASCII letter runs are looked up among the English number
words, packed five bits a letter (``pack_word``).
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

# The words, numerals and digits the kernels read, as constants compiled into them (numba
# freezes global arrays): no table to pass, so a call costs less to dispatch.
_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth".split()
NUMBER_WORDS: dict[str, str] = {
    **{word: str(value) for value, word in enumerate(_UNITS)},
    **{word: str(20 + 10 * at) for at, word in enumerate(_TENS)},
    **{word: str(at + 1) for at, word in enumerate(_ORDINALS)},
}
CHINESE_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5}
CHINESE_DIGITS.update({"六": 6, "七": 7, "八": 8, "九": 9})
CHINESE_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000}
# The zero of every run of ten Unicode decimal digits (category Nd, what ``\d`` of ``re``
# matches, Unicode 14 of Python 3.11): each is followed by its 1 to 9. A test compares
# them with unicodedata over every code point.
DIGIT_ZEROS = np.array(
    [
        0x30,
        0x660,
        0x6F0,
        0x7C0,
        0x966,
        0x9E6,
        0xA66,
        0xAE6,
        0xB66,
        0xBE6,
        0xC66,
        0xCE6,
        0xD66,
        0xDE6,
        0xE50,
        0xED0,
        0xF20,
        0x1040,
        0x1090,
        0x17E0,
        0x1810,
        0x1946,
        0x19D0,
        0x1A80,
        0x1A90,
        0x1B50,
        0x1BB0,
        0x1C40,
        0x1C50,
        0xA620,
        0xA8D0,
        0xA900,
        0xA9D0,
        0xA9F0,
        0xAA50,
        0xABF0,
        0xFF10,
        0x104A0,
        0x10D30,
        0x11066,
        0x110F0,
        0x11136,
        0x111D0,
        0x112F0,
        0x11450,
        0x114D0,
        0x11650,
        0x116C0,
        0x11730,
        0x118E0,
        0x11950,
        0x11C50,
        0x11D50,
        0x11DA0,
        0x16A60,
        0x16AC0,
        0x16B50,
        0x1D7CE,
        0x1D7D8,
        0x1D7E2,
        0x1D7EC,
        0x1D7F6,
        0x1E140,
        0x1E2F0,
        0x1E950,
        0x1FBF0,
    ],
    dtype=np.int64,
)


def pack_word(word: str) -> int:
    """A lower-case ASCII word as an integer, five bits a letter, as the kernels pack the
    letter runs they look up."""
    packed = 0
    for letter in word:
        packed = packed * 32 + (ord(letter) - 96)
    return packed


_WORD_ORDER = sorted(NUMBER_WORDS, key=pack_word)
WORDS_PACKED = np.array([pack_word(word) for word in _WORD_ORDER], dtype=np.int64)
WORD_VALUES = np.array([int(NUMBER_WORDS[word]) for word in _WORD_ORDER], dtype=np.int64)
_NUMERALS = sorted(
    [(ord(c), CHINESE_DIGIT + v) for c, v in CHINESE_DIGITS.items()]
    + [(ord(c), CHINESE_UNIT + len(str(u)) - 1) for c, u in CHINESE_UNITS.items()]
)
NUMERAL_POINTS = np.array([point for point, _ in _NUMERALS], dtype=np.int64)
NUMERAL_KINDS = np.array([kind for _, kind in _NUMERALS], dtype=np.int64)


@njit(cache=True, nogil=True)
def figure_kind(point: int) -> int:
    """A code point's kind: a decimal digit's value (0-9, any script's), CHINESE_DIGIT +
    value, CHINESE_UNIT + power of ten, else NOTHING. O(log 66) for non-ASCII."""
    if point < 128:
        return point - 48 if 48 <= point <= 57 else NOTHING
    at = np.searchsorted(DIGIT_ZEROS, point, side="right") - 1
    if at >= 0 and point - DIGIT_ZEROS[at] < 10:
        return int(point - DIGIT_ZEROS[at])
    at = np.searchsorted(NUMERAL_POINTS, point)
    if at < NUMERAL_POINTS.shape[0] and NUMERAL_POINTS[at] == point:
        return int(NUMERAL_KINDS[at])
    return NOTHING


@njit(cache=True, nogil=True)
def _add_digits(value: int, counts: np.ndarray) -> None:
    """Count the decimal digits of a non-negative value (0 has one digit, 0)."""
    if value == 0:
        counts[0] += 1
    while value > 0:
        counts[value % 10] += 1
        value //= 10


@njit(cache=True, nogil=True)
def _chinese_run(points: np.ndarray, start: int, end: int, counts: np.ndarray) -> None:
    """Count the digits of the value of a run of Chinese numerals (``template.chinese_value``):
    digit by digit when the run has no unit (leading zeros dropped, as int() does)."""
    has_unit = False
    for at in range(start, end):
        if figure_kind(points[at]) >= CHINESE_UNIT:
            has_unit = True
    if not has_unit:
        leading = True
        for at in range(start, end):
            digit = figure_kind(points[at]) - CHINESE_DIGIT
            if digit == 0 and leading:
                continue
            leading = False
            counts[digit] += 1
        if leading:  # all zeros: the value 0
            counts[0] += 1
        return
    total, section, digit = 0, 0, 0
    for at in range(start, end):
        kind = figure_kind(points[at])
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
def _is_letter(point: int) -> bool:
    return (65 <= point <= 90) or (97 <= point <= 122)


@njit(cache=True, nogil=True)
def count_figures(points: np.ndarray, start: int, end: int, counts: np.ndarray) -> None:
    """Add the digits of the numbers of points[start:end] to ``counts``. O(length)."""
    at = start
    while at < end:
        point = points[at]
        kind = figure_kind(point)
        if 0 <= kind <= 9:
            counts[kind] += 1
            at += 1
        elif kind >= CHINESE_DIGIT:
            run = at + 1
            while run < end and figure_kind(points[run]) >= CHINESE_DIGIT:
                run += 1
            _chinese_run(points, at, run, counts)
            at = run
        elif _is_letter(point):
            run, packed = at, 0
            while run < end and _is_letter(points[run]):
                if run - at < LONGEST_NUMBER_WORD:
                    packed = packed * 32 + ((points[run] | 32) - 96)  # lower case
                run += 1
            if run - at <= LONGEST_NUMBER_WORD:
                found = np.searchsorted(WORDS_PACKED, packed)
                if found < WORDS_PACKED.shape[0] and WORDS_PACKED[found] == packed:
                    _add_digits(WORD_VALUES[found], counts)
            at = run
        else:
            at += 1


@njit(cache=True, nogil=True)
def figure_counts(points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(texts, 10) count of each digit among the figures of each text. O(length)."""
    texts = offsets.shape[0] - 1
    counts = np.zeros((texts, 10), dtype=np.int64)
    for text in range(texts):
        count_figures(points, offsets[text], offsets[text + 1], counts[text])
    return counts


@njit(cache=True, nogil=True)
def key_of(counts: np.ndarray) -> np.uint64:
    """The 64-bit key of ten digit counts: NO_FIGURES for none, else a mix never 0 or 1."""
    if counts.sum() == 0:
        return _U64(NO_FIGURES)
    key = _U64(0x9E3779B97F4A7C15)
    for digit in range(10):
        key = fmix64(key ^ (_U64(counts[digit]) + (_U64(digit) << _U64(40))))
    return key if key > _U64(NO_FIGURES) else _U64(NO_FIGURES + 1)


@njit(cache=True, nogil=True)
def figures_keys(points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The figures key of each text (texts with the same figures, and only those but for
    a hash collision, share it). O(length)."""
    texts = offsets.shape[0] - 1
    keys = np.empty(texts, dtype=np.uint64)
    counts = np.zeros(10, dtype=np.int64)
    for text in range(texts):
        counts[:] = 0
        count_figures(points, offsets[text], offsets[text + 1], counts)
        keys[text] = key_of(counts)
    return keys


@njit(cache=True, nogil=True, inline="always")
def disagree(query_key: np.uint64, stored: np.uint64) -> bool:
    """Whether two figures keys say the texts state other figures, both stating some."""
    return bool(
        stored != query_key and stored != _U64(NO_FIGURES) and query_key != _U64(NO_FIGURES)
    )
