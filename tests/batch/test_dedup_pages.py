"""``neardup dedup`` on pages: WARC files of a crawl and HTML fields of JSON lines, read as
the service reads ``"html": true``, so that an offline job and the service agree.

The reference is what the pages were made from: which article each page carries
(devkit/pages.py puts real article bodies into different sites' chrome).
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.batch import local
from app.batch.readers import Fields, plan_splits, read_timed_documents
from app.collection_config import CollectionConfig
from devkit.pages import SITES, long_pages, sample_pages, site_page, teasers_from
from tests.conftest import make_client


def crawl(seed: int = 2) -> list[dict[str, Any]]:
    """Pages of 6 articles: each on two sites (the pairs to find), all in site chrome."""
    pages = long_pages()[:6]
    articles = [page.article for page in sample_pages()]
    rng = random.Random(seed)
    crawled = []
    for copy in range(2):
        for index, page in enumerate(pages):
            site = SITES[(index + copy) % len(SITES)]
            html = site_page(site, f"Story {index}", page.article, teasers_from(articles, 14, rng))
            crawled.append(
                {"url": f"https://site{copy}.example/{index}", "story": index, "html": html}
            )
    return crawled


def warc_record(url: str, content_type: str, body: bytes, number: int) -> bytes:
    """One WARC/1.1 response record holding an HTTP response, written by hand after the
    standard (ISO 28500): headers, a blank line, the block, two line ends."""
    http = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n\r\n".encode() + body
    headers = (
        "WARC/1.1\r\n"
        "WARC-Type: response\r\n"
        f"WARC-Target-URI: {url}\r\n"
        f"WARC-Date: 2024-05-01T12:00:{number % 60:02d}Z\r\n"
        f"WARC-Record-ID: <urn:uuid:{uuid.UUID(int=number)}>\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    )
    return headers.encode() + http + b"\r\n\r\n"


def write_warc(path: Path, pages: list[dict[str, Any]], charset: str) -> Path:
    """A WARC of the pages' response records (one gzip member each for .gz, as crawlers
    write them), with an image after each page that the job must skip."""
    records = []
    for number, page in enumerate(pages):
        body = page["html"].replace('<meta charset="utf-8">', "").encode(charset, "replace")
        records.append(warc_record(page["url"], f"text/html; charset={charset}", body, 2 * number))
        records.append(warc_record(page["url"] + ".png", "image/png", b"\x89PNG", 2 * number + 1))
    if path.suffix == ".gz":
        records = [gzip.compress(record) for record in records]
    path.write_bytes(b"".join(records))
    return path


def expected_pairs(pages: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (a["url"], b["url"])
        for i, a in enumerate(pages)
        for b in pages[i + 1 :]
        if a["story"] == b["story"]
    }


def found_pairs(out: Path) -> set[tuple[str, str]]:
    lines = (out / "pairs.jsonl").read_text("utf-8").splitlines()
    return {(pair["a"], pair["b"]) for pair in map(json.loads, lines)}


@pytest.mark.parametrize("charset", ["utf-8", "cp1252"])
def test_a_warc_crawl_is_deduplicated_by_article_not_by_site(tmp_path: Path, charset: str) -> None:
    pages = crawl()
    warc = write_warc(tmp_path / "crawl.warc.gz", pages, charset)
    splits = plan_splits([str(warc)])
    documents = list(read_timed_documents(splits[0], Fields()))
    assert [url for url, _, _ in documents] == [page["url"] for page in pages]
    assert all(date.endswith("Z") for _, _, date in documents)
    out = tmp_path / "out"
    summary = local.run(
        [str(warc)], CollectionConfig(), local.Options(out=out, html=True, progress=False)
    )
    assert found_pairs(out) == expected_pairs(pages)
    kept = [json.loads(line) for line in (out / "kept.jsonl").read_text().splitlines()]
    assert [record["url"] for record in kept] == [page["url"] for page in pages[:6]]
    assert set(kept[0]) == {"url", "warc_record_id", "date"}
    assert summary.as_dict()["documents"] == len(pages)


def test_the_command_reads_warc_as_pages_and_an_html_field_with_html(tmp_path: Path) -> None:
    from app.cli import main

    pages = crawl(seed=4)
    warc = write_warc(tmp_path / "crawl.warc", pages, "utf-8")
    main(["dedup", str(warc), "--out", str(tmp_path / "warc-out"), "--quiet"])
    assert found_pairs(tmp_path / "warc-out") == expected_pairs(pages)

    jsonl = tmp_path / "pages.jsonl"
    jsonl.write_text("".join(json.dumps({"id": p["url"], "page": p["html"]}) + "\n" for p in pages))
    args = ["dedup", str(jsonl), "--text-field", "page", "--quiet"]
    main([*args, "--html", "--out", str(tmp_path / "html-out")])
    assert found_pairs(tmp_path / "html-out") == expected_pairs(pages)
    # Without --html the pages are matched by their whole markup and chrome: the same
    # site's pages run together, the same story on two sites does not.
    main([*args, "--out", str(tmp_path / "raw-out")])
    assert found_pairs(tmp_path / "raw-out") != expected_pairs(pages)


def test_the_service_and_dedup_read_pages_alike(tmp_path: Path) -> None:
    """Each page posted with "html": true matches the pages dedup pairs it with."""
    pages = crawl(seed=6)
    jsonl = tmp_path / "pages.jsonl"
    jsonl.write_text("".join(json.dumps({"id": p["url"], "text": p["html"]}) + "\n" for p in pages))
    out = tmp_path / "out"
    local.run([str(jsonl)], CollectionConfig(), local.Options(out=out, html=True, progress=False))
    service_pairs: set[tuple[str, str]] = set()
    for client in make_client(tmp_path, max_text_chars=200_000):
        for page in pages:
            answer = client.post(
                "/v1/collections/default/documents",
                json={"id": page["url"], "text": page["html"], "html": True},
            ).json()
            service_pairs |= {(match["id"], page["url"]) for match in answer["matches"]}
    assert service_pairs == found_pairs(out) == expected_pairs(pages)
