"""The Spark engine of ``neardup dedup``: the local engine's job on a Spark cluster.

The same readers, fingerprints, rule and output lines as the local engine (app.batch),
so both write the same files for the same input and settings:

1. The driver plans the input's splits (app.batch.readers) and counts each split's
   records in a Spark job (one number a split comes back), so every document gets its
   position in the input without a pass over the data on the driver.
2. **Fingerprints** in ``mapPartitions``, chunk by chunk, with the local engine's
   ``fingerprint_chunk`` (the service's ``fingerprint_nonempty``).
3. **Identical documents** grouped by a shuffle on the exact hash; each group is matched
   through its first document (its *representative*).
4. **Candidates by a shuffle** on (table, leading blocks of the SimHash), on (band, band
   key) and on the rarest q-grams of each short text (the AllPairs prefix, in a fixed
   hash order): the members of each key's group are paired, a pair only by the first
   table or band it meets in (or the first shared prefix q-gram), SimHash pairs within k
   and q-gram pairs at or above the n-gram threshold only.
5. **Verification** of the distinct candidates joined with both representatives'
   fingerprints, by ``MatchRule.evaluate`` (the service's rule); pairs expanded to the
   members of the groups by two joins. With a match window, the document pairs are
   joined with both documents' times, and those more than the window apart dropped.
6. **Clusters** by the alternating large-star / small-star algorithm (Kiveris,
   Lattanzi, Mirrokni, Rastogi, Vassilvitskii, "Connected Components in MapReduce and
   Beyond", SoCC 2014) on the representatives' pairs (with a match window, on the
   documents' pairs: copies of one text apart in time may be apart): O(log n) rounds of
   two shuffles, each node ends up linked to the smallest node of its component, which is its first
   document in input order. No edge list is ever collected on the driver.
7. The output is sorted by a range shuffle and streamed to the driver partition by
   partition (``toLocalIterator``), which writes DIR/pairs.jsonl, clusters.jsonl and
   kept.jsonl (the kept records read again from their splits by the executors).
8. With ``--passages``: passages.jsonl by app/batch/spark_passages.py (fingerprints, a
   shuffle on them, the candidate pairs verified by the local engine's rule); with
   ``--drop-contained``, the kept documents inside another left out of kept.jsonl.

Run it with ``neardup dedup --engine spark --master local[2] ...``, or submit this
module: ``spark-submit app/batch/spark_submit.py INPUT... --out DIR`` (the master then comes
from spark-submit; the Python that runs it and the executors need the ``neardup``
package installed: with pip's pyspark, put the venv's bin/ first on PATH).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from operator import add
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from app.batch import spark_passages
from app.batch.local import fingerprint_chunk
from app.batch.readers import (
    DEFAULT_SPLIT_BYTES,
    DocumentId,
    Fields,
    InputError,
    JobOptions,
    Split,
    count_records,
    document_id,
    plan_splits,
    read_records,
    read_timed_documents,
    timestamp_us,
)
from app.batch.rules import (
    MatchRule,
    Summary,
    check_batch_settings,
    cluster_line,
    document_text,
    ngram_similarity,
    pair_line,
    prefix_length,
    qgram_jaccard,
    qgrams,
)
from app.collection_config import CollectionConfig

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

FINGERPRINT_CHUNK = 2048
# Documents per partition of the sorted outputs (clusters.jsonl: some 40 bytes a line).
OUTPUT_PARTITION_DOCUMENTS = 250_000
VERIFY_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class SparkOptions(JobOptions):
    """How to run on Spark."""

    master: str | None = "local[*]"  # None: the master spark-submit gives
    partitions: int = 0  # of each shuffle; 0: Spark's default parallelism
    conf: tuple[str, ...] = ()  # KEY=VALUE settings
    split_bytes: int = DEFAULT_SPLIT_BYTES


# A document's fingerprints as the RDDs carry them (plain Python values, cheap to pickle):
# (simhash, exact high, exact low, signature bytes, band key bytes, short text or None).
Print = tuple[int, int, int, bytes, bytes, str | None]
# (position, id, fingerprints or None for a text empty once normalised, time in
# microseconds or None without a timestamp field)
Document = tuple[int, DocumentId, Print | None, int | None]


def session(options: SparkOptions) -> SparkSession:
    """A Spark session running this Python for its workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("neardup-dedup")
    if options.master is not None:
        builder = builder.master(options.master)
        if options.master.startswith("local"):
            # Everything on this machine: listen on the loopback interface only.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
    builder = builder.config("spark.ui.enabled", "false").config(
        "spark.ui.showConsoleProgress", str(options.progress).lower()
    )
    # Workers compile nothing (numba's cache) and use one thread each: Spark gives the cores.
    builder = builder.config("spark.executorEnv.NUMBA_NUM_THREADS", "1")
    for setting in options.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---------------------------------------------------------------------------- executors


