"""Web pages through the HTTP contract: the main content is matched, the answer says which
text was and gives the title, pages as fetched (base64 in any charset) match their UTF-8
text, on every backend (tests/conftest.py's `backend`: the embedded service, a standalone
Redis, a Redis Cluster); pages have their own size limit (on the embedded service).

References: the article bodies people cut out of real pages by hand and the texts pages
were made from (devkit/pages.py), never the service's own reading of a page.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devkit.pages import SITES, long_pages, sample_pages, site_page, teasers_from
from tests import reference
from tests.conftest import Backend, make_client

COLLECTIONS = "/v1/collections"
LIMITS = {
    "max_text_chars": 200_000,
    "max_batch_documents": 50,
    "max_metadata_bytes": 1000,
    "max_limit": 100,
}
MIB = 1024 * 1024


@pytest.fixture
def client(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    """An app on each backend in turn, with room for pages."""
    yield from backend.serve(tmp_path, **LIMITS)


def docs(collection: str = "default") -> str:
    return f"{COLLECTIONS}/{collection}/documents"


def insert(client: TestClient, body: dict[str, Any], collection: str = "default") -> Any:
    response = client.post(docs(collection), json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


def search_matches(
    client: TestClient, body: dict[str, Any], collection: str = "default"
) -> list[dict[str, Any]]:
    response = client.post(f"{COLLECTIONS}/{collection}/search", json=body)
    assert response.status_code == 200, response.text
    matches: list[dict[str, Any]] = response.json()["matches"]
    return matches


def search(client: TestClient, body: dict[str, Any], collection: str = "default") -> list[str]:
    """The ids of the whole-document matches (not those found by shared passages alone)."""
    matches = reference.whole_document_matches(search_matches(client, body, collection))
    return [match["id"] for match in matches]


def test_a_real_page_finds_its_clean_article_and_the_other_way_round(client: TestClient) -> None:
    pages = sample_pages()
    for page in pages:
        insert(client, {"id": f"article-{page.id}", "text": page.article})
    for page in pages:
        answer = insert(client, {"id": f"page-{page.id}", "text": page.html, "html": True})
        assert answer["duplicate_of"] == f"article-{page.id}", page.url
        assert answer["extracted"] == "main" and answer["title"], page.url
        assert [m["id"] for m in answer["matches"]] == [f"article-{page.id}"], page.url
        found = search(client, {"text": page.article})
        assert set(found) == {f"article-{page.id}", f"page-{page.id}"}, page.url


def test_the_same_article_on_two_sites_matches_and_two_articles_on_one_site_do_not(
    client: TestClient,
) -> None:
    pages = long_pages()
    articles = [page.article for page in sample_pages()]
    rng = random.Random(3)
    chrome = teasers_from(articles, 14, rng)
    for index, page in enumerate(pages):
        first = site_page(SITES[index % 3], "Headline", page.article, chrome)
        answer = insert(client, {"id": f"{page.id}-a", "text": first, "html": True})
        # Every article is in the same site's chrome as the ones before it: no match.
        assert answer["matches"] == [], page.url
    for index, page in enumerate(pages):
        elsewhere = site_page(
            SITES[(index + 1) % 3], "Headline", page.article, teasers_from(articles, 14, rng)
        )
        answer = insert(client, {"id": f"{page.id}-b", "text": elsewhere, "html": True})
        assert answer["duplicate_of"] == f"{page.id}-a", page.url


def test_extract_all_matches_the_visible_text_and_is_fixed_at_creation(
    client: TestClient,
) -> None:
    response = client.put(f"{COLLECTIONS}/visible", json={"html": {"extract": "all"}})
    assert response.status_code == 201
    assert response.json()["settings"]["html"] == {"extract": "all"}
    page = sample_pages()[2]
    for collection in ("visible", "default"):
        answer = insert(client, {"id": "p", "text": page.html, "html": True}, collection)
        assert answer["extracted"] == ("all" if collection == "visible" else "main")
    # The whole visible text holds the site's chrome: the clean article no longer finds it.
    assert search(client, {"text": page.article}, "visible") == []
    # ... but it lies inside the page: the shared passages find it.
    [inside] = search_matches(client, {"text": page.article, "min_coverage": 0.8}, "visible")
    assert inside["id"] == "p" and inside["methods"] == ["passage"]
    assert inside["query_coverage"] >= 0.8
    assert search(client, {"text": page.article}, "default") == ["p"]
    assert search(client, {"text": page.html, "html": True}, "visible") == ["p"]
    changed = client.patch(f"{COLLECTIONS}/visible", json={"html": {"extract": "main"}})
    assert changed.status_code == 409
    assert "html.extract" in changed.json()["error"]["message"]
    bad = client.put(f"{COLLECTIONS}/other", json={"html": {"extract": "some"}})
    assert bad.status_code == 422
    default = client.get(f"{COLLECTIONS}/default").json()
    assert default["settings"]["html"] == {"extract": "main"}


def test_store_text_keeps_the_extracted_text_not_the_html(client: TestClient) -> None:
    assert client.put(f"{COLLECTIONS}/kept", json={"store_text": True}).status_code == 201
    page = sample_pages()[3]
    insert(client, {"id": "p", "text": page.html, "html": True}, "kept")
    stored = client.get(f"{docs('kept')}/p").json()
    assert "<" not in stored["text"]
    assert stored["text"].split()[:8] == page.article.split()[:8]
    # A text stays as it was sent.
    insert(client, {"id": "t", "text": "plain <b>text</b> kept"}, "kept")
    assert client.get(f"{docs('kept')}/t").json()["text"] == "plain <b>text</b> kept"


def _page_bytes(text: str, codec: str, declared: str | None) -> bytes:
    meta = f'<meta charset="{declared}">' if declared else ""
    paragraphs = "".join(f"<p>{line}</p>" for line in text.splitlines())
    return f"<html><head>{meta}<title>t</title></head><body>{paragraphs}</body></html>".encode(
        codec
    )


ENCODED = {
    "utf-8": "The ministers met on Tuesday — “a turning point”, said one. " * 4,
    "cp1252": "Les ministres se sont réunis mardi : « un tournant », a dit l'un d'eux. " * 4,
    "gbk": "国家统计局周二公布的数据显示，十月份居民消费价格同比上涨，食品价格上涨明显。" * 4,
    "shift_jis": "気象庁によると、大型で強い台風は十二日夕方、伊豆半島に上陸した。大雨となった。"
    * 4,
}


@pytest.mark.parametrize("codec", list(ENCODED))
def test_pages_as_fetched_in_any_charset_match_their_utf8_text(
    client: TestClient, codec: str
) -> None:
    text = ENCODED[codec]
    utf8 = _page_bytes(text, "utf-8", None).decode()
    insert(client, {"id": "utf8", "text": utf8, "html": True})
    label = {"cp1252": "windows-1252"}.get(codec, codec)
    for declared, charset in ((label, None), (None, label), (None, None)):
        raw = base64.b64encode(_page_bytes(text, codec, declared)).decode()
        body: dict[str, Any] = {"html_base64": raw, "limit": 5}
        if charset:
            body["charset"] = charset
        response = client.post(f"{COLLECTIONS}/default/search", json=body)
        assert response.status_code == 200, response.text
        matches = response.json()["matches"]
        assert [m["id"] for m in matches] == ["utf8"], (declared, charset)
        assert "exact" in matches[0]["methods"], (declared, charset)


def test_undecodable_pages_are_422_alone_and_in_a_batch(client: TestClient) -> None:
    garbage = base64.b64encode(bytes(range(256)) * 20).decode()
    response = client.post(docs(), json={"html_base64": garbage})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_page"
    unknown = client.post(docs(), json={"html_base64": "PHA+aGk8L3A+", "charset": "klingon"})
    assert unknown.status_code == 422 and "klingon" in unknown.json()["error"]["message"]
    # Python's own codecs (bytes to bytes, escapes) are no page's charset: 422, not 500.
    for label in ("base64", "unicode_escape"):
        odd = client.post(docs(), json={"html_base64": "PHA+aGk8L3A+", "charset": label})
        assert odd.status_code == 422 and odd.json()["error"]["code"] == "invalid_page"
    not_base64 = client.post(docs(), json={"html_base64": "%%%"})
    assert not_base64.status_code == 422
    assert not_base64.json()["error"]["code"] == "invalid_body"
    both = client.post(docs(), json={"text": "a", "html_base64": "YQ=="})
    assert both.status_code == 422
    batch = client.post(
        f"{docs()}/batch",
        json={
            "documents": [
                {"id": "bad", "html_base64": garbage},
                {"id": "good", "html_base64": base64.b64encode(b"<p>fine page</p>").decode()},
            ]
        },
    ).json()["results"]
    assert batch[0] == {
        "id": "bad",
        "error": {"code": "invalid_page", "message": batch[0]["error"]["message"]},
    }
    assert batch[1]["inserted"] and batch[1]["extracted"] == "main"
    assert client.get(f"{docs()}/bad").status_code == 404
    assert client.get(f"{docs()}/good").status_code == 200


def test_pages_have_their_own_size_limit_per_document_in_a_batch(tmp_path: Path) -> None:
    """The service's default limits: 2 and 12 MB pages in, 20 MB refused on its own."""
    for client in make_client(tmp_path, max_text_chars=1_000_000):
        article = sample_pages()[0].article
        chrome = teasers_from([p.article for p in sample_pages()], 14, random.Random(1))

        two, twelve, twenty = (
            site_page(SITES[index], f"Story {index}", article, chrome, pad_to_bytes=size)
            for index, size in enumerate((2 * MIB, 12 * MIB, 20 * MIB))
        )
        assert len(twenty.encode()) > 20 * MIB > 16 * MIB > len(twelve.encode())
        response = client.post(
            f"{docs()}/batch",
            json={
                "documents": [
                    {"id": "two", "text": two, "html": True},
                    {"id": "twenty", "text": twenty, "html": True},
                ]
            },
        )
        assert response.status_code == 200
        two_answer, twenty_answer = response.json()["results"]
        assert two_answer["inserted"] and two_answer["extracted"] == "main"
        assert twenty_answer["error"]["code"] == "too_large"
        assert "NEARDUP_MAX_HTML_BYTES" in twenty_answer["error"]["message"]
        alone = client.post(docs(), json={"id": "twelve", "text": twelve, "html": True})
        assert alone.status_code == 201
        assert alone.json()["duplicate_of"] == "two"
        encoded = base64.b64encode(twelve.encode()).decode()
        as_fetched = client.post(f"{COLLECTIONS}/default/search", json={"html_base64": encoded})
        assert {m["id"] for m in as_fetched.json()["matches"]} == {"two", "twelve"}
        too_large = client.post(docs(), json={"id": "big", "text": twenty, "html": True})
        assert too_large.status_code == 413
        # A text's limit is its own: the same 2 MB as plain text is above max_text_chars.
        assert client.post(docs(), json={"text": two}).status_code == 413


