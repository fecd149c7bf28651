"""neardup against the peer a user would otherwise write, end to end over HTTP, in one run.

    .venv/bin/python -m bench.service                      # 20,000 documents, 20 s phases
    .venv/bin/python -m bench.service --count 1000000 --peer-count 100000 --plots

For each server in turn (``neardup serve`` through devkit/server.py's Server on a temporary
data directory, then the peer, bench/peer_app.py under uvicorn with one worker, both on
127.0.0.1 and a free port, both with log level warning):

1. preload ``--count`` distinct documents ``pre-{i}`` (3 KB of varied Reuters each, see
   devkit/documents.py) in batches of 256 from 2 clients: the sustained batch insert rate
   from an empty index to N; then resident memory (VmRSS) and bytes per document;
2. search by text: ``--clients`` (16) closed-loop clients for ``--duration`` seconds, 3 KB
   texts, a fifth of them near-duplicates (one word changed) of preloaded documents;
3. single inserts: 16 clients, a fifth near-duplicates of preloaded documents;
4. batch inserts: batches of 256 from 2 clients, the same mix.

Each phase has an unrecorded warm-up (``--warmup`` s) on the same connections first. The
load generator is closed-loop (each client sends its next request when the previous one
is answered) on httpx.AsyncClient over uvloop; it stops sending at the deadline and waits
for the requests in flight, so a rate is completed work over the time to the last answer
and every phase ends by itself. Both servers get the same request stream (same seed). The
CPU time of the server process and of the load generator over each phase is recorded: a
server near 100% of a core is the bottleneck; a load generator near 100% means the figure
is a floor. ``--pin`` puts the server on CPU 0 and the load generator on CPU 1.

``--plots`` also draws docs/service-search-latency.png (search p50 and p99 against index
size: measured at each of ``--plot-sizes`` on the way up to ``--count``) and
docs/service-insert-batch.png (insert documents/s against batch size 1, 16, 64, 256).

``--py-spy`` samples each server during the three timed phases (py-spy record --gil: the
thread holding the GIL, where a GIL-bound server's CPU goes) into flame graphs
bench/results/py-spy-<server>-<phase>.svg (needs ``pip install py-spy``).

The report is printed and written to bench/results/service.md (and .json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from random import Random

import httpx
import orjson

from devkit.documents import DEFAULT_CHARS, Corpus, load_corpus
from devkit.harness import (
    REPO_ROOT,
    RESULTS_DIR,
    Align,
    cpu_model,
    cpu_seconds,
    format_ratio,
    markdown_table,
    percentile,
    pin_process,
    rss_bytes,
    write_result,
)
from devkit.preload import JSON_HEADERS, check_loopback, preload_async, run_async
from devkit.py_spy import py_spy
from devkit.server import Running, neardup, peer

DOCS_DIR = REPO_ROOT / "docs"
COLLECTION = "/v1/collections/default"
NEW_KEYS = 1 << 62  # keys of new documents; preloaded ones are 0 .. N-1
REQUEST_TIMEOUT = 600.0
SETTLE_SECONDS = 2.0  # after a preload: lets neardup's background merge run before RSS
PLOT_BATCH_SIZES = (1, 16, 64, 256)
SERVER_CPU, CLIENT_CPU = 0, 1

# Targets of the issue "Performance end to end" (at 1M documents, 16 clients).
MILLION = 1_000_000
TARGET_SEARCH_RPS = 1500
TARGET_SEARCH_P99_MS = 25.0
TARGET_BATCH_DOCS = 8000
TARGET_RSS_PER_DOC = 1536
TARGET_INSERT_RATIO = 10.0
TARGET_SEARCH_RATIO = 3.0

PHASE_HEADERS = [
    *("server", "phase", "clients", "requests", "errors", "s", "rate/s", "p50 ms", "p99 ms"),
    *("server CPU", "client CPU", "documents after"),
]
RIGHT: Align = "right"
Request = tuple[str, bytes, int]  # path, JSON body, documents (or 1 for a search)


# ---------------------------------------------------------------------------- requests


class Workload:
    """The request stream: distinct 3 KB documents, near-duplicates, searches."""

    def __init__(self, corpus: Corpus, arguments: argparse.Namespace, preloaded: int) -> None:
        self.corpus = corpus
        self.chars = arguments.doc_chars
        self.search_chars = arguments.search_chars
        self.dup_fraction = arguments.dup_fraction
        self.search_dup_fraction = arguments.search_dup_fraction
        self.preloaded = preloaded
        self.rng = Random(arguments.seed)
        self.run = secrets.token_hex(3)
        self.sent = 0

    def text(self, dup_fraction: float, chars: int) -> str:
        if self.preloaded and self.rng.random() < dup_fraction:
            source = self.corpus.document(self.rng.randrange(self.preloaded), self.chars)
            return self.corpus.near_duplicate(source, self.rng)
        return self.corpus.document(NEW_KEYS + self.rng.getrandbits(61), chars)

    def document(self) -> dict[str, str]:
        self.sent += 1
        return {"id": f"{self.run}-{self.sent}", "text": self.text(self.dup_fraction, self.chars)}

    def insert(self) -> Request:
        return f"{COLLECTION}/documents", orjson.dumps(self.document()), 1

    def batch(self, size: int) -> Callable[[], Request]:
        if size == 1:
            return self.insert

        def make() -> Request:
            body = orjson.dumps({"documents": [self.document() for _ in range(size)]})
            return f"{COLLECTION}/documents/batch", body, size

        return make

    def search(self) -> Request:
        text = self.text(self.search_dup_fraction, self.search_chars)
        return f"{COLLECTION}/search", orjson.dumps({"text": text, "limit": 10}), 1


# ---------------------------------------------------------------------------- load


@dataclass(slots=True)
class Phase:
    name: str
    clients: int
    requests: int = 0
    errors: int = 0
    units: int = 0  # documents inserted, or searches answered
    seconds: float = 0.0
    client_cpu: float = 0.0  # fraction of one core
    server_cpu: float = 0.0
    documents_after: int = 0
    first_error: str = ""
    latencies: list[float] = field(default_factory=list, repr=False)

    @property
    def rate(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    def latency_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000 if self.latencies else float("nan")

    def summary(self) -> dict[str, object]:
        record = asdict(self)
        del record["latencies"]
        record.update(rate=self.rate, p50_ms=self.latency_ms(50), p99_ms=self.latency_ms(99))
        return record


async def closed_loop(
    client: httpx.AsyncClient, make: Callable[[], Request], clients: int, seconds: float
) -> Phase:
    """``clients`` loops of request-answer until the deadline, then the stragglers."""
    phase = Phase("", clients)
    start = time.perf_counter()
    deadline = start + seconds
    last = start

    async def loop() -> None:
        nonlocal last
        while time.perf_counter() < deadline:
            path, body, units = make()
            sent = time.perf_counter()
            try:
                response = await client.post(path, content=body, headers=JSON_HEADERS)
                ok = response.status_code in (200, 201)
                if not ok and not phase.first_error:
                    phase.first_error = f"HTTP {response.status_code}: {response.text[:300]}"
            except httpx.HTTPError as error:
                ok = False
                phase.first_error = phase.first_error or repr(error)
            last = time.perf_counter()
            phase.latencies.append(last - sent)
            phase.requests += 1
            if ok:
                phase.units += units
            else:
                phase.errors += 1

    await asyncio.gather(*(loop() for _ in range(clients)))
    phase.seconds = last - start
    return phase


async def measure(
    server: Running,
    name: str,
    make: Callable[[], Request],
    clients: int,
    seconds: float,
    warmup: float,
    profile: Path | None = None,
) -> Phase:
    """One phase: warm-up, then the timed closed loop (under py-spy if ``profile``)."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=server.url, timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False
    ) as client:
        if warmup > 0:
            await closed_loop(client, make, clients, warmup)
        spy = py_spy(server.pid, seconds, profile) if profile else None
        client_before, server_before = time.process_time(), cpu_seconds(server.pid)
        began = time.perf_counter()
        phase = await closed_loop(client, make, clients, seconds)
        wall = time.perf_counter() - began
        if spy is not None:
            await asyncio.to_thread(spy.wait, seconds + 60)
        phase.client_cpu = (time.process_time() - client_before) / wall
        phase.server_cpu = (cpu_seconds(server.pid) - server_before) / wall
        phase.documents_after = await documents(client)
    phase.name = name
    log(
        f"  {server.name} {name}: {phase.rate:,.0f}/s, p50 {phase.latency_ms(50):.1f} ms, "
        f"p99 {phase.latency_ms(99):.1f} ms, {phase.errors} errors, server CPU "
        f"{phase.server_cpu:.0%}, client CPU {phase.client_cpu:.0%}"
    )
    return phase


