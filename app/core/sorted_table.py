"""SortedTable: uint64 keys in sorted arrays plus an insert buffer, merged off the query path.

A table has L *lanes*: every entry (a row number) has one key per lane and each lane is
sorted on its own, so one table serves the k+1 permutation tables of a HammingIndex or
the b bands of an LSHIndex. The entries live in four places, newest last::

    main    sorted per lane, the bulk of the entries           (rebuilt by merge)
    middle  sorted per lane: full buffers promoted by inserts, until a merge folds it
            (with the buffer) into main; while that merge runs, the run it is folding
    buffer  sorted per lane, every entry since the last promotion or merge began
    tail    unsorted, at most ``tail_capacity`` entries (TAIL_CAPACITY unless the table
            was made with another), appended in place

A reader takes ``snapshot()``, one immutable object, and searches all four; an entry
inserted before the snapshot was taken is in exactly one of them, also in the middle of a
merge. Writers build new arrays and publish a new snapshot with one reference assignment
(atomic in CPython), so readers never lock and never wait for a merge.

Costs, for N entries in main, M in middle, B in buffer and L lanes: insert of m entries
O(L (B + m log m)) once per TAIL_CAPACITY single inserts (amortised O(L B / 256)), and a
promotion O(L (M + B)) once the buffer holds promotion_due(N); lookup O(L log N +
TAIL_CAPACITY); merge O(L (N + M + B)) off the query path once middle and buffer hold
merge_due(N). An index that stores many entries per row (the n-gram index: about 20)
gives its table a larger tail, so that a full tail still holds a few hundred single
inserts.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from app.core import _index_kernels as kernels
from app.core import _run_kernels as run_kernels
from app.core._shared_kernels import uniform_order
from app.core.saved import SavedArrays, SavedStateError, wanted

# Single inserts go to an unsorted tail scanned linearly by every query: 256 entries is a
# scan of a few hundred nanoseconds per lane, and folding it into the sorted buffer costs
# O(L B) once per 256 inserts instead of once per insert (bench/index.py).
TAIL_CAPACITY = 256
# Middle and buffer are merged into main when they hold MERGE_MIN_ENTRIES or
# 1/MERGE_FRACTION of main, whichever is larger: main's entries are then copied
# O(MERGE_FRACTION) times by merges over their life.
MERGE_MIN_ENTRIES = 65_536
MERGE_FRACTION = 8
# Each insert batch copies the buffer, so a buffer of up to main/8 entries copies each
# entry ~(main/8) / (2 batch) times: ~250 at 110M entries (the passage index of 1M 3 KB
# texts, batches of ~28,000 entries). A buffer promoted into the middle level once it
# holds sqrt(PROMOTION_BATCH * merge_due) balances the copies of the buffer by batches
# against those of the middle by promotions: at 110M entries ~17 + ~7 + ~8 (main) copies
# an entry instead of ~100 with the buffer alone merged at sqrt(2^17 main)
# (bench/passages.py --service). A table with one entry a document and lane (bands,
# permutation tables) reaches its merge first below some 2M documents.
PROMOTION_BATCH = 1 << 16


def merge_due(main: int) -> int:
    """Entries outside main (middle, buffer, tail) at which a merge folds them in."""
    return max(MERGE_MIN_ENTRIES, main // MERGE_FRACTION)


def promotion_due(main: int) -> int | None:
    """Buffer entries at which an insert promotes the buffer into the middle level; None
    where a promotion would not save copies (the buffer reaches the merge first)."""
    due = max(MERGE_MIN_ENTRIES, math.isqrt(PROMOTION_BATCH * merge_due(main)))
    return due if 2 * due <= merge_due(main) else None


# Runs of at least MIN_DIRECTORY_ENTRIES get a directory on the top bits of each key, 8-16
# keys a bucket (directory_bits): a lookup reads the bucket's entry and the bucket's two
# lines, both fetched ahead while earlier keys are looked up, where a binary search over
# millions of keys waits on a chain of ~20 misses (bench/passages.py --lookups;
# docs/journal.md, "Issue 26"). It costs 0.5-1 byte an entry (8 bytes a bucket).
MIN_DIRECTORY_ENTRIES = 1 << 16
DIRECTORY_KEYS_A_BUCKET_BITS = 4  # between 2^3 and 2^4 keys a bucket
MAX_DIRECTORY_BITS = 30
_NO_DIRECTORY = np.zeros((0, 0), dtype=np.int64)
_NO_CAPPED = np.zeros(0, dtype=np.bool_)  # lookup_equal_many recording no capped key
_NO_CAP = 1 << 62  # lookup_equal_many without a cap on the rows a key may hold
_NO_DELETED = np.zeros(0, dtype=np.bool_)
_ONE_KEY = np.zeros(1, dtype=np.int64)  # the order of a single key


def directory_bits(entries: int) -> int:
    """The top bits a run of ``entries`` keys is bucketed on: 8-16 keys a bucket."""
    return min(MAX_DIRECTORY_BITS, entries.bit_length() - DIRECTORY_KEYS_A_BUCKET_BITS)


# uint64 keys; a table of hashes that verification decides anyway may keep their top 32
# bits (``key_type``), half the bytes a key: a rare false hit only adds a candidate.
KeyMatrix = npt.NDArray[np.unsignedinteger[Any]]
KeyType: TypeAlias = type[np.uint64] | type[np.uint32]
RowVector = npt.NDArray[np.int32]
RowMatrix = npt.NDArray[np.int32]
Directory = npt.NDArray[np.int64]
# The sorted runs as the search kernels take them, one argument: main, middle and buffer
# (keys, rows, directory each), then the tail's keys, rows and count.
KernelArrays: TypeAlias = tuple[
    KeyMatrix, RowMatrix, Directory, KeyMatrix, RowMatrix, Directory,
    KeyMatrix, RowMatrix, Directory, KeyMatrix, RowVector, int,
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Run:
    """Entries sorted per lane: keys[lane] ascending, rows[lane] the row of each key."""

    keys: KeyMatrix  # (lanes, n) uint64 (or uint32)
    rows: RowMatrix  # (lanes, n) int32
    # (lanes, 2^directory_bits(n) + 1): where each value of a key's top bits starts, so a
    # lookup binary-searches a few entries instead of the whole lane; (lanes, 0) if none.
    directory: Directory = field(default_factory=lambda: _NO_DIRECTORY)

    @staticmethod
    def empty(lanes: int, key_type: KeyType = np.uint64) -> Run:
        return Run(np.empty((lanes, 0), key_type), np.empty((lanes, 0), np.int32))

    def __len__(self) -> int:
        return int(self.keys.shape[1])


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """Everything a reader needs, immutable once published (the tail only grows past count)."""

    main: Run
    middle: Run
    buffer: Run
    tail_keys: KeyMatrix  # (lanes, tail capacity); columns [:tail_count] are valid
    tail_rows: RowVector  # (tail capacity,)
    tail_count: int

    def __len__(self) -> int:
        return len(self.main) + len(self.middle) + len(self.buffer) + self.tail_count

    def kernel_arrays(self) -> KernelArrays:
        """The runs as the search kernels take them (``KernelArrays``): one tuple, so
        that every kernel walking them takes the same argument."""
        return (
            self.main.keys,
            self.main.rows,
            self.main.directory,
            self.middle.keys,
            self.middle.rows,
            self.middle.directory,
            self.buffer.keys,
            self.buffer.rows,
            self.buffer.directory,
            self.tail_keys,
            self.tail_rows,
            self.tail_count,
        )


# Runs of at least this many entries are sorted lane by lane: one lane's order (8 bytes
# an entry) at a time instead of every lane's, and no transposed copy of the keys (a
# restart's one batch of all documents: the band table's 16 lanes).
LANE_BY_LANE_ENTRIES = 1 << 16


def sort_run(keys: KeyMatrix, rows: npt.NDArray[np.integer], *, uniform: bool = False) -> Run:
    """A Run from unsorted keys (lanes, m) (a view of another layout will do) and their
    rows (m,); ``uniform``: one lane of keys spread evenly over uint64, sorted by their
    top bits in O(m) (``uniform_order``). O(L m log m); beside the run it makes, at
    most one lane's order (8 bytes an entry) when m is large."""
    rows = np.asarray(rows, dtype=np.int32)
    lanes, count = keys.shape
    if uniform and lanes == 1:
        only = np.ascontiguousarray(keys[0])
        spread_order = uniform_order(only)
        return Run(only[spread_order].reshape(1, -1), rows[spread_order].reshape(1, -1))
    # The order of equal keys does not matter to any lookup: the faster unstable sort.
    if count < LANE_BY_LANE_ENTRIES:
        order = np.argsort(keys, axis=1)
        sorted_keys = np.take_along_axis(keys, order, axis=1)
        return Run(np.ascontiguousarray(sorted_keys), np.ascontiguousarray(rows[order]))
    sorted_keys = np.empty((lanes, count), dtype=keys.dtype)
    sorted_rows = np.empty((lanes, count), dtype=np.int32)
    for lane in range(lanes):
        lane_order = np.argsort(keys[lane])
        np.take(keys[lane], lane_order, out=sorted_keys[lane])
        np.take(rows, lane_order, out=sorted_rows[lane])
    return Run(sorted_keys, sorted_rows)


