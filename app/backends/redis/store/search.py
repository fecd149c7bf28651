"""Searches of one collection in Redis: the same answers as the in-process indexes
(app/core): SimHash within Hamming distance k, exactly; MinHash LSH candidates verified
by the signatures' estimated Jaccard; equal 128-bit exact hashes. Two round trips: the
range lookups of every table and band (lookups.py), then the rows found (rows.py), which
is also their liveness check."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from app.backends.redis.store.layout import Layout, exact_extra
from app.backends.redis.store.lookups import LookupTables, RangeLookups
from app.backends.redis.store.rows import FEW_ROWS, RowData, RowReads
from app.backends.redis.store.steps import Batch, Steps, run
from app.backends.redis.store.wire import Command, Wire, key_of, pack
from app.core.lsh import agreements, min_matches
from app.core.types import ExactHashes, MinHashes, Rows, SimHashes

Floats: TypeAlias = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Found:
    """Pairs one index found, sorted by query position then best first: ``positions[i]``
    (a query) matches ``rows[i]``; ``values[i]`` is the Hamming distance (SimHash), the
    estimated Jaccard (MinHash) or 1.0 (exact)."""

    positions: Rows
    rows: Rows
    values: Floats

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, keep: npt.NDArray[np.bool_]) -> Found:
        return Found(self.positions[keep], self.rows[keep], self.values[keep])


@dataclass(frozen=True, slots=True)
class SearchResult:
    exact: Found
    simhash: Found
    minhash: Found
    rows: RowData  # every row found by any method
    also: list[Any] = dataclasses.field(default_factory=list)  # replies to search(also=...)


METHODS = ("exact", "simhash", "minhash")
_NO_ROWS = np.zeros(0, dtype=np.int64)
_NONE = Found(_NO_ROWS, _NO_ROWS, np.zeros(0))  # what finds nothing: never written to
_NO_KEYS = np.zeros((0, 0), dtype=np.uint64)


class StoreSearch:
    """The searches of one collection (RedisStore's ``search*``)."""

    def __init__(self, layout: Layout, wire: Wire, reads: RowReads) -> None:
        self.layout = layout
        self.wire = wire
        self._reads = reads
        self._tables = {  # what every search's lookups share
            method: LookupTables(method, tables)
            for method, tables in (
                ("exact", [layout.exact_table]),
                ("simhash", layout.simhash_tables),
                ("minhash", layout.band_tables),
            )
            if tables
        }

    def search(self, *arguments: Any, **options: Any) -> SearchResult:
        """``search_steps`` (the same arguments), sent from this thread."""
        return run(self.search_steps(*arguments, **options), self.wire)

    def search_steps(
        self,
        simhash: SimHashes,
        minhash: MinHashes | None,
        exact: ExactHashes,
        *,
        max_distance: int | None = None,
        threshold: float | None = None,
        methods: Sequence[str] = METHODS,
        records: bool = True,
        also: Sequence[Command] = (),
    ) -> Steps[SearchResult]:
        """Every live row matching each query by each method asked for. Two round trips.
        ``also``: read-only commands of the caller's, sent in the first round trip (the
        service reads the collection's settings there); their replies in ``also``.

        ``max_distance`` (default the layout's k, at most it) and ``threshold`` (default
        the layout's; a lower one finds only what the bands make candidates, as in
        process) are those of HammingIndex.search_many and LSHIndex.search_many. Cost:
        (1 + k + 1 + b) range lookups a query, then an HMGET per row group of the rows
        found.
        """
        layout = self.layout
        distance = layout.max_distance if max_distance is None else max_distance
        if not 0 <= distance <= layout.max_distance:
            raise ValueError(f"max_distance must be 0 to {layout.max_distance}, not {distance}")
        bar = layout.threshold if threshold is None else threshold
        simhash = np.asarray(simhash, dtype=np.uint64).reshape(-1)
        exact = np.asarray(exact, dtype=np.uint64).reshape(-1, 2)
        count = len(simhash)
        lookups = RangeLookups(count, keyed=self.wire.cluster)
        if "exact" in methods:
            high_words = np.ascontiguousarray(exact[:, 0])
            extra = exact_extra(exact)
            lookups.add(self._tables["exact"], high_words[:, None], None, extra)
        permuted = _NO_KEYS
        if "simhash" in methods and layout.simhash:
            permuted = layout.permute(simhash)
            masks = layout.prefix_masks()
            low = permuted & masks
            lookups.add(self._tables["simhash"], low, low | ~masks, None)
        if "minhash" in methods and layout.minhash:
            assert minhash is not None
            minhash = np.asarray(minhash, dtype=np.uint32).reshape(count, -1)
            lookups.add(self._tables["minhash"], layout.band_keys(minhash), None, None)

        packed = [pack(command) for command in also] + lookups.packed
        keys: list[bytes | str] | None = None
        if self.wire.cluster:
            keys = [*map(key_of, also), *lookups.keys]
        replies = yield Batch(packed, keys)
        also_replies, replies = replies[: len(also)], replies[len(also) :]
        found = dict.fromkeys(METHODS, _NONE)
        for hits in lookups.answers(replies):
            at, rows = hits.queries, hits.rows
            if hits.method == "simhash":
                distances = np.bitwise_count(hits.keys ^ permuted[at, hits.lanes]).astype(np.int64)
                near = distances <= distance
                found["simhash"] = _merge(at[near], rows[near], distances[near].astype(float))
            elif hits.method == "exact":
                same = (hits.keys == exact[at, 0]) & (hits.extra == exact_extra(exact)[at]).all(
                    axis=1
                )
                found["exact"] = _merge(at[same], rows[same], np.ones(int(same.sum())))
            else:
                found["minhash"] = _merge(at, rows, np.zeros(len(rows)))
        if all(not len(f) for f in found.values()):  # most searches of new texts
            return SearchResult(_NONE, _NONE, _NONE, self._reads.no_rows, also_replies)

        commands, plan = self._reads.row_commands(
            np.concatenate([f.rows for f in found.values()]), records
        )
        data = self._reads.parse_rows(plan, records, (yield self._reads.batch(commands)))
        live = {m: f.where(_within(f.rows, data.rows)) if len(f) else f for m, f in found.items()}
        lsh = live["minhash"]
        if len(lsh):
            assert minhash is not None
            stored = data.signatures[data.index(lsh.rows)]
            agree = agreements(stored, minhash[lsh.positions])
            verified = agree >= min_matches(bar, layout.num_perm)
            scores = agree[verified] / layout.num_perm
            lsh = _best_first(lsh.positions[verified], lsh.rows[verified], scores)
        return SearchResult(live["exact"], live["simhash"], lsh, data, also_replies)


def _merge(positions: Rows, rows: Rows, values: Floats) -> Found:
    """One Found of (position, row) pairs found in several tables, each pair once."""
    if len(rows) < 2:
        return Found(positions, rows, values)
    pair = (positions << 32) | rows
    if len(rows) <= FEW_ROWS:  # the first index of each pair, in pair order
        first_of: dict[int, int] = {}
        for index, key in enumerate(pair.tolist()):
            first_of.setdefault(key, index)
        first = np.array([first_of[key] for key in sorted(first_of)], dtype=np.int64)
    else:
        _, first = np.unique(pair, return_index=True)
    return Found(positions[first], rows[first], values[first])


def _within(rows: Rows, held: Rows) -> npt.NDArray[np.bool_]:
    """Which of rows are in ``held`` (sorted): np.isin's answer at a fraction of its
    fixed cost, which a search pays for three methods."""
    if not len(held):
        return np.zeros(len(rows), dtype=bool)
    at = np.minimum(np.searchsorted(held, rows), len(held) - 1)
    found: npt.NDArray[np.bool_] = held[at] == rows
    return found


def _best_first(positions: Rows, rows: Rows, scores: Floats) -> Found:
    order = np.lexsort((rows, -scores, positions))
    return Found(positions[order], rows[order], scores[order])
