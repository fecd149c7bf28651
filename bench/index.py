"""Index speed and memory: HammingIndex and LSHIndex against brute force and the peer libraries.

Run from the repository root::

    .venv/bin/python -m bench.index [--sizes 100000,1000000,10000000] [--lsh-size 100000]
                                    [--lsh-large 1000000] [--runs 3] [--seed 0] [--quick]

Everything runs on one pinned core with every thread pool capped at one thread, on seeded
synthetic data: uniformly random 64-bit fingerprints, and random 128-value MinHash
signatures with planted near-duplicates. Sections:

1. HammingIndex, k = 3: insert throughput in batches of 10,000 (with the merges
   ``needs_merge()`` asks for), the final full merge, single-query latency against numpy
   brute force and ``simhash.SimhashIndex``, and the block layouts 4, 5 and 6.
2. Single-query latency while ``merge()`` runs in a background thread.
3. LSHIndex, threshold 0.8, 128 values: insert, single and batched queries, memory and
   recall of the planted near-duplicates, against datasketch and rensa.
4. Memory per document at 1M: Hamming tables + LSH tables + signatures.

Every neardup result checked is asserted equal to brute force. Figures over runs are
shown as ``median (min-max)``. The report is printed and written to
``bench/results/index.md``.
"""

from __future__ import annotations

import os

from devkit.harness import THREAD_LIMITS

# Thread pools size themselves when their library is imported, so cap them first.
os.environ.update(THREAD_LIMITS)

import argparse
import gc
import itertools
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Protocol

import datasketch
import numpy as np
import numpy.typing as npt
import rensa
import simhash

from app.core.hamming import HammingIndex, block_layout
from app.core.lsh import (
    FALSE_NEGATIVE_WEIGHT,
    FALSE_POSITIVE_WEIGHT,
    LSHIndex,
    candidate_probability,
    min_matches,
)
from devkit.harness import (
    Timing,
    format_ratio,
    format_spread,
    format_us,
    latencies_us,
    machine_summary,
    markdown_table,
    percentile,
    pin_to_one_core,
    release_memory,
    rss_bytes,
    spread,
    write_result,
)

U64Array = npt.NDArray[np.uint64]
U32Array = npt.NDArray[np.uint32]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]

MAX_DISTANCE = 3
THRESHOLD = 0.8
NUM_PERM = 128
MIN_MATCHES = min_matches(THRESHOLD, NUM_PERM)  # 103 of 128 agreeing values
INSERT_BATCH = 10_000
QUERY_BATCH = 1_000
LAYOUT_BLOCKS = (4, 5, 6)
PLANTED_FRACTION = 0.10  # documents that are perturbed copies of an earlier one
PLANTED_RATES = (0.1, 0.3)  # each copy replaces each value with a probability in this range
QUERY_RATE = 0.1  # LSH queries: stored signatures with each value replaced at this rate
SIMHASH_MAX_SIZE = 1_000_000  # the pure-Python SimhashIndex is not run above this
PEER_BUDGET_S = 180.0  # skip a peer at a size where its build is projected to take longer
DATASKETCH_SEED = 1  # only labels the LeanMinHash objects; the hash values are given
WARM_UP_QUERIES = 200

TARGET_HAMMING_P50_US = 20.0  # at 10M
TARGET_INSERT_RATE = 200_000  # fingerprints per second, batched
TARGET_LSH_P50_US = 25.0
TARGET_LSH_BATCHED_US = 5.0
TARGET_BYTES_PER_DOC = 800  # at 1M


@dataclass(frozen=True, slots=True)
class Settings:
    sizes: tuple[int, ...]  # Hamming index sizes
    lsh_sizes: tuple[int, ...]
    layout_size: int  # block layouts and queries during a merge are measured at this size
    merge_extra: int  # fingerprints inserted unmerged before the background merge
    runs: int
    seed: int
    queries: int  # single queries per pass
    batched_queries: int  # LSH queries per search_many pass, in batches of QUERY_BATCH
    verify: int  # queries checked against brute force per size
    recall_sample: int  # planted documents whose LSH results are checked by brute force


FULL = Settings(
    sizes=(100_000, 1_000_000, 10_000_000),
    lsh_sizes=(100_000, 1_000_000),
    layout_size=1_000_000,
    merge_extra=150_000,
    runs=3,
    seed=0,
    queries=2_000,
    batched_queries=10_000,
    verify=200,
    recall_sample=200,
)
QUICK = Settings(
    sizes=(10_000, 50_000),
    lsh_sizes=(10_000, 30_000),
    layout_size=50_000,
    merge_extra=15_000,
    runs=1,
    seed=0,
    queries=300,
    batched_queries=2_000,
    verify=50,
    recall_sample=50,
)


def brute_queries(size: int) -> int:
    """Brute-force queries timed per pass: ~50 up to 1M fingerprints, ~10 above."""
    return 50 if size <= 1_000_000 else 10


class Index(Protocol):
    def insert(self, values: Any, rows: npt.NDArray[np.integer]) -> None: ...
    def needs_merge(self) -> bool: ...
    def merge(self) -> bool: ...
    def memory_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Build:
    """One batched build of a neardup index."""

    seconds: float  # inserts plus the merges needs_merge() asked for
    merges: int
    merge_seconds: float  # of those merges
    final_merge_seconds: float  # one more full merge after the last batch
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Latency:
    """Per-run p50 and p99 of single queries, in microseconds."""

    p50: Timing
    p99: Timing


# --- data -------------------------------------------------------------------------------


def random_fingerprints(seed: int, count: int) -> U64Array:
    """``count`` uniformly random 64-bit fingerprints (the same for the same seed and count)."""
    rng = np.random.default_rng([seed, 1, count])
    return rng.integers(0, 2**64, count, dtype=np.uint64)


def hamming_queries(seed: int, stored: U64Array, count: int) -> U64Array:
    """Half stored fingerprints with 0 to 3 distinct random bits flipped, half random."""
    rng = np.random.default_rng([seed, 2, len(stored)])
    near = count // 2
    base = stored[rng.integers(0, len(stored), near)]
    flips = rng.integers(0, MAX_DISTANCE + 1, near)
    positions = np.argsort(rng.random((near, 64)), axis=1)[:, :MAX_DISTANCE].astype(np.uint64)
    bits = np.left_shift(np.uint64(1), positions)
    bits[np.arange(MAX_DISTANCE)[None, :] >= flips[:, None]] = 0
    queries = np.concatenate(
        [base ^ np.bitwise_or.reduce(bits, axis=1), random_fingerprints(seed + 1, count - near)]
    )
    rng.shuffle(queries)
    return queries


