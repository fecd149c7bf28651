"""What durability costs: insert throughput by SQLite synchronous mode, and start-up at 1M.

Run from the repository root::

    .venv/bin/python -m bench.durability [--quick] [--startup-docs N]
    .venv/bin/python -m bench.durability --empty-start [--runs 5]

1. Inserts through HTTP against the real ``neardup serve`` process (devkit/server.py) on a
   fresh temporary data directory, for ``NEARDUP_SYNCHRONOUS`` FULL and NORMAL and batches
   of 1 (8 client threads, POST .../documents, so that group commit has concurrent
   writers to combine), 16 and 256 (2 client threads, POST .../documents/batch). Documents
   are 3 KB of English: Reuters-21578 stories drawn at random and joined (when
   ../shared/data is present, synthetic newswire-like prose otherwise), one word of each
   replaced by a random token, so none is an exact copy of another. Request bodies are
   serialised before the clock starts. Where ``perf`` may count syscalls, the fsync and
   fdatasync calls of the server during the timed part are counted from outside. The same
   workload is then run in process (FastAPI TestClient, no network) against the memory
   store and the SQLite store, which also counts the changes of each committed
   transaction (the group-commit figure the HTTP server does not expose).
2. Start-up with a million documents: a data directory whose SQLite database holds N
   documents of ``default`` with random fingerprints is written directly through
   SQLiteStore, then ``neardup serve`` is started on it and timed until /healthz and
   /readyz answer 200, and its resident memory is read from /proc. The phases are then
   timed in this process: opening the store (with its integrity check), ``load()``, and
   ``Collection.restore`` (profiled with cProfile).

Nothing is pinned: the server and the client each need a core, and the client runs on
the same machine. Tables are printed and written to ``bench/results/durability.md``.

``--empty-start`` measures instead the seconds from spawning ``neardup serve`` to /readyz
200 on an empty data directory, ``--runs`` times in each of two cases, each run on a new
empty data directory and its own NUMBA_CACHE_DIR:

- **after the set-up**: ``neardup warm-up`` (what ``make run`` and the Docker build run)
  fills the cache once, then every run starts on it;
- **no cache**, the old behaviour: the cache is emptied before every run, so that the
  start compiles the kernels, as the first start of an install did.

A run is timed by devkit/server.py's Server (readiness polled every 50 ms), then sends the
first requests of a client (an English and a Chinese single insert, a batch, a search by
text and one by HTML), timed together, and counts the kernel versions numba compiled in the
server over the start and those requests (NUMBA_DEBUG_CACHE's "data saved" lines): after
the set-up there should be none. The floor under a start, the seconds the interpreter
takes to import the server's modules (``python -c "import app.cli"``), is measured too.
Medians (min-max) over the runs; printed and written to ``bench/results/startup.md``.
"""

from __future__ import annotations

import os

# As `neardup serve` does, so that the in-process phases match the server's.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse
import contextlib
import cProfile
import dataclasses
import io
import itertools
import json
import platform
import pstats
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np

import devkit.server
from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.config import Settings
from app.main import DATABASE_FILE, create_app, memory_store
from app.storage import MemoryStore, Store
from app.storage import sqlite_load as sqlite_module
from app.storage.base import DocumentBatch, StoredCollection
from app.storage.sqlite import SQLiteStore
from devkit.corpus import english_like_text
from devkit.harness import (
    REPO_ROOT,
    Timing,
    cpu_model,
    cpu_model_name,
    cpu_seconds,
    format_ratio,
    format_spread,
    load_reuters,
    markdown_table,
    percentile,
    release_memory,
    reuters_text,
    spread,
    write_result,
)
from devkit.server import Server, neardup_command

Mode = Literal["FULL", "NORMAL"]
StoreKind = Literal["memory", "FULL", "NORMAL"]

DOC_CHARS = 3072
SINGLE_PATH = "/v1/collections/default/documents"
BATCH_PATH = "/v1/collections/default/documents/batch"
JSON_HEADERS = {"content-type": "application/json"}
BATCH_SIZES = (1, 16, 256)
MODES: tuple[Mode, ...] = ("FULL", "NORMAL")
STORE_KINDS: tuple[StoreKind, ...] = ("memory", "NORMAL", "FULL")
STARTUP_TARGET_SECONDS = 30.0
STARTUP_CHUNK = 50_000
NUM_PERM = CollectionConfig().minhash.num_perm


def clients_for(batch: int) -> int:
    """8 writers for single inserts (group commit needs concurrency), 2 for batches."""
    return 8 if batch == 1 else 2


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """How much each measurement may take."""

    max_docs: int  # per HTTP run
    max_seconds: float
    runs: dict[int, int]  # batch size -> HTTP runs per mode
    inprocess_docs: int
    inprocess_seconds: float
    inprocess_runs: dict[int, int]
    startup_docs: int
    profile: bool


FULL_PLAN = Plan(
    max_docs=20_000,
    max_seconds=20.0,
    runs={1: 3, 16: 3, 256: 3},
    inprocess_docs=10_000,
    inprocess_seconds=10.0,
    inprocess_runs={1: 1, 16: 1, 256: 3},
    startup_docs=1_000_000,
    profile=True,
)
QUICK_PLAN = Plan(
    max_docs=1_500,
    max_seconds=3.0,
    runs={1: 1, 16: 1, 256: 1},
    inprocess_docs=1_000,
    inprocess_seconds=2.0,
    inprocess_runs={1: 1, 16: 1, 256: 1},
    startup_docs=100_000,
    profile=True,
)


# ---------------------------------------------------------------------- documents


