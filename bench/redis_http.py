"""neardup over Redis through HTTP, 1 and 2 workers, against datasketch on the same Redis.

    .venv/bin/python -m bench.redis_http [--documents 1000000] [--datasketch-documents 50000]
                                         [--runs 3] [--duration 10] [--clients 16]
                                         [--modes unpinned,pinned] [--nice -20]
                                         [--appendfsync no|everysec|always]
                                         [--lookup-runs 1] [--lookups-only]

The measurement of issue 15's performance section. Starts one redis-server on a free
localhost port (devkit/redis_servers.py: ``zset-max-listpack-entries 512``; no
persistence by default, ``--appendfsync`` turns the append-only file on), and two
``neardup serve`` processes on it (NEARDUP_BACKEND=redis://..., log level warning): one
with 1 worker, one with ``--workers 2``. Then:

1. preload ``--documents`` documents ``pre-{i}`` (3 KB varied Reuters, devkit/documents.py,
   as bench/bare_wrk.py's) through the 2-worker server in batches of 256 from 4 clients:
   documents/s, and Redis ``used_memory`` after minus before, per document (everything
   the service keeps: index tables, signatures, records, cluster member sets);
2. search with wrk: POST /v1/collections/default/search, 3 KB bodies cycling through 512
   texts (a fifth near-duplicates of preloaded documents; devkit/wrk.py's search script),
   ``--clients`` connections on 2 threads for ``--duration`` s, ``--runs`` times each
   server in turn after an unrecorded warm-up, per mode: ``unpinned`` (every process
   free on the machine's 2 cores) and ``pinned`` (each worker on its own core: 1 worker
   on CPU 0; Redis and wrk free). Medians of requests/s, p50 / p99 (wrk's histogram);
   the ratio 2 workers / 1 worker of the medians; the CPU (a share of one core) of the
   workers, Redis, wrk and everything else on the machine during the runs;
3. round trips per search: the 1-worker server's ``neardup_storage_round_trips_total``
   (/metrics) over each of its runs, less what a scrape itself costs, divided by the
   requests wrk counted;
4. latency one at a time: wrk with 1 connection (10 s) on the 1-worker server; and the
   store-level lookups (app/backends/redis/store's RedisStore on the service's collection, no
   HTTP): the 512 texts' fingerprints, a whole search (exact, SimHash, MinHash LSH
   verified, records) and the LSH lookup alone, p50 / p99;
5. datasketch MinHashLSH(threshold 0.8, 128 values, bands 16 x 8) with Redis storage on
   the same Redis (keys ``bench...``), holding the signatures neardup computed for the
   first ``--datasketch-documents`` of the same documents (1,800-2,300 inserts a second
   measured, so fewer than neardup's: its query cost does not grow with N, one round
   trip per band):
   insert rate, used_memory per document, query p50 / p99 with the 512 texts'
   signatures (devkit/redis_peer.py, as bench/redis_store.py);
6. with ``--lookup-runs N``, steps 4's store-level lookups and 5's queries N times in
   turn on the same Redis and documents (datasketch filled once), each timed phase once
   the machine is quiet and again when other processes took more than ``--max-other``
   of a core: the p50s and their ratio run by run, medians in the summary.
   ``--lookups-only`` skips the wrk runs (2 and 3);
7. with ``--single-inserts``, after the preload: single-document inserts through HTTP
   (devkit/wrk.py's insert script, a distinct ~3 KB text a request), ``--clients``
   connections, ``--runs`` times each server in turn, unpinned: documents/s and p50 /
   p99, to weigh ``--appendfsync`` for one document a request.

The summary also gives the most 2 workers can give on these cores: Redis and wrk share
them with the workers, so at 1 worker a search takes the worker's CPU plus Redis's plus
wrk's, and 2 workers can answer at most cores / that many searches a second.

Servers, Redis and wrk run at ``--nice`` (default -20, as root: the machine is shared).
The report is printed and written to bench/results/redis_http.md and .json. Needs wrk
and redis-server (``make redis``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devkit.documents import Corpus, load_corpus
from devkit.harness import (
    QUIET,
    REPO_ROOT,
    RESULTS_DIR,
    Align,
    add_quiet_arguments,
    busy_cpu_seconds,
    child_pids,
    cpu_model,
    cpu_seconds,
    log,
    markdown_table,
    percentile,
    pin_process,
    priority,
    quiet_latencies,
    scrape_metric,
    wait_for_quiet,
    write_result,
)
from devkit.preload import PreloadFailed, preload
from devkit.redis_peer import THRESHOLD, PeerRun, datasketch_fill, datasketch_query, used_memory
from devkit.redis_servers import start_server
from devkit.server import Server
from devkit.wrk import (
    WrkRun,
    median_run,
    run_wrk,
    search_texts,
    write_insert_script,
    write_search_script,
)

RIGHT: Align = "right"
WARMUP_SECONDS = 3
RETRIES = 2  # of a run during which other processes took more than --max-other cores
ROUND_TRIPS = "neardup_storage_round_trips_total"
# Issue 15, at 1M documents.
TARGET_RATIO = 1.6  # 2 workers / 1 worker
TARGET_ROUND_TRIPS = 2
TARGET_LOOKUP_P50_MS = 2.0
TARGET_DATASKETCH = 10.0  # datasketch query p50 / ours


@dataclass
class Sample:
    workers: int
    mode: str
    wrk: WrkRun
    server_cpu: float  # the workers (and the supervisor), a share of one core
    redis_cpu: float
    wrk_cpu: float
    other_cpu: float
    round_trips: float = 0.0  # per search (1 worker only)


@dataclass
class Results:
    documents: int
    preload_docs_per_second: float = 0.0
    redis_bytes_per_document: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    insert_samples: list[Sample] = field(default_factory=list)  # --single-inserts
    sequential: WrkRun | None = None
    sequential_round_trips: float = 0.0
    store_search_ms: tuple[float, float] = (0.0, 0.0)
    store_lsh_ms: tuple[float, float] = (0.0, 0.0)
    store_matches: float = 0.0
    datasketch_documents: int = 0
    datasketch_insert_rate: float = 0.0
    datasketch_bytes_per_document: float = 0.0
    datasketch_query_ms: tuple[float, float] = (0.0, 0.0)
    # (our LSH lookup p50, our whole search p50, datasketch's query p50) ms, a run each
    lookup_runs: list[tuple[float, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Served:
    workers: int
    server: Server

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int:
        assert self.server.process is not None
        return self.server.process.pid

    def worker_pids(self) -> list[int]:
        """The processes answering requests: the server, or uvicorn's spawned workers."""
        if self.workers == 1:
            return [self.pid]
        spawned = [
            pid
            for pid in child_pids(self.pid)
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(spawned) == self.workers, spawned
        return spawned

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in [self.pid, *child_pids(self.pid)])


