"""The one interface through which a Collection talks to its indexes.

Each kind of index (exact hashes, SimHash permutation tables, MinHash LSH bands, the
n-gram index of short texts) is wrapped in a class with the same methods: insert and
remove rows, search a batch of documents, find the pairs within a batch that the index's
own rule matches, and report its backlog and memory. The Collection builds the ones its
settings ask for and never names a kind again, so adding an index (or keeping indexes
elsewhere) touches this module and the settings only.

Every search answers with a ``Found``: (query position, row) pairs, and for an index that
knows the exact similarity of what it found (the n-gram index), that similarity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig
from app.core.exact import ExactIndex
from app.core.hamming import HammingIndex
from app.core.lsh import LSHIndex, kept_values, min_matches, pair_agreements
from app.core.methods import EXACT, MINHASH, NGRAM, SIMHASH, Method
from app.core.ngram import NgramIndex
from app.core.rule import SMALL_BATCH, all_pairs, equal_pairs, positions_of
from app.core.saved import SavedArrays
from app.core.table_index import TableIndex
from app.core.types import Backlog, ExactHashes, MinHashes, Rows, SimHashes
from app.core.verify import candidate_threshold, search_bar
from app.service.types import Query


class Documents(Protocol):
    """What an index reads of a batch of documents: Fingerprints (a new batch) and
    DocumentBatch (a stored one) both have it."""

    @property
    def simhash(self) -> SimHashes: ...
    @property
    def minhash(self) -> MinHashes: ...
    @property
    def exact(self) -> ExactHashes: ...
    @property
    def shorts(self) -> list[str | None] | None: ...


@dataclass(frozen=True, slots=True)
class Found:
    """Pairs an index found: ``positions[i]`` (a query, or the later document of a batch)
    matches ``rows[i]`` (a stored row, or the earlier document). ``similarity`` is the
    exact similarity of each pair when the index computes it, else None."""

    positions: Rows
    rows: Rows
    similarity: npt.NDArray[np.float64] | None = None

    @staticmethod
    def none() -> Found:
        empty = np.zeros(0, dtype=np.int64)
        return Found(empty, empty)


class DocumentIndex(Protocol):
    """An index as the Collection sees it. ``bit`` is its method's bit in Match.methods."""

    name: Method
    bit: int

    def insert(self, documents: Documents, rows: Rows) -> None:
        """Index documents under new rows (never reused)."""

    def remove(self, rows: Rows) -> None:
        """Hide rows from every later search at once (tombstones, dropped by merges)."""

    def release(self, rows: Rows) -> None:
        """Give back the per-row memory of removed rows (whole pages of them)."""

    def search_many(self, queries: Documents, query: Query) -> Found:
        """Live rows matching each query by this index's rule."""

    def pairs_within(self, documents: Documents) -> Found:
        """(later, earlier) positions of a batch matching each other by the same rule."""

    def backlog(self) -> Backlog: ...
    def memory_bytes(self) -> int: ...
    def needs_merge(self) -> bool: ...
    def merge(self, release_below: int = 0) -> bool:
        """Merge the buffer, dropping tombstones; every row below ``release_below`` was
        tombstoned before the call, so its bookkeeping may go once merged."""

    def saved_arrays(self) -> SavedArrays:
        """Everything the index holds, as arrays for a segment (app/core/saved.py)."""

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's arrays as this empty index's."""


class _Kept(Protocol):
    """What every core index keeps the same way: tombstones, backlog, memory, merges."""

    def delete(self, rows: Rows) -> None: ...
    def backlog(self) -> Backlog: ...
    def memory_bytes(self) -> int: ...
    def needs_merge(self) -> bool: ...
    def merge(self, release_below: int = 0) -> bool: ...
    def saved_arrays(self) -> SavedArrays: ...
    def adopt_saved(self, arrays: SavedArrays) -> None: ...


class _KeptMatcher:
    """What a matcher hands to its index as it is: deletes, backlog, memory, merges."""

    index: _Kept

    def remove(self, rows: Rows) -> None:
        self.index.delete(rows)

    def backlog(self) -> Backlog:
        return self.index.backlog()

    def memory_bytes(self) -> int:
        return self.index.memory_bytes()

    def needs_merge(self) -> bool:
        return self.index.needs_merge()

    def merge(self, release_below: int = 0) -> bool:
        return self.index.merge(release_below)

    def saved_arrays(self) -> SavedArrays:
        return self.index.saved_arrays()

    def adopt_saved(self, arrays: SavedArrays) -> None:
        self.index.adopt_saved(arrays)


class TableMatcher(_KeptMatcher):
    """A matcher over a TableIndex, which also gives back deleted rows' values."""

    index: TableIndex

    def release(self, rows: Rows) -> None:
        self.index.release(rows)


class ExactMatcher(TableMatcher):
    """Equal 128-bit hashes of the normalised text."""

    name: Method = "exact"
    bit = EXACT

    index: ExactIndex

    def __init__(self) -> None:
        self.index = ExactIndex()

    def insert(self, documents: Documents, rows: Rows) -> None:
        self.index.insert(documents.exact, rows)

    def search_many(self, queries: Documents, query: Query) -> Found:
        positions, rows = self.index.search_many(queries.exact)
        return Found(positions, rows.astype(np.int64))

    def pairs_within(self, documents: Documents) -> Found:
        if len(documents.exact) <= SMALL_BATCH:
            later, earlier = all_pairs(len(documents.exact))
        else:  # equal low words are candidates; the high word decides
            later, earlier = equal_pairs(documents.exact[:, 1:])
        same = (documents.exact[later] == documents.exact[earlier]).all(axis=1)
        return Found(later[same], earlier[same])


class SimHashMatcher(TableMatcher):
    """SimHash fingerprints within the collection's Hamming distance k."""

    name: Method = "simhash"
    bit = SIMHASH

    index: HammingIndex

    def __init__(self, max_distance: int) -> None:
        self.max_distance = max_distance
        self.index = HammingIndex(max_distance)

    def insert(self, documents: Documents, rows: Rows) -> None:
        self.index.insert(documents.simhash, rows)

    def search_many(self, queries: Documents, query: Query) -> Found:
        ends, rows, _ = self.index.search_many(queries.simhash, query.max_distance)
        return Found(positions_of(ends), rows.astype(np.int64))

    def pairs_within(self, documents: Documents) -> Found:
        later, earlier = all_pairs(len(documents.simhash))
        distances = np.bitwise_count(documents.simhash[later] ^ documents.simhash[earlier])
        near = np.flatnonzero(distances <= self.max_distance)
        return Found(later[near].astype(np.int64), earlier[near].astype(np.int64))


# All pairs of a batch compare K values each: below this many documents that beats
# hashing and sorting band keys (bench/bare_wrk.py; docs/journal.md, "Issue 11").
SMALL_MINHASH_BATCH = 16


class MinHashMatcher(TableMatcher):
    """MinHash LSH bands, every candidate verified with the signature's estimate. Holds
    the signatures every match is scored with."""

    name: Method = "minhash"
    bit = MINHASH

    index: LSHIndex

    def __init__(
        self, threshold: float, num_perm: int, exact: bool = False, whole_values: bool = True
    ) -> None:
        """``whole_values``: the index keeps each signature's whole values, which a
        collection without texts needs to search by a stored document (LSHIndex)."""
        self.threshold = threshold
        self.num_perm = num_perm
        # Verified exactly where the texts are kept: candidates from a lower estimate,
        # decided when scored (app/core/verify.py).
        self.exact = exact
        self.index = LSHIndex(threshold, num_perm, whole_values=whole_values)

    def bar(self, query: Query) -> float:
        """The MinHash threshold of a search: its min_similarity, else the collection's."""
        return search_bar(self.threshold, query.min_similarity)

    def insert(self, documents: Documents, rows: Rows) -> None:
        self.index.insert(documents.minhash, rows)

    def search_many(self, queries: Documents, query: Query) -> Found:
        threshold = candidate_threshold(self.bar(query), self.exact)
        ends, rows, _ = self.index.search_many(queries.minhash, threshold)
        return Found(positions_of(ends), rows.astype(np.int64))

    def pairs_within(self, documents: Documents) -> Found:
        # A whole band in common (what the index's tables find), then verified.
        signatures = documents.minhash
        needed = min_matches(candidate_threshold(self.threshold, self.exact), self.num_perm)
        if len(signatures) <= SMALL_MINHASH_BATCH:
            # Verified first, so that the usual batch of distinct documents needs no
            # band keys: a pair below the estimate is out whatever bands it shares, and
            # no pair reaches it when all pairs together agree less often.
            later, earlier = all_pairs(len(signatures))
            kept = kept_values(signatures)
            equal = kept[later] == kept[earlier]
            if np.count_nonzero(equal) < needed:
                return Found.none()
            verified = np.flatnonzero(np.count_nonzero(equal, axis=1) >= needed)
            if not len(verified):
                return Found.none()
            later, earlier = later[verified], earlier[verified]
            keys = self.index.band_keys(signatures)
            banded = (keys[later] == keys[earlier]).any(axis=1)
            return Found(later[banded], earlier[banded])
        later, earlier = equal_pairs(self.index.band_keys(signatures))
        passing = pair_agreements(signatures, later, signatures, earlier) >= needed
        return Found(later[passing], earlier[passing])


class NgramMatcher(_KeptMatcher):
    """Short texts (at most ngram.max_chars normalised characters) whose character q-gram
    sets have exact Jaccard at least the threshold; it answers with that Jaccard."""

    name: Method = "ngram"
    bit = NGRAM

    index: NgramIndex

    def __init__(
        self,
        threshold: float,
        size: int,
        cjk_size: int | None = None,
        same_numbers: bool = False,
    ) -> None:
        self.threshold = threshold
        self.index = NgramIndex(
            threshold=threshold, size=size, cjk_size=cjk_size, same_numbers=same_numbers
        )

    def insert(self, documents: Documents, rows: Rows) -> None:
        short, texts = _shorts(documents)
        if len(short):
            self.index.insert(texts, rows[short])

    def remove(self, rows: Rows) -> None:
        # Rows that were never short are not in the index: tombstoning them is harmless
        # (a row number is never reused) and cheaper than asking which were.
        self.index.delete(rows)

    def release(self, rows: Rows) -> None:
        # NgramIndex keeps its per-row arrays and packed texts (about 20 bytes and the
        # text's characters a short document): it has no release of its own yet.
        pass

    def search_many(self, queries: Documents, query: Query) -> Found:
        short, texts = _shorts(queries)
        if not len(short):
            return Found.none()
        # The stored prefixes answer exactly from the index's threshold up; a lower
        # min_similarity filters the other methods' matches only (as for MinHash bands).
        threshold = max(self.threshold, query.min_similarity or 0.0)
        ends, rows, similarity = self.index.search_many(
            texts, threshold, same_numbers=query.same_numbers
        )
        return Found(short[positions_of(ends)], rows.astype(np.int64), similarity)

    def pairs_within(self, documents: Documents) -> Found:
        short, texts = _shorts(documents)
        if len(short) < 2:
            return Found.none()
        # The batch's own short texts in a throw-away index: the same exact search.
        batch = NgramIndex(
            threshold=self.threshold,
            size=self.index.size,
            learn_order=False,
            cjk_size=self.index.cjk_size,
            same_numbers=self.index.same_numbers,
        )
        batch.insert(texts, np.arange(len(texts)))
        ends, others, similarity = batch.search_many(texts, self.threshold)
        at = positions_of(ends)
        earlier = others < at
        return Found(
            short[at[earlier]], short[others[earlier].astype(np.int64)], similarity[earlier]
        )

    def stored_texts(self, rows: Rows) -> list[str | None]:
        """The normalised text each row was indexed with, None for rows not in it."""
        held = self.index.holds(rows)
        return [
            self.index.text(row) if h else None for row, h in zip(rows.tolist(), held, strict=True)
        ]


def _shorts(documents: Documents) -> tuple[Rows, list[str]]:
    """Positions of the short documents of a batch, and their normalised texts."""
    if documents.shorts is None:
        return np.zeros(0, dtype=np.int64), []
    positions = [i for i, text in enumerate(documents.shorts) if text is not None]
    return np.array(positions, dtype=np.int64), [documents.shorts[i] or "" for i in positions]


def build_indexes(config: CollectionConfig) -> list[DocumentIndex]:
    """The indexes a collection's settings ask for, in the order rows enter them: MinHash
    first, because it holds the signatures any match is scored with (a row another index
    returns must have its signature already)."""
    indexes: list[DocumentIndex] = []
    if config.minhash.enabled:
        minhash = config.minhash
        indexes.append(
            MinHashMatcher(
                minhash.threshold,
                minhash.num_perm,
                config.verifies_exactly,
                whole_values=not config.keeps_text,
            )
        )
    indexes.append(ExactMatcher())
    if config.simhash.enabled:
        indexes.append(SimHashMatcher(config.simhash.max_distance))
    if config.ngram.enabled:
        ngram = config.ngram
        indexes.append(
            NgramMatcher(ngram.threshold, ngram.size, ngram.cjk_size, ngram.same_numbers)
        )
    return indexes