def test_a_sign_off_inside_a_sites_articles_relates_none_of_its_pages(
    client: TestClient,
) -> None:
    """Real articles signed with their site's newsletter and legal lines inside the
    article, where no extractor can tell them from the story: sent with their URLs, no
    page relates to another page of its site by that sign-off once three pages of the
    site carry it (app/core/hosts.py), even asking for every shared passage; sent
    without, the same pages do."""
    site = SITES[0]
    signed = [
        f"{page.article}\n\n{site.newsletter_text} {site.legal_text}" for page in sample_pages()
    ]
    for with_url in (False, True):
        name = "signed-urls" if with_url else "signed"
        assert client.put(f"{COLLECTIONS}/{name}").status_code == 201
        for index, article in enumerate(signed):
            body: dict[str, Any] = {
                "id": f"p{index}",
                "html": True,
                "text": site_page(site, "Headline", article, []),
            }
            if with_url:
                body["metadata"] = {"url": f"https://www.ledger.example/news/{index}"}
            response = client.post(f"{COLLECTIONS}/{name}/documents", json=body)
            assert response.status_code == 201, response.text
        related = []
        for index in range(2, len(signed)):
            response = client.get(
                f"{COLLECTIONS}/{name}/documents/p{index}/similar",
                params={"min_coverage": 0, "limit": 100},
            )
            related.append({m["id"] for m in response.json()["matches"]})
        if with_url:
            assert related == [set()] * len(related), related
        else:
            assert all(len(ids) == len(signed) - 1 for ids in related), related


