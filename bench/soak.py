"""Soak: a stream of ~1 KB documents with advancing timestamps into a collection with a
retention, against the same stream at a constant size without eviction.

Run ``.venv/bin/python -m bench.soak [--documents 3000000 --keep 500000]``. Against the
real ``neardup serve`` (one process, SQLite synchronous FULL, logs at warning):

- **soak**: a collection with ``retention: {"max_documents": keep}`` receives
  ``documents`` documents in batches of 256, one second apart in timestamp each, from one
  writer, while a searcher POSTs /search at a fixed rate (a new text or a near-duplicate
  of a recent one). Every ``interval`` documents: the server's resident memory, the SQLite
  file size (database and WAL), insert throughput, search p50 / p99, the server's CPU time
  and the eviction's (memory and store, from /metrics).
- **baseline**: a collection without retention filled with ``keep`` documents of the same
  stream, then ``keep / 10`` more measured with the same searcher: throughput and search
  latency at a constant size (within 10 %) without eviction.

About 5 % of the documents re-issue a recent one with two words changed (a near-duplicate
that joins its cluster), the rest are new: 160 words from a 30,000-word vocabulary.
Writes bench/results/soak.json, docs/soak.png, and prints a markdown section for
docs/benchmarks.md. The figures depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

import devkit.server
from devkit.harness import (
    REPO_ROOT,
    busy_cpu_seconds,
    cpu_model_name,
    cpu_seconds,
    markdown_table,
    priority,
    rss_bytes,
    write_result,
)
from devkit.server import Server

# A start compiles the numba kernels when their cache is stale: on a busy machine that
# takes longer than the tests allow.
devkit.server.STARTUP_SECONDS = 900

DOCS_DIR = REPO_ROOT / "docs"
COLLECTION = "soak"
# An interval counts as quiet when the rest of the machine took less than this many CPUs.
QUIET_OTHER_CPUS = 0.1
WORDS_PER_DOCUMENT = 160
VOCABULARY = 30_000
REISSUE_SHARE = 0.05
START_TIMESTAMP = 1_700_000_000  # Unix seconds of the first document
FLAT_TOLERANCE = 0.10


class Stream:
    """Documents of the soak: 160 words each, timestamps one second apart."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        lengths = self.rng.integers(3, 10, VOCABULARY)
        self.words = np.array(
            ["".join(self.rng.choice(letters, n)) for n in lengths.tolist()], dtype=object
        )
        self.recent = np.zeros((4096, WORDS_PER_DOCUMENT), dtype=np.int64)
        self.count = 0

    def texts(self, size: int) -> list[str]:
        picks = self.rng.integers(0, VOCABULARY, (size, WORDS_PER_DOCUMENT))
        if self.count:
            again = np.flatnonzero(self.rng.random(size) < REISSUE_SHARE)
            filled = min(self.count, len(self.recent))
            sources = self.rng.integers(0, filled, len(again))
            picks[again] = self.recent[sources]
            for position in (17, 101):  # two words changed
                picks[again, position] = self.rng.integers(0, VOCABULARY, len(again))
        slots = (self.count + np.arange(size)) % len(self.recent)
        self.recent[slots] = picks
        self.count += size
        return [" ".join(self.words[row].tolist()) for row in picks]

    def batch(self, first: int, size: int) -> bytes:
        documents = [
            {"id": f"s{first + i}", "text": text, "timestamp": START_TIMESTAMP + first + i}
            for i, text in enumerate(self.texts(size))
        ]
        return orjson.dumps({"documents": documents})


class Searcher:
    """POST /search at a fixed rate from its own thread; latencies by time."""

    def __init__(self, url: str, rate: float, stream: Stream) -> None:
        self.url, self.rate = url, rate
        self.queries = stream.texts(2048)  # near-duplicates of recent ones among them
        self.latencies: list[tuple[float, float]] = []  # (when, seconds)
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="searcher")

    def run(self) -> None:
        period = 1.0 / self.rate
        number = 0
        with httpx.Client(base_url=self.url, timeout=60) as client:
            next_at = time.perf_counter()
            while not self.stop.is_set():
                body = {"text": self.queries[number % len(self.queries)], "limit": 10}
                started = time.perf_counter()
                response = client.post(f"/v1/collections/{COLLECTION}/search", json=body)
                ended = time.perf_counter()
                if response.status_code != 200:
                    self.errors += 1
                self.latencies.append((ended, ended - started))
                number += 1
                next_at = max(next_at + period, ended)
                self.stop.wait(max(0.0, next_at - ended))

    def between(self, start: float, end: float) -> list[float]:
        return [seconds for when, seconds in self.latencies if start <= when < end]