def make_texts(count: int, seed: int) -> tuple[list[str], str]:
    """``count`` documents of DOC_CHARS characters, and where their words come from."""
    rng = random.Random(seed)
    stories = load_reuters()
    if stories is not None:
        pool = [text for text in map(reuters_text, stories) if len(text) >= 200]
        source = f"Reuters-21578 ({len(pool):,} stories of 200+ characters, drawn at random)"
    else:
        pool = [english_like_text(rng, rng.randint(500, 2500)) for _ in range(4000)]
        source = "synthetic newswire-like prose (../shared/data is absent)"
    texts = []
    for _ in range(count):
        parts: list[str] = []
        size = 0
        while size < DOC_CHARS:
            part = rng.choice(pool)
            parts.append(part)
            size += len(part) + 1
        words = "\n".join(parts)[:DOC_CHARS].split(" ")
        words[rng.randrange(len(words))] = f"x{rng.getrandbits(40):x}"
        texts.append(" ".join(words))
    return texts, source


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    """Request bodies serialised ahead of time, and how many documents each carries."""

    batch: int
    path: str
    bodies: list[bytes]
    sizes: list[int]
    warm_up: list[bytes]


def make_workload(texts: Sequence[str], warm_texts: Sequence[str], batch: int) -> Workload:
    def bodies_of(prefix: str, chosen: Sequence[str]) -> tuple[list[bytes], list[int]]:
        documents = [{"id": f"{prefix}{i}", "text": text} for i, text in enumerate(chosen)]
        if batch == 1:
            return [json.dumps(d).encode() for d in documents], [1] * len(documents)
        groups = [documents[i : i + batch] for i in range(0, len(documents), batch)]
        return [json.dumps({"documents": g}).encode() for g in groups], [len(g) for g in groups]

    bodies, sizes = bodies_of("d", texts)
    warm_up, _ = bodies_of("warm", warm_texts[: max(batch, 8) * 2])
    return Workload(batch, SINGLE_PATH if batch == 1 else BATCH_PATH, bodies, sizes, warm_up)


# ---------------------------------------------------------------------- driving clients


@dataclasses.dataclass(slots=True)
class Run:
    documents: int
    seconds: float
    latencies_ms: list[float]
    duplicates: int
    fsyncs: int | None = None
    commits: int | None = None
    changes: int | None = None
    requests: int = 0
    server_cpu: float | None = None  # seconds of CPU of the server process, all threads
    client_cpu: float = 0.0  # seconds of CPU of this process (the clients) during the run

    @property
    def per_second(self) -> float:
        return self.documents / self.seconds


ClientFactory = Callable[[], contextlib.AbstractContextManager[httpx.Client]]


def drive(
    new_client: ClientFactory,
    workload: Workload,
    clients: int,
    max_docs: int,
    max_seconds: float,
    before_clock: Callable[[], None] = lambda: None,
) -> Run:
    """Send the workload's requests from ``clients`` threads until ``max_docs`` documents
    or ``max_seconds`` are used up; every request must succeed."""
    count = 0
    limit = 0
    for size in workload.sizes:
        if count >= max_docs:
            break
        count += size
        limit += 1
    bodies = workload.bodies[:limit]
    next_request = itertools.count()
    ready = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    answered: list[list[tuple[int, bytes]]] = [[] for _ in range(clients)]
    failures: list[str] = []
    deadline = [0.0]

    def worker(number: int) -> None:
        with new_client() as client:
            client.get("/healthz")  # connect before the clock starts
            ready.wait()
            clock = time.perf_counter
            while True:
                index = next(next_request)
                if index >= len(bodies) or clock() >= deadline[0]:
                    return
                start = clock()
                response = client.post(workload.path, content=bodies[index], headers=JSON_HEADERS)
                latencies[number].append((clock() - start) * 1000)
                if response.status_code not in (200, 201):
                    failures.append(f"{response.status_code}: {response.text[:300]}")
                    return
                answered[number].append((index, response.content))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    before_clock()
    deadline[0] = time.perf_counter() + max_seconds
    ready.wait()
    start = time.perf_counter()
    start_cpu = time.process_time()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    client_cpu = time.process_time() - start_cpu
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, first: {failures[0]}")
    done = [item for per_client in answered for item in per_client]
    duplicates = 0
    for _, content in done:
        answer = json.loads(content)
        results = answer.get("results", [answer])
        duplicates += sum(result["duplicate_of"] is not None for result in results)
    return Run(
        documents=sum(workload.sizes[index] for index, _ in done),
        seconds=seconds,
        latencies_ms=[value for per_client in latencies for value in per_client],
        duplicates=duplicates,
        requests=len(done),
        client_cpu=client_cpu,
    )


def warm_up(client: httpx.Client, workload: Workload) -> None:
    """Pay the first calls (lazy kernel loading, connection set-up) before timing."""
    for body in workload.warm_up:
        response = client.post(workload.path, content=body, headers=JSON_HEADERS)
        response.raise_for_status()