async def warm_up(server: Running, make: Callable[[], Request], requests: int = 20) -> None:
    """A few requests, so that code loaded on first use is not charged to the preload."""
    async with httpx.AsyncClient(
        base_url=server.url, timeout=REQUEST_TIMEOUT, trust_env=False
    ) as client:
        for _ in range(requests):
            path, body, _ = make()
            (await client.post(path, content=body, headers=JSON_HEADERS)).raise_for_status()


async def documents(client: httpx.AsyncClient) -> int:
    response = await client.get(COLLECTION)
    count: int = response.json()["stats"]["documents"]
    return count


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- one server


@dataclass(slots=True)
class ServerResult:
    name: str
    preloaded: int = 0
    preload_seconds: float = 0.0
    rss_empty: int = 0
    rss_loaded: int = 0
    phases: dict[str, Phase] = field(default_factory=dict)
    size_points: list[tuple[int, Phase]] = field(default_factory=list)  # search by index size
    batch_points: list[tuple[int, Phase]] = field(default_factory=list)  # insert by batch size

    @property
    def preload_rate(self) -> float:
        return self.preloaded / self.preload_seconds if self.preload_seconds else 0.0

    def rss_per_document(self) -> float:
        return self.rss_loaded / self.preloaded if self.preloaded else float("nan")

    def rss_growth_per_document(self) -> float:
        growth = self.rss_loaded - self.rss_empty
        return growth / self.preloaded if self.preloaded else float("nan")


