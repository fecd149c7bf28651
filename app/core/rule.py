"""The match rule, once, for every backend and ``neardup dedup``: the method bits a match
carries, the pairs within a batch, the combining of what several methods found, and the
score and order of matches (``Pairs``).

A pair matches when any method finds it: the exact hash equal, the SimHash Hamming
distance at most k, a MinHash band in common and the Jaccard verified (the estimate; near
the threshold, where the texts are kept, the exact Jaccard of their shingles:
app/core/verify.py), or (two short texts) the exact q-gram Jaccard at the n-gram
threshold. Its similarity is that Jaccard (exact where the texts decided), or the exact
q-gram Jaccard where the n-gram index found the pair and that is higher; with MinHash
off, that Jaccard where there is one, else 1 - distance / 64; six decimals. Matches of
a query are best first: similarity, then the nearer SimHash, then the older document.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core._index_kernels import merge_found, pairs_in_runs
from app.core.fingerprint import Fingerprints
from app.core.lsh import pair_agreements
from app.core.types import Floats, Rows
from app.core.verify import ExactMinHash

# Batches up to this size find their pairs by comparing every pair: below it that beats
# sorting keys (single inserts gathered by a loop turn are batches of a few documents).
SMALL_BATCH = 64


@functools.lru_cache(maxsize=SMALL_BATCH + 1)
def all_pairs(count: int) -> tuple[Rows, Rows]:
    """(later, earlier) of every pair of ``count`` positions, read-only and cached:
    np.tril_indices costs more a call than comparing the pairs of a few documents.
    O(count^2) memory once per count."""
    later, earlier = np.tril_indices(count, -1)
    pairs = (later.astype(np.int64), earlier.astype(np.int64))
    for array in pairs:
        array.flags.writeable = False
    return pairs


def equal_pairs(keys: npt.NDArray[np.uint64]) -> tuple[Rows, Rows]:
    """(later, earlier) rows of an (m, lanes) key matrix equal in some lane, each pair
    once, ordered by (later, earlier). One sort of all keys, lane by lane (equal ones end
    up side by side), then one compiled pass over the runs, a pair made in the first lane
    it is equal in. O(k log k + pairs x lanes): a batch of 1,000 copies has 499,500 pairs
    (a Python loop over them, each once a lane, took 16 s)."""
    count = keys.shape[0]
    flat = keys.T.ravel()  # lane by lane, so that the lane is position // count
    order = np.argsort(flat, kind="stable")  # within a key: by lane, then position
    ordered = flat[order]
    lane = order // count
    starts = np.flatnonzero(
        np.concatenate(([True], (ordered[1:] != ordered[:-1]) | (lane[1:] != lane[:-1])))
    )
    sizes = np.diff(np.append(starts, len(order)))
    shared = sizes > 1
    if not shared.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    members = (order % count)[np.repeat(shared, sizes)].astype(np.int64)
    run_bounds = np.concatenate(([0], np.cumsum(sizes[shared]))).astype(np.int64)
    run_lanes = lane[starts[shared]].astype(np.int64)
    codes = np.sort(pairs_in_runs(np.ascontiguousarray(keys), members, run_bounds, run_lanes))
    return codes // count, codes % count


def positions_of(ends: Rows) -> Rows:
    """Query position of each result of a batched search answering (ends, results):
    query i's results are [ends[i-1], ends[i]). O(len(ends) + results)."""
    total = int(ends[-1]) if len(ends) else 0
    if len(ends) <= 1 or total == 0:  # one query, or the usual answer: nothing found
        return np.zeros(total, dtype=np.int64)
    counts = np.empty(len(ends), dtype=np.int64)
    counts[0] = ends[0]
    np.subtract(ends[1:], ends[:-1], out=counts[1:])  # np.diff(prepend=) allocates twice
    return np.repeat(np.arange(len(ends), dtype=np.int64), counts)


