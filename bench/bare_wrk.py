"""neardup under wrk: against a bare FastAPI app (single inserts and search), or search
alone at growing index sizes (``--by-size``).

    .venv/bin/python -m bench.bare_wrk [--preload 20000] [--duration 10] [--runs 3]
                                       [--clients 16] [--modes pinned,unpinned]
                                       [--workloads search,insert] [--markdown FILE]
                                       [--py-spy [--py-spy-duration 20]]
    .venv/bin/python -m bench.bare_wrk --by-size --count 1000000 [--clients 16]
                                       [--duration 20] [--runs 3] [--sizes 100000,1000000]
                                       [--server neardup|peer] [--no-pin] [--plot]

The measurement of issue 11. Starts ``neardup serve`` (a temporary data directory,
NEARDUP_SYNCHRONOUS=FULL, NEARDUP_LOG_LEVEL=info, its default) and bench/bare_app.py (the
same bodies validated by the same pydantic models, answers of the same shapes, no work),
both under uvicorn with uvloop, httptools and one worker, and preloads neardup with
``--preload`` documents ``pre-{i}`` (3 KB varied Reuters, devkit/documents.py, batches of
256). Then, for each workload, for each mode, ``--runs`` times neardup and the bare app in
turn, ``wrk -t2 -c<clients> -d<duration>`` after an unrecorded warm-up of each:

- search: POST /v1/collections/default/search, 3 KB bodies cycling through 512 texts (a
  fifth near-duplicates of preloaded documents; devkit/wrk.py's, as ``--by-size``), at exactly
  ``--preload`` documents (searches store nothing and run before the inserts);
- insert: POST /v1/collections/default/documents, one document per request, no id, a
  distinct ~3 KB text every request: "wrk run <r> thread <t> request <n>" and then phrases
  of 8 words (drawn as often as the corpus uses them) picked at random by the Lua script,
  so that no two texts are equal or near-duplicates (the report checks that neardup found
  no duplicate).

Modes: ``pinned`` puts each server (every thread) on CPU 0 and wrk on CPU 1; ``unpinned``
leaves all three free. The machine may be shared: each recorded run waits until the rest
of the machine is quiet (under ``--quiet`` cores for a second) and is measured again when
other processes took more than ``--max-other`` cores during it; where it never is quiet,
``--nice -20`` (as root) runs the servers, wrk and py-spy ahead of everything else.
Reported per workload and mode: medians over runs of requests/s and of p50 / p99 latency
(wrk's histogram), neardup / bare of the median rates, the issue's targets, server and wrk
CPU (a share of one core), requests per second of server CPU time (what a busy machine
changes least) and its ratio, the most other processes took during a run, errors (non-2xx
answers and socket errors). The report is printed and written, with every run, to
bench/results/bare_wrk.md and .json; ``--markdown FILE`` writes it there too.

``--py-spy`` then profiles neardup (pinned; py-spy on wrk's CPU, pausing the server for
each sample so that no stack is read half-changed) under each workload at 100 Hz, one
wrk run of ``--py-spy-duration`` seconds per flavour: ``--gil`` (the thread holding the
GIL: where a GIL-bound server's time goes; with the share of the time the GIL was held,
each group's share becomes microseconds per request) and ``--idle`` (every thread,
waiting or not: where requests and threads wait). Raw profiles go to
bench/results/py-spy-<workload>-<flavour>.txt (collapsed stacks, which speedscope and
flamegraph.pl read) and the report gets their summaries: own time by group (waits by the
frame waited in; otherwise the innermost frame that belongs to a group: FastAPI and
starlette, middleware, logging, pydantic, JSON, fingerprinting, index search, ...), the
share of samples under each group, the top functions by own and by cumulative samples,
and for ``--idle`` the mean number of threads in each state.

``--by-size`` (search throughput by index size): starts ``neardup serve`` (log level
warning) on a temporary data directory, or with ``--server peer`` the peer of
bench/service.py (bench/peer_app.py), preloads documents ``pre-{i}`` (3 KB varied Reuters,
devkit/documents.py) in batches of 256 up to each size, and at each size runs ``wrk`` with
``--clients`` connections on 2 threads for ``--duration`` seconds (20), ``--runs`` times:
POST /v1/collections/default/search with 3 KB bodies cycling through 512 pre-made texts (a
fifth near-duplicates of preloaded documents), and GET /healthz as the framework's own
ceiling in the same run. The server is pinned to CPU 0 and wrk to CPU 1 (``--no-pin`` to
leave both free). Reports medians over runs of requests/s and p50 / p99 latency (wrk's own
histogram), the server's resident memory per document, and writes
bench/results/search_wrk-<server>.md and .json (``--plot``: docs/search-wrk-<server>.png).

Needs ``wrk`` on the PATH (``apt-get install wrk``) and for ``--py-spy`` py-spy
(``.venv/bin/pip install py-spy``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from devkit.documents import load_corpus
from devkit.harness import (
    REPO_ROOT,
    RESULTS_DIR,
    Align,
    add_quiet_arguments,
    busy_cpu_seconds,
    context_switches,
    cpu_model,
    cpu_times,
    log,
    machine_summary,
    markdown_table,
    pin_process,
    priority,
    rss_bytes,
    wait_for_quiet,
    write_result,
)
from devkit.preload import preload
from devkit.py_spy import PROFILE_FLAVOURS, PY_SPY_FLAGS, py_spy, read_collapsed, summarise
from devkit.server import Running, bare_app, neardup, peer
from devkit.wrk import (
    COLLECTION,
    WrkRun,
    median_run,
    run_wrk,
    write_insert_script,
    write_search_script,
)

SERVER_CPU, CLIENT_CPU = 0, 1
WARMUP_SECONDS = 3
RETRIES = 5  # of a run disturbed by other processes
PY_SPY_RATE = 100  # samples per second: py-spy keeps up with 40 threads on a shared core
# Issue 11: neardup / bare at least this, and the insert p99 at most this, 16 connections.
TARGET_RATIO = {"insert": 0.5, "search": 0.6}
TARGET_INSERT_P99_MS = 25.0
RIGHT: Align = "right"


@dataclass
class Sample:
    """One wrk run against one server, with the CPU both used (a share of one core)."""

    server: str
    mode: str
    wrk: WrkRun
    server_cpu: float
    server_system_cpu: float  # the kernel's part of server_cpu
    server_switches: float  # context switches of the server's threads per request
    client_cpu: float
    other_cpu: float  # the rest of the machine (other processes, steal) in the meantime


@dataclass
class Workload:
    name: str
    script: Path
    samples: list[Sample] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)  # flavour -> summary (markdown)


# ---------------------------------------------------------------------------- running


class Bench:
    def __init__(self, arguments: argparse.Namespace, servers: list[Running]) -> None:
        self.arguments = arguments
        self.servers = servers
        self.wrk_runs = 0  # every insert run gets its own texts

    def pin(self, pinned: bool) -> None:
        cpus = {SERVER_CPU} if pinned else set(range(os.cpu_count() or 1))
        for server in self.servers:
            pin_process(server.pid, cpus)

    def wrk(self, server: Running, workload: Workload, mode: str, seconds: float) -> Sample:
        self.wrk_runs += 1
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy_before, server_before = busy_cpu_seconds(), cpu_times(server.pid)
        switches_before = context_switches(server.pid)
        began = time.perf_counter()
        result = run_wrk(
            server.url,
            clients=self.arguments.clients,
            duration=seconds,
            script=workload.script,
            script_args=[str(self.wrk_runs)],
            cpu=CLIENT_CPU if mode == "pinned" else None,
        )
        elapsed = time.perf_counter() - began
        busy = busy_cpu_seconds() - busy_before
        user, system = (b - a for a, b in zip(server_before, cpu_times(server.pid), strict=True))
        switches = context_switches(server.pid) - switches_before
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
        requests = max(1.0, result.requests_per_second * elapsed)
        return Sample(
            server.name,
            mode,
            result,
            server_cpu=(user + system) / elapsed,
            server_system_cpu=system / elapsed,
            server_switches=switches / requests,
            client_cpu=client / elapsed,
            other_cpu=max(0.0, busy - user - system - client) / elapsed,
        )

    def quiet_wrk(self, server: Running, workload: Workload, mode: str) -> Sample:
        """A recorded run, when the machine is quiet; again (up to RETRIES times) when
        other processes took more than --max-other cores during it."""
        for attempt in range(RETRIES):
            self.wait_for_quiet()
            sample = self.wrk(server, workload, mode, self.arguments.duration)
            if sample.other_cpu <= self.arguments.max_other:
                return sample
            log(
                f"{workload.name} {mode} {server.name}: other processes took "
                f"{sample.other_cpu:.0%} of a core, measuring again ({attempt + 1})"
            )
        self.wait_for_quiet()
        return self.wrk(server, workload, mode, self.arguments.duration)

    def wait_for_quiet(self) -> None:
        """Until the rest of the machine stays under --quiet cores for a second (at most
        --quiet-timeout seconds): other people's test runs would take the servers' CPU."""
        wait_for_quiet(self.arguments.quiet, self.arguments.quiet_timeout)

    def measure(self, workload: Workload) -> None:
        for mode in self.arguments.modes:
            self.pin(mode == "pinned")
            for server in self.servers:
                self.wrk(server, workload, mode, WARMUP_SECONDS)
            for run in range(self.arguments.runs):
                for server in self.servers:
                    sample = self.quiet_wrk(server, workload, mode)
                    workload.samples.append(sample)
                    log(
                        f"{workload.name} {mode} run {run + 1}/{self.arguments.runs} "
                        f"{server.name}: {sample.wrk.requests_per_second:,.0f} req/s, p50 "
                        f"{sample.wrk.p50_ms:.1f} / p99 {sample.wrk.p99_ms:.1f} ms, server CPU "
                        f"{sample.server_cpu:.0%} (sys {sample.server_system_cpu:.0%}), "
                        f"{sample.server_switches:.1f} switches/req, "
                        f"wrk CPU {sample.client_cpu:.0%}, other CPU "
                        f"{sample.other_cpu:.0%}, "
                        f"{sample.wrk.errors} errors"
                    )

    def profile(self, server: Running, workload: Workload) -> None:
        """One pinned wrk run per py-spy flavour; summaries into workload.profiles. py-spy
        runs on wrk's CPU, so that it takes no time from the server's."""
        self.pin(True)
        seconds = self.arguments.py_spy_duration
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        for flavour, flags in PROFILE_FLAVOURS.items():
            output = RESULTS_DIR / f"py-spy-{workload.name}-{flavour}.txt"
            messages = output.with_suffix(".log")
            self.wait_for_quiet()
            spy = py_spy(
                server.pid,
                seconds,
                output,
                (*flags, *PY_SPY_FLAGS),
                "raw",
                PY_SPY_RATE,
                messages,
                nonblocking=False,
            )
            pin_process(spy.pid, {CLIENT_CPU})
            time.sleep(0.5)  # py-spy attaches; wrk outlasts it
            sample = self.wrk(server, workload, "pinned", seconds + 1)
            spy.wait(60)
            problems = re.findall(r"Errors: [1-9]\d*|behind in sampling", messages.read_text())
            log(
                f"py-spy {workload.name} {flavour}: {output.name}, "
                f"{sample.wrk.requests_per_second:,.0f} req/s under the profiler, server CPU "
                f"{sample.server_cpu:.0%}, other CPU {sample.other_cpu:.0%}"
            )
            summary = summarise(
                read_collapsed(output),
                flavour,
                seconds,
                PY_SPY_RATE,
                sample.wrk.requests_per_second,
                sample.server_cpu,
            )
            if problems:
                summary += f"\n\npy-spy said: {', '.join(sorted(set(problems)))}."
            workload.profiles[flavour] = summary


# ---------------------------------------------------------------------------- report


def report(arguments: argparse.Namespace, workloads: list[Workload], notes: list[str]) -> str:
    header = [
        *("workload", "mode", "neardup req/s", "p50 / p99 ms", "bare req/s", "p50 / p99 ms"),
        *("neardup / bare", "target", "server CPU (sys) nd / bare", "req per CPU-s nd / bare"),
        *("per CPU-s ratio", "switches / req nd / bare", "wrk CPU nd / bare"),
        *("other CPU (max)", "errors"),
    ]
    rows = []
    for workload in workloads:
        for mode in arguments.modes:
            near, bare = (
                [s for s in workload.samples if s.server == server and s.mode == mode]
                for server in ("neardup", "bare")
            )
            median_near = median_run([s.wrk for s in near])
            median_bare = median_run([s.wrk for s in bare])
            ratio = median_near.requests_per_second / median_bare.requests_per_second
            per_cpu = [per_cpu_second(samples) for samples in (near, bare)]
            target = f">= {TARGET_RATIO[workload.name]}x"
            if workload.name == "insert":
                target += f", p99 <= {TARGET_INSERT_P99_MS:g} ms"
            rows.append(
                [
                    workload.name,
                    mode,
                    f"{median_near.requests_per_second:,.0f}",
                    f"{median_near.p50_ms:.1f} / {median_near.p99_ms:.1f}",
                    f"{median_bare.requests_per_second:,.0f}",
                    f"{median_bare.p50_ms:.1f} / {median_bare.p99_ms:.1f}",
                    f"{ratio:.2f}x",
                    target,
                    f"{server_cpu(near)} / {server_cpu(bare)}",
                    f"{per_cpu[0]:,.0f} / {per_cpu[1]:,.0f}",
                    f"{per_cpu[0] / per_cpu[1]:.2f}x",
                    f"{median_of(near, 'server_switches'):.1f} / "
                    f"{median_of(bare, 'server_switches'):.1f}",
                    f"{median_of(near, 'client_cpu'):.0%} / {median_of(bare, 'client_cpu'):.0%}",
                    f"{max(s.other_cpu for s in near + bare):.0%}",
                    str(median_near.errors + median_bare.errors),
                ]
            )
    lines = [
        "# neardup against a bare FastAPI app (wrk)",
        "",
        cpu_model(),
        "",
        f"wrk -t2 -c{arguments.clients} -d{arguments.duration}s, medians of {arguments.runs} "
        f"runs; pinned: each server on CPU {SERVER_CPU}, wrk on CPU {CLIENT_CPU}. neardup: "
        "NEARDUP_SYNCHRONOUS=FULL, log level info; search at "
        f"{arguments.preload:,} documents"
        + (f"; servers, wrk and py-spy at nice {arguments.nice}." if arguments.nice else "."),
        "",
        markdown_table(header, rows, ["left", "left", *[RIGHT] * (len(header) - 2)]),
        "",
        *notes,
    ]
    disturbed = [s for w in workloads for s in w.samples if s.other_cpu > arguments.max_other]
    if disturbed:
        lines.append(
            f"{len(disturbed)} of the recorded runs had other processes above "
            f"{arguments.max_other:g} cores ({RETRIES} attempts each): see bare_wrk.json."
        )
    for workload in workloads:
        for flavour, summary in workload.profiles.items():
            flags = " ".join((*PROFILE_FLAVOURS[flavour], *PY_SPY_FLAGS))
            lines += ["", f"## py-spy: {workload.name}, {flavour} ({flags})", "", summary]
    return "\n".join(lines)


def per_cpu_second(samples: list[Sample]) -> float:
    """Median requests per second of the server's CPU time: what a busy machine changes
    least (a server that gets half a core answers half as many requests per second)."""
    return statistics.median(s.wrk.requests_per_second / s.server_cpu for s in samples)


def server_cpu(samples: list[Sample]) -> str:
    total, system = median_of(samples, "server_cpu"), median_of(samples, "server_system_cpu")
    return f"{total:.0%} ({system:.0%})"


def median_of(samples: list[Sample], figure: str) -> float:
    return float(statistics.median(getattr(s, figure) for s in samples))


def collection_stats(url: str) -> dict[str, int]:
    import httpx

    stats: dict[str, int] = httpx.get(url + COLLECTION, trust_env=False).json()["stats"]
    return stats


def fsync_ms(directory: Path, count: int = 40) -> float:
    """Median time of a 4 KB write and fsync in ``directory`` (the servers' disk): what
    every durable commit waits for, and what other jobs on the machine slow down."""
    path = directory / "fsync-probe"
    times = []
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(descriptor, b"\0" * 4096)
            os.fsync(descriptor)
            times.append(time.perf_counter() - started)
    finally:
        os.close(descriptor)
        path.unlink()
    return statistics.median(times) * 1000


def commit_totals(url: str) -> tuple[float, float, float]:
    """(commits, documents committed, seconds committing) from neardup's /metrics."""
    import httpx

    values = {}
    for line in httpx.get(url + "/metrics", trust_env=False).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("neardup_commit_seconds_count", "neardup_commit_documents_sum",
                    "neardup_commit_seconds_sum"):  # fmt: skip
            values[name] = float(value)
    return (
        values.get("neardup_commit_seconds_count", 0.0),
        values.get("neardup_commit_documents_sum", 0.0),
        values.get("neardup_commit_seconds_sum", 0.0),
    )


@contextmanager
def servers(arguments: argparse.Namespace) -> Iterator[list[Running]]:
    with (
        neardup(synchronous="FULL", log_level="info") as near,
        bare_app(log_level="info") as bare,
    ):
        yield [near, bare]


# ---------------------------------------------------------------------------- --by-size

SIZE_TARGET_RPS, SIZE_TARGET_P99_MS = 1500, 25.0  # issue 6, at 1M documents


@dataclass
class SizePoint:
    documents: int
    rss_bytes_per_document: float
    preload_docs_per_second: float  # batches of 256, 2 clients, durable (FULL)
    search: list[WrkRun]
    healthz: list[WrkRun]


def plot_by_size(points: list[SizePoint], arguments: argparse.Namespace) -> Path:
    """Search requests/s and p50 / p99 latency against the index size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [point.documents for point in points]
    medians = [median_run(point.search) for point in points]
    figure, (rate_axis, latency_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    rate_axis.plot(sizes, [m.requests_per_second for m in medians], marker="o", label="search")
    rate_axis.axhline(SIZE_TARGET_RPS, color="grey", linestyle="--", linewidth=1, label="target")
    rate_axis.set_ylabel("requests per second")
    rate_axis.set_ylim(bottom=0)
    latency_axis.plot(sizes, [m.p50_ms for m in medians], marker="o", label="p50")
    latency_axis.plot(sizes, [m.p99_ms for m in medians], marker="o", label="p99")
    latency_axis.axhline(
        SIZE_TARGET_P99_MS, color="grey", linestyle="--", linewidth=1, label="p99 target"
    )
    latency_axis.set_ylabel("latency, ms")
    latency_axis.set_ylim(bottom=0)
    for axis in (rate_axis, latency_axis):
        axis.set_xscale("log")
        axis.set_xlabel("documents indexed")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle(
        f"{arguments.server}: search by a 3 KB text, wrk with {arguments.clients} connections, "
        "server on one core"
    )
    figure.tight_layout()
    path = REPO_ROOT / "docs" / f"search-wrk-{arguments.server}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def search_by_size(arguments: argparse.Namespace) -> None:
    """--by-size: search with wrk at each size on the way to --count, one server."""
    sizes = sorted({int(s) for s in (arguments.sizes or "").split(",") if s} | {arguments.count})

    corpus = load_corpus()
    rng = random.Random(0)
    root = Path(tempfile.mkdtemp(prefix="neardup-wrk-"))
    wrk = {
        "clients": arguments.clients,
        "duration": arguments.duration,
        "cpu": CLIENT_CPU if arguments.pin else None,
    }
    points: list[SizePoint] = []
    try:
        with neardup() if arguments.server == "neardup" else peer() as server:
            if arguments.pin:
                os.sched_setaffinity(server.pid, {SERVER_CPU})
            loaded = 0
            for size in sizes:
                log(f"{arguments.server}: preloading {size - loaded:,} documents")
                loading = preload(
                    server.url,
                    size - loaded,
                    start=loaded,
                    concurrency=2,
                    corpus=corpus,
                    progress=False,
                )
                loaded = size
                script = write_search_script(root, size, corpus, rng)
                rss = rss_bytes(server.pid) / size
                search, healthz = [], []
                for run in range(arguments.runs):
                    log(f"wrk at {size:,}: run {run + 1}/{arguments.runs}")
                    search.append(run_wrk(server.url, script=script, **wrk))
                    healthz.append(run_wrk(server.url + "/healthz", **wrk))
                points.append(SizePoint(size, rss, loading.per_second, search, healthz))
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    for point in points:
        search, healthz = median_run(point.search), median_run(point.healthz)
        rows.append(
            [
                f"{point.documents:,}",
                f"{search.requests_per_second:,.0f}",
                f"{search.p50_ms:.1f} / {search.p99_ms:.1f}",
                f"{healthz.requests_per_second:,.0f}",
                f"{search.requests_per_second / healthz.requests_per_second:.2f}",
                f"{point.rss_bytes_per_document:,.0f}",
                f"{point.preload_docs_per_second:,.0f}",
                str(search.errors + healthz.errors),
            ]
        )
    header = [
        "documents",
        "search req/s",
        "search p50 / p99 ms",
        "/healthz req/s",
        "search / healthz",
        "RSS B/doc",
        "insert docs/s on the way",
        "errors",
    ]
    report = "\n".join(
        [
            f"# Search with wrk: {arguments.server}",
            "",
            machine_summary(SERVER_CPU),
            "",
            f"wrk -t2 -c{arguments.clients} -d{arguments.duration}s, medians of "
            f"{arguments.runs} runs; server pinned to CPU {SERVER_CPU}, wrk to CPU {CLIENT_CPU}"
            if arguments.pin
            else "unpinned",
            "",
            markdown_table(header, rows),
        ]
    )
    print(report)
    if arguments.plot:
        log(f"plot: {plot_by_size(points, arguments)}")
    write_result(f"search_wrk-{arguments.server}.md", report)
    write_result(
        f"search_wrk-{arguments.server}.json", json.dumps([asdict(p) for p in points], indent=1)
    )


def against_bare(arguments: argparse.Namespace) -> None:
    """neardup against the bare app: each workload, each mode, --runs times (see above)."""
    corpus = load_corpus()
    rng = random.Random(0)
    root = Path(tempfile.mkdtemp(prefix="neardup-bare-wrk-"))
    scripts = {
        "search": write_search_script(root, arguments.preload, corpus, rng),
        "insert": write_insert_script(root, corpus, rng),
    }
    workloads = [
        Workload(name, script) for name, script in scripts.items() if name in arguments.workloads
    ]
    notes: list[str] = []
    try:
        with priority(arguments.nice), servers(arguments) as running:
            near = running[0]
            log(f"neardup: preloading {arguments.preload:,} documents")
            loading = preload(near.url, arguments.preload, concurrency=2, corpus=corpus)
            notes.append(
                f"Preload: {arguments.preload:,} documents in batches of 256 at "
                f"{loading.per_second:,.0f} docs/s."
            )
            bench = Bench(arguments, running)
            for workload in workloads:
                before = collection_stats(near.url)
                commits_before = commit_totals(near.url)
                disk_before = fsync_ms(root)
                bench.measure(workload)
                if arguments.py_spy:
                    bench.profile(near, workload)
                after = collection_stats(near.url)
                notes.append(
                    f"{workload.name}: neardup held {before['documents']:,} documents before "
                    f"and {after['documents']:,} after; duplicates found "
                    f"{after['duplicates'] - before['duplicates']:,}."
                )
                commits, documents, seconds = (
                    b - a for a, b in zip(commits_before, commit_totals(near.url), strict=True)
                )
                if commits:
                    notes.append(
                        f"{workload.name}: {commits:,.0f} commits of {documents / commits:.1f} "
                        f"documents on average, {seconds / commits * 1000:.2f} ms each; a 4 KB "
                        f"fsync took {disk_before:.2f} ms before and {fsync_ms(root):.2f} ms "
                        "after (median of 40)."
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    text = report(arguments, workloads, notes)
    print(text)
    write_result("bare_wrk.md", text)
    write_result(
        "bare_wrk.json",
        json.dumps([asdict(s) | {"workload": w.name} for w in workloads for s in w.samples]),
    )
    if arguments.markdown is not None:
        arguments.markdown.write_text(text + "\n")


def main() -> None:
    # A plain SIGTERM would skip the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"signal {signum}"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="wrk connections (16)")
    parser.add_argument("--duration", type=int, help="seconds per wrk run (10; 20 with --by-size)")
    parser.add_argument("--runs", type=int, default=3, help="recorded runs per server (3)")
    bare = parser.add_argument_group("neardup against the bare app (the default)")
    bare.add_argument("--preload", type=int, default=20_000, help="documents before search (20000)")
    bare.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=["pinned", "unpinned"],
        help="comma-separated, of pinned and unpinned (default both)",
    )
    bare.add_argument(
        "--workloads",
        type=lambda text: text.split(","),
        default=["search", "insert"],
        help="comma-separated, of search and insert (default both; search runs first)",
    )
    add_quiet_arguments(bare, quiet=0.1, timeout=300, max_other=0.2)
    bare.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the servers, wrk and py-spy at this nice value, their session's autogroup "
        "too (-20 as root on a shared machine: other processes then get little of their CPU)",
    )
    bare.add_argument("--markdown", type=Path, help="also write the report to this file")
    bare.add_argument("--py-spy", action="store_true", help="profile neardup (see above)")
    bare.add_argument("--py-spy-duration", type=int, default=20, help="seconds per profile (20)")
    by_size = parser.add_argument_group("search alone at growing index sizes")
    by_size.add_argument(
        "--by-size",
        action="store_true",
        help="search throughput and latency of one server at each of --sizes up to --count "
        "(bench/results/search_wrk-<server>.md)",
    )
    by_size.add_argument("--count", type=int, default=100_000, help="the last size (100000)")
    by_size.add_argument("--sizes", help="comma-separated sizes measured on the way to --count")
    by_size.add_argument(
        "--no-pin", dest="pin", action="store_false", help="leave the server and wrk unpinned"
    )
    by_size.add_argument("--plot", action="store_true", help="draw docs/search-wrk-<server>.png")
    by_size.add_argument(
        "--server",
        choices=["neardup", "peer"],
        default="neardup",
        help="peer: bench/peer_app.py (datasketch MinHashLSH + simhash.SimhashIndex)",
    )
    arguments = parser.parse_args()
    if arguments.duration is None:
        arguments.duration = 20 if arguments.by_size else 10
    if shutil.which("wrk") is None:
        sys.exit("bench/bare_wrk.py needs wrk on the PATH (apt-get install wrk)")
    if arguments.by_size:
        search_by_size(arguments)
        return
    if set(arguments.modes) - {"pinned", "unpinned"}:
        sys.exit("--modes takes pinned and unpinned")
    against_bare(arguments)


if __name__ == "__main__":
    main()
