"""What each numba kernel costs to compile: ``neardup warm-up`` run into an empty cache.

    python -m bench.compile_costs [--top 25]
    python -m bench.compile_costs --walls 3


Sets ``NUMBA_CACHE_DIR`` to a fresh directory (so nothing is loaded from a cache), times
every ``Dispatcher.compile`` the warm-up triggers and prints, per kernel, the seconds
with its callees (a caller's first call types and compiles its callees inside its own),
the seconds of its own (callees' compiles subtracted) and the type signatures it was
compiled for. The warm-up's wall time is printed last (without its helper process, so that
every compile is timed here). numba compiles one kernel at a time.

``--walls N``: instead, ``neardup warm-up`` itself (a fresh process) into an empty cache,
alone (``compile_kernels(helper=False)``) and with its helper process, N times each,
interleaved; the wall seconds of each and their medians.
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
    arguments = parser.parse_args()
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