def every_worker_ready(url: str, in_a_row: int = 30, timeout: float = 120) -> None:
    """Until /readyz answers 200 on ``in_a_row`` new connections in a row (each one
    accepted by any worker): every worker has started."""
    import httpx

    deadline = time.monotonic() + timeout
    ready = 0
    while ready < in_a_row:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers at {url} were not all ready in {timeout:.0f} s")
        with httpx.Client(trust_env=False) as client:
            ready = ready + 1 if client.get(url + "/readyz").status_code == 200 else 0
        if not ready:
            time.sleep(0.05)  # polling other processes' readiness


@contextmanager
def serve(root: Path, backend: str, workers: int, shard_bits: int | None) -> Iterator[Served]:
    arguments = ("--workers", str(workers)) if workers > 1 else ()
    layout = {} if shard_bits is None else {"NEARDUP_REDIS_SHARD_BITS": str(shard_bits)}
    server = Server(
        root / f"data-{workers}",
        *arguments,
        NEARDUP_BACKEND=backend,
        NEARDUP_LOG_LEVEL="warning",
        **layout,
    )
    server.start()  # one worker answered /readyz
    served = Served(workers, server)
    try:
        every_worker_ready(server.url)
        yield served
    finally:
        children = child_pids(served.pid)
        try:
            server.stop()  # SIGTERM: uvicorn's supervisor stops its workers
        except subprocess.TimeoutExpired:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            server.kill()
        # What the server said (log level warning: problems only), kept for a look.
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log_path, RESULTS_DIR / f"redis_http-server-{workers}.log")


PRELOAD_CHUNK = 50_000
PRELOAD_ATTEMPTS = 3


