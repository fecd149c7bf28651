"""Web pages as crawlers fetch them: bytes decoded to text, the title kept apart, and the
text that is matched (the article, or the whole visible text).

No I/O. The service, the Redis backend and ``neardup dedup`` all read a page through
``read_page`` so that an offline job and the service agree on a crawl.

Decoding follows the order a browser uses (WHATWG encoding sniffing, simplified): a byte
order mark, then the charset the client sends (the fetch's Content-Type), then the page's
own ``<meta charset>`` / ``http-equiv`` declaration in its first bytes, then UTF-8 if the
bytes are valid UTF-8, then charset-normalizer's guess. Legacy labels mean what browsers
make of them (``iso-8859-1`` is Windows-1252, ``gb2312`` is GB18030, ``shift_jis`` is
Windows-31J), because that is how the page was written to be read.
"""

from __future__ import annotations

import codecs
import functools
import re
from dataclasses import dataclass
from typing import Literal

from charset_normalizer import from_bytes
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import DocumentNode, HTMLTree
from selectolax.lexbor import LexborHTMLParser
from selectolax.lexbor import LexborNode as Node

from app.core.article import article_text, title_forms, word_count
from app.core.text import html_to_text, visible_text

Extraction = Literal["main", "all"]
EXTRACTIONS: tuple[Extraction, ...] = ("main", "all")

# A page whose main content is empty or has fewer than this share of the words of its
# visible text is read as its visible text instead: the extractor missed the article (a
# list page, a page of short posts, markup it does not know). On 181 news pages with
# hand-made article bodies it fires once at 5%; at 10% and 20% it takes more pages whose
# extraction was right, and makes every one worse (docs/benchmarks.md, "Web pages").
# Words, not characters: a short story in a heavy page is 1% of its characters.
FALLBACK_MIN_SHARE = 0.05