@dataclass(slots=True)
class Sample:
    documents: int  # sent so far
    held: int  # the collection's documents
    rss_mib: float
    sqlite_mib: float
    docs_per_second: float  # over the interval
    search_p50_ms: float
    search_p99_ms: float
    searches: int
    cpu_seconds: float  # of the server, over the interval
    eviction_cpu_seconds: float  # of the evictions (memory + store), over the interval
    evicted: int
    latencies_ms: list[float] = field(default_factory=list)  # every search of the interval
    seconds: float = 0.0  # wall time of the interval
    # CPU time over the interval of the whole machine (all CPUs busy) and of this client:
    # what neither it nor the server used is other work sharing the machine.
    machine_cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0


@dataclass(slots=True)
class Run:
    name: str
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0
    first: int = 0  # documents sent before the run's first interval began


def metric(text: str, name: str) -> float:
    """Sum of a metric's samples in Prometheus text (0 when absent)."""
    total = 0.0
    for match in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE):
        total += float(match.group(1))
    return total


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def sqlite_bytes(data: Path) -> int:
    return sum(path.stat().st_size for path in data.glob("neardup.db*") if path.is_file())


@dataclass(slots=True)
class Measured:
    """Counters read at the start of an interval."""

    when: float
    cpu: float
    eviction: float
    machine: float
    client: float


def stream_into(
    server: Server,
    client: httpx.Client,
    stream: Stream,
    run: Run,
    first: int,
    count: int,
    batch: int,
    interval: int,
    searcher: Searcher | None,
    data: Path,
) -> None:
    """Send documents [first, first + count), sampling every ``interval`` documents."""
    assert server.process is not None
    pid = server.process.pid
    url = f"/v1/collections/{COLLECTION}/documents/batch"
    headers = {"content-type": "application/json"}

    def measured() -> Measured:
        text = client.get("/metrics").text
        eviction = metric(text, "neardup_eviction_cpu_seconds_total") + metric(
            text, "neardup_eviction_store_cpu_seconds_total"
        )
        return Measured(
            time.perf_counter(), cpu_seconds(pid), eviction, busy_cpu_seconds(), time.process_time()
        )

    began = time.perf_counter()
    mark = measured()
    sent_in_interval = 0
    next_body = stream.batch(first, min(batch, count))
    position = first
    while position < first + count:
        size = min(batch, first + count - position)
        body = next_body
        response = client.post(url, content=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"batch at {position}: {response.status_code} {response.text}")
        position += size
        sent_in_interval += size
        if position < first + count:
            next_body = stream.batch(position, min(batch, first + count - position))
        if sent_in_interval >= interval or position >= first + count:
            now = measured()
            stats = client.get(f"/v1/collections/{COLLECTION}").json()["stats"]
            latencies = searcher.between(mark.when, now.when) if searcher else []
            run.samples.append(
                Sample(
                    documents=position,
                    held=stats["documents"],
                    rss_mib=rss_bytes(pid) / 2**20,
                    sqlite_mib=sqlite_bytes(data) / 2**20,
                    docs_per_second=sent_in_interval / (now.when - mark.when),
                    search_p50_ms=percentile(latencies, 50),
                    search_p99_ms=percentile(latencies, 99),
                    searches=len(latencies),
                    cpu_seconds=now.cpu - mark.cpu,
                    eviction_cpu_seconds=now.eviction - mark.eviction,
                    evicted=stats.get("evicted", 0),
                    latencies_ms=[round(seconds * 1000, 3) for seconds in latencies],
                    seconds=now.when - mark.when,
                    machine_cpu_seconds=now.machine - mark.machine,
                    client_cpu_seconds=now.client - mark.client,
                )
            )
            last = run.samples[-1]
            print(
                f"{run.name}: {position:,} sent, {last.held:,} held, RSS {last.rss_mib:,.0f} MiB,"
                f" SQLite {last.sqlite_mib:,.0f} MiB, {last.docs_per_second:,.0f} docs/s,"
                f" search p99 {last.search_p99_ms:.1f} ms, eviction"
                f" {last.eviction_cpu_seconds / max(last.cpu_seconds, 1e-9):.1%} of CPU",
                file=sys.stderr,
                flush=True,
            )
            mark = now
            sent_in_interval = 0
    run.seconds += time.perf_counter() - began