def as_keys(keys: npt.ArrayLike, key_type: KeyType) -> KeyMatrix:
    """Keys as a table of ``key_type`` keeps them: uint64 from any integers; uint32 only
    as given (a wider key cast would keep its low bits, where such a table keeps the top
    ones: ``top_halves``)."""
    if key_type is np.uint64:
        return np.asarray(keys, dtype=np.uint64)
    array = np.asarray(keys)
    if array.dtype != key_type:
        raise ValueError(f"keys of {array.dtype}, where the table keeps {np.dtype(key_type)}")
    return array


def top_halves(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint32]:
    """The top 32 bits of each key, as a uint32 table keeps a uint64 key (the order of
    the keys is kept: equal keys stay equal, sorted ones sorted). O(n)."""
    return (keys >> np.uint64(32)).astype(np.uint32)


def _has_directory_of(run: Run, bits: int) -> bool:
    """Whether the run carries a directory on ``bits`` top bits."""
    return bool(run.directory.shape[0]) and run.directory.shape[1] == (1 << bits) + 1


def with_directory(run: Run) -> Run:
    """The run with a directory of its lanes when it is large enough to pay off (and
    none when it is not). O(L (n + buckets)); the run itself when its directory fits."""
    if len(run) < MIN_DIRECTORY_ENTRIES:
        return run if not run.directory.shape[0] else Run(run.keys, run.rows)
    bits = directory_bits(len(run))
    if _has_directory_of(run, bits):
        return run
    directory = np.empty((run.keys.shape[0], (1 << bits) + 1), dtype=np.int64)
    run_kernels.build_directory(run.keys, directory)
    return Run(run.keys, run.rows, directory)