def preload_in_chunks(served: Served, count: int, corpus: Corpus, results: Results) -> float:
    """devkit/preload.py's batches of 256 from 4 clients, ``PRELOAD_CHUNK`` documents at
    a time; a chunk that fails (a connection closed without an answer) is sent again whole
    (every document a retry then, answered as one: nothing is stored twice). Documents a
    second over the whole, retries included; failures and worker restarts are noted."""
    import httpx

    workers = served.worker_pids()
    began = time.perf_counter()
    for start in range(0, count, PRELOAD_CHUNK):
        size = min(PRELOAD_CHUNK, count - start)
        for attempt in range(PRELOAD_ATTEMPTS):
            try:
                preload(served.url, size, start=start, concurrency=4, corpus=corpus)
                break
            except (PreloadFailed, httpx.HTTPError) as error:
                note = f"preload: the chunk at pre-{start} failed ({error!r:.200}), sent again"
                log(note)
                results.notes.append(note)
                if attempt == PRELOAD_ATTEMPTS - 1:
                    raise
                every_worker_ready(served.url)
    elapsed = time.perf_counter() - began
    if sorted(served.worker_pids()) != sorted(workers):
        results.notes.append(
            "preload: uvicorn replaced a worker process meanwhile (its supervisor restarts "
            "a worker that died or missed its health check)"
        )
    return count / elapsed


class Bench:
    def __init__(self, arguments: argparse.Namespace, redis_pid: int, script: Path) -> None:
        self.arguments = arguments
        self.redis_pid = redis_pid
        self.script = script
        self.wrk_runs = 0

    def pin(self, served: Served, pinned: bool) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        for index, pid in enumerate(served.worker_pids()):
            pin_process(pid, {cpus[index % len(cpus)]} if pinned else set(cpus))

    def wrk(
        self,
        served: Served,
        mode: str,
        seconds: float,
        clients: int,
        threads: int = 2,
        script: Path | None = None,
    ) -> Sample:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy, server, redis_cpu = busy_cpu_seconds(), served.cpu(), cpu_seconds(self.redis_pid)
        trips = scrape_metric(served.url, ROUND_TRIPS) if served.workers == 1 else 0.0
        began = time.perf_counter()
        self.wrk_runs += 1
        result = run_wrk(
            served.url,
            clients=clients,
            duration=seconds,
            script=script or self.script,
            script_args=[str(self.wrk_runs)],  # the insert script's texts differ by run
            threads=threads,
        )
        elapsed = time.perf_counter() - began
        trips = scrape_metric(served.url, ROUND_TRIPS) - trips if served.workers == 1 else 0.0
        server = served.cpu() - server
        redis_cpu = cpu_seconds(self.redis_pid) - redis_cpu
        busy = busy_cpu_seconds() - busy
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
        sample = Sample(
            served.workers,
            mode,
            result,
            server_cpu=server / elapsed,
            redis_cpu=redis_cpu / elapsed,
            wrk_cpu=client / elapsed,
            other_cpu=max(0.0, busy - server - redis_cpu - client) / elapsed,
        )
        if served.workers == 1 and result.requests:
            sample.round_trips = (trips - self.scrape_cost(served)) / result.requests
        return sample

    def scrape_cost(self, served: Served) -> float:
        """Round trips a /metrics scrape makes itself (its per-collection samples)."""
        first = scrape_metric(served.url, ROUND_TRIPS)
        return scrape_metric(served.url, ROUND_TRIPS) - first

    def quiet_wrk(self, served: Served, mode: str) -> Sample:
        """A recorded run once the machine is quiet; again (up to RETRIES times) when other
        processes took more than --max-other cores during it."""
        arguments = self.arguments
        for attempt in range(RETRIES + 1):
            wait_for_quiet(arguments.quiet, arguments.quiet_timeout)
            sample = self.wrk(served, mode, arguments.duration, arguments.clients)
            if sample.other_cpu <= arguments.max_other or attempt == RETRIES:
                return sample
            log(
                f"{mode}, {served.workers} worker(s): other processes took "
                f"{sample.other_cpu:.0%} of a core, measuring again"
            )
        raise AssertionError("unreachable")

    def measure_inserts(self, servers: list[Served], results: Results, script: Path) -> None:
        """Single-document inserts (a distinct ~3 KB text a request), unpinned, --runs
        times on each server in turn once the machine is quiet."""
        arguments = self.arguments
        for served in servers:
            self.pin(served, pinned=False)
        for _ in range(arguments.runs):
            for served in servers:
                wait_for_quiet(arguments.quiet, arguments.quiet_timeout)
                sample = self.wrk(
                    served, "unpinned", arguments.duration, arguments.clients, script=script
                )
                results.insert_samples.append(sample)
                log(
                    f"single inserts, {served.workers} worker(s): "
                    f"{sample.wrk.requests_per_second:,.0f} docs/s, p50 "
                    f"{sample.wrk.p50_ms:.2f} / p99 {sample.wrk.p99_ms:.2f} ms, workers CPU "
                    f"{sample.server_cpu:.0%}, Redis {sample.redis_cpu:.0%}, "
                    f"{sample.wrk.errors} errors"
                )

    def measure(self, servers: list[Served], results: Results) -> None:
        arguments = self.arguments
        for mode in arguments.modes:
            for served in servers:
                self.pin(served, mode == "pinned")
                self.wrk(served, mode, WARMUP_SECONDS, arguments.clients)
            for run in range(arguments.runs):
                for served in servers:
                    sample = self.quiet_wrk(served, mode)
                    results.samples.append(sample)
                    log(
                        f"{mode} run {run + 1}/{arguments.runs}, {served.workers} worker(s): "
                        f"{sample.wrk.requests_per_second:,.0f} req/s, p50 {sample.wrk.p50_ms:.2f}"
                        f" / p99 {sample.wrk.p99_ms:.2f} ms, workers CPU {sample.server_cpu:.0%},"
                        f" Redis {sample.redis_cpu:.0%}, wrk {sample.wrk_cpu:.0%}, other "
                        f"{sample.other_cpu:.0%}, round trips/search {sample.round_trips:.2f}, "
                        f"{sample.wrk.errors} errors"
                    )
        for served in servers:
            self.pin(served, False)


