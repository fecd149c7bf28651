"""Templated short texts: two one-line reports that differ in the figures they report.

Short texts (the n-gram index's) match by the share of character q-grams they have in
common, and a template fills most of them: "NYSE INDEX AT 1530 205.81 OFF 1.67" and
"... 205.79 OFF 1.69" share 80% of their q-grams and report two different moments; so
do "FED SETS SIX-DAY SYSTEM REPURCHASES" and "... TWO-DAY ...". A real re-issue keeps its
figures, though it may spell one out ("Record April 3" and "Record April Three").

``differing_numbers`` compares the numbers of two short texts as values: every digit
run (with its decimals; thousands separators dropped; an ordinal such as "1st" is its
number), every English number word up to the tens and ordinals up to "tenth", and every
run of Chinese numerals (六, 两, 二十三) is one value. Two texts are compared by the
digits of their values, sorted (``figures``: "10.5" and "105", a line moved, agree),
and match only when they hold the same digits, or one holds none (a text that only
adds figures to one without, "quake hits Tokyo, 5 dead", is an update of it). A
one-character edit is a typo, not another report ("APR 7" / "APR 8" in an otherwise
equal text). It answers why it refuses (a value of each), for a refusal that can be
explained. Exact: O(length) per text, no state.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Final

import numpy as np
import numpy.typing as npt

from app.core import _template_kernels
from app.core.fingerprint import code_points_of

# The number words and Chinese numerals, one list for these readers and the kernels.
NUMBER_WORDS: Final = _template_kernels.NUMBER_WORDS
# A number: a run of digits, with thousands groups and decimals, wherever it is: glued to
# a unit ("21C", "15km"), an ordinal suffix ("1st"), a name ("q3") or Chinese text
# ("报3250.12点"). A word: a run of letters, looked up among the number words.
_TOKEN: Final = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?![\d])|\d+)(\.\d+)?|([^\W\d_]+)")


CHINESE_DIGITS: Final = _template_kernels.CHINESE_DIGITS
CHINESE_UNITS: Final = _template_kernels.CHINESE_UNITS
_CHINESE_RUN: Final = re.compile(f"[{''.join(CHINESE_DIGITS)}{''.join(CHINESE_UNITS)}]+")


def chinese_value(run: str) -> int:
    """The value of a run of Chinese numerals: 三 3, 十二 12, 二十三 23, 两百零五 205,
    三万五千 35000; a bare run of digits (二〇二四) reads digit by digit."""
    if not any(character in CHINESE_UNITS for character in run):
        return int("".join(str(CHINESE_DIGITS[character]) for character in run))
    total, section, digit = 0, 0, 0
    for character in run:
        if character in CHINESE_DIGITS:
            digit = CHINESE_DIGITS[character]
            continue
        unit = CHINESE_UNITS[character]
        if unit == 10_000:
            total += (section + digit) * unit
            section = 0
        else:
            section += (digit or 1) * unit  # 十二: a ten with no digit before it
        digit = 0
    return total + section + digit


def numbers(text: str) -> Counter[str]:
    """The numbers ``text`` states, as canonical values ("1,222" and "1222" are one
    value, "3", "three" and "3rd" another), with how often each occurs. O(length)."""
    values: Counter[str] = Counter()
    for match in _TOKEN.finditer(text):  # digits and letters: "\w" without "_"
        whole, decimals, word = match.groups()
        if word is not None:
            value = NUMBER_WORDS.get(word.casefold())
            if value is not None:
                values[value] += 1
            for run in _CHINESE_RUN.findall(word):  # Chinese is written without spaces
                values[str(chinese_value(run))] += 1
            continue
        integer = str(int(whole.replace(",", "")))
        fraction = (decimals or "").rstrip("0").rstrip(".")
        values[integer + fraction] += 1
    return values


def within_one_edit(first: str, second: str) -> bool:
    """Whether one character substituted, inserted, deleted, or two adjacent ones
    swapped, turns ``first`` into ``second`` (or they are equal). O(length)."""
    if abs(len(first) - len(second)) > 1:
        return False
    start = 0
    while start < min(len(first), len(second)) and first[start] == second[start]:
        start += 1
    end_first, end_second = len(first), len(second)
    while (
        end_first > start and end_second > start and first[end_first - 1] == second[end_second - 1]
    ):
        end_first -= 1
        end_second -= 1
    left, right = first[start:end_first], second[start:end_second]
    if len(left) <= 1 and len(right) <= 1:
        return True
    return len(left) == len(right) == 2 and left == right[::-1]


_NOT_DIGIT: Final = re.compile(r"\D+")
_WORDS: Final = re.compile(r"[A-Za-z]+")  # ASCII words, looked up among the number words


def figures(text: str) -> str:
    """The digits of the numbers ``text`` states, sorted: what two texts' figures are
    compared by. Separators and order do not count, so that "10.5" and "105"
    (punctuation stripped) and a reordered line agree, while a figure changed, added or
    dropped differs. A digit of any script counts by its value ("٣" is 3); a number word
    is a run of ASCII letters ("Three", "3rd" is 3 and no word); Chinese numerals by the
    value of each run. O(length). The reference of the compiled ``figures_key``."""
    found = _NOT_DIGIT.sub("", text)  # C-speed passes
    if not found.isascii():
        found = "".join(str(unicodedata.decimal(digit)) for digit in found)
    for word in _WORDS.findall(text):
        value = NUMBER_WORDS.get(word.lower())
        if value is not None:
            found += value
    for run in _CHINESE_RUN.findall(text):
        found += str(chinese_value(run))
    return "".join(sorted(found))


NO_FIGURES: Final = _template_kernels.NO_FIGURES  # the figures_key of a text without numbers


def figures_keys(
    points: npt.NDArray[np.uint32], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """The figures key of each text given as code points end to end: 64 bits, never 0
    (free for "not known yet"), NO_FIGURES for a text without numbers; texts with the
    same ``figures`` have the same key, others another one but for a hash collision
    (which keeps a match). O(length), compiled."""
    keys: npt.NDArray[np.uint64] = _template_kernels.figures_keys(points, offsets)
    return keys


def figures_key(text: str) -> int:
    """``figures_keys`` of one text."""
    points = code_points_of(text)  # writable: a read-only array is another compile
    return int(figures_keys(points, np.array([0, len(points)], dtype=np.int64))[0])


def differing_numbers(first: str, second: str) -> str | None:
    """Why two short texts are two reports of one template, or None when they are not:
    both state figures and not the same ones (a text without any, "quake hits Tokyo",
    is not a report that "..., 5 dead" replaces), shown as "numbers differ: 1222 /
    1627" (the least value of each that the other does not state, "-" for none). Texts
    one character edit apart are a typo, not two reports."""
    held, other = figures(first), figures(second)
    if held == other or not held or not other or within_one_edit(first, second):
        return None
    values = numbers(first), numbers(second)
    shown = [min(v) if v else "-" for v in (values[0] - values[1], values[1] - values[0])]
    if shown == ["-", "-"]:  # the same values written otherwise ("007" / "7"): the digits
        shown = [held, other]
    return f"numbers differ: {shown[0]} / {shown[1]}"
