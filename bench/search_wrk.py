"""Search throughput and latency with wrk, a C load generator that is not the bottleneck.

    .venv/bin/python bench/search_wrk.py --count 1000000 [--clients 16] [--duration 20]
                                         [--runs 3] [--sizes 100000,1000000]

Starts ``neardup serve`` (log level warning) on a temporary data directory, or with
``--server peer`` the peer of bench/service.py (bench/peer_app.py), preloads
documents ``pre-{i}`` (3 KB varied Reuters, loadtest/corpus.py) in batches of 256 up to
each size, and at each size runs ``wrk`` with ``--clients`` connections on 2 threads for
``--duration`` seconds, ``--runs`` times: POST /v1/collections/default/search with 3 KB
bodies cycling through 512 pre-made texts (a fifth near-duplicates of preloaded
documents), and GET /healthz as the framework's own ceiling in the same run. The server
is pinned to CPU 0 and wrk to CPU 1 (``--no-pin`` to leave both free). Reports medians
over runs of requests/s and p50 / p99 latency (wrk's own histogram), the server's resident
memory per document, and writes bench/results/search_wrk.md and .json.

Needs ``wrk`` on the PATH (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "loadtest"))

from _common import (  # noqa: E402
    WrkRun,
    machine_summary,
    markdown_table,
    median_run,
    run_wrk,
    write_result,
)
from corpus import Corpus, load_corpus  # noqa: E402
from preload import preload  # noqa: E402
from service import neardup, peer  # noqa: E402

from loadtest.proc import rss_bytes  # noqa: E402

SERVER_CPU, CLIENT_CPU = 0, 1
TARGET_RPS, TARGET_P99_MS = 1500, 25.0  # issue 6, at 1M documents
BODIES = 512
SEARCH_PATH = "/v1/collections/default/search"
# wrk Lua: each connection cycles through the bodies from its own offset.
LUA = """
local bodies = {}
for line in io.lines("%s") do bodies[#bodies + 1] = line end
local counter = 0
request = function()
  counter = counter + 1
  local body = bodies[(counter %% #bodies) + 1]
  return wrk.format("POST", "%s", {["Content-Type"] = "application/json"}, body)
end
"""


@dataclass
class SizePoint:
    documents: int
    rss_bytes_per_document: float
    preload_docs_per_second: float  # batches of 256, 2 clients, durable (FULL)
    search: list[WrkRun]
    healthz: list[WrkRun]


def write_script(root: Path, size: int, corpus: Corpus, rng: random.Random) -> Path:
    """The wrk script and its request bodies for an index of ``size`` documents."""
    bodies = root / f"bodies-{size}.jsonl"
    with bodies.open("w") as out:
        for _ in range(BODIES):
            if rng.random() < 0.2:  # a near-duplicate of a stored document
                text = corpus.near_duplicate(corpus.document(rng.randrange(size)), rng)
            else:  # most searches: a new text, found nowhere
                text = corpus.document(size + rng.randrange(10**9))
            out.write(json.dumps({"text": text}) + "\n")
    script = root / f"search-{size}.lua"
    script.write_text(LUA % (bodies, SEARCH_PATH))
    return script


def plot(points: list[SizePoint], arguments: argparse.Namespace) -> Path:
    """Search requests/s and p50 / p99 latency against the index size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [point.documents for point in points]
    medians = [median_run(point.search) for point in points]
    figure, (rate_axis, latency_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    rate_axis.plot(sizes, [m.requests_per_second for m in medians], marker="o", label="search")
    rate_axis.axhline(TARGET_RPS, color="grey", linestyle="--", linewidth=1, label="target")
    rate_axis.set_ylabel("requests per second")
    rate_axis.set_ylim(bottom=0)
    latency_axis.plot(sizes, [m.p50_ms for m in medians], marker="o", label="p50")
    latency_axis.plot(sizes, [m.p99_ms for m in medians], marker="o", label="p99")
    latency_axis.axhline(
        TARGET_P99_MS, color="grey", linestyle="--", linewidth=1, label="p99 target"
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


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--sizes", help="comma-separated sizes measured on the way to --count")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    parser.add_argument("--plot", action="store_true", help="draw docs/search-wrk-<server>.png")
    parser.add_argument(
        "--server",
        choices=["neardup", "peer"],
        default="neardup",
        help="peer: bench/peer_app.py (datasketch MinHashLSH + simhash.SimhashIndex)",
    )
    arguments = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/search_wrk.py needs wrk on the PATH (apt-get install wrk)")
    sizes = sorted({int(s) for s in (arguments.sizes or "").split(",") if s} | {arguments.count})

    corpus = load_corpus()
    rng = random.Random(0)
    root = Path(tempfile.mkdtemp(prefix="neardup-wrk-"))
    launch = neardup if arguments.server == "neardup" else peer
    options = argparse.Namespace(
        data_dir=None, synchronous="FULL", log_level="warning", peer_hash="default"
    )
    wrk = {
        "clients": arguments.clients,
        "duration": arguments.duration,
        "cpu": CLIENT_CPU if arguments.pin else None,
    }
    points: list[SizePoint] = []
    try:
        with launch(options) as server:
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
                script = write_script(root, size, corpus, rng)
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
        log(f"plot: {plot(points, arguments)}")
    write_result(f"search_wrk-{arguments.server}.md", report)
    write_result(
        f"search_wrk-{arguments.server}.json", json.dumps([asdict(p) for p in points], indent=1)
    )


if __name__ == "__main__":
    main()