def collection(client: Any) -> tuple[Any, Any]:
    """The default collection's layout and fingerprint parameters, as the service stored
    them in Redis (app/backends/redis/registry.py)."""
    from app.backends.redis.registry import COLLECTIONS_KEY, parse_record

    resolved = parse_record("default", client.hget(COLLECTIONS_KEY, "default"))
    return resolved.layout, resolved.config


def store_lookups(client: Any, texts: list[str], results: Results) -> Any:
    """p50 / p99 of the store's search and LSH lookup on the service's collection, one
    text at a time (fingerprinted beforehand); returns the texts' signatures."""
    from app.backends.redis.store.store import RedisStore
    from app.core.fingerprint import fingerprint

    layout, config = collection(client)
    prints = fingerprint(texts, config.fingerprint_params)
    store = RedisStore(client, layout)
    found: list[int] = []

    def search(q: int) -> None:
        answer = store.search(
            prints.simhash[q : q + 1], prints.minhash[q : q + 1], prints.exact[q : q + 1]
        )
        found.append(len(answer.rows.rows))

    def lsh(q: int) -> None:
        store.search(
            prints.simhash[q : q + 1],
            prints.minhash[q : q + 1],
            prints.exact[q : q + 1],
            methods=("minhash",),
            records=False,
        )

    queries = list(range(len(texts)))
    for function, slot in ((search, "store_search_ms"), (lsh, "store_lsh_ms")):
        function(0)  # warm-up
        found.clear()
        latency = [us / 1000 for us in quiet_latencies(function, queries * 2, slot)]
        setattr(results, slot, (percentile(latency, 50), percentile(latency, 99)))
        if found:
            results.store_matches = statistics.mean(found)
    return prints.minhash


def datasketch(
    client: Any, port: int, corpus: Corpus, probes: Any, results: Results, count: int
) -> Any:
    from app.core.fingerprint import fingerprint

    _, config = collection(client)
    params = config.fingerprint_params
    signatures = []
    for start in range(0, count, 1000):
        texts = [corpus.document(i) for i in range(start, min(count, start + 1000))]
        signatures.append(fingerprint(texts, params).minhash)
    import numpy as np

    lsh, peer = datasketch_fill(client, port, np.concatenate(signatures))
    latency = datasketch_query(lsh, peer, np.concatenate([probes, probes]))
    results.datasketch_documents = count
    results.datasketch_insert_rate = peer.insert_rate
    results.datasketch_bytes_per_document = peer.bytes_per_doc
    results.datasketch_query_ms = (percentile(latency, 50) / 1000, percentile(latency, 99) / 1000)
    return lsh


