"""Main-content extraction by language: neardup's ``read_page`` beside trafilatura and
resiliparse alone, scored by snippets as trafilatura's benchmark scores it
(devkit/snippets.py), with each extractor's time a page.

    .venv/bin/python -m bench.extraction --pages CHECKOUT [--runs 3]

CHECKOUT is a checkout of github.com/mozilla/readability: its test/test-pages/*/ hold a
real page (source.html) and its main content as Readability's tests expect it
(expected.html), in English, French, German, Spanish, Portuguese, Czech, Chinese,
Japanese and more. Snippets are derived from the two (``derive_snippets``: "with" from the
expected blocks, "without" from the page's visible lines the expected content does not
hold). Without the checkout, the hand-annotated pages of tests/data/pages_languages are
scored instead, and the report says so.

    .venv/bin/python -m bench.extraction --fundus CHECKOUT [--runs 3]

CHECKOUT is a checkout of github.com/flairNLP/fundus: its
tests/resources/parser/test_data/<country>/ hold real news pages (*.html.gz) of some
250 publishers in 40 countries and, per publisher, the article body its hand-written
parser reads (<Publisher>.json, one entry per parser version). A page's reference is
the version whose paragraphs the page holds best (at least 80% of them); its snippets
are derived as for Readability's pages, from the summary, subheadings and paragraphs.

A page's language: its ``<html lang>``, else its script (Han, kana, Arabic, Cyrillic...),
else English. Pages whose expected content has fewer than 50 words (Readability's unit
fixtures of one feature) are left out. Time: the median over ``--runs`` passes of each
extractor's time on each page; the table gives the median and p90 a page.

Writes bench/results/extraction.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from html import escape
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from app.core.page import decode_page, main_content, read_page
from app.core.text import visible_text
from devkit.harness import REPO_ROOT, markdown_table, percentile, write_result
from devkit.snippets import Score, Snippets, derive_snippets, squeezed

HAND_MADE = REPO_ROOT / "tests" / "data" / "pages_languages"
MIN_WORDS = 50
_LANG = re.compile(rb"<html[^>]*?\blang\s*=\s*[\"']?([A-Za-z-]+)", re.IGNORECASE)
_SCRIPTS = {
    "ja": re.compile("[\u3040-\u30ff]"),
    "zh": re.compile("[\u4e00-\u9fff]"),
    "ko": re.compile("[\uac00-\ud7af]"),
    "ar": re.compile("[\u0600-\u06ff]"),
    "he": re.compile("[\u0590-\u05ff]"),
    "ru": re.compile("[\u0400-\u04ff]"),
}


def language(html: bytes, text: str) -> str:
    declared = _LANG.search(html[:4096])
    if declared:
        return declared.group(1).decode().split("-")[0].lower()
    counts = {name: len(pattern.findall(text)) for name, pattern in _SCRIPTS.items()}
    name, count = max(counts.items(), key=lambda item: item[1])
    if count > 50:
        return "ja" if counts["ja"] > 20 else name
    return "en"


def readability_pages(checkout: Path) -> list[tuple[str, str, str, Snippets]]:
    """(name, language, html, snippets) of every real page of the checkout."""
    pages = []
    for folder in sorted((checkout / "test" / "test-pages").iterdir()):
        source, expected = folder / "source.html", folder / "expected.html"
        if not source.exists() or not expected.exists():
            continue
        data = source.read_bytes()
        html = decode_page(data, "utf-8")  # saved as UTF-8 whatever their <meta> says
        reference = expected.read_text(encoding="utf-8")
        snippets = derive_snippets(html, reference)
        words = sum(len(s.split()) for s in snippets.with_)
        dense = len(re.findall("[\u3040-\u30ff\u4e00-\u9fff]", reference))
        if words + dense // 2 < MIN_WORDS or not snippets.without:
            continue
        pages.append((folder.name, language(data, reference), html, snippets))
    return pages


def fundus_pages(checkout: Path) -> list[tuple[str, str, str, Snippets]]:
    """(name, language, html, snippets) of every fundus page with a reference."""
    pages = []
    root = checkout / "tests" / "resources" / "parser" / "test_data"
    for country in sorted(path for path in root.iterdir() if path.is_dir()):
        for annotation in sorted(country.glob("*.json")):
            versions = json.loads(annotation.read_text(encoding="utf-8"))
            for page in sorted(country.glob(f"{annotation.stem}*.html.gz")):
                if not page.name[len(annotation.stem) :].startswith(("_", ".")):
                    continue  # another publisher whose name starts with this one's
                data = gzip.decompress(page.read_bytes())
                html = decode_page(data)
                reference = _fundus_reference(html, versions.values())
                if reference is None:
                    continue
                snippets = derive_snippets(html, reference)
                if _words(snippets) < MIN_WORDS or not snippets.without:
                    continue
                name = f"{country.name}/{page.name.removesuffix('.html.gz')}"
                pages.append((name, language(data, reference), html, snippets))
    return pages


def _fundus_reference(html: str, versions: Iterable[Any]) -> str | None:
    """The body of the parser version that matches the page best, as HTML blocks."""
    text = squeezed(visible_text(LexborHTMLParser(html)))
    best, best_share = None, 0.0
    for version in versions:
        body = version.get("body") if isinstance(version, dict) else None
        if not body:
            continue
        blocks = [f"<p>{escape(line)}</p>" for line in body.get("summary", [])]
        paragraphs: list[str] = []
        for section in body.get("sections", []):
            blocks += [f"<h2>{escape(line)}</h2>" for line in section.get("headline", [])]
            blocks += [f"<p>{escape(line)}</p>" for line in section.get("paragraphs", [])]
            paragraphs += section.get("paragraphs", [])
        if not paragraphs:
            continue
        share = sum(squeezed(line)[:40] in text for line in paragraphs) / len(paragraphs)
        if share > best_share:
            best, best_share = "".join(blocks), share
    return best if best_share >= 0.8 else None


def _words(snippets: Snippets) -> int:
    text = " ".join(snippets.with_)
    return len(text.split()) + len(re.findall("[\u3040-\u30ff\u4e00-\u9fff]", text)) // 2


def hand_made_pages() -> list[tuple[str, str, str, Snippets]]:
    annotations = json.loads((HAND_MADE / "snippets.json").read_text(encoding="utf-8"))
    pages = []
    for name, entry in annotations.items():
        html = decode_page(gzip.decompress((HAND_MADE / f"{name}.html.gz").read_bytes()), "utf-8")
        pages.append((name, entry["language"], html, Snippets(entry["with"], entry["without"])))
    return pages


def extractors() -> dict[str, Callable[[str], str]]:
    from resiliparse.parse.html import HTMLTree

    found: dict[str, Callable[[str], str]] = {
        "neardup": lambda html: read_page(html).text,
        "resiliparse alone": lambda html: main_content(HTMLTree.parse(html)),
    }
    try:
        import trafilatura
    except ImportError:
        return found
    found["trafilatura"] = lambda html: trafilatura.extract(html, include_comments=False) or ""
    return found


def table(rows: list[dict[str, str]]) -> str:
    return markdown_table(list(rows[0]), [list(row.values()) for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=Path, help="a checkout of mozilla/readability")
    parser.add_argument("--fundus", type=Path, help="a checkout of flairNLP/fundus")
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    if arguments.fundus is not None:
        pages = fundus_pages(arguments.fundus)
        source = f"flairNLP/fundus's test pages ({len(pages)} real pages)"
    elif arguments.pages is not None:
        pages = readability_pages(arguments.pages)
        source = f"mozilla/readability's test pages ({len(pages)} real pages)"
    else:
        pages = hand_made_pages()
        source = f"tests/data/pages_languages ({len(pages)} hand-annotated pages)"
    scores: dict[tuple[str, str], Score] = defaultdict(Score)
    times: dict[str, list[float]] = defaultdict(list)
    misses: list[str] = []
    for name, lang, html, snippets in pages:
        for extractor, extract in extractors().items():
            runs = []
            for _ in range(arguments.runs):
                start = time.perf_counter()
                text = extract(html)
                runs.append(time.perf_counter() - start)
            times[extractor].append(statistics.median(runs) * 1000)
            scores[(extractor, lang)].add(snippets, text)
            scores[(extractor, "all")].add(snippets, text)
            if extractor == "neardup":
                page = Score()
                page.add(snippets, text)
                if page.pages_right == 0:
                    misses.append(
                        f"{name} ({lang}): {page.false_negatives} kept snippets missing, "
                        f"{page.false_positives} chrome snippets in"
                    )
    languages = sorted({lang for _, lang, _, _ in pages}, key=lambda x: (x == "en", x))
    rows = []
    for lang in [*languages, "all"]:
        count = sum(1 for _, page_lang, _, _ in pages if page_lang == lang or lang == "all")
        row: dict[str, str] = {"language": lang, "pages": str(count)}
        for extractor in extractors():
            score = scores[(extractor, lang)]
            row[f"{extractor} F1 / all right"] = (
                f"{score.f1:.3f} / {score.pages_right}/{score.pages}"
            )
        rows.append(row)
    time_rows = [
        {
            "extractor": extractor,
            "median ms a page": f"{statistics.median(values):.2f}",
            "p90 ms": f"{percentile(values, 90):.2f}",
        }
        for extractor, values in times.items()
    ]
    precision_rows = [
        {
            "extractor": extractor,
            "precision": f"{scores[(extractor, 'all')].precision:.3f}",
            "recall": f"{scores[(extractor, 'all')].recall:.3f}",
            "F1": f"{scores[(extractor, 'all')].f1:.3f}",
        }
        for extractor in extractors()
    ]
    report = "\n\n".join(
        [
            f"# Extraction by language: {source}",
            table(rows),
            table(precision_rows),
            table(time_rows),
            "neardup's pages not all right:\n\n" + "\n".join(f"- {m}" for m in misses),
        ]
    )
    print(report)
    write_result("extraction.md", report + "\n")


if __name__ == "__main__":
    main()