@dataclass(frozen=True, slots=True)
class Signatures:
    """MinHash signatures with planted near-duplicates: ``docs[i]`` copies ``sources[i]``."""

    values: U32Array  # (n, NUM_PERM)
    docs: I64Array
    sources: I64Array
    agreement: I64Array  # equal positions between each planted doc and its source


def planted_signatures(seed: int, count: int) -> Signatures:
    """Random signatures; 10% of the documents are copies of an earlier one (any earlier
    one, copies included) with each value replaced at a rate drawn from 0.1 to 0.3.
    """
    rng = np.random.default_rng([seed, 3, count])
    values = rng.integers(0, 2**32, (count, NUM_PERM), dtype=np.uint32)
    docs = np.sort(rng.choice(np.arange(1, count), int(count * PLANTED_FRACTION), replace=False))
    sources = (rng.random(len(docs)) * docs).astype(np.int64)  # uniform over [0, doc)
    rates = rng.uniform(*PLANTED_RATES, len(docs))
    for start in range(0, len(docs), INSERT_BATCH):
        chunk = slice(start, start + INSERT_BATCH)
        replace = rng.random((len(docs[chunk]), NUM_PERM)) < rates[chunk, None]
        fresh = rng.integers(0, 2**32, replace.shape, dtype=np.uint32)
        # In document order, so a source that is itself a copy is already final.
        for doc, source, mask, new in zip(docs[chunk], sources[chunk], replace, fresh, strict=True):
            values[doc] = np.where(mask, new, values[source])
    agreement = np.count_nonzero(values[docs] == values[sources], axis=1)
    return Signatures(values, docs, sources, agreement.astype(np.int64))


def perturbed(rng: np.random.Generator, signatures: U32Array, rate: float) -> U32Array:
    """Copies with each value replaced by a random one with probability ``rate``."""
    replace = rng.random(signatures.shape) < rate
    fresh = rng.integers(0, 2**32, signatures.shape, dtype=np.uint32)
    return np.where(replace, fresh, signatures)


# --- references -------------------------------------------------------------------------


def brute_hamming(stored: U64Array, query: np.uint64) -> I64Array:
    """Rows within MAX_DISTANCE of ``query``: the numpy one-liner a user would write."""
    return np.flatnonzero(np.bitwise_count(stored ^ query) <= MAX_DISTANCE)


def agreements(values: U32Array, query: U32Array) -> npt.NDArray[np.uint8]:
    """Equal positions between ``query`` and every stored signature (brute force).

    In blocks of rows that stay in cache; uint8 suffices for at most 255 positions.
    """
    out = np.empty(len(values), dtype=np.uint8)
    block = 16_384
    for start in range(0, len(values), block):
        equal = (values[start : start + block] == query).view(np.uint8)
        np.add.reduce(equal, axis=1, dtype=np.uint8, out=out[start : start + block])
    return out


# --- neardup helpers --------------------------------------------------------------------


def build(index: Index, values: Any, rows: I64Array) -> Build:
    """Insert in batches of INSERT_BATCH, merging synchronously whenever asked, then time
    one final full merge (merge() always rewrites the tables, even with an empty buffer).
    """
    release_memory()
    merges, merge_ns = 0, 0
    start = time.perf_counter_ns()
    for begin in range(0, len(rows), INSERT_BATCH):
        index.insert(values[begin : begin + INSERT_BATCH], rows[begin : begin + INSERT_BATCH])
        if index.needs_merge():
            merge_start = time.perf_counter_ns()
            index.merge()
            merge_ns += time.perf_counter_ns() - merge_start
            merges += 1
    seconds = (time.perf_counter_ns() - start) / 1e9
    final_start = time.perf_counter_ns()
    index.merge()
    final_seconds = (time.perf_counter_ns() - final_start) / 1e9
    return Build(seconds, merges, merge_ns / 1e9, final_seconds, index.memory_bytes())


def bulk_hamming(stored: U64Array, blocks: int | None = None) -> HammingIndex:
    """A fully merged index from one insert of every fingerprint (fast; not timed)."""
    index = HammingIndex(MAX_DISTANCE, blocks)
    index.insert(stored, np.arange(len(stored)))
    index.merge()
    return index


def latency(function: Callable[[Any], object], queries: Sequence[Any], runs: int) -> Latency:
    """p50 and p99 of single calls over ``runs`` passes, after a short warm-up pass."""
    latencies_us(function, queries[:WARM_UP_QUERIES])
    p50s, p99s = [], []
    for _ in range(runs):
        gc.collect()
        elapsed = latencies_us(function, queries)
        p50s.append(percentile(elapsed, 50))
        p99s.append(percentile(elapsed, 99))
    return Latency(spread(p50s), spread(p99s))


def warm_up() -> None:
    """Compile (or load from numba's cache) every kernel the timed code calls."""
    fingerprints = random_fingerprints(0, 300)
    hamming = HammingIndex(MAX_DISTANCE)
    hamming.insert(fingerprints[:10], np.arange(10))  # tail path
    hamming.insert(fingerprints[10:], np.arange(10, 300))  # buffer path
    hamming.search(fingerprints[0])
    hamming.merge()
    hamming.search_many(fingerprints[:5])
    signatures = planted_signatures(0, 300).values
    lsh = LSHIndex(THRESHOLD, NUM_PERM)
    lsh.insert(signatures[:10], np.arange(10))
    lsh.insert(signatures[10:], np.arange(10, 300))
    lsh.search(signatures[0])
    lsh.merge()
    lsh.search_many(signatures[:5])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def mark(met: bool) -> str:
    return "met" if met else "MISSED"


# --- 1. HammingIndex --------------------------------------------------------------------


@dataclass(slots=True)
class HammingResult:
    size: int
    builds: list[Build]
    neardup: Latency
    brute_p50: Timing
    brute_queries: int
    verified: int
    simhash: SimhashResult | None = None
    simhash_skipped: str = ""


@dataclass(frozen=True, slots=True)
class SimhashResult:
    objects_seconds: float  # Simhash(int) objects, not part of the build
    build_seconds: float  # SimhashIndex(objects, k=3)
    latency: Latency
    verified: int
    rss_per_doc: float


@dataclass(frozen=True, slots=True)
class LayoutResult:
    blocks: int
    tables: int
    prefix_bits: str
    expected_candidates: float
    build: Build
    latency: Latency
    verified: int


