"""The harness that benchmarks, load tests and tests share: data, machines, timing, reports.

Reuters-21578 loading (in date order), pinning and the CPU model, timing and percentiles,
what /proc says about a process (resident memory, CPU time, affinity) and about the
machine (busy CPU time), waiting for a shared machine to be quiet, markdown tables and
bench/results. Only the standard library is imported here, so a benchmark can import this
module and apply ``THREAD_LIMITS`` before numpy, numba or a Rust extension reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]
REUTERS_PATH = REPO_ROOT.parent / "shared/data/reuters21578/reuters21578.jsonl"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

# Every thread pool a benchmark may touch, capped at one thread: numba, OpenMP, the BLAS
# builds numpy ships with, and rayon (used by the Rust peers' bulk paths).
THREAD_LIMITS: dict[str, str] = {
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
}

Story: TypeAlias = dict[str, Any]
Align = Literal["left", "right"]
T = TypeVar("T")

_DATE_FORMAT = "%d-%b-%Y %H:%M:%S.%f"
# The day, then the time when it is well formed. 328 of the 21,578 dates carry SGML
# residue after the time ("27-MAR-1987 00:02:59.13&#5;&#5;&#5;RM") and one has hour 605,
# so strptime on the whole field would fail on them.
_DATE_PREFIX = re.compile(r"\s*(\d{1,2}-[A-Za-z]{3}-\d{4})(?: (\d{1,2}:\d{2}:\d{2}\.\d+))?")


def reuters_date(value: str) -> datetime:
    """The timestamp of a Reuters ``date`` field; just the day when the time is malformed.

    >>> reuters_date("26-FEB-1987 15:01:01.79")
    datetime.datetime(1987, 2, 26, 15, 1, 1, 790000)
    >>> reuters_date("31-MAR-1987 605:12:19.12")
    datetime.datetime(1987, 3, 31, 0, 0)
    """
    match = _DATE_PREFIX.match(value)
    if match is None:
        raise ValueError(f"not a Reuters date: {value!r}")
    day, time_of_day = match.groups()
    if time_of_day is not None:
        try:
            return datetime.strptime(f"{day} {time_of_day}", _DATE_FORMAT)
        except ValueError:
            pass  # e.g. an out-of-range hour: fall back to the day
    return datetime.strptime(day, "%d-%b-%Y")


def load_reuters(limit: int | None = None) -> list[Story] | None:
    """Reuters-21578 stories in date order (the first ``limit`` of them), or None if absent.

    Ties (same timestamp) keep the file's order, which is by story id.
    """
    if not REUTERS_PATH.is_file():
        return None
    with REUTERS_PATH.open(encoding="utf-8") as lines:
        stories: list[Story] = [json.loads(line) for line in lines if line.strip()]
    stories.sort(key=lambda story: reuters_date(story["date"]))
    return stories if limit is None else stories[:limit]


def reuters_text(story: Story) -> str:
    """The text a benchmark fingerprints: title, newline, body."""
    return f"{story.get('title') or ''}\n{story.get('body') or ''}"


def pin_to_one_core() -> int:
    """Pin this process to the first CPU it may use and return that CPU's number.

    Threads started later inherit the mask, so nothing can spread to a second core.
    """
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def cpu_model_name() -> str:
    """The CPU model from /proc/cpuinfo (the platform's machine name where it is absent)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, with the number of CPUs."""
    return f"{cpu_model_name()}, {os.cpu_count()} CPUs"


def machine_summary(cpu: int) -> str:
    """One line naming the CPU model, the pinned core and the Python running the benchmark."""
    model = cpu_model_name()
    python = f"{platform.python_implementation()} {sys.version.split()[0]}"
    return f"{model}, pinned to CPU {cpu} of {os.cpu_count()}; {python}"


@dataclass(frozen=True, slots=True)
class Timing:
    """Microseconds per item over the timed runs."""

    min_us: float
    median_us: float
    max_us: float


def time_per_item(
    function: Callable[[Sequence[T]], object], items: Sequence[T], runs: int
) -> Timing:
    """Call ``function(items)`` once to warm up, then ``runs`` times timed.

    The warm-up pays for JIT compilation, lazy imports and cold caches, which a
    long-running service pays once. Garbage left by one run is collected before the next
    so it is not charged to it.
    """
    if runs < 1 or not items:
        raise ValueError("need at least one run and one item")
    function(items)
    per_item: list[float] = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter_ns()
        function(items)
        elapsed_ns = time.perf_counter_ns() - start
        per_item.append(elapsed_ns / 1000 / len(items))
    return Timing(min(per_item), statistics.median(per_item), max(per_item))


def spread(values: Sequence[float]) -> Timing:
    """Min, median and max of one figure measured once per run (any unit)."""
    if not values:
        raise ValueError("need at least one value")
    return Timing(min(values), statistics.median(values), max(values))


def latencies_us(
    function: Callable[[T], object],
    items: Sequence[T],
    clock: Callable[[], int] = time.perf_counter_ns,
) -> list[float]:
    """Microseconds of each ``function(item)`` call, timed one call at a time by ``clock``
    (nanoseconds: the wall clock, or ``time.thread_time_ns`` for the CPU time of the calling
    thread, which a shared machine's other jobs do not inflate)."""
    elapsed: list[float] = []
    for item in items:
        start = clock()
        function(item)
        elapsed.append((clock() - start) / 1000)
    return elapsed


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 to 100), interpolating linearly as numpy does by default."""
    if not values:
        raise ValueError("need at least one value")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of this process, from /proc/self/statm, or of process ``pid``
    (VmRSS, from /proc/<pid>/status); 0 where /proc is absent."""
    if pid is not None:
        status = Path(f"/proc/{pid}/status")
        if not status.is_file():
            return 0
        for line in status.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0
    statm = Path("/proc/self/statm")
    if not statm.is_file():
        return 0
    resident_pages = int(statm.read_text(encoding="ascii").split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process and all its threads so far."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.is_file():
        return 0.0, 0.0
    # Fields after the command name, which may hold spaces: utime and stime are 14 and 15.
    fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process and all its threads so far."""
    return sum(cpu_times(pid))


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of a process's live threads so far."""
    total = 0
    tasks = Path(f"/proc/{pid}/task")
    for status in tasks.glob("*/status") if tasks.is_dir() else []:
        with contextlib.suppress(OSError):  # the thread may have ended
            for line in status.read_text(encoding="ascii", errors="replace").splitlines():
                if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                    total += int(line.split()[1])
    return total


def busy_cpu_seconds() -> float:
    """CPU time all CPUs of this machine spent busy so far (anything but idle and iowait,
    steal included: time the hypervisor gave to someone else), from /proc/stat."""
    stat = Path("/proc/stat")
    if not stat.is_file():
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, stat.read_text(encoding="ascii").split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def pin_process(pid: int, cpus: set[int]) -> None:
    """Restrict every thread of a process to ``cpus`` (threads it starts later inherit it)."""
    tasks = Path(f"/proc/{pid}/task")
    thread_ids = [int(entry.name) for entry in tasks.iterdir()] if tasks.is_dir() else [pid]
    for thread_id in thread_ids:
        with contextlib.suppress(ProcessLookupError):  # the thread may have ended
            os.sched_setaffinity(thread_id, cpus)


def release_memory() -> None:
    """Collect garbage and hand free heap pages back to the OS, so RSS deltas mean something."""
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name is not None:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


def format_us(value: float) -> str:
    """Microseconds with three significant digits (``12.3``, ``1234``)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def format_spread(timing: Timing, fmt: Callable[[float], str] = format_us) -> str:
    """The median with the range over runs: ``9.6 (9.4-9.9)``, or just ``9.6`` if they agree."""
    low, middle, high = fmt(timing.min_us), fmt(timing.median_us), fmt(timing.max_us)
    return middle if low == high else f"{middle} ({low}-{high})"


def format_ratio(value: float) -> str:
    """A speed-up factor: ``52x``, ``3.4x``, ``0.81x``."""
    return f"{value:,.0f}x" if value >= 10 else f"{value:.2g}x"


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[Align] | None = None
) -> str:
    """A GitHub-flavoured markdown table, columns padded so it also reads as plain text."""
    if align is None:
        align = ["left"] * len(headers)
    if len(align) != len(headers) or any(len(row) != len(headers) for row in rows):
        raise ValueError("every row and the alignment need one entry per header")
    widths = [
        max(3, len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if side == "right" else cell.ljust(width)
            for cell, width, side in zip(cells, widths, align, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rule = (
        "-" * (width - 1) + ":" if side == "right" else "-" * width
        for width, side in zip(widths, align, strict=True)
    )
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |", *map(line, rows)])


def write_result(name: str, text: str) -> Path:
    """Write a report to ``bench/results/<name>`` (git-ignored) and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    path.write_text(text, encoding="utf-8")
    return path


def add_quiet_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    quiet: float,
    timeout: float,
    max_other: float,
) -> None:
    """--quiet, --quiet-timeout and --max-other: how a run waits for a shared machine
    (wait_for_quiet) and when it is measured again, with this script's defaults."""
    parser.add_argument(
        "--quiet",
        type=float,
        default=quiet,
        help=f"before each run, wait until the machine is busy under this many cores ({quiet})",
    )
    parser.add_argument(
        "--quiet-timeout",
        type=float,
        default=timeout,
        help=f"longest wait for quiet, seconds ({timeout:g})",
    )
    parser.add_argument(
        "--max-other",
        type=float,
        default=max_other,
        help=f"run again when other processes took more cores than this during a run ({max_other})",
    )