@dataclass(frozen=True, slots=True)
class Pairs:
    """Matches of a batch of queries as columns, sorted by query position and then best
    first: highest similarity, nearest SimHash, oldest (lowest ``ages``). ``rows`` are
    where the matched documents are (an index row, a store's row, or a batch's own
    position); ``ages`` order them by age (the embedded rows themselves, a Redis
    document's sequence number)."""

    positions: Rows
    rows: Rows
    methods: npt.NDArray[np.uint8]
    similarity: Floats
    distances: Rows
    ages: Rows

    @staticmethod
    def empty() -> Pairs:
        none = np.zeros(0, dtype=np.int64)
        return Pairs(none, none, np.zeros(0, np.uint8), np.zeros(0), none, none)

    def __len__(self) -> int:
        return len(self.rows)

    def span(self, position: int) -> tuple[int, int]:
        """[start, end) of the matches of query ``position``."""
        start = int(np.searchsorted(self.positions, position, "left"))
        return start, int(np.searchsorted(self.positions, position, "right"))

    def spans(self, count: int) -> list[tuple[int, int]]:
        """[start, end) of the matches of each of queries 0 .. count - 1."""
        bounds = np.searchsorted(self.positions, np.arange(count + 1), "left").tolist()
        return list(itertools.pairwise(bounds))

    def select(self, keep: npt.NDArray[np.bool_] | Rows) -> Pairs:
        return Pairs(
            self.positions[keep],
            self.rows[keep],
            self.methods[keep],
            self.similarity[keep],
            self.distances[keep],
            self.ages[keep],
        )

    def sorted(self) -> Pairs:
        """By position, then best first: similarity, nearer SimHash, older."""
        return self.select(
            np.lexsort((self.ages, self.distances, -self.similarity, self.positions))
        )


def merge_methods(
    positions: Rows, rows: Rows, bits: npt.NDArray[np.uint8], known: npt.NDArray[np.float64]
) -> tuple[Rows, Rows, npt.NDArray[np.uint8], npt.NDArray[np.float64]]:
    """(positions, rows, method bits, exact similarity or NaN): each (position, row) found
    by any method once, with the bits of every method that found it and the highest exact
    similarity known for it, in (position, row) order. O(n log n) in the pairs, one
    compiled call."""
    merged: tuple[Rows, Rows, npt.NDArray[np.uint8], npt.NDArray[np.float64]] = merge_found(
        np.asarray(positions, dtype=np.int64),
        np.asarray(rows, dtype=np.int64),
        np.asarray(bits, dtype=np.uint8),
        np.asarray(known, dtype=np.float64),
    )
    return merged


# What one method found: (positions, rows, its bit, the exact similarity of each pair, or
# None where the method knows none).
Part = tuple[Rows, Rows, int, "Floats | None"]


