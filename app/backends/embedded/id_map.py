"""Document id -> row, for the rows that are not GONE, of an embedded collection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import overload

import numpy as np
import numpy.typing as npt
import xxhash

from app.backends.embedded.states import GONE
from app.core.paged_list import PagedList
from app.core.row_array import RowArray
from app.core.saved import SavedArrays, SavedStateError, wanted


def id_hash(document_id: str) -> int:
    """The 64-bit hash an id is looked up by (ids of equal hash are told apart by text)."""
    return xxhash.xxh3_64_intdigest(document_id.encode("utf-8", "surrogatepass"))


def id_hashes(ids: list[str]) -> npt.NDArray[np.uint64]:
    return np.fromiter(map(id_hash, ids), dtype=np.uint64, count=len(ids))


class IdMap:
    """Which row holds each document id. Two parts: a base of (hash, row) pairs sorted by
    hash, adopted from a segment (16 bytes a document and no Python object, where a dict
    costs ~100), and a dict of the ids named since. A base entry counts while its row is
    not GONE and holds that id: a document that leaves needs no change here, and a
    replaced one is found in the dict first. Costs: get O(1) from the dict, else
    O(log base) (a binary search and a decode); update O(ids); saved O(entries log)
    off the writer's lock.

    Reads take no lock (as the rows' columns): one writer, under the collection's lock."""

    def __init__(self, ids: PagedList[str], state: RowArray, hashes: RowArray) -> None:
        self._ids = ids
        self._state = state
        self._hashes = hashes  # row -> id_hash of its id, written before the row is named
        self._named: dict[str, int] = {}
        self._base_keys = np.zeros(0, dtype=np.uint64)
        self._base_rows = np.zeros(0, dtype=np.int64)

    @overload
    def get(self, document_id: str) -> int | None: ...

    @overload
    def get(self, document_id: str, default: int) -> int: ...

    def get(self, document_id: str, default: int | None = None) -> int | None:
        row = self._named.get(document_id)
        if row is not None:
            return row
        keys = self._base_keys
        if not len(keys):
            return default
        key = np.uint64(id_hash(document_id))
        low = int(np.searchsorted(keys, key, side="left"))
        high = low
        while high < len(keys) and keys[high] == key:
            high += 1
        state = self._state.array
        for row in self._base_rows[low:high].tolist():
            if state[row] != GONE and self._ids[row] == document_id:
                return int(row)
        return default

    def update(self, ids: list[str], rows: list[int]) -> None:
        """Name rows (their hashes are written already)."""
        self._named.update(zip(ids, rows, strict=True))

    def discard(self, document_id: str, row: int) -> None:
        """The row went GONE: its id no longer names it (a base entry lapses by itself)."""
        if self._named.get(document_id) == row:
            del self._named[document_id]

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (id, row) held, the dict's first (tests: O(entries))."""
        yield from self._named.items()
        named = self._named
        state = self._state.array
        for row in self._base_rows.tolist():
            document_id = self._ids[row]
            if state[row] != GONE and document_id is not None and document_id not in named:
                yield document_id, row

    def saved(self, state: npt.NDArray[np.uint8]) -> Callable[[], SavedArrays]:
        """The entries for a segment, in two steps: this call (under the writer's lock,
        ``state`` a copy of the state column) takes the rows, O(dict); the function it
        returns sorts them by hash, O(entries log), no lock needed."""
        base = self._base_rows[state[self._base_rows] != GONE] if len(self._base_rows) else None
        named = np.fromiter(self._named.values(), dtype=np.int64, count=len(self._named))
        hashes = self._hashes.saved()

        def entries() -> SavedArrays:
            rows = named if base is None else np.concatenate([base, named])
            keys = hashes[rows]
            order = np.argsort(keys, kind="stable")
            return {"keys": keys[order], "rows": rows[order]}

        return entries

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's entries as the base. O(1)."""
        keys, rows = wanted(arrays, "keys"), wanted(arrays, "rows")
        if keys.dtype != np.uint64 or rows.dtype != np.int64 or keys.shape != rows.shape:
            raise SavedStateError("the id map's keys and rows do not fit together")
        self._base_keys, self._base_rows = keys, rows

    def _check(self) -> None:
        keys = self._base_keys
        assert bool(np.all(keys[1:] >= keys[:-1])), "the id map's base is not sorted"
        if len(self._base_rows):
            assert bool(np.array_equal(self._hashes.array[self._base_rows], keys))