@contextmanager
def serve(root: Path) -> Iterator[tuple[Server, httpx.Client, Path]]:
    data = root / "data"
    root.mkdir(parents=True, exist_ok=True)
    server = Server(data, NEARDUP_LOG_LEVEL="warning")
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=300) as client:
            yield server, client, data
        if server.stop(120) != 0:
            raise RuntimeError(f"server did not exit cleanly: {server.output()}")
    finally:
        server.kill()


def soak(arguments: argparse.Namespace, root: Path) -> Run:
    run = Run("soak")
    with serve(root) as (server, client, data):
        settings = {"retention": {"max_documents": arguments.keep}}
        client.put(f"/v1/collections/{COLLECTION}", json=settings).raise_for_status()
        stream = Stream(1)
        searcher = Searcher(server.url, arguments.search_rate, Stream(2))
        searcher.thread.start()
        try:
            stream_into(
                server,
                client,
                stream,
                run,
                0,
                arguments.documents,
                arguments.batch,
                arguments.interval,
                searcher,
                data,
            )
        finally:
            searcher.stop.set()
            searcher.thread.join()
    return run


def baseline(arguments: argparse.Namespace, root: Path) -> Run:
    """The stream without retention, measured over ``baseline_span`` documents centred on
    ``keep`` (two merge cycles by default: merges are part of an insert's cost)."""
    start = arguments.keep - arguments.baseline_span // 2
    run = Run("baseline", first=start)
    with serve(root) as (server, client, data):
        client.put(f"/v1/collections/{COLLECTION}").raise_for_status()
        stream = Stream(1)
        fill = Run("fill")
        stream_into(
            server, client, stream, fill, 0, start, arguments.batch, start, None, data
        )  # fmt: skip
        searcher = Searcher(server.url, arguments.search_rate, Stream(2))
        searcher.thread.start()
        try:
            stream_into(
                server,
                client,
                stream,
                run,
                start,
                arguments.baseline_span,
                arguments.batch,
                arguments.baseline_interval,
                searcher,
                data,
            )
        finally:
            searcher.stop.set()
            searcher.thread.join()
    return run


def steady(run: Run, keep: int) -> list[Sample]:
    """Samples after the first window (and one interval more, for the merges to settle)."""
    return [s for s in run.samples if s.documents >= keep * 1.2]


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values) if values else float("nan")


