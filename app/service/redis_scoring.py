"""Matches of the Redis backend as columns, scored by the embedded service's rule
(Collection._scored): the same similarities, Hamming distances, methods and order."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.fingerprint import Fingerprints
from app.core.types import Rows
from app.redis_store.store import Floats
from app.service.matching import merge_methods


def in_range(stamps: npt.NDArray[np.int64], since: int | None, until: int | None) -> Any:
    keep = np.ones(len(stamps), dtype=np.bool_)
    if since is not None:
        keep &= stamps >= since
    if until is not None:
        keep &= stamps <= until
    return keep


@dataclass(slots=True)
class Scored:
    """Matches as columns: query position, key (a row of the store, or a batch's
    document), method bits, similarity, Hamming distance, age (seq: lower is older)."""

    positions: Rows
    keys: Rows
    bits: npt.NDArray[np.uint8]
    similarity: npt.NDArray[np.float64]
    distances: Rows
    ages: Rows

    @staticmethod
    def empty() -> Scored:
        none = np.zeros(0, dtype=np.int64)
        return Scored(none, none, np.zeros(0, np.uint8), np.zeros(0), none, none)

    def sorted(self) -> Scored:
        """By position, then best first: similarity, nearer SimHash, older."""
        order = np.lexsort((self.ages, self.distances, -self.similarity, self.positions))
        return Scored(
            self.positions[order],
            self.keys[order],
            self.bits[order],
            self.similarity[order],
            self.distances[order],
            self.ages[order],
        )

    def spans(self, count: int) -> list[tuple[int, int]]:
        bounds = np.searchsorted(self.positions, np.arange(count + 1), "left").tolist()
        return list(itertools.pairwise(bounds))


# A method's pairs: (positions, keys, bit, exact similarity of each pair or None).
Part = tuple[Rows, Rows, int, "npt.NDArray[np.float64] | None"]


def combined(parts: list[Part]) -> tuple[Rows, Rows, npt.NDArray[np.uint8], Floats]:
    """(positions, keys, method bits, exact similarity or NaN): each (position, key)
    once, with every method's bit (as Collection's combined)."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.uint8), np.zeros(0)
    positions = np.concatenate([p for p, _, _, _ in parts]).astype(np.int64)
    keys = np.concatenate([k for _, k, _, _ in parts]).astype(np.int64)
    bits = np.concatenate([np.full(len(k), bit, np.uint8) for _, k, bit, _ in parts])
    known = np.concatenate([np.full(len(k), np.nan) if s is None else s for _, k, _, s in parts])
    return merge_methods(positions, keys, bits, known)


def score(
    num_perm: int,
    queries: Fingerprints,
    positions: Rows,
    keys: Rows,
    bits: npt.NDArray[np.uint8],
    simhashes: npt.NDArray[np.uint64],
    signatures: npt.NDArray[np.uint32],
    ages: Rows,
    min_similarity: float | None,
    exact_similarity: Floats,
) -> Scored:
    """The embedded service's scores (Collection.scored): the MinHash estimate, or the
    n-gram index's exact Jaccard where it found the pair and that is higher; with
    MinHash off, that Jaccard where there is one, else 1 - distance / 64; 6 decimals."""
    distances = np.bitwise_count(simhashes ^ queries.simhash[positions]).astype(np.int64)
    if num_perm:
        agree = np.count_nonzero(signatures == queries.minhash[positions], axis=1)
        similarity = np.fmax(agree / num_perm, exact_similarity)
    else:
        estimate = 1.0 - distances / 64.0
        similarity = np.where(np.isnan(exact_similarity), estimate, exact_similarity)
    similarity = np.round(similarity, 6)
    scored = Scored(positions, keys, bits, similarity, distances, ages)
    if min_similarity is not None:
        keep = similarity >= min_similarity
        scored = Scored(
            positions[keep], keys[keep], bits[keep], similarity[keep], distances[keep], ages[keep]
        )
    return scored.sorted()