def _read_split(
    fields: Fields, item: tuple[Split, int]
) -> Iterator[tuple[int, DocumentId, str, int | None]]:
    split, first = item
    timed = fields.timestamp_field is not None
    for index, (value, text, moment) in enumerate(read_timed_documents(split, fields)):
        position = first + index
        yield (
            position,
            document_id(value, position, split),
            text,
            timestamp_us(moment, position, split, fields) if timed else None,
        )


def _fingerprint_partition(
    config: CollectionConfig,
    html: bool,
    rows: Iterable[tuple[int, DocumentId, str, int | None]],
) -> Iterator[Document]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, FINGERPRINT_CHUNK)):
        fingerprints = fingerprint_chunk([text for _, _, text, _ in chunk], config, html)
        shorts = dict(fingerprints.shorts)
        row_of = {int(kept): row for row, kept in enumerate(fingerprints.kept.tolist())}
        for index, (position, identifier, _, moment) in enumerate(chunk):
            row = row_of.get(index)
            if row is None:
                yield position, identifier, None, moment
                continue
            yield (
                position,
                identifier,
                (
                    int(fingerprints.simhash[row]),
                    int(fingerprints.exact[row, 0]),
                    int(fingerprints.exact[row, 1]),
                    fingerprints.signatures[row].tobytes(),
                    fingerprints.band_keys[row].tobytes(),
                    shorts.get(row),
                ),
                moment,
            )


def _popcount(value: int) -> int:
    return int(value).bit_count()


def _simhash_group_pairs(
    masks: Sequence[int], max_distance: int, item: tuple[tuple[int, int], Iterable[Any]]
) -> Iterator[tuple[int, int]]:
    (table, _), members = item
    group = sorted(members)
    for (a, first), (b, second) in itertools.combinations(group, 2):
        x = first ^ second
        if _popcount(x) <= max_distance and all(x & masks[u] for u in range(table)):
            yield a, b


def _band_group_pairs(item: tuple[tuple[int, int], Iterable[Any]]) -> Iterator[tuple[int, int]]:
    (band, _), members = item
    group = sorted(members)
    for (a, first), (b, second) in itertools.combinations(group, 2):
        keys_a = np.frombuffer(first, dtype=np.uint64)[:band]
        keys_b = np.frombuffer(second, dtype=np.uint64)[:band]
        if not bool((keys_a == keys_b).any()):
            yield a, b


def _token_rank(token: str) -> tuple[int, str]:
    """The fixed global order of q-grams for the prefix filter: by a hash, then by text."""
    return xxhash.xxh64_intdigest(token.encode("utf-8", "surrogatepass")), token


def _prefix_tokens(
    size: int,
    cjk_size: int | None,
    threshold: float,
    item: tuple[int, tuple[DocumentId, Print]],
) -> Iterator[tuple[str, tuple[int, str]]]:
    position, (_, fingerprint) = item
    text = fingerprint[5]
    assert text is not None
    grams = sorted(qgrams(text, size, cjk_size), key=_token_rank)
    for token in grams[: prefix_length(len(grams), threshold)]:
        yield token, (position, text)


