"""neardup against a bare FastAPI app under wrk, in one run: single inserts and search.

    .venv/bin/python bench/bare_wrk.py [--preload 20000] [--duration 10] [--runs 3]
                                       [--clients 16] [--modes pinned,unpinned]
                                       [--workloads search,insert] [--markdown FILE]
                                       [--py-spy [--py-spy-duration 20]]

The measurement of issue 11. Starts ``neardup serve`` (a temporary data directory,
NEARDUP_SYNCHRONOUS=FULL, NEARDUP_LOG_LEVEL=info, its default) and bench/bare_app.py (the
same bodies validated by the same pydantic models, answers of the same shapes, no work),
both under uvicorn with uvloop, httptools and one worker, and preloads neardup with
``--preload`` documents ``pre-{i}`` (3 KB varied Reuters, loadtest/corpus.py, batches of
256). Then, for each workload, for each mode, ``--runs`` times neardup and the bare app in
turn, ``wrk -t2 -c<clients> -d<duration>`` after an unrecorded warm-up of each:

- search: POST /v1/collections/default/search, 3 KB bodies cycling through 512 texts (a
  fifth near-duplicates of preloaded documents; bench/search_wrk.py's), at exactly
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

Needs ``wrk`` on the PATH (``apt-get install wrk``) and for ``--py-spy`` py-spy
(``.venv/bin/pip install py-spy``).
"""

from __future__ import annotations

import argparse
import json
import linecache
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
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (
    RESULTS_DIR,
    Align,
    WrkRun,
    add_quiet_arguments,
    markdown_table,
    median_run,
    priority,
    run_wrk,
    wait_for_quiet,
    write_result,
)
from search_wrk import write_script
from service import Running, neardup, py_spy, uvicorn_app

from loadtest.corpus import Corpus, load_corpus
from loadtest.preload import preload
from loadtest.proc import busy_cpu_seconds, context_switches, cpu_model, cpu_times, pin_process

SERVER_CPU, CLIENT_CPU = 0, 1
COLLECTION = "/v1/collections/default"
INSERT_PATH = f"{COLLECTION}/documents"
WARMUP_SECONDS = 3
RETRIES = 5  # of a run disturbed by other processes
TEXT_CHARS = 3000
PHRASES, PHRASE_WORDS = 50_000, 8  # the list the Lua script draws from
PY_SPY_RATE = 100  # samples per second: py-spy keeps up with 40 threads on a shared core
# Issue 11: neardup / bare at least this, and the insert p99 at most this, 16 connections.
TARGET_RATIO = {"insert": 0.5, "search": 0.6}
TARGET_INSERT_P99_MS = 25.0
RIGHT: Align = "right"

# wrk Lua: a distinct ~3 KB text per request. A prefix unique to the run, thread and
# request, then phrases of random words drawn at random from a list (seeded per run and
# thread): two texts share a phrase or two at most, a few of their ~500 word 5-grams.
# (Phrases, not words: wrk spends ~60 µs of CPU on a request instead of ~120.)
INSERT_LUA = """
local phrases = {}
for line in io.lines("%(phrases)s") do phrases[#phrases + 1] = line end
local count = #phrases
local headers = {["Content-Type"] = "application/json"}
local prefix, sent, threads = "", 0, 0

function setup(thread)
  threads = threads + 1
  thread:set("number", threads)
end

function init(args)
  local run = tonumber(args[1]) or 0
  prefix = "wrk run " .. run .. " thread " .. number .. " request "
  math.randomseed(run * 1000 + number)
end

function request()
  sent = sent + 1
  local parts = {prefix .. sent}
  local length = #parts[1]
  while length < %(chars)d do
    local phrase = phrases[math.random(count)]
    parts[#parts + 1] = phrase
    length = length + 1 + #phrase
  end
  local body = '{"text":"' .. table.concat(parts, " ") .. '"}'
  return wrk.format("POST", "%(path)s", headers, body)
end
"""


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


