"""What is left of a page's chrome inside its extracted main content, taken out line by line.

A main-content extractor returns the article's block with what sits around the story in it:
the headline, the byline and date, "Share on Facebook", "Advertisement", the tags and the
newsletter box. A clean copy of the article (a wire story, an RSS body) has none of them,
so each costs Jaccard. Three rules, chosen on 181 news pages with hand-made article bodies
by 2-fold cross-validation over domains (docs/benchmarks.md, "Web pages"): with them the
share of pages whose text reaches word 5-gram Jaccard 0.8 with its article goes from 78.5%
to 83-84% held out, short articles (under 100 words) from 33% to 68%.

1. Title lines: among the first TITLE_WINDOW lines, a line that is the page's title (its
   og:title, twitter:title, first <h1>, <title>, or a part of <title> between separators
   such as " | ") or the start of its <title>.
2. Link lines: a line that is exactly the text of one of the page's links (a teaser, a
   "Read more", a tag), unless that would take more than GUARD_SHARE of the words.
3. Edges: the lines before the first paragraph and after the last one (a paragraph has at
   least PARAGRAPH_WORDS words and ends as a sentence ends, an author's short tag after
   it allowed, or has LONG_WORDS words), each side unless it would take more than
   GUARD_SHARE of the words (an article that ends in a list of dates keeps it).

Before them, repeated lines: a line of prose (three words or more, no code punctuation)
that the text holds more than once is chrome (a caption a gallery repeats, "report this
ad", a newsletter box at the top and the bottom); every copy goes. Measured on 88 real
pages of mozilla/readability's tests in 8 languages (bench/extraction.py) and the 181
news pages (docs/benchmarks.md, "Extraction by language").

No I/O; linear in the text.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

TITLE_WINDOW = 5
PARAGRAPH_WORDS = 8
GUARD_SHARE = 0.3
# A sentence's end, with an author's short tag after it as some sites sign a story
# ("... voraus. (bsc)").
_ENDS_AS_SENTENCE = re.compile(r"""[.!?"”’。！？»)]\s*(\([^()]{1,12}\))?$""")
# A line this long is a paragraph however it ends (Chinese written with spaces for
# commas, a story whose last sentence runs into its sign-off).
LONG_WORDS = 28
_CODE = re.compile(r"[;{}=<>]")
# A <title> is often "Headline | Section | Site": its parts of three words or more.
_TITLE_SEPARATOR = re.compile(r"\s+[|\-–—:·»/]\s+")
_NOT_WORD = re.compile(r"[\W_]+")
# Kana and Han: a word is about two characters where words have no spaces between them.
_NO_SPACE_CHARS = re.compile("[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


def loose(text: str) -> str:
    """A line as compared with a title: NFKC, casefolded, punctuation and spacing gone."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NOT_WORD.sub(" ", folded).split())


def word_count(line: str) -> int:
    return len(line.split()) + len(_NO_SPACE_CHARS.findall(line)) // 2


# The rules count a line's words several times (each guard sums them): counted once.
_line_words = functools.lru_cache(maxsize=8192)(word_count)


# Labels a site puts between an article's paragraphs, alone on a line or before a
# teaser's title ("Read more: ..."), in the languages of the pages measured; compared in
# their loose form (``loose``).
_LABELS = frozenset(
    loose(label)
    for label in (
        "read more|read also|also read|see also|related|related articles|related stories|"
        "more on this story|continue reading|advertisement|watch|listen|"
        "lesen sie auch|lesen sie mehr|mehr zum thema|weiterlesen|anzeige|werbung|"
        "lire aussi|à lire aussi|lire la suite|publicité|"
        "leer más|lea también|lee también|te puede interesar|publicidad|"
        "leia mais|leia também|publicidade|leggi anche|pubblicità|"
        "czytaj więcej|czytaj też|czytaj także|zobacz też|zobacz także|reklama|"
        "читайте также|читать далее|подробнее|смотрите также|реклама|"
        "続きを読む|関連記事|広告|阅读更多|相关阅读|相关新闻|广告|延伸阅读|"
        "اقرأ أيضا|اقرأ أيضاً|اقرأ المزيد|إعلان|"
        "les også|les mer|läs också|läs mer|læs også|lees ook|devamını oku"
    ).split("|")
)
# A label followed by a teaser's title of at most this many words is a teaser line.
TEASER_WORDS = 20
_LABEL_PREFIX = re.compile(r"^\s*([^:|>]{2,30})\s*[:|>]\s*(.*)$")


def _is_label(line: str) -> bool:
    """A label alone ("Czytaj więcej"), or a label and a teaser ("Read more: ...")."""
    if loose(line) in _LABELS:
        return True
    prefix = _LABEL_PREFIX.match(line)
    return (
        prefix is not None
        and loose(prefix.group(1)) in _LABELS
        and word_count(prefix.group(2)) <= TEASER_WORDS
    )


def title_forms(titles: Iterable[str | None], document_title: str | None) -> set[str]:
    """The loose forms a title line of the page may take."""
    forms = {loose(title) for title in titles if title}
    if document_title:
        forms.add(loose(document_title))
        forms |= {
            loose(part) for part in _TITLE_SEPARATOR.split(document_title) if len(part.split()) >= 3
        }
    forms.discard("")
    return forms


def _is_title(line: str, forms: set[str], document_title: str) -> bool:
    form = loose(line)
    if not form:
        return False
    return form in forms or (len(form.split()) >= 4 and document_title.startswith(form + " "))


def _prose(line: str) -> bool:
    """Words, not code (whose lines repeat: "SELECT", "}", "FROM x;")."""
    return _line_words(line) >= 3 and _CODE.search(line) is None


def _is_paragraph(line: str) -> bool:
    words = _line_words(line)
    if words >= LONG_WORDS:
        return True
    return words >= PARAGRAPH_WORDS and _ENDS_AS_SENTENCE.search(line) is not None


def article_text(
    main: str, titles: set[str], document_title: str | None, link_texts: set[str]
) -> str:
    """``main`` (an extractor's text, one block a line) without its title, link and edge
    lines (see the module's docstring). ``titles`` comes from ``title_forms``;
    ``link_texts`` holds the page's link texts, white space collapsed."""
    lines = [line.strip() for line in main.split("\n")]
    lines = [line for line in lines if line]
    seen = Counter(lines)
    kept: list[str] = []
    told: set[str] = set()
    for line in lines:
        # A repeated paragraph of LONG_WORDS is the story told twice (a paywall's
        # teaser of its first paragraph): its first copy stays.
        if seen[line] == 1 or not _prose(line):
            kept.append(line)
        elif _line_words(line) >= LONG_WORDS and line not in told:
            kept.append(line)
            told.add(line)
    lines = _guarded(lines, kept)
    lines = _guarded(lines, [line for line in lines if not _is_label(line)])
    whole_title = loose(document_title or "")
    head = [line for line in lines[:TITLE_WINDOW] if not _is_title(line, titles, whole_title)]
    lines = head + lines[TITLE_WINDOW:]
    lines = _guarded(lines, [line for line in lines if " ".join(line.split()) not in link_texts])
    total = sum(map(_line_words, lines))
    first = next((i for i, line in enumerate(lines) if _is_paragraph(line)), None)
    if first is None:
        return "\n".join(lines)
    last = max(i for i, line in enumerate(lines) if _is_paragraph(line))
    if sum(map(_line_words, lines[:first])) > GUARD_SHARE * total:
        first = 0
    if sum(map(_line_words, lines[last + 1 :])) > GUARD_SHARE * total:
        last = len(lines) - 1
    return "\n".join(lines[first : last + 1])


def _guarded(lines: list[str], kept: list[str]) -> list[str]:
    """``kept``, unless it has lost more than GUARD_SHARE of the words (or all lines)."""
    before = sum(map(_line_words, lines))
    if kept and sum(map(_line_words, kept)) >= (1 - GUARD_SHARE) * before:
        return kept
    return lines