def merge_runs(first: Run, second: Run, dropped: npt.NDArray[np.bool_] | None = None) -> Run:
    """One Run with the entries of both, without rows marked in ``dropped``, with its
    directory when it is large enough. O(L (n + m)); O(1) when one is empty and nothing
    is dropped: the other itself (runs are never written once made), so that a
    restart's one large batch is not copied again by the buffer and by the merge that
    follows it. The directory of a merge that drops nothing is the first run's, moved by
    the second's keys (O(L (m + buckets))), while the run stays in its number of buckets."""
    if dropped is None and not len(second):
        return with_directory(first)
    if dropped is None and not len(first):
        return with_directory(second)
    drop = np.zeros(0, dtype=np.bool_) if dropped is None else dropped
    lanes = first.keys.shape[0]
    if first.keys.dtype != second.keys.dtype:
        raise ValueError(f"runs of {first.keys.dtype} and {second.keys.dtype} keys")
    size = len(first) + len(second)
    if dropped is not None:
        size = run_kernels.kept_entries(first.rows, second.rows, drop)
    # Allocated by numpy, which backs large arrays with huge pages (numba does not): fewer
    # TLB misses a lookup (bench/passages.py --lookups; docs/journal.md, "Issue 26").
    keys = np.empty((lanes, size), dtype=first.keys.dtype)
    rows = np.empty((lanes, size), dtype=np.int32)
    run_kernels.merge_sorted_lanes(
        (first.keys, first.rows), (second.keys, second.rows), drop, (keys, rows)
    )
    if (
        dropped is None
        and size >= MIN_DIRECTORY_ENTRIES
        and _has_directory_of(first, directory_bits(size))
    ):
        directory = np.empty_like(first.directory)
        run_kernels.extended_directory(first.directory, second.keys, directory)
        return Run(keys, rows, directory)
    return with_directory(Run(keys, rows))


