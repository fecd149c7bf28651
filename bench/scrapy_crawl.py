"""A real Scrapy crawl of a local site, with and without neardup_client.scrapy: items per
second through the pipeline against the same crawl without it, and the requests the
middleware saves (a mirror's links not followed).

    .venv/bin/python -m bench.scrapy_crawl --articles 300 --runs 5

The site (``bench_site``) is served by a thread of this process: a home page, section
pages listing articles in one site's chrome, and for every tenth article a mirror (the
same article in another site's chrome) linked from it, whose links lead to pages found
only through it. Each crawl runs in its own process (``crawl``: Scrapy's reactor cannot
start twice in one) against one ``neardup serve``, a fresh collection a run:

- **bare**: the spider alone;
- **pipeline**: NeardupPipeline (NEARDUP_DROP "none": the same items leave both crawls);
- **pipeline + middleware**: NeardupSpiderMiddleware too.

Items per second is items over the crawl's own time (from its first request to its
finish, Scrapy's ``elapsed_time_seconds``); each figure the median of ``--runs`` runs,
the configurations interleaved within a run. The tests (tests/e2e/test_scrapy.py) use the
same harness: ``SiteServer`` and ``crawl``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from devkit.harness import REPO_ROOT, markdown_table, write_result

# ---------------------------------------------------------------- the site


@dataclass(frozen=True, slots=True)
class Page:
    body: bytes
    content_type: str = "text/html; charset=utf-8"


class SiteServer:
    """A site of fixed pages on a free port, in a thread: ``with SiteServer(pages) as
    site:`` (``site.url``). Each request's path is recorded in ``site.requested``, in
    order; ``before[path]`` is called before that path is answered (a test stops a
    service there), once."""

    def __init__(self, pages: Mapping[str, Page]) -> None:
        self.pages = dict(pages)
        self.requested: list[str] = []
        self.before: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with site._lock:
                    site.requested.append(self.path)
                    hook = site.before.pop(self.path, None)
                if hook is not None:
                    hook()
                page = site.pages.get(self.path)
                if page is None:
                    body, status, kind = b"not found", 404, "text/plain"
                else:
                    body, status, kind = page.body, 200, page.content_type
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SiteServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---------------------------------------------------------------- the crawl


@dataclass(slots=True)
class Crawled:
    """What a crawl left: Scrapy's stats, the items scraped and dropped (their fields,
    the HTML left out), the pages the spider read in order, its log's tail."""

    stats: dict[str, Any]
    items: list[dict[str, Any]]
    dropped: list[dict[str, Any]]
    parsed: list[str]
    log: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return float(self.stats["elapsed_time_seconds"])


