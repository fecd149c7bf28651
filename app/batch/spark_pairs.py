"""Candidate pairs and clusters of ``neardup dedup --engine spark`` (app/batch/spark.py) by
shuffles: the members of each SimHash table key, MinHash band key and rarest q-gram
(the AllPairs prefix, in a fixed hash order) paired, a pair only by the first table,
band or prefix q-gram it meets in; and the connected components of the verified pairs
by alternating large-star / small-star (Kiveris, Lattanzi, Mirrokni, Rastogi,
Vassilvitskii, "Connected Components in MapReduce and Beyond", SoCC 2014)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from app.batch.readers import DocumentId
from app.batch.rules import MatchRule, prefix_length, qgram_jaccard, qgrams
from app.collection_config import CollectionConfig

if TYPE_CHECKING:
    from pyspark import RDD

# A document's fingerprints as the RDDs carry them (plain Python values, cheap to pickle):
# (simhash, exact high, exact low, signature bytes, band key bytes, short text or None).
Print = tuple[int, int, int, bytes, bytes, str | None]


def candidate_pairs(
    sc: Any, reps: RDD[Any], rule: MatchRule, config: CollectionConfig, partitions: int
) -> RDD[tuple[int, int]]:
    """The distinct (a, b) candidate pairs of the representatives ``reps`` ((position,
    (id, fingerprints)))."""
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
    pairs: RDD[tuple[int, int]] = (
        sc.union(candidates).distinct(partitions) if candidates else sc.emptyRDD()
    )
    return pairs


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
