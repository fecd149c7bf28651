"""Web pages for tests and benchmarks: real news pages with their hand-made article bodies,
and any article placed into the chrome of a made-up news site.

``sample_pages()`` reads tests/data/pages: 12 pages of the scrapinghub
article-extraction-benchmark (MIT licence; github.com/scrapinghub/article-extraction-
benchmark), each with the article body people cut out of it by hand. ``benchmark_pages``
reads the whole benchmark (181 pages) from a checkout of that repository.

``site_page`` writes a page the way news sites build them: a header with navigation and a
breaking-news strip, a cookie banner, the article with its byline, a photo caption and
share buttons inside, a "most read" list and "related stories" with teaser texts of other
articles, a newsletter box, readers' comments, and a footer of link lists and legal text.
Each site (SITES) has its own markup, class names and wording, so that the same article on
two sites shares no chrome, and two articles on one site share all of it.
"""

from __future__ import annotations

import gzip
import html
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "pages"


@dataclass(frozen=True, slots=True)
class RealPage:
    id: str
    url: str
    html: str
    article: str  # the article's body as people extracted it

    @property
    def domain(self) -> str:
        return self.url.split("/")[2].removeprefix("www.")


def _read_pages(html_dir: Path, truth: dict[str, dict[str, str]]) -> list[RealPage]:
    pages = []
    for key, entry in sorted(truth.items()):
        path = html_dir / f"{key}.html.gz"
        if path.exists():
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            pages.append(
                RealPage(
                    key, entry["url"], text, entry.get("article", entry.get("articleBody", ""))
                )
            )
    return pages


def sample_pages() -> list[RealPage]:
    """The 12 real pages kept with the tests."""
    truth = json.loads((SAMPLE_DIR / "articles.json").read_text(encoding="utf-8"))
    return _read_pages(SAMPLE_DIR, truth)


# What of a made-up site's chrome the extractor keeps around an article (a tags line, the
# newsletter box: some 30 words) costs a short story its match with the same story on
# another site: of the 181 benchmark articles in two sites' chrome, 84.5% reach Jaccard
# 0.8 (bench/pages.py). Tests that need the match take the articles of 300 words or more.
LONG_ARTICLE_WORDS = 300


def long_pages() -> list[RealPage]:
    """The sample pages whose articles have at least LONG_ARTICLE_WORDS words (7 of 12)."""
    return [page for page in sample_pages() if len(page.article.split()) >= LONG_ARTICLE_WORDS]


def benchmark_pages(checkout: Path) -> list[RealPage]:
    """Every page of a checkout of scrapinghub/article-extraction-benchmark."""
    truth = json.loads((checkout / "ground-truth.json").read_text(encoding="utf-8"))
    return _read_pages(checkout / "html", truth)


def paragraphs(article: str) -> list[str]:
    return [line.strip() for line in article.splitlines() if line.strip()]


