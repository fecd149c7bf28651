"""The Redis store (app/backends/redis/store) against datasketch's MinHashLSH on Redis storage.

Run from the repository root (needs Debian's redis-server: ``make redis``)::

    .venv/bin/python -m bench.redis_store [--sizes 100000,1000000] [--runs 3]
                                          [--datasketch-size 100000] [--queries 500]
                                          [--nice -20] [--quiet 0.2] [--max-other 0.3]

Each run starts its own redis-server on a free localhost port (no persistence: this
measures the layout and the round trips, not the disk; zset-max-listpack-entries 512, as
docs/redis.md advises), stores N documents of seeded synthetic fingerprints (random
64-bit SimHashes, 128-value signatures, 40% of documents a near copy of an earlier one:
a few SimHash bits flipped, a share of signature values replaced), and measures:

- insert: documents a second in batches of 1,000 (three round trips a batch);
- memory: INFO memory used_memory after the inserts minus before, per document;
- search: one document at a time (half planted copies of stored documents, half new),
  all three methods (exact, SimHash k = 3, MinHash LSH verified) with the rows found
  resolved to ids: p50 and p99 latency and round trips a search; and the LSH lookup
  alone (p50 also of the planted copies, which take a second round trip to verify, and
  of the new documents apart);
- datasketch: MinHashLSH(threshold 0.8, 128 values, neardup's bands 16 x 8) with
  ``storage_config={'type': 'redis'}`` on the same kind of server and the same
  signatures: inserts through ``insertion_session`` (buffered pipelines), query p50
  and p99 (candidates only: it stores no signatures to verify with), memory.

Each run measures neardup and then datasketch (the ratio of their lookups' p50 is taken
within a run). The client and the server share the machine's two cores with whatever
else runs there: both run at ``--nice`` (default -20, as root), every timed phase of
searches waits until the machine is quiet (``--quiet``) and is measured again (twice at
most) when other processes took more than ``--max-other`` of a core meanwhile. The
figures are medians over ``--runs`` runs (min-max beside them). The report is printed
and written to ``bench/results/redis_store.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import redis

from app.backends.redis.store.layout import DEFAULT_SHARD_BITS, Layout
from app.backends.redis.store.store import NewDocuments, RedisStore
from devkit.harness import (
    QUIET,
    add_quiet_arguments,
    format_spread,
    latencies_us,
    log,
    machine_summary,
    markdown_table,
    percentile,
    priority,
    quiet_latencies,
    spread,
    write_result,
)
from devkit.redis_peer import (
    BATCH,
    NUM_PERM,
    THRESHOLD,
    PeerRun,
    datasketch_fill,
    datasketch_lsh,
    datasketch_query,
    lean,
    used_memory,
)
from devkit.redis_servers import free_port, start_server

NEAR_SHARE = 0.4
# Layout settings other than the defaults (--shard-bits).
LAYOUT_OPTIONS: dict[str, int] = {}


@dataclass
class Data:
    simhash: np.ndarray
    minhash: np.ndarray
    exact: np.ndarray

    def documents(self, start: int, end: int) -> NewDocuments:
        ids = [f"doc-{i}" for i in range(start, end)]
        return NewDocuments(
            ids,
            self.simhash[start:end],
            self.minhash[start:end],
            self.exact[start:end],
            np.arange(start, end, dtype=np.int64),
            [self.exact[i].tobytes() for i in range(start, end)],
            [b"{}"] * (end - start),
        )


def synthetic(seed: int, count: int) -> Data:
    """Random fingerprints, NEAR_SHARE of them near copies of an earlier document."""
    rng = np.random.default_rng(seed)
    simhash = rng.integers(0, 2**64, size=count, dtype=np.uint64)
    minhash = rng.integers(0, 2**32, size=(count, NUM_PERM), dtype=np.uint32)
    exact = rng.integers(0, 2**64, size=(count, 2), dtype=np.uint64)
    near = np.flatnonzero(rng.random(count) < NEAR_SHARE)
    near = near[near > 0]
    sources = (rng.random(len(near)) * near).astype(np.int64)
    flips = rng.integers(0, 64, size=(len(near), 3), dtype=np.uint64)
    simhash[near] = simhash[sources]
    for column in range(3):
        simhash[near] ^= np.uint64(1) << flips[:, column]
    replaced = rng.random((len(near), NUM_PERM)) < rng.choice([0.05, 0.15, 0.3], len(near))[:, None]
    copies = minhash[sources]
    copies[replaced] = rng.integers(0, 2**32, size=int(replaced.sum()), dtype=np.uint32)
    minhash[near] = copies
    return Data(simhash, minhash, exact)


def queries(data: Data, seed: int, count: int) -> Data:
    """Half planted copies of stored documents, half new ones."""
    rng = np.random.default_rng(seed + 1)
    fresh = synthetic(seed + 2, count)
    stored = rng.integers(0, len(data.simhash), size=count // 2)
    fresh.simhash[: count // 2] = data.simhash[stored] ^ np.uint64(1)
    fresh.minhash[: count // 2] = data.minhash[stored]
    fresh.minhash[: count // 2, :10] = 7
    return fresh


async def _forward(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    try:
        while data := await reader.read(1 << 16):
            await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _proxy(listen: int, port: int, delay: float) -> None:
    async def connected(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(
            _forward(client_r, server_w, delay),
            _forward(server_r, client_w, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connected, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


def run_proxy(listen: int, port: int, delay: float) -> None:
    """A TCP proxy to localhost:port that holds every chunk ``delay`` seconds each way: a
    network between client and Redis, in its own process. (asyncio sleeps in whole
    milliseconds of epoll, so the round trip it adds is measured, not assumed.)"""
    asyncio.run(_proxy(listen, port, delay))


@dataclass
class Run:
    insert_rate: float = 0.0
    bytes_per_doc: float = 0.0
    search_p50_us: float = 0.0
    search_p99_us: float = 0.0
    lsh_p50_us: float = 0.0
    lsh_p99_us: float = 0.0
    lsh_planted_p50_us: float = 0.0  # the queries that find a stored copy (2 round trips)
    lsh_new_p50_us: float = 0.0  # those that find nothing (1 round trip)
    round_trips: float = 0.0
    matches: float = 0.0


@dataclass
class Network:
    """Lookups through a proxy that delays each chunk: (p50, p99) microseconds."""

    delay_ms: float
    ping: tuple[float, float] = (0.0, 0.0)
    search: tuple[float, float] = (0.0, 0.0)
    lsh: tuple[float, float] = (0.0, 0.0)
    peer: tuple[float, float] = (0.0, 0.0)


@dataclass
class Result:
    size: int
    runs: list[Run] = field(default_factory=list)
    peer_size: int = 0
    peer: list[PeerRun] = field(default_factory=list)
    network: Network | None = None


def p50_p99(values: list[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 99)


def through_network(port: int, data: Data, probe: Data, delay_ms: float, peer: bool) -> Network:
    """Both contenders' lookups through a delaying proxy. datasketch's index is the one the
    last peer run left in Redis; neardup's is stored again (directly) after it."""
    result = Network(delay_ms)
    listen = free_port()
    proxy = multiprocessing.Process(
        target=run_proxy, args=(listen, port, delay_ms / 1000), daemon=True
    )
    proxy.start()
    try:
        slow = redis.Redis(port=listen)
        deadline = time.monotonic() + 10
        while True:
            try:
                slow.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        result.ping = p50_p99(latencies_us(lambda _: slow.ping(), range(200)))
        count = len(probe.minhash)
        if peer:
            lsh = datasketch_lsh(listen)
            probes = [lean(probe.minhash[q]) for q in range(count)]
            result.peer = p50_p99(latencies_us(lsh.query, probes))
        direct = redis.Redis(port=port)
        direct.flushall()
        layout = Layout("network", num_perm=NUM_PERM, threshold=THRESHOLD, **LAYOUT_OPTIONS)
        loader = RedisStore(direct, layout)
        loader.setup()
        size = len(data.simhash)
        for begin in range(0, size, BATCH):
            loader.insert(data.documents(begin, min(size, begin + BATCH)))
        store = RedisStore(slow, layout)

        def search(q: int) -> None:
            store.search(probe.simhash[q : q + 1], probe.minhash[q : q + 1], probe.exact[q : q + 1])

        def lsh_only(q: int) -> None:
            store.search(
                probe.simhash[q : q + 1],
                probe.minhash[q : q + 1],
                probe.exact[q : q + 1],
                methods=("minhash",),
                records=False,
            )

        result.search = p50_p99(latencies_us(search, range(count)))
        result.lsh = p50_p99(latencies_us(lsh_only, range(count)))
    finally:
        proxy.terminate()
        proxy.join()
    return result


