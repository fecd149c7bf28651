"""Web pages: how well a page is read (its text against its hand-made article), and what
pages cost the service against the same documents sent as text, in one run.

    .venv/bin/python -m bench.pages --pages CHECKOUT            # quality and speed
    .venv/bin/python -m bench.pages --pages CHECKOUT --skip-speed

CHECKOUT is a checkout of github.com/scrapinghub/article-extraction-benchmark (181 real
news pages from 126 sites with the article bodies people cut out of them: html/*.html.gz,
ground-truth.json). Without it the 12 pages of tests/data/pages are used, and the report
says so.

1. Quality, through a real ``neardup serve`` with default settings (word 5-grams, MinHash
   threshold 0.8):
   - own article: every hand-made article inserted as text, then each page searched with
     ``"html": true``: the share of pages whose own article is among the matches, and of
     pages that match another article (a false match); for ``html.extract`` "main" (the
     default) and "all" (the visible text);
   - two sites: each article placed in the chrome of two different made-up news sites
     (devkit/pages.py): the share of pairs found (the second page's insert names the
     first), and of pages that match another article in the same site's chrome.
   Beside it, the exact word 5-gram Jaccard of each page's text with its article (share
   at least 0.8, median), independent of MinHash.
   And each reading of a page (the visible text, resiliparse's main content alone,
   neardup's ``read_page``, trafilatura's when it is installed: the bench extra) against
   the article by exact Jaccard, with its time a page.
2. Speed: pages of a real size mix (each real page padded with scripts, inline state and
   markup, as real pages carry, to a size drawn log-uniformly from 100 KB to 1.5 MB):
   - inserted in batches of 16 from 2 clients, and one at a time from 8 clients:
     pages/s, p50 and p99 of a request, against the same documents' extracted text sent
     as plain text, on a fresh server each;
   - the extractor's share: ``read_page``'s time in this process over the same pages,
     against the server's time per page;
   - search p99 of plain texts (8 clients) alone and while pages are inserted (4 clients):
     the extraction runs off the event loop, so searches keep their latency.
   Each figure is the median of ``--runs`` runs.
3. Hosts (``--hosts``): every article in the chrome of one of three made-up sites (60
   pages a site), signed with the site's newsletter and legal lines inside the article,
   inserted with its URL as ``metadata.url`` and without: the share of
   pages whose ``similar`` at ``min_coverage`` 0 (every shared passage) and at the
   default names another page of its own site by passages alone, and what the host rule
   (app/core/hosts.py) costs an insert: pages/s in batches of 16 from 2 clients and the
   server's CPU a page, with and without URLs, on a fresh server each, alternating, the
   median of ``--runs``.

The report is printed and written to bench/results/pages.md.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.core.page import read_page
from app.core.text import normalize
from devkit.harness import markdown_table, percentile, write_result
from devkit.pages import (
    SITES,
    RealPage,
    benchmark_pages,
    sample_pages,
    site_page,
    teasers_from,
)
from devkit.server import Server

KB = 1024


def shingles(text: str) -> set[tuple[str, ...]]:
    words = normalize(text).split()
    return {tuple(words[i : i + 5]) for i in range(max(1, len(words) - 4))}


def jaccard(a: str, b: str) -> float:
    first, second = shingles(a), shingles(b)
    return len(first & second) / max(1, len(first | second))


def share(flags: Sequence[bool]) -> str:
    return f"{100 * sum(flags) / max(1, len(flags)):.1f}% ({sum(flags)}/{len(flags)})"


# ---------------------------------------------------------------------------- quality


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    response = client.post(path, json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def own_article(client: httpx.Client, pages: list[RealPage], extract: str) -> dict[str, str]:
    name = f"own-{extract}"
    client.put(f"/v1/collections/{name}", json={"html": {"extract": extract}}).raise_for_status()
    documents = [{"id": page.id, "text": page.article} for page in pages]
    for start in range(0, len(documents), 64):
        post(
            client,
            f"/v1/collections/{name}/documents/batch",
            {"documents": documents[start : start + 64]},
        )
    found, wrong, fallback = [], [], []
    for page in pages:
        answer = post(client, f"/v1/collections/{name}/search", {"text": page.html, "html": True})
        ids = {match["id"] for match in answer["matches"]}
        found.append(page.id in ids)
        wrong.append(bool(ids - {page.id}))
    texts = [read_page(page.html, extract) for page in pages]  # type: ignore[arg-type]
    exact = [jaccard(read.text, page.article) for read, page in zip(texts, pages, strict=True)]
    fallback = [read.extracted != extract for read in texts]
    return {
        "extract": extract,
        "own article found": share(found),
        "another article matched": share(wrong),
        "exact J >= 0.8": share([j >= 0.8 for j in exact]),
        "median exact J": f"{statistics.median(exact):.3f}",
        "fell back to all": share(fallback) if extract == "main" else "-",
    }


def two_sites(client: httpx.Client, pages: list[RealPage], extract: str) -> dict[str, str]:
    name = f"sites-{extract}"
    client.put(f"/v1/collections/{name}", json={"html": {"extract": extract}}).raise_for_status()
    articles = [page.article for page in pages]
    rng = random.Random(1)
    first_site = []
    for index, page in enumerate(pages):
        html = site_page(
            SITES[index % 3], "Headline", page.article, teasers_from(articles, 14, rng)
        )
        answer = post(
            client,
            f"/v1/collections/{name}/documents",
            {"id": f"{page.id}-a", "text": html, "html": True},
        )
        first_site.append(bool(answer["matches"]))
    found, wrong, contained, wrong_related = [], [], [], []
    for index, page in enumerate(pages):
        html = site_page(
            SITES[(index + 1) % 3], "Headline", page.article, teasers_from(articles, 14, rng)
        )
        answer = post(
            client,
            f"/v1/collections/{name}/documents",
            {"id": f"{page.id}-b", "text": html, "html": True},
        )
        ids = {match["id"] for match in answer["matches"]}
        related = ids | {
            relation["id"]
            for relation in answer.get("contains", []) + answer.get("contained_in", [])
        }
        found.append(f"{page.id}-a" in ids)
        contained.append(f"{page.id}-a" in related)
        wrong.append(bool(ids - {f"{page.id}-a"}))
        wrong_related.append(bool(related - {f"{page.id}-a"}))
    return {
        "extract": extract,
        "same article, two sites: found": share(found),
        "found or contained": share(contained),
        "two articles, one site: matched": share(
            [a or b for a, b in zip(first_site, wrong, strict=True)]
        ),
        "matched or contained": share(wrong_related),
    }


def quality(url: str, pages: list[RealPage]) -> str:
    with httpx.Client(base_url=url) as client:
        own = [own_article(client, pages, extract) for extract in ("main", "all")]
        sites = [two_sites(client, pages, extract) for extract in ("main", "all")]
    lines = ["## Quality (default settings: word 5-grams, MinHash threshold 0.8)", ""]
    lines += markdown_table(list(own[0]), [list(row.values()) for row in own]).splitlines()
    lines += [""]
    lines += markdown_table(list(sites[0]), [list(row.values()) for row in sites]).splitlines()
    return "\n".join(lines)


# ---------------------------------------------------------------------------- extractors


def extractor_table(pages: list[RealPage], passes: int = 3) -> str:
    """Each reading of a page against its hand-made article: exact word 5-gram Jaccard,
    and the time a page (median over ``passes`` passes, interleaved)."""
    from resiliparse.parse.html import HTMLTree

    from app.core.page import main_content
    from app.core.text import html_to_text

    def resiliparse_main(html: str) -> str:
        return main_content(HTMLTree.parse(html))

    readers: dict[str, Any] = {
        "visible text (html.extract all)": html_to_text,
        "resiliparse main content": resiliparse_main,
        "neardup read_page (html.extract main)": lambda html: read_page(html).text,
    }
    try:
        import trafilatura

        readers["trafilatura (include_comments=False)"] = lambda html: (
            trafilatura.extract(html, include_comments=False) or ""
        )
        readers["trafilatura favor_precision"] = lambda html: (
            trafilatura.extract(html, include_comments=False, favor_precision=True) or ""
        )
    except ImportError:
        pass
    times: dict[str, list[list[float]]] = {name: [] for name in readers}
    texts: dict[str, list[str]] = {}
    for _ in range(passes):
        for name, reader in readers.items():
            row = []
            out = []
            for page in pages:
                started = time.perf_counter()
                out.append(reader(page.html))
                row.append(time.perf_counter() - started)
            times[name].append(row)
            texts[name] = out
    rows = []
    for name in readers:
        j = [jaccard(text, page.article) for text, page in zip(texts[name], pages, strict=True)]
        per_page = [statistics.median(column) for column in zip(*times[name], strict=True)]
        rows.append(
            [
                name,
                share([x >= 0.8 for x in j]),
                share([x >= 0.5 for x in j]),
                f"{statistics.median(j):.3f}",
                f"{1000 * statistics.median(per_page):.2f}",
                f"{1000 * percentile(per_page, 99):.1f}",
            ]
        )
    headers = ["reading", "J >= 0.8", "J >= 0.5", "median J", "median ms", "p99 ms"]
    title = "## Readings of a page against its article (exact word 5-gram Jaccard)"
    return "\n".join([title, "", *markdown_table(headers, rows).splitlines()])


# ---------------------------------------------------------------------------- speed


@dataclass(frozen=True, slots=True)
class Load:
    pages: list[str]  # HTML
    texts: list[str]  # the same documents' extracted text


def size_mix(pages: list[RealPage], count: int, seed: int = 5) -> Load:
    rng = random.Random(seed)
    articles = [page.article for page in pages]
    htmls = []
    for index in range(count):
        page = pages[index % len(pages)]
        size = int(math.exp(rng.uniform(math.log(100 * KB), math.log(1536 * KB))))
        site = SITES[index % 3]
        htmls.append(
            site_page(
                site,
                f"Story {index}",
                page.article,
                teasers_from(articles, 14, rng),
                pad_to_bytes=size,
            )
            if index % 2
            else pad_real(page.html, size)
        )
    return Load(htmls, [read_page(html).text for html in htmls])


def pad_real(html: str, size: int) -> str:
    """A real page grown to ``size`` bytes by inline scripts before </body>, as pages
    that carry their app state inline are."""
    missing = size - len(html.encode())
    if missing <= 0:
        return html
    filler = "<script>window.__S__=" + '"' + "x" * missing + '"</script>'
    at = html.rfind("</body>")
    return html[:at] + filler + html[at:] if at >= 0 else html + filler


async def closed_loop(
    url: str, requests: list[tuple[str, dict[str, Any]]], clients: int
) -> tuple[float, list[float]]:
    """(seconds, latencies) of sending the requests from ``clients`` closed-loop clients."""
    queue = list(reversed(requests))
    latencies: list[float] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as session:
            while queue:
                path, body = queue.pop()
                started = time.perf_counter()
                response = await session.post(path, json=body)
                latencies.append(time.perf_counter() - started)
                assert response.status_code in (200, 201), response.text[:300]

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - started, latencies


def inserts(
    url: str, documents: list[dict[str, Any]], batch: int, clients: int
) -> tuple[float, list[float]]:
    path = "/v1/collections/default/documents"
    if batch > 1:
        requests = [
            (f"{path}/batch", {"documents": documents[start : start + batch]})
            for start in range(0, len(documents), batch)
        ]
    else:
        requests = [(path, document) for document in documents]
    return asyncio.run(closed_loop(url, requests, clients))


async def searches_beside(
    url: str, texts: list[str], pages: list[dict[str, Any]] | None, seconds: float
) -> list[float]:
    """Search latencies of 8 clients for ``seconds``, with 4 clients inserting ``pages``
    (one at a time, over and over under new ids) meanwhile when given."""
    deadline = time.perf_counter() + seconds
    latencies: list[float] = []

    async def searcher(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=url, timeout=300) as session:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                response = await session.post(
                    "/v1/collections/default/search", json={"text": rng.choice(texts)}
                )
                latencies.append(time.perf_counter() - started)
                response.raise_for_status()

    async def inserter(number: int) -> None:
        assert pages is not None
        async with httpx.AsyncClient(base_url=url, timeout=300) as session:
            sent = 0
            while time.perf_counter() < deadline:
                page = dict(pages[(number + 4 * sent) % len(pages)])
                page["id"] = f"busy-{number}-{sent}"
                response = await session.post("/v1/collections/default/documents", json=page)
                assert response.status_code in (200, 201), response.text[:300]
                sent += 1

    tasks = [searcher(seed) for seed in range(8)]
    if pages is not None:
        tasks += [inserter(number) for number in range(4)]
    await asyncio.gather(*tasks)
    return latencies


def cpu_seconds(server: Server) -> float:
    """The server process's CPU time so far (every thread), from /proc."""
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(values: Sequence[float], q: float) -> float:
    return 1000 * percentile(values, q)