def run_simhash(
    stored: U64Array, queries: U64Array, index: HammingIndex, settings: Settings
) -> SimhashResult:
    start = time.perf_counter()
    objects = [(str(row), simhash.Simhash(value)) for row, value in enumerate(stored.tolist())]
    objects_seconds = time.perf_counter() - start
    release_memory()
    rss_before = rss_bytes()
    start = time.perf_counter()
    peer = simhash.SimhashIndex(objects, f=64, k=MAX_DISTANCE)
    build_seconds = time.perf_counter() - start
    release_memory()  # the objects stay alive: only what the index added counts
    rss_per_doc = (rss_bytes() - rss_before) / len(stored)
    del objects
    query_objects = [simhash.Simhash(value) for value in queries.tolist()]
    peer_latency = latency(peer.get_near_dups, query_objects, settings.runs)
    for query, query_object in zip(
        queries[: settings.verify], query_objects[: settings.verify], strict=True
    ):
        expected = sorted(index.search(query)[0].tolist())
        assert sorted(map(int, peer.get_near_dups(query_object))) == expected, "SimhashIndex"
    return SimhashResult(objects_seconds, build_seconds, peer_latency, settings.verify, rss_per_doc)


def hamming_at(size: int, settings: Settings, simhash_rate: float | None) -> HammingResult:
    """Section 1 at one size. ``simhash_rate`` is SimhashIndex's measured seconds per
    fingerprint (objects + build) at a smaller size, to skip sizes it would take too long at.
    """
    stored = random_fingerprints(settings.seed, size)
    rows = np.arange(size)
    queries = hamming_queries(settings.seed, stored, settings.queries)
    builds = []
    for run in range(settings.runs):
        log(f"hamming: build {run + 1}/{settings.runs} of {size:,} fingerprints")
        index = HammingIndex(MAX_DISTANCE)
        builds.append(build(index, stored, rows))
        if run + 1 < settings.runs:
            del index
    log(f"hamming: queries at {size:,}")
    neardup = latency(index.search, list(queries), settings.runs)

    checked = queries[: settings.verify]
    for query in checked:
        found, distances = index.search(query)
        order = np.argsort(found)
        expected = brute_hamming(stored, query)
        assert np.array_equal(found[order], expected), f"rows differ from brute force at {size}"
        assert np.array_equal(distances[order], np.bitwise_count(stored[expected] ^ query)), (
            f"distances differ from brute force at {size}"
        )
    count = brute_queries(size)
    brute = latency(
        lambda query: brute_hamming(stored, query), list(queries[:count]), settings.runs
    )
    result = HammingResult(size, builds, neardup, brute.p50, count, len(checked))

    if size > SIMHASH_MAX_SIZE:
        result.simhash_skipped = f"not run above {SIMHASH_MAX_SIZE:,} (pure Python)"
    elif simhash_rate is not None and simhash_rate * size > PEER_BUDGET_S:
        result.simhash_skipped = (
            f"projected build {simhash_rate * size:,.0f} s > {PEER_BUDGET_S:.0f} s budget"
        )
    else:
        log(f"hamming: simhash.SimhashIndex at {size:,}")
        result.simhash = run_simhash(stored, queries, index, settings)
    if result.simhash_skipped:
        log(f"hamming: SimhashIndex skipped at {size:,}: {result.simhash_skipped}")
    return result


def expected_candidates(blocks: int, size: int) -> tuple[int, str, float]:
    """(tables, prefix bits, expected candidates per query) for uniform fingerprints:
    each table yields the stored keys sharing the query's prefix, size / 2**prefix_bits.
    """
    _, widths = block_layout(blocks)
    prefixes = [
        sum(widths[b] for b in leading)
        for leading in itertools.combinations(range(blocks), blocks - MAX_DISTANCE)
    ]
    bits = sorted(set(prefixes))
    label = "-".join(map(str, bits))
    return len(prefixes), label, sum(size / 2**p for p in prefixes)


def layouts(settings: Settings) -> list[LayoutResult]:
    size = settings.layout_size
    stored = random_fingerprints(settings.seed, size)
    rows = np.arange(size)
    queries = hamming_queries(settings.seed, stored, settings.queries)
    results = []
    for blocks in LAYOUT_BLOCKS:
        log(f"layout: blocks={blocks} at {size:,}")
        index = HammingIndex(MAX_DISTANCE, blocks)
        built = build(index, stored, rows)
        measured = latency(index.search, list(queries), settings.runs)
        checked = queries[: settings.verify]
        for query in checked:
            assert np.array_equal(np.sort(index.search(query)[0]), brute_hamming(stored, query))
        tables, bits, candidates = expected_candidates(blocks, size)
        results.append(
            LayoutResult(blocks, tables, bits, candidates, built, measured, len(checked))
        )
        del index
    return results


# --- 2. queries during a merge ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MergeRun:
    idle_buffered: list[float]  # latencies with the extra fingerprints unmerged, no merge
    during: list[float]  # latencies of queries run while merge() ran in another thread
    idle_merged: list[float]  # latencies after the merge
    merge_seconds: float


def queries_during_merge(
    index: HammingIndex, queries: U64Array, merge_cpu: int | None
) -> tuple[list[float], float]:
    """Run single queries back to back until a background merge() ends."""
    finished = threading.Event()
    seconds: list[float] = []

    def merge() -> None:
        if merge_cpu is not None:
            os.sched_setaffinity(0, {merge_cpu})  # 0 is the calling thread, not the process
        start = time.perf_counter()
        index.merge()
        seconds.append(time.perf_counter() - start)
        finished.set()

    clock = time.perf_counter_ns
    elapsed: list[float] = []
    thread = threading.Thread(target=merge, name="merge")
    thread.start()
    position = 0
    while not finished.is_set():
        query = queries[position % len(queries)]
        start = clock()
        index.search(query)
        elapsed.append((clock() - start) / 1000)
        position += 1
    thread.join()
    return elapsed, seconds[0]


