"""py-spy on a server: recording (``py_spy``) and summaries of its collapsed stacks.

``py_spy`` samples a process for a while (a flame graph, or collapsed stacks with
``output_format="raw"``). ``read_collapsed`` and ``summarise`` turn collapsed stacks taken
with --threads into markdown: own and cumulative time by group (waits by the frame waited
in; otherwise the innermost frame that belongs to a group: FastAPI and starlette,
middleware, logging, pydantic, JSON, fingerprinting, index search, ...), the threads
holding the GIL, the top functions, and for --idle the mean number of threads in each
state. Needs py-spy (``.venv/bin/pip install py-spy``).
"""

from __future__ import annotations

import linecache
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.harness import Align, markdown_table

RIGHT: Align = "right"


def py_spy(
    pid: int,
    seconds: float,
    output: Path,
    flags: Sequence[str] = ("--gil",),
    output_format: str = "flamegraph",
    rate: int = 250,
    messages: Path | None = None,
    nonblocking: bool = True,
) -> subprocess.Popen[bytes]:
    """Sample the server with py-spy while a phase runs: by default only the thread holding
    the GIL (--gil), which for a GIL-bound server is where its CPU goes; an SVG flame graph
    (``output_format="raw"``: collapsed stacks, one line per stack with its sample count).
    ``messages``: a file for py-spy's own output (samples, errors, warnings). Without
    ``nonblocking`` py-spy pauses the process for each sample: slower, but no stack read
    half-way through a change (which --nonblocking drops as an error, often a third of the
    samples of a busy server)."""
    command = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
        "py-spy"
    )
    if command is None:
        raise SystemExit("--py-spy needs py-spy: .venv/bin/pip install py-spy")
    arguments = ["record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    arguments += ["--rate", str(rate), *(["--nonblocking"] if nonblocking else []), *flags]
    arguments += ["--format", output_format, "--output", str(output)]
    with open(messages or os.devnull, "wb") as sink:
        return subprocess.Popen([command, *arguments], stdout=sink, stderr=subprocess.STDOUT)


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
                number = int(match["line"] or 0)
                parsed.append(Frame(match["function"], file, number, match["file"]))
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


def summarise(
    stacks: Counter[Stack],
    flavour: str,
    seconds: float,
    sampling_hz: int,
    requests_per_second: float,
    server_cpu: float,
) -> str:
    """--gil: own and cumulative shares by group and by function, and which threads held
    the GIL; --idle: the mean number of threads in each state. py-spy does not say how many
    times it sampled (its count is of the stacks it kept), so the share of the time the
    GIL was held assumes it kept its rate, which the --idle profile checks: the event loop
    thread is in every one of its samples. ``sampling_hz``: py-spy's --rate;
    ``requests_per_second`` and ``server_cpu`` (a share of one core): the run's."""
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
    rate = requests_per_second
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
                f"{sampling_hz}); {rate:,.0f} req/s under the profiler. Mean number of threads "
                "in each state (waits by the frame waited in, the rest by the innermost "
                "grouped frame):",
                "",
                markdown_table(["threads", "state", "threads"], rows, ["left", "left", RIGHT]),
            ]
        )
    held = total / (sampling_hz * seconds)
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
            f"{total:,} samples over {seconds:g} s at {sampling_hz} Hz: the GIL held "
            f"{held:.0%} of the time (server CPU {server_cpu:.0%}), {rate:,.0f} req/s "
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
