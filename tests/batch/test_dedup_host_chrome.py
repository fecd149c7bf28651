"""``neardup dedup --passages`` applies the service's host rule (app/core/hosts.py): pages
of one host (their URL as id) that share only the chrome every page of the site carries
are no pair once the chrome is on HOST_PAGES of them; the same chrome on another host's
page is, and a story two pages of the host share is. Expectations from how the corpus is
built."""

from __future__ import annotations

import json
import random
from pathlib import Path

from app.batch import local
from app.collection_config import CollectionConfig
from devkit.corpus import english_like_text


def _text(seed: int, words: int) -> str:
    return english_like_text(random.Random(seed), words * 6)


def site_corpus() -> list[dict[str, str]]:
    """Four pages of one site in its chrome, a roundup of the site holding one of their
    stories, and a page of another host in the same chrome."""
    header, footer = _text(1, 60), _text(2, 90)
    stories = [_text(100 + i, 45) for i in range(6)]
    records = [
        {"id": f"https://www.site.com/{i}", "text": f"{header}\n\n{stories[i]}\n\n{footer}"}
        for i in range(4)
    ]
    roundup = f"{header}\n\n{stories[1]}\n\n{stories[4]}\n\n{footer}"
    records.append({"id": "https://site.com/roundup", "text": roundup})
    records.append({"id": "https://other.net/x", "text": f"{header}\n\n{stories[5]}\n\n{footer}"})
    return records


def check_site_pairs(passages: Path) -> None:
    """passages.jsonl of ``site_corpus``: no two pages of the site by their chrome."""
    pairs = {
        tuple(sorted((line["a"], line["b"])))
        for line in map(json.loads, passages.read_text().splitlines())
    }
    site = [f"https://www.site.com/{i}" for i in range(4)]
    for i, first in enumerate(site):
        for second in site[i + 1 :]:
            assert (first, second) not in pairs, "two pages sharing only the site's chrome"
    # The roundup shares story 1 with its page, only chrome with the others.
    assert ("https://site.com/roundup", site[1]) in pairs
    assert not {("https://site.com/roundup", page) for page in (site[0], site[2])} & pairs
    # Another host's page with the same chrome pairs with every page of the site.
    assert {tuple(sorted(("https://other.net/x", page))) for page in site} <= pairs


def test_a_sites_chrome_pairs_none_of_its_pages(tmp_path: Path) -> None:
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in site_corpus()), encoding="utf-8")
    out = tmp_path / "out"
    options = local.Options(out=out, passages=True, progress=False)
    local.run([str(corpus)], CollectionConfig(), options)
    check_site_pairs(out / "passages.jsonl")
