"""One command for a load test: start neardup, preload it, run locust, report.

    .venv/bin/python -m loadtest.run --workload mixed --preload 100000 --duration 60

(a) starts ``neardup serve`` on a free port over a temporary data directory (the test
suite's devkit/server.py Server), or uses ``--url`` (loopback addresses only); (b) preloads
``--preload`` documents ``pre-{i}`` through the batch API (devkit/preload.py); (c) runs
locust headless on loadtest/locustfile.py for ``--duration`` seconds with the user class of
``--workload`` (insert: CrawlerUser, search: ReaderUser, mixed: both); (d) prints
requests/s, documents/s, p50/p95/p99 latency and errors from locust's CSV statistics and
writes them to bench/results/loadtest-<workload>.md. Everything is bounded in time: locust
is killed if it outlives its run by two minutes, and the server is stopped with SIGTERM.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from devkit.documents import DEFAULT_CHARS
from devkit.harness import (
    REPO_ROOT,
    Align,
    cpu_model,
    cpu_seconds,
    markdown_table,
    rss_bytes,
    write_result,
)
from devkit.preload import check_loopback, preload
from devkit.server import Server

LOCUSTFILE = REPO_ROOT / "loadtest" / "locustfile.py"
USER_CLASSES = {
    "insert": ["CrawlerUser"],
    "search": ["ReaderUser"],
    "mixed": ["CrawlerUser", "ReaderUser"],
}
LOCUST_GRACE_SECONDS = 120  # locust is killed this long after its run should have ended
DOCUMENTS_PER_REQUEST = re.compile(r"\bx(\d+)$")  # "insert x256"
# Targets of the issue "Performance end to end" (figures at 1M documents, 16 clients).
TARGET_SEARCH_RPS = 1500
TARGET_SEARCH_P99_MS = 25
TARGET_BATCH_DOCS = 8000


@dataclass(frozen=True, slots=True)
class Row:
    """One line of locust's _stats.csv."""

    name: str
    requests: int
    failures: int
    requests_per_second: float
    p50: str
    p95: str
    p99: str
    maximum: str

    @property
    def documents_per_request(self) -> int:
        match = DOCUMENTS_PER_REQUEST.search(self.name)
        return int(match.group(1)) if match else 0

    @property
    def seconds(self) -> float:
        return self.requests / self.requests_per_second if self.requests_per_second else 0.0

    @property
    def documents_per_second(self) -> float:
        if not self.documents_per_request or not self.seconds:
            return 0.0
        return (self.requests - self.failures) * self.documents_per_request / self.seconds


def read_stats(prefix: Path) -> list[Row]:
    path = Path(f"{prefix}_stats.csv")
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return [
            Row(
                name=line["Name"],
                requests=int(line["Request Count"]),
                failures=int(line["Failure Count"]),
                requests_per_second=float(line["Requests/s"]),
                p50=line["50%"],
                p95=line["95%"],
                p99=line["99%"],
                maximum=line["Max Response Time"],
            )
            for line in csv.DictReader(handle)
        ]


def read_failures(prefix: Path) -> list[list[str]]:
    path = Path(f"{prefix}_failures.csv")
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return [
            [line["Method"], line["Name"], line["Error"][:160], line["Occurrences"]]
            for line in csv.DictReader(handle)
        ]


def milliseconds(value: str) -> str:
    try:
        return f"{float(value):,.0f}"
    except ValueError:
        return value


def stats_table(rows: list[Row]) -> str:
    body = [
        [
            row.name,
            f"{row.requests:,}",
            f"{row.failures:,}",
            f"{row.requests_per_second:,.1f}",
            f"{row.documents_per_second:,.0f}" if row.documents_per_request else "-",
            milliseconds(row.p50),
            milliseconds(row.p95),
            milliseconds(row.p99),
            milliseconds(row.maximum),
        ]
        for row in rows
    ]
    total_documents = sum(row.documents_per_second for row in rows if row.name != "Aggregated")
    for line in body:
        if line[0] == "Aggregated":
            line[4] = f"{total_documents:,.0f}" if total_documents else "-"
    headers = ["request", "requests", "errors", "req/s", "docs/s", "p50 ms", "p95 ms"]
    headers += ["p99 ms", "max ms"]
    right: Align = "right"
    return markdown_table(headers, body, ["left", *([right] * 8)])