async def bench_server(
    server: Running, count: int, corpus: Corpus, arguments: argparse.Namespace
) -> ServerResult:
    result = ServerResult(server.name)
    if arguments.pin:
        pin_process(server.pid, {SERVER_CPU})
    await warm_up(server, Workload(corpus, arguments, 0).search)
    result.rss_empty = rss_bytes(server.pid)
    duration, warmup = arguments.duration, arguments.warmup
    sizes = sorted({s for s in arguments.plot_sizes if 0 < s < count}) if arguments.plots else []
    for size in [*sizes, count]:
        began = time.perf_counter()
        await preload_async(
            server.url,
            size - result.preloaded,
            start=result.preloaded,
            concurrency=2,
            chars=arguments.doc_chars,
            corpus=corpus,
            description=f"{server.name} preload",
        )
        result.preload_seconds += time.perf_counter() - began
        result.preloaded = size
        if size < count:  # a point of the latency-against-size plot
            workload = Workload(corpus, arguments, size)
            phase = await measure(
                server,
                f"search at {size:,}",
                workload.search,
                arguments.clients,
                arguments.plot_duration,
                warmup,
            )
            result.size_points.append((size, phase))
    log(f"  {server.name} preload: {count:,} documents, {result.preload_rate:,.0f} docs/s")
    await asyncio.sleep(SETTLE_SECONDS)
    result.rss_loaded = rss_bytes(server.pid)

    workload = Workload(corpus, arguments, count)

    def profile(phase: str) -> Path | None:
        if not arguments.py_spy:
            return None
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        return RESULTS_DIR / f"py-spy-{server.name}-{phase}.svg"

    result.phases["search"] = await measure(
        server, "search", workload.search, arguments.clients, duration, warmup, profile("search")
    )
    result.size_points.append((count, result.phases["search"]))
    result.phases["single"] = await measure(
        server,
        "single insert",
        workload.insert,
        arguments.clients,
        duration,
        warmup,
        profile("single"),
    )
    result.phases["batch"] = await measure(
        server,
        "batch insert",
        workload.batch(256),
        arguments.batch_clients,
        duration,
        warmup,
        profile("batch"),
    )
    if arguments.plots:
        for size in PLOT_BATCH_SIZES:
            phase = await measure(
                server,
                f"insert x{size}",
                workload.batch(size),
                arguments.plot_clients,
                arguments.plot_duration,
                warmup,
            )
            result.batch_points.append((size, phase))
    return result


def run_server(
    which: str, count: int, corpus: Corpus, arguments: argparse.Namespace
) -> ServerResult:
    with (
        neardup(
            data_dir=arguments.data_dir,
            synchronous=arguments.synchronous,
            log_level=arguments.log_level,
        )
        if which == "neardup"
        else peer(peer_hash=arguments.peer_hash, log_level=arguments.log_level)
    ) as server:
        check_loopback(server.url)
        log(f"{which}: {server.url} (pid {server.pid}), {count:,} documents")
        result = run_async(bench_server(server, count, corpus, arguments))
        code = server.stop()
        log(f"{which}: stopped, exit code {code}")
    return result