def _rows_in_range(run: Run, lane: int, bounds: KeyMatrix) -> RowVector:
    keys = run.keys[lane]
    start = int(np.searchsorted(keys, bounds[0], "left"))
    end = int(np.searchsorted(keys, bounds[1], "right"))
    return run.rows[lane, start:end]


def _named_runs(state: TableSnapshot) -> tuple[tuple[str, Run], ...]:
    return (("main", state.main), ("middle", state.middle), ("buffer", state.buffer))


def _checked_run(
    lanes: int, key_type: KeyType, keys: KeyMatrix, rows: RowMatrix, directory: Directory
) -> Run:
    """A run of saved arrays, if they make one of this table's: SavedStateError if not (a
    segment of 64-bit keys where the table now keeps 32: the start rebuilds it)."""
    if keys.dtype != key_type or rows.dtype != np.int32 or directory.dtype != np.int64:
        raise SavedStateError(
            f"a saved run of {keys.dtype} keys and {rows.dtype} rows, not"
            f" {np.dtype(key_type)} and int32"
        )
    if keys.ndim != 2 or keys.shape[0] != lanes or rows.shape != keys.shape:
        raise SavedStateError(f"a saved run of {keys.shape} is not one of {lanes} lanes")
    run = Run(keys, rows, directory)
    if len(run) >= MIN_DIRECTORY_ENTRIES:
        fits = directory.shape[0] == lanes and _has_directory_of(run, directory_bits(len(run)))
    else:
        fits = directory.shape[0] == 0
    if not fits:
        raise SavedStateError(
            f"a saved run of {len(run)} entries has a {directory.shape} directory"
        )
    return run


