"""``neardup dedup --passages`` on Spark: the local engine's passages (app/batch/passages.py)
by shuffles, so that passages.jsonl is the same file.

1. Each document's winnowed fingerprints in ``mapPartitions`` (``PassagesConfig.fingerprints``,
   a chunk of texts a compiled call), as (fingerprint, position) records.
2. Candidate pairs by a shuffle on the fingerprint: the holders of a fingerprint that at
   most ``max_rows`` documents hold are paired (more is boilerplate, as in the service),
   each pair once.
3. Both texts joined to each pair by two shuffles and the pair verified token by token by
   ``verified_pair``, the local engine's rule; the pairs with passages come back sorted
   by (a, b) with their ids.

Memory: a document's fingerprints (some 110 for a 3 KB text) in the shuffle, and the
texts of the documents in candidate pairs, joined to each pair.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from app.batch.passages import PassagePair, verified_pair
from app.batch.readers import DocumentId
from app.batch.rules import document_text
from app.collection_config import CollectionConfig
from app.core.passages import tokenize

CHUNK = 1024  # texts fingerprinted a compiled call
# (position, id, text as read, time): the Spark engine's records of the input
Record = tuple[int, DocumentId, str, int | None]
# (position, (id, text)): a document's text where passages are found
Text = tuple[int, tuple[DocumentId, str]]


def _texts(config: CollectionConfig, html: bool, record: Record) -> Text:
    position, identifier, text, _ = record
    return position, (identifier, document_text(text, config, html))


def _fingerprints(config: CollectionConfig, texts: Iterable[Text]) -> Iterator[tuple[int, int]]:
    iterator = iter(texts)
    while chunk := list(itertools.islice(iterator, CHUNK)):
        keys = config.passages.fingerprints([text for _, (_, text) in chunk])
        for (position, _), held in zip(chunk, keys, strict=True):
            for key in held.tolist():
                yield key, position


def _holder_pairs(max_rows: int, item: tuple[int, Iterable[int]]) -> list[tuple[int, int]]:
    holders = sorted(item[1])
    if len(holders) < 2 or len(holders) > max_rows:
        return []
    return [(a, b) for i, b in enumerate(holders) for a in holders[:i]]


def _verify(
    config: CollectionConfig,
    items: Iterable[tuple[int, tuple[tuple[int, tuple[DocumentId, str]], tuple[DocumentId, str]]]],
) -> Iterator[tuple[tuple[int, int], tuple[DocumentId, DocumentId, PassagePair]]]:
    for second, ((first, (first_id, first_text)), (second_id, second_text)) in items:
        texts = (first_text, second_text)
        pair = verified_pair(
            first, second, texts, (tokenize(first_text), tokenize(second_text)), config.passages
        )
        if pair is not None:
            yield (first, second), (first_id, second_id, pair)


def shared_passages(records: Any, config: CollectionConfig, html: bool, partitions: int) -> Any:
    """RDD of ((a, b), (a id, b id, PassagePair)) sorted by (a, b): the pairs of the
    documents in ``records`` (the engine's (position, id, text, time)) that share passages."""
    texts = records.map(partial(_texts, config, html))
    candidates = (
        texts.mapPartitions(partial(_fingerprints, config))
        .groupByKey(partitions)
        .flatMap(partial(_holder_pairs, config.passages.max_rows))
        .distinct(partitions)
    )
    return (
        candidates.join(texts, partitions)  # a -> (b, (a id, a text))
        .map(lambda kv: (kv[1][0], (kv[0], kv[1][1])))
        .join(texts, partitions)  # b -> ((a, (a id, a text)), (b id, b text))
        .mapPartitions(partial(_verify, config))
        .sortByKey(numPartitions=partitions)
    )
