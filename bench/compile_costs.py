"""What each numba kernel costs to compile: ``neardup warm-up`` run into an empty cache.

    python -m bench.compile_costs [--top 25]
    python -m bench.compile_costs --walls 3
    python -m bench.compile_costs --first-start 2


Sets ``NUMBA_CACHE_DIR`` to a fresh directory (so nothing is loaded from a cache), times
every ``Dispatcher.compile`` the warm-up triggers and prints, per kernel, the seconds
with its callees (a caller's first call types and compiles its callees inside its own),
the seconds of its own (callees' compiles subtracted) and the type signatures it was
compiled for. The warm-up's wall time is printed last (without its helper process, so that
every compile is timed here). numba compiles one kernel at a time.

``--walls N``: instead, ``neardup warm-up`` itself (a fresh process) into an empty cache,
alone (``compile_kernels(helper=False)``) and with its helper process, N times each,
interleaved; the wall seconds of each and their medians.

``--first-start N``: what a new user waits for, N times: a fresh clone of HEAD (its own
``.venv``; pip's download cache is the machine's), ``make run`` on a free port, until
``/readyz`` answers 200; then a second ``make run`` of the same clone. Make's own lines
are stamped with the seconds since the start, so the venv, the install and the warm-up
can be told apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="kernels listed, costliest first")
    parser.add_argument("--walls", type=int, metavar="N", help="instead: alone against helped")
    parser.add_argument("--first-start", type=int, metavar="N", help="instead: make run, fresh")
    arguments = parser.parse_args()
    if arguments.first_start:
        print(_first_starts(arguments.first_start))
        return
    if arguments.walls:
        print(_walls(arguments.walls))
        return
    with tempfile.TemporaryDirectory(prefix="neardup-compile-costs-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache
        inclusive, own, signatures, wall = _timed_warm_up()
    print("| kernel | with callees s | own s | signatures |")
    print("| --- | --: | --: | --: |")
    ranked = sorted(own, key=lambda name: -own[name])
    for name in ranked[: arguments.top]:
        print(f"| `{name}` | {inclusive[name]:.2f} | {own[name]:.2f} | {signatures[name]} |")
    rest = ranked[arguments.top :]
    if rest:
        print(f"| {len(rest)} others | | {sum(own[name] for name in rest):.2f} | |")
    total = sum(own.values())
    print(f"\nown compile time, all kernels: {total:.1f} s; warm-up wall time {wall:.1f} s")


def _walls(runs: int) -> str:
    """The warm-up's wall time into an empty cache, alone and helped, ``runs`` each."""
    walls: dict[bool, list[float]] = {False: [], True: []}
    code = (
        "import sys; from app.warmup import compile_kernels; compile_kernels(sys.argv[1] == 'True')"
    )
    for _ in range(runs):
        for helper in (False, True):
            with tempfile.TemporaryDirectory(prefix="neardup-compile-walls-") as cache:
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-c", code, str(helper)],
                    env=dict(os.environ, NUMBA_CACHE_DIR=cache),
                    check=True,
                )
                walls[helper].append(time.perf_counter() - started)
    lines = ["| warm-up into an empty cache | wall s, each run | median |", "| --- | --- | --: |"]
    for helper, label in ((False, "alone"), (True, "with its helper process")):
        each = ", ".join(f"{wall:.1f}" for wall in walls[helper])
        lines.append(f"| {label} | {each} | {statistics.median(walls[helper]):.1f} |")
    return "\n".join(lines)


def _first_starts(runs: int) -> str:
    """``make run`` of a fresh clone to its first /readyz 200, then of the same clone
    again, ``runs`` times; a table of the seconds."""
    repository = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    firsts: list[float] = []
    seconds: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="neardup-first-start-") as scratch:
            clone = os.path.join(scratch, "neardup")
            subprocess.run(["git", "clone", "-q", repository, clone], check=True)
            firsts.append(_make_run(clone))
            seconds.append(_make_run(clone))
    lines = ["| `make run` | seconds to /readyz 200, each run | median |", "| --- | --- | --: |"]
    for label, values in (("fresh clone", firsts), ("again, same clone", seconds)):
        each = ", ".join(f"{value:.1f}" for value in values)
        lines.append(f"| {label} | {each} | {statistics.median(values):.1f} |")
    return "\n".join(lines)


def _make_run(clone: str) -> float:
    """Seconds from ``make run`` in ``clone`` to /readyz 200 (make's lines printed, each
    stamped with its second); the service is stopped after."""
    import socket
    import threading
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, NEARDUP_PORT=str(port), NEARDUP_DATA_DIR=os.path.join(clone, "data"))
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    started = time.perf_counter()
    make = subprocess.Popen(
        ["make", "-C", clone, "run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def stamp() -> None:
        assert make.stdout is not None
        for line in make.stdout:
            if "neardup.access" in line:
                continue  # the polls of /readyz
            print(f"{time.perf_counter() - started:7.1f} {line.rstrip()}", file=sys.stderr)

    threading.Thread(target=stamp, daemon=True).start()
    try:
        while True:
            if make.poll() is not None:
                raise RuntimeError(f"make run exited with {make.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - started
            except OSError:
                pass
            time.sleep(0.05)
    finally:
        os.killpg(make.pid, 15)
        make.wait()


def _timed_warm_up() -> tuple[dict[str, float], dict[str, float], dict[str, int], float]:
    from numba.core.dispatcher import Dispatcher

    inclusive: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    signatures: dict[str, int] = defaultdict(int)
    nested: list[float] = []  # the callees' seconds of each compile under way
    original = Dispatcher.compile

    def timed(self: Any, sig: Any) -> Any:
        name = f"{self.py_func.__module__.rsplit('.', 1)[-1]}.{self.py_func.__name__}"
        known = len(self.overloads)
        nested.append(0.0)
        started = time.perf_counter()
        try:
            return original(self, sig)
        finally:
            seconds = time.perf_counter() - started
            callees = nested.pop()
            if len(self.overloads) > known:  # compiled now, not found
                inclusive[name] += seconds
                own[name] += seconds - callees
                signatures[name] += 1
            if nested:
                nested[-1] += seconds

    Dispatcher.compile = timed  # type: ignore[method-assign]
    from app.warmup import compile_kernels

    wall = compile_kernels(helper=False)  # every compile in this process, to be timed
    return inclusive, own, signatures, wall


if __name__ == "__main__":
    sys.exit(main())