def lookup_runs(
    client: Any, texts: list[str], lsh: Any, probes: Any, results: Results, runs: int
) -> None:
    """Steps 4 and 5 again, in turn, ``runs`` times, once both are filled: the p50 of
    each run; the medians (p99 too) replace the first figures. (Step 4's first run, made
    before datasketch is filled, only warms our lookups up and fingerprints the texts:
    paired with a datasketch run made after the fill, in other conditions, it gave the
    lowest ratio of every set.)"""
    import numpy as np

    rows = []
    for run in range(runs):
        log(f"lookups, run {run + 1} of {runs}")
        store_lookups(client, texts, results)
        peer = PeerRun()
        datasketch_query(lsh, peer, np.concatenate([probes, probes]))
        query_ms = (peer.query_p50_us / 1000, peer.query_p99_us / 1000)
        rows.append((results.store_lsh_ms, results.store_search_ms, query_ms))
    for lsh_ms, search_ms, query_ms in rows:
        results.lookup_runs.append((lsh_ms[0], search_ms[0], query_ms[0]))
        log(
            f"LSH lookup p50 {lsh_ms[0]:.3f} ms, search {search_ms[0]:.3f} ms, datasketch "
            f"{query_ms[0]:.3f} ms: {query_ms[0] / lsh_ms[0]:.1f}x"
        )

    def median(at: int, part: int) -> float:
        return statistics.median(row[at][part] for row in rows)

    results.store_lsh_ms = (median(0, 0), median(0, 1))
    results.store_search_ms = (median(1, 0), median(1, 1))
    results.datasketch_query_ms = (median(2, 0), median(2, 1))


def per_cpu_second(samples: list[Sample]) -> float:
    """Median requests per second of the workers' CPU time: how well a worker's CPU turns
    into searches, whatever share of the cores it got."""
    return statistics.median(s.wrk.requests_per_second / s.server_cpu for s in samples)


def insert_rows(results: Results) -> list[list[str]]:
    """The summary's rows of single-document inserts (--single-inserts), per server."""
    rows = []
    for workers in (1, 2):
        samples = [s for s in results.insert_samples if s.workers == workers]
        if not samples:
            continue
        middle = median_run([s.wrk for s in samples])
        rows.append(
            [
                f"single inserts through HTTP, {workers} worker(s), unpinned "
                "(docs/s, p50 / p99; runs)",
                f"{middle.requests_per_second:,.0f}, {middle.p50_ms:.2f} / "
                f"{middle.p99_ms:.2f} ms; "
                + " ".join(f"{s.wrk.requests_per_second:,.0f}" for s in samples),
                "-",
                "",
            ]
        )
    return rows


def ceiling(samples: list[Sample], mode: str) -> float:
    """The ratio 2 workers / 1 worker this machine allows at most: its cores over the CPU
    one worker's searches take of them, the worker's own, Redis's and wrk's (shares of a
    core, medians of the 1-worker runs). Redis and wrk share the cores with the workers,
    so a second worker can only have what the first leaves."""
    ones = [s for s in samples if s.mode == mode and s.workers == 1]
    used = statistics.median(s.server_cpu + s.redis_cpu + s.wrk_cpu for s in ones)
    return len(os.sched_getaffinity(0)) / used