# ---------------------------------------------------------------------------- report


def verdict(met: bool, documents: int, at_scale: bool = True) -> str:
    word = "met" if met else "MISSED"
    if at_scale and documents < MILLION:
        return f"{word} at {documents:,} (target at 1M)"
    return word


def figure(value: float, digits: int = 0) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.{digits}f}"


def report(
    results: dict[str, ServerResult], arguments: argparse.Namespace, corpus: Corpus, took: float
) -> str:
    ours, theirs = results.get("neardup"), results.get("peer")

    def ratio(get: Callable[[ServerResult], float]) -> tuple[str, float]:
        if ours is None or theirs is None or not get(theirs):
            return "-", float("nan")
        value = get(ours) / get(theirs)
        return format_ratio(value), value

    def cell(result: ServerResult | None, get: Callable[[ServerResult], float], d: int) -> str:
        return figure(get(result), d) if result is not None else "-"

    rows: list[list[str]] = []

    def add(
        label: str,
        get: Callable[[ServerResult], float],
        digits: int = 0,
        target: Callable[[float, float], str] = lambda value, r: "",
    ) -> None:
        shown, value = ratio(get)
        own = get(ours) if ours is not None else float("nan")
        rows.append(
            [label, cell(ours, get, digits), cell(theirs, get, digits), shown, target(own, value)]
        )

    def phase(key: str) -> Callable[[ServerResult], Phase]:
        return lambda r: r.phases[key]

    n = ours.preloaded if ours else 0
    search, single, batch = phase("search"), phase("single"), phase("batch")

    def beats(r: float, wanted: float) -> str:
        return f"peer x{wanted:.0f}: {'met' if r >= wanted else 'MISSED'}" if r == r else ""

    def joined(*parts: str) -> str:
        return "; ".join(part for part in parts if part)

    add(
        "batch insert during preload 0 → N, docs/s (256/batch, 2 clients)",
        lambda r: r.preload_rate,
        target=lambda own, r: joined(
            f">= {TARGET_BATCH_DOCS:,} sustained to 1M: " + verdict(own >= TARGET_BATCH_DOCS, n),
            beats(r, TARGET_INSERT_RATIO),
        ),
    )
    add(
        f"batch insert at N, docs/s (256/batch, {arguments.batch_clients} clients)",
        lambda r: batch(r).rate,
        target=lambda own, r: joined(
            f">= {TARGET_BATCH_DOCS:,}: " + verdict(own >= TARGET_BATCH_DOCS, n),
            beats(r, TARGET_INSERT_RATIO),
        ),
    )
    add("batch insert p99, ms", lambda r: batch(r).latency_ms(99), 1)
    add(
        f"single insert, docs/s ({arguments.clients} clients)",
        lambda r: single(r).rate,
        target=lambda own, r: beats(r, TARGET_INSERT_RATIO),
    )
    add("single insert p50, ms", lambda r: single(r).latency_ms(50), 1)
    add("single insert p99, ms", lambda r: single(r).latency_ms(99), 1)
    add(
        f"search, req/s ({arguments.clients} clients, {arguments.search_chars} chars)",
        lambda r: search(r).rate,
        target=lambda own, r: joined(
            f">= {TARGET_SEARCH_RPS:,}: " + verdict(own >= TARGET_SEARCH_RPS, n),
            beats(r, TARGET_SEARCH_RATIO),
        ),
    )
    add("search p50, ms", lambda r: search(r).latency_ms(50), 1)
    add(
        "search p99, ms",
        lambda r: search(r).latency_ms(99),
        1,
        target=lambda own, r: (
            f"<= {TARGET_SEARCH_P99_MS:.0f}: " + verdict(own <= TARGET_SEARCH_P99_MS, n)
        ),
    )
    add("documents indexed during search", lambda r: r.phases["search"].documents_after)
    add("RSS empty, MiB", lambda r: r.rss_empty / 2**20, 1)
    add("RSS after preload, MiB", lambda r: r.rss_loaded / 2**20, 1)
    add(
        "RSS / documents, bytes",
        lambda r: r.rss_per_document(),
        target=lambda own, r: (
            f"<= {TARGET_RSS_PER_DOC:,} at 1M: " + verdict(own <= TARGET_RSS_PER_DOC, n)
        ),
    )
    add("RSS growth / documents, bytes", lambda r: r.rss_growth_per_document())

    lines = [
        "# neardup against the peer, end to end over HTTP",
        "",
        f"- {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {cpu_model()}; Python "
        f"{platform.python_version()}; took {took / 60:.1f} min",
        f"- documents: {corpus.source}, {arguments.doc_chars or 'natural-length'} characters "
        f"each (devkit/documents.py); preloaded: neardup {figure(ours.preloaded) if ours else '-'}"
        f", peer {figure(theirs.preloaded) if theirs else '-'}; searches "
        f"{arguments.search_chars} characters; near-duplicates: {arguments.dup_fraction:.0%} "
        f"of inserts, {arguments.search_dup_fraction:.0%} of searches",
        f"- phases: {arguments.duration} s each after a {arguments.warmup} s warm-up; "
        f"closed loop, httpx.AsyncClient on uvloop, {arguments.clients} clients "
        f"(batch inserts {arguments.batch_clients}); "
        + ("server on CPU 0, load generator on CPU 1" if arguments.pin else "no CPU pinning"),
        f"- neardup: `neardup serve`, NEARDUP_SYNCHRONOUS={arguments.synchronous} (every "
        f"acknowledged write on disk), log level {arguments.log_level}",
        "- peer: bench/peer_app.py, FastAPI + uvicorn (1 worker), datasketch "
        f"{version('datasketch')} MinHashLSH(threshold=0.8, num_perm=128) + simhash "
        f"{version('simhash')} SimhashIndex(k=3), in memory only, "
        + (
            "xxHash instead of the libraries' default hashes"
            if arguments.peer_hash == "xxhash"
            else "the libraries' default hashes (SHA-1 per shingle, MD5 per feature)"
        ),
        "",
        "neardup/peer: higher is better for rates, lower for latencies and memory. Targets "
        "are the issue's, stated for 1M documents and 16 clients.",
        "",
        markdown_table(
            ["figure", "neardup", "peer", "neardup/peer", "target"],
            rows,
            ["left", "right", "right", "right", "left"],
        ),
        "",
        "## Phases",
        "",
        "CPU is the share of one core used over the phase (the server's across its threads). "
        "Rates are completed documents (inserts) or answers (searches) per second of the "
        "phase, counted until the last answer.",
        "",
    ]
    detail = []
    for result in results.values():
        points = [p for _, p in result.size_points if p is not result.phases["search"]]
        points += [*result.phases.values(), *(p for _, p in result.batch_points)]
        for p in points:
            detail.append(
                [
                    result.name,
                    p.name,
                    str(p.clients),
                    f"{p.requests:,}",
                    f"{p.errors:,}",
                    f"{p.seconds:.1f}",
                    figure(p.rate),
                    figure(p.latency_ms(50), 1),
                    figure(p.latency_ms(99), 1),
                    f"{p.server_cpu:.0%}",
                    f"{p.client_cpu:.0%}",
                    f"{p.documents_after:,}",
                ]
            )
    lines.append(
        markdown_table(
            PHASE_HEADERS,
            detail,
            ["left", "left", *([RIGHT] * 10)],
        )
    )
    errors = [
        f"- {r.name} {p.name}: {p.errors} errors, first: {p.first_error}"
        for r in results.values()
        for p in r.phases.values()
        if p.errors
    ]
    if errors:
        lines += ["", "## Errors", "", *errors]
    if arguments.plots:
        lines += [
            "",
            "Plots: docs/service-search-latency.png, docs/service-insert-batch.png "
            f"({arguments.plot_duration} s per point, insert by batch size with "
            f"{arguments.plot_clients} clients).",
        ]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, ServerResult], arguments: argparse.Namespace) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    DOCS_DIR.mkdir(exist_ok=True)
    paths = []
    figure_, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for result in results.values():
        sizes = [size for size, _ in result.size_points]
        for axis, q in zip(axes, (50, 99), strict=True):
            values = [p.latency_ms(q) for _, p in result.size_points]
            axis.plot(sizes, values, marker="o", label=result.name)
    for axis, q in zip(axes, (50, 99), strict=True):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("documents indexed")
        axis.set_ylabel(f"search p{q}, ms")
        axis.grid(True, which="both", alpha=0.3)
    axes[1].axhline(
        TARGET_SEARCH_P99_MS, color="grey", linestyle="--", linewidth=1, label="target at 1M"
    )
    for axis in axes:
        axis.legend()
    figure_.suptitle(
        f"Search by a {arguments.search_chars}-character text, {arguments.clients} clients"
    )
    figure_.tight_layout()
    paths.append(DOCS_DIR / "service-search-latency.png")
    figure_.savefig(paths[-1], dpi=110)
    plt.close(figure_)

    figure_, axis = plt.subplots(figsize=(6.5, 4.2))
    for result in results.values():
        sizes = [size for size, _ in result.batch_points]
        axis.plot(sizes, [p.rate for _, p in result.batch_points], marker="o", label=result.name)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(PLOT_BATCH_SIZES, [str(s) for s in PLOT_BATCH_SIZES])
    axis.set_xlabel("documents per request")
    axis.set_ylabel("documents inserted per second")
    axis.axhline(TARGET_BATCH_DOCS, color="grey", linestyle="--", linewidth=1, label="batch target")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    axis.set_title(f"Insert throughput by batch size, {arguments.plot_clients} clients")
    figure_.tight_layout()
    paths.append(DOCS_DIR / "service-insert-batch.png")
    figure_.savefig(paths[-1], dpi=110)
    plt.close(figure_)
    return paths


