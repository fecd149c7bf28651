"""MinHash verified exactly where the texts are at hand: one rule for every backend and
``neardup dedup``.

A MinHash estimate of Jaccard J from K = 128 values has a standard deviation of
sqrt(J (1 - J) / K), 0.035 at J = 0.8: pairs a little above the threshold are missed
and pairs a little below it are found (the Reuters replay: 8 of its 9 misses and 13 of
its 20 false positives, docs/evaluation-http.md). Where a collection keeps its texts
(``CollectionConfig.keeps_text``), the estimate only says which pairs to look at:

- the LSH search takes candidates whose estimate reaches the threshold less UNCERTAIN;
- a candidate whose estimate is below the threshold plus UNCERTAIN is decided by the
  exact Jaccard of the two texts' shingle sets (the shingles MinHash hashed), which is
  then its similarity;
- one above it is decided by the estimate, as before: a pair that far above the
  threshold is under it with a probability of about 1e-5 (4.2 standard deviations),
  and the usual match (a copy, estimate 1) costs no text.

Where a text is not at hand (a collection that keeps none), the estimate decides, as
it always did. The n-gram index's exact q-gram Jaccard (short texts) is another method
and keeps its own answer.

Costs: a verified pair normalises and shingles both texts once (O(characters)), sets
kept per text while a search lasts, then O((a + b) log(a + b)) to intersect them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from app.core.fingerprint import FingerprintParams, shingle_hashes
from app.core.fingerprint import _normalize_ascii as normalize_ascii
from app.core.lsh import min_matches
from app.core.methods import MINHASH
from app.core.text import normalize
from app.core.types import Floats, Rows

ShingleSet = npt.NDArray[np.uint64]
# Half the width of the band of estimates around the threshold where the exact Jaccard
# decides: 4.2 standard deviations of a 128-value estimate at J = 0.8.
UNCERTAIN = 0.15
# Floating point slack on J >= threshold: 45 / 57 compared with 0.8 must not flip.
_SLACK = 1e-9


def search_bar(threshold: float, min_similarity: float | None) -> float:
    """The MinHash threshold of a search: its min_similarity, else the collection's."""
    return threshold if min_similarity is None else min_similarity


def candidate_threshold(threshold: float, exact: bool) -> float:
    """The estimate a MinHash candidate needs to be looked at: the threshold, or with
    exact verification UNCERTAIN below it."""
    return max(0.0, threshold - UNCERTAIN) if exact else threshold


def shingle_set(text: str, params: FingerprintParams) -> ShingleSet:
    """The distinct shingle hashes of a text as sent (normalised here), sorted: the set
    MinHash estimates the Jaccard of."""
    if text.isascii():  # compiled, as fingerprinting normalises ASCII (bench/exact_minhash.py)
        data, offsets = normalize_ascii([text])
        normalized = data[: offsets[1]].tobytes().decode("ascii")
    else:
        normalized = normalize(text)
    if not normalized:
        return np.zeros(0, dtype=np.uint64)
    # Sorted, then the repeats masked: np.unique costs 8 times as much on 500 values.
    hashes = np.sort(shingle_hashes(normalized, params))
    distinct = np.ones(len(hashes), dtype=np.bool_)
    np.not_equal(hashes[1:], hashes[:-1], out=distinct[1:])
    return hashes[distinct]


def set_jaccard(a: ShingleSet, b: ShingleSet) -> float:
    """Exact Jaccard of two sorted sets of distinct hashes. O(a log b)."""
    if not len(a) and not len(b):
        return 1.0
    if not len(a) or not len(b):
        return 0.0
    at = np.minimum(np.searchsorted(b, a), len(b) - 1)
    shared = int(np.count_nonzero(b[at] == a))
    return shared / (len(a) + len(b) - shared)


def unsure_pairs(methods: npt.NDArray[np.uint8], agree: Rows, bar: float, num_perm: int) -> Rows:
    """Positions of the pairs the exact Jaccard decides: found by MinHash with an
    estimate below ``bar`` + UNCERTAIN."""
    found = (methods & MINHASH) != 0
    return np.flatnonzero(found & (agree < (bar + UNCERTAIN) * num_perm))