def log(message: str) -> None:
    """A line of progress on stderr, after the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wait_for_quiet(quiet: float, timeout: float, log: Callable[[str], None] = log) -> None:
    """Until the machine stays under ``quiet`` busy cores for a second (busy_cpu_seconds),
    at most ``timeout`` seconds: other people's jobs would take the CPU a measurement
    needs."""
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        before = busy_cpu_seconds()
        time.sleep(1)
        load = busy_cpu_seconds() - before
        if load < quiet:
            return
        if time.monotonic() > deadline:
            log(f"the machine is still busy ({load:.2f} cores): measuring anyway")
            return
        if not waited:
            log(f"waiting for the machine to be quiet ({load:.2f} cores busy)")
            waited = True


@dataclass
class Quiet:
    """How quiet_latencies waits for a shared machine; ``quiet`` 0 does not wait."""

    quiet: float = 0.0
    timeout: float = 60.0
    max_other: float = 1e9
    server_pid: int = 0  # a server's (redis-server's): its CPU is not another process's
    retries: int = 2  # of a timed phase during which other processes took more than max_other


# What quiet_latencies does unless told otherwise: a benchmark's main sets it from its options.
QUIET = Quiet()


def quiet_latencies(
    function: Callable[[T], object], items: Sequence[T], what: str, quiet: Quiet | None = None
) -> list[float]:
    """latencies_us of ``function`` over ``items`` once the machine is quiet; measured
    again (``retries`` times at most) when other processes took more than ``max_other``
    of a core meanwhile (this process and the server not counted). ``quiet``: QUIET."""
    quiet = quiet or QUIET
    for attempt in range(quiet.retries + 1):
        if quiet.quiet:
            wait_for_quiet(quiet.quiet, quiet.timeout)
        ours = cpu_seconds(os.getpid()) + cpu_seconds(quiet.server_pid)
        busy, began = busy_cpu_seconds(), time.monotonic()
        latency = latencies_us(function, items)
        elapsed = time.monotonic() - began
        ours = cpu_seconds(os.getpid()) + cpu_seconds(quiet.server_pid) - ours
        other = max(0.0, busy_cpu_seconds() - busy - ours) / elapsed
        if other <= quiet.max_other or attempt == quiet.retries:
            return latency
        log(f"{what}: other processes took {other:.0%} of a core, measuring again")
    raise AssertionError("unreachable")


def child_pids(pid: int) -> list[int]:
    """The child processes of ``pid`` (from /proc; none where it is absent)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return []
    found: list[int] = []
    for task in tasks.iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # a thread that ended meanwhile
    return found


