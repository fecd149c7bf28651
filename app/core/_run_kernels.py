"""Compiled loops of the sorted runs every index keeps (numba, nogil: they run beside
merges and writers): binary searches, the directory of a run's top key bits and lookups
through it, prefetches, and the merges of two runs.

The layout they work on is SortedTable's (sorted_table.py): per run, keys and rows of
shape (lanes, n), each lane sorted; plus an unsorted tail. ``deleted`` marks tombstoned
rows; a row past its end (inserted after the reader's copy of it) counts as live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, cast

import numpy as np
from llvmlite import ir  # type: ignore[import-untyped]
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from app.core._shared_kernels import (
    first_above,
    first_at_least,
    gallop,
    key_bits,
)

_U64 = np.uint64
Scalar: TypeAlias = int | np.integer[Any]


@intrinsic
def _prefetch(typingctx: Any, array: Any, row: Any, column: Any) -> Any:
    """prefetch(array, i, j): start fetching the cache line of 2-D array[i, j] into every
    cache level (llvm.prefetch: no bounds check, never faults). A loop of these issues
    many independent misses at once, where loads would wait for each other."""
    if not (isinstance(array, types.Array) and array.ndim == 2):
        return None
    if not (isinstance(row, types.Integer) and isinstance(column, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        indices = [
            context.cast(builder, value, kind, types.intp)
            for value, kind in zip(args[1:], signature.args[1:], strict=True)
        ]
        pointer = cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
            context, builder, array_type, view, indices, wraparound=False
        )
        byte_pointer = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        function = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, word, word, word]),
            "llvm.prefetch.p0",
        )
        # read (0), keep in every cache level (3), data cache (1)
        builder.call(function, [builder.bitcast(pointer, byte_pointer), word(0), word(3), word(1)])
        return context.get_dummy_value()

    return types.void(array, row, column), codegen


# As compiled code calls it (the intrinsic's Python signature has the typing context first).
prefetch = cast(Callable[[np.ndarray, Scalar, Scalar], None], _prefetch)


@njit(cache=True, nogil=True, inline="always")
def is_deleted(row: Scalar, deleted: np.ndarray) -> bool:
    return bool(row < deleted.shape[0] and deleted[row])


@njit(cache=True, nogil=True, inline="always")
def lower_bound(keys: np.ndarray, value: np.uint64) -> int:
    """First index whose key is >= value."""
    return first_at_least(keys, 0, keys.shape[0], value)


@njit(cache=True, nogil=True, inline="always")
def upper_bound(keys: np.ndarray, value: np.uint64) -> int:
    """First index whose key is > value."""
    return first_above(keys, 0, keys.shape[0], value)


_COUNTED_BUCKET = 64  # buckets of at most this many keys are counted, not halved


@njit(cache=True, nogil=True, inline="always")
def bucket_shift(directory: np.ndarray, keys: np.ndarray) -> np.uint64:
    """The shift that takes a key of ``keys``' type (64 or 32 bits) to its bucket in
    ``directory`` ((lanes, 2^bits + 1)): width - bits. A directory's size follows its
    run's (sorted_table.directory_bits)."""
    buckets = directory.shape[directory.ndim - 1] - 1
    bits = 0
    while (1 << bits) < buckets:
        bits += 1
    return _U64(key_bits(keys) - bits)


@njit(cache=True, nogil=True)
def build_directory(keys: np.ndarray, directory: np.ndarray) -> None:
    """Fill ``directory`` ((lanes, 2^bits + 1)): per lane, where each value of the keys'
    top bits starts (the last entry: the lane's length). One pass over the keys:
    O(L (n + 2^bits))."""
    lanes, size = keys.shape
    buckets = directory.shape[1] - 1
    shift = bucket_shift(directory, keys)
    for lane in range(lanes):
        bucket = 0
        for i in range(size):
            top = np.int64(keys[lane, i] >> shift)
            while bucket <= top:
                directory[lane, bucket] = i
                bucket += 1
        while bucket <= buckets:
            directory[lane, bucket] = size
            bucket += 1