def target_lines(rows: list[Row], users: int, documents: int) -> list[str]:
    """The issue's targets next to the figures that bear on them."""
    lines = []
    at = f"{documents:,} documents indexed, {users} users; targets are for 1M and 16 clients"
    for row in rows:
        if row.name == "search":
            met = (
                row.requests_per_second >= TARGET_SEARCH_RPS
                and _number(row.p99) <= TARGET_SEARCH_P99_MS
            )
            lines.append(
                f"- search: {row.requests_per_second:,.0f} req/s, p99 {milliseconds(row.p99)} ms "
                f"(target >= {TARGET_SEARCH_RPS:,} req/s with p99 <= {TARGET_SEARCH_P99_MS} ms: "
                f"{'met' if met else 'MISSED'}; {at})"
            )
        if row.name == "insert x256":
            met = row.documents_per_second >= TARGET_BATCH_DOCS
            lines.append(
                f"- batch insert (256): {row.documents_per_second:,.0f} docs/s (target >= "
                f"{TARGET_BATCH_DOCS:,} docs/s sustained: {'met' if met else 'MISSED'}; "
                "in a mixed workload it shares the server with the other requests)"
            )
    return lines


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return float("inf")


@contextmanager
def service(arguments: argparse.Namespace) -> Iterator[tuple[str, int | None]]:
    """(url, pid or None): the --url given, or a neardup started on a temp data dir."""
    if arguments.url:
        check_loopback(arguments.url)
        yield arguments.url.rstrip("/"), None
        return
    root = Path(tempfile.mkdtemp(prefix="neardup-loadtest-", dir=arguments.data_dir))
    server = Server(
        root / "data",
        NEARDUP_SYNCHRONOUS=arguments.synchronous,
        NEARDUP_LOG_LEVEL=arguments.log_level,
    )
    try:
        server.start()
        assert server.process is not None
        print(f"neardup serving on {server.url} (pid {server.process.pid}, data {root})")
        yield server.url, server.process.pid
        print(f"stopping neardup: exit code {server.stop()}")
    finally:
        server.kill()
        if not arguments.keep_data:
            shutil.rmtree(root, ignore_errors=True)