def write_insert_script(root: Path, corpus: Corpus, rng: random.Random) -> Path:
    """The Lua script of single inserts and its phrases: words drawn as often as the
    corpus uses them, those safe in a JSON string as they are."""
    words = [
        word
        for word in corpus.vocabulary.draw(rng, PHRASES * PHRASE_WORDS * 2)
        if word.isascii() and word.isprintable() and '"' not in word and "\\" not in word
    ]
    phrases = root / "phrases.txt"
    with phrases.open("w") as out:
        for start in range(0, PHRASES * PHRASE_WORDS, PHRASE_WORDS):
            out.write(" ".join(words[start : start + PHRASE_WORDS]) + "\n")
    script = root / "insert.lua"
    script.write_text(INSERT_LUA % {"phrases": phrases, "chars": TEXT_CHARS, "path": INSERT_PATH})
    return script


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
        wait_for_quiet(busy_cpu_seconds, self.arguments.quiet, self.arguments.quiet_timeout, log)

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
            summary = summarise(read_collapsed(output), flavour, seconds, sample)
            if problems:
                summary += f"\n\npy-spy said: {', '.join(sorted(set(problems)))}."
            workload.profiles[flavour] = summary


# ---------------------------------------------------------------------------- profiles

PY_SPY_FLAGS = ("--threads", "--full-filenames")
# Not a third flavour of the threads on a CPU: while py-spy pauses the process (without
# --nonblocking) it takes every thread for running.
PROFILE_FLAVOURS: dict[str, tuple[str, ...]] = {"gil": ("--gil",), "idle": ("--idle",)}
# Where a thread waits, whatever it waits in: any frame of the stack decides (and an
# executor's worker thread with no task: its innermost frame).
WAITS: list[tuple[str, str]] = [
    ("concurrent/futures/_base.py:Future.result", "SQLite commit wait (Future.result)"),
    ("queue.py:Queue.get", "waiting for work (Queue.get; on a CPU: waking up)"),
    ("threading.py:Event.wait", "waiting for work (Event.wait)"),
]
INDEX_SEARCH = "index search (match, score)"
SERVICE_INSERT = "service insert (publish to indexes, clusters, queue the commit)"
SEARCHING = re.compile(r"app/service[^:]*:Collection\.(search|similar)\b")
# Otherwise own time goes to the innermost frame that a group claims (regular expressions
# searched in "file:function"); frames of no group (the index structures of app/core, the
# standard library's typing, contextlib, functools..., numpy, uuid) pass their time to
# their caller: an index lookup is the search's, an index insert the insert's. app/service
# is a module before commit c255ff7 and a package after.
GROUPS: list[tuple[str, re.Pattern[str]]] = [
    (group, re.compile(pattern))
    for group, pattern in [
        ("logging", r"logging/|pythonjsonlogger/|app/logs\.py"),
        (
            "middleware (request_id, metrics, auth, body_limit)",
            r"app/api/(request_id|metrics|auth|body_limit)\.py|prometheus_client/",
        ),
        ("pydantic validation", r"pydantic/|pydantic_core/|fastapi/_compat|app/api/schemas\.py"),
        ("JSON", r"json/|orjson|app/api/documents\.py:json_response"),
        ("fingerprinting", r"app/core/(fingerprint|text|_kernels)\.py|selectolax/"),
        (
            INDEX_SEARCH,
            r"app/service[^:]*:(Collection\.(search|similar|_validate|_match_indexes|_scored"
            r"|_matches)\b|_?positions_of|_?Pairs)|app/core/rule"
            r"|app/core/(lsh|hamming|exact)\.py:\w+\.search|sorted_table\.py:SortedTable\.lookup",
        ),
        (SERVICE_INSERT, r"app/service"),
        ("SQLite (rows for the writer; execute, commit, fsync)", r"app/storage/|sqlite3/"),
        ("handler (app/api)", r"app/api/(documents|search|limits)\.py"),
        (
            "thread-pool hop (anyio to_thread)",
            r"anyio/|starlette/concurrency\.py|concurrent/futures/|threading\.py|queue\.py",
        ),
        ("FastAPI/starlette routing, dependencies", r"fastapi/|starlette/|app/api/"),
        (
            "uvicorn HTTP protocol (httptools, socket writes)",
            r"uvicorn/(protocols|middleware)/|httptools/",
        ),
        ("event loop (uvloop, asyncio; C I/O)", r"asyncio/|uvloop/|uvicorn/"),
    ]
]
# The frames under every sample of a thread: no information in their cumulative share.
SCAFFOLDING = (
    ":<module>",
    "app/cli.py:",
    "uvicorn/main.py:",
    "uvicorn/server.py:",
    "uvicorn/_compat.py:",
    "asyncio/runners.py:",
    "threading.py:Thread._bootstrap",
    "threading.py:Thread.run",
)
FRAME = re.compile(r"(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
LIBRARY = re.compile(r".*/(?:site-packages|lib/python3\.\d+)/")


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str  # relative to site-packages, the standard library or the repository
    line: int
    path: str  # as py-spy gave it

    @property
    def key(self) -> str:
        return f"{self.file}:{self.function}"

    @property
    def group(self) -> str | None:
        key = self.key
        for group, pattern in GROUPS:
            if pattern.search(key):
                return group
        return None


Stack = tuple[str, tuple[Frame, ...]]  # thread name, frames from the root to the leaf


def short_file(path: str) -> str:
    path = LIBRARY.sub("", path)
    for top in ("/app/", "/bench/"):
        if top in path:
            return path[path.rindex(top) + 1 :]
    return path


def read_collapsed(path: Path) -> Counter[Stack]:
    """py-spy's raw output with --threads: "thread (tid): name;frame;...;frame count"."""
    stacks: Counter[Stack] = Counter()
    for line in path.read_text().splitlines():
        text, _, count = line.rpartition(" ")
        thread, *frames = text.split(";")
        name = thread.split(": ", 1)[1] if ": " in thread else thread
        parsed = []
        for frame in frames:
            match = FRAME.match(frame)
            if match is not None:
                file = short_file(match["file"])
                line = int(match["line"] or 0)
                parsed.append(Frame(match["function"], file, line, match["file"]))
        stacks[name, tuple(parsed)] += int(count)
    return stacks


def own_group(frames: tuple[Frame, ...]) -> str:
    if frames and frames[-1].key == "concurrent/futures/thread.py:_worker":
        return "waiting for work (executor queue)"
    if frames and frames[-1].file.startswith("app/service"):
        source = linecache.getline(frames[-1].path, frames[-1].line)
        if "_write_lock" in source:  # blocked in (or taking) Lock.acquire, C code
            return "the collection's write lock"
    keys = [frame.key for frame in frames]
    for pattern, state in WAITS:
        if any(pattern in key for key in keys):
            return state
    for frame in reversed(frames):
        group = frame.group
        if group == SERVICE_INSERT and any(SEARCHING.search(key) for key in keys):
            return INDEX_SEARCH  # a helper of the service's, under a search
        if group is not None:
            return group
    return "other"


def thread_role(name: str) -> str:
    if name == "MainThread":
        return "event loop thread"
    if name.startswith("AnyIO worker"):
        return "thread-pool workers"
    if name.startswith(("uvloop_", "asyncio_")):
        return "event loop's executor (asyncio.to_thread)"
    return name


def summarise(stacks: Counter[Stack], flavour: str, seconds: float, sample: Sample) -> str:
    """--gil: own and cumulative shares by group and by function, and which threads held
    the GIL; --idle: the mean number of threads in each state. py-spy does not say how many
    times it sampled (its count is of the stacks it kept), so the share of the time the
    GIL was held assumes it kept its rate, which the --idle profile checks: the event loop
    thread is in every one of its samples."""
    total = sum(stacks.values())
    if not total:
        return "(no samples)"
    own_groups: Counter[str] = Counter()
    cumulative_groups: Counter[str] = Counter()
    own_functions: Counter[str] = Counter()
    cumulative_functions: Counter[str] = Counter()
    roles: Counter[str] = Counter()
    states: dict[str, Counter[str]] = defaultdict(Counter)
    for (name, frames), count in stacks.items():
        group = own_group(frames)
        own_groups[group] += count
        roles[thread_role(name)] += count
        states[thread_role(name)][group] += count
        members = {group} | {str(frame.group) for frame in frames if frame.group}
        if SERVICE_INSERT in members and any(SEARCHING.search(f.key) for f in frames):
            members = (members - {SERVICE_INSERT}) | {INDEX_SEARCH}
        for member in members:
            cumulative_groups[member] += count
        if frames:
            own_functions[f"{frames[-1].key} [{group}]"] += count
        for key in {frame.key for frame in frames}:
            if not any(part in key for part in SCAFFOLDING):
                cumulative_functions[key] += count
    rate = sample.wrk.requests_per_second
    if flavour == "idle":
        ticks = roles["event loop thread"]  # one stack of it in every sample
        rows = [
            [role, state, f"{n / ticks:.2f}"]
            for role, _ in roles.most_common()
            for state, n in states[role].most_common(8)
        ]
        return "\n".join(
            [
                f"{ticks:,} samples over {seconds:g} s ({ticks / seconds:.0f} Hz of "
                f"{PY_SPY_RATE}); {rate:,.0f} req/s under the profiler. Mean number of threads "
                "in each state (waits by the frame waited in, the rest by the innermost "
                "grouped frame):",
                "",
                markdown_table(["threads", "state", "threads"], rows, ["left", "left", RIGHT]),
            ]
        )
    held = total / (PY_SPY_RATE * seconds)
    per_request = held / rate * 1e6 / total  # µs of GIL per request in one sample

    def table(title: str, counts: Counter[str], limit: int) -> str:
        rows = [
            [key, f"{n / total:.1%}", f"{n * per_request:,.0f}"]
            for key, n in counts.most_common(limit)
        ]
        return markdown_table([title, "share", "µs/req"], rows, ["left", RIGHT, RIGHT])

    group_rows = [
        [
            group,
            f"{n / total:.1%}",
            f"{cumulative_groups[group] / total:.1%}",
            f"{n * per_request:,.0f}",
        ]
        for group, n in own_groups.most_common()
    ]
    return "\n".join(
        [
            f"{total:,} samples over {seconds:g} s at {PY_SPY_RATE} Hz: the GIL held "
            f"{held:.0%} of the time (server CPU {sample.server_cpu:.0%}), {rate:,.0f} req/s "
            f"under the profiler, so {held / rate * 1e6:,.0f} µs of GIL per request. Shares "
            "are of GIL-held samples; µs/req is that share of the GIL time per request.",
            "",
            markdown_table(
                ["group", "own", "cumulative", "own µs/req"], group_rows, ["left", *[RIGHT] * 3]
            ),
            "",
            table("thread holding the GIL", roles, 10),
            "",
            table("function, own [group]", own_functions, 30),
            "",
            table("function, cumulative", cumulative_functions, 40),
        ]
    )


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


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def servers(arguments: argparse.Namespace) -> Iterator[list[Running]]:
    options = argparse.Namespace(data_dir=None, synchronous="FULL", log_level="info")
    with (
        neardup(options) as near,
        uvicorn_app("bare", "bench.bare_app:app", options, "--no-access-log") as bare,
    ):
        yield [near, bare]


def main() -> None:
    # A plain SIGTERM would skip the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"signal {signum}"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--preload", type=int, default=20_000, help="documents before search (20000)"
    )
    parser.add_argument("--clients", type=int, default=16, help="wrk connections (16)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run (10)")
    parser.add_argument("--runs", type=int, default=3, help="recorded runs per server (3)")
    parser.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=["pinned", "unpinned"],
        help="comma-separated, of pinned and unpinned (default both)",
    )
    parser.add_argument(
        "--workloads",
        type=lambda text: text.split(","),
        default=["search", "insert"],
        help="comma-separated, of search and insert (default both; search runs first)",
    )
    add_quiet_arguments(parser, quiet=0.1, timeout=300, max_other=0.2)
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the servers, wrk and py-spy at this nice value, their session's autogroup "
        "too (-20 as root on a shared machine: other processes then get little of their CPU)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    parser.add_argument("--py-spy", action="store_true", help="profile neardup (see above)")
    parser.add_argument("--py-spy-duration", type=int, default=20, help="seconds per profile (20)")
    arguments = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/bare_wrk.py needs wrk on the PATH (apt-get install wrk)")
    if set(arguments.modes) - {"pinned", "unpinned"}:
        sys.exit("--modes takes pinned and unpinned")

    corpus = load_corpus()
    rng = random.Random(0)
    root = Path(tempfile.mkdtemp(prefix="neardup-bare-wrk-"))
    scripts = {
        "search": write_script(root, arguments.preload, corpus, rng),
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


if __name__ == "__main__":
    main()
