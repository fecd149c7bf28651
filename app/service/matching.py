"""Matches of a batch of queries as columns (Pairs), and the method bits they carry."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core._index_kernels import merge_found
from app.core.types import Rows
from app.errors import InvalidParameter
from app.service.types import Method, Query

METHOD_ORDER: tuple[Method, ...] = ("exact", "simhash", "minhash", "ngram")
EXACT, SIMHASH, MINHASH, NGRAM = 1, 2, 4, 8
# Method bits -> the methods named in a Match, in the contract's order.
METHODS_OF_BITS: tuple[tuple[Method, ...], ...] = tuple(
    tuple(method for bit, method in zip((1, 2, 4, 8), METHOD_ORDER, strict=True) if bits & bit)
    for bits in range(16)
)


# Batches up to this size find their pairs by comparing every pair: below it that beats
# sorting keys (single inserts gathered by a loop turn are batches of a few documents).
SMALL_BATCH = 64


@functools.lru_cache(maxsize=SMALL_BATCH + 1)
def all_pairs(count: int) -> tuple[Rows, Rows]:
    """(later, earlier) of every pair of ``count`` positions, read-only and cached:
    np.tril_indices costs ~10 us a call, more than comparing the pairs of a few documents.
    O(count^2) memory once per count."""
    later, earlier = np.tril_indices(count, -1)
    pairs = (later.astype(np.int64), earlier.astype(np.int64))
    for array in pairs:
        array.flags.writeable = False
    return pairs


def equal_pairs(keys: npt.NDArray[np.uint64]) -> tuple[Rows, Rows]:
    """(later, earlier) rows of an (m, lanes) key matrix equal in some lane, each pair
    once per lane it shares. One sort of all keys: equal ones end up side by side."""
    count = keys.shape[0]
    flat = keys.T.ravel()  # lane by lane, so that the lane is position // count
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    repeats = np.flatnonzero(ordered[1:] == ordered[:-1])
    later: list[int] = []
    earlier: list[int] = []
    # Rare (only documents of the batch alike): a Python loop over the runs of equal keys.
    starts = [at for at in repeats.tolist() if at == 0 or ordered[at - 1] != ordered[at]]
    for start in starts:
        end = start + 1
        while end < len(ordered) and ordered[end] == ordered[start]:
            end += 1
        members = order[start:end]
        for i, first in enumerate(members.tolist()):
            for second in members[i + 1 :].tolist():
                if first // count == second // count:  # the same lane
                    later.append(max(first, second) % count)
                    earlier.append(min(first, second) % count)
    return np.array(later, dtype=np.int64), np.array(earlier, dtype=np.int64)


def positions_of(ends: Rows) -> Rows:
    """Query position of each result of a batched search answering (ends, results):
    query i's results are [ends[i-1], ends[i]). O(len(ends) + results)."""
    total = int(ends[-1]) if len(ends) else 0
    if len(ends) <= 1 or total == 0:  # one query, or the usual answer: nothing found
        return np.zeros(total, dtype=np.int64)
    counts = np.empty(len(ends), dtype=np.int64)
    counts[0] = ends[0]
    np.subtract(ends[1:], ends[:-1], out=counts[1:])  # np.diff(prepend=) costs ~10 us
    return np.repeat(np.arange(len(ends), dtype=np.int64), counts)


@dataclass(frozen=True, slots=True)
class Pairs:
    """Matches of a batch of queries as columns, sorted by query position and then best
    first: highest similarity, nearest SimHash, oldest row."""

    positions: Rows
    rows: Rows
    methods: npt.NDArray[np.uint8]
    similarity: npt.NDArray[np.float64]
    distances: Rows

    @staticmethod
    def empty() -> Pairs:
        none = np.zeros(0, dtype=np.int64)
        return Pairs(none, none, np.zeros(0, np.uint8), np.zeros(0), none)

    def span(self, position: int) -> tuple[int, int]:
        """[start, end) of the matches of query ``position``."""
        start = int(np.searchsorted(self.positions, position, "left"))
        return start, int(np.searchsorted(self.positions, position, "right"))

    def spans(self, count: int) -> list[tuple[int, int]]:
        """[start, end) of the matches of each of queries 0 .. count - 1."""
        bounds = np.searchsorted(self.positions, np.arange(count + 1), "left").tolist()
        return list(itertools.pairwise(bounds))

    def sorted(self) -> Pairs:
        order = np.lexsort((self.rows, self.distances, -self.similarity, self.positions))
        return Pairs(
            self.positions[order],
            self.rows[order],
            self.methods[order],
            self.similarity[order],
            self.distances[order],
        )


def check_range(since: int | None, until: int | None) -> None:
    if since is not None and until is not None and since > until:
        raise InvalidParameter("since must not be later than until")


def check_query(query: Query, max_distance: int) -> None:
    """A search's options against the collection's SimHash distance (both backends)."""
    if query.max_distance is not None and not 0 <= query.max_distance <= max_distance:
        raise InvalidParameter(
            f"max_distance must be between 0 and the collection's max_distance "
            f"{max_distance}, not {query.max_distance}"
        )
    if query.min_similarity is not None and not 0.0 <= query.min_similarity <= 1.0:
        raise InvalidParameter(f"min_similarity must be 0 to 1, not {query.min_similarity}")
    if query.limit < 1:
        raise InvalidParameter(f"limit must be at least 1, not {query.limit}")
    check_range(query.since, query.until)


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
