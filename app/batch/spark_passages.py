"""``neardup dedup --passages`` on Spark: the local engine's passages (app/batch/passages.py)
by shuffles, so that passages.jsonl is the same file.

1. Each document's winnowed fingerprints in ``mapPartitions`` (``PassagesConfig.fingerprints``,
   a chunk of texts a compiled call), as (fingerprint, position) records.
2. Candidate pairs by a shuffle on the fingerprint: the holders of a fingerprint that at
   most ``max_rows`` documents hold are paired (more is boilerplate, as in the service),
   each pair once. The same shuffle counts each host's holders: a fingerprint HOST_PAGES
   documents of one host hold is that host's chrome (app/core/hosts.py), gathered by
   document.
3. Both texts joined to each pair by two shuffles (with the first's chrome) and the pair
   verified token by token by ``verified_pair``, the local engine's rule (chrome passages
   left out between pages of one host); the pairs with passages come back sorted by (a,
   b) with their ids.

Memory: a document's fingerprints (some 110 for a 3 KB text) in the shuffle, and the
texts of the documents in candidate pairs, joined to each pair.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np

from app.batch.passages import PassagePair, document_host, verified_pair
from app.batch.readers import DocumentId
from app.batch.rules import document_text
from app.collection_config import CollectionConfig
from app.core.hosts import HOST_PAGES, NO_HOST
from app.core.passages import tokenize

CHUNK = 1024  # texts fingerprinted a compiled call
# (position, id, text as read, time): the Spark engine's records of the input
Record = tuple[int, DocumentId, str, int | None]
# (position, (id, text, host)): a document's text where passages are found, and its host
Text = tuple[int, tuple[DocumentId, str, int]]
# A first document of a pair: (position, id, text, host, its host's chrome or None)
First = tuple[int, DocumentId, str, int, list[int] | None]


def _texts(config: CollectionConfig, html: bool, record: Record) -> Text:
    position, identifier, text, _ = record
    host = document_host(identifier, text, html)
    return position, (identifier, document_text(text, config, html), host)


def _fingerprints(
    config: CollectionConfig, texts: Iterable[Text]
) -> Iterator[tuple[int, tuple[int, int]]]:
    iterator = iter(texts)
    while chunk := list(itertools.islice(iterator, CHUNK)):
        keys = config.passages.fingerprints([text for _, (_, text, _) in chunk])
        for (position, (_, _, host)), held in zip(chunk, keys, strict=True):
            for key in held.tolist():
                yield key, (position, host)


def _holder_pairs(
    max_rows: int, item: tuple[int, Iterable[tuple[int, int]]]
) -> list[tuple[int, int]]:
    holders = sorted(position for position, _ in item[1])
    if len(holders) < 2 or len(holders) > max_rows:
        return []
    return [(a, b) for i, b in enumerate(holders) for a in holders[:i]]


def _host_chrome(item: tuple[int, Iterable[tuple[int, int]]]) -> list[tuple[int, int]]:
    """(position, fingerprint) of each holder of a fingerprint that HOST_PAGES documents
    of its host hold (``hosts.corpus_chrome``)."""
    key, holders = item
    held = list(holders)
    pages = Counter(host for _, host in held if host != NO_HOST)
    return [(position, key) for position, host in held if pages.get(host, 0) >= HOST_PAGES]


def _verify(
    config: CollectionConfig,
    items: Iterable[tuple[int, tuple[First, tuple[DocumentId, str, int]]]],
) -> Iterator[tuple[tuple[int, int], tuple[DocumentId, DocumentId, PassagePair]]]:
    for second, ((first, first_id, first_text, first_host, chrome), right) in items:
        second_id, second_text, second_host = right
        texts = (first_text, second_text)
        tokens = (tokenize(first_text), tokenize(second_text))
        of_pair = None
        if chrome and first_host != NO_HOST and first_host == second_host:
            keys = config.passages.fingerprints([first_text])[0]
            of_pair = (keys, np.array(sorted(chrome), dtype=np.uint64))
        pair = verified_pair(first, second, texts, tokens, config.passages, of_pair)
        if pair is not None:
            yield (first, second), (first_id, second_id, pair)


def _first(
    item: tuple[int, tuple[tuple[int, list[int] | None], tuple[DocumentId, str, int]]],
) -> tuple[int, First]:
    first, ((second, chrome), (identifier, text, host)) = item
    return second, (first, identifier, text, host, chrome)


def shared_passages(records: Any, config: CollectionConfig, html: bool, partitions: int) -> Any:
    """RDD of ((a, b), (a id, b id, PassagePair)) sorted by (a, b): the pairs of the
    documents in ``records`` (the engine's (position, id, text, time)) that share passages."""
    texts = records.map(partial(_texts, config, html))
    holders = texts.mapPartitions(partial(_fingerprints, config)).groupByKey(partitions).cache()
    candidates = holders.flatMap(partial(_holder_pairs, config.passages.max_rows)).distinct(
        partitions
    )
    chrome = holders.flatMap(_host_chrome).groupByKey(partitions).mapValues(list)
    found = (
        candidates.leftOuterJoin(chrome, partitions)  # a -> (b, a's chrome or None)
        .join(texts, partitions)  # a -> ((b, chrome), (a id, a text, a host))
        .map(_first)
        .join(texts, partitions)  # b -> ((a, a id, a text, a host, chrome), (b id, ...))
        .mapPartitions(partial(_verify, config))
        .sortByKey(numPartitions=partitions)
    )
    return found
