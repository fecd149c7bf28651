"""Document id -> row, for the rows that are not GONE, of an embedded collection."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt
import xxhash

from app.backends.embedded.states import GONE
from app.core.paged_list import PackedStrings, PagedList
from app.core.row_array import RowArray
from app.core.saved import SavedArrays, SavedStateError, wanted

# The dict of ids named since the base was made is folded into the base (sorted by hash,
# 16 bytes an id where the dict costs ~100: a string, an int and a slot) once it holds
# this many, and 1/FOLD_FRACTION of the base.
FOLD_MIN_ENTRIES = 1 << 16
FOLD_FRACTION = 4


def id_hash(document_id: str) -> int:
    """The 64-bit hash an id is looked up by (ids of equal hash are told apart by text)."""
    return xxhash.xxh3_64_intdigest(document_id.encode("utf-8", "surrogatepass"))


def id_hashes(ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """``id_hash`` of each id; packed ids are hashed from their bytes (no string made)."""
    if isinstance(ids, PackedStrings):
        digest = xxhash.xxh3_64_intdigest
        return np.fromiter(map(digest, ids.encoded()), dtype=np.uint64, count=len(ids))
    return np.fromiter(map(id_hash, ids), dtype=np.uint64, count=len(ids))


class IdMap:
    """Which row holds each document id. Two parts: a base of (hash, row) pairs sorted by
    hash, adopted from a segment or folded from the dict (16 bytes a document and no
    Python object, where a dict costs ~100), and a dict of the ids named since. A base
    entry counts while its row is not GONE and holds that id: a document that leaves
    needs no change here, and a replaced one is found in the dict first. Costs: get O(1)
    from the dict, else O(log base) (a binary search and a decode); update O(ids); saved
    and a fold O(entries log) off the writer's lock.

    Reads take no lock (as the rows' columns): one writer, under the collection's lock."""

    def __init__(self, ids: PagedList[str], state: RowArray, hashes: RowArray) -> None:
        self._ids = ids
        self._state = state
        self._hashes = hashes  # row -> id_hash of its id, written before the row is named
        self._named: dict[str, int] = {}
        self._folding: dict[str, int] = {}  # named entries a fold is moving into the base
        # (keys, rows): one reference, so that a reader never sees one without the other.
        self._base = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))

    @overload
    def get(self, document_id: str) -> int | None: ...

    @overload
    def get(self, document_id: str, default: int) -> int: ...

    def get(self, document_id: str, default: int | None = None) -> int | None:
        row = self._named.get(document_id)
        if row is None:
            row = self._folding.get(document_id)
        if row is not None:
            return row
        keys, base_rows = self._base
        if not len(keys):
            return default
        key = np.uint64(id_hash(document_id))
        low = int(np.searchsorted(keys, key, side="left"))
        high = low
        while high < len(keys) and keys[high] == key:
            high += 1
        state = self._state.array
        for row in base_rows[low:high].tolist():
            if state[row] != GONE and self._ids[row] == document_id:
                return int(row)
        return default

    def update(self, ids: Sequence[str], rows: list[int]) -> None:
        """Name rows (their hashes are written already, their states not GONE). A batch of
        FOLD_MIN_ENTRIES or more (a start's every document, or a long replay) goes into
        the base at once, never into the dict: O(entries log) instead of ~100 bytes an
        id held until a fold (a rebuild of 1M documents peaked ~100 MB higher)."""
        if len(rows) < FOLD_MIN_ENTRIES or self._folding:
            self._named.update(zip(ids, rows, strict=True))
            return
        base = self._base[1]
        if len(base):
            base = base[self._state.array[base] != GONE]
        rows_array = np.asarray(rows, dtype=np.int64)
        self.adopt_saved(_by_hash(np.concatenate([base, rows_array]), self._hashes.array))

    def discard(self, document_id: str, row: int) -> None:
        """The row went GONE: its id no longer names it (a base entry lapses by itself)."""
        for named in (self._named, self._folding):
            if named.get(document_id) == row:
                del named[document_id]

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (id, row) held, the dict's first (tests: O(entries))."""
        named = {**self._folding, **self._named}
        yield from named.items()
        state = self._state.array
        for row in self._base[1].tolist():
            document_id = self._ids[row]
            if state[row] != GONE and document_id is not None and document_id not in named:
                yield document_id, row

    def saved(self, state: npt.NDArray[np.uint8]) -> Callable[[], SavedArrays]:
        """The entries for a segment, in two steps: this call (under the writer's lock,
        ``state`` a copy of the state column) takes the rows, O(dict); the function it
        returns sorts them by hash, O(entries log), no lock needed."""
        base_rows = self._base[1]
        base = base_rows[state[base_rows] != GONE] if len(base_rows) else None
        named = np.fromiter(
            itertools.chain(self._folding.values(), self._named.values()),
            dtype=np.int64,
            count=len(self._folding) + len(self._named),
        )
        hashes = self._hashes.saved()

        def entries() -> SavedArrays:
            return _by_hash(named if base is None else np.concatenate([base, named]), hashes)

        return entries

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take a segment's entries as the base. O(1)."""
        keys, rows = wanted(arrays, "keys"), wanted(arrays, "rows")
        if keys.dtype != np.uint64 or rows.dtype != np.int64 or keys.shape != rows.shape:
            raise SavedStateError("the id map's keys and rows do not fit together")
        self._base = (keys, rows)

    def fold_due(self) -> bool:
        """Whether the dict has grown enough to be folded into the base: FOLD_MIN_ENTRIES,
        and 1/FOLD_FRACTION of the base (each entry is then sorted again O(FOLD_FRACTION)
        times over its life)."""
        return len(self._named) >= max(FOLD_MIN_ENTRIES, len(self._base[0]) // FOLD_FRACTION)

    def begin_fold(self, state: npt.NDArray[np.uint8]) -> Callable[[], SavedArrays]:
        """Under the writer's lock (``state`` a copy of the state column): the dict's
        entries set apart, still found (a new dict takes the ids named from now on), and
        the function that sorts them with the base's, O(entries log) off the lock; its
        result goes to ``end_fold``. One fold at a time. O(dict)."""
        if self._folding:
            raise RuntimeError("a fold of the id map is under way")
        self._folding = self._named  # first: a reader that misses the new dict finds it here
        self._named = {}
        return self.saved(state)

    def end_fold(self, entries: SavedArrays) -> None:
        """Under the writer's lock: the sorted entries as the base, the dict set apart
        dropped (an entry of a row gone since lapses in the base). O(1)."""
        self.adopt_saved(entries)
        self._folding = {}  # after the base: a reader that misses it finds the new base

    def _check(self) -> None:
        keys, rows = self._base
        assert bool(np.all(keys[1:] >= keys[:-1])), "the id map's base is not sorted"
        if len(rows):
            assert bool(np.array_equal(self._hashes.array[rows], keys))


def _by_hash(rows: npt.NDArray[np.int64], hashes: npt.NDArray[np.uint64]) -> SavedArrays:
    """A base's entries: ``rows`` by their ids' hashes, the newest first among equal
    hashes (as the dict is looked in before the base, a newer row of an id is found
    before an older one not gone yet). O(rows log rows)."""
    if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])):
        rows = np.sort(rows)  # a start's rows are ascending already: no copy then
    rows = rows[::-1]
    keys = hashes[rows]
    order = np.argsort(keys, kind="stable")
    return {"keys": keys[order], "rows": rows[order]}
