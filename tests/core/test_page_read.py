"""Pages read into text (app/core/page.py): charsets, titles, main content, the fallback.

The references are independent of the code under test: the text a page was made from,
and the article bodies people cut out of real pages by hand (devkit/pages.py), compared
by exact Jaccard over Python sets of word 5-grams.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from app.core.article import article_text, title_forms
from app.core.page import (
    UndecodablePage,
    codec_of,
    decode_page,
    names_chrome,
    names_metadata,
    read_page,
)
from devkit.pages import SITES, long_pages, sample_pages, site_page, teasers_from
from devkit.snippets import Score, Snippets

LANGUAGES_DIR = Path(__file__).resolve().parents[1] / "data" / "pages_languages"

CHINESE = (
    "国家统计局周二公布的数据显示，十月份全国居民消费价格同比上涨百分之二点一，"
    "涨幅比上月扩大零点三个百分点。其中，食品价格上涨百分之六点五，非食品价格上涨百分之零点九。"
    "分析人士指出，猪肉价格的持续上涨是推动物价走高的主要原因，预计年底前涨势仍将延续。"
    "与此同时，工业生产者出厂价格同比下降百分之一点六，降幅有所收窄。"
)
JAPANESE = (
    "気象庁によると、大型で強い台風十九号は十二日夕方、静岡県の伊豆半島に上陸した。"
    "関東地方を中心に記録的な大雨となり、各地で河川の氾濫や土砂災害が相次いでいる。"
    "政府は非常災害対策本部を設置し、自衛隊による救助活動を進めている。"
    "鉄道各社は計画運休を実施し、空の便も多くが欠航となった。"
)
FRENCH = (
    "Le gouvernement a présenté mercredi un projet de loi qui prévoit une hausse des "
    "dépenses consacrées à l'éducation. « C'est une priorité », a déclaré la ministre, "
    "qui espère un vote avant l'été. Les syndicats jugent l'effort insuffisant — "
    "l'opposition dénonce un coût trop élevé pour les finances publiques."
)


def shingles(text: str) -> set[tuple[str, ...]]:
    words = text.casefold().split()
    return {tuple(words[i : i + 5]) for i in range(max(1, len(words) - 4))}


def jaccard(a: str, b: str) -> float:
    first, second = shingles(a), shingles(b)
    return len(first & second) / len(first | second)


def page_of(body: str, charset_meta: str | None = None) -> str:
    meta = f'<meta charset="{charset_meta}">' if charset_meta else ""
    paragraphs = "".join(f"<p>{body}</p>" for _ in range(3))
    return f"<html><head>{meta}<title>News</title></head><body>{paragraphs}</body></html>"


@pytest.mark.parametrize(
    ("body", "codec", "label"),
    [
        (FRENCH, "utf-8", "utf-8"),
        (FRENCH, "cp1252", "windows-1252"),
        (FRENCH, "cp1252", "iso-8859-1"),  # what browsers take latin-1 labels to mean
        (CHINESE, "gbk", "gbk"),
        (CHINESE, "gb18030", "gb2312"),
        (JAPANESE, "shift_jis", "shift_jis"),
        (JAPANESE, "cp932", "Shift_JIS"),
    ],
)
def test_a_page_decodes_by_the_given_the_declared_or_the_detected_charset(
    body: str, codec: str, label: str
) -> None:
    declared = page_of(body, label)
    assert decode_page(declared.encode(codec)) == declared
    plain = page_of(body)
    assert decode_page(plain.encode(codec), label) == plain
    # Neither given nor declared: valid UTF-8 is UTF-8, the rest is detected.
    assert decode_page(plain.encode(codec)) == plain


def test_a_given_charset_wins_over_a_wrong_declaration_and_a_bom_wins_over_both() -> None:
    page = page_of(CHINESE, "iso-8859-1")
    assert decode_page(page.encode("gbk"), "gbk") == page
    assert decode_page(b"\xef\xbb\xbf" + page.encode("utf-8"), "gbk") == page


def test_undecodable_pages_are_refused_with_a_reason() -> None:
    with pytest.raises(UndecodablePage, match="not a known character encoding"):
        decode_page(b"<p>hello</p>", "klingon-8")
    with pytest.raises(UndecodablePage, match="not valid utf-8"):
        decode_page(page_of(CHINESE).encode("gbk"), "utf-8")
    with pytest.raises(UndecodablePage, match="could not be determined"):
        decode_page(bytes(range(256)) * 20)
    assert codec_of("latin1") == "cp1252" and codec_of("nonsense") is None


def test_a_stray_bad_byte_is_replaced_as_a_browser_does() -> None:
    page = page_of(FRENCH).encode("utf-8")
    broken = page[:50] + b"\xff" + page[50:]
    assert decode_page(broken, "utf-8") == page[:50].decode() + "\ufffd" + page[50:].decode()


def test_the_title_is_kept_apart_from_the_matched_text() -> None:
    article = "\n".join(
        f"Paragraph {i} tells the story of the harbour and its ships." for i in range(8)
    )
    page = site_page(SITES[0], "Ships return to the old harbour", article, [])
    read = read_page(page)
    assert read.title == "Ships return to the old harbour"
    assert read.extracted == "main"
    # The headline, byline, share links and caption before the story are gone.
    assert read.text.startswith("Paragraph 0 tells")
    assert set(article.splitlines()) <= set(read.text.splitlines())
    untitled = "<html><body><h1>Only a heading</h1><p>text</p></body></html>"
    assert read_page(untitled, "all").title == "Only a heading"
    assert read_page("<p>no title here</p>", "all").title is None
    titled = "<html><head><title> A   title </title></head><body><p>x</p></body></html>"
    assert read_page(titled, "all").title == "A title"


def test_all_reads_the_visible_text_and_main_falls_back_to_it_when_it_finds_no_article() -> None:
    article = "\n".join(
        f"Sentence {i} of a story about rain in the valley today." for i in range(8)
    )
    page = site_page(SITES[2], "Rain", article, [])
    visible = read_page(page, "all")
    assert visible.extracted == "all"
    assert "cookies" in visible.text and "Sentence 7" in visible.text
    # A page of links only: no main content, its visible text is what there is.
    links = "".join(f'<li><a href="/{i}">Section {i} of the site</a></li>' for i in range(40))
    listing = f"<html><body><nav><ul>{links}</ul></nav></body></html>"
    fallback = read_page(listing, "main")
    assert fallback.extracted == "all"
    assert "Section 39" in fallback.text


def test_real_pages_read_as_their_hand_made_article_bodies() -> None:
    pages = sample_pages()
    assert len(pages) == 12
    main = [jaccard(read_page(page.html).text, page.article) for page in pages]
    visible = [jaccard(read_page(page.html, "all").text, page.article) for page in pages]
    # Chosen from pages the extractor reads well; the visible text reaches 0.8 on none.
    assert sum(j >= 0.8 for j in main) == len(pages), main
    assert sum(j >= 0.8 for j in visible) == 0, visible


def test_the_same_article_on_two_sites_reads_alike_and_two_articles_on_one_site_do_not() -> None:
    pages = long_pages()
    articles = [page.article for page in sample_pages()]
    rng = random.Random(7)
    for index, page in enumerate(pages):
        other = pages[(index + 1) % len(pages)]
        teasers = teasers_from(articles, 14, rng)
        here = read_page(site_page(SITES[0], "Title", page.article, teasers)).text
        there = read_page(
            site_page(SITES[1], "Title", page.article, teasers_from(articles, 14, rng))
        ).text
        neighbour = read_page(site_page(SITES[0], "Other", other.article, teasers)).text
        assert jaccard(here, there) >= 0.8, page.id
        assert jaccard(here, neighbour) < 0.3, page.id


STORY = [
    "The council voted on Tuesday to close the old bridge to traffic from next spring.",
    "Engineers said the steel frame had rusted beyond repair after decades of salt.",
    "A new crossing will open upstream in two years, the mayor told reporters.",
]


def test_article_text_takes_out_title_link_and_edge_lines() -> None:
    titles = title_forms(["Old bridge to close", None], "Old bridge to close | City News")
    main = "\n".join(
        [
            "Old Bridge to Close!",  # the title, in other case and punctuation
            "By Ann Lee · 9:14 AM",  # a byline: before the first paragraph
            *STORY[:2],
            "Read more: budget talks",  # a link's text inside the story
            STORY[2],
            "Topics: City Council",  # after the last paragraph
        ]
    )
    links = {"Read more: budget talks"}
    text = article_text(main, titles, "Old bridge to close | City News", links)
    assert text.splitlines() == STORY


def test_article_text_keeps_what_would_cost_too_much_of_the_text() -> None:
    # An article that ends in a list keeps it: the tail is more than 30% of the words.
    dates = [f"June {day} -- Arena {day}, Springfield" for day in range(1, 12)]
    main = "\n".join([*STORY, *dates])
    assert article_text(main, set(), None, set()).splitlines() == [*STORY, *dates]
    # Lines that are all links (a list page) stay: taking them would take most words.
    links = [f"Story number {i} of the day" for i in range(10)]
    assert article_text("\n".join(links), set(), None, set(links)).splitlines() == links
    # No paragraph at all: nothing to trim to.
    assert article_text("a\nb c", set(), None, set()) == "a\nb c"


def test_article_text_drops_repeated_prose_lines_and_keeps_repeated_code() -> None:
    caption = "The museum, in a palace. (AP Photo)"
    code = ["SELECT", "FROM logs;", "SELECT", "FROM logs;"]
    main = "\n".join(
        ["Report this ad", STORY[0], caption, STORY[1], *code, caption, "Report this ad", STORY[2]]
    )
    assert article_text(main, set(), None, set()).splitlines() == [
        STORY[0],
        STORY[1],
        *code,
        STORY[2],
    ]


def test_a_story_signed_after_its_last_sentence_keeps_its_last_paragraph() -> None:
    # heise signs its stories "(bsc)"; a long line is a paragraph however it ends.
    signed = "Das Update kostet knapp 50 Euro und setzt OS X 10.10 voraus. (bsc)"
    unpunctuated = " ".join(["wort"] * 30)
    main = "\n".join([unpunctuated, *STORY, signed, "Anzeige"])
    assert article_text(main, set(), None, set()).splitlines() == [unpunctuated, *STORY, signed]


def test_elements_named_chrome_are_taken_out_and_their_neighbours_kept() -> None:
    for chrome in (
        "sidebar",
        "c-footer",
        "comments-box",
        "newsletter_signup",
        "AdSlot-ad",
        # Anywhere in the name, camelCase and CSS modules' hashes read through.
        "article__related-list",
        "Component-imageCaption-0-2-32",
        "article_image-container-caption__lZ5kc",
        "relatedposts",
        "blq-foot",
        "author_bio",
    ):
        assert names_chrome(chrome), chrome
    for metadata in ("post-meta", "article-date", "entry-time"):
        assert names_metadata(metadata) and not names_chrome(metadata), metadata
    for kept in (
        "content-with-sidebar-wrp",
        "modal-enabled",
        "ad_body",
        "article-overlay",
        "headline",
        "shared-story",
        "sidebar-layout__content",
        "long-form",
        "PrintThis",
        "commentary",
        "",
    ):
        assert not names_chrome(kept), kept
    story = "".join(
        f"<p>Paragraph {i} of the report says the river rose again in the night.</p>"
        for i in range(10)
    )
    box = "<p>Sign up for our daily briefing and never miss a story from the valley.</p>"
    page = (
        "<html><head><title>Floods</title></head><body>"
        f'<div class="content-with-sidebar">{story}'
        f'<div class="newsletter-box">{box}</div>'
        '<aside id="sidebar"><p>Most read: the mayor resigns after a long week.</p></aside>'
        "</div>"
        # Named chrome but holding the article: a misleading name, kept.
        f'<div class="promo"><article><p>An article inside a promotion box stays in '
        f"the page because it holds an article element.</p></article></div>"
        "</body></html>"
    )
    text = read_page(page).text
    assert "Paragraph 9 of the report" in text
    assert "Sign up" not in text and "Most read" not in text
    assert "inside a promotion box" in text
    # A page whose whole text sits in an element named chrome keeps it.
    whole = f'<html><body><div class="sidebar">{story}</div></body></html>'
    assert "Paragraph 9 of the report" in read_page(whole).text


def test_captions_forms_bylines_and_labels_are_taken_out_in_several_languages() -> None:
    story = "".join(
        f"<p>Absatz {i}: Der Fluss ist in der Nacht wieder gestiegen, sagt der Bericht.</p>"
        for i in range(8)
    )
    page = (
        "<html><head><title>Hochwasser</title></head><body><article>"
        '<div class="article-date">12.03.2024, 08:15 Uhr</div>'
        f"{story[: len(story) // 2]}"
        "<figure><img src=x.jpg><figcaption>Der Pegel am Morgen.</figcaption></figure>"
        "<p>Czytaj więcej</p><p>Lesen Sie auch: Die Stadt baut einen neuen Deich</p>"
        f"{story[len(story) // 2 :]}"
        "<form><p>Newsletter: jeden Morgen die wichtigsten Nachrichten aus der Region.</p>"
        "<button>Abonnieren</button></form>"
        "</article></body></html>"
    )
    text = read_page(page).text
    assert "Absatz 0" in text and "Absatz 7" in text
    for chrome in ("12.03.2024", "Pegel", "Czytaj", "Lesen Sie auch", "Newsletter", "Abonnieren"):
        assert chrome not in text, chrome


def test_a_long_paragraph_told_twice_keeps_its_first_copy() -> None:
    lead = (
        "Drei Wochen vor der Wahl hat eine Debatte über die Grenzen das Land erfasst, "
        "deren Folgen sich erst am Wahltag zeigen werden, sagen die Beobachter in Berlin "
        "und in den Ländern, die seit Jahren über die Aufnahme von Flüchtlingen streiten."
    )
    body = "".join(
        f"<p>Absatz {i} des Berichts über die Debatte im Parlament.</p>" for i in range(6)
    )
    page = (
        f"<html><body><article><p>{lead}</p>{body}</article>"
        f'<div class="teaser-box"><p>{lead}</p></div></body></html>'
    )
    assert read_page(page).text.count("Drei Wochen vor der Wahl") == 1


def test_real_pages_in_eleven_languages_keep_their_article_and_drop_their_chrome() -> None:
    """17 real pages (German, French, Spanish, Portuguese, Czech, Chinese, Arabic,
    Korean, Russian, Polish, Japanese; from mozilla/readability's, goose3's and fundus's
    test pages; two of one Polish site, its chrome on both), each with snippets picked
    by hand: text of the article ("with") and of the page around it ("without": menus,
    breadcrumbs, teasers, related stories, cookie notices, a paywall's sign-up)."""
    annotations = json.loads((LANGUAGES_DIR / "snippets.json").read_text(encoding="utf-8"))
    score = Score()
    for name, entry in annotations.items():
        data = gzip.decompress((LANGUAGES_DIR / f"{name}.html.gz").read_bytes())
        page = read_page(decode_page(data, "utf-8"))
        snippets = Snippets(entry["with"], entry["without"])
        one = Score()
        one.add(snippets, page.text)
        assert one.true_positives >= len(snippets.with_) - 1, name  # the article is read
        score.add(snippets, page.text)
    assert len({entry["language"] for entry in annotations.values()}) >= 11
    assert score.recall >= 0.9 and score.precision >= 0.95, (score.recall, score.precision)
    assert score.pages_right >= 13, score.pages_right


def test_python_only_codecs_and_a_declared_utf16_are_not_taken_at_their_word() -> None:
    for label in ("base64", "rot13", "unicode_escape", "punycode", "utf-7"):
        assert codec_of(label) is None, label
        with pytest.raises(UndecodablePage, match="not a known character encoding"):
            decode_page(b"<p>\\ud800 hello</p>", label)
    # A page read as ASCII to find "utf-16" is not UTF-16 (the HTML standard: UTF-8).
    page = page_of(FRENCH, "utf-16")
    assert decode_page(page.encode("utf-8")) == page