def _ngram_group_pairs(
    size: int,
    cjk_size: int | None,
    threshold: float,
    item: tuple[str, Iterable[tuple[int, str]]],
) -> Iterator[tuple[int, int]]:
    token, members = item
    group = sorted(members)
    if len(group) < 2:
        return
    grams = {position: qgrams(text, size, cjk_size) for position, text in group}
    prefixes = {
        position: set(sorted(s, key=_token_rank)[: prefix_length(len(s), threshold)])
        for position, s in grams.items()
    }
    for (a, _), (b, _) in itertools.combinations(group, 2):
        first, second = grams[a], grams[b]
        small, large = sorted((len(first), len(second)))
        if small < threshold * large - 1e-9:
            continue  # length filter
        # Paired only under the first prefix q-gram the two share, so once.
        shared = prefixes[a] & prefixes[b]
        if min(shared, key=_token_rank) != token:
            continue
        if qgram_jaccard(first, second) >= threshold:
            yield a, b


def _verify_partition(
    config: CollectionConfig,
    simhash_blocks: int | None,
    rows: Iterable[tuple[int, tuple[tuple[int, Any], Any]]],
) -> Iterator[tuple[int, int, DocumentId, DocumentId, int, float, tuple[int, float] | None]]:
    """(a, b, id a, id b, bits, similarity, pending) of each matching candidate pair;
    pending (equal signature values, q-gram Jaccard) where its texts decide it."""
    rule = MatchRule(config, simhash_blocks)
    iterator = iter(rows)
    ngram = config.ngram
    while chunk := list(itertools.islice(iterator, VERIFY_CHUNK)):
        a = [row[1][0][0] for row in chunk]
        b = [row[0] for row in chunk]
        first: list[tuple[DocumentId, Print]] = [row[1][0][1] for row in chunk]
        second: list[tuple[DocumentId, Print]] = [row[1][1] for row in chunk]
        simhash_a = np.array([f[1][0] for f in first], dtype=np.uint64)
        simhash_b = np.array([s[1][0] for s in second], dtype=np.uint64)
        width = rule.num_perm
        if width:
            sig_a = np.frombuffer(b"".join(f[1][3] for f in first), np.uint32).reshape(-1, width)
            sig_b = np.frombuffer(b"".join(s[1][3] for s in second), np.uint32).reshape(-1, width)
            agree = np.count_nonzero(sig_a == sig_b, axis=1).astype(np.int64)
            bands = rule.bands
            keys_a = np.frombuffer(b"".join(f[1][4] for f in first), np.uint64).reshape(-1, bands)
            keys_b = np.frombuffer(b"".join(s[1][4] for s in second), np.uint64).reshape(-1, bands)
            shared = (keys_a == keys_b).any(axis=1)
        else:
            agree = np.zeros(len(chunk), np.int64)
            shared = np.zeros(len(chunk), np.bool_)
        jaccard = np.full(len(chunk), np.nan)
        if rule.ngram_on:
            for i, (f, s) in enumerate(zip(first, second, strict=True)):
                short_a, short_b = f[1][5], s[1][5]
                if short_a is not None and short_b is not None:
                    jaccard[i] = ngram_similarity(short_a, short_b, ngram)
        bits, similarity = rule.evaluate(
            np.zeros(len(chunk), np.bool_), simhash_a, simhash_b, agree, shared, jaccard
        )
        unsure = np.zeros(len(chunk), np.bool_)
        unsure[rule.unsure(bits, agree)] = True
        for i, (bit, score) in enumerate(zip(bits.tolist(), similarity.tolist(), strict=True)):
            if bit:
                # A pair its texts decide carries what deciding it takes.
                pending = (int(agree[i]), float(jaccard[i])) if unsure[i] else None
                yield a[i], b[i], first[i][0], second[i][0], bit, score, pending


def _decide_partition(
    config: CollectionConfig,
    rows: Iterable[tuple[int, tuple[tuple[Any, str], str]]],
) -> Iterator[tuple[int, int, DocumentId, DocumentId, int, float]]:
    """The pairs near the MinHash threshold, joined with both texts, decided by them as
    the service decides (MatchRule.decided); those left with no method dropped."""
    rule = MatchRule(config)
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, VERIFY_CHUNK)):
        pairs = [row[1][0][0] for row in chunk]
        texts = {pair[0]: row[1][0][1] for pair, row in zip(pairs, chunk, strict=True)}
        texts.update({pair[1]: row[1][1] for pair, row in zip(pairs, chunk, strict=True)})
        bits, similarity = rule.decided(
            np.array([pair[0] for pair in pairs], np.int64),
            np.array([pair[1] for pair in pairs], np.int64),
            np.array([pair[4] for pair in pairs], np.uint8),
            np.array([pair[6][0] for pair in pairs], np.int64),
            np.array([pair[5] for pair in pairs], np.float64),
            np.array([pair[6][1] for pair in pairs], np.float64),
            texts.get,
        )
        for pair, bit, score in zip(pairs, bits.tolist(), similarity.tolist(), strict=True):
            if bit:
                yield pair[0], pair[1], pair[2], pair[3], bit, score