def sizes(value: str) -> list[int]:
    return [int(float(part)) for part in value.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="documents preloaded")
    parser.add_argument("--peer-count", type=int, help="documents preloaded into the peer")
    parser.add_argument("--servers", choices=["both", "neardup", "peer"], default="both")
    parser.add_argument("--clients", type=int, default=16, help="search and single inserts")
    parser.add_argument("--batch-clients", type=int, default=2, help="batch inserts")
    parser.add_argument("--duration", type=float, default=20, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=2, help="seconds before each phase")
    parser.add_argument("--doc-chars", type=int, default=DEFAULT_CHARS)
    parser.add_argument("--search-chars", type=int, default=DEFAULT_CHARS)
    parser.add_argument("--dup-fraction", type=float, default=0.2)
    parser.add_argument("--search-dup-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--log-level", default="warning", help="both servers' log level")
    parser.add_argument(
        "--peer-hash",
        choices=["default", "xxhash"],
        default="default",
        help="the peer's hash functions (default: the libraries' own)",
    )
    parser.add_argument("--pin", action="store_true", help="server on CPU 0, load on CPU 1")
    parser.add_argument("--data-dir", help="where neardup's temporary data directory goes")
    parser.add_argument(
        "--py-spy",
        action="store_true",
        help="profile each server during search, single and batch insert (py-spy --gil): "
        "bench/results/py-spy-<server>-<phase>.svg",
    )
    parser.add_argument("--plots", action="store_true", help="draw the PNGs into docs/")
    parser.add_argument(
        "--plot-sizes",
        type=sizes,
        help="index sizes for the latency plot (default: N/8, N/4, N/2 and N)",
    )
    parser.add_argument("--plot-duration", type=float, default=10)
    parser.add_argument("--plot-clients", type=int, default=4)
    arguments = parser.parse_args()
    if arguments.plot_sizes is None:
        arguments.plot_sizes = [arguments.count // d for d in (8, 4, 2)]
    if arguments.pin:
        os.sched_setaffinity(0, {CLIENT_CPU})

    began = time.perf_counter()
    corpus = load_corpus(arguments.seed)
    counts = {"neardup": arguments.count, "peer": arguments.peer_count or arguments.count}
    chosen = ["neardup", "peer"] if arguments.servers == "both" else [arguments.servers]
    results = {name: run_server(name, counts[name], corpus, arguments) for name in chosen}
    text = report(results, arguments, corpus, time.perf_counter() - began)
    if arguments.plots:
        for path in plot(results, arguments):
            log(f"plot: {path}")
    print(text)
    log(f"written to {write_result('service.md', text)}")
    record = {
        name: {
            "preloaded": r.preloaded,
            "preload_rate": r.preload_rate,
            "rss_empty": r.rss_empty,
            "rss_loaded": r.rss_loaded,
            "phases": {key: p.summary() for key, p in r.phases.items()},
            "size_points": [(s, p.summary()) for s, p in r.size_points],
            "batch_points": [(s, p.summary()) for s, p in r.batch_points],
        }
        for name, r in results.items()
    }
    write_result("service.json", json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