def summary(soaked: Run, bases: list[Run], keep: int) -> dict[str, float]:
    """The steady state of the soak against the baseline runs (pooled)."""
    after = steady(soaked, keep)
    base_samples = [sample for base in bases for sample in base.samples]

    def rate(samples: list[Sample]) -> float:
        """Documents over seconds, the intervals being of (nearly) equal documents."""
        seconds = sum(1 / s.docs_per_second for s in samples)
        return len(samples) / seconds if seconds else float("nan")

    def median(samples: list[Sample], key: str) -> float:
        values = [getattr(s, key) for s in samples]
        return float(np.median(values)) if values else float("nan")

    def pooled(samples: list[Sample], q: float) -> float:
        """A percentile of every search of these intervals together."""
        values = [latency for s in samples for latency in s.latencies_ms]
        return float(np.percentile(values, q)) if values else float("nan")

    def cpu_per_document(runs: list[tuple[Run, list[Sample]]]) -> float:
        """Server CPU microseconds per document inserted (searches included): less
        sensitive than throughput to what else the machine runs."""
        documents, seconds = 0, 0.0
        for run, samples in runs:
            for sample in samples:
                before = [s.documents for s in run.samples if s.documents < sample.documents]
                documents += sample.documents - (max(before) if before else run.first)
                seconds += sample.cpu_seconds
        return seconds / documents * 1e6 if documents else float("nan")

    def others(samples: list[Sample]) -> float:
        """CPUs busy with other work than this benchmark (median of the intervals)."""
        values = [
            (s.machine_cpu_seconds - s.cpu_seconds - s.client_cpu_seconds) / s.seconds
            for s in samples
            if s.seconds
        ]
        return max(0.0, float(np.median(values))) if values else float("nan")

    def quiet(samples: list[Sample]) -> list[Sample]:
        """The intervals during which other work took under QUIET_OTHER_CPUS: on a shared
        machine, the soak and the baselines are then compared at the same load."""
        return [
            s
            for s in samples
            if s.seconds
            and (s.machine_cpu_seconds - s.cpu_seconds - s.client_cpu_seconds) / s.seconds
            < QUIET_OTHER_CPUS
        ]

    quiet_after = quiet(after)
    quiet_bases = [(b, quiet(b.samples)) for b in bases]
    quiet_base_samples = [sample for _, samples in quiet_bases for sample in samples]
    cpu = sum(s.cpu_seconds for s in after)
    rss = np.array([s.rss_mib for s in after])
    sent = np.array([s.documents for s in after]) / 1e6
    return {
        "soak_cpu_us_per_document": cpu_per_document([(soaked, after)]),
        "baseline_cpu_us_per_document": cpu_per_document([(b, b.samples) for b in bases]),
        "rss_spread": spread(rss.tolist()),
        "rss_min_mib": float(rss.min()),
        "rss_max_mib": float(rss.max()),
        "rss_mean_mib": float(rss.mean()),
        "rss_p5_mib": float(np.percentile(rss, 5)),
        "rss_p95_mib": float(np.percentile(rss, 95)),
        "rss_slope_mib_per_million": float(np.polyfit(sent, rss, 1)[0]),
        "sqlite_spread": spread([s.sqlite_mib for s in after]),
        "sqlite_min_mib": min(s.sqlite_mib for s in after),
        "sqlite_max_mib": max(s.sqlite_mib for s in after),
        "soak_docs_per_second": rate(after),
        "baseline_docs_per_second": rate(base_samples),
        "soak_search_p99_ms": pooled(after, 99),
        "baseline_search_p99_ms": pooled(base_samples, 99),
        "soak_search_p50_ms": pooled(after, 50),
        "baseline_search_p50_ms": pooled(base_samples, 50),
        "soak_searches": sum(len(s.latencies_ms) for s in after),
        "baseline_searches": sum(len(s.latencies_ms) for s in base_samples),
        "eviction_cpu_share": sum(s.eviction_cpu_seconds for s in after) / cpu if cpu else 0.0,
        "soak_other_cpus": others(after),
        "baseline_other_cpus": others(base_samples),
        "soak_server_cpus": cpu / sum(s.seconds for s in after) if after else float("nan"),
        "quiet_soak_intervals": len(quiet_after),
        "quiet_baseline_intervals": len(quiet_base_samples),
        "quiet_soak_docs_per_second": rate(quiet_after),
        "quiet_baseline_docs_per_second": rate(quiet_base_samples),
        "quiet_soak_cpu_us_per_document": cpu_per_document([(soaked, quiet_after)]),
        "quiet_baseline_cpu_us_per_document": cpu_per_document(quiet_bases),
        "quiet_soak_search_p99_ms": pooled(quiet_after, 99),
        "quiet_baseline_search_p99_ms": pooled(quiet_base_samples, 99),
        "baseline_rss_mib": median(base_samples, "rss_mib"),
        "baseline_sqlite_mib": median(base_samples, "sqlite_mib"),
    }


def per_document_cpu(run: Run) -> list[float]:
    """Server CPU microseconds per document of each interval."""
    previous, values = run.first, []
    for sample in run.samples:
        values.append(sample.cpu_seconds / max(1, sample.documents - previous) * 1e6)
        previous = sample.documents
    return values