def combined(parts: Sequence[Part]) -> tuple[Rows, Rows, npt.NDArray[np.uint8], Floats]:
    """(positions, rows, method bits, exact similarity or NaN): each (position, row) found
    by any method once, with the bits of every method that found it."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.uint8), np.zeros(0)
    positions = np.concatenate([p for p, _, _, _ in parts]).astype(np.int64)
    rows = np.concatenate([r for _, r, _, _ in parts]).astype(np.int64)
    lengths = [len(r) for _, r, _, _ in parts]
    # One repeat and one fill, not an array a part: a search's parts hold a few pairs.
    bits = np.repeat(np.array([bit for _, _, bit, _ in parts], dtype=np.uint8), lengths)
    known = np.full(len(rows), np.nan)
    at = 0
    for (_, _, _, similarity), length in zip(parts, lengths, strict=True):
        if similarity is not None:
            known[at : at + length] = similarity
        at += length
    return merge_methods(positions, rows, bits, known)


def similarity_of(
    num_perm: int, agree: Rows | None, distances: Rows, exact_similarity: Floats
) -> Floats:
    """The similarity a match reports (the module's docstring), six decimals: ``agree``
    the equal values of the two MinHash signatures (None with MinHash off),
    ``exact_similarity`` the n-gram index's exact Jaccard or NaN."""
    if num_perm and agree is not None:
        # A short text's few word shingles make the estimate coarse: the exact q-gram
        # Jaccard wins where that index found the pair and it is higher.
        similarity = np.fmax(agree / num_perm, exact_similarity)
    else:
        estimate = 1.0 - distances / 64.0
        similarity = np.where(np.isnan(exact_similarity), estimate, exact_similarity)
    rounded: Floats = np.asarray(np.round(similarity, 6), dtype=np.float64)
    return rounded


def score(
    num_perm: int,
    queries: Fingerprints,
    positions: Rows,
    rows: Rows,
    methods: npt.NDArray[np.uint8],
    simhashes: npt.NDArray[np.uint64],
    agree: Rows | None,
    ages: Rows,
    exact_similarity: Floats,
    min_similarity: float | None = None,
    minhash: ExactMinHash | None = None,
) -> Pairs:
    """The pairs (query ``positions``, matched ``rows`` with their ``simhashes``, the
    signatures' agreements ``agree`` (``lsh.agreements``; None with MinHash off) and
    ``ages``) scored and sorted, those under ``min_similarity`` left out; with
    ``minhash``, the MinHash bit decided by it and pairs left with no method dropped.
    O(pairs log pairs) to sort."""
    distances = np.bitwise_count(simhashes ^ queries.simhash[positions]).astype(np.int64)
    similarity = similarity_of(num_perm, agree, distances, exact_similarity)
    pairs = Pairs(positions, rows, methods, similarity, distances, ages)
    if minhash is not None and agree is not None and len(pairs):
        decided, similarity = minhash.decide(
            positions, rows, methods, agree, similarity, exact_similarity
        )
        if decided is not methods:  # some pair was decided anew (most searches: none)
            pairs = Pairs(positions, rows, decided, similarity, distances, ages)
            pairs = pairs.select(decided != 0)
    if min_similarity is not None:
        pairs = pairs.select(pairs.similarity >= min_similarity)
    return pairs.sorted()


def in_time(stamps: Rows, since: int | None, until: int | None) -> npt.NDArray[np.bool_]:
    """Which of the times are from ``since`` to ``until`` (both included; None: open)."""
    keep = np.ones(len(stamps), dtype=np.bool_)
    if since is not None:
        keep &= stamps >= since
    if until is not None:
        keep &= stamps <= until
    return keep


def pairs_within_batch(
    parts: Sequence[Part],
    queries: Fingerprints,
    stamps: Rows,
    num_perm: int,
    window: int | None,
    since: int | None,
    until: int | None,
    minhash: ExactMinHash | None = None,
) -> Pairs:
    """Pairs (later position, earlier position) of one batch that match by what each
    method found within it (``parts``), the earlier document within since / until and
    within the match ``window`` of the later one's time: a batch answers as the same
    documents inserted one by one would. Within a batch the earlier is the older."""
    found = [part for part in parts if len(part[1])]
    if not found:
        return Pairs.empty()  # the usual batch: documents unlike each other
    later, earlier, methods, exact_similarity = combined(found)
    keep = in_time(stamps[earlier], since, until)
    if window is not None:
        keep &= np.abs(stamps[later] - stamps[earlier]) <= window
    if not keep.all():
        later, earlier = later[keep], earlier[keep]
        methods, exact_similarity = methods[keep], exact_similarity[keep]
    return score(
        num_perm,
        queries,
        later,
        earlier,
        methods,
        queries.simhash[earlier],
        # Counted pair by pair: a batch of copies has 499,500 pairs of 128 values each.
        pair_agreements(queries.minhash, later, queries.minhash, earlier) if num_perm else None,
        earlier,
        exact_similarity,
        minhash=minhash,
    )
