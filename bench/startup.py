"""Start-up: seconds from spawning ``neardup serve`` to /readyz 200, on an empty data dir.

Run from the repository root::

    .venv/bin/python bench/startup.py [--runs 5]

Two cases, each run on a new empty data directory and its own NUMBA_CACHE_DIR:

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

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import Timing, format_spread, markdown_table, spread, write_result

from devkit.server import Server, neardup_command
from loadtest.proc import cpu_model

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


def warm_up(cache: Path) -> float:
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


def measure(
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="neardup-startup-") as directory:
        scratch = Path(directory)
        cache = scratch / "numba-cache"
        imports = spread([import_seconds() for _ in range(arguments.runs)])

        print("no cache (emptied before each run)", file=sys.stderr)
        cold = measure(arguments.runs, scratch, cache, lambda: shutil.rmtree(cache, True))

        shutil.rmtree(cache, ignore_errors=True)
        set_up = warm_up(cache)
        print(f"after the set-up (neardup warm-up: {set_up:.1f} s)", file=sys.stderr)
        warm = measure(arguments.runs, scratch, cache, lambda: None)

    rows = [
        [name, format_spread(ready, seconds), format_spread(first, seconds), str(max(kernels))]
        for name, (ready, first, kernels) in (("no cache (before)", cold), ("after set-up", warm))
    ]
    report = "\n\n".join(
        [
            f"Start-up of `neardup serve` on an empty data directory; {cpu_model()}; "
            f"median (min-max) of {arguments.runs} runs, seconds.",
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
    print(report)
    print(f"written to {write_result('startup.md', report + chr(10))}", file=sys.stderr)


if __name__ == "__main__":
    main()
