"""Normalisation against unicodedata used directly."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.text import normalize


def plain_normalize(text: str) -> str:
    """The definition, without the fast paths of app.core.text."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split())


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs", "Mn"])))
def test_normalize_equals_the_definition_outside_spaceless_scripts(text: str) -> None:
    expected = plain_normalize(text)
    result = normalize(text)
    # Only the removal of spaces between CJK (or Thai...) characters may differ.
    assert result.replace(" ", "") == expected.replace(" ", "")
    if all(ord(char) < 0x0E00 for char in text):
        assert result == expected


def test_full_width_forms_and_ideographic_space() -> None:
    assert normalize("ＡＢＣ\u3000１２３，ｘ") == "abc 123,x"
    assert normalize("Ａ\u0301") == unicodedata.normalize("NFKC", "A\u0301").casefold()


def test_white_space_between_cjk_characters_is_dropped_but_kept_elsewhere() -> None:
    assert normalize("新华社\n 北京 电 Reuters  reports") == "新华社北京电 reuters reports"
    assert normalize("東京 タワー") == "東京タワー"