def run_locust(arguments: argparse.Namespace, url: str, prefix: Path, preloaded: int) -> int:
    """Run locust headless, bounded in time; returns its exit code (-9 if it was killed)."""
    users = arguments.users
    command = [
        str(Path(sys.executable).parent / "locust"),
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        str(users),
        "-r",
        str(arguments.spawn_rate or users),
        "-t",
        f"{arguments.duration}s",
        "--host",
        url,
        "--csv",
        str(prefix),
        "--only-summary",
        "--stop-timeout",
        "10",
        "--exit-code-on-error",
        "0",
        *(["--processes", str(arguments.processes)] if arguments.processes > 1 else []),
        *USER_CLASSES[arguments.workload],
    ]
    environment = {
        **os.environ,
        "NEARDUP_LT_PRELOADED": str(preloaded),
        "NEARDUP_LT_DOC_CHARS": str(arguments.doc_chars),
        "NEARDUP_LT_PRELOAD_CHARS": str(arguments.doc_chars),
        "NEARDUP_LT_SEARCH_CHARS": str(arguments.search_chars),
    }
    log_path = Path(f"{prefix}.log")
    print(f"locust: {arguments.workload}, {users} users, {arguments.duration} s; log {log_path}")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,  # its own process group: --processes children go too
        )
        try:
            return process.wait(arguments.duration + LOCUST_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            print(f"locust outlived its run by {LOCUST_GRACE_SECONDS} s and was killed")
            return -9


def first_request_ms(url: str) -> float:
    """Time one search right after start-up; it also warms the service for the run."""
    began = time.perf_counter()
    response = httpx.post(
        f"{url}/v1/collections/default/search",
        json={"text": "warm-up: the first request after /readyz"},
        timeout=120,
        trust_env=False,
    )
    response.raise_for_status()
    return (time.perf_counter() - began) * 1000


def collection_stats(url: str) -> dict[str, int]:
    try:
        response = httpx.get(f"{url}/v1/collections/default", timeout=30, trust_env=False)
        stats: dict[str, int] = response.json()["stats"]
        return stats
    except (httpx.HTTPError, KeyError, ValueError):
        return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(USER_CLASSES), default="mixed")
    parser.add_argument("--users", type=int, default=16, help="locust users (default 16)")
    parser.add_argument("--spawn-rate", type=float, help="users started per second (default all)")
    parser.add_argument("--duration", type=int, default=60, help="seconds of load (default 60)")
    parser.add_argument("--processes", type=int, default=1, help="locust processes (default 1)")
    parser.add_argument("--url", help="an already running service (loopback) instead of a new one")
    parser.add_argument(
        "--preload", type=int, default=20_000, help="documents to preload first (default 20000)"
    )
    parser.add_argument(
        "--preloaded",
        type=int,
        default=0,
        help="with --url: documents pre-0 .. pre-(N-1) already there (made with the same "
        "--doc-chars); --preload adds after them",
    )
    parser.add_argument(
        "--doc-chars",
        type=int,
        default=DEFAULT_CHARS,
        help=f"characters per document (default {DEFAULT_CHARS}; 0: natural story length)",
    )
    parser.add_argument("--search-chars", type=int, default=DEFAULT_CHARS)
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument(
        "--log-level",
        default="warning",
        help="the started server's log level (default warning: no access log line per request)",
    )
    parser.add_argument("--data-dir", help="where the temporary data directory goes")
    parser.add_argument("--keep-data", action="store_true", help="keep the data directory")
    parser.add_argument("--output", type=Path, help="report (default bench/results/loadtest-W.md)")
    arguments = parser.parse_args()
    if arguments.url:
        try:
            check_loopback(arguments.url)
        except (ValueError, OSError) as error:
            sys.exit(f"run: {error}")

    results = REPO_ROOT / "bench" / "results"
    csv_dir = results / "locust"
    csv_dir.mkdir(parents=True, exist_ok=True)
    prefix = csv_dir / arguments.workload
    for stale in csv_dir.glob(f"{arguments.workload}_*.csv"):
        stale.unlink()
    started = time.time()
    with service(arguments) as (url, pid):
        first_ms = first_request_ms(url)
        print(f"first search after start-up: {first_ms:,.0f} ms")
        preloaded = arguments.preloaded
        preload_line = "none"
        if arguments.preload:
            result = preload(url, arguments.preload, start=preloaded, chars=arguments.doc_chars)
            preloaded += arguments.preload
            preload_line = (
                f"{result.documents:,} documents in {result.seconds:.1f} s "
                f"({result.per_second:,.0f} docs/s, batches of 256, 4 clients)"
            )
            print(f"preload: {preload_line}")
        rss_before = rss_bytes(pid) if pid else 0
        cpu_before, wall_before = (cpu_seconds(pid) if pid else 0.0), time.perf_counter()
        code = run_locust(arguments, url, prefix, preloaded)
        server_cpu = (cpu_seconds(pid) - cpu_before) if pid else 0.0
        wall = time.perf_counter() - wall_before
        rss_after = rss_bytes(pid) if pid else 0
        stats = collection_stats(url)

    rows = read_stats(prefix)
    failures = read_failures(prefix)
    documents = stats.get("documents", preloaded)
    lines = [
        f"# Load test: {arguments.workload}",
        "",
        f"- {datetime.fromtimestamp(started, UTC):%Y-%m-%d %H:%M} UTC; {cpu_model()}; "
        f"Python {platform.python_version()}",
        f"- server: {'--url ' + url if arguments.url else 'neardup serve (started here)'}, "
        f"NEARDUP_SYNCHRONOUS={arguments.synchronous}, log level {arguments.log_level}",
        f"- locust: {arguments.users} users ({', '.join(USER_CLASSES[arguments.workload])}), "
        f"{arguments.duration} s, {arguments.processes} process(es), FastHttpUser, no wait; "
        f"exit code {code}",
        f"- documents: {arguments.doc_chars or 'natural-length'} characters, searches "
        f"{arguments.search_chars}; preload: {preload_line}",
        f"- index at the end: {stats or 'unknown'}; the first search after start-up (a "
        f"warm-up, not in the figures) took {first_ms:,.0f} ms",
    ]
    if pid:
        lines.append(
            f"- server process: CPU {server_cpu / wall:.0%} of one core during the run; RSS "
            f"{rss_before / 2**20:,.0f} MiB before, {rss_after / 2**20:,.0f} MiB after"
        )
    lines += ["", stats_table(rows) if rows else "no statistics: see the locust log", ""]
    lines += target_lines(rows, arguments.users, documents)
    if failures:
        lines += ["", "## Errors", ""]
        lines.append(markdown_table(["method", "request", "error", "count"], failures))
    lines += [
        "",
        "Latencies are locust's (ms, its percentiles are rounded to two significant digits). "
        "docs/s counts the documents of successful insert requests.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    path = arguments.output or write_result(f"loadtest-{arguments.workload}.md", report)
    if arguments.output:
        arguments.output.write_text(report, encoding="utf-8")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