class SyncCounter:
    """fsync + fdatasync syscalls of a process, counted from outside with ``perf stat``
    (kernel tracepoints: no cost to the traced process). ``count`` is None without perf."""

    EVENTS = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"

    def __init__(self, pid: int, scratch: Path) -> None:
        self.pid = pid
        self.output = scratch / f"perf-{pid}.csv"
        self.process: subprocess.Popen[bytes] | None = None
        self.count: int | None = None

    def start(self) -> None:
        perf = shutil.which("perf")
        if perf is None:
            return
        command = [perf, "stat", "-x,", "-o", str(self.output), "-e", self.EVENTS]
        self.process = subprocess.Popen(
            [*command, "-p", str(self.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # perf has no readiness signal; attaching takes a few milliseconds.
        time.sleep(0.5)
        if self.process.poll() is not None:
            self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return
        total = 0
        found = 0
        for line in self.output.read_text(errors="replace").splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("syscalls:") and fields[0].isdigit():
                total += int(fields[0])
                found += 1
        self.count = total if found == 2 else None


def rss_of(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak), RssAnon and RssFile (mapped files) of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def http_run(mode: Mode, workload: Workload, plan: Plan) -> tuple[Run, int]:
    """One run against a fresh `neardup serve`: the run, and the server's RSS when ready."""
    with tempfile.TemporaryDirectory(prefix="neardup-durability-") as directory:
        server = Server(
            Path(directory) / "data", NEARDUP_SYNCHRONOUS=mode, NEARDUP_LOG_LEVEL="warning"
        )
        server.start()
        try:
            assert server.process is not None
            ready_rss = rss_of(server.process.pid)["VmRSS"]
            with httpx.Client(base_url=server.url, timeout=120) as client:
                warm_up(client, workload)
            pid = server.process.pid
            counter = SyncCounter(pid, Path(directory))
            cpu_before = [0.0]

            def before_clock() -> None:
                counter.start()
                cpu_before[0] = cpu_seconds(pid)

            run = drive(
                lambda: httpx.Client(base_url=server.url, timeout=120),
                workload,
                clients_for(workload.batch),
                plan.max_docs,
                plan.max_seconds,
                before_clock=before_clock,
            )
            run.server_cpu = cpu_seconds(pid) - cpu_before[0]
            counter.stop()
            run.fsyncs = counter.count
            if server.stop() != 0:
                raise RuntimeError(f"server did not stop cleanly: {server.output()}")
        finally:
            server.kill()
    return run, ready_rss


class CountingSQLiteStore(SQLiteStore):
    """SQLiteStore that counts its transactions and the changes committed in each."""

    def __init__(self, path: Path, synchronous: Mode) -> None:
        self.commits = 0
        self.changes = 0
        super().__init__(path, synchronous)

    def _commit(self, group: list[Any]) -> None:
        self.commits += 1
        self.changes += len(group)
        super()._commit(group)


def inprocess_run(kind: StoreKind, workload: Workload, plan: Plan) -> Run:
    """The same workload through FastAPI's TestClient (no sockets), memory or SQLite."""
    with warnings.catch_warnings():
        # Starlette's TestClient is httpx-based and says so; the tests ignore it too.
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory(prefix="neardup-durability-") as directory:
        mode: Mode = "FULL" if kind == "memory" else kind
        settings = Settings(data_dir=Path(directory) / "data", synchronous=mode)
        stores: list[CountingSQLiteStore] = []

        def counting_store(settings: Settings) -> Store:
            store = CountingSQLiteStore(settings.data_dir / DATABASE_FILE, settings.synchronous)
            stores.append(store)
            return store

        app = create_app(settings, memory_store if kind == "memory" else counting_store)
        with TestClient(app) as client:
            if not app.state.ready.wait(60):
                raise RuntimeError(f"in-process app not ready: {app.state.startup_error}")
            warm_up(client, workload)
            baseline = (stores[0].commits, stores[0].changes) if stores else (0, 0)
            # One TestClient serves every thread: it hands each request to the app's loop.
            run = drive(
                lambda: contextlib.nullcontext(client),
                workload,
                clients_for(workload.batch),
                plan.inprocess_docs,
                plan.inprocess_seconds,
            )
            if stores:
                run.commits = stores[0].commits - baseline[0]
                run.changes = stores[0].changes - baseline[1]
    return run


# ---------------------------------------------------------------------- reporting helpers


def median_of(values: Sequence[float]) -> float:
    return statistics.median(values)


def docs_per_second(runs: Sequence[Run]) -> str:
    """Median documents/s over runs, with the range when there are several."""
    rates = [run.per_second for run in runs]
    middle = f"{median_of(rates):,.0f}"
    if len(rates) == 1:
        return middle
    return f"{middle} ({min(rates):,.0f}-{max(rates):,.0f})"


def latency(runs: Sequence[Run], q: float) -> str:
    """The median over runs of each run's q-th percentile request latency, in ms."""
    return f"{median_of([percentile(run.latencies_ms, q) for run in runs]):.1f}"


def cpu_per_doc(runs: Sequence[Run], *, server: bool) -> str:
    """Median over runs of CPU milliseconds per document, of the server or of this process."""
    values = [
        ((run.server_cpu or 0.0) if server else run.client_cpu) * 1000 / run.documents
        for run in runs
    ]
    if server and any(run.server_cpu is None for run in runs):
        return "n/a"
    return f"{median_of(values):.2f}"


def median_run(runs: Sequence[Run]) -> Run:
    return sorted(runs, key=lambda run: run.per_second)[len(runs) // 2]


def megabytes(value: float) -> str:
    return f"{value / 1e6:,.0f} MB"


# ---------------------------------------------------------------------- part 1


@dataclasses.dataclass
class InsertResults:
    http: dict[tuple[Mode, int], list[Run]] = dataclasses.field(default_factory=dict)
    inprocess: dict[tuple[StoreKind, int], list[Run]] = dataclasses.field(default_factory=dict)
    empty_server_rss: int = 0
    source: str = ""


def measure_inserts(plan: Plan, log: Callable[[str], None]) -> InsertResults:
    results = InsertResults()
    needed = max(plan.max_docs, plan.inprocess_docs)
    texts, results.source = make_texts(needed + 600, seed=1)
    warm_texts, texts = texts[needed:], texts[:needed]
    workloads = {batch: make_workload(texts, warm_texts, batch) for batch in BATCH_SIZES}
    rss: list[int] = []
    for batch in BATCH_SIZES:
        for run_number in range(plan.runs[batch]):
            for mode in MODES:
                run, ready_rss = http_run(mode, workloads[batch], plan)
                rss.append(ready_rss)
                results.http.setdefault((mode, batch), []).append(run)
                log(
                    f"  http {mode:6} batch {batch:3} run {run_number + 1}: "
                    f"{run.per_second:,.0f} docs/s, {run.documents:,} docs in {run.seconds:.1f} s"
                    f", load {os.getloadavg()[0]:.2f}"
                )
    results.empty_server_rss = int(median_of(rss))
    for batch in BATCH_SIZES:
        for run_number in range(plan.inprocess_runs[batch]):
            for kind in STORE_KINDS:
                run = inprocess_run(kind, workloads[batch], plan)
                results.inprocess.setdefault((kind, batch), []).append(run)
                log(
                    f"  in-process {kind:6} batch {batch:3} run {run_number + 1}: "
                    f"{run.per_second:,.0f} docs/s, {run.documents:,} docs in {run.seconds:.1f} s"
                    f", load {os.getloadavg()[0]:.2f}"
                )
    return results


def insert_tables(results: InsertResults) -> str:
    http_rows = []
    for mode in MODES:
        for batch in BATCH_SIZES:
            runs = results.http[(mode, batch)]
            typical = median_run(runs)
            fsyncs = (
                "n/a"
                if typical.fsyncs is None
                else f"{typical.fsyncs:,} ({typical.fsyncs / typical.requests:.2f})"
            )
            http_rows.append(
                [
                    mode,
                    str(batch),
                    str(clients_for(batch)),
                    str(len(runs)),
                    f"{typical.documents:,}",
                    docs_per_second(runs),
                    latency(runs, 50),
                    latency(runs, 99),
                    cpu_per_doc(runs, server=True),
                    cpu_per_doc(runs, server=False),
                    fsyncs,
                    f"{typical.duplicates / typical.documents:.1%}",
                ]
            )
    http_table = markdown_table(
        [
            "synchronous",
            "batch",
            "clients",
            "runs",
            "docs/run",
            "docs/s median (range)",
            "p50 ms",
            "p99 ms",
            "server CPU ms/doc",
            "client CPU ms/doc",
            "fsyncs (per request)",
            "dups",
        ],
        http_rows,
        ["left", *["right"] * 11],
    )
    ratio_rows = []
    for batch in BATCH_SIZES:
        full = median_of([run.per_second for run in results.http[("FULL", batch)]])
        normal = median_of([run.per_second for run in results.http[("NORMAL", batch)]])
        ratio_rows.append(
            [str(batch), f"{full:,.0f}", f"{normal:,.0f}", format_ratio(normal / full)]
        )
    ratio_table = markdown_table(
        ["batch", "FULL docs/s", "NORMAL docs/s", "NORMAL / FULL"],
        ratio_rows,
        ["right", "right", "right", "right"],
    )
    inprocess_rows = []
    for batch in BATCH_SIZES:
        memory = median_of([run.per_second for run in results.inprocess[("memory", batch)]])
        for kind in STORE_KINDS:
            runs = results.inprocess[(kind, batch)]
            rate = median_of([run.per_second for run in runs])
            typical = median_run(runs)
            per_commit = (
                "-"
                if not typical.commits
                else f"{typical.changes or 0:,} / {typical.commits:,} = "
                f"{(typical.changes or 0) / typical.commits:.2f}"
            )
            inprocess_rows.append(
                [
                    str(batch),
                    str(clients_for(batch)),
                    kind,
                    str(len(runs)),
                    docs_per_second(runs),
                    f"{rate / memory:.2f}",
                    latency(runs, 50),
                    latency(runs, 99),
                    cpu_per_doc(runs, server=False),
                    per_commit,
                ]
            )
    inprocess_table = markdown_table(
        [
            "batch",
            "threads",
            "store",
            "runs",
            "docs/s median (range)",
            "x memory",
            "p50 ms",
            "p99 ms",
            "CPU ms/doc",
            "changes / commits",
        ],
        inprocess_rows,
        ["right", "right", "left", *["right"] * 7],
    )
    return "\n\n".join(
        [
            "### Through HTTP (`neardup serve`, fresh data dir per run)",
            http_table,
            "### FULL against NORMAL through HTTP (medians)",
            ratio_table,
            "### In process (TestClient, no sockets): memory store against SQLite",
            inprocess_table,
        ]
    )


# ---------------------------------------------------------------------- part 2


def build_database(path: Path, count: int, seed: int, first_row: int = 0) -> float:
    """Write ``count`` documents of ``default`` with random fingerprints (rows from
    ``first_row``: a database that has the earlier ones gets more); seconds taken."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    store = SQLiteStore(path)
    if not first_row:
        store.create_collection("default", CollectionConfig().to_dict())
    now = time.time()
    for first in range(first_row, first_row + count, STARTUP_CHUNK):
        size = min(STARTUP_CHUNK, first_row + count - first)
        rows = np.arange(first, first + size, dtype=np.int64)
        store.add_documents(
            "default",
            DocumentBatch(
                ids=[f"d{i}" for i in range(first, first + size)],
                rows=rows,
                created_at=now + rows * 1e-3,
                clusters=rows.copy(),
                metadata=[None] * size,
                simhash=rng.integers(0, 2**64, size, dtype=np.uint64),
                minhash=rng.integers(0, 2**32, (size, NUM_PERM), dtype=np.uint32),
                exact=rng.integers(0, 2**64, (size, 2), dtype=np.uint64),
            ),
        )
    store.close()
    return time.perf_counter() - start


@dataclasses.dataclass
class Startup:
    documents: int
    build_seconds: float
    database_bytes: int
    healthz_seconds: float | None
    ready_seconds: float
    rss: int
    peak_rss: int
    empty_rss: int
    stats: dict[str, Any]
    open_seconds: float
    load_seconds: float
    restore_seconds: float
    profile: str


def time_server_start(data_dir: Path) -> tuple[float | None, float, dict[str, int], dict[str, Any]]:
    """(seconds to /healthz 200, seconds to /readyz 200, RSS when ready, collection stats)."""
    devkit.server.STARTUP_SECONDS = 600  # the tests' 60 s is not meant for a million rows
    server = Server(data_dir, NEARDUP_LOG_LEVEL="warning")
    alive: list[float] = []
    stop = threading.Event()

    def watch_healthz(started: float) -> None:
        with httpx.Client(base_url=server.url, timeout=2) as client:
            while not stop.is_set():
                try:
                    if client.get("/healthz").status_code == 200:
                        alive.append(time.perf_counter() - started)
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.02)  # polling another process: no event to wait on

    started = time.perf_counter()
    watcher = threading.Thread(target=watch_healthz, args=(started,))
    watcher.start()
    try:
        server.start()
        ready = time.perf_counter() - started
        stop.set()
        watcher.join()
        assert server.process is not None
        memory = rss_of(server.process.pid)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            stats = client.get("/v1/collections/default").json().get("stats", {})
        if server.stop(60) != 0:
            raise RuntimeError(f"server did not stop cleanly: {server.output()}")
    finally:
        stop.set()
        watcher.join()
        server.kill()
    return (alive[0] if alive else None), ready, memory, stats


def empty_server_rss() -> int:
    with tempfile.TemporaryDirectory(prefix="neardup-durability-") as directory:
        _, _, memory, _ = time_server_start(Path(directory) / "data")
    return memory["VmRSS"]


def measure_startup(plan: Plan, log: Callable[[str], None], empty_rss: int) -> Startup:
    with tempfile.TemporaryDirectory(prefix="neardup-durability-") as directory:
        data_dir = Path(directory) / "data"
        database = data_dir / DATABASE_FILE
        build_seconds = build_database(database, plan.startup_docs, seed=7)
        size = sum(path.stat().st_size for path in data_dir.iterdir())
        log(f"  built {plan.startup_docs:,} documents in {build_seconds:.1f} s ({megabytes(size)})")
        healthz, ready, memory, stats = time_server_start(data_dir)
        log(f"  server ready in {ready:.1f} s, RSS {megabytes(memory['VmRSS'])}")

        # The phases, in this process (the database file is in the page cache for both).
        start = time.perf_counter()
        store = SQLiteStore(database)
        open_seconds = time.perf_counter() - start
        start = time.perf_counter()
        [stored] = store.load()
        load_seconds = time.perf_counter() - start
        store.close()
        config = CollectionConfig.from_dict(stored.config)
        # Load the index kernels from numba's cache on a few rows first, as a server would
        # have by the time it rebuilds.
        few = stored.documents.select(np.arange(min(1000, len(stored.documents))))
        Collection("warm", config, MemoryStore()).restore(
            StoredCollection("warm", stored.config, few, {}, len(few))
        )
        collection = Collection("default", config, MemoryStore())
        start = time.perf_counter()
        collection.restore(stored)
        restore_seconds = time.perf_counter() - start
        del collection
        release_memory()
        log(
            f"  open {open_seconds:.1f} s, load {load_seconds:.1f} s, "
            f"restore {restore_seconds:.1f} s"
        )
        profile_text = ""
        if plan.profile:
            profiler = cProfile.Profile()
            collection = Collection("default", config, MemoryStore())
            profiler.enable()
            collection.restore(stored)
            profiler.disable()
            del collection
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
            profile_text = trim_profile(out.getvalue())
        return Startup(
            documents=plan.startup_docs,
            build_seconds=build_seconds,
            database_bytes=size,
            healthz_seconds=healthz,
            ready_seconds=ready,
            rss=memory["VmRSS"],
            peak_rss=memory["VmHWM"],
            empty_rss=empty_rss,
            stats=stats,
            open_seconds=open_seconds,
            load_seconds=load_seconds,
            restore_seconds=restore_seconds,
            profile=profile_text,
        )


LOAD_PEAK_CODE = """
import json, sys
from pathlib import Path
from bench.durability import rss_of
from app.storage import sqlite, sqlite_load
sqlite_load.LOAD_CHUNK_ROWS = int(sys.argv[2])
store = sqlite.SQLiteStore(Path(sys.argv[1]))
before = rss_of(__import__("os").getpid())["VmRSS"]
[stored] = store.load()
memory = rss_of(__import__("os").getpid())
print(json.dumps({"before": before, "after": memory["VmRSS"], "peak": memory["VmHWM"]}))
"""


def load_peaks(documents: int, runs: int) -> str:
    """``SQLiteStore.load()`` of ``documents`` (random fingerprints, no texts), each run in
    a fresh process: the memory it holds after and its peak above the process's RSS before
    it, in bytes a document, reading LOAD_CHUNK_ROWS rows at a time and reading every row
    at once (the former load), alternated. Medians (min-max) of ``runs``."""
    chunked, whole = [], []
    with tempfile.TemporaryDirectory(prefix="neardup-load-") as directory:
        database = Path(directory) / DATABASE_FILE
        build_database(database, documents, seed=7)
        for _ in range(runs):
            for chunk, results in ((sqlite_module.LOAD_CHUNK_ROWS, chunked), (documents, whole)):
                done = subprocess.run(
                    [sys.executable, "-c", LOAD_PEAK_CODE, str(database), str(chunk)],
                    capture_output=True, text=True, check=True, cwd=REPO_ROOT,
                )  # fmt: skip
                results.append(json.loads(done.stdout.splitlines()[-1]))

    def cell(results: list[dict[str, int]], key: str) -> str:
        values = [(r[key] - r["before"]) / documents for r in results]
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    return "\n".join(
        [
            f"`load()` of {documents:,} documents, {runs} runs each, "
            "B/document above the RSS before:",
            "",
            "| rows read at a time | held after | peak (VmHWM) |",
            "| --- | ---: | ---: |",
            f"| {sqlite_module.LOAD_CHUNK_ROWS:,} (now) | {cell(chunked, 'after')} "
            f"| {cell(chunked, 'peak')} |",
            f"| all (before) | {cell(whole, 'after')} | {cell(whole, 'peak')} |",
        ]
    )


RESTORE_PEAK_CODE = """
import json, os, sys, time
from pathlib import Path
from bench.durability import rss_of
from app.backends.embedded.collection import Collection
from app.collection_config import CollectionConfig
from app.storage import MemoryStore, StoredCollection, sqlite
import numpy as np
store = sqlite.SQLiteStore(Path(sys.argv[1]))
[stored] = store.load()
store.close()
config = CollectionConfig.from_dict(stored.config)
few = stored.documents.select(np.arange(1000))  # the kernels loaded from numba's cache
Collection("warm", config, MemoryStore()).restore(
    StoredCollection("warm", stored.config, few, {}, len(few))
)
Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")  # VmHWM from here on
before = rss_of(os.getpid())["VmRSS"]
collection = Collection("default", config, MemoryStore())
started = time.perf_counter()
collection.restore(stored)
seconds = time.perf_counter() - started
memory = rss_of(os.getpid())
print(json.dumps(
    {"before": before, "after": memory["VmRSS"], "peak": memory["VmHWM"], "seconds": seconds}
))
"""


def restore_peaks(documents: int, runs: int, baseline: Path) -> str:
    """``Collection.restore`` of ``documents`` loaded from SQLite (random fingerprints, no
    texts), each run in a fresh process, with this tree's code and with the code checked
    out at ``baseline`` (a git worktree), alternated: the memory held after and the peak
    above the RSS before the restore (the load's own peak left out: VmHWM reset), in
    bytes a document. Medians (min-max) of ``runs``."""
    results: dict[str, list[dict[str, int]]] = {"now": [], "baseline": []}
    with tempfile.TemporaryDirectory(prefix="neardup-restore-") as directory:
        database = Path(directory) / DATABASE_FILE
        build_database(database, documents, seed=7)
        trees = (("now", REPO_ROOT), ("baseline", baseline))
        for _, tree in trees:  # numba's cache filled for each tree first
            subprocess.run(
                [sys.executable, "-c", RESTORE_PEAK_CODE, str(database)],
                capture_output=True, text=True, check=True, cwd=tree,
            )  # fmt: skip
        for _ in range(runs):
            for name, tree in trees:
                done = subprocess.run(
                    [sys.executable, "-c", RESTORE_PEAK_CODE, str(database)],
                    capture_output=True, text=True, check=True, cwd=tree,
                )  # fmt: skip
                results[name].append(json.loads(done.stdout.splitlines()[-1]))

    def cell(name: str, key: str) -> str:
        values = [(r[key] - r["before"]) / documents for r in results[name]]
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    def seconds(name: str) -> str:
        values = [r["seconds"] for r in results[name]]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    return "\n".join(
        [
            f"`Collection.restore` of {documents:,} documents, {runs} runs each, "
            "B/document above the RSS before it:",
            "",
            "| code | held after | peak (VmHWM) | seconds |",
            "| --- | ---: | ---: | ---: |",
            *(
                f"| {name} | {cell(name, 'after')} | {cell(name, 'peak')} | {seconds(name)} |"
                for name, _ in trees
            ),
        ]
    )


def trim_profile(text: str) -> str:
    """pstats output from its column header on, paths shortened to the repository."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith("ncalls"):
            lines = lines[number:]
            break
    return "\n".join(line.replace(str(REPO_ROOT) + "/", "") for line in lines if line.strip())


def startup_table(result: Startup) -> str:
    n = result.documents
    healthz = "n/a" if result.healthz_seconds is None else f"{result.healthz_seconds:.1f}"
    verdict = "met" if result.ready_seconds <= STARTUP_TARGET_SECONDS else "MISSED"
    rows = [
        [
            "documents in the database",
            f"{n:,} (`default`; the server's stats say {result.stats.get('documents', -1):,})",
        ],
        [
            "database size (db + wal)",
            f"{megabytes(result.database_bytes)} ({result.database_bytes / n:,.0f} B/doc)",
        ],
        ["written directly with SQLiteStore in", f"{result.build_seconds:.1f} s"],
        ["process start -> /healthz 200", f"{healthz} s"],
        [
            "process start -> /readyz 200",
            f"**{result.ready_seconds:.1f} s** "
            f"(target <= {STARTUP_TARGET_SECONDS:.0f} s: {verdict})",
        ],
        ["RSS when ready", f"{megabytes(result.rss)} ({result.rss / n:,.0f} B/doc)"],
        [
            "peak RSS (VmHWM) by then",
            f"{megabytes(result.peak_rss)} ({result.peak_rss / n:,.0f} B/doc)",
        ],
        [
            "RSS above an empty server",
            f"{megabytes(result.rss - result.empty_rss)} "
            f"({(result.rss - result.empty_rss) / n:,.0f} B/doc; "
            f"empty server: {megabytes(result.empty_rss)})",
        ],
        ["index_bytes (service's own count)", f"{megabytes(result.stats.get('index_bytes', 0))}"],
    ]
    phases = [
        ["SQLiteStore(path): open + PRAGMA quick_check", f"{result.open_seconds:.2f}"],
        ["SQLiteStore.load()", f"{result.load_seconds:.2f}"],
        ["Collection.restore() (publish + forced merge)", f"{result.restore_seconds:.2f}"],
        [
            "sum",
            f"{result.open_seconds + result.load_seconds + result.restore_seconds:.2f}",
        ],
    ]
    return "\n\n".join(
        [
            markdown_table(["start-up", "value"], rows),
            "Phases timed in the benchmark process (same files, warm page cache):",
            markdown_table(["phase", "seconds"], phases, ["left", "right"]),
        ]
    )


# ---------------------------------------------------------------------- --empty-start

STORY = (
    "OPEC ministers agreed on Monday to cut crude oil output by 1.5 mln barrels a day from "
    "April, sending prices sharply higher in London and New York."
)
FIRST_REQUESTS: list[tuple[str, dict[str, object]]] = [
    ("documents", {"text": STORY}),
    ("documents", {"text": "石油输出国组织部长周一同意从四月起每天减产一百五十万桶原油。"}),
    ("documents/batch", {"documents": [{"text": STORY + " Again."}, {"text": "Short."}]}),
    ("search", {"text": STORY}),
    ("search", {"text": f"<p>{STORY}</p>", "html": True}),
]


def seconds(value: float) -> str:
    return f"{value:.2f}"


def import_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import app.cli"], check=True)
    return time.perf_counter() - started


def numba_warm_up(cache: Path) -> float:
    started = time.perf_counter()
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    subprocess.run([neardup_command(), "warm-up"], check=True, env=environment)
    return time.perf_counter() - started


def start_once(scratch: Path, cache: Path) -> tuple[float, float, int]:
    """(seconds to ready, seconds of the first requests, kernels compiled) of one start."""
    root = Path(tempfile.mkdtemp(dir=scratch))
    server = Server(
        root / "data",
        NUMBA_CACHE_DIR=str(cache),
        NUMBA_DEBUG_CACHE="1",
        NEARDUP_LOG_LEVEL="warning",
    )
    started = time.perf_counter()
    try:
        server.start()
        ready = time.perf_counter() - started
        started = time.perf_counter()
        with httpx.Client(base_url=f"{server.url}/v1/collections/default", timeout=120) as client:
            for path, body in FIRST_REQUESTS:
                client.post(f"/{path}", json=body).raise_for_status()
        first_requests = time.perf_counter() - started
        server.stop()
        compiled = sum("[cache] data saved" in line for line in server.output_lines())
    finally:
        server.kill()
    return ready, first_requests, compiled


def measure_empty_start(
    runs: int, scratch: Path, cache: Path, before_each: Callable[[], None]
) -> tuple[Timing, Timing, list[int]]:
    readies, requests, compiled = [], [], []
    for run in range(runs):
        before_each()
        ready, first, kernels = start_once(scratch, cache)
        print(
            f"  run {run + 1}: ready in {ready:.2f} s, first requests {first:.2f} s, "
            f"{kernels} kernel versions compiled",
            file=sys.stderr,
        )
        readies.append(ready)
        requests.append(first)
        compiled.append(kernels)
    return spread(readies), spread(requests), compiled


def empty_start(runs: int) -> str:
    """--empty-start: the report of ``runs`` starts each way (see the module's docstring)."""
    with tempfile.TemporaryDirectory(prefix="neardup-startup-") as directory:
        scratch = Path(directory)
        cache = scratch / "numba-cache"
        imports = spread([import_seconds() for _ in range(runs)])

        print("no cache (emptied before each run)", file=sys.stderr)
        cold = measure_empty_start(runs, scratch, cache, lambda: shutil.rmtree(cache, True))

        shutil.rmtree(cache, ignore_errors=True)
        set_up = numba_warm_up(cache)
        print(f"after the set-up (neardup warm-up: {set_up:.1f} s)", file=sys.stderr)
        warm = measure_empty_start(runs, scratch, cache, lambda: None)

    rows = [
        [name, format_spread(ready, seconds), format_spread(first, seconds), str(max(kernels))]
        for name, (ready, first, kernels) in (("no cache (before)", cold), ("after set-up", warm))
    ]
    report = "\n\n".join(
        [
            f"Start-up of `neardup serve` on an empty data directory; {cpu_model()}; "
            f"median (min-max) of {runs} runs, seconds.",
            markdown_table(
                ["numba cache", "spawn to /readyz 200", "first 5 requests", "compiled"],
                rows,
                ["left", "right", "right", "right"],
            ),
            f"`neardup warm-up` (the set-up step, compiling into an empty cache): "
            f"{set_up:.1f} s. Importing the server's modules: "
            f"{format_spread(imports, seconds)} s.",
        ]
    )
    return report


# ---------------------------------------------------------------------- main


def environment_summary() -> str:
    model = cpu_model_name()
    temp = Path(tempfile.gettempdir())
    filesystem = "?"
    best = ""
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, kind = line.split()[:3]
        if str(temp).startswith(mount) and len(mount) > len(best):
            best, filesystem = mount, f"{kind} on {device}"
    code = "?"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        git = ["git", "-C", str(REPO_ROOT)]
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, check=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "app"], capture_output=True, check=True
        ).stdout.decode()
        changed = [line[3:] for line in dirty.splitlines()]
        code = head.stdout.decode().strip() + (
            f" with uncommitted changes to {', '.join(changed)}" if changed else ""
        )
    return (
        f"Code: {code}. "
        f"{model}, {os.cpu_count()} cores, nothing pinned: the client threads run on the same "
        f"machine as the server and compete with it for the cores. Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; data in {temp} "
        f"({filesystem})."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per measurement")
    parser.add_argument("--startup-docs", type=int, help="documents for the start-up part")
    parser.add_argument("--skip-inserts", action="store_true", help="only the start-up part")
    parser.add_argument("--skip-startup", action="store_true", help="only the insert part")
    parser.add_argument(
        "--empty-start",
        action="store_true",
        help="only the start-up on an empty data directory, with and without numba's cache "
        "(bench/results/startup.md)",
    )
    parser.add_argument("--runs", type=int, default=5, help="starts each way of --empty-start (5)")
    parser.add_argument(
        "--load-peak",
        type=int,
        metavar="N",
        help="only load()'s memory on N documents, chunked and whole, --runs each",
    )
    parser.add_argument(
        "--restore-peak",
        type=int,
        metavar="N",
        help="only Collection.restore's memory on N documents, this tree against --baseline",
    )
    parser.add_argument(
        "--baseline", type=Path, help="a git worktree of the code to compare with (--restore-peak)"
    )
    arguments = parser.parse_args(argv)
    if arguments.restore_peak:
        report = restore_peaks(arguments.restore_peak, arguments.runs, arguments.baseline)
        print(report)
        print(f"written to {write_result('restore_peak.md', report + chr(10))}", file=sys.stderr)
        return
    if arguments.load_peak:
        report = load_peaks(arguments.load_peak, arguments.runs)
        print(report)
        print(f"written to {write_result('load_peak.md', report + chr(10))}", file=sys.stderr)
        return
    if arguments.empty_start:
        report = empty_start(arguments.runs)
        print(report)
        print(f"written to {write_result('startup.md', report + chr(10))}", file=sys.stderr)
        return
    plan = QUICK_PLAN if arguments.quick else FULL_PLAN
    if arguments.startup_docs:
        plan = dataclasses.replace(plan, startup_docs=arguments.startup_docs)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", file=sys.stderr, flush=True)

    loads = [f"{os.getloadavg()[0]:.1f} at the start"]
    sections = [
        "# Durability: insert throughput by synchronous mode, start-up at scale",
        environment_summary(),
    ]
    if not arguments.skip_inserts:
        log("inserts")
        inserts = measure_inserts(plan, log)
        sections += [
            "## Inserts",
            f"Documents: {DOC_CHARS:,} characters each, from {inserts.source}; one word "
            "of each replaced by a random token. Each run: a fresh data dir and server "
            f"(log level warning), up to {plan.max_docs:,} documents or "
            f"{plan.max_seconds:.0f} s after a warm-up, request bodies serialised in "
            "advance; batch 1 posts to /documents from 8 threads, 16 and 256 post to "
            "/documents/batch from 2, each thread with its own httpx.Client. Latency is "
            "per request, the median over runs of each run's percentile. fsyncs: "
            "fsync + fdatasync syscalls of the server during the timed part, counted with "
            "`perf stat` tracepoints (n/a where perf cannot). dups: documents answered "
            "with a duplicate_of.",
            insert_tables(inserts),
            "changes / commits: changes handed to SQLiteStore's writer thread and the "
            "transactions it committed them in, counted by a subclass of SQLiteStore "
            "(in-process only: the server does not expose it). x memory: throughput "
            f"relative to the memory store at the same batch size. In process: up to "
            f"{plan.inprocess_docs:,} documents or {plan.inprocess_seconds:.0f} s per run, "
            "one TestClient shared by the threads.",
        ]
        empty_rss = inserts.empty_server_rss
        loads.append(f"{os.getloadavg()[0]:.1f} after the inserts")
    else:
        empty_rss = empty_server_rss()
    if not arguments.skip_startup:
        count = plan.startup_docs
        log(f"start-up with {count:,} documents")
        startup = measure_startup(plan, log, empty_rss)
        sections += [
            f"## Start-up with {count:,} documents",
            "Random fingerprints (simhash, 128 MinHash values, 128-bit exact hash), ids "
            "`d<i>`, each document its own cluster, no metadata; the server is timed from "
            "Popen to the first 200 of each endpoint (polled every 20 ms / 50 ms).",
            startup_table(startup),
        ]
        if startup.profile:
            sections += [
                "cProfile of `Collection.restore` (a second, profiled run; by own time):",
                "```\n" + startup.profile + "\n```",
            ]
        loads.append(f"{os.getloadavg()[0]:.1f} after the start-up part")
    sections.append(
        f"1-minute load average: {', '.join(loads)} (server and clients together account "
        f"for up to about 2 of it; more means other processes shared the "
        f"{os.cpu_count()} cores). "
        f"Total benchmark time: {time.perf_counter() - started:.0f} s."
    )
    report = "\n\n".join(sections) + "\n"
    print(report)
    path = write_result("durability.md", report)
    log(f"written to {path}")


if __name__ == "__main__":
    main()