def plot(arguments: argparse.Namespace, results: Results) -> Path:
    """Search requests/s of 1 and 2 workers per mode (medians, the runs as dots) and the
    lookups' p50 against datasketch's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rates, lookups) = plt.subplots(1, 2, figsize=(11, 4.2))
    for offset, workers in ((-0.2, 1), (0.2, 2)):
        for index, mode in enumerate(arguments.modes):
            runs = [
                s.wrk.requests_per_second
                for s in results.samples
                if s.mode == mode and s.workers == workers
            ]
            if not runs:
                continue
            rates.bar(
                index + offset,
                statistics.median(runs),
                width=0.4,
                color="tab:blue" if workers == 1 else "tab:orange",
                label=f"{workers} worker{'s' if workers > 1 else ''}" if index == 0 else None,
            )
            rates.plot([index + offset] * len(runs), runs, "k.", markersize=4)
    rates.set_xticks(range(len(arguments.modes)), arguments.modes)
    rates.set_ylabel("searches per second (wrk, 16 connections)")
    rates.legend()
    names = ["neardup LSH lookup", "neardup search (3 methods)", "datasketch query"]
    p50 = [results.store_lsh_ms[0], results.store_search_ms[0], results.datasketch_query_ms[0]]
    lookups.barh(names, p50, color=["tab:blue", "tab:blue", "tab:grey"])
    lookups.set_xlabel("p50 ms, one lookup at a time, no HTTP")
    for axis in (rates, lookups):
        axis.grid(True, axis="y" if axis is rates else "x", alpha=0.3)
    figure.suptitle(
        f"Over one Redis, {results.documents:,} documents of 3 KB (datasketch: "
        f"{results.datasketch_documents:,}), 2 cores"
    )
    figure.tight_layout()
    path = REPO_ROOT / "docs" / "redis-http.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def ratio(middle: WrkRun, one: WrkRun | None, workers: int) -> str:
    if workers == 1 or one is None:
        return "-"
    return f"{middle.requests_per_second / one.requests_per_second:.2f}x"


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def report(arguments: argparse.Namespace, results: Results) -> str:
    rows = []
    medians: dict[tuple[str, int], WrkRun] = {}
    for mode in arguments.modes:
        for workers in (1, 2):
            samples = [s for s in results.samples if s.mode == mode and s.workers == workers]
            if not samples:
                continue
            middle = median_run([s.wrk for s in samples])
            medians[mode, workers] = middle
            trips = [s.round_trips for s in samples if s.round_trips]
            rows.append(
                [
                    mode,
                    str(workers),
                    f"{middle.requests_per_second:,.0f}",
                    " ".join(f"{s.wrk.requests_per_second:,.0f}" for s in samples),
                    f"{middle.p50_ms:.2f} / {middle.p99_ms:.2f}",
                    ratio(middle, medians.get((mode, 1)), workers),
                    f"{statistics.median(s.server_cpu for s in samples):.0%}",
                    f"{per_cpu_second(samples):,.0f}",
                    f"{statistics.median(s.redis_cpu for s in samples):.0%}",
                    f"{statistics.median(s.wrk_cpu for s in samples):.0%}",
                    f"{statistics.median(s.other_cpu for s in samples):.0%} "
                    f"({max(s.other_cpu for s in samples):.0%})",
                    f"{statistics.median(trips):.2f}" if trips else "-",
                    str(middle.errors),
                ]
            )
    header = [
        *("mode", "workers", "search req/s", "runs", "p50 / p99 ms", "2 / 1 workers"),
        *("workers CPU", "req per workers' CPU-s", "Redis CPU", "wrk CPU", "other CPU (max)"),
        *("round trips/search", "errors"),
    ]
    ratios = {
        mode: medians[mode, 2].requests_per_second / medians[mode, 1].requests_per_second
        for mode in arguments.modes
        if (mode, 2) in medians and (mode, 1) in medians
    }
    ceilings = {mode: ceiling(results.samples, mode) for mode in ratios}
    trips = [s.round_trips for s in results.samples if s.round_trips]
    sequential = results.sequential
    lookups = results.store_lsh_ms[0], results.store_search_ms[0]
    speedup = results.datasketch_query_ms[0] / results.store_lsh_ms[0] if lookups[0] else 0.0
    summary = [
        ["documents (~3 KB)", f"{results.documents:,}", "1M", ""],
        [
            "batch insert through HTTP (2 workers, batches of 256, 4 clients)",
            f"{results.preload_docs_per_second:,.0f} docs/s",
            "-",
            "",
        ],
        ["Redis used_memory per document", f"{results.redis_bytes_per_document:,.0f} B", "-", ""],
        [
            "search, 2 workers / 1 worker (16 connections)",
            ", ".join(f"{mode} {r:.2f}x" for mode, r in ratios.items()),
            f">= {TARGET_RATIO}x",
            ", ".join(f"{mode} {verdict(r >= TARGET_RATIO)}" for mode, r in ratios.items()),
        ],
        *insert_rows(results),
        [
            "the most 2 workers can give on these cores: cores / CPU of a search at 1 worker"
            " (workers + Redis + wrk); the share of it they reached",
            ", ".join(
                f"{mode} {ceilings[mode]:.2f}x ({ratios[mode] / ceilings[mode]:.0%})"
                for mode in ratios
            ),
            "-",
            "",
        ],
        [
            "round trips to Redis per search: 1 connection; 16 (searches gathered)",
            f"{results.sequential_round_trips:.2f}; "
            + (f"{statistics.median(trips):.2f}" if trips else "-"),
            f"<= {TARGET_ROUND_TRIPS}",
            verdict(results.sequential_round_trips <= TARGET_ROUND_TRIPS + 0.01)
            if results.sequential
            else "",
        ],
        [
            "store lookup p50 / p99: LSH verified; whole search (3 methods, records)",
            f"{lookups[0]:.3f} / {results.store_lsh_ms[1]:.2f} ms; "
            f"{lookups[1]:.3f} / {results.store_search_ms[1]:.2f} ms",
            f"p50 <= {TARGET_LOOKUP_P50_MS:g} ms",
            verdict(0 < max(lookups) <= TARGET_LOOKUP_P50_MS),
        ],
        [
            "HTTP search p50 / p99, 1 connection, 1 worker",
            f"{sequential.p50_ms:.2f} / {sequential.p99_ms:.2f} ms" if sequential else "-",
            "-",
            "",
        ],
        [
            f"datasketch MinHashLSH (Redis storage) at {results.datasketch_documents:,}: "
            "insert, memory, query p50 / p99",
            f"{results.datasketch_insert_rate:,.0f} docs/s, "
            f"{results.datasketch_bytes_per_document:,.0f} B/doc, "
            f"{results.datasketch_query_ms[0]:.3f} / {results.datasketch_query_ms[1]:.2f} ms",
            "-",
            "",
        ],
        [
            "datasketch query p50 / our LSH lookup p50"
            + (f" (medians of {len(results.lookup_runs)} runs)" if results.lookup_runs else ""),
            (f"{speedup:.2f}x" if speedup else "-")
            + (
                " (runs: " + ", ".join(f"{d / o:.1f}x" for o, _, d in results.lookup_runs) + ")"
                if len(results.lookup_runs) > 1
                else ""
            ),
            f">= {TARGET_DATASKETCH:g}x",
            verdict(speedup >= TARGET_DATASKETCH) if speedup else "",
        ],
    ]
    persistence = (
        "no persistence (save '', appendonly no)"
        if arguments.appendfsync == "no"
        else f"appendonly yes, appendfsync {arguments.appendfsync}"
    )
    lines = [
        "# neardup over Redis through HTTP (issue 15)",
        "",
        cpu_model(),
        "",
        f"One redis-server (7, {persistence}, zset-max-listpack-entries 512) on loopback; "
        f"the collection's layout at {arguments.shard_bits or 'the default 12'} shard bits; "
        f"wrk -t2 -c{arguments.clients} -d{arguments.duration}s, medians of {arguments.runs} "
        "runs each server in turn; unpinned: every process free on the 2 cores; pinned: each "
        "worker on its own core (1 worker on CPU 0), Redis and wrk free. Servers, Redis and "
        f"wrk at nice {arguments.nice}. Search bodies: 3 KB, a fifth near-duplicates of "
        "stored documents.",
        "",
        markdown_table(["figure", "measured", "target", ""], summary),
        "",
        markdown_table(header, rows, ["left", *[RIGHT] * (len(header) - 1)]),
        "",
        *results.notes,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"signal {signum}"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=100_000, help="preloaded (100000)")
    parser.add_argument(
        "--datasketch-documents",
        type=int,
        default=50_000,
        help="documents datasketch holds (50000; it inserts ~1,000 a second)",
    )
    parser.add_argument("--clients", type=int, default=16, help="wrk connections (16)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run (10)")
    parser.add_argument("--runs", type=int, default=3, help="recorded runs per server (3)")
    parser.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=["unpinned", "pinned"],
        help="comma-separated, of unpinned and pinned (default both)",
    )
    parser.add_argument(
        "--appendfsync",
        choices=["no", "everysec", "always"],
        default="no",
        help="no: Redis without persistence (default); otherwise appendonly yes with this",
    )
    parser.add_argument("--nice", type=int, default=-20, help="servers, Redis, wrk (-20)")
    add_quiet_arguments(parser, quiet=0.2, timeout=15, max_other=0.3)
    parser.add_argument("--plot", action="store_true", help="draw docs/redis-http.png")
    parser.add_argument(
        "--lookup-runs",
        type=int,
        default=1,
        help="store lookups and datasketch queries in turn, this many times (1)",
    )
    parser.add_argument("--lookups-only", action="store_true", help="no wrk runs of searches")
    parser.add_argument(
        "--single-inserts",
        action="store_true",
        help="single-document inserts with wrk (devkit/wrk.py's insert script), --runs times a "
        "server, unpinned, after the preload",
    )
    parser.add_argument(
        "--shard-bits",
        type=int,
        default=None,
        help="NEARDUP_REDIS_SHARD_BITS of the servers (the service's default, 12, if not "
        "given; docs/redis.md: about log2(documents / 64))",
    )
    arguments = parser.parse_args()
    quiet = QUIET
    quiet.quiet, quiet.timeout = arguments.quiet, arguments.quiet_timeout
    quiet.max_other = arguments.max_other
    for program in ("wrk", "redis-server"):
        if shutil.which(program) is None:
            sys.exit(f"bench/redis_http.py needs {program} on the PATH")
    import redis

    corpus = load_corpus()
    root = Path(tempfile.mkdtemp(prefix="neardup-redis-http-"))
    script = write_search_script(root, arguments.documents, corpus, random.Random(0))
    results = Results(arguments.documents)
    persistence = ("--maxmemory", "0")
    if arguments.appendfsync != "no":
        persistence += ("--appendonly", "yes", "--appendfsync", arguments.appendfsync)
    try:
        with priority(arguments.nice):
            redis_server = start_server(root / "redis", *persistence)
            try:
                client = redis.Redis(port=redis_server.port)
                with (
                    serve(root, redis_server.url, 1, arguments.shard_bits) as one,
                    serve(root, redis_server.url, 2, arguments.shard_bits) as two,
                ):
                    # The default collection exists once a server has started: its keys
                    # are counted from here.
                    before = used_memory(client)
                    log(f"preloading {arguments.documents:,} documents through 2 workers")
                    results.preload_docs_per_second = preload_in_chunks(
                        two, arguments.documents, corpus, results
                    )
                    results.redis_bytes_per_document = (
                        used_memory(client) - before
                    ) / arguments.documents
                    log(
                        f"{results.preload_docs_per_second:,.0f} docs/s; "
                        f"{results.redis_bytes_per_document:,.0f} B/doc in Redis"
                    )
                    bench = Bench(arguments, redis_server.process.pid, script)
                    if arguments.single_inserts:
                        log("single inserts")
                        inserts = write_insert_script(root, corpus, random.Random(1))
                        bench.measure_inserts([one, two], results, inserts)
                    if not arguments.lookups_only:
                        bench.measure([one, two], results)
                        log("one connection, 1 worker")
                        wait_for_quiet(arguments.quiet, arguments.quiet_timeout)
                        sequential = bench.wrk(one, "unpinned", 10, 1, threads=1)
                        results.sequential = sequential.wrk
                        results.sequential_round_trips = sequential.round_trips
                log("store-level lookups")
                quiet.server_pid = redis_server.process.pid
                texts = search_texts(script)
                probes = store_lookups(client, texts, results)
                log(f"datasketch: {arguments.datasketch_documents:,} documents")
                lsh = datasketch(
                    client,
                    redis_server.port,
                    corpus,
                    probes,
                    results,
                    arguments.datasketch_documents,
                )
                lookup_runs(client, texts, lsh, probes, results, arguments.lookup_runs)
                info = client.info("memory")
                results.notes.append(
                    f"Redis at the end: used_memory {info['used_memory_human']}, RSS "
                    f"{info['used_memory_rss_human']}; LSH threshold {THRESHOLD}; matches "
                    f"found per store search {results.store_matches:.2f}."
                )
            finally:
                redis_server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    text = report(arguments, results)
    print(text)
    write_result("redis_http.md", text)
    write_result("redis_http.json", json.dumps(asdict(results), indent=1))
    if arguments.plot:
        log(f"plot: {plot(arguments, results)}")


if __name__ == "__main__":
    main()