def _decided_exactly(
    sc: Any,
    verified: RDD[Any],
    texts: RDD[tuple[int, DocumentId, str, int | None]],
    config: CollectionConfig,
    html: bool,
    partitions: int,
) -> RDD[Any]:
    """The verified pairs with those near the MinHash threshold decided by their texts:
    the texts of the documents in such pairs (their positions broadcast, few) joined
    with them."""
    sure = verified.filter(lambda p: p[6] is None).map(lambda p: p[:6])
    unsure = verified.filter(lambda p: p[6] is not None)
    needed = unsure.flatMap(lambda p: (p[0], p[1])).distinct().collect()
    if not needed:
        return sure
    wanted = sc.broadcast(frozenset(needed))
    needed_texts = texts.filter(lambda t: t[0] in wanted.value).map(
        lambda t: (t[0], document_text(t[2], config, html))
    )
    decided = (
        unsure.map(lambda p: (p[0], p))
        .join(needed_texts, partitions)
        .map(lambda kv: (kv[1][0][1], kv[1]))
        .join(needed_texts, partitions)
        .mapPartitions(partial(_decide_partition, config))
    )
    return sure.union(decided)


def _expand(
    item: tuple[int, tuple[tuple[Any, Any], Any]],
) -> Iterator[tuple[tuple[int, int], tuple[DocumentId, DocumentId, float, int]]]:
    """Document pairs of one representatives' pair: every member of a's group with
    every member of b's (a group of one is its representative)."""
    b, ((pair, members_a), members_b) = item
    a, _, id_a, id_b, bits, similarity = pair
    for x, x_id in members_a or [(a, id_a)]:
        for y, y_id in members_b or [(b, id_b)]:
            if x < y:
                yield (x, y), (x_id, y_id, similarity, bits)
            else:
                yield (y, x), (y_id, x_id, similarity, bits)


def _within(
    config: CollectionConfig, item: tuple[int, tuple[list[tuple[int, DocumentId]], bool]]
) -> Iterator[tuple[tuple[int, int], tuple[DocumentId, DocumentId, float, int]]]:
    _, (members, short) = item
    bits = MatchRule(config).within_group_bits(short)
    for (x, x_id), (y, y_id) in itertools.combinations(members, 2):
        yield (x, y), (x_id, y_id, 1.0, bits)


def _large_star(item: tuple[int, Iterable[int]]) -> list[tuple[int, int]]:
    node, neighbours = item
    around = set(neighbours)
    smallest = min(min(around), node)
    return [(other, smallest) for other in around if other > node]


def _small_star(item: tuple[int, Iterable[int]]) -> list[tuple[int, int]]:
    node, smaller = item
    around = set(smaller)
    smallest = min(around)
    edges = [(other, smallest) for other in around if other != smallest]
    edges.append((node, smallest))
    return edges


def connected_components(edges: RDD[tuple[int, int]], partitions: int) -> RDD[tuple[int, int]]:
    """(node, smallest node of its component) for every node of ``edges``, by alternating
    large-star and small-star until a round changes no edge (Kiveris et al. 2014)."""
    current = edges.map(lambda e: (max(e), min(e))).distinct(partitions).persist()
    rounds = 0
    while True:
        large = (
            current.flatMap(lambda e: [e, (e[1], e[0])]).groupByKey(partitions).flatMap(_large_star)
        )
        small = (
            large.map(lambda e: (max(e), min(e)))
            .groupByKey(partitions)
            .flatMap(_small_star)
            .distinct(partitions)
            .persist()
        )
        # One job: an edge in only one of the two edge sets is a change.
        changed = (
            small.map(lambda e: (e, 1))
            .union(current.map(lambda e: (e, 2)))
            .reduceByKey(lambda x, y: x | y, partitions)
            .filter(lambda kv: kv[1] != 3)
        )
        done = changed.isEmpty()
        rounds += 1
        current.unpersist()
        current = small
        if done:
            break
    logging.getLogger(__name__).info("connected components: %d rounds", rounds)
    return current.flatMap(lambda e: [e, (e[1], e[1])]).reduceByKey(min, partitions)


