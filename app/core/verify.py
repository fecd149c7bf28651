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

At most MAX_DECIDED_PER_QUERY pairs of one query, or as many as the answers it asks for
where that is more, are decided by their texts, those of the highest estimates; the
rest by the estimate at the threshold, as where no text is at hand. An answer shows a
few of them (10 by default), and a text near very many stored ones (a site's template
around little content, a notice every page repeats) would otherwise have each search
and each insert read and shingle all of their texts.

Costs: a verified pair normalises and shingles both texts once (O(characters)), sets
kept per text while a search lasts, then O((a + b) log(a + b)) to intersect them; a
query's stored texts are read in one call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from app.core import _kernels
from app.core.fingerprint import FingerprintParams, char_classes, code_points_of, seed_mix
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
# The pairs of one query decided by their texts at most (the module's docstring). Among
# 3,000 pages sharing a 400-word footer around 150 words of their own, a search by the
# footer read and shingled the ~2,500 pages' texts, 147 ms; an insert near them as much.
# Shingling a stored text costs ~25 us, so this bounds a query's decisions near 15 ms; a
# busy cluster of near-duplicates (tests/e2e/test_concurrency.py) reaches ~220 pairs
# (docs/journal.md, "Boilerplate near-duplicates").
MAX_DECIDED_PER_QUERY = 512


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
    [made] = shingle_sets([text], params)
    return made


def shingle_sets(texts: Sequence[str], params: FingerprintParams) -> list[ShingleSet]:
    """``shingle_set`` of each text, in one compiled call: the ASCII ones normalised by
    the compiled normaliser, as fingerprinting normalises them (bench/exact_minhash.py),
    the others by ``normalize``. O(total length)."""
    if not texts:
        return []
    plain = [text.isascii() for text in texts]
    ascii_at = [at for at, ascii in enumerate(plain) if ascii]
    other_at = [at for at, ascii in enumerate(plain) if not ascii]
    others = [normalize(texts[at]) for at in other_at]
    normalized, offsets = normalize_ascii([texts[at] for at in ascii_at])
    points = normalized[: offsets[-1]].astype(np.uint32)
    if others:
        points = np.concatenate((points, code_points_of("".join(others))))
        lengths = np.fromiter(map(len, others), dtype=np.int64, count=len(others))
        offsets = np.concatenate((offsets, offsets[-1] + np.cumsum(lengths)))
    hashes = np.empty(len(points), dtype=np.uint64)
    bounds = np.empty(len(offsets), dtype=np.int64)
    _kernels.distinct_shingles(
        points,
        offsets,
        (params.unit == "word", params.size, np.uint64(seed_mix(params.seed))),
        char_classes(),
        hashes,
        bounds,
    )
    hashes = hashes[: bounds[-1]].copy()  # the sets share one exact-size array
    made = [hashes[start:end] for start, end in itertools.pairwise(bounds.tolist())]
    sets: list[ShingleSet] = [made[0]] * len(texts)
    for position, at in enumerate(ascii_at + other_at):  # the order they were made in
        sets[at] = made[position]
    return sets


def set_jaccard(a: ShingleSet, b: ShingleSet) -> float:
    """Exact Jaccard of two sorted sets of distinct hashes (1 for two empty ones), by
    ``_kernels.set_jaccards``, the rule of every pair decided. O(a + b)."""
    out = np.empty(1, dtype=np.float64)
    one = np.zeros(1, dtype=np.int64)
    _kernels.set_jaccards(
        (a, np.array([0, len(a)], dtype=np.int64), one),
        (b, np.array([0, len(b)], dtype=np.int64), one),
        out,
    )
    return float(out[0])


def unsure_pairs(methods: npt.NDArray[np.uint8], agree: Rows, bar: float, num_perm: int) -> Rows:
    """Positions of the pairs the exact Jaccard decides: found by MinHash with an
    estimate below ``bar`` + UNCERTAIN."""
    found = (methods & MINHASH) != 0
    return np.flatnonzero(found & (agree < (bar + UNCERTAIN) * num_perm))


def highest_per_query(queries: Rows, agree: Rows, most: int) -> Rows:
    """Indexes of the pairs (``queries[i]``, ``agree[i]``: a pair's query and its equal
    signature values) that are among the ``most`` highest estimates of their query, in
    order (ties: the earlier pair). O(n log n), O(n) when none has more than ``most``."""
    if len(agree) <= most:
        return np.arange(len(agree))
    order = np.lexsort((-np.asarray(agree, dtype=np.int64), queries))
    grouped = np.asarray(queries)[order]
    starts = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
    sizes = np.diff(np.append(starts, len(order)))
    rank = np.arange(len(order)) - np.repeat(starts, sizes)
    return np.sort(order[rank < most])


TextsOf = Callable[[list[int]], Sequence[str | None]]