def test_a_page_quoting_another_article_is_no_match_unless_quotes_are_asked_for(
    client: TestClient,
) -> None:
    """Two real articles on two sites, the second quoting a sentence of the first (30
    words): a shared passage, not a duplicate nor a containment. By default the search
    by the second page does not name the first; with ``min_coverage: 0`` it does, by
    passages alone, the quote's words in both texts."""
    pages = sample_pages()
    quoted_words = pages[0].article.split()[40:70]
    quote = " ".join(quoted_words)
    words = pages[1].article.split()
    quoting = " ".join([*words[: len(words) // 2], f'"{quote}"', *words[len(words) // 2 :]])
    first = site_page(SITES[0], "Headline", pages[0].article, [])
    insert(client, {"id": "quoted", "text": first, "html": True})
    second = site_page(SITES[1], "Headline", quoting, [])
    found = client.post(
        f"{COLLECTIONS}/default/search", json={"text": second, "html": True}
    ).json()["matches"]
    assert found == []
    every = client.post(
        f"{COLLECTIONS}/default/search", json={"text": second, "html": True, "min_coverage": 0}
    ).json()["matches"]
    assert [m["id"] for m in every] == ["quoted"] and every[0]["methods"] == ["passage"]
    assert max(every[0]["query_coverage"], every[0]["match_coverage"]) < 0.5