class ShingleSets:
    """Shingle sets of texts looked up by a key (a query position, a stored row), made
    once each while it lives. ``text_of`` answers None where the text is not kept."""

    def __init__(self, params: FingerprintParams, text_of: Callable[[int], str | None]) -> None:
        self._params = params
        self._text_of = text_of
        self._sets: dict[int, ShingleSet | None] = {}

    def get(self, key: int) -> ShingleSet | None:
        if key not in self._sets:
            text = self._text_of(key)
            self._sets[key] = None if text is None else shingle_set(text, self._params)
        return self._sets[key]


class ExactMinHash:
    """The MinHash decision of a search's pairs at threshold ``bar`` (the collection's,
    or a search's min_similarity): the queries' shingle sets from ``queries``, the
    stored documents' from ``stored`` (both ShingleSets; a batch's own pairs: one for
    both)."""

    def __init__(self, bar: float, num_perm: int, queries: ShingleSets, stored: ShingleSets):
        self.bar = bar
        self.num_perm = num_perm
        self._queries = queries
        self._stored = stored

    def jaccard(self, positions: Rows, rows: Rows) -> tuple[Floats, npt.NDArray[np.bool_]]:
        """(exact Jaccard of each (query position, stored row) pair, NaN where a text is
        not at hand; whether the stored text of each pair is missing where the query's is
        at hand)."""
        out = np.full(len(rows), np.nan)
        gone = np.zeros(len(rows), dtype=np.bool_)
        for i, (position, row) in enumerate(zip(positions.tolist(), rows.tolist(), strict=True)):
            query, stored = self._queries.get(position), self._stored.get(row)
            if query is not None and stored is not None:
                out[i] = set_jaccard(query, stored)
            gone[i] = query is not None and stored is None
        return out, gone

    def decide(
        self,
        positions: Rows,
        rows: Rows,
        methods: npt.NDArray[np.uint8],
        agree: Rows,
        similarity: Floats,
        ngram_similarity: Floats,
    ) -> tuple[npt.NDArray[np.uint8], Floats]:
        """(methods, similarity) with the MinHash bit decided as the module says: kept by
        an estimate of at least bar + UNCERTAIN, else by the exact Jaccard (or, with no
        query text, by the estimate at the bar); the exact Jaccard, where made, is the
        similarity (the n-gram index's q-gram Jaccard where that is higher). A pair whose
        stored text is gone (deleted meanwhile) gets no methods: it is no match."""
        unsure = unsure_pairs(methods, agree, self.bar, self.num_perm)
        if not len(unsure):
            return methods, similarity
        exact, gone = self.jaccard(positions[unsure], rows[unsure])
        known = ~np.isnan(exact)
        passed = np.where(
            known, exact >= self.bar - _SLACK, agree[unsure] >= min_matches(self.bar, self.num_perm)
        )
        methods = methods.copy()
        methods[unsure[~passed]] &= np.uint8(~MINHASH & 0xFF)
        # A stored text missing where texts are kept: its document was deleted while the
        # search ran (its row still in an index, its text let go). It is no answer: its
        # estimate is not the similarity a search before or after would give.
        methods[unsure[gone]] = 0
        similarity = similarity.copy()
        made = unsure[known]
        similarity[made] = np.round(np.fmax(exact[known], ngram_similarity[made]), 6)
        return methods, similarity


def exact_minhash(
    params: FingerprintParams,
    bar: float,
    queries: Sequence[str | None] | None,
    stored_text: Callable[[int], str | None] | None = None,
) -> ExactMinHash:
    """The exact decision of a search at ``bar`` whose queries' texts are ``queries``
    (None: none at hand, the estimate decides at the bar) against stored texts by row
    (``stored_text``; None: the queries' own, for the pairs within a batch). Always a
    decision: a search that took candidates from below the bar must have them decided."""
    query_sets = ShingleSets(params, (lambda _: None) if queries is None else queries.__getitem__)
    stored = query_sets if stored_text is None else ShingleSets(params, stored_text)
    return ExactMinHash(bar, params.num_perm, query_sets, stored)
