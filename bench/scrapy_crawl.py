"""A real Scrapy crawl of a local site, with and without neardup_client.scrapy: items per
second through the pipeline against the same crawl without it, and the requests the
middleware saves (a mirror's links not followed).

    .venv/bin/python -m bench.scrapy_crawl --articles 300 --runs 7 [--pin]

The site (``bench_site``) is served by a thread of this process: a home page, section
pages listing articles in one site's chrome, and for every tenth article a mirror (the
same article in another site's chrome) linked from it, whose links lead to pages found
only through it. Each crawl runs in its own process (devkit/crawl.py, which the tests
share) against one ``neardup serve``, a fresh collection a run:

- **bare**: the spider alone;
- **pipeline**: NeardupPipeline (NEARDUP_DROP "none": the same items leave both crawls);
- **pipeline + middleware**: NeardupSpiderMiddleware too.

Items per second is items over the crawl's own time (from its first request to its
finish, Scrapy's ``elapsed_time_seconds``); the configurations are interleaved within a
run and each run's pipeline rate is compared with that run's bare crawl; figures are min
/ median / max over ``--runs`` runs. ``--pin``: the crawl and the site on the first CPU,
the service on the second, as a service on its own machine or cores; without it all
share every CPU, as when the service runs on the crawler's box. Crawler CPU is the crawl
process's CPU time from the spider's opening to its closing (start-up and imports left
out), an item.
"""

from __future__ import annotations

import argparse
import html
import os
import random
import statistics

from devkit.crawl import Page, SiteServer, crawl
from devkit.harness import cpu_seconds, markdown_table, pin_process, scrape_metric, write_result

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


CONFIGURATIONS: dict[str, dict[str, bool]] = {
    "bare": {"pipeline": False, "middleware": False},
    "pipeline": {"pipeline": True, "middleware": False},
    "pipeline + middleware": {"pipeline": True, "middleware": True},
}
# --pin: the crawl (and the site, whose cost is the same with or without the pipeline) on
# one CPU, the service on another.
CRAWL_CPUS, SERVICE_CPUS = {0}, {1}


def _spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def _bench(arguments: argparse.Namespace) -> str:
    from devkit.server import neardup

    pages, total, mirror_only = bench_site(arguments.articles)
    names = list(CONFIGURATIONS)
    rates: dict[str, list[float]] = {name: [] for name in names}
    slower: dict[str, list[float]] = {name: [] for name in names}
    requests: dict[str, list[int]] = {name: [] for name in names}
    items: dict[str, list[int]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    service_cpu: dict[str, list[float]] = {name: [] for name in names}
    sent: dict[str, list[float]] = {name: [] for name in names}
    settings = {"NEARDUP_DROP": "none", "LOG_LEVEL": "WARNING"}
    cpus = CRAWL_CPUS if arguments.pin else None
    if arguments.pin:
        os.sched_setaffinity(0, CRAWL_CPUS)  # the site's threads
    with neardup(synchronous="NORMAL") as service, SiteServer(pages) as site:
        if arguments.pin:
            pin_process(service.pid, SERVICE_CPUS)
        for run in range(arguments.runs):
            # Each run in another order, so that no configuration always follows another.
            order = names[run % len(names) :] + names[: run % len(names)]
            rate: dict[str, float] = {}
            for name in order:
                service_before = cpu_seconds(service.pid)
                posts_before = scrape_metric(service.url, "neardup_requests_total")
                done = crawl(
                    site.url + "/",
                    FOLLOW,
                    neardup_url=service.url,
                    collection=f"bench-{run}-{name.replace(' + ', '-')}",
                    settings=settings,
                    cpus=cpus,
                    pipeline=CONFIGURATIONS[name]["pipeline"],
                    middleware=CONFIGURATIONS[name]["middleware"],
                )
                # The service's own requests to /metrics, one before and one after, left out.
                posts = scrape_metric(service.url, "neardup_requests_total") - posts_before - 1
                service_cpu[name].append((cpu_seconds(service.pid) - service_before) * 1000)
                scraped = int(done.stats.get("item_scraped_count", 0))
                service_cpu[name][-1] /= scraped
                sent[name].append(scraped / posts if posts > 0 else 0.0)
                rate[name] = scraped / done.seconds
                rates[name].append(rate[name])
                requests[name].append(int(done.stats["downloader/request_count"]))
                items[name].append(scraped)
                cpu[name].append(done.extra["crawl_cpu_seconds"] * 1000 / scraped)
                print(
                    f"run {run} {name}: {scraped} items in {done.seconds:.2f} s, "
                    f"{cpu[name][-1]:.2f} ms CPU an item, service {service_cpu[name][-1]:.2f} ms, "
                    f"{sent[name][-1]:.1f} items a service request",
                    flush=True,
                )
            for name in names:
                slower[name].append((1 - rate[name] / rate["bare"]) * 100)
    rows = [
        [
            name,
            f"{statistics.median(items[name]):.0f}",
            f"{statistics.median(requests[name]):.0f}",
            _spread(rates[name], ".0f"),
            _spread(slower[name], ".1f") + "%" if name == "pipeline" else "",
            _spread(cpu[name], ".2f"),
            f"{statistics.median(service_cpu[name]):.2f}" if name != "bare" else "",
            f"{statistics.median(sent[name]):.1f}" if name != "bare" else "",
        ]
        for name in names
    ]
    table = markdown_table(
        [
            "crawl",
            "items",
            "requests",
            "items/s min / median / max",
            "slower than bare (same run)",
            "crawler CPU ms an item",
            "service CPU ms an item",
            "items a service request",
        ],
        rows,
    )
    crawled = statistics.median(requests["pipeline"])
    saved = crawled - statistics.median(requests["pipeline + middleware"])
    where = (
        f"crawl and site on CPU {min(CRAWL_CPUS)}, service on CPU {min(SERVICE_CPUS)}"
        if arguments.pin
        else "crawl, site and service sharing every CPU"
    )
    return (
        f"{arguments.articles} articles ({total} pages reached without the middleware, "
        f"{mirror_only} of them only through mirrors), {arguments.runs} runs, "
        f"{os.cpu_count()} CPUs, {where}:\n\n{table}\n\n"
        f"The middleware saved {saved:.0f} requests of {crawled:.0f} ({saved / crawled:.1%}).\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--articles", type=int, default=300)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--pin", action="store_true", help="the crawl on CPU 0, the service on CPU 1"
    )
    arguments = parser.parse_args()
    report = _bench(arguments)
    print(report)
    path = write_result("scrapy_crawl" + ("_pinned" if arguments.pin else "") + ".md", report)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