# The HTML standard's prescan reads the first 1024 bytes for a declaration; real pages put
# scripts and styles before it, so look further.
_DECLARATION_WINDOW = 16_384
_META_CHARSET = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([a-zA-Z0-9_:.()+-]+)""", re.IGNORECASE
)
# Declared labels read as browsers read them (the WHATWG Encoding Standard's mapping).
_BROWSER_CODECS = {
    "ascii": "cp1252",
    "latin-1": "cp1252",
    "iso8859-1": "cp1252",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "big5": "big5hkscs",
    "iso8859-9": "cp1254",
    "tis-620": "cp874",
    "iso8859-11": "cp874",
}
# Python codecs that decode bytes to text but are no charset a page is written in: their
# output may hold lone surrogates (unicode_escape) or they exist for other protocols.
_NOT_PAGE_CODECS = frozenset(
    {"unicode-escape", "raw-unicode-escape", "punycode", "idna", "undefined", "utf-7"}
)
# A declared charset that leaves more than this share of the bytes undecodable is not the
# page's charset; below it, the odd broken byte becomes U+FFFD as in a browser.
_MAX_BAD_BYTE_SHARE = 0.01


class UndecodablePage(ValueError):
    """Bytes that are not text in any charset given, declared or detected."""


@dataclass(frozen=True, slots=True)
class Page:
    """What a page holds for matching: ``text`` (fingerprinted and matched), ``title``
    (og:title, else <title>, else the first <h1>; None if it has none) and which text was
    used (``extracted``: "main" for the article, "all" for the whole visible text)."""

    text: str
    title: str | None
    extracted: Extraction


def codec_of(label: str) -> str | None:
    """The Python codec a charset label names, as a browser reads it; None if unknown or
    not a character encoding of pages (base64, rot13, unicode_escape: Python's own)."""
    try:
        info = codecs.lookup(label.strip().strip("\"'"))
    except (LookupError, ValueError):
        return None
    name = info.name
    # Codecs that are not bytes to text (base64, rot13, zlib) say so in this flag.
    if not getattr(info, "_is_text_encoding", True) or name in _NOT_PAGE_CODECS:
        return None
    return _BROWSER_CODECS.get(name, name)


def declared_charset(data: bytes) -> str | None:
    """The codec of the page's own ``<meta charset>`` or ``http-equiv`` declaration. A
    page that could be read to find it is not UTF-16: that declaration means UTF-8."""
    match = _META_CHARSET.search(data, 0, _DECLARATION_WINDOW)
    codec = codec_of(match.group(1).decode("ascii")) if match else None
    return "utf-8" if codec is not None and codec.startswith("utf-16") else codec


def _decode_as(data: bytes, codec: str) -> str | None:
    """``data`` in ``codec``, a stray bad byte replaced; None if it is not that charset."""
    try:
        return data.decode(codec)
    except UnicodeDecodeError:
        pass
    text = data.decode(codec, errors="replace")
    bad = text.count("\ufffd")
    return text if bad <= _MAX_BAD_BYTE_SHARE * max(len(data), 1) else None


def decode_page(data: bytes, charset: str | None = None) -> str:
    """The text of a page's bytes (see the module's docstring for the order); raises
    UndecodablePage for an unknown charset label or bytes that are no text.

    Cost: O(bytes) for a given, declared or UTF-8 page; charset-normalizer's detection
    (a few ms per MB, sampled) only for the rest.

    >>> decode_page("café".encode("cp1252"), "iso-8859-1")
    'café'
    >>> decode_page(b'<meta charset="gbk"><p>' + "中文".encode("gbk"))
    '<meta charset="gbk"><p>中文'
    """
    for bom, codec in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le")):
        if data.startswith(bom):
            return data[len(bom) :].decode(codec, errors="replace")
    if data.startswith(codecs.BOM_UTF16_BE):
        return data[2:].decode("utf-16-be", errors="replace")
    if charset is not None:
        given = codec_of(charset)
        if given is None:
            raise UndecodablePage(f"charset {charset!r} is not a known character encoding")
        text = _decode_as(data, given)
        if text is None:
            raise UndecodablePage(f"the page is not valid {charset} text")
        return text
    declared = declared_charset(data)
    if declared is not None:
        text = _decode_as(data, declared)
        if text is not None:
            return text
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise UndecodablePage(
            "the page's character encoding could not be determined: send its charset"
        )
    return str(best)


def _meta(document: DocumentNode, selector: str) -> str | None:
    node = document.query_selector(selector)
    return node.getattr("content") if node is not None else None


def _titles(tree: HTMLTree) -> tuple[str | None, list[str | None]]:
    """(the page's title: og:title, else <title>, else the first <h1>, white space
    collapsed; every title it gives: og:title, twitter:title, the first <h1>)."""
    document = tree.document
    if document is None:
        return None, []
    heading = document.query_selector("h1")
    titles = [
        _meta(document, 'meta[property="og:title"]'),
        _meta(document, 'meta[name="twitter:title"]'),
        heading.text if heading is not None else None,
    ]
    for candidate in (titles[0], tree.title, titles[2]):
        title = " ".join(candidate.split()) if candidate else ""
        if title:
            return title, titles
    return None, titles


def _visible_and_links(html: str) -> tuple[str, set[str], LexborHTMLParser]:
    """The page's visible text (as ``text.html_to_text``), its links' texts, and its
    tree without scripts and styles."""
    tree = LexborHTMLParser(html)
    links = {" ".join(node.text().split()) for node in tree.css("a")}
    links.discard("")
    return visible_text(tree), links, tree


# Elements whose class or id names them chrome (ads, modals, newsletter and sign-up
# boxes, logins, cookie notices, promotions, related and popular lists, comments,
# captions, bylines and datelines, author notes, tags, footers) are taken out before the
# extractor reads the page. A name is cut in parts at "-", "_" and camelCase
# ("imageCaption"); parts of more than letters (CSS modules' hashes, sizes,
# "md:flex") are left out.
# It names chrome when
# - a part is one of _CHROME_WORDS: "comments-box", "article__related-list",
#   "Component-imageCaption-0-2-32";
# - its first or last part is one of _CHROME_EDGES and no part names content: "c-footer",
#   "ad-slot", but not "article-overlay" or "ad_body";
# and no part is one of _MODIFIER_WORDS ("content-with-sidebar-wrp", "sidebar-layout").
_CHROME_WORDS = frozenset(
    "comment comments kommentare kommentar commentaires comentarios komentarze disqus "
    "related newsletter newsletters subscribe subscription signup registration "
    "caption captions figcaption legend byline bylines dateline timestamp author authors "
    "breadcrumb breadcrumbs share sharing sharebar social sidebar siderail tags "
    "advert advertisement adsbygoogle outbrain taboola cookie cookies consent gdpr "
    "promo promos promotion recommended recommendations popular mostpopular "
    "footer prefooter foot".split()
)
# A name whose last part is one of these names a block's metadata ("post-meta",
# "article-date", "author_bio"), chrome where it is short: a live blog's entries are
# named "time" too.
_METADATA_HEADS = frozenset("meta metadata date dates time bio credit credits".split())
_METADATA_MAX_WORDS = 25
# Chrome words of six letters or more name chrome at the start or the end of a part too,
# where a site writes words together: "relatedposts", "commentlist", "mostpopular".
_JOINED_STARTS = tuple(
    "related comment newsletter subscri sidebar caption byline breadcrumb advert "
    "outbrain taboola cookie promotion recommend popular footer".split()
)
_JOINED_ENDS = tuple(
    "related comment comments newsletter sidebar caption byline breadcrumb breadcrumbs "
    "popular footer".split()
)
_CHROME_EDGES = frozenset(
    "ad ads anzeige werbung publicite publicidad rail modal popup overlay login register "
    "cta suggested pullquote hatnote abuse search toast marquee menu nav "
    "navigation navbar toolbar rating sponsor sponsored banner alert".split()
)
_CONTENT_WORDS = frozenset("content article body main post entry story text page".split())
# Parts that make a name a layout's or a state's: "content-with-sidebar", "modal-enabled",
# "scroller-no-footer", "sidebar-layout" name the element beside or around the chrome.
_MODIFIER_WORDS = frozenset("with and w no has is enabled open active layout grid".split())
# Commas in Latin, Arabic and CJK scripts (Readability counts them to score paragraphs).
_COMMAS = re.compile("[,\u060c\ufe50\ufe10\ufe11\u2e41\u2e34\u2e32\uff0c\u3001]")
_NAME_PARTS = re.compile(r"[-_\s]+|(?<=[a-z])(?=[A-Z])")
# Elements that are chrome whatever their names: forms (newsletter, login, search),
# their controls, and captions.
_CHROME_TAGS = "form, button, select, textarea, dialog, figcaption"
# Never these, whatever their names: the page's frame and its article.
_FRAME = frozenset({"html", "body", "main", "article"})
# Nor an element holding this share of the page's words: a name that misleads.
_CHROME_MAX_SHARE = 0.4


def names_chrome(name: str) -> bool:
    """Whether a class or id names chrome (see _CHROME_WORDS)."""
    return _names_kind(name) == _CHROME


def names_metadata(name: str) -> bool:
    """Whether a class or id names a block's metadata (see _METADATA_HEADS)."""
    return _names_kind(name) == _METADATA


_CHROME, _METADATA = 1, 2


@functools.lru_cache(maxsize=16_384)
def _names_kind(names: str) -> int:
    """_CHROME, _METADATA or 0 for an element's class and id names (space-separated):
    cached, because a page repeats its class names and a site its pages'."""
    kind = 0
    for name in names.split():
        parts = [part.lower() for part in _NAME_PARTS.split(name) if part.isalpha()]
        if not parts or not _MODIFIER_WORDS.isdisjoint(parts):
            continue
        if not _CHROME_WORDS.isdisjoint(parts) or any(map(_joined_chrome, parts)):
            return _CHROME
        if not _CONTENT_WORDS.isdisjoint(parts):
            kind = _METADATA if parts[-1] in _METADATA_HEADS else kind
            continue
        if parts[0] in _CHROME_EDGES or parts[-1] in _CHROME_EDGES:
            return _CHROME
        kind = _METADATA if parts[-1] in _METADATA_HEADS else kind
    return kind


def drop_chrome(tree: LexborHTMLParser, words: int | None = None) -> bool:
    """Take out the elements whose class or id names them chrome (``names_chrome``, and
    ``names_metadata`` where short) and those of _CHROME_TAGS, but not the page's frame,
    an element that holds an <article> or <main>, or one that holds _CHROME_MAX_SHARE of
    the page's words; whether any was. On selectolax's tree: resiliparse's node
    collections cost O(n) an item (seconds on a large page). O(elements + the text of the
    named ones); names are judged once (``_names_kind`` is cached)."""
    body = tree.body
    if body is None:
        return False
    if words is None:  # the page's words, where the caller has not counted them
        words = len(body.text(separator=" ").split())
    dropped: list[Node] = []
    taken: set[int] = set()
    named = [node for node in tree.css("[class], [id]") if _named_chrome(node)]
    for node in [*named, *tree.css(_CHROME_TAGS)]:
        if node.tag in _FRAME or _inside(node, taken) or node.mem_id in taken:
            continue
        if node.css_first("article, main") is not None:
            continue
        if len(node.text(separator=" ").split()) > _CHROME_MAX_SHARE * words:
            continue
        dropped.append(node)
        taken.add(node.mem_id)
    # Taken out after the walk, none inside another: a node is never used once freed.
    for node in dropped:
        if not _inside(node, taken - {node.mem_id}):
            node.decompose()
    return bool(dropped)


def _joined_chrome(part: str) -> bool:
    joined = part.startswith(_JOINED_STARTS) or part.endswith(_JOINED_ENDS)
    return joined and not part.startswith("commentar")  # an opinion piece


def _named_chrome(node: Node) -> bool:
    attributes = node.attributes
    kind = _names_kind(f"{attributes.get('class') or ''} {attributes.get('id') or ''}")
    if kind == _METADATA:
        return len(node.text(separator=" ").split()) <= _METADATA_MAX_WORDS
    return kind == _CHROME


def _inside(node: Node, taken: set[int]) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.mem_id in taken:
            return True
        parent = parent.parent
    return False


def main_content(tree: HTMLTree) -> str:
    """resiliparse's main content of a parsed page, one block a line: without comments,
    image alt texts, post metadata, noscript, links' targets or list bullets."""
    return _plain_text(tree, main_content=True)


def read_page(html: str, extract: Extraction = "main") -> Page:
    """The page's text for matching, by the collection's ``html.extract``: "main", its
    main content (the elements named chrome taken out, then resiliparse's extractor,
    without comments, image texts and post metadata; its title, link and edge lines
    taken out by ``article.article_text``),
    falling back to the visible text where that is empty or a small share of it
    (FALLBACK_MIN_SHARE); "all", the visible text (``text.html_to_text``).

    Cost: two HTML5 parses (Lexbor, in C: selectolax's and resiliparse's, the second of
    the page without its chrome), a third where resiliparse's main content is too short
    (``_densest_block``), and linear passes (docs/benchmarks.md, "Extraction by
    language").
    """
    if extract == "all":
        return Page(html_to_text(html), _titles(HTMLTree.parse(html))[0], "all")
    visible, links, parsed = _visible_and_links(html)
    # One resiliparse parse: of the page without its chrome where some was taken out
    # (its <head>, and so its titles, stay).
    dropped = drop_chrome(parsed, len(visible.split()))
    tree = HTMLTree.parse(parsed.html or "") if dropped else HTMLTree.parse(html)
    title, titles = _titles(tree)
    forms = title_forms(titles, tree.title)
    main = article_text(main_content(tree), forms, tree.title, links)
    # Words as article.word_count counts them: Japanese and Chinese have no spaces.
    enough = FALLBACK_MIN_SHARE * word_count(visible)
    if main and word_count(main) >= enough:
        return Page(main, title, "main")
    # resiliparse chose a block without the story (a teaser, a menu): the block that
    # holds the most paragraph text, as Readability finds it, is read instead.
    block = _densest_block(parsed)
    if block is not None:
        main = article_text(_block_text(block), forms, tree.title, links)
        if main and word_count(main) >= enough:
            return Page(main, title, "main")
    return Page(visible, title, "all")


# A paragraph shorter than this (characters) does not vote for its block.
_PARAGRAPH_MIN_CHARS = 25


def _densest_block(tree: LexborHTMLParser) -> Node | None:
    """The element whose paragraphs hold the most text: each <p> of _PARAGRAPH_MIN_CHARS
    or more adds one point, one per comma and one per 100 characters (up to 3) to its
    parent, and half as much to its grandparent (Readability's scoring, without its
    class weights). O(paragraphs)."""
    scores: dict[int, float] = {}
    nodes: dict[int, Node] = {}
    for paragraph in tree.css("p"):
        text = paragraph.text()
        if len(text.strip()) < _PARAGRAPH_MIN_CHARS:
            continue
        score = 1 + len(_COMMAS.findall(text)) + min(len(text) // 100, 3)
        parent = paragraph.parent
        for share in (1.0, 0.5):
            if parent is None or parent.tag in ("html", "body"):
                break
            nodes[parent.mem_id] = parent
            scores[parent.mem_id] = scores.get(parent.mem_id, 0.0) + score * share
            parent = parent.parent
    if not scores:
        return None
    return nodes[max(scores, key=scores.__getitem__)]


def _block_text(node: Node) -> str:
    """An element's text, one block a line, as ``main_content`` writes it."""
    return _plain_text(HTMLTree.parse(node.html or ""), main_content=False)


def _plain_text(tree: HTMLTree, main_content: bool) -> str:
    """resiliparse's text of a tree, one block a line, as both extractions take it:
    without comments, image alt texts, noscript, links' targets or list bullets; the main
    content also without post metadata (``post_meta`` acts on that extract only: the
    other passes resiliparse's default, True)."""
    return str(
        extract_plain_text(
            tree,
            main_content=main_content,
            alt_texts=False,
            links=False,
            list_bullets=False,
            noscript=False,
            comments=False,
            post_meta=not main_content,
        )
    )
