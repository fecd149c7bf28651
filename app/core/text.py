"""Text normalisation: the one place that decides when two texts count as the same.

Every fingerprint is computed from ``normalize(text)``, so a change here changes every
stored fingerprint: collections record the parameters they were built with and never
compare fingerprints made under different ones.
"""

from __future__ import annotations

import re
import unicodedata

from ftfy.fixes import fix_c1_controls
from selectolax.lexbor import LexborHTMLParser

# Scripts written without spaces between words. White space between two of their
# characters carries no meaning (it is layout, or an artefact of line wrapping), so it
# is dropped; word tokenisation falls back to one token per character for them.
_NO_SPACE_SCRIPT_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # half-width and full-width forms (left after NFKC: half-width kana)
    (0x20000, 0x3134F),  # CJK extensions B to G
)

_NO_SPACE_CLASS = "".join(
    f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _NO_SPACE_SCRIPT_RANGES
)
_SPACE_BETWEEN_NO_SPACE_CHARS = re.compile(f"(?<=[{_NO_SPACE_CLASS}]) (?=[{_NO_SPACE_CLASS}])")


# NFKC maps full-width ASCII (U+FF01-FF5E) and the ideographic space to ASCII, but one such
# character sends unicodedata down its slow path (Chinese text with its usual full-width
# commas). Mapping them first with the same result leaves NFKC on its fast path
# (bench/fingerprints.py, docs/benchmarks.md, "Fingerprints"); NFKC of the mapped text
# equals NFKC of the original because their compatibility decompositions are the same.
_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")
_FULL_WIDTH_TO_ASCII = {chr(cp): chr(cp - 0xFEE0) for cp in range(0xFF01, 0xFF5F)} | {"\u3000": " "}


# The full-width forms Chinese and Japanese text is full of: plain str.replace (C speed)
# for them, the regex with its Python callback only for any rarer one left.
_COMMON_FULL_WIDTH = ("，", "：", "；", "！", "？", "（", "）", "\u3000")


def _to_ascii(match: re.Match[str]) -> str:
    return _FULL_WIDTH_TO_ASCII[match.group()]


def _map_full_width(text: str) -> str:
    for form in _COMMON_FULL_WIDTH:
        if form in text:
            text = text.replace(form, _FULL_WIDTH_TO_ASCII[form])
    if _FULL_WIDTH.search(text):
        text = _FULL_WIDTH.sub(_to_ascii, text)
    return text


# Control characters that str.split does not take for white space: C0 but tab, line feed,
# vertical tab, form feed, carriage return and 0x1C-0x1F; DEL; C1 (U+0080-U+009F).
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x9f]")


def repair_controls(text: str) -> str:
    """Control characters of real-world text read as a browser would: a C1 character
    U+0080-U+009F is the Windows-1252 character of that byte (a page decoded as Latin-1:
    U+0091 is a left single quote, U+0085 an ellipsis; ftfy's fix), and any other
    control character (NUL, escape, DEL, the five C1 bytes Windows-1252 leaves undefined)
    counts as white space.

    Cost: one regex scan; texts with controls pay a second pass.

    >>> repair_controls("it\x92s\x00here")
    'it’s here'
    """
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(" ", fix_c1_controls(text))


class EmptyDocument(ValueError):
    """The text has nothing left to fingerprint once normalised."""


def is_no_space_script(code_point: int) -> bool:
    """True for a character of a script written without spaces between words (CJK, Thai...)."""
    return any(lo <= code_point <= hi for lo, hi in _NO_SPACE_SCRIPT_RANGES)


def html_to_text(html: str) -> str:
    """The visible text of an HTML page or fragment: scripts, styles and tags removed.

    Uses selectolax (the Lexbor HTML5 parser), which copes with broken markup the way a
    browser does. Block boundaries become spaces so words of adjacent elements stay apart.
    """
    return visible_text(LexborHTMLParser(html))


def visible_text(tree: LexborHTMLParser) -> str:
    """``html_to_text`` of a parsed page (its scripts and styles are removed from it)."""
    tree.strip_tags(["script", "style", "noscript", "template"])
    root = tree.body if tree.body is not None else tree.root
    if root is None:
        return ""
    text: str = root.text(separator=" ")
    return text


def normalize(text: str, *, html: bool = False) -> str:
    """Canonical form of a text: control characters repaired (``repair_controls``), NFKC,
    casefolded, white space collapsed to single spaces.

    NFKC makes full-width and half-width forms agree (``ＡＢＣ１`` -> ``abc1``), casefold
    is the Unicode-aware lower-casing, and white space between two characters of scripts
    written without spaces (Chinese, Japanese, Thai...) is removed.

    Cost: linear in the text, all in C (``unicodedata``, ``str.split``, one regex pass
    that runs only for texts with non-ASCII characters).

    >>> normalize("  Ｈｅｌｌｏ\\n\\tWORLD  ")
    'hello world'
    >>> normalize("中国 经济\\n增长")
    '中国经济增长'
    """
    if html:
        text = html_to_text(text)
    text = repair_controls(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", _map_full_width(text))
    text = text.casefold()
    text = " ".join(text.split())
    if " " in text and not text.isascii():
        text = _SPACE_BETWEEN_NO_SPACE_CHARS.sub("", text)
    return text
