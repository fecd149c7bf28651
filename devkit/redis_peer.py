"""The Redis benchmarks' peer: datasketch's MinHashLSH with Redis storage.

MinHashLSH(threshold 0.8, 128 values, neardup's bands 16 x 8) with
``storage_config={'type': 'redis'}`` (keys ``bench...``), filled through
``insertion_session`` (buffered pipelines) and queried one signature at a time: what
bench/redis_store.py and bench/redis_http.py set neardup's Redis store beside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import datasketch  # type: ignore[import-untyped]
import numpy as np
import redis

from devkit.harness import percentile, quiet_latencies

NUM_PERM = 128
THRESHOLD = 0.8
BATCH = 1000  # documents a batch (neardup's inserts) or a pipeline buffer (datasketch's)
DATASKETCH_SEED = 1


@dataclass
class PeerRun:
    insert_rate: float = 0.0
    bytes_per_doc: float = 0.0
    query_p50_us: float = 0.0
    query_p99_us: float = 0.0


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def datasketch_lsh(port: int) -> Any:
    storage = {"type": "redis", "basename": b"bench", "redis": {"host": "127.0.0.1", "port": port}}
    return datasketch.MinHashLSH(
        threshold=THRESHOLD, num_perm=NUM_PERM, params=(16, 8), storage_config=storage
    )


def lean(values: np.ndarray) -> Any:
    return datasketch.LeanMinHash(
        seed=DATASKETCH_SEED, hashvalues=values.astype(np.uint64), scheme="affine32"
    )


def datasketch_fill(client: redis.Redis, port: int, signatures: np.ndarray) -> tuple[Any, PeerRun]:
    """A MinHashLSH on Redis storage (keys ``bench...``) holding ``signatures`` as
    ``doc-{i}``, inserted through ``insertion_session``: the index, the insert rate and
    used_memory added per document."""
    lsh = datasketch_lsh(port)
    objects = [lean(values) for values in signatures]
    before = used_memory(client)
    start = time.perf_counter()
    with lsh.insertion_session(buffer_size=BATCH) as session:
        for i, minhash in enumerate(objects):
            session.insert(f"doc-{i}", minhash, check_duplication=False)
    elapsed = time.perf_counter() - start
    size = len(objects)
    return lsh, PeerRun(size / elapsed, (used_memory(client) - before) / size)


def datasketch_query(lsh: Any, result: PeerRun, signatures: np.ndarray) -> list[float]:
    """Microseconds of each ``lsh.query``, one signature at a time; p50 and p99 in result."""
    probes = [lean(values) for values in signatures]
    lsh.query(probes[0])  # warm-up
    latency = quiet_latencies(lsh.query, probes, "datasketch query")
    result.query_p50_us, result.query_p99_us = percentile(latency, 50), percentile(latency, 99)
    return latency