@njit(cache=True, nogil=True)
def extended_directory(directory: np.ndarray, added_keys: np.ndarray, extended: np.ndarray) -> None:
    """The directory of a run merged from the run of ``directory`` and the sorted keys
    ``added_keys`` (lanes, m), nothing dropped: each bucket's start moves by the added
    keys in the buckets before it, into ``extended`` (its shape). O(L (m + 2^bits)), where
    a rebuild reads every key."""
    lanes, size = directory.shape
    shift = bucket_shift(directory, added_keys)
    before = np.empty(size, dtype=np.int64)
    for lane in range(lanes):
        before[:] = 0
        for i in range(added_keys.shape[1]):
            before[np.int64(added_keys[lane, i] >> shift) + 1] += 1
        running = 0
        for bucket in range(size):
            running += before[bucket]
            extended[lane, bucket] = directory[lane, bucket] + running


@njit(cache=True, nogil=True, inline="always")
def directed_bounds(
    keys: np.ndarray, directory: np.ndarray, shift: np.uint64, low: np.uint64, high: np.uint64
) -> tuple[int, int]:
    """(first index with key >= low, first index with key > high), through the lane's
    directory when it has one (only the bucket of each bound is searched)."""
    if directory.shape[0] == 0:
        return lower_bound(keys, low), upper_bound(keys, high)
    low_bucket = np.int64(low >> shift)
    high_bucket = np.int64(high >> shift)
    first = first_at_least(keys, directory[low_bucket], directory[low_bucket + 1], low)
    last = first_above(keys, directory[high_bucket], directory[high_bucket + 1], high)
    return first, last


@njit(cache=True, nogil=True, inline="always")
def bucket_lower_bound(
    keys: np.ndarray, directory: np.ndarray, shift: np.uint64, key: np.uint64
) -> int:
    """The first index of a lane whose key is >= ``key``, searched only in the key's
    directory bucket (8-16 keys: two cache lines, which ``prefetch_bucket`` fetched
    ahead): the keys below it counted, where a binary search's branches mispredict
    (bench.passages --lookups: 139 against 183 ns a key in main and buffer)."""
    bucket = np.int64(key >> shift)
    base = directory[bucket]
    count = directory[bucket + 1] - base
    if count <= _COUNTED_BUCKET:  # the keys below counted: no branch on the keys
        below = 0
        for i in range(base, base + count):
            below += keys[i] < key
        return int(base + below)
    while count > 1:  # a crowded bucket (a key many rows hold): halved
        half = count >> 1
        if keys[base + half - 1] < key:
            base += half
        count -= half
    if count == 1 and keys[base] < key:
        base += 1
    return int(base)


@njit(cache=True, nogil=True, inline="always")
def prefetch_bucket(
    keys: np.ndarray, directory: np.ndarray, lane: int, shift: np.uint64, key: np.uint64
) -> None:
    """Start fetching the lines of ``key``'s bucket (its directory entry must be near)."""
    bucket = np.int64(key >> shift)
    low, high = directory[lane, bucket], directory[lane, bucket + 1]
    prefetch(keys, lane, low)
    prefetch(keys, lane, (low + high) >> 1)
    prefetch(keys, lane, high - 1)


@njit(cache=True, nogil=True, inline="always")
def bucket_guess(
    directory: np.ndarray, lane: int, shift: np.uint64, key: np.uint64
) -> tuple[int, int, int]:
    """(guess, low, high): ``key``'s bucket [low, high) in the lane's directory, and
    where in it the key lies if the bucket's keys are uniform (they are hashes): an
    interpolation that lands on the key or next to it, one line of keys instead of a
    binary search's chain of misses."""
    bucket = np.int64(key >> shift)
    low, high = directory[lane, bucket], directory[lane, bucket + 1]
    fraction = (_U64(key) << (_U64(64) - shift)) >> _U64(32)  # the key's next 32 bits
    return low + np.int64((fraction * _U64(high - low)) >> _U64(32)), low, high


@njit(cache=True, nogil=True)
def kept_entries(first_rows: np.ndarray, second_rows: np.ndarray, dropped: np.ndarray) -> int:
    """Entries of two runs whose rows ``dropped`` does not mark: a merge's length."""
    kept = 0
    for i in range(first_rows.shape[1]):
        if not is_deleted(first_rows[0, i], dropped):
            kept += 1
    for i in range(second_rows.shape[1]):
        if not is_deleted(second_rows[0, i], dropped):
            kept += 1
    return kept