def teasers_from(articles: Sequence[str], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """(headline, summary) pairs made of other articles' sentences, as a site's teasers
    of its other stories are."""
    sentences = [
        sentence.strip() + "."
        for article in articles
        for paragraph in paragraphs(article)[:4]
        for sentence in paragraph.split(". ")[:2]
        if 4 <= len(sentence.split()) <= 40
    ]
    if not sentences:
        return []
    teasers = []
    for _ in range(count):
        summary = rng.choice(sentences)
        words = summary.rstrip(".").split()
        teasers.append((" ".join(words[: rng.randint(4, 9)]).title(), summary))
    return teasers


@dataclass(frozen=True, slots=True)
class Site:
    name: str
    sections: tuple[str, ...]
    cookie_text: str
    newsletter_text: str
    legal_text: str
    comments: tuple[str, ...]
    semantic: bool  # header/nav/article/aside/footer elements, or divs with class names


SITES: tuple[Site, ...] = (
    Site(
        name="The Morning Ledger",
        sections=(
            "World",
            "Business",
            "Markets",
            "Politics",
            "Technology",
            "Science",
            "Health",
            "Sport",
            "Culture",
            "Opinion",
            "Travel",
            "Podcasts",
        ),
        cookie_text="We use cookies and similar technologies to give you a better experience, "
        "to measure how our site is used and to show you personalised advertising. By "
        "clicking Accept you agree to this, as described in our cookie policy.",
        newsletter_text="Get the Morning Briefing: the day's top stories and analysis, "
        "delivered to your inbox every weekday before 7 am. You can unsubscribe at any time.",
        legal_text="Copyright 2026 The Morning Ledger Company. All rights reserved. Use of "
        "this site constitutes acceptance of our User Agreement and Privacy Policy and Cookie "
        "Statement. The material on this site may not be reproduced, distributed, transmitted, "
        "cached or otherwise used, except with the prior written permission of the publisher.",
        comments=(
            "This is exactly what I have been saying for years, and nobody listened.",
            "Great reporting as always. I would love a follow-up on what happens next.",
            "Does anyone know where the full report can be downloaded? The link is broken.",
            "I disagree with the premise entirely; the numbers tell a different story.",
            "Shared this with my whole family, thank you for covering it.",
        ),
        semantic=True,
    ),
    Site(
        name="Metro Daily Online",
        sections=(
            "Home",
            "News",
            "US",
            "Local",
            "Crime",
            "Entertainment",
            "Celebrity",
            "Lifestyle",
            "Food",
            "Weather",
            "Video",
            "Photos",
            "Deals",
        ),
        cookie_text="This website stores data such as cookies to enable essential site "
        "functionality, as well as marketing, personalization, and analytics. You may change "
        "your settings at any time or accept the default settings.",
        newsletter_text="Sign up for Metro Daily alerts: breaking news, local events and "
        "exclusive offers from our partners, straight to your phone and your inbox.",
        legal_text="Metro Daily Online is part of the Metro Media Group network. Terms of "
        "Use. Privacy Notice. Your California Privacy Rights. Do Not Sell My Personal "
        "Information. Interest Based Ads. Copyright 2026 Metro Media Group Inc.",
        comments=(
            "Wow. Just wow. Who approved this?",
            "My neighbour told me about this last week and I didn't believe her.",
            "Can we please get more coverage of the school board instead of this?",
            "Praying for everyone involved. Stay safe out there.",
            "First time commenting, long time reader. Keep up the good work, team.",
            "The photos in this article are incredible, who took them?",
        ),
        semantic=False,
    ),
    Site(
        name="Tech & Policy Review",
        sections=(
            "Latest",
            "AI",
            "Security",
            "Gadgets",
            "Policy",
            "Startups",
            "Reviews",
            "Events",
            "Newsletters",
            "About",
        ),
        cookie_text="Our site uses cookies. Some are essential for it to work; others help us "
        "understand how you use it so we can improve it. Manage your preferences.",
        newsletter_text="The Weekly Review lands every Friday: the stories that mattered in "
        "technology and policy, explained by our editors. Join 250,000 readers.",
        legal_text="Tech & Policy Review is published by Review Media Ltd, registered in "
        "England and Wales. All content is protected by copyright. Some links on this site "
        "are affiliate links and we may earn a commission when you buy through them.",
        comments=(
            "The regulators are years behind the technology, as usual.",
            "Excellent piece. The second half especially deserves a wider audience.",
            "Anyone who has worked in this industry saw this coming a mile away.",
            "I wish the article had linked to the original filing.",
        ),
        semantic=True,
    ),
)


# The class names div-built sites give their regions in place of HTML5 elements.
_DIV_CLASSES = {
    "header": "site-header",
    "nav": "main-menu",
    "article": "story-container",
    "aside": "sidebar most-popular",
    "footer": "site-footer",
}


def _tag(semantic: bool, element: str) -> tuple[str, str]:
    """(opening tag, closing tag) of a page region, HTML5 element or a classed div."""
    if semantic:
        return f"<{element}>", f"</{element}>"
    return f'<div class="{_DIV_CLASSES[element]}">', "</div>"


def site_page(
    site: Site,
    title: str,
    article: str,
    teasers: Sequence[tuple[str, str]],
    *,
    comments: int = 4,
    extra_paragraphs: Sequence[str] = (),
    pad_to_bytes: int = 0,
) -> str:
    """A page of ``site`` holding ``article`` (paragraphs separated by new lines), with
    ``teasers`` of other stories around it. ``pad_to_bytes`` adds scripts and markup (not
    text: inline JSON state and SVG icons, as real pages carry) up to that size."""
    esc = html.escape
    semantic = site.semantic
    header, header_end = _tag(semantic, "header")
    nav, nav_end = _tag(semantic, "nav")
    main, main_end = _tag(semantic, "article")
    aside, aside_end = _tag(semantic, "aside")
    footer, footer_end = _tag(semantic, "footer")
    nav_links = "".join(f'<li><a href="/{s.lower()}">{esc(s)}</a></li>' for s in site.sections)
    breaking = teasers[0][0] if teasers else ""
    body = "".join(f"<p>{esc(p)}</p>" for p in [*paragraphs(article), *extra_paragraphs])
    most_read = "".join(
        f'<li><a href="/story/{i}"><h4>{esc(h)}</h4></a><p class="dek">{esc(s)}</p></li>'
        for i, (h, s) in enumerate(teasers[:8])
    )
    related = "".join(
        f'<div class="card"><a href="/r/{i}"><h3>{esc(h)}</h3></a><p>{esc(s)}</p></div>'
        for i, (h, s) in enumerate(teasers[8:14])
    )
    comment_items = "".join(
        f'<li class="comment"><span class="user">reader{i}</span> <time>2 hours ago</time>'
        f'<p>{esc(site.comments[i % len(site.comments)])}</p><a href="#">Reply</a> '
        f"<span>{i * 3} likes</span></li>"
        for i in range(comments)
    )
    columns = [site.sections[column::3] for column in range(3)]
    footer_links = "".join(
        '<ul class="col">' + "".join(f"<li><a href=/f>{esc(s)}</a></li>" for s in items) + "</ul>"
        for items in columns
    )
    share = '<a href="#">Share on Facebook</a> <a href="#">Share on X</a> <a href="#">Email</a>'
    photo = (
        '<figure><img src="/photo.jpg" alt="A photo for the story">'
        "<figcaption>The scene on Tuesday. (Photo: Agency)</figcaption></figure>"
    )
    tags = " ".join(f'<a href="/t/{i}">{esc(site.sections[i])}</a>' for i in (1, 3))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{esc(title)} | {esc(site.name)}</title>
<meta property="og:title" content="{esc(title)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:Georgia,serif}}.cookie{{position:fixed;bottom:0}}</style>
<script>window.dataLayer=window.dataLayer||[];function gtag(){{dataLayer.push(arguments)}}</script>
<script type="application/ld+json">{{"@type":"NewsArticle","headline":{json.dumps(title)}}}</script>
</head><body>
<div class="cookie-banner" role="dialog"><p>{esc(site.cookie_text)}</p>
<button>Accept all</button><button>Manage settings</button></div>
{header}<a class="logo" href="/">{esc(site.name)}</a>{nav}<ul>{nav_links}</ul>{nav_end}
<div class="ticker"><strong>Breaking:</strong> <a href="/b">{esc(breaking)}</a></div>{header_end}
<div class="ad-slot">Advertisement</div>
{main}<h1>{esc(title)}</h1>
<div class="byline">By Staff Reporter · Published 8:14 AM · Updated 11:02 AM</div>
<div class="share">{share}</div>
{photo}
<div class="story-body">{body}</div>
<div class="tags">Topics: {tags}</div>
{main_end}
{aside}<h2>Most read</h2><ol>{most_read}</ol>{aside_end}
<section class="related"><h2>Related stories</h2>{related}</section>
<div class="newsletter"><h2>Newsletter</h2><p>{esc(site.newsletter_text)}</p>
<form><input type="email" placeholder="Your email"><button>Sign up</button></form></div>
<section class="comments"><h2>Comments ({comments})</h2><ol>{comment_items}</ol></section>
{footer}{footer_links}<p class="legal">{esc(site.legal_text)}</p>{footer_end}
<script src="/static/app.js"></script>
"""
    filler = []
    size = len(page.encode())
    chunk = (
        '<script>window.__STATE__.push({"id":%d,"k":"'
        + "x" * 900
        + '"})</script><svg width="16" height="16"><path d="M0 0L16 16"/></svg>\n'
    )
    index = 0
    while size < pad_to_bytes:
        piece = chunk % index
        filler.append(piece)
        size += len(piece)
        index += 1
    return page + "".join(filler) + "</body></html>\n"