class ShingleSets:
    """Shingle sets of texts looked up by a key (a query position, a stored row), made
    once each while it lives. ``texts_of`` reads the texts of several keys at once (None
    where a text is not kept)."""

    def __init__(self, params: FingerprintParams, texts_of: TextsOf) -> None:
        self._params = params
        self._texts_of = texts_of
        self._sets: dict[int, ShingleSet | None] = {}

    def fill(self, keys: list[int]) -> None:
        """Make the sets of the keys not made yet, their texts read in one call."""
        missing = [key for key in dict.fromkeys(keys) if key not in self._sets]
        if not missing:
            return
        texts = self._texts_of(missing)
        held = [(key, text) for key, text in zip(missing, texts, strict=True) if text is not None]
        made = shingle_sets([text for _, text in held], self._params)
        self._sets.update((key, None) for key in missing)
        self._sets.update((key, one) for (key, _), one in zip(held, made, strict=True))

    def packed(self, keys: list[int]) -> tuple[ShingleSet, Rows, Rows]:
        """The sets of ``keys`` (made already) end to end, as ``_kernels.set_jaccards``
        takes them: (values, bounds, the set of each key, -1 where it has none). O(total
        size)."""
        order = {key: at for at, key in enumerate(dict.fromkeys(keys))}
        held = [self._sets[key] for key in order]
        sizes = [0 if one is None else len(one) for one in held]
        bounds = np.array([0, *itertools.accumulate(sizes)], dtype=np.int64)
        values = np.concatenate([one for one in held if one is not None] or [_NO_SET])
        number = np.array([-1 if one is None else at for at, one in enumerate(held)])
        at = number[[order[key] for key in keys]] if keys else np.zeros(0, dtype=np.int64)
        return values, bounds, at.astype(np.int64)


_NO_SET = np.zeros(0, dtype=np.uint64)


class ExactMinHash:
    """The MinHash decision of a search's pairs at threshold ``bar`` (the collection's,
    or a search's min_similarity): the queries' shingle sets from ``queries``, the
    stored documents' from ``stored`` (both ShingleSets; a batch's own pairs: one for
    both); at most ``most`` pairs of a query by their texts."""

    def __init__(
        self,
        bar: float,
        num_perm: int,
        queries: ShingleSets,
        stored: ShingleSets,
        most: int = MAX_DECIDED_PER_QUERY,
    ) -> None:
        self.bar = bar
        self.num_perm = num_perm
        self._queries = queries
        self._stored = stored
        self.most = most

    def jaccard(self, positions: Rows, rows: Rows) -> tuple[Floats, npt.NDArray[np.bool_]]:
        """(exact Jaccard of each (query position, stored row) pair, NaN where a text is
        not at hand; whether the stored text of each pair is missing where the query's is
        at hand). O(pairs x set size), in one compiled call."""
        query_keys, stored_keys = positions.tolist(), rows.tolist()
        self._queries.fill(query_keys)
        self._stored.fill(stored_keys)
        queries, stored = self._queries.packed(query_keys), self._stored.packed(stored_keys)
        out = np.empty(len(rows), dtype=np.float64)
        _kernels.set_jaccards(queries, stored, out)  # one compiled call for every pair
        return out, (queries[2] >= 0) & (stored[2] < 0)

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
        query text or past a query's ``most`` highest, by the estimate at the bar);
        the exact Jaccard, where made, is the similarity (the n-gram index's q-gram
        Jaccard where that is higher). A pair whose stored text is gone (deleted
        meanwhile) gets no methods: it is no match."""
        unsure = unsure_pairs(methods, agree, self.bar, self.num_perm)
        if not len(unsure):
            return methods, similarity
        exact = np.full(len(unsure), np.nan)
        gone = np.zeros(len(unsure), dtype=np.bool_)
        decided = highest_per_query(positions[unsure], agree[unsure], self.most)
        exact[decided], gone[decided] = self.jaccard(
            positions[unsure[decided]], rows[unsure[decided]]
        )
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


def _no_texts(keys: list[int]) -> list[str | None]:
    return [None] * len(keys)


def _by_position(texts: Sequence[str | None]) -> TextsOf:
    return lambda keys: [texts[key] for key in keys]


def exact_minhash(
    params: FingerprintParams,
    bar: float,
    queries: Sequence[str | None] | None,
    stored_texts: TextsOf | None = None,
    answers: int = 0,
) -> ExactMinHash:
    """The exact decision of a search at ``bar`` whose queries' texts are ``queries``
    (None: none at hand, the estimate decides at the bar) against stored texts by rows
    (``stored_texts``; None: the queries' own, for the pairs within a batch), asking for
    ``answers`` matches a query (its limit). Always a decision: a search that took
    candidates from below the bar must have them decided."""
    query_sets = ShingleSets(params, _no_texts if queries is None else _by_position(queries))
    stored = query_sets if stored_texts is None else ShingleSets(params, stored_texts)
    most = max(MAX_DECIDED_PER_QUERY, answers)
    return ExactMinHash(bar, params.num_perm, query_sets, stored, most)