def plot(soaked: Run, bases: list[Run], keep: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 2, figsize=(11, 10), sharex=True)
    x = [s.documents / 1e6 for s in soaked.samples]
    pooled = [sample for base in bases for sample in base.samples]
    base_cpu = [value for base in bases for value in per_document_cpu(base)]
    panels: list[tuple[Any, str, list[float], list[float]]] = [
        (
            axes[0][0],
            "resident memory, MiB",
            [s.rss_mib for s in soaked.samples],
            [s.rss_mib for s in pooled],
        ),
        (
            axes[0][1],
            "SQLite file + WAL, MiB",
            [s.sqlite_mib for s in soaked.samples],
            [s.sqlite_mib for s in pooled],
        ),
        (
            axes[1][0],
            "documents inserted per second",
            [s.docs_per_second for s in soaked.samples],
            [s.docs_per_second for s in pooled],
        ),
        (
            axes[1][1],
            "server CPU per document, us",
            per_document_cpu(soaked),
            base_cpu,
        ),
        (
            axes[2][0],
            "search p99, ms",
            [s.search_p99_ms for s in soaked.samples],
            [s.search_p99_ms for s in pooled],
        ),
        (
            axes[2][1],
            "eviction's share of server CPU, %",
            [100 * s.eviction_cpu_seconds / max(s.cpu_seconds, 1e-9) for s in soaked.samples],
            [],
        ),
    ]
    for axis, label, values, reference in panels:
        axis.plot(x, values, marker=".", label=f"retention {keep:,}")
        if reference:
            axis.axhline(
                float(np.median(reference)), color="grey", linestyle="--", linewidth=1,
                label=f"around {keep:,} documents, no eviction (median)",
            )  # fmt: skip
        axis.axvline(keep / 1e6, color="black", linewidth=0.6, alpha=0.5)
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        axis.set_ylim(bottom=0)
    for axis in axes[2]:
        axis.set_xlabel("documents sent, millions")
    axes[0][0].legend(loc="lower right", fontsize=8)
    figure.suptitle(
        f"Soak: {soaked.samples[-1].documents:,} documents of ~1 KB, batches of 256, "
        f"retention of {keep:,} (a shared 2-CPU machine: throughput and latency vary with "
        "its load)",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def render(soaked: Run, figures: dict[str, float], arguments: argparse.Namespace) -> str:
    rows = [
        [
            f"{s.documents:,}",
            f"{s.held:,}",
            f"{s.rss_mib:,.0f}",
            f"{s.sqlite_mib:,.0f}",
            f"{s.docs_per_second:,.0f}",
            f"{s.search_p50_ms:.1f}",
            f"{s.search_p99_ms:.1f}",
            f"{s.eviction_cpu_seconds / s.cpu_seconds:.1%}" if s.cpu_seconds else "-",
        ]
        for s in soaked.samples
    ]
    table = markdown_table(
        [
            "sent",
            "held",
            "RSS MiB",
            "SQLite MiB",
            "docs/s",
            "search p50 ms",
            "search p99 ms",
            "eviction CPU",
        ],
        rows,
        ["right"] * 8,
    )
    f = figures
    return f"""\
## Soak: retention under a stream (bench/soak.py)

{arguments.documents:,} documents of ~1 KB (160 words, 5 % re-issues of a recent one),
timestamps one second apart, in batches of 256 from one writer, into a collection with
`retention: {{"max_documents": {arguments.keep:,}}}`, while one client searches
{arguments.search_rate:g} times a second; the real `neardup serve`, SQLite synchronous
FULL{f", client and server at nice {arguments.nice}" if arguments.nice else ""}.
{datetime.now(UTC).strftime("%Y-%m-%d")}, {cpu_model_name()}, shared with other work.

![soak](soak.png)

{table}

After the first window (from {int(arguments.keep * 1.2):,} documents sent on):

- resident memory {f["rss_min_mib"]:,.0f} to {f["rss_max_mib"]:,.0f} MiB (spread
  {f["rss_spread"]:.1%}; 5th to 95th percentile {f["rss_p5_mib"]:,.0f} to
  {f["rss_p95_mib"]:,.0f} MiB, mean {f["rss_mean_mib"]:,.0f} MiB, trend
  {f["rss_slope_mib_per_million"]:+.1f} MiB per million documents sent; the samples fall
  anywhere in the merges' cycle, whose new tables coexist with the old for a moment);
  the SQLite files {f["sqlite_min_mib"]:,.0f} to
  {f["sqlite_max_mib"]:,.0f} MiB (spread {f["sqlite_spread"]:.1%});
- inserts {f["soak_docs_per_second"]:,.0f} documents/s against
  {f["baseline_docs_per_second"]:,.0f} for the same stream without retention from
  {arguments.keep - arguments.baseline_span // 2:,} to
  {arguments.keep + arguments.baseline_span // 2:,} documents (two merge cycles around
  {arguments.keep:,}; run before and after the soak, pooled)
  ({f["soak_docs_per_second"] / f["baseline_docs_per_second"] - 1:+.1%});
- the server's CPU time per document inserted (searches included)
  {f["soak_cpu_us_per_document"]:.0f} us against {f["baseline_cpu_us_per_document"]:.0f} us
  ({f["soak_cpu_us_per_document"] / f["baseline_cpu_us_per_document"] - 1:+.1%});
- search p99 {f["soak_search_p99_ms"]:.1f} ms against {f["baseline_search_p99_ms"]:.1f} ms
  (p50 {f["soak_search_p50_ms"]:.1f} against {f["baseline_search_p50_ms"]:.1f} ms; over
  {f["soak_searches"]:,.0f} and {f["baseline_searches"]:,.0f} searches);
- eviction (memory and SQLite) {f["eviction_cpu_share"]:.1%} of the server's CPU time;
- other work on the machine (CPU time busy less this benchmark's): a median of
  {f["soak_other_cpus"]:.2f} of its {os.cpu_count()} CPUs during the soak, and
  {f["baseline_other_cpus"]:.2f} during the baselines (the server used
  {f["soak_server_cpus"]:.2f} during the soak);
- over the intervals during which other work took under {QUIET_OTHER_CPUS:g} CPU
  ({f["quiet_soak_intervals"]:.0f} of the soak's, {f["quiet_baseline_intervals"]:.0f} of the
  baselines'): inserts {f["quiet_soak_docs_per_second"]:,.0f} against
  {f["quiet_baseline_docs_per_second"]:,.0f} documents/s
  ({f["quiet_soak_docs_per_second"] / f["quiet_baseline_docs_per_second"] - 1:+.1%}), CPU
  {f["quiet_soak_cpu_us_per_document"]:.0f} against
  {f["quiet_baseline_cpu_us_per_document"]:.0f} us a document
  ({f["quiet_soak_cpu_us_per_document"] / f["quiet_baseline_cpu_us_per_document"] - 1:+.1%}),
  search p99 {f["quiet_soak_search_p99_ms"]:.1f} against
  {f["quiet_baseline_search_p99_ms"]:.1f} ms
  ({f["quiet_soak_search_p99_ms"] / f["quiet_baseline_search_p99_ms"] - 1:+.0%}).
"""


def load_run(name: str, keep: int) -> Run | None:
    """A run saved by an earlier invocation with the same retention, if any."""
    path = REPO_ROOT / "bench" / "results" / f"soak-{name}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data["arguments"]["keep"] != keep:
        return None
    run = Run(name, [Sample(**sample) for sample in data["run"]["samples"]])
    run.seconds, run.first = data["run"]["seconds"], data["run"].get("first", 0)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=3_000_000)
    parser.add_argument("--keep", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--interval", type=int, default=50_000, help="soak: sample every")
    parser.add_argument(
        "--baseline-interval", type=int, default=16_384, help="baseline: sample every"
    )
    parser.add_argument(
        "--baseline-span",
        type=int,
        default=2 * 65_536,
        help="baseline: documents measured, centred on --keep (default two merge cycles)",
    )
    # 50 a second: the baseline's p99 then rests on ~15 searches, not ~6 (session 7).
    parser.add_argument("--search-rate", type=float, default=50.0)
    parser.add_argument("--data-dir", default=None, help="where the servers' data goes")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run this client and the servers at this nice value (-20 as root: ahead of "
        "other jobs on a shared machine)",
    )
    parser.add_argument(
        "--runs",
        default="baseline,soak,baseline",
        help="runs to make now, in order; a run not made is read from bench/results",
    )
    arguments = parser.parse_args()
    order = [part.strip() for part in arguments.runs.split(",") if part.strip()]
    root = Path(tempfile.mkdtemp(prefix="neardup-soak-", dir=arguments.data_dir))
    soaked: Run | None = None
    bases: list[Run] = []
    try:
        with priority(arguments.nice):
            for number, name in enumerate(order):
                run = (soak if name == "soak" else baseline)(arguments, root / str(number))
                if name == "soak":
                    soaked = run
                else:
                    bases.append(run)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if soaked is None:
        soaked = load_run("soak", arguments.keep)
    else:
        write_result(
            "soak-soak.json", json.dumps({"arguments": vars(arguments), "run": asdict(soaked)})
        )
    if bases:
        write_result(
            "soak-baseline.json",
            json.dumps({"arguments": vars(arguments), "runs": [asdict(b) for b in bases]}),
        )
    else:
        bases = load_baselines(arguments.keep)
    if soaked is None:
        return
    figures = summary(soaked, bases, arguments.keep) if bases else {}
    write_result("soak.json", json.dumps({"summary": figures}, indent=1))
    plot(soaked, bases, arguments.keep, DOCS_DIR / "soak.png")
    if figures:
        print(render(soaked, figures, arguments))


def load_baselines(keep: int) -> list[Run]:
    path = REPO_ROOT / "bench" / "results" / "soak-baseline.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    if data["arguments"]["keep"] != keep:
        return []
    runs = []
    for saved in data["runs"]:
        run = Run(saved["name"], [Sample(**sample) for sample in saved["samples"]])
        run.seconds, run.first = saved["seconds"], saved["first"]
        runs.append(run)
    return runs


if __name__ == "__main__":
    main()
