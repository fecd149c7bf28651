"""Candidate pairs of the local engine of ``neardup dedup`` (app/batch/local.py), phase 3:
SimHash pairs within k bits and MinHash band pairs by compiled passes over each table's
sorted keys (a pair by the first table or band it meets in), and short texts' pairs by
the service's n-gram index holding all of them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from app.batch import _kernels as kernels
from app.batch.rules import MatchRule
from app.core.ngram import NgramIndex
from app.core.rule import positions_of
from app.core.types import Rows

# Short texts searched in the n-gram index at a time (one task of the thread pool).
NGRAM_SEARCH_BATCH = 4096


_NO_SIMHASH = np.zeros(0, np.uint64)
_NO_BANDS = np.zeros((0, 0), np.uint64)
# Read-only, as the engine's signatures are (a memory map, local.py): a SimHash table
# and a band call table_pairs with one type, compiled once.
_NO_SIGNATURES = np.zeros((0, 0), np.uint16)
_NO_SIGNATURES.setflags(write=False)
_NO_ROWS = np.zeros(0, np.int64)


def _table_pairs(
    keys: npt.NDArray[np.uint64], table: int, pair_test: tuple[Any, ...]
) -> tuple[Rows, Rows]:
    """``table_pairs`` counted, then filled."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    ordered = keys[order]
    empty = np.zeros(0, np.int64)
    pairs: Callable[..., int] = kernels.table_pairs
    count = pairs(ordered, order, table, pair_test, empty, empty, False)
    a, b = np.empty(count, np.int64), np.empty(count, np.int64)
    pairs(ordered, order, table, pair_test, a, b, True)
    return a, b


def simhash_pairs(
    rule: MatchRule, simhash: npt.NDArray[np.uint64], table: int
) -> tuple[Rows, Rows]:
    """Pairs within k bits whose first table in common is ``table``."""
    masks = rule.table_masks
    return _table_pairs(
        simhash & masks[table],
        table,
        (simhash, masks, rule.max_distance, _NO_BANDS, _NO_SIGNATURES, _NO_ROWS, 0),
    )


def band_pairs(
    rule: MatchRule,
    band_keys: npt.NDArray[np.uint64],
    band: int,
    signatures: npt.NDArray[np.uint16],
    signature_row: Rows,
) -> tuple[Rows, Rows]:
    """Verified pairs whose first band in common is ``band``."""
    return _table_pairs(
        np.ascontiguousarray(band_keys[:, band]),
        band,
        (_NO_SIMHASH, _NO_SIMHASH, 0, band_keys, signatures, signature_row, rule.min_matches),
    )


def ngram_pairs(
    rule: MatchRule, texts: list[str], pool: ThreadPoolExecutor
) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
    """(earlier, later, Jaccard) of the short texts matching each other: the service's
    n-gram index holding all of them, searched with each."""
    config = rule.config.ngram
    index = NgramIndex(
        threshold=config.threshold,
        size=config.size,
        cjk_size=config.cjk_size,
        same_numbers=config.same_numbers,
    )
    index.insert(texts, np.arange(len(texts)))
    index.merge()

    def search(first: int) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
        ends, others, similarity = index.search_many(texts[first : first + NGRAM_SEARCH_BATCH])
        at = positions_of(ends) + first
        earlier = others < at
        return others[earlier].astype(np.int64), at[earlier], similarity[earlier]

    parts = list(pool.map(search, range(0, len(texts), NGRAM_SEARCH_BATCH)))
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0)
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )
