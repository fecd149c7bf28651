"""The indexes of an embedded collection and its matching: texts to fingerprints, every
index searched at once for a batch, what they found combined and scored by the shared
rule (app/core/rule.py), and merge scheduling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.embedded.passages import PassageSearch
from app.backends.embedded.visibility import Visibility
from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints
from app.core.methods import METHODS_OF_BITS
from app.core.row_array import RowArray
from app.core.rule import Pairs, Part, combined, pairs_within_batch, score
from app.core.saved import SavedArrays, nested, part
from app.core.types import Backlog, Rows
from app.errors import InvalidDocument
from app.service.indexes import ExactMatcher, Found, MinHashMatcher, NgramMatcher, build_indexes
from app.service.types import Query
from app.storage.base import DocumentBatch

# A merge is due once an index holds this many tombstones, or an eighth of the documents
# (evictions alone, with no inserts to fill the buffer, must still free the tables).
TOMBSTONE_MERGE_MIN = 65_536


def _part(found: Found, bit: int) -> Part:
    """What one index found, as the rule's Part."""
    return found.positions, found.rows, bit, found.similarity


class Matcher:
    """Every index of a collection through one interface (app/service/indexes.py); two
    are also kept by kind for what only they hold: the exact hashes and the MinHash
    signatures. Reads take no lock (the indexes give consistent snapshots)."""

    def __init__(
        self,
        config: CollectionConfig,
        visibility: Visibility,
        simhash_of: RowArray,
        texts_of: Callable[[list[int]], list[str | None]] = lambda rows: [None] * len(rows),
    ) -> None:
        """``visibility``: the rows a search may return; ``simhash_of``: the rows' SimHash
        column; ``texts_of``: the kept texts of rows (None where not kept), read when
        verified."""
        self._config = config
        self._visibility = visibility
        self._simhash_of = simhash_of
        self.num_perm = config.minhash.num_perm if config.minhash.enabled else 0
        self.indexes = build_indexes(config)
        # Shared passages: a relation, not a near-duplicate method (not among indexes).
        self.passages = (
            PassageSearch(config.passages, texts_of) if config.passages.enabled else None
        )
        self._exact = next(i for i in self.indexes if isinstance(i, ExactMatcher)).index
        self.lsh = next((i.index for i in self.indexes if isinstance(i, MinHashMatcher)), None)
        self._texts_of = texts_of
        self._ngram = next((i for i in self.indexes if isinstance(i, NgramMatcher)), None)
        self.merges = 0

    # ------------------------------------------------------------------ fingerprints

    def fingerprint(self, texts: Sequence[str]) -> Fingerprints:
        fingerprints, kept = self.fingerprint_nonempty(texts)
        if len(kept) < len(texts):
            raise InvalidDocument("text is empty after normalisation")
        return fingerprints

    def fingerprint_nonempty(
        self, texts: Sequence[str]
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        """Fingerprints of the texts not empty once normalised, and their positions."""
        return self._config.fingerprints(list(texts))

    def stored(self, rows: Rows, simhashes: npt.NDArray[np.uint64]) -> Fingerprints:
        """The fingerprints of indexed rows (``simhashes``: theirs). Where the MinHash
        index keeps only the bits verification compares, the signatures come from the
        rows' texts, fingerprinted again (such a collection keeps them): a search needs
        the whole values for its band keys. O(rows), plus that fingerprinting."""
        shorts = self._ngram.stored_texts(rows) if self._ngram is not None else None
        verifies = self._config.verifies_exactly
        again = self.lsh is not None and not self.lsh.whole_values
        texts = self._texts_of(rows.tolist()) if verifies or again else None
        if again and texts is not None:
            signatures = self._config.fingerprints([text or "" for text in texts])[0].minhash
        else:
            signatures = self._signatures(rows)
        return Fingerprints(
            simhashes, signatures, self._exact.hashes(rows), shorts, texts if verifies else None
        )

    def _signatures(self, rows: Rows) -> npt.NDArray[np.unsignedinteger]:
        if self.lsh is not None:
            return self.lsh.signatures(rows)
        return np.zeros((len(rows), 0), dtype=np.uint32)

    def same_text(self, row: int, exact: npt.NDArray[np.uint64]) -> bool:
        """Whether a row's text is this one (equal once normalised)."""
        return bool((self._exact.hashes(np.array([row]))[0] == exact).all())

    def methods_holding(self, row: int) -> tuple[Any, ...]:
        """The methods whose index holds a row (the n-gram index: short texts only)."""
        bits = 0
        for index in self.indexes:
            if index.name != "ngram" or self._ngram_holds(row):
                bits |= index.bit
        return METHODS_OF_BITS[bits]

    def _ngram_holds(self, row: int) -> bool:
        return self._ngram is not None and self._ngram.stored_texts(np.array([row]))[0] is not None

    # ------------------------------------------------------------------ matching

    def match(
        self,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        stamps: npt.NDArray[np.int64] | None = None,
        horizon: int | None = None,
    ) -> Pairs:
        """Every visible indexed document matching each of a batch of documents, by any
        method: one batched search per index, filtered (Visibility.mask: retention,
        since / until, with ``stamps``, the times of the batch's documents, the match
        window, and with a ``horizon``, a read's, what was shown before it), then scored
        (the SimHash column read after the search: a publish meanwhile may have grown
        it)."""
        found = [_part(index.search_many(fingerprints, query), index.bit) for index in self.indexes]
        if not any(len(part[1]) for part in found):
            return Pairs.empty()  # the usual answer for a new text: nothing to score
        positions, rows, methods, exact_similarity = combined(found)
        keep = self._visibility.mask(
            rows, query, None if stamps is None else stamps[positions], horizon
        )
        if exclude is not None:
            keep &= rows != exclude[positions]
        if not keep.all():
            positions, rows = positions[keep], rows[keep]
            methods, exact_similarity = methods[keep], exact_similarity[keep]
            if not len(rows):
                return Pairs.empty()
        return score(
            self.num_perm,
            fingerprints,
            positions,
            rows,
            methods,
            self._simhash_of.array[rows],
            # Read in place: a copy of 1,000 stored ones has 1,000 pairs of 128 values.
            (
                self.lsh.agreements_with(fingerprints.minhash, positions, rows)
                if self.lsh is not None
                else None
            ),
            rows,  # rows are in insertion order: the lower, the older
            exact_similarity,
            query.min_similarity,
            self._config.minhash_decision(
                query.min_similarity,
                fingerprints.texts if query.exact_minhash else None,
                self._texts_of,
                query.limit,
            ),
        )

    def match_within(
        self,
        fingerprints: Fingerprints,
        stamps: npt.NDArray[np.int64],
        window: int | None,
        query: Query,
    ) -> Pairs:
        """Pairs (later position, earlier position) of one batch matching by the rules the
        indexes apply (the shared rule's pairs_within_batch)."""
        found = [_part(index.pairs_within(fingerprints), index.bit) for index in self.indexes]
        return pairs_within_batch(
            found,
            fingerprints,
            stamps,
            self.num_perm,
            window,
            query.since,
            query.until,
            self._config.minhash_decision(None, fingerprints.texts),
        )

    # ------------------------------------------------------------------ rows in and out

    def insert(self, batch: DocumentBatch, rows: Rows) -> None:
        for index in self.indexes:  # MinHash first: it holds the signatures
            index.insert(batch, rows)
        if self.passages is not None:
            self.passages.insert(batch.texts, rows, batch.metadata)

    def remove(self, rows: Rows) -> None:
        """Tombstones: no index returns the rows from now on."""
        for index in self._every_index():
            index.remove(rows)

    def _every_index(self) -> list[Any]:
        """The near-duplicate indexes and the passage index: what merges and reports."""
        return [*self.indexes, self.passages] if self.passages is not None else self.indexes

    def release(self, rows: Rows) -> None:
        for index in self.indexes:
            index.release(rows)

    # ------------------------------------------------------------------ merges

    def merge(self, *, force: bool, below: int, documents: int) -> bool:
        """Merge every index whose buffer or tombstones have grown enough (all with
        ``force``); rows below ``below`` are gone from all of them."""
        merged = False
        for index in self._every_index():
            if force or self._index_needs_merge(index, documents):
                merged = index.merge(below) or merged
        if merged:
            self.merges += 1
        return merged

    def _index_needs_merge(self, index: Any, documents: int) -> bool:
        if index.needs_merge():
            return True
        tombstones: int = index.backlog().tombstones
        return tombstones >= max(TOMBSTONE_MERGE_MIN, documents // 8)

    def needs_merge(self, documents: int) -> bool:
        return any(self._index_needs_merge(index, documents) for index in self._every_index())

    def backlogs(self) -> dict[str, Backlog]:
        """Per index (exact, simhash, minhash, ngram, passage): entries not merged yet,
        tombstones."""
        return {index.name: index.backlog() for index in self._every_index()}

    def memory_bytes(self) -> int:
        return sum(index.memory_bytes() for index in self._every_index())

    # ------------------------------------------------------------------ segments

    def saved_arrays(self) -> SavedArrays:
        """Every index's arrays, each under its name (a segment's contents)."""
        arrays: SavedArrays = {}
        for index in self._every_index():
            arrays.update(nested(index.name, index.saved_arrays()))
        return arrays

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's arrays as the indexes' (all empty); SavedStateError where
        they do not fit."""
        for index in self._every_index():
            index.adopt_saved(part(arrays, index.name))

    def _check(self) -> None:
        """Assert every index's invariants (tests, ``neardup check``)."""
        for index in self._every_index():
            index.index._check()

    def indexed(self) -> int:
        """Rows indexed and not removed (the exact index holds every document)."""
        return len(self._exact)

    def holds(self, rows: Rows) -> bool:
        """Whether every row was indexed (the exact index holds every document)."""
        return bool(self._exact.holds(rows).all())
