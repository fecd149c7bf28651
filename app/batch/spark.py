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
)
from app.batch.spark_pairs import Print, candidate_pairs, connected_components
from app.collection_config import CollectionConfig
from app.core.lsh import agreements

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
            sig_a = np.frombuffer(b"".join(f[1][3] for f in first), np.uint16).reshape(-1, width)
            sig_b = np.frombuffer(b"".join(s[1][3] for s in second), np.uint16).reshape(-1, width)
            agree = agreements(sig_a, sig_b)
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

    texts, documents = _documents(sc, splits, firsts, config, options, partitions)
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

    pairs_rdd = candidate_pairs(sc, reps, rule, config, partitions)
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

    clusters, labels = _clusters(
        verified, reps, document_pairs, documents, groups, window is None, partitions, steps
    )
    clusters = clusters.sortByKey(numPartitions=output_partitions).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    _write_lines(
        options.out / "clusters.jsonl",
        clusters.map(lambda kv: cluster_line(kv[1][0], kv[1][1][1])),
    )
    steps.done("clusters.jsonl")

    kept = clusters.filter(lambda kv: kv[0] == kv[1][1][0])
    kept, passage_pairs, contained = _passages(texts, kept, config, options, partitions, steps)
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


def _clusters(
    verified: Any,
    reps: Any,
    document_pairs: Any,
    documents: Any,
    groups: Any,
    by_representatives: bool,
    partitions: int,
    steps: _Steps,
) -> tuple[Any, Any]:
    """(position -> (id, (cluster position, cluster id)) of every document, the component
    labels (persisted)): the components of the representatives' pairs, their groups'
    members with them (without a match window), else of the document pairs."""
    if by_representatives:
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
    if by_representatives:
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
    return assigned, labels


def _documents(
    sc: Any,
    splits: Sequence[Split],
    firsts: Sequence[int],
    config: CollectionConfig,
    options: SparkOptions,
    partitions: int,
) -> tuple[Any, Any]:
    """(texts, documents): the input's records ((position, id, text, time)) and their
    fingerprints (``Document``s, persisted); InputError where an id is used twice."""
    from pyspark import StorageLevel

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
    return texts, documents


def _passages(
    texts: Any,
    kept: Any,
    config: CollectionConfig,
    options: SparkOptions,
    partitions: int,
    steps: _Steps,
) -> tuple[Any, int | None, int | None]:
    """(kept, passage pairs, contained) with --passages / --drop-contained: passages.jsonl
    written, and the kept documents inside another left out (PassagePair.contained)."""
    from pyspark import StorageLevel

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
    return kept, passage_pairs, contained


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