@njit(cache=True, nogil=True)
def merge_sorted_lanes(first: tuple, second: tuple, dropped: np.ndarray, out: tuple) -> None:  # type: ignore[type-arg]
    """Merge two runs, (keys, rows) each, lane by lane into ``out`` ((lanes,
    kept_entries) each: the caller allocates them, so that numpy's large arrays are
    backed by huge pages), leaving out rows marked in ``dropped``. O(L (n + m))."""
    first_keys, first_rows = first
    second_keys, second_rows = second
    out_keys, out_rows = out
    if dropped.shape[0] == 0:
        if first_keys.shape[1] >= _BLOCK_RATIO * second_keys.shape[1]:
            _merge_blocks(first, second, out)
        else:
            _merge_branchless(first, second, out)
        return
    lanes = first_keys.shape[0]
    n, m = first_keys.shape[1], second_keys.shape[1]
    for lane in range(lanes):
        i = j = at = 0
        while i < n or j < m:
            take_first = j >= m or (i < n and first_keys[lane, i] <= second_keys[lane, j])
            if take_first:
                key, row = first_keys[lane, i], first_rows[lane, i]
                i += 1
            else:
                key, row = second_keys[lane, j], second_rows[lane, j]
                j += 1
            if not is_deleted(row, dropped):
                out_keys[lane, at] = key
                out_rows[lane, at] = row
                at += 1


_LAST_KEY = _U64(0xFFFFFFFFFFFFFFFF)
# A run this many times longer than the other is merged by block copies (_merge_blocks);
# closer in size, the blocks are short and an entry-by-entry merge whose choice is a
# conditional move, not a branch, is faster (docs/journal.md, issue 26: "Merges").
_BLOCK_RATIO = 64


@njit(cache=True, nogil=True)
def _merge_branchless(first: tuple, second: tuple, out: tuple) -> None:  # type: ignore[type-arg]
    """``merge_sorted_lanes`` with nothing dropped, one entry a step (equal keys: the
    first run's go first). O(L (n + m))."""
    (first_keys, first_rows), (second_keys, second_rows), (out_keys, out_rows) = first, second, out
    lanes, n, m = first_keys.shape[0], first_keys.shape[1], second_keys.shape[1]
    for lane in range(lanes):
        keys, rows = first_keys[lane], first_rows[lane]
        other_keys, other_rows = second_keys[lane], second_rows[lane]
        merged_keys, merged_rows = out_keys[lane], out_rows[lane]
        i = j = at = 0
        while i < n and j < m:
            key, other = keys[i], other_keys[j]
            take_other = other < key
            merged_keys[at] = other if take_other else key
            merged_rows[at] = other_rows[j] if take_other else rows[i]
            j += take_other
            i += not take_other
            at += 1
        merged_keys[at : at + n - i] = keys[i:]
        merged_rows[at : at + n - i] = rows[i:]
        at += n - i
        merged_keys[at:] = other_keys[j:]
        merged_rows[at:] = other_rows[j:]


@njit(cache=True, nogil=True)
def _merge_blocks(first: tuple, second: tuple, out: tuple) -> None:  # type: ignore[type-arg]
    """``merge_sorted_lanes`` with nothing dropped: for each entry of the second run, the
    entries of the first up to it (equal keys first) are found by galloping and copied
    as one block, so merging a small run into a large one is a few block copies, not a
    branch an entry. O(L (n + m log(n / m)))."""
    (first_keys, first_rows), (second_keys, second_rows), (out_keys, out_rows) = first, second, out
    lanes, n, m = first_keys.shape[0], first_keys.shape[1], second_keys.shape[1]
    for lane in range(lanes):
        keys, rows = first_keys[lane], first_rows[lane]
        merged_keys, merged_rows = out_keys[lane], out_rows[lane]
        i = at = 0
        for j in range(m):
            key = second_keys[lane, j]
            # Past the first run's keys <= key (equal keys: the first run's go first).
            end = gallop(keys, i, n, i, key + _U64(1)) if key < _LAST_KEY else n
            merged_keys[at : at + end - i] = keys[i:end]
            merged_rows[at : at + end - i] = rows[i:end]
            at += end - i
            i = end
            merged_keys[at], merged_rows[at] = key, second_rows[lane, j]
            at += 1
        merged_keys[at:] = keys[i:]
        merged_rows[at:] = rows[i:]