def merge_interference(settings: Settings, merge_cpu: int | None) -> list[MergeRun]:
    size, extra = settings.layout_size, settings.merge_extra
    everything = random_fingerprints(settings.seed + 7, size + extra)
    queries = hamming_queries(settings.seed, everything, settings.queries)
    runs = []
    for run in range(settings.runs):
        where = "same core" if merge_cpu is None else f"CPU {merge_cpu}"
        log(f"merge: run {run + 1}/{settings.runs}, merge thread on {where}")
        index = bulk_hamming(everything[:size])
        for begin in range(size, size + extra, INSERT_BATCH):
            end = min(begin + INSERT_BATCH, size + extra)
            index.insert(everything[begin:end], np.arange(begin, end))  # no merge
        release_memory()
        latencies_us(index.search, list(queries[:WARM_UP_QUERIES]))
        idle_buffered = latencies_us(index.search, list(queries))
        during, seconds = queries_during_merge(index, queries, merge_cpu)
        assert not index.needs_merge() and len(index) == size + extra
        idle_merged = latencies_us(index.search, list(queries))
        for query in queries[: settings.verify // 4]:
            assert np.array_equal(np.sort(index.search(query)[0]), brute_hamming(everything, query))
        runs.append(MergeRun(idle_buffered, during, idle_merged, seconds))
        del index
    return runs


# --- 3. LSHIndex ------------------------------------------------------------------------


@dataclass(slots=True)
class PeerResult:
    name: str
    note: str
    objects_us: float = 0.0  # building the peer's MinHash objects, per doc (not timed below)
    insert_us: float = 0.0
    latency: Latency | None = None
    batched_us: Timing | None = None
    rss_per_doc: float = 0.0
    traced_per_doc: float | None = None  # tracemalloc, datasketch only
    recall: float = 0.0
    candidates: float = 0.0  # mean candidates per recall query, the document itself included
    skipped: str = ""


@dataclass(slots=True)
class LshResult:
    size: int
    builds: list[Build]
    rss_per_doc: float
    latency: Latency
    batched_us: Timing
    recall_found: int
    recall_total: int
    recall_queries: int
    pairs_found: int
    pairs_total: int
    results_per_query: float
    peers: list[PeerResult] = field(default_factory=list)


def bands_dividing(threshold: float, num_perm: int) -> int:
    """Bands for a peer that needs ``num_perm`` divisible by them (rensa): the divisor
    minimising neardup's own weighted false positive and false negative areas.
    """
    grid = np.linspace(0.0, 1.0, 2001)
    below, above = grid[grid <= threshold], grid[grid >= threshold]

    def error(bands: int) -> float:
        rows = num_perm // bands
        false_positive = np.trapezoid(candidate_probability(below, bands, rows), below)
        false_negative = np.trapezoid(1 - candidate_probability(above, bands, rows), above)
        return float(
            FALSE_POSITIVE_WEIGHT * false_positive + FALSE_NEGATIVE_WEIGHT * false_negative
        )

    divisors = [b for b in range(1, num_perm + 1) if num_perm % b == 0]
    return min(divisors, key=error)


class RensaObjects:
    """RMinHash objects carrying given signature values.

    rensa computes signatures from tokens only; its pickle state, though, is a header
    followed by the values as LEB128 varints. The header is taken from an empty RMinHash
    of the same parameters (whose values are all 0xFFFFFFFF, 5 bytes each), and every
    object built is checked with digest() before use.
    """

    def __init__(self, num_perm: int, seed: int = 1) -> None:
        self.num_perm, self.seed = num_perm, seed
        template = rensa.RMinHash(num_perm, seed).__getstate__()
        self.header = template[: len(template) - 5 * num_perm]
        self.works = self._check()

    def _check(self) -> bool:
        probe = np.array([[0, 1, 127, 128, 2**32 - 1] * (self.num_perm // 5 + 1)], np.uint32)
        probe = probe[:, : self.num_perm]
        try:
            made = self.objects(probe)[0]
        except (ValueError, TypeError):
            return False
        return bool(made.digest() == probe[0].tolist())

    def objects(self, values: U32Array) -> list[Any]:
        made = []
        shifts = (np.arange(5, dtype=np.uint32) * 7)[:, None]
        for begin in range(0, len(values), INSERT_BATCH):
            block = values[begin : begin + INSERT_BATCH]
            # (5, m K): 7-bit groups of every value, low first, groups on the outer axis
            # so numpy's inner loops run over values. Group j is written if it or a
            # higher one is non-zero (group 0 always), with 0x80 if another follows.
            groups = block.reshape(-1) >> shifts
            written = groups != 0
            written[0] = True
            follows = np.zeros_like(written)
            follows[:-1] = written[1:]
            encoded = (groups & 0x7F).astype(np.uint8) | (follows.view(np.uint8) << 7)
            data = encoded.T[written.T].tobytes()
            ends = np.cumsum(written.sum(axis=0).reshape(len(block), -1).sum(axis=1))
            for start, end in zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True):
                minhash = rensa.RMinHash(self.num_perm, self.seed)
                minhash.__setstate__(self.header + data[start:end])
                made.append(minhash)
        return made


def recall_sample(data: Signatures, settings: Settings) -> tuple[I64Array, list[set[int]]]:
    """Planted documents whose source agrees in >= MIN_MATCHES positions, and for each
    every other stored row that agrees with it that much (brute force over all rows).
    """
    rng = np.random.default_rng([settings.seed, 4, len(data.values)])
    eligible = data.docs[data.agreement >= MIN_MATCHES]
    sample = rng.choice(eligible, min(settings.recall_sample, len(eligible)), replace=False)
    truth = []
    for doc in sample:
        rows = np.flatnonzero(agreements(data.values, data.values[doc]) >= MIN_MATCHES)
        truth.append(set(rows.tolist()) - {int(doc)})
    return sample, truth


@dataclass(frozen=True, slots=True)
class LshInputs:
    data: Signatures
    queries: U32Array  # single queries
    batch_queries: U32Array  # for search_many
    sample: I64Array  # planted documents checked by brute force
    truth: list[set[int]]  # for each, the other rows agreeing in >= MIN_MATCHES values


def neardup_lsh(inputs: LshInputs, settings: Settings) -> tuple[LshResult, LSHIndex]:
    data, queries, batch_queries = inputs.data, inputs.queries, inputs.batch_queries
    size = len(data.values)
    rows = np.arange(size)
    builds = []
    rss_per_doc = 0.0
    for run in range(settings.runs):
        log(f"lsh: neardup build {run + 1}/{settings.runs} of {size:,} signatures")
        release_memory()
        rss_before = rss_bytes()
        index = LSHIndex(THRESHOLD, NUM_PERM)
        builds.append(build(index, data.values, rows))
        release_memory()
        rss_per_doc = (rss_bytes() - rss_before) / size
        if run + 1 < settings.runs:
            del index
    log(f"lsh: neardup queries at {size:,}")
    single = latency(index.search, list(queries), settings.runs)

    def batched(signatures: U32Array) -> None:
        for begin in range(0, len(signatures), QUERY_BATCH):
            index.search_many(signatures[begin : begin + QUERY_BATCH])

    batched(batch_queries[:QUERY_BATCH])
    per_doc = []
    for _ in range(settings.runs):
        gc.collect()
        start = time.perf_counter_ns()
        batched(batch_queries)
        per_doc.append((time.perf_counter_ns() - start) / 1000 / len(batch_queries))

    # Every planted pair that agrees enough: is the source among the copy's results?
    strong = data.agreement >= MIN_MATCHES
    docs, sources = data.docs[strong], data.sources[strong]
    pairs_found = 0
    for begin in range(0, len(docs), QUERY_BATCH):
        ends, found, _ = index.search_many(data.values[docs[begin : begin + QUERY_BATCH]])
        query_of = np.repeat(np.arange(len(ends)), np.diff(ends, prepend=0))
        hit = found == sources[begin : begin + QUERY_BATCH][query_of]
        pairs_found += len(np.unique(query_of[hit]))

    hits = total = results = 0
    for doc, expected in zip(inputs.sample, inputs.truth, strict=True):
        found, scores = index.search(data.values[doc])
        found_set = set(found.tolist()) - {int(doc)}
        assert found_set <= expected, "LSHIndex returned a row below the threshold"
        true_scores = agreements(data.values[found], data.values[doc]) / NUM_PERM
        assert np.allclose(scores, true_scores), "LSHIndex scores differ from brute force"
        hits += len(found_set & expected)
        total += len(expected)
        results += len(found)
    result = LshResult(
        size,
        builds,
        rss_per_doc,
        single,
        spread(per_doc),
        hits,
        total,
        len(inputs.sample),
        pairs_found,
        len(docs),
        results / len(inputs.sample),
    )
    return result, index


def peer_recall(
    query: Callable[[Any], Sequence[int]],
    objects: Sequence[Any],
    sample: I64Array,
    truth: list[set[int]],
) -> tuple[float, float]:
    """(recall of the brute-force rows among the peer's candidates, mean candidates)."""
    hits = total = candidates = 0
    for doc, expected in zip(sample.tolist(), truth, strict=True):
        found = {int(key) for key in query(objects[doc])}
        hits += len((found - {doc}) & expected)
        total += len(expected)
        candidates += len(found)
    return hits / max(total, 1), candidates / max(len(sample), 1)


def datasketch_peer(
    inputs: LshInputs,
    settings: Settings,
    bands: tuple[int, int],
    rate: float | None,
    trace: bool,
) -> PeerResult:
    data, size = inputs.data, len(inputs.data.values)
    result = PeerResult(
        "datasketch",
        f"MinHashLSH(threshold={THRESHOLD}, num_perm={NUM_PERM}, params={bands}) "
        "(neardup's banding), LeanMinHash objects, insertion_session",
    )
    if rate is not None and rate * size > PEER_BUDGET_S:
        result.skipped = f"projected build {rate * size:,.0f} s > {PEER_BUDGET_S:.0f} s budget"
        return result
    log(f"lsh: datasketch at {size:,}")

    def lean(values: U32Array) -> list[Any]:
        return [
            datasketch.LeanMinHash(seed=DATASKETCH_SEED, hashvalues=row, scheme="affine32")
            for row in values.astype(np.uint64)
        ]

    start = time.perf_counter()
    objects = lean(data.values)
    result.objects_us = (time.perf_counter() - start) * 1e6 / size

    def build_peer() -> Any:
        lsh = datasketch.MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, params=bands)
        with lsh.insertion_session(buffer_size=INSERT_BATCH) as session:
            for row, minhash in enumerate(objects):
                session.insert(row, minhash, check_duplication=False)
        return lsh

    if trace:  # a separate build: tracemalloc slows every allocation down
        release_memory()
        tracemalloc.start()
        traced = build_peer()
        result.traced_per_doc = tracemalloc.get_traced_memory()[0] / size
        tracemalloc.stop()
        del traced
    release_memory()
    rss_before = rss_bytes()
    start = time.perf_counter()
    lsh = build_peer()
    result.insert_us = (time.perf_counter() - start) * 1e6 / size
    release_memory()
    result.rss_per_doc = (rss_bytes() - rss_before) / size

    result.latency = latency(lsh.query, lean(inputs.queries), settings.runs)
    result.recall, result.candidates = peer_recall(lsh.query, objects, inputs.sample, inputs.truth)
    return result


def rensa_peer(inputs: LshInputs, settings: Settings) -> PeerResult:
    data, size = inputs.data, len(inputs.data.values)
    bands = bands_dividing(THRESHOLD, NUM_PERM)
    result = PeerResult(
        "rensa",
        f"RMinHashLSH({THRESHOLD}, {NUM_PERM}, num_bands={bands}), {NUM_PERM // bands} rows "
        "per band (needs bands dividing 128); RMinHash objects restored from pickle state "
        "holding the same signature values; insert_many per batch",
    )
    maker = RensaObjects(NUM_PERM)
    if not maker.works:
        result.skipped = "cannot restore RMinHash objects with given values from pickle state"
        return result
    log(f"lsh: rensa at {size:,}")
    start = time.perf_counter()
    objects = maker.objects(data.values)
    result.objects_us = (time.perf_counter() - start) * 1e6 / size
    sampled = np.random.default_rng(settings.seed).integers(0, size, 100)
    assert all(objects[row].digest() == data.values[row].tolist() for row in sampled)

    release_memory()
    rss_before = rss_bytes()
    start = time.perf_counter()
    lsh = rensa.RMinHashLSH(THRESHOLD, NUM_PERM, bands)
    for begin in range(0, size, INSERT_BATCH):
        lsh.insert_many(objects[begin : begin + INSERT_BATCH], begin)
    result.insert_us = (time.perf_counter() - start) * 1e6 / size
    release_memory()
    result.rss_per_doc = (rss_bytes() - rss_before) / size

    result.latency = latency(lsh.query, maker.objects(inputs.queries), settings.runs)
    batch_objects = maker.objects(inputs.batch_queries)
    per_doc = []
    for _ in range(settings.runs):
        gc.collect()
        start = time.perf_counter()
        for begin in range(0, len(batch_objects), QUERY_BATCH):
            lsh.query_all(batch_objects[begin : begin + QUERY_BATCH])
        per_doc.append((time.perf_counter() - start) * 1e6 / len(batch_objects))
    result.batched_us = spread(per_doc)
    result.recall, result.candidates = peer_recall(lsh.query, objects, inputs.sample, inputs.truth)
    return result


def lsh_at(
    size: int, settings: Settings, datasketch_rate: float | None, trace: bool
) -> tuple[LshResult, float | None]:
    """Section 3 at one size; also datasketch's seconds per doc for projecting the next."""
    data = planted_signatures(settings.seed, size)
    rng = np.random.default_rng([settings.seed, 5, size])
    queries = perturbed(rng, data.values[rng.integers(0, size, settings.queries)], QUERY_RATE)
    batch_queries = perturbed(
        rng, data.values[rng.integers(0, size, settings.batched_queries)], QUERY_RATE
    )
    log(f"lsh: brute-force truth for the recall sample at {size:,}")
    sample, truth = recall_sample(data, settings)
    inputs = LshInputs(data, queries, batch_queries, sample, truth)
    result, index = neardup_lsh(inputs, settings)
    bands = (index.bands, index.rows_per_band)
    del index
    release_memory()
    peer = datasketch_peer(inputs, settings, bands, datasketch_rate, trace)
    result.peers.append(peer)
    if peer.skipped:
        log(f"lsh: datasketch skipped at {size:,}: {peer.skipped}")
    release_memory()
    peer_rate = None if peer.skipped else (peer.objects_us + peer.insert_us) / 1e6
    rensa_result = rensa_peer(inputs, settings)
    if rensa_result.skipped:
        log(f"lsh: rensa skipped at {size:,}: {rensa_result.skipped}")
    result.peers.append(rensa_result)
    release_memory()
    return result, peer_rate


# --- 4. memory --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryResult:
    size: int
    hamming_bytes: int
    lsh_bytes: int
    bands: int


def memory_at(size: int, lsh_bytes: int, seed: int) -> MemoryResult:
    """Hamming (built in batches, as in section 1) plus the LSH index of section 3."""
    log(f"memory: Hamming index of {size:,}")
    index = HammingIndex(MAX_DISTANCE)
    built = build(index, random_fingerprints(seed, size), np.arange(size))
    bands = LSHIndex(THRESHOLD, NUM_PERM).bands
    return MemoryResult(size, built.memory_bytes, lsh_bytes, bands)


# --- report -----------------------------------------------------------------------------


def count(value: float) -> str:
    return f"{value:,.0f}"


def bytes_per(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def seconds(value: float) -> str:
    return f"{value:.3g}"


def hamming_report(results: list[HammingResult]) -> list[str]:
    build_rows, query_rows, peer_rows = [], [], []
    for result in results:
        size = result.size
        rates = spread([size / b.seconds for b in result.builds])
        build_rows.append(
            [
                count(size),
                format_spread(rates, count),
                f"{mark(rates.median_us >= TARGET_INSERT_RATE)} (>= {TARGET_INSERT_RATE:,})",
                str(result.builds[-1].merges),
                format_spread(spread([b.merge_seconds for b in result.builds]), seconds),
                format_spread(spread([b.final_merge_seconds for b in result.builds]), seconds),
                bytes_per(result.builds[-1].memory_bytes / size),
            ]
        )
        p50 = result.neardup.p50.median_us
        target = (
            f"{mark(p50 <= TARGET_HAMMING_P50_US)} (<= {TARGET_HAMMING_P50_US:g} µs)"
            if size >= 10_000_000
            else "-"
        )
        peer = result.simhash
        query_rows.append(
            [
                count(size),
                format_spread(result.neardup.p50),
                format_spread(result.neardup.p99),
                target,
                f"{format_spread(result.brute_p50)} ({result.brute_queries} q)",
                format_ratio(result.brute_p50.median_us / p50),
                format_spread(peer.latency.p50) if peer else "skipped",
                format_ratio(peer.latency.p50.median_us / p50) if peer else "-",
                f"{result.verified} queries",
            ]
        )
        if peer is not None:
            peer_rows.append(
                [
                    count(size),
                    seconds(peer.objects_seconds),
                    seconds(peer.build_seconds),
                    count(size / peer.build_seconds),
                    format_spread(peer.latency.p50),
                    format_spread(peer.latency.p99),
                    bytes_per(peer.rss_per_doc),
                    f"{peer.verified} queries",
                ]
            )
        else:
            peer_rows.append([count(size), "-", "-", "-", "-", "-", "-", result.simhash_skipped])
    right = "right"
    return [
        "## 1. HammingIndex, k = 3 (4 blocks of 16 bits, 4 tables)",
        "",
        f"Build: {INSERT_BATCH:,} fingerprints per insert(), merge() called synchronously "
        "whenever needs_merge() is true and included in the rate; then one final full "
        "merge, timed on its own. Memory from memory_bytes() after that merge.",
        "",
        markdown_table(
            [
                "N",
                "insert fp/s",
                "target",
                "merges",
                "merge s (in build)",
                "final merge s",
                "B/fp",
            ],
            build_rows,
            ["right", right, "left", right, right, right, right],
        ),
        "",
        "Single queries, µs: index.search(fp) on the fully merged index; half the queries "
        "are stored fingerprints with 0-3 bits flipped, half random. "
        "Brute force: np.flatnonzero(np.bitwise_count(stored ^ q) <= 3). Ratios are of "
        "median p50s; 'verified' queries returned exactly the brute-force rows and distances.",
        "",
        markdown_table(
            [
                "N",
                "neardup p50",
                "neardup p99",
                "target",
                "brute p50",
                "brute/neardup",
                "SimhashIndex p50",
                "SimhashIndex/neardup",
                "verified",
            ],
            query_rows,
            ["right", right, right, "left", right, right, right, right, "left"],
        ),
        "",
        f"simhash.SimhashIndex(objs, f=64, k={MAX_DISTANCE}), objs = [(str(row), Simhash(int))]; "
        "queries with get_near_dups(Simhash(int)), objects built beforehand. Its results "
        "were asserted equal to neardup's on the 'verified' queries. Memory: RSS growth "
        "over the index build (the objects list built before and alive throughout).",
        "",
        markdown_table(
            [
                "N",
                "Simhash objects s",
                "index build s",
                "build fp/s",
                "query p50 µs",
                "query p99 µs",
                "RSS Δ B/fp",
                "verified / note",
            ],
            peer_rows,
            ["right", right, right, right, right, right, right, "left"],
        ),
    ]


def layout_report(results: list[LayoutResult], size: int) -> list[str]:
    rows = [
        [
            str(r.blocks),
            str(r.tables),
            r.prefix_bits,
            f"{r.expected_candidates:,.3g}",
            count(size / r.build.seconds),
            format_spread(r.latency.p50),
            format_spread(r.latency.p99),
            bytes_per(r.build.memory_bytes / size),
            f"{r.verified} queries",
        ]
        for r in results
    ]
    return [
        f"### Block layouts at N = {size:,}",
        "",
        "Candidates per query: expected for uniform fingerprints, N x sum over tables of "
        "2^-prefix_bits.",
        "",
        markdown_table(
            [
                "blocks",
                "tables",
                "prefix bits",
                "candidates/query",
                "insert fp/s",
                "p50 µs",
                "p99 µs",
                "B/fp",
                "verified",
            ],
            rows,
            ["right"] * 8 + ["left"],
        ),
    ]


def merge_report(variants: list[tuple[str, list[MergeRun]]], settings: Settings) -> list[str]:
    rows = []
    for label, runs in variants:
        for name, pick in (
            (f"not merging, {settings.merge_extra:,} in buffer", lambda r: r.idle_buffered),
            ("DURING merge()", lambda r: r.during),
            ("not merging, after merge", lambda r: r.idle_merged),
        ):
            samples = [pick(run) for run in runs]
            rows.append(
                [
                    label,
                    name,
                    count(statistics.mean([len(s) for s in samples])),
                    format_spread(spread([percentile(s, 50) for s in samples])),
                    format_spread(spread([percentile(s, 99) for s in samples])),
                    format_spread(spread([max(s) for s in samples])),
                    format_spread(spread([run.merge_seconds * 1000 for run in runs]), seconds)
                    if name.startswith("DURING")
                    else "",
                ]
            )
    return [
        "## 2. Single queries during a background merge",
        "",
        f"Index of {settings.layout_size:,} fingerprints (k=3, fully merged) plus "
        f"{settings.merge_extra:,} inserted in batches without merging. Then merge() runs in "
        "a thread while the main thread queries back to back until it ends; queries per "
        "run are those that ran during the merge. Per-run p50/p99/max, median (min-max) "
        "over runs.",
        "",
        markdown_table(
            ["merge thread", "queries", "per run", "p50 µs", "p99 µs", "max µs", "merge ms"],
            rows,
            ["left", "left", "right", "right", "right", "right", "right"],
        ),
    ]


def lsh_report(results: list[LshResult]) -> list[str]:
    rows, recall_rows = [], []
    for result in results:
        size = result.size
        neardup_p50 = result.latency.p50.median_us
        insert = spread([b.seconds * 1e6 / size for b in result.builds])
        memory = result.builds[-1].memory_bytes / size
        rows.append(
            [
                count(size),
                "neardup",
                "-",
                format_spread(insert),
                format_spread(result.latency.p50),
                format_spread(result.latency.p99),
                format_spread(result.batched_us),
                f"{bytes_per(memory)} (memory_bytes)",
                bytes_per(result.rss_per_doc),
                "1x",
            ]
        )
        recall_rows.append(
            [
                count(size),
                "neardup (verified)",
                f"{result.recall_found / max(result.recall_total, 1):.4f} "
                f"({result.recall_found}/{result.recall_total})",
                f"{result.results_per_query:.2f}",
                f"{result.pairs_found / max(result.pairs_total, 1):.4f} "
                f"({result.pairs_found:,}/{result.pairs_total:,})",
            ]
        )
        for peer in result.peers:
            if peer.skipped or peer.latency is None:
                rows.append([count(size), peer.name, *["-"] * 7, f"skipped: {peer.skipped}"])
                continue
            traced = (
                f"{bytes_per(peer.traced_per_doc)} (tracemalloc)"
                if peer.traced_per_doc is not None
                else "-"
            )
            rows.append(
                [
                    count(size),
                    peer.name,
                    format_us(peer.objects_us),
                    format_us(peer.insert_us),
                    format_spread(peer.latency.p50),
                    format_spread(peer.latency.p99),
                    format_spread(peer.batched_us) if peer.batched_us else "n/a",
                    traced,
                    bytes_per(peer.rss_per_doc),
                    format_ratio(peer.latency.p50.median_us / neardup_p50),
                ]
            )
            recall_rows.append(
                [
                    count(size),
                    f"{peer.name} (candidates)",
                    f"{peer.recall:.4f}",
                    f"{peer.candidates:.2f}",
                    "-",
                ]
            )
    first = results[0]
    return [
        f"## 3. LSHIndex, threshold {THRESHOLD}, {NUM_PERM} values",
        "",
        f"Signatures: uniformly random uint32, {PLANTED_FRACTION:.0%} of documents a copy of "
        f"an earlier one with each value replaced at a rate drawn from {PLANTED_RATES[0]} to "
        f"{PLANTED_RATES[1]}. Queries: stored signatures with each value replaced at "
        f"{QUERY_RATE}. Insert: batches of {INSERT_BATCH:,} with the merges asked for (peers: "
        f"their own batch insert), per doc; peers' MinHash object construction is shown "
        f"apart and not included. Batched: search_many on {QUERY_BATCH:,} queries per call "
        "(rensa: query_all). neardup verifies every candidate against the stored signature "
        "and returns scores; datasketch and rensa return unverified band candidates. "
        "p50 ratio = peer p50 / neardup p50.",
        "",
        markdown_table(
            [
                "N",
                "contender",
                "objects µs/doc",
                "insert µs/doc",
                "p50 µs",
                "p99 µs",
                "batched µs/doc",
                "own accounting B/doc",
                "RSS Δ B/doc",
                "p50 ratio",
            ],
            rows,
            ["right", "left", *["right"] * 8],
        ),
        "",
        f"Targets: p50 <= {TARGET_LSH_P50_US:g} µs single: "
        + ", ".join(
            f"{mark(r.latency.p50.median_us <= TARGET_LSH_P50_US)} at {r.size:,}" for r in results
        )
        + f"; batched <= {TARGET_LSH_BATCHED_US:g} µs/doc: "
        + ", ".join(
            f"{mark(r.batched_us.median_us <= TARGET_LSH_BATCHED_US)} at {r.size:,}"
            for r in results
        )
        + ".",
        "",
        f"Recall: {first.recall_queries} planted documents per size whose source agrees in "
        f">= {MIN_MATCHES}/{NUM_PERM} values; the truth is every other stored row agreeing "
        f"that much, by brute force over the whole signature matrix. Every neardup result "
        f"was asserted to be in the truth with its exact score. 'Planted pairs': every "
        f"planted copy agreeing >= {MIN_MATCHES} with its source, searched with search_many: "
        f"is the source found? Peers' recall is of their candidate lists.",
        "",
        markdown_table(
            ["N", "contender", "recall", "results/query", "planted pairs found"],
            recall_rows,
            ["right", "left", "right", "right", "right"],
        ),
    ]


def memory_report(memory: MemoryResult) -> list[str]:
    size = memory.size
    total = memory.hamming_bytes + memory.lsh_bytes
    used = {
        "Hamming tables (4 x 12 B)": 4 * 12 * size,
        f"LSH band tables ({memory.bands} x 12 B)": memory.bands * 12 * size,
        f"signatures ({NUM_PERM} x 4 B)": NUM_PERM * 4 * size,
        "present/deleted flags (2 x 2 x 1 B)": 4 * size,
    }
    rows = [[name, count(value), bytes_per(value / size)] for name, value in used.items()]
    slack = total - sum(used.values())
    rows.append(["capacity slack (RowArray growth, tails)", count(slack), bytes_per(slack / size)])
    rows.append(["**total, memory_bytes()**", count(total), bytes_per(total / size)])
    return [
        f"## 4. Memory at {size:,} documents",
        "",
        f"HammingIndex.memory_bytes() ({bytes_per(memory.hamming_bytes / size)} B/doc) + "
        f"LSHIndex.memory_bytes() ({bytes_per(memory.lsh_bytes / size)} B/doc), both built "
        "in batches as above and merged. The lines above the total are what N rows need; "
        "the slack is the rest of memory_bytes() (array capacity not yet used).",
        "",
        markdown_table(["component", "bytes", "B/doc"], rows, ["left", "right", "right"]),
        "",
        f"Target <= {TARGET_BYTES_PER_DOC} B/doc: "
        f"{mark(total / size <= TARGET_BYTES_PER_DOC)} ({total / size:,.1f} B/doc).",
    ]


def targets_report(
    hamming: list[HammingResult], lsh: list[LshResult], memory: MemoryResult
) -> list[str]:
    largest = max(hamming, key=lambda r: r.size)
    rate = min(statistics.median([r.size / b.seconds for b in r.builds]) for r in hamming)
    lsh_large = max(lsh, key=lambda r: r.size)
    total = (memory.hamming_bytes + memory.lsh_bytes) / memory.size
    rows = [
        [
            f"Hamming p50 at {largest.size:,}",
            f"<= {TARGET_HAMMING_P50_US:g} µs",
            f"{format_us(largest.neardup.p50.median_us)} µs",
            mark(largest.neardup.p50.median_us <= TARGET_HAMMING_P50_US),
        ],
        [
            "Hamming batched insert (slowest size)",
            f">= {TARGET_INSERT_RATE:,} fp/s",
            f"{count(rate)} fp/s",
            mark(rate >= TARGET_INSERT_RATE),
        ],
        [
            f"LSH single p50 at {lsh_large.size:,}",
            f"<= {TARGET_LSH_P50_US:g} µs",
            f"{format_us(lsh_large.latency.p50.median_us)} µs",
            mark(lsh_large.latency.p50.median_us <= TARGET_LSH_P50_US),
        ],
        [
            f"LSH batched at {lsh_large.size:,}",
            f"<= {TARGET_LSH_BATCHED_US:g} µs/doc",
            f"{format_us(lsh_large.batched_us.median_us)} µs/doc",
            mark(lsh_large.batched_us.median_us <= TARGET_LSH_BATCHED_US),
        ],
        [
            f"memory at {memory.size:,}",
            f"<= {TARGET_BYTES_PER_DOC} B/doc",
            f"{total:,.1f} B/doc",
            mark(total <= TARGET_BYTES_PER_DOC),
        ],
    ]
    return [
        "## Targets",
        "",
        markdown_table(["figure", "target", "measured (median)", ""], rows),
    ]


# --- main -------------------------------------------------------------------------------


def parse_sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    if not sizes or min(sizes) < 1_000:
        raise argparse.ArgumentTypeError("sizes must be integers >= 1000")
    return tuple(sorted(sizes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--sizes", type=parse_sizes, default=FULL.sizes, help="Hamming sizes, comma-separated"
    )
    parser.add_argument("--lsh-size", type=int, default=FULL.lsh_sizes[0], help="LSH size")
    parser.add_argument(
        "--lsh-large",
        type=int,
        default=FULL.lsh_sizes[1],
        help="second LSH size, also used for the memory total (0: only --lsh-size)",
    )
    parser.add_argument("--runs", type=int, default=FULL.runs, help="timed runs/passes")
    parser.add_argument("--seed", type=int, default=FULL.seed, help="data seed")
    parser.add_argument("--quick", action="store_true", help="smoke test: small sizes, 1 run")
    args = parser.parse_args(argv)
    if args.quick:
        settings = QUICK
    else:
        lsh_sizes = tuple(sorted({args.lsh_size, args.lsh_large} - {0}))
        settings = Settings(
            sizes=args.sizes,
            lsh_sizes=lsh_sizes,
            layout_size=FULL.layout_size,
            merge_extra=FULL.merge_extra,
            runs=args.runs,
            seed=args.seed,
            queries=FULL.queries,
            batched_queries=FULL.batched_queries,
            verify=FULL.verify,
            recall_sample=FULL.recall_sample,
        )
    if settings.runs < 1 or min(settings.lsh_sizes, default=0) < 1_000:
        parser.error("--runs must be >= 1 and LSH sizes >= 1000")

    cpus = sorted(os.sched_getaffinity(0))
    cpu = pin_to_one_core()
    other_cpu = next((c for c in cpus if c != cpu), None)
    started = time.perf_counter()
    cpu_started = time.process_time()
    warm_up()

    hamming: list[HammingResult] = []
    simhash_rate: float | None = None
    for size in settings.sizes:
        result = hamming_at(size, settings, simhash_rate)
        hamming.append(result)
        if result.simhash is not None:
            peer = result.simhash
            simhash_rate = (peer.objects_seconds + peer.build_seconds) / size
        release_memory()
    layout = layouts(settings)
    release_memory()
    merges = [("same core", merge_interference(settings, None))]
    if other_cpu is not None:
        merges.append((f"CPU {other_cpu}", merge_interference(settings, other_cpu)))
    release_memory()

    lsh: list[LshResult] = []
    datasketch_rate: float | None = None
    for position, size in enumerate(settings.lsh_sizes):
        result_lsh, datasketch_rate = lsh_at(size, settings, datasketch_rate, position == 0)
        lsh.append(result_lsh)
    memory_size = max(settings.lsh_sizes)
    memory = memory_at(
        memory_size,
        next(r for r in lsh if r.size == memory_size).builds[-1].memory_bytes,
        settings.seed,
    )

    elapsed = time.perf_counter() - started
    cpu_share = (time.process_time() - cpu_started) / elapsed
    versions = ", ".join(
        f"{name} {version(name)}" for name in ("numpy", "numba", "simhash", "datasketch", "rensa")
    )
    lines = [
        "# Index speed and memory, one core",
        "",
        f"- machine: {machine_summary(cpu)}",
        f"- {settings.runs} run(s) per figure, shown as median (min-max) over runs; seed "
        f"{settings.seed}; {settings.queries:,} single queries per pass after a warm-up of "
        f"{WARM_UP_QUERIES}; {'--quick; ' if args.quick else ''}total {elapsed / 60:.1f} min",
        f"- versions: {versions}",
        f"- CPU time of this process / wall time: {cpu_share:.0%}. Well below 100% means "
        "the pinned core was shared with other work and every figure is inflated (the "
        "merge thread on a second core in section 2 adds a little CPU time)",
        "- numba kernels compiled (or loaded from cache) before timing; every thread pool "
        "capped at one thread",
        "",
        *hamming_report(hamming),
        "",
        *layout_report(layout, settings.layout_size),
        "",
        *merge_report(merges, settings),
        "",
        *(
            [
                f"The '{merges[1][0]}' rows put the merge thread on a second core (this "
                "process is otherwise pinned to one), showing what the merge costs queries "
                "apart from sharing the CPU; that core may be busy with other work."
            ]
            if len(merges) > 1
            else []
        ),
        "",
        *lsh_report(lsh),
        "",
        *memory_report(memory),
        "",
        *targets_report(hamming, lsh, memory),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    path = write_result("index.md", text)
    log(f"written to {path} in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