def speed(load: Load, runs: int, data_root: Path) -> str:
    count = len(load.pages)
    page_docs = [{"id": f"p{i}", "text": html, "html": True} for i, html in enumerate(load.pages)]
    text_docs = [{"id": f"p{i}", "text": text} for i, text in enumerate(load.texts)]
    rows: list[list[str]] = []
    per_page_cpu: dict[str, float] = {}
    for label, documents in (("pages", page_docs), ("extracted text", text_docs)):
        for mode, batch, clients in (
            ("batches of 16, 2 clients", 16, 2),
            ("one at a time, 8 clients", 1, 8),
        ):
            rates, p50s, p99s, cpus = [], [], [], []
            for run in range(runs):
                with Server(data_root / f"{label[:4]}-{batch}-{run}") as server:
                    before = cpu_seconds(server)
                    seconds, latencies = inserts(server.url, documents, batch, clients)
                    cpus.append((cpu_seconds(server) - before) / count)
                rates.append(count / seconds)
                p50s.append(ms(latencies, 50))
                p99s.append(ms(latencies, 99))
            rate = statistics.median(rates)
            per_page_cpu[f"{label} {batch}"] = statistics.median(cpus)
            rows.append(
                [
                    label,
                    mode,
                    f"{rate:,.0f}",
                    f"{statistics.median(p50s):,.1f}",
                    f"{statistics.median(p99s):,.1f}",
                    f"{1000 * statistics.median(cpus):,.2f}",
                ]
            )
    extract_times = []
    for _ in range(runs):
        started = time.perf_counter()
        for html in load.pages:
            read_page(html)
        extract_times.append((time.perf_counter() - started) / count)
    extract = statistics.median(extract_times)
    total_bytes = sum(len(html.encode()) for html in load.pages)
    lines = [
        f"## Speed: {count} pages, {total_bytes / count / KB:,.0f} KB of HTML on average "
        f"(100 KB-1.5 MB), median of {runs} runs",
        "",
        *markdown_table(
            ["documents", "sent", "pages/s", "p50 ms", "p99 ms", "server CPU ms a page"], rows
        ).splitlines(),
        "",
        f"Extraction (read_page) in this process: {1000 * extract:.2f} ms a page, "
        f"{100 * extract / per_page_cpu['pages 16']:.0f}% of the server's CPU time per page "
        f"in batches and {100 * extract / per_page_cpu['pages 1']:.0f}% one at a time; the "
        "load generator shares the machine's cores with the server (nothing pinned).",
        "",
    ]
    texts = load.texts[: max(1, count // 2)]
    alone, busy, texts_busy = [], [], []
    for run in range(runs):
        with Server(data_root / f"search-{run}") as server:
            inserts(server.url, text_docs, 64, 2)
            alone.append(asyncio.run(searches_beside(server.url, texts, None, 10)))
            busy.append(asyncio.run(searches_beside(server.url, texts, page_docs, 10)))
            texts_busy.append(asyncio.run(searches_beside(server.url, texts, text_docs, 10)))
    search_rows = [
        [
            label,
            f"{statistics.median(len(run) / 10 for run in results):,.0f}",
            f"{statistics.median(ms(run, 50) for run in results):,.1f}",
            f"{statistics.median(ms(run, 99) for run in results):,.1f}",
        ]
        for label, results in (
            ("alone", alone),
            ("while pages are inserted (4 clients)", busy),
            ("while their texts are inserted (4 clients)", texts_busy),
        )
    ]
    lines += [
        "Searches of plain texts (8 clients, 10 s):",
        "",
        *markdown_table(["searches", "searches/s", "p50 ms", "p99 ms"], search_rows).splitlines(),
    ]
    return "\n".join(lines)


def site_documents(pages: list[RealPage], with_url: bool) -> list[dict[str, Any]]:
    """Each article in the chrome of one of the three sites, its URL on that site, and
    the site's sign-off as the article's last paragraph (chrome inside the article, which
    no extractor can tell from its text)."""
    articles = [page.article for page in pages]
    rng = random.Random(2)
    documents = []
    for index, page in enumerate(pages):
        site = SITES[index % 3]
        signed = f"{page.article}\n\n{site.newsletter_text} {site.legal_text}"
        html = site_page(site, "Headline", signed, teasers_from(articles, 14, rng))
        document: dict[str, Any] = {"id": page.id, "text": html, "html": True}
        if with_url:
            slug = site.name.lower().replace(" ", "")
            document["metadata"] = {"url": f"https://www.{slug}.com/news/{page.id}"}
        documents.append(document)
    return documents


def same_site_by_passages(url: str, documents: list[dict[str, Any]], coverage: float) -> str:
    """The share of pages whose ``similar`` names another page of its site by passages
    alone (pages of a site are every third)."""
    site_of = {document["id"]: index % 3 for index, document in enumerate(documents)}
    related = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for document in documents:
            answer = client.get(
                f"/v1/collections/default/documents/{document['id']}/similar",
                params={"min_coverage": coverage, "limit": 100},
            )
            answer.raise_for_status()
            related.append(
                any(
                    match["methods"] == ["passage"]
                    and site_of[match["id"]] == site_of[document["id"]]
                    for match in answer.json()["matches"]
                )
            )
    return share(related)


def hosts(pages: list[RealPage], runs: int, data_root: Path) -> str:
    rows: list[list[str]] = []
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    quality: dict[bool, list[str]] = {}
    for run in range(runs):
        for with_url in (True, False) if run % 2 else (False, True):
            documents = site_documents(pages, with_url)
            with Server(data_root / f"hosts-{with_url}-{run}") as server:
                before = cpu_seconds(server)
                seconds, _ = inserts(server.url, documents, 16, 2)
                cpus[with_url].append((cpu_seconds(server) - before) / len(documents))
                rates[with_url].append(len(documents) / seconds)
                if run == 0:
                    quality[with_url] = [
                        same_site_by_passages(server.url, documents, coverage)
                        for coverage in (0.0, 0.5)
                    ]
    for with_url in (False, True):
        rows.append(
            [
                "with its URL" if with_url else "without a URL",
                *quality[with_url],
                f"{statistics.median(rates[with_url]):,.0f}",
                f"{1000 * statistics.median(cpus[with_url]):,.2f}",
            ]
        )
    ratio = statistics.median(rates[True]) / statistics.median(rates[False])
    return "\n".join(
        [
            f"## Hosts: {len(pages)} articles in the chrome of 3 sites, median of {runs} runs",
            "",
            *markdown_table(
                [
                    "pages",
                    "a page of its site by passages, min_coverage 0",
                    "min_coverage 0.5",
                    "pages/s (batches of 16, 2 clients)",
                    "server CPU ms a page",
                ],
                rows,
            ).splitlines(),
            "",
            f"Inserts with URLs at {ratio:.2f}x the pages/s of the same pages without.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pages", type=Path, help="a checkout of scrapinghub/article-extraction-benchmark"
    )
    parser.add_argument("--count", type=int, default=240, help="pages of the speed runs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-extractors", action="store_true")
    parser.add_argument("--hosts", action="store_true", help="the host rule's effect and cost")
    arguments = parser.parse_args()
    if arguments.pages is not None:
        pages = benchmark_pages(arguments.pages)
        source = f"the article-extraction-benchmark's {len(pages)} pages"
    else:
        pages = sample_pages()
        source = f"tests/data/pages ({len(pages)} pages; give --pages for the 181 of the benchmark)"
    sections = [f"# Web pages ({source})", ""]
    if not arguments.skip_extractors:
        sections += [extractor_table(pages), ""]
        print("\n".join(sections), flush=True)
    with tempfile.TemporaryDirectory(prefix="neardup-pages-") as root:
        if not arguments.skip_quality:
            with Server(Path(root) / "quality", NEARDUP_MAX_TEXT_CHARS="2000000") as server:
                sections.append(quality(server.url, pages))
            print("\n".join(sections), flush=True)
        if not arguments.skip_speed:
            load = size_mix(pages, arguments.count)
            sections += ["", speed(load, arguments.runs, Path(root))]
        if arguments.hosts:
            sections += ["", hosts(pages, arguments.runs, Path(root))]
    report = "\n".join(sections) + "\n"
    print(report)
    write_result("pages", report)


if __name__ == "__main__":
    main()
