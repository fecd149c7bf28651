"""A real Scrapy crawl of a local site, for the tests and the benchmark of
neardup_client.scrapy (tests/e2e/test_scrapy.py, bench/scrapy_crawl.py).

``SiteServer`` serves fixed pages from a thread of the caller; ``crawl`` runs one Scrapy
crawl of it in a child process (Scrapy's reactor cannot start twice in one process), with
neardup's pipeline and middleware as asked, and returns what it left (``Crawled``): its
stats, items, dropped items, the pages read in order, and its CPU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from devkit.harness import REPO_ROOT

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
    cpus: Collection[int] | None = None,
) -> Crawled:
    """Crawl from ``start`` in a child process, following the links whose path starts
    with one of ``follow``, with neardup's pipeline and middleware as asked against
    ``neardup_url``; ``reactor`` "asyncio" or "default" (Twisted's epoll reactor);
    ``warc``: every HTML response written there too (warcio), in the order the spider
    read them; ``cpus``: the CPUs the crawl may run on (all where None). Raises with the
    crawl's log when it fails."""
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
            "cpus": None if cpus is None else sorted(cpus),
        }
        done = subprocess.run(
            [sys.executable, "-m", "devkit.crawl", json.dumps(config)],
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
    if config["cpus"] is not None:
        os.sched_setaffinity(0, config["cpus"])  # before any thread starts: all inherit it
    import resource

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
        settings["SPIDER_MIDDLEWARES"]["devkit.crawl.WarcRecorder"] = 60
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

    # The process's CPU time when the spider opens and closes: the crawl's own, without
    # the imports and start-up the whole process's time (cpu_seconds) includes.
    marks: list[float] = []

    def cpu_now() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        marks.append(usage.ru_utime + usage.ru_stime)

    process = CrawlerProcess(settings, install_root_handler=True)
    crawler = process.create_crawler(SiteSpider)
    crawler.signals.connect(scraped, signal=signals.item_scraped)
    crawler.signals.connect(was_dropped, signal=signals.item_dropped)
    crawler.signals.connect(cpu_now, signal=signals.spider_opened)
    crawler.signals.connect(cpu_now, signal=signals.spider_closed)
    process.crawl(crawler)
    process.start()
    stats = {key: _plain(value) for key, value in (crawler.stats.get_stats() or {}).items()}
    cpu_now()
    cpu = {"cpu_seconds": marks[-1], "crawl_cpu_seconds": marks[1] - marks[0]}
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


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