class SortedTable:
    """Sorted uint64 keys in L lanes, with an insert buffer and a background-safe merge.

    One writer at a time may call ``insert``; ``merge`` may run in another thread at the
    same time, and any number of readers use ``snapshot()`` concurrently with both.

    >>> table = SortedTable(lanes=1)
    >>> table.insert(np.array([[30], [10], [20]], dtype=np.uint64), np.array([0, 1, 2]))
    >>> table.lookup_equal(0, 20).tolist()
    [2]
    >>> table.merge()
    True
    >>> table.lookup_range(0, 10, 25).tolist()
    [1, 2]
    """

    def __init__(
        self,
        lanes: int,
        tail_capacity: int = TAIL_CAPACITY,
        *,
        uniform: bool = False,
        key_type: KeyType = np.uint64,
    ) -> None:
        """``uniform``: one lane of keys spread evenly over their type (hashes), which a
        batch's sort orders by their top bits (``sort_run``). ``key_type``: uint64, or
        uint32 (the caller gives them so)."""
        if lanes < 1:
            raise ValueError("a SortedTable needs at least one lane")
        if tail_capacity < 1:
            raise ValueError("a SortedTable needs a tail of at least one entry")
        self.lanes = lanes
        self.tail_capacity = tail_capacity
        self.key_type = key_type
        self._uniform = uniform
        self._write_lock = threading.Lock()
        self._merge_lock = threading.Lock()
        self._merging = False  # a merge is folding the middle run: no promotion into it
        self._snapshot = TableSnapshot(
            self._empty_run(), self._empty_run(), self._empty_run(), *self._new_tail(), 0
        )

    def _empty_run(self) -> Run:
        return Run.empty(self.lanes, self.key_type)

    def _new_tail(self) -> tuple[KeyMatrix, RowVector]:
        return (
            np.zeros((self.lanes, self.tail_capacity), dtype=self.key_type),
            np.zeros(self.tail_capacity, dtype=np.int32),
        )

    def snapshot(self) -> TableSnapshot:
        """The current state, for lock-free reads. O(1)."""
        return self._snapshot

    def __len__(self) -> int:
        """Entries stored, tombstoned ones included until a merge drops them."""
        return len(self._snapshot)

    def insert(self, keys: KeyMatrix, rows: npt.NDArray[np.integer]) -> None:
        """Add m entries: ``keys`` is (m, lanes) of the table's key type (uint64 takes any
        integers), ``rows`` (m,) their row numbers.

        Small batches are appended to the tail in place; larger ones, and a full tail,
        are sorted and merged into the buffer (a new array, published atomically).
        """
        keys = as_keys(keys, self.key_type)
        if keys.ndim != 2 or keys.shape[1] != self.lanes or len(rows) != keys.shape[0]:
            raise ValueError(f"keys must be (m, {self.lanes}) with one row number each")
        if keys.shape[0] == 0:
            return
        with self._write_lock:
            state = self._snapshot
            count = keys.shape[0]
            if state.tail_count + count <= self.tail_capacity:
                end = state.tail_count + count
                # Readers of older snapshots never look past their own tail_count, so
                # writing beyond it in place is invisible to them.
                state.tail_keys[:, state.tail_count : end] = keys.T
                state.tail_rows[state.tail_count : end] = rows
                self._snapshot = TableSnapshot(
                    state.main, state.middle, state.buffer, state.tail_keys, state.tail_rows, end
                )
                return
            tail = state.tail_count
            if tail:
                pending_keys = np.concatenate([state.tail_keys[:, :tail], keys.T], axis=1)
                pending_rows = np.concatenate([state.tail_rows[:tail], np.asarray(rows, np.int32)])
            else:  # sorted from the view: no transposed copy
                pending_keys, pending_rows = keys.T, np.asarray(rows, np.int32)
            buffer = merge_runs(
                state.buffer, sort_run(pending_keys, pending_rows, uniform=self._uniform)
            )
            self._publish_buffer(state, buffer, *self._new_tail(), 0)

    def insert_run(self, run: Run) -> None:
        """Add a run of entries sorted already (a RunBuilder's: a bulk load) as ``insert``
        adds a batch, merged into the buffer: O(1) into an empty buffer (the run itself is
        held, not copied), else O(L (B + n)). The tail is left as it is."""
        if run.keys.shape[0] != self.lanes:
            raise ValueError(f"a run of {run.keys.shape[0]} lanes, not {self.lanes}")
        if not len(run):
            return
        with self._write_lock:
            state = self._snapshot
            buffer = merge_runs(state.buffer, run)
            self._publish_buffer(state, buffer, state.tail_keys, state.tail_rows, state.tail_count)

    def _publish_buffer(
        self,
        state: TableSnapshot,
        buffer: Run,
        tail_keys: KeyMatrix,
        tail_rows: RowVector,
        tail_count: int,
    ) -> None:
        """Publish ``buffer`` as the new buffer of ``state`` (under the write lock), promoted
        into the middle run when it has grown to promotion_due."""
        middle = state.middle
        due = promotion_due(len(state.main))
        if due is not None and len(buffer) >= due and not self._merging:
            middle, buffer = merge_runs(middle, buffer), self._empty_run()
        self._snapshot = TableSnapshot(state.main, middle, buffer, tail_keys, tail_rows, tail_count)

    def unmerged(self) -> int:
        """Entries waiting outside the main run (middle, buffer and tail)."""
        state = self._snapshot
        return len(state.middle) + len(state.buffer) + state.tail_count

    def needs_merge(self) -> bool:
        """True when middle, buffer and tail have grown enough that a merge pays for itself."""
        return self.unmerged() >= merge_due(len(self._snapshot.main))

    def merge(self, dropped: npt.NDArray[np.bool_] | None = None) -> bool:
        """Fold middle, buffer and tail into main, leaving out rows marked in ``dropped``.

        Safe to run beside inserts and reads: middle, buffer and tail are merged into the
        middle run under the write lock (O(M + B): no promotion changes it until the
        merge is done), that run is merged into main without the lock, and the new main
        swapped in under it. Returns False when there was nothing to merge (or another
        merge was running).
        """
        if not self._merge_lock.acquire(blocking=False):
            return False
        try:
            with self._write_lock:
                state = self._snapshot
                tail = state.tail_count
                if len(state.middle) + len(state.buffer) + tail == 0 and dropped is None:
                    return False
                pending = merge_runs(
                    state.buffer,
                    sort_run(
                        state.tail_keys[:, :tail], state.tail_rows[:tail], uniform=self._uniform
                    ),
                )
                middle = merge_runs(state.middle, pending)
                main = state.main
                self._snapshot = TableSnapshot(
                    main, middle, self._empty_run(), *self._new_tail(), 0
                )
                self._merging = True
                # Dropped now, not when the merge returns: the old runs are held by the new
                # snapshot (as middle) or by nothing, not beside the merged run.
                del state, pending
            try:
                merged = merge_runs(main, middle, dropped)
                del main, middle
            except BaseException:
                with self._write_lock:
                    self._merging = False
                raise
            with self._write_lock:
                state = self._snapshot
                self._snapshot = TableSnapshot(
                    merged,
                    self._empty_run(),
                    state.buffer,
                    state.tail_keys,
                    state.tail_rows,
                    state.tail_count,
                )
                self._merging = False
            return True
        finally:
            self._merge_lock.release()

    def saved_arrays(self) -> SavedArrays:
        """The entries as arrays that never change, for a segment: the runs as they are
        (never written once made) and a copy of the tail. O(tail)."""
        with self._write_lock:
            state = self._snapshot
            arrays: SavedArrays = {}
            for name, run in _named_runs(state):
                arrays[f"{name}.keys"] = run.keys
                arrays[f"{name}.rows"] = run.rows
                arrays[f"{name}.directory"] = run.directory
            arrays["tail.keys"] = state.tail_keys[:, : state.tail_count].copy()
            arrays["tail.rows"] = state.tail_rows[: state.tail_count].copy()
        return arrays

    def adopt_saved(self, arrays: SavedArrays) -> None:
        """Take saved entries as this empty table's: the runs held as given (a mapped
        file is not copied), the tail copied. SavedStateError when they do not fit
        this table (lanes, types, a run's directory). O(L buckets + tail)."""
        runs = []
        for name in ("main", "middle", "buffer"):
            keys = wanted(arrays, f"{name}.keys")
            rows = wanted(arrays, f"{name}.rows")
            directory = wanted(arrays, f"{name}.directory")
            run = _checked_run(self.lanes, self.key_type, keys, rows, directory)
            runs.append(run)
        tail_keys, tail_rows = wanted(arrays, "tail.keys"), wanted(arrays, "tail.rows")
        count = tail_rows.shape[0]
        if tail_keys.shape != (self.lanes, count) or count > self.tail_capacity:
            raise SavedStateError(f"a saved tail of {tail_keys.shape} does not fit")
        keys_now, rows_now = self._new_tail()
        keys_now[:, :count] = tail_keys
        rows_now[:count] = tail_rows
        with self._write_lock:
            if len(self._snapshot):
                raise ValueError("only an empty SortedTable adopts saved entries")
            self._snapshot = TableSnapshot(runs[0], runs[1], runs[2], keys_now, rows_now, count)

    def lookup_range(self, lane: int, low: int, high: int) -> RowVector:
        """Rows whose key in ``lane`` lies in [low, high], in no particular order."""
        state = self._snapshot
        bounds = np.array([low, high], dtype=np.uint64)
        parts = [
            _rows_in_range(run, lane, bounds) for run in (state.main, state.middle, state.buffer)
        ]
        tail_keys = state.tail_keys[lane, : state.tail_count]
        in_range = (tail_keys >= bounds[0]) & (tail_keys <= bounds[1])
        parts.append(state.tail_rows[: state.tail_count][in_range])
        return np.concatenate(parts)

    def lookup_equal(self, lane: int, key: int) -> npt.NDArray[np.int64]:
        """Rows whose key in ``lane`` equals ``key``. One compiled call. O(log N + tail)."""
        return self.lookup_equal_many(lane, np.array([key], dtype=self.key_type))[1]

    def lookup_equal_many(
        self,
        lane: int,
        keys: KeyMatrix,
        max_rows: int = _NO_CAP,
        deleted: npt.NDArray[np.bool_] = _NO_DELETED,
        capped: npt.NDArray[np.bool_] = _NO_CAPPED,
        order: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(query positions, rows): every row whose key in ``lane`` equals ``keys[i]``,
        for all queries in one compiled call (in ascending order: through main's
        directory, and in the smaller runs galloping from the last key). A key held by
        more than ``max_rows`` entries finds nothing (and is marked True in ``capped``,
        when given: as long as ``keys``); rows marked in ``deleted`` are left out;
        ``order``: what sorts ``keys``, where the caller has it. O(q (log N + tail) +
        found)."""
        state = self._snapshot
        keys = np.ascontiguousarray(as_keys(keys, self.key_type))
        if order is None:
            order = np.argsort(keys) if len(keys) > 1 else _ONE_KEY
        return kernels.equal_rows_many(
            state.kernel_arrays(),
            lane,
            keys,
            order,
            max_rows,
            deleted,
            capped,
        )

    def lookup_prefix(self, lane: int, key: int, prefix_bits: int) -> RowVector:
        """Rows whose key in ``lane`` shares its top ``prefix_bits`` bits with ``key``."""
        free_bits = 64 - prefix_bits
        low = (key >> free_bits) << free_bits if free_bits < 64 else 0
        high = low | ((1 << free_bits) - 1)
        return self.lookup_range(lane, low, high)

    def rows(self) -> RowVector:
        """Every stored row number (lane 0), in no particular order."""
        state = self._snapshot
        return np.concatenate(
            [
                state.main.rows[0],
                state.middle.rows[0],
                state.buffer.rows[0],
                state.tail_rows[: state.tail_count],
            ]
        )

    def memory_bytes(self) -> int:
        """Bytes held by the arrays of the current snapshot."""
        state = self._snapshot
        runs = (state.main, state.middle, state.buffer)
        total = sum(run.keys.nbytes + run.rows.nbytes + run.directory.nbytes for run in runs)
        return int(total + state.tail_keys.nbytes + state.tail_rows.nbytes)

    def _check(self, one_entry_a_row: bool = True) -> None:
        """Assert every invariant of the current snapshot; a table that keeps several
        entries of a row in one lane (the n-gram and passage indexes) says so."""
        state = self._snapshot
        assert 0 <= state.tail_count <= self.tail_capacity
        assert state.tail_rows.shape == (self.tail_capacity,)
        all_rows = []
        for run in (state.main, state.middle, state.buffer):
            assert run.keys.shape == run.rows.shape
            assert run.keys.shape[0] == self.lanes
            assert run.keys.dtype == self.key_type and run.rows.dtype == np.int32
            assert bool(np.all(run.keys[:, 1:] >= run.keys[:, :-1])), "a lane is out of order"
            lane_zero = np.sort(run.rows[0])
            for lane in range(1, self.lanes):
                assert np.array_equal(np.sort(run.rows[lane]), lane_zero), "lanes disagree"
            all_rows.append(run.rows[0])
        for run in (state.main, state.middle, state.buffer):
            rebuilt = with_directory(Run(run.keys, run.rows)).directory
            assert np.array_equal(run.directory, rebuilt), "a directory is stale"
        all_rows.append(state.tail_rows[: state.tail_count])
        rows = np.concatenate(all_rows)
        assert not one_entry_a_row or len(np.unique(rows)) == len(rows), "a row is stored twice"
