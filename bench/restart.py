"""A restart of the embedded service at size: from its index segments, and rebuilt from
SQLite alone (issue 27).

Run from the repository root::

    .venv/bin/python -m bench.restart --docs 1000000 [--runs 3] [--later 50000]

A data directory whose database holds N documents of ``default`` with random
fingerprints (bench/durability.py's, no texts) is written directly through SQLiteStore.
Then the real ``neardup serve`` (devkit/server.py) is started on it:

1. **rebuild**: no segment on disk, every index built from SQLite (the path of a first
   start, and of a damaged segment). Stopped cleanly: the stop writes the segment.
2. **segments**, ``--runs`` times: started on the segment, then stopped with SIGKILL
   (no segment written at the stop: each run maps the same one).
3. **segments + later rows**: ``--later`` more documents are written to the database
   directly (as a service killed after its last segment would have left them), and the
   service is started again: it maps the segment and replays those rows.

With ``--passages``, the documents are instead 3 KB English-like texts (devkit's) inserted
through a Collection over SQLiteStore in batches of 256 into ``default`` created with
shared passages on (its texts kept, every text's winnowed fingerprints indexed): what a
rebuild must then do again is fingerprint every text. The build's clean close writes the
segment; it is removed before the first start, so that the first start rebuilds.

Each start is timed from spawning the process to /readyz 200; its memory is read from
/proc when ready (VmRSS, and apart RssAnon and RssFile, the pages of mapped segment
files) with VmHWM, the peak over the start. Then ``--queries`` searches of stored
documents (GET .../documents/{id}/similar of random ids, one at a time): the first
``--cold`` reported apart (the first queries after a start), and the rest. Nothing is
pinned (with ``--pin`` the server runs on core 0, the client on core 1), and every start
asks the same documents in the same order; each start's p99 by windows of ``--cold``
queries is compared with its later windows' (``windows``). The reference, measured in
the same run: an empty service started ``--runs`` times (what every start costs:
imports, the kernels' loading, uvicorn).

The searches after a restart against those before it (``before_after``): each start from
the segment is the restart of the one before it, which asked the same queries; the p99 of
its queries after the first ``--cold`` (the service settled) and of its first ``--cold``
(cold pages, the first connection) are divided by the p99 of the previous start's queries
after its first ``--cold`` (the service just before it was killed). With ``--cold-cache``
(root only) one more start follows with the page cache dropped first (``sync; echo 3 >
/proc/sys/vm/drop_caches``): the segment and the database read from the disk, as after
a reboot; reported apart.

Over HTTP on two cores the client, the server and the machine's other tenants share the
cores, and a window's p99 varies by +-30% with nothing cold in it. ``--in-process N``
measures what a restart changes, the indexes, with that noise falling on both sides: in
one fresh process (``probe``, run as ``python -m bench.restart --probe N --data DIR``) a
collection rebuilt from SQLite and asked every query once (settled: what a service that
never restarted holds, in anonymous memory) and N times a collection opened from the
segment (a restart: mapped, page tables new) are asked the same queries in turn, on the
segment the rebuild's stop wrote (every row merged in both; before the later rows).
``--paired N`` does the same over HTTP (``paired``): a second ``neardup serve``, rebuilt
with segments off and settled, beside N restarts of one on the segment, each query asked
of both in turn. Printed, and written to bench/results/restart-<N>.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import httpx
import numpy as np

import devkit.server
from app.backends.embedded.registry import Registry
from app.collection_config import CollectionConfig, PassagesConfig
from app.main import DATABASE_FILE
from app.service.types import NewDocument, Query
from app.storage.segments import segments_beside
from app.storage.sqlite import SQLiteStore
from bench.durability import build_database, megabytes, rss_of
from devkit.corpus import english_like_texts
from devkit.harness import markdown_table, write_result
from devkit.server import Server

T = TypeVar("T")
U = TypeVar("U")

TEXT_BATCH = 256
TEXT_CHARS = 3072


@dataclass
class Start:
    kind: str
    ready: float
    memory: dict[str, int]
    cold: list[float]
    warm: list[float]
    stop: float | None = None


def build_passages(path: Path, count: int, seed: int) -> float:
    """``count`` 3 KB texts in ``default`` with shared passages on, inserted in batches
    through a Collection; seconds taken (the close writes the segment)."""
    started = time.perf_counter()
    store = SQLiteStore(path)
    config = CollectionConfig(passages=PassagesConfig(enabled=True))
    store.create_collection("default", config.to_dict())
    registry = Registry(store)
    registry.open()
    collection = registry.get("default")
    for first in range(0, count, TEXT_BATCH):
        size = min(TEXT_BATCH, count - first)
        texts = english_like_texts(seed + first, size, TEXT_CHARS)
        collection.insert([NewDocument(text, f"d{first + i}") for i, text in enumerate(texts)])
        if collection.needs_merge():
            collection.merge()
    registry.close()
    return time.perf_counter() - started


def build_passages_later(path: Path, first: int, count: int) -> None:
    """``count`` more texts after ``first``, closed without writing a segment (as a
    service killed after them would leave them: a start replays them)."""
    registry = Registry(SQLiteStore(path))
    registry.open()
    collection = registry.get("default")
    for start in range(first, first + count, TEXT_BATCH):
        size = min(TEXT_BATCH, first + count - start)
        texts = english_like_texts(start + 7, size, TEXT_CHARS)
        collection.insert([NewDocument(text, f"d{start + i}") for i, text in enumerate(texts)])
    registry.close(save_segments=False)


QUERY_SEED = 1  # every start asks the same documents in the same order


def asked_ids(documents: int, count: int) -> list[str]:
    """The ids of ``count`` random stored documents, the same at every start."""
    numbers = np.random.default_rng(QUERY_SEED).integers(0, documents, count).tolist()
    return [f"d{number}" for number in numbers]


def similar_path(document_id: str) -> str:
    return f"/v1/collections/default/documents/{document_id}/similar"


def in_turn(at: int, first: tuple[T, U], second: tuple[T, U]) -> tuple[tuple[T, U], ...]:
    """The two sides of a pair in the order the ``at``-th query asks them: alternating,
    so that neither is always the one asked just after the other."""
    return (first, second) if at % 2 else (second, first)


def searches(server: Server, documents: int, count: int) -> list[float]:
    """Seconds of ``count`` similar-by-id searches of random stored documents."""
    took = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for document_id in asked_ids(documents, count):
            started = time.perf_counter()
            response = client.get(similar_path(document_id))
            took.append(time.perf_counter() - started)
            if response.status_code != 200:
                raise RuntimeError(f"search answered {response.status_code}: {response.text}")
    return took


# With --pin: the server (and every thread it starts) on the first core, the client on
# the second, so that neither takes the other's core in the middle of a query.
SERVER_CORES, CLIENT_CORES = {0}, {1}


def start(
    data_dir: Path,
    kind: str,
    documents: int,
    queries: int,
    cold: int,
    *,
    clean_stop: bool,
    pin: bool = False,
) -> Start:
    devkit.server.STARTUP_SECONDS = 1800
    server = Server(data_dir, NEARDUP_LOG_LEVEL="warning")
    every_core = os.sched_getaffinity(0)
    if pin:  # the child inherits it
        os.sched_setaffinity(0, SERVER_CORES)
    began = time.perf_counter()
    try:
        server.start()
        ready = time.perf_counter() - began
        if pin:
            os.sched_setaffinity(0, CLIENT_CORES)
        assert server.process is not None
        memory = rss_of(server.process.pid)
        took = searches(server, documents, queries)
    finally:
        os.sched_setaffinity(0, every_core)
    result = Start(kind, ready, memory, took[:cold], took[cold:])
    if clean_stop:
        began = time.perf_counter()
        if server.stop(1800) != 0:
            raise RuntimeError(f"the server did not stop cleanly: {server.output()}")
        result.stop = time.perf_counter() - began
    else:
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
    return result


def milliseconds(values: Sequence[float], q: float) -> str:
    return f"{np.quantile(np.array(values), q) * 1000:.2f}" if values else "-"


def empty_starts(scratch: Path, count: int) -> list[float]:
    """Seconds to /readyz of a service with no data, ``count`` times: the reference a
    start of N documents is compared with in the same run (imports, the kernels'
    loading, uvicorn), on the machine as it is then."""
    took = []
    for number in range(count):
        home = scratch / f"empty-{number}"
        home.mkdir()
        server = Server(home / "data", NEARDUP_LOG_LEVEL="warning")
        began = time.perf_counter()
        server.start()
        took.append(time.perf_counter() - began)
        assert server.process is not None
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
    return took


def windows(starts: list[Start], cold: int) -> str:
    """Each start's p99 by windows of ``cold`` queries, each window against the median of
    the start's other windows: the first window's ratio (cold pages, the first
    connection) beside the later windows' ratios, which show what a window with nothing
    cold in it varies by on this machine. The first start, a rebuild, writes its segment
    in the background meanwhile: left out of the summary."""
    lines = [f"p99 by windows of {cold} queries, each against the median of its start's others:"]
    firsts: list[float] = []
    others: list[float] = []
    for run in starts:
        took = run.cold + run.warm
        p99s = [
            float(np.quantile(np.array(took[at : at + cold]), 0.99))
            for at in range(0, len(took) - cold + 1, cold)
        ]
        if len(p99s) < 3:
            continue
        ratios = [
            p99 / statistics.median(p99s[:at] + p99s[at + 1 :]) for at, p99 in enumerate(p99s)
        ]
        if not run.kind.startswith("rebuild"):
            firsts.append(ratios[0])
            others.extend(ratios[1:])
        lines.append(
            f"- {run.kind}: first window {p99s[0] * 1000:.2f} ms ({ratios[0]:.2f}x), later "
            f"{', '.join(f'{p99 * 1000:.2f}' for p99 in p99s[1:])} ms "
            f"(ratios {min(ratios[1:]):.2f}-{max(ratios[1:]):.2f})"
        )
    if firsts and others:
        low, high = np.quantile(np.array(others), [0.1, 0.9])
        lines.append(
            f"- starts after the first: the first window's ratio, median "
            f"{statistics.median(firsts):.2f} ({', '.join(f'{r:.2f}' for r in firsts)}); a "
            f"later window's, median {statistics.median(others):.2f} (10-90%: {low:.2f}-"
            f"{high:.2f}, {len(others)} windows)"
        )
    return "\n".join(lines)


def before_after(starts: list[Start]) -> str:
    """The p99 of each restart's searches against the p99 of the same searches just
    before it, over consecutive starts of the same documents from the segment (the
    first, a rebuild, writes its segment in the background while it answers: it is no
    service's steady state and is left out)."""
    segment_starts = [run for run in starts if run.kind.startswith("segment, run")]
    settled: list[float] = []
    firsts: list[float] = []
    lines = [
        "p99 after each restart against the p99 just before it (the previous start's, "
        "its first queries left out):"
    ]
    for before, after in itertools.pairwise(segment_starts):
        reference = float(np.quantile(np.array(before.warm), 0.99))
        settled.append(float(np.quantile(np.array(after.warm), 0.99)) / reference)
        firsts.append(float(np.quantile(np.array(after.cold), 0.99)) / reference)
        lines.append(
            f"- {after.kind}: before {reference * 1000:.2f} ms; after, settled "
            f"{milliseconds(after.warm, 0.99)} ms ({settled[-1]:.2f}x), first "
            f"{len(after.cold)} queries {milliseconds(after.cold, 0.99)} ms ({firsts[-1]:.2f}x)"
        )
    if not settled:
        return ""
    lines.append(
        f"- medians over {len(settled)} restarts: settled {statistics.median(settled):.2f}x, "
        f"first queries {statistics.median(firsts):.2f}x"
    )
    return "\n".join(lines)


def open_default(data_dir: Path, *, mapped: bool) -> tuple[Registry, float]:
    """A registry on the bench's database (``mapped``: from its segment; otherwise
    rebuilt from SQLite alone, no segment read or written) and the seconds it took."""
    segments: Literal["beside"] | None = "beside" if mapped else None
    began = time.perf_counter()
    registry = Registry(SQLiteStore(data_dir / DATABASE_FILE, segments=segments))
    registry.open()
    return registry, time.perf_counter() - began


def faults() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_majflt


def probe(
    data_dir: Path, documents: int, queries: int, cold: int, restarts: int
) -> list[dict[str, object]]:
    """In this process, the searches of a restarted collection against those of one
    that did not restart, each query asked of both in turn (so that whatever else the
    machine does falls on both alike): the collection rebuilt from SQLite (anonymous
    memory, as a service that never restarted holds it) is asked the whole sequence once
    to settle; then ``restarts`` times a registry is opened from the segment (mapped,
    page tables new) and the sequence asked of it and of the settled one, the one asked
    first alternating. Each restart: seconds to open, wall seconds of every query of each,
    page faults a query of the mapped one's first ``cold`` and of the rest (the settled
    one's are few: it was asked the same before)."""
    settled_registry, _ = open_default(data_dir, mapped=False)
    settled = settled_registry.get("default")
    drop_database_pages(data_dir)
    document_ids = asked_ids(documents, queries)
    query = Query()
    for document_id in document_ids:
        settled.similar(document_id, query)
    results: list[dict[str, object]] = []
    for _ in range(restarts):
        registry, opened = open_default(data_dir, mapped=True)
        restarted = registry.get("default")
        after: list[float] = []
        before: list[float] = []
        counts = [faults()]
        for at, document_id in enumerate(document_ids):
            if at == cold:
                counts.append(faults())
            for collection, took in in_turn(at, (restarted, after), (settled, before)):
                started = time.perf_counter_ns()
                collection.similar(document_id, query)
                took.append((time.perf_counter_ns() - started) / 1e9)
        counts.append(faults())
        spans = (cold, queries - cold)
        per_query = [[(counts[i + 1][k] - counts[i][k]) / spans[i] for k in (0, 1)] for i in (0, 1)]
        results.append({"opened": opened, "after": after, "before": before, "faults": per_query})
        registry.close(save_segments=False)
        del registry, restarted
    return results


def paired_cells(
    after: Sequence[float], before: Sequence[float], cold: int, ratios: dict[str, list[float]]
) -> list[str]:
    """A restart's two cells, its first ``cold`` queries and the rest: p50 / p99 of the
    restarted side against the settled side over the same queries; each p99 ratio is
    appended to ``ratios["first"]`` and ``ratios["then"]``."""
    cells = []
    for part, span in (("first", slice(0, cold)), ("then", slice(cold, None))):
        p99_after = float(np.quantile(np.array(after[span]), 0.99))
        p99_before = float(np.quantile(np.array(before[span]), 0.99))
        ratios[part].append(p99_after / p99_before)
        cells.append(
            f"{milliseconds(after[span], 0.5)} / {p99_after * 1000:.3f} against "
            f"{milliseconds(before[span], 0.5)} / {p99_before * 1000:.3f} "
            f"(**{ratios[part][-1]:.2f}x**)"
        )
    return cells


def in_process(data_dir: Path, documents: int, queries: int, cold: int, restarts: int) -> str:
    """``probe`` in a fresh process; its p99s, each restart's against the settled
    collection's over the same queries at the same moments."""
    command = [sys.executable, "-m", "bench.restart", "--probe", str(restarts)]
    command += ["--data", str(data_dir), "--docs", str(documents)]
    command += ["--queries", str(queries), "--cold", str(cold)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    results = json.loads(output.splitlines()[-1])
    rows = []
    ratios: dict[str, list[float]] = {"first": [], "then": []}
    for number, result in enumerate(results):
        after, before = result["after"], result["before"]
        row = [str(number + 1), f"{result['opened']:.1f}"]
        row += paired_cells(after, before, cold, ratios)
        row.append(" / ".join(f"{minor:.1f}, {major:.2f}" for minor, major in result["faults"]))
        rows.append(row)
    header = ["restart", "open s", f"first {cold}: p50 / p99 ms, restarted against settled"]
    header += ["then", "faults a query (minor, major): first / then"]
    summary = (
        f"Medians over {len(results)} restarts: p99 of the first {cold} "
        f"{statistics.median(ratios['first']):.2f}x the settled collection's over the same "
        f"queries, then {statistics.median(ratios['then']):.2f}x."
    )
    return "\n\n".join(
        [
            f"In process: {queries:,} Collection.similar calls a restart, each asked of the "
            f"restarted collection (mapped from its segment) and of one rebuilt from SQLite "
            f"and settled, in turn:",
            markdown_table(header, rows),
            summary,
        ]
    )


def drop_database_pages(data_dir: Path) -> None:
    """Drop the database's pages from the page cache (a rebuild read all of it through
    the cache; a service that never restarted has no need of it there, and at 10M it
    pushed the segment's pages out)."""
    for path in data_dir.glob(f"{DATABASE_FILE}*"):
        with open(path, "rb") as file:
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def paired(
    data_dir: Path, documents: int, queries: int, cold: int, restarts: int, *, pin: bool
) -> str:
    """Over HTTP, each restart against a service that did not restart, at the same
    moments: a service rebuilt from SQLite with segments off (its indexes in anonymous
    memory, as one that never restarted holds them; it writes nothing beside the
    database) is asked every query once to settle; then ``restarts`` times a second
    service is started on the segment and each query asked of both in turn (the first
    asked alternating), each through its own connection, so that the noise of two
    shared cores falls on both alike. The settled service holds its ~900 B/doc in
    anonymous memory and the restarted one maps the segment: at 10M about 19 GB
    together."""
    devkit.server.STARTUP_SECONDS = 1800
    every_core = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, SERVER_CORES)
    settled = Server(data_dir, NEARDUP_LOG_LEVEL="warning", NEARDUP_SEGMENTS="false")
    settled.start()
    if pin:
        os.sched_setaffinity(0, CLIENT_CORES)
    drop_database_pages(data_dir)
    paths = [similar_path(document_id) for document_id in asked_ids(documents, queries)]
    rows = []
    ratios: dict[str, list[float]] = {"first": [], "then": []}
    try:
        with httpx.Client(base_url=settled.url, timeout=60) as to_settled:
            for path in paths:
                to_settled.get(path)
            for number in range(restarts):
                if pin:
                    os.sched_setaffinity(0, SERVER_CORES)
                restarted = Server(data_dir, NEARDUP_LOG_LEVEL="warning")
                began = time.perf_counter()
                restarted.start()
                ready = time.perf_counter() - began
                if pin:
                    os.sched_setaffinity(0, CLIENT_CORES)
                after: list[float] = []
                before: list[float] = []
                try:
                    with httpx.Client(base_url=restarted.url, timeout=60) as to_restarted:
                        for at, path in enumerate(paths):
                            turns = in_turn(at, (to_restarted, after), (to_settled, before))
                            for client, took in turns:
                                started = time.perf_counter()
                                response = client.get(path)
                                took.append(time.perf_counter() - started)
                                if response.status_code != 200:
                                    raise RuntimeError(f"search answered {response.text}")
                finally:
                    assert restarted.process is not None
                    restarted.process.send_signal(signal.SIGKILL)
                    restarted.process.wait()
                row = [str(number + 1), f"{ready:.1f}"]
                row += paired_cells(after, before, cold, ratios)
                rows.append(row)
                print(f"paired restart {number + 1}: {row[2:]}", flush=True)
    finally:
        os.sched_setaffinity(0, every_core)
        settled.stop(1800)
    header = ["restart", "to ready s", f"first {cold}: p50 / p99 ms, restarted against settled"]
    header.append("then")
    return "\n\n".join(
        [
            f"Over HTTP, paired: {queries:,} similar searches a restart, each asked of the "
            f"restarted service (from its segment) and of one rebuilt from SQLite and "
            f"settled, in turn"
            + (" (both servers on core 0, the client on core 1):" if pin else ":"),
            markdown_table(header, rows),
            f"Medians over {len(rows)} restarts: p99 of the first {cold} "
            f"{statistics.median(ratios['first']):.2f}x the settled service's over the same "
            f"queries at the same moments, then {statistics.median(ratios['then']):.2f}x.",
        ]
    )


def drop_page_cache() -> bool:
    """Write back and drop the page cache, as a reboot leaves it; False where this
    process may not (not root, a read-only /proc)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def directory_bytes(folder: Path) -> int:
    """The bytes of every file under a folder (a data directory: database, WAL,
    segments)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def segment_bytes(data_dir: Path) -> int:
    return directory_bytes(segments_beside(data_dir / DATABASE_FILE))


def table(starts: list[Start], documents: int) -> str:
    rows = []
    for run in starts:
        memory = run.memory
        rows.append(
            [
                run.kind,
                f"{run.ready:.1f}",
                f"{memory['VmRSS'] / documents:,.0f}",
                f"{memory['RssAnon'] / documents:,.0f} / {memory['RssFile'] / documents:,.0f}",
                f"{memory['VmHWM'] / documents:,.0f} ({memory['VmHWM'] / memory['VmRSS']:.2f}x)",
                f"{milliseconds(run.cold, 0.5)} / {milliseconds(run.cold, 0.99)}",
                f"{milliseconds(run.warm, 0.5)} / {milliseconds(run.warm, 0.99)}",
                "-" if run.stop is None else f"{run.stop:.1f}",
            ]
        )
    header = [
        "start",
        "to ready s",
        "RSS B/doc",
        "anon / file B/doc",
        "peak B/doc (x RSS)",
        "first queries p50 / p99 ms",
        "then p50 / p99 ms",
        "clean stop s",
    ]
    return markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="starts from the segment")
    parser.add_argument("--later", type=int, default=50_000, help="rows after the segment")
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--cold", type=int, default=200, help="first queries reported apart")
    parser.add_argument(
        "--pin", action="store_true", help="the server on core 0, the client on core 1"
    )
    parser.add_argument("--scratch", type=Path, default=None, help="where the data goes")
    parser.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="N",
        help="N restarts in process, each against a settled collection, query by query",
    )
    parser.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="N",
        help="N restarts over HTTP, each against a settled service, query by query",
    )
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--cold-cache",
        action="store_true",
        help="one more start with the page cache dropped first (root)",
    )
    parser.add_argument(
        "--passages", action="store_true", help="3 KB texts with shared passages on"
    )
    parser.add_argument(
        "--no-rebuild",
        action="store_true",
        help="keep the build's segment and skip the rebuild from SQLite (at 10M documents "
        "a rebuild's peak exceeds a 24 GB machine)",
    )
    arguments = parser.parse_args(argv)
    documents = arguments.docs
    if arguments.probe:  # one process of --in-process: its timings as the last line
        args = (arguments.data, documents, arguments.queries, arguments.cold, arguments.probe)
        print(json.dumps(probe(*args)))
        return
    scratch = Path(tempfile.mkdtemp(prefix="neardup-restart-", dir=arguments.scratch))
    try:
        data_dir = scratch / "data"
        database = data_dir / DATABASE_FILE
        if arguments.passages:
            built = build_passages(database, documents, seed=7)
            if not arguments.no_rebuild:
                shutil.rmtree(database.with_suffix(".segments"))
        else:
            built = build_database(database, documents, seed=7)
        print(f"built {documents:,} documents in {built:.1f} s", flush=True)
        queries, cold = arguments.queries, arguments.cold
        pin = arguments.pin
        starts: list[Start] = []
        if not arguments.no_rebuild:
            starts.append(
                start(
                    data_dir,
                    "rebuild (no segment)",
                    documents,
                    queries,
                    cold,
                    clean_stop=True,
                    pin=pin,
                )
            )
            print(table(starts, documents), flush=True)
        written = segment_bytes(data_dir)
        on_disk = directory_bytes(data_dir)
        print(
            f"segment: {megabytes(written)} ({written / documents:,.0f} B/doc); data "
            f"directory {megabytes(on_disk)} ({on_disk / documents:,.0f} B/doc)",
            flush=True,
        )
        for number in range(arguments.runs):
            kind = f"segment, run {number + 1}"
            starts.append(
                start(data_dir, kind, documents, queries, cold, clean_stop=False, pin=pin)
            )
            print(table(starts[-1:], documents), flush=True)
        # Before the later rows: the segment the rebuild's stop wrote holds every row
        # merged, as the rebuilt collection it is compared with does (50,000 rows not
        # merged yet cost a search ~10 us more at 1M, restart or not).
        measured_apart = ""
        if arguments.in_process:
            measured_apart = in_process(data_dir, documents, queries, cold, arguments.in_process)
            print(measured_apart, flush=True)
        if arguments.paired:
            apart = paired(data_dir, documents, queries, cold, arguments.paired, pin=pin)
            measured_apart = f"{measured_apart}\n\n{apart}".strip()
            print(apart, flush=True)
        if arguments.cold_cache:
            if drop_page_cache():
                kind = "segment, page cache dropped"
                starts.append(
                    start(data_dir, kind, documents, queries, cold, clean_stop=False, pin=pin)
                )
                print(table(starts[-1:], documents), flush=True)
            else:
                print("--cold-cache: the page cache cannot be dropped here (needs root)")
        if arguments.passages:
            build_passages_later(database, documents, arguments.later)
        else:
            build_database(database, arguments.later, seed=8, first_row=documents)
        total = documents + arguments.later
        kind_of_documents = (
            "3 KB texts, shared passages on"
            if arguments.passages
            else "random fingerprints, no texts"
        )
        kind = f"segment + {arguments.later:,} later rows"
        starts.append(start(data_dir, kind, total, queries, cold, clean_stop=True, pin=pin))
        empty = empty_starts(scratch, arguments.runs)
        segment_ready = statistics.median(
            s.ready for s in starts if s.kind.startswith("segment, run")
        )
        text = "\n\n".join(
            [
                f"{documents:,} documents ({kind_of_documents}), segment "
                f"{megabytes(written)} ({written / documents:,.0f} B/doc), data directory "
                f"{megabytes(on_disk)} ({on_disk / documents:,.0f} B/doc); "
                f"{os.cpu_count()} cores, "
                + ("server on core 0, client on core 1" if pin else "nothing pinned"),
                table(starts, documents),
                windows(starts, cold),
                before_after(starts),
                measured_apart,
                f"Segment starts, medians: ready {segment_ready:.1f} s. The reference, an "
                f"empty service started {len(empty)} times in the same run: ready in "
                f"{statistics.median(empty):.1f} s (median; "
                f"{', '.join(f'{t:.1f}' for t in empty)}): the documents add "
                f"{segment_ready - statistics.median(empty):.1f} s.",
            ]
        )
        print(text)
        write_result(f"restart-{documents}.md", text)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