# ---------------------------------------------------------------------------- driver


def _write_lines(path: Path, lines: RDD[bytes]) -> int:
    count = 0
    with open(path, "wb", buffering=1 << 20) as handle:
        for line in lines.toLocalIterator(prefetchPartitions=True):
            handle.write(line)
            count += 1
    return count


class _Steps:
    """Seconds of each step of the job, on stderr when progress is shown."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self.last
        self.last = now
        if self.show:
            print(f"neardup dedup (spark): {name} in {self.seconds[name]:.1f} s", file=sys.stderr)


def _input_error(error: Exception) -> InputError | None:
    """The InputError an executor raised, from the exception Spark hands the driver."""
    text = str(error)
    marker = "InputError: "
    if marker not in text:
        return None
    return InputError(text.split(marker, 1)[1].splitlines()[0])


def run(
    paths: Sequence[str],
    config: CollectionConfig,
    options: SparkOptions,
    spark: SparkSession | None = None,
) -> Summary:
    """De-duplicate the input files into options.out on Spark (a session of its own,
    stopped at the end, unless one is given)."""
    started = time.perf_counter()
    check_batch_settings(config, options.fields.timestamp_field)
    own = spark is None
    spark = spark or session(options)
    try:
        return _run(paths, config, options, spark, started)
    except InputError:
        raise
    except Exception as error:
        reason = _input_error(error)
        if reason is not None:
            raise reason from None
        raise
    finally:
        if own:
            spark.stop()


def _run(
    paths: Sequence[str],
    config: CollectionConfig,
    options: SparkOptions,
    spark: SparkSession,
    started: float,
) -> Summary:
    from pyspark import StorageLevel

    sc: Any = spark.sparkContext  # RDDs of plain tuples: typed loosely
    partitions = options.partitions or sc.defaultParallelism
    rule = MatchRule(config, options.simhash_blocks)
    options.out.mkdir(parents=True, exist_ok=True)
    splits = plan_splits(paths, options.format, options.split_bytes)
    steps = _Steps(options.progress)
    counts = sc.parallelize(splits, max(1, len(splits))).map(count_records).collect()
    steps.done(f"{len(splits)} splits counted")
    firsts = [0, *itertools.accumulate(counts)]
    documents_total = firsts[-1]
    # Sorted outputs come to the driver a partition at a time: keep partitions small.
    output_partitions = max(partitions, -(-documents_total // OUTPUT_PARTITION_DOCUMENTS))

    texts = sc.parallelize(list(zip(splits, firsts, strict=False)), max(1, len(splits))).flatMap(
        partial(_read_split, options.fields)
    )
    if len(splits) < partitions:
        texts = texts.repartition(partitions)
    documents: Any = texts.mapPartitions(
        partial(_fingerprint_partition, config, options.html)
    ).persist(StorageLevel.MEMORY_AND_DISK)

    twice = (
        documents.map(lambda d: (d[1], 1))
        .reduceByKey(add, partitions)
        .filter(lambda kv: kv[1] > 1)
        .take(1)
    )
    if twice:
        raise InputError(f"the id {twice[0][0]!r} is used twice; ids must be unique")
    steps.done("fingerprints")

    # Identical documents by one shuffle on the exact hash: each group as (its first
    # document, its representative: (position, id, fingerprints), [(position, id)]).
    identical = (
        documents.filter(lambda d: d[2] is not None)
        .map(lambda d: ((d[2][1], d[2][2]), (d[0], d[1], d[2])))
        .groupByKey(partitions)
        .map(_group)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    # (representative, (members ascending, short)), every group
    groups = identical.map(lambda g: (g[0], (g[2], g[1][2][5] is not None)))
    multi = groups.filter(lambda kv: len(kv[1][0]) > 1).persist(StorageLevel.MEMORY_AND_DISK)
    # Representatives: (position, (id, fingerprints)).
    reps = identical.map(lambda g: (g[0], (g[1][1], g[1][2])))

    candidates: list[RDD[tuple[int, int]]] = []
    if rule.simhash_on:
        masks = [int(mask) for mask in rule.table_masks]
        candidates.append(
            reps.flatMap(
                lambda r: [((t, r[1][1][0] & m), (r[0], r[1][1][0])) for t, m in enumerate(masks)]
            )
            .groupByKey(partitions)
            .flatMap(partial(_simhash_group_pairs, masks, rule.max_distance))
        )
    if rule.minhash_on:
        bands = rule.bands
        candidates.append(
            reps.flatMap(
                lambda r: [
                    ((t, key), (r[0], r[1][1][4]))
                    for t, key in enumerate(np.frombuffer(r[1][1][4], np.uint64).tolist())
                ]
            )
            .groupByKey(partitions)
            .flatMap(_band_group_pairs)
        )
        assert bands > 0
    if rule.ngram_on:
        size, threshold = config.ngram.size, config.ngram.threshold
        cjk_size = config.ngram.cjk_size
        candidates.append(
            reps.filter(lambda r: r[1][1][5] is not None)
            .flatMap(partial(_prefix_tokens, size, cjk_size, threshold))
            .groupByKey(partitions)
            .flatMap(partial(_ngram_group_pairs, size, cjk_size, threshold))
        )
    pairs_rdd = sc.union(candidates).distinct(partitions) if candidates else sc.emptyRDD()
    verified = (
        pairs_rdd.join(reps, partitions)
        .map(lambda kv: (kv[1][0], (kv[0], kv[1][1])))
        .join(reps, partitions)
        .mapPartitions(partial(_verify_partition, config, options.simhash_blocks))
    )
    verified = _decided_exactly(sc, verified, texts, config, options.html, partitions).persist(
        StorageLevel.MEMORY_AND_DISK
    )

    # Document pairs, sorted by (a, b) positions.
    members = multi.mapValues(lambda value: value[0])
    across = (
        verified.map(lambda p: (p[0], p))
        .leftOuterJoin(members, partitions)
        .map(lambda kv: (kv[1][0][1], kv[1]))
        .leftOuterJoin(members, partitions)
        .flatMap(_expand)
    )
    within = multi.flatMap(partial(_within, config))
    document_pairs = across.union(within)
    window = config.match_window_us
    if window is not None:
        # Only the pairs whose times are at most the window apart (by two joins with
        # the documents' times); clusters are then the components of those pairs.
        times = documents.map(lambda d: (d[0], d[3]))
        document_pairs = (
            document_pairs.map(lambda kv: (kv[0][0], kv))
            .join(times, partitions)
            .map(lambda kv: (kv[1][0][0][1], (kv[1][0], kv[1][1])))
            .join(times, partitions)
            .filter(lambda kv: abs(kv[1][0][1] - kv[1][1]) <= window)
            .map(lambda kv: kv[1][0][0])
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
    pair_lines = document_pairs.sortByKey(numPartitions=output_partitions).map(
        lambda kv: pair_line(kv[1][0], kv[1][1], kv[1][2], kv[1][3])
    )
    pair_count = _write_lines(options.out / "pairs.jsonl", pair_lines)
    steps.done("pairs.jsonl")

    if window is None:
        # Clusters: the component of each representative, named by its smallest position.
        edges = verified.map(lambda p: (p[0], p[1]))
        nodes = reps.mapValues(lambda value: value[0])
    else:
        edges = document_pairs.map(lambda kv: kv[0])
        nodes = documents.map(lambda d: (d[0], d[1]))
    labels = connected_components(edges, partitions).persist()
    labels.count()
    steps.done("connected components")
    named = (
        labels.map(lambda kv: (kv[1], kv[0]))
        .join(nodes, partitions)
        .map(lambda kv: (kv[1][0], (kv[0], kv[1][1])))
    )  # node -> (cluster position, cluster id)
    if window is None:
        assigned = (
            groups.flatMap(lambda kv: [(kv[0], (p, i, kv[1][0][0][1])) for p, i in kv[1][0]])
            .leftOuterJoin(named, partitions)
            .map(_assigned)
        )
        empties = documents.filter(lambda d: d[2] is None).map(
            lambda d: (d[0], (d[1], (d[0], d[1])))
        )
        assigned = assigned.union(empties)
    else:  # every document, a node of the components or a cluster of its own
        assigned = nodes.leftOuterJoin(named, partitions).map(
            lambda kv: (kv[0], (kv[1][0], kv[1][1] or (kv[0], kv[1][0])))
        )
    clusters: Any = assigned.sortByKey(numPartitions=output_partitions).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    _write_lines(
        options.out / "clusters.jsonl",
        clusters.map(lambda kv: cluster_line(kv[1][0], kv[1][1][1])),
    )
    steps.done("clusters.jsonl")

    kept = clusters.filter(lambda kv: kv[0] == kv[1][1][0])
    passage_pairs = contained = None
    if options.passages or options.drop_contained:
        shared = spark_passages.shared_passages(texts, config, options.html, partitions)
        shared = shared.persist(StorageLevel.MEMORY_AND_DISK)
        passage_pairs = _write_lines(
            options.out / "passages.jsonl", shared.map(lambda kv: kv[1][2].line(*kv[1][:2]))
        )
        steps.done("passages.jsonl")
        if options.drop_contained:  # the kept documents inside another (PassagePair.contained)
            inside = (
                shared.map(lambda kv: (kv[1][2].contained(), None))
                .filter(lambda kv: kv[0] is not None)
                .distinct(partitions)
            )
            remaining = kept.subtractByKey(inside, partitions).persist()
            contained = kept.count() - remaining.count()
            kept = remaining
        shared.unpersist()
    # Partition i holds the kept records of split i, read by one task in file order:
    # the output is in input order without a sort, a split's records at a time.
    kept_lines = (
        kept.map(partial(_split_of, firsts))
        .groupByKey(max(1, len(splits)), partitionFunc=_split_number)
        .flatMap(partial(_kept_records, splits))
    )
    cluster_count = _write_lines(options.out / "kept.jsonl", kept_lines)
    steps.done("kept.jsonl")
    empty = documents.filter(lambda d: d[2] is None).count()
    for rdd in (documents, identical, multi, verified, document_pairs, clusters, labels, kept):
        rdd.unpersist()
    return Summary(
        engine=f"spark {sc.master}",
        documents=documents_total,
        empty=empty,
        pairs=pair_count,
        clusters=cluster_count + (contained or 0),
        seconds=time.perf_counter() - started,
        passage_pairs=passage_pairs,
        contained=contained,
    )


def _group(
    item: tuple[tuple[int, int], Iterable[tuple[int, DocumentId, Print]]],
) -> tuple[int, tuple[int, DocumentId, Print], list[tuple[int, DocumentId]]]:
    members = sorted(item[1], key=lambda member: member[0])
    return (
        members[0][0],
        members[0],
        [(position, identifier) for position, identifier, _ in members],
    )


def _assigned(
    item: tuple[int, tuple[tuple[int, DocumentId, DocumentId], tuple[int, DocumentId] | None]],
) -> tuple[int, tuple[DocumentId, tuple[int, DocumentId]]]:
    """(position, (id, (cluster position, cluster id))) of a member of a group: the
    cluster of its representative, or the representative itself when it is in no pair."""
    representative, ((position, identifier, representative_id), cluster) = item
    return position, (identifier, cluster or (representative, representative_id))


def _split_of(firsts: Sequence[int], item: tuple[int, Any]) -> tuple[int, int]:
    position = item[0]
    number = int(np.searchsorted(firsts, position, side="right")) - 1
    return number, position - firsts[number]


def _split_number(number: int) -> int:
    return number


def _kept_records(splits: Sequence[Split], item: tuple[int, Iterable[int]]) -> Iterator[bytes]:
    number, wanted = item
    for _, line in read_records(splits[number], sorted(wanted)):
        yield line + b"\n"
