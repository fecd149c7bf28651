"""Extraction scored by snippets, as trafilatura's own benchmark scores it: for each page,
short pieces of text that belong to its main content ("with") and pieces of its page
that do not ("without": navigation, footers, comments, related links). An extractor is
right on a "with" snippet it keeps and on a "without" snippet it drops; precision, recall
and F1 count snippets over all pages, and a page is all right when every snippet is.

Snippets are compared with every white space taken out (NFKC, casefolded), so that one
extractor's line breaks and another's spaces agree.

``derive_snippets`` makes snippets from a page and a reference of its main content (an
HTML file of it, as mozilla/readability's test pages give: test/test-pages/*/
expected.html): "with" from the reference's blocks, "without" from the page's visible
lines that the reference does not hold. Used by bench/extraction.py; the tests carry
snippets picked by hand (tests/data/pages_languages/snippets.json).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborHTMLParser

_SPACE = re.compile(r"\s+")
# Kana, Han, Hangul: a character carries about what a word does in other scripts.
_DENSE = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_BLOCKS = "p, li, h2, h3, h4, blockquote, pre, td, dd"
# Captions and credits are neither: extractors differ on them, and a clean copy of the
# story (what a page is matched against) has none.
_NEUTRAL = "figure, figcaption, .caption, [class*=caption], [class*=credit]"
SNIPPET_CHARS = 80


def squeezed(text: str) -> str:
    """NFKC, casefolded, with no white space."""
    return _SPACE.sub("", unicodedata.normalize("NFKC", text).casefold())


def _long_enough(text: str) -> bool:
    dense = len(_DENSE.findall(text))
    return dense >= 10 or len(text.split()) >= 5


def _spread(items: list[str], count: int) -> list[str]:
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


@dataclass
class Snippets:
    with_: list[str] = field(default_factory=list)
    without: list[str] = field(default_factory=list)


def derive_snippets(page_html: str, reference_html: str, count: int = 6) -> Snippets:
    """Up to ``count`` snippets each way (see the module's docstring). O(page)."""
    reference = LexborHTMLParser(reference_html)
    for node in reference.css(_NEUTRAL):
        node.decompose()
    reference_text = squeezed(reference.text(separator=" "))
    with_: list[str] = []
    for node in reference.css(_BLOCKS):
        text = " ".join(node.text(separator=" ").split())
        if _long_enough(text):
            with_.append(text[:SNIPPET_CHARS])
    without: list[str] = []
    blocks = extract_plain_text(
        HTMLTree.parse(page_html), main_content=False, alt_texts=False, noscript=False
    )
    for line in str(blocks).split("\n"):
        line = " ".join(line.split())
        if _long_enough(line) and squeezed(line) not in reference_text:
            without.append(line[:SNIPPET_CHARS])
    return Snippets(_spread(list(dict.fromkeys(with_)), count), _spread(without, count))


@dataclass
class Score:
    true_positives: int = 0
    false_negatives: int = 0
    false_positives: int = 0
    true_negatives: int = 0
    pages: int = 0
    pages_right: int = 0

    def add(self, snippets: Snippets, extracted: str) -> None:
        """One page's snippets against what an extractor read of it."""
        text = squeezed(extracted)
        kept = [squeezed(s) in text for s in snippets.with_]
        leaked = [squeezed(s) in text for s in snippets.without]
        self.true_positives += sum(kept)
        self.false_negatives += len(kept) - sum(kept)
        self.false_positives += sum(leaked)
        self.true_negatives += len(leaked) - sum(leaked)
        self.pages += 1
        self.pages_right += all(kept) and not any(leaked)

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 0.0

    @property
    def recall(self) -> float:
        wanted = self.true_positives + self.false_negatives
        return self.true_positives / wanted if wanted else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def scored(pages: Sequence[tuple[Snippets, str]]) -> Score:
    score = Score()
    for snippets, extracted in pages:
        score.add(snippets, extracted)
    return score