def crawl(
    start: str,
    follow: Sequence[str],
    *,
    neardup_url: str | None = None,
    collection: str = "crawl",
    pipeline: bool = True,
    middleware: bool = True,
    reactor: str = "asyncio",
    warc: Path | None = None,
    settings: Mapping[str, Any] | None = None,
    timeout: float = 120,
) -> Crawled:
    """Crawl from ``start`` in a child process, following the links whose path starts
    with one of ``follow``, with neardup's pipeline and middleware as asked against
    ``neardup_url``; ``reactor`` "asyncio" or "default" (Twisted's epoll reactor);
    ``warc``: every HTML response written there too (warcio), in the order the spider
    read them. Raises with the crawl's log when it fails."""
    with tempfile.TemporaryDirectory(prefix="scrapy-crawl-") as directory:
        out = Path(directory) / "out.json"
        config = {
            "start": start,
            "follow": list(follow),
            "neardup_url": neardup_url,
            "collection": collection,
            "pipeline": pipeline,
            "middleware": middleware,
            "reactor": reactor,
            "warc": None if warc is None else str(warc),
            "settings": dict(settings or {}),
            "out": str(out),
        }
        done = subprocess.run(
            [sys.executable, "-m", "bench.scrapy_crawl", "--child", json.dumps(config)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the crawl failed ({done.returncode}):\n{done.stderr[-6000:]}")
        result = json.loads(out.read_text())
    return Crawled(**result, log=done.stderr[-20000:])


REACTORS = {
    "asyncio": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "default": "twisted.internet.epollreactor.EPollReactor",
}


def _child(config: dict[str, Any]) -> None:
    """The crawl itself (in the child process)."""
    import scrapy
    from itemadapter import ItemAdapter
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    parsed: list[str] = []
    follow = tuple(config["follow"])

    class SiteSpider(scrapy.Spider):
        name = "site"
        start_urls: ClassVar[list[str]] = [config["start"]]

        def parse(self, response: Any) -> Any:
            parsed.append(response.url)
            if response.css("h1"):
                yield {
                    "url": response.url,
                    "html": response.body,
                    "charset": response.encoding,
                    "title": response.css("h1::text").get(),
                }
            for href in response.css("a::attr(href)").getall():
                if href.startswith(follow):
                    yield response.follow(href, self.parse)

    settings: dict[str, Any] = {
        "TWISTED_REACTOR": REACTORS[config["reactor"]],
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "NEARDUP_URL": config["neardup_url"],
        "NEARDUP_COLLECTION": config["collection"],
        "ITEM_PIPELINES": {},
        "SPIDER_MIDDLEWARES": {},
    }
    if config["pipeline"]:
        settings["ITEM_PIPELINES"]["neardup_client.scrapy.NeardupPipeline"] = 300
    if config["middleware"]:
        settings["SPIDER_MIDDLEWARES"]["neardup_client.scrapy.NeardupSpiderMiddleware"] = 50
    if config["warc"]:
        settings["SPIDER_MIDDLEWARES"]["bench.scrapy_crawl.WarcRecorder"] = 60
        settings["WARC_PATH"] = config["warc"]
    settings.update(config["settings"])

    items: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []

    def fields(item: Any) -> dict[str, Any]:
        return {key: value for key, value in ItemAdapter(item).items() if key != "html"}

    def scraped(item: Any) -> None:
        items.append(fields(item))

    def was_dropped(item: Any, exception: BaseException) -> None:
        dropped.append({**fields(item), "reason": str(exception)})

    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(SiteSpider)
    crawler.signals.connect(scraped, signal=signals.item_scraped)
    crawler.signals.connect(was_dropped, signal=signals.item_dropped)
    process.crawl(crawler)
    process.start()
    stats = {key: _plain(value) for key, value in (crawler.stats.get_stats() or {}).items()}
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {"cpu_seconds": usage.ru_utime + usage.ru_stime}
    result = {"stats": stats, "items": items, "dropped": dropped, "parsed": parsed, "extra": cpu}
    Path(config["out"]).write_text(json.dumps(result))


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


class WarcRecorder:
    """A spider middleware (test harness) that writes each HTML response to WARC_PATH
    with warcio, when its callback's output starts: placed just outside neardup's
    middleware, it writes the pages in the order that one checks them."""

    def __init__(self, path: str) -> None:
        from warcio.warcwriter import WARCWriter

        self._file = open(path, "wb")  # noqa: SIM115 (closed with the spider)
        self._writer = WARCWriter(self._file, gzip=True)

    @classmethod
    def from_crawler(cls, crawler: Any) -> WarcRecorder:
        from scrapy import signals

        recorder = cls(crawler.settings["WARC_PATH"])
        crawler.signals.connect(recorder.close, signal=signals.spider_closed)
        return recorder

    def close(self) -> None:
        self._file.close()

    async def process_spider_output(self, response: Any, result: Any, spider: Any = None) -> Any:
        import io

        from scrapy.http import HtmlResponse
        from warcio.statusandheaders import StatusAndHeaders

        if isinstance(response, HtmlResponse):
            headers = [
                (key.decode("latin-1"), value.decode("latin-1"))
                for key, values in response.headers.items()
                for value in values
            ]
            http = StatusAndHeaders(f"{response.status} OK", headers, protocol="HTTP/1.1")
            record = self._writer.create_warc_record(
                response.url, "response", payload=io.BytesIO(response.body), http_headers=http
            )
            self._writer.write_record(record)
        async for entry in result:
            yield entry


# ---------------------------------------------------------------- the benchmark's site


def bench_site(articles: int, seed: int = 1) -> tuple[dict[str, Page], int, int]:
    """(pages, pages the crawl reaches without the middleware, pages only mirrors lead
    to): ``articles`` articles in sections of 20 on one site, every tenth with a mirror in
    another site's chrome that links to 5 pages of its own."""
    from devkit.corpus import english_like_text
    from devkit.pages import SITES, site_page

    rng = random.Random(seed)
    texts = ["\n".join(english_like_text(rng, 700) for _ in range(4)) for _ in range(articles + 1)]
    pages: dict[str, Page] = {}

    def add(path: str, text: str) -> None:
        pages[path] = Page(text.encode())

    sections = [list(range(start, min(start + 20, articles))) for start in range(0, articles, 20)]
    home = "".join(f'<li><a href="/section/{i}">Section {i}</a></li>' for i in range(len(sections)))
    add("/", f"<html><body><h2>Local news</h2><ul>{home}</ul></body></html>")
    mirror_only = 0
    for number, members in enumerate(sections):
        links = "".join(f'<li><a href="/news/{i}">Story {i}</a></li>' for i in members)
        add(
            f"/section/{number}",
            f"<html><body><h2>Section {number}</h2><ul>{links}</ul></body></html>",
        )
        for index in members:
            link = f'<a href="/mirror/{index}">mirror</a>' if index % 10 == 0 else ""
            page = site_page(SITES[0], f"Story {index}", texts[index], [])
            add(f"/news/{index}", page.replace('<div class="tags">', link + '<div class="tags">'))
            if index % 10 == 0:
                extra = "".join(f'<a href="/mirror/{index}/{k}">more {k}</a> ' for k in range(5))
                copy = site_page(SITES[1], f"Story {index}", texts[index], [])
                add(f"/mirror/{index}", copy.replace("</body>", f"<p>{extra}</p></body>"))
                for k in range(5):
                    own = html.escape(english_like_text(rng, 2000))
                    add(
                        f"/mirror/{index}/{k}",
                        f"<html><body><h1>More {index}.{k}</h1><p>{own}</p></body></html>",
                    )
                    mirror_only += 1
    reached = len(pages)
    return pages, reached, mirror_only


FOLLOW = ("/section/", "/news/", "/mirror/")


def _bench(arguments: argparse.Namespace) -> str:
    from devkit.server import neardup

    pages, total, mirror_only = bench_site(arguments.articles)
    configurations = {
        "bare": {"pipeline": False, "middleware": False},
        "pipeline": {"pipeline": True, "middleware": False},
        "pipeline + middleware": {"pipeline": True, "middleware": True},
    }
    rates: dict[str, list[float]] = {name: [] for name in configurations}
    requests: dict[str, list[int]] = {name: [] for name in configurations}
    items: dict[str, list[int]] = {name: [] for name in configurations}
    cpu: dict[str, list[float]] = {name: [] for name in configurations}
    settings = {"NEARDUP_DROP": "none", "LOG_LEVEL": "WARNING"}
    with neardup(synchronous="NORMAL") as service, SiteServer(pages) as site:
        for run in range(arguments.runs):
            for name, options in configurations.items():
                done = crawl(
                    site.url + "/",
                    FOLLOW,
                    neardup_url=service.url,
                    collection=f"bench-{run}-{name.replace(' + ', '-')}",
                    settings=settings,
                    **options,  # type: ignore[arg-type]
                )
                scraped = int(done.stats.get("item_scraped_count", 0))
                rates[name].append(scraped / done.seconds)
                requests[name].append(int(done.stats["downloader/request_count"]))
                items[name].append(scraped)
                cpu[name].append(done.extra["cpu_seconds"] * 1000 / scraped)
                print(f"run {run} {name}: {scraped} items in {done.seconds:.2f} s", flush=True)
    bare = statistics.median(rates["bare"])
    rows = []
    for name in configurations:
        rate = statistics.median(rates[name])
        rows.append(
            [
                name,
                f"{statistics.median(items[name]):.0f}",
                f"{statistics.median(requests[name]):.0f}",
                f"{min(rates[name]):.0f} / {rate:.0f} / {max(rates[name]):.0f}",
                f"{(1 - rate / bare) * 100:+.1f}%" if name != "bare" else "",
                f"{statistics.median(cpu[name]):.2f}",
            ]
        )
    saved = statistics.median(requests["pipeline"]) - statistics.median(
        requests["pipeline + middleware"]
    )
    table = markdown_table(
        [
            "crawl",
            "items",
            "requests",
            "items/s min / median / max",
            "slower than bare",
            "crawler CPU ms an item",
        ],
        rows,
    )
    report = (
        f"{arguments.articles} articles ({total} pages reached without the middleware, "
        f"{mirror_only} of them only through mirrors), {arguments.runs} runs, "
        f"CPUs {os.cpu_count()}:\n\n{table}\n\n"
        f"The middleware saved {saved:.0f} requests of "
        f"{statistics.median(requests['pipeline']):.0f} "
        f"({saved / statistics.median(requests['pipeline']):.1%}).\n"
    )
    return report


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--articles", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    report = _bench(arguments)
    print(report)
    path = write_result("scrapy_crawl.md", report)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