def scrape_metric(url: str, name: str) -> float:
    """The sum of a Prometheus metric's samples (every label set) at ``url``/metrics."""
    from urllib.request import ProxyHandler, build_opener

    # No proxy from the environment: the service is on this machine.
    with build_opener(ProxyHandler({})).open(url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


# Width of the running text in the generated markdown documents.
WRAP_WIDTH = 92


def paragraph(text: str, bullet: bool = False) -> str:
    """Running text wrapped to WRAP_WIDTH; a word that could open a markdown block at the
    start of a line (">=", "-", "|", "1.") is kept on the line of the word before it."""
    words: list[str] = []
    for word in text.split():
        if words and (word[0] in "-+*>|<=#" or re.fullmatch(r"\d+[.)]", word)):
            words[-1] += "\0" + word
        else:
            words.append(word)
    prefix = "- " if bullet else ""
    wrapped = textwrap.fill(
        " ".join(words),
        width=WRAP_WIDTH,
        initial_indent=prefix,
        subsequent_indent=" " * len(prefix),
        break_on_hyphens=False,
        break_long_words=False,
    )
    return wrapped.replace("\0", " ")


@contextmanager
def priority(nice: int) -> Iterator[None]:
    """This process and the children it starts at ``nice``, and so is its session's
    autogroup while it runs (with autogroups, nice only orders a session's own processes:
    the kernel shares the CPU between sessions first)."""
    if not nice:
        yield
        return
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    autogroup = Path("/proc/self/autogroup")
    before = autogroup.read_text().split()[-1] if autogroup.is_file() else None
    if before is not None:
        autogroup.write_text(str(nice))
    try:
        yield
    finally:
        if before is not None:
            autogroup.write_text(before)