def neardup_run(client: redis.Redis, data: Data, probe: Data, run: int) -> Run:
    client.flushall()
    layout = Layout(f"bench{run}", num_perm=NUM_PERM, threshold=THRESHOLD, **LAYOUT_OPTIONS)
    store = RedisStore(client, layout)
    store.setup()
    size = len(data.simhash)
    before = used_memory(client)
    start = time.perf_counter()
    for begin in range(0, size, BATCH):
        store.insert(data.documents(begin, min(size, begin + BATCH)))
    elapsed = time.perf_counter() - start
    result = Run(size / elapsed, (used_memory(client) - before) / size)
    found: list[int] = []

    def search(q: int) -> None:
        answer = store.search(
            probe.simhash[q : q + 1], probe.minhash[q : q + 1], probe.exact[q : q + 1]
        )
        found.append(len(answer.rows.rows))

    count = len(probe.simhash)
    trips_before = store.round_trips
    for q in range(count):  # untimed: round trips and matches (a timed phase may repeat)
        search(q)
    result.round_trips = (store.round_trips - trips_before) / count
    result.matches = statistics.mean(found)
    latency = quiet_latencies(search, list(range(count)), "search")
    result.search_p50_us, result.search_p99_us = percentile(latency, 50), percentile(latency, 99)

    def lsh(q: int) -> None:
        store.search(
            probe.simhash[q : q + 1],
            probe.minhash[q : q + 1],
            probe.exact[q : q + 1],
            methods=("minhash",),
            records=False,
        )

    lsh(0)  # warm-up
    latency = quiet_latencies(lsh, list(range(count)), "LSH lookup")
    result.lsh_p50_us, result.lsh_p99_us = percentile(latency, 50), percentile(latency, 99)
    result.lsh_planted_p50_us = percentile(latency[: count // 2], 50)  # queries(): planted first
    result.lsh_new_p50_us = percentile(latency[count // 2 :], 50)
    return result


def datasketch_run(client: redis.Redis, port: int, data: Data, probe: Data, size: int) -> PeerRun:
    client.flushall()
    lsh, result = datasketch_fill(client, port, data.minhash[:size])
    datasketch_query(lsh, result, probe.minhash)
    return result


def measure(size: int, peer_size: int, runs: int, query_count: int, delay_ms: float) -> Result:
    result = Result(size, peer_size=peer_size)
    data = synthetic(0, max(size, peer_size))
    probe = queries(
        Data(data.simhash[:size], data.minhash[:size], data.exact[:size]), 0, query_count
    )
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(Path(directory), "--maxmemory", "0")
        try:
            client = redis.Redis(port=server.port)
            sized = Data(data.simhash[:size], data.minhash[:size], data.exact[:size])
            QUIET.server_pid = server.process.pid
            for run in range(runs):
                log(f"neardup at {size:,}: run {run + 1} of {runs}")
                result.runs.append(neardup_run(client, sized, probe, run))
                log(_lookup_line(result.runs[-1]))
                if peer_size:
                    log(f"datasketch at {peer_size:,}: run {run + 1} of {runs}")
                    peer = datasketch_run(client, server.port, data, probe, peer_size)
                    result.peer.append(peer)
                    ratio = peer.query_p50_us / result.runs[-1].lsh_p50_us
                    log(f"datasketch query p50 {peer.query_p50_us:.0f} us: {ratio:.1f}x ours")
            if delay_ms:
                log(f"through a proxy delaying {delay_ms} ms each way")
                network_probe = Data(probe.simhash[:200], probe.minhash[:200], probe.exact[:200])
                result.network = through_network(
                    server.port, sized, network_probe, delay_ms, bool(peer_size)
                )
            client.flushall()
        finally:
            server.stop()
    return result


def _lookup_line(run: Run) -> str:
    return (
        f"LSH lookup p50 {run.lsh_p50_us:.0f} us (planted {run.lsh_planted_p50_us:.0f}, new "
        f"{run.lsh_new_p50_us:.0f}), p99 {run.lsh_p99_us:.0f}; search p50 "
        f"{run.search_p50_us:.0f} us; {run.insert_rate:,.0f} inserts/s"
    )


def report(results: list[Result], runs: int, query_count: int) -> str:
    def figure(values: list[float], fmt: str = "{:,.0f}") -> str:
        timing = spread(values)
        return format_spread(timing, lambda v: fmt.format(v))

    rows = []
    for result in results:
        r = result.runs
        rows.append(
            [
                f"{result.size:,}",
                "neardup RedisStore",
                figure([x.insert_rate for x in r]),
                figure([x.bytes_per_doc for x in r]),
                figure([x.search_p50_us / 1000 for x in r], "{:.2f}"),
                figure([x.search_p99_us / 1000 for x in r], "{:.2f}"),
                figure([x.lsh_p50_us / 1000 for x in r], "{:.3f}"),
                figure([x.round_trips for x in r], "{:.2f}"),
            ]
        )
        if result.peer:
            p = result.peer
            rows.append(
                [
                    f"{result.peer_size:,}",
                    "datasketch MinHashLSH, Redis storage",
                    figure([x.insert_rate for x in p]),
                    figure([x.bytes_per_doc for x in p]),
                    "-",
                    "-",
                    figure([x.query_p50_us / 1000 for x in p], "{:.3f}")
                    + " (p99 "
                    + figure([x.query_p99_us / 1000 for x in p], "{:.2f}")
                    + ")",
                    f"{NUM_PERM // 8}",
                ]
            )
    lines = [
        "# Redis store benchmark",
        "",
        f"Machine: {machine_summary(0)}; redis-server on the same machine (loopback), "
        "sharing its 2 cores with the client and with other jobs running at the time.",
        f"Medians over {runs} runs (min-max); {query_count} single-document searches a run; "
        f"shard bits {LAYOUT_OPTIONS.get('shard_bits', DEFAULT_SHARD_BITS)}.",
        "",
        markdown_table(
            [
                "N",
                "contender",
                "insert docs/s",
                "bytes/doc",
                "search p50 ms",
                "search p99 ms",
                "LSH lookup p50 ms",
                "round trips/search",
            ],
            rows,
            ["right", "left", "right", "right", "right", "right", "right", "right"],
        ),
        "",
        "search: exact + SimHash (k = 3) + MinHash LSH verified, rows resolved to ids. "
        "LSH lookup: the bands and verification alone (neardup); candidates alone, one "
        "round trip per band (datasketch, which stores no signatures to verify with).",
    ]
    for result in results:
        lines.append("")
        lines.append(
            f"At {result.size:,}, LSH lookup p50 of the planted copies (verified in a second "
            "round trip) "
            + figure([x.lsh_planted_p50_us / 1000 for x in result.runs], "{:.3f}")
            + " ms, of the new documents (one round trip) "
            + figure([x.lsh_new_p50_us / 1000 for x in result.runs], "{:.3f}")
            + " ms."
        )
        if result.peer:
            ratios = [
                p.query_p50_us / r.lsh_p50_us for r, p in zip(result.runs, result.peer, strict=True)
            ]
            lines.append("")
            lines.append(
                f"At {result.size:,}: datasketch's query p50 at {result.peer_size:,} over our "
                f"LSH lookup p50, run by run: {', '.join(f'{x:.1f}x' for x in ratios)} (median "
                f"{statistics.median(ratios):.1f}x); matches resolved per search "
                f"{statistics.median(x.matches for x in result.runs):.2f}."
            )
    for result in results:
        net = result.network
        if net is None:
            continue
        ms = "{:.2f}".format
        lines += [
            "",
            f"Through a TCP proxy (its own process) that holds each chunk {net.delay_ms} ms each "
            f"way (asyncio's epoll waits in whole milliseconds, so the round trip is measured: "
            f"PING p50 {ms(net.ping[0] / 1000)} ms), at {result.size:,} documents, "
            "200 searches, one run:",
            "",
            markdown_table(
                ["lookup", "p50 ms", "p99 ms"],
                [
                    [
                        "neardup search (all methods, ids)",
                        ms(net.search[0] / 1000),
                        ms(net.search[1] / 1000),
                    ],
                    ["neardup LSH lookup (verified)", ms(net.lsh[0] / 1000), ms(net.lsh[1] / 1000)],
                    ["datasketch MinHashLSH.query", ms(net.peer[0] / 1000), ms(net.peer[1] / 1000)],
                ],
                ["left", "right", "right"],
            ),
        ]
        if net.peer[0]:
            lines += [
                "",
                f"LSH lookup p50: {net.peer[0] / net.lsh[0]:.1f}x faster than datasketch's.",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--datasketch-size", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--network-delay-ms", type=float, default=0.5)
    parser.add_argument("--shard-bits", type=int, help="the tables' (default: the layout's)")
    parser.add_argument("--nice", type=int, default=-20, help="this process and Redis (-20)")
    add_quiet_arguments(parser, quiet=0.2, timeout=60, max_other=0.3)
    args = parser.parse_args()
    QUIET.quiet, QUIET.timeout, QUIET.max_other = args.quiet, args.quiet_timeout, args.max_other
    if args.shard_bits is not None:
        LAYOUT_OPTIONS["shard_bits"] = args.shard_bits
    sizes = [int(s) for s in args.sizes.split(",")]
    with priority(args.nice):
        results = [
            measure(
                size,
                args.datasketch_size if i == 0 else 0,
                args.runs,
                args.queries,
                args.network_delay_ms if i == 0 else 0.0,
            )
            for i, size in enumerate(sizes)
        ]
    text = report(results, args.runs, args.queries)
    print(text)
    write_result("redis_store.md", text)


if __name__ == "__main__":
    main()
