"""TimeOrder: rows by (timestamp, row), so that the oldest can be taken off cheaply.

Retention expires documents oldest first, by their own timestamp, which need not follow
the order of the inserts. A TimeOrder keeps every held row's (timestamp, row) in sorted
runs of numpy int64 columns, LSM-style: an insert sorts its batch into a new run (the
newest, last); while the run before it holds at most twice as many entries, the two are
merged. Row numbers are handed out in ascending order, so every row of a run is above
every row of the runs before it; merging two neighbouring runs is therefore a stable
sort of their concatenation by timestamp (timsort finds the two sorted runs: linear),
which keeps ties in row order. There are O(log(n / batch)) runs; the oldest entry is the
least of their heads.

Taking entries off moves a head pointer per run (a run is copied down once its taken
prefix passes half of it, amortised O(1) per entry). Entries of rows deleted meanwhile are
left in place and taken off like the others (the caller skips them); ``compact`` drops
them when they are many.

Costs, for n entries, r = O(log(n / m)) runs and a batch of m: insert O(m log m) plus
amortised O(log(n / m)) copies per entry (O(m) when timestamps arrive in order: each
merge then appends); ``take_before`` O(r log n + taken); ``take_oldest(k)`` O(r k log(r k));
``oldest`` O(r); ``compact`` O(n). Memory: 16 bytes per entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]
# A run is copied down once this share of it has been taken off (and it is not tiny).
_TRIM_FRACTION = 0.5
_TRIM_MIN = 4096


@dataclass(slots=True)
class _Run:
    """Entries sorted by (timestamp, row); ``head`` of them taken off already."""

    timestamps: Int64s
    rows: Int64s
    head: int = 0

    def __len__(self) -> int:
        return len(self.rows) - self.head

    def count_through(self, timestamp: int, row: int) -> int:
        """Entries (not taken) with key <= (timestamp, row)."""
        stamps = self.timestamps[self.head :]
        low = int(np.searchsorted(stamps, timestamp, "left"))
        high = int(np.searchsorted(stamps, timestamp, "right"))
        return low + int(
            np.searchsorted(self.rows[self.head + low : self.head + high], row, "right")
        )

    def take(self, count: int) -> tuple[Int64s, Int64s]:
        start, end = self.head, self.head + count
        taken = self.timestamps[start:end].copy(), self.rows[start:end].copy()
        self.head = end
        if self.head >= _TRIM_MIN and self.head > _TRIM_FRACTION * len(self.rows):
            self.timestamps = self.timestamps[self.head :].copy()
            self.rows = self.rows[self.head :].copy()
            self.head = 0
        return taken


def _no_entries() -> tuple[Int64s, Int64s]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


class TimeOrder:
    """Held rows by (timestamp, row), to take off the oldest: by age or by count.

    One writer at a time (the collection's write lock); no I/O.

    >>> order = TimeOrder()
    >>> order.insert(np.array([30, 10, 20]), np.array([0, 1, 2]))
    >>> order.insert(np.array([15]), np.array([3]))
    >>> order.take_before(16)[1].tolist(), order.take_oldest(1)[1].tolist(), len(order)
    ([1, 3], [2], 1)
    """

    def __init__(self) -> None:
        self._runs: list[_Run] = []
        self._count = 0
        self._last_row = -1

    def __len__(self) -> int:
        return self._count

    @property
    def runs(self) -> int:
        return len(self._runs)

    @property
    def nbytes(self) -> int:
        return sum(run.timestamps.nbytes + run.rows.nbytes for run in self._runs)

    def insert(self, timestamps: npt.ArrayLike, rows: npt.ArrayLike) -> None:
        """Add a batch of rows, each above every row added before."""
        stamps = np.asarray(timestamps, dtype=np.int64).reshape(-1)
        numbers = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(numbers) == 0:
            return
        if len(numbers) > 1 and not bool(np.all(numbers[1:] > numbers[:-1])):
            order = np.argsort(numbers, kind="stable")
            stamps, numbers = stamps[order], numbers[order]
        if int(numbers[0]) <= self._last_row:
            raise ValueError("rows must be added in ascending order, each above the last")
        self._last_row = int(numbers[-1])
        if bool(np.all(stamps[1:] >= stamps[:-1])):  # in time order already (a restart's,
            # often): a copy, not a sort (bench/restart.py)
            self._runs.append(_Run(stamps.copy(), numbers.copy()))
        else:
            order = np.argsort(stamps, kind="stable")  # ties stay in row order
            self._runs.append(_Run(stamps[order], numbers[order]))
        self._count += len(numbers)
        while len(self._runs) >= 2 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            newer = self._runs.pop()
            older = self._runs.pop()
            self._runs.append(_merge(older, newer))

    def oldest(self) -> tuple[int, int] | None:
        """The least (timestamp, row) held, or None when empty."""
        heads = [
            (int(run.timestamps[run.head]), int(run.rows[run.head]))
            for run in self._runs
            if len(run)
        ]
        return min(heads) if heads else None

    def count_before(self, timestamp: int) -> int:
        """Entries with a timestamp below ``timestamp``."""
        return sum(
            int(np.searchsorted(run.timestamps[run.head :], timestamp, "left"))
            for run in self._runs
        )

    def take_before(self, timestamp: int) -> tuple[Int64s, Int64s]:
        """Take off every entry with a timestamp below ``timestamp``: (timestamps, rows)."""
        taken = [
            run.take(int(np.searchsorted(run.timestamps[run.head :], timestamp, "left")))
            for run in self._runs
        ]
        return self._collected(taken)

    def take_through(self, timestamp: int, row: int) -> tuple[Int64s, Int64s]:
        """Take off every entry with (timestamp, row) at or below the one given."""
        return self._collected([run.take(run.count_through(timestamp, row)) for run in self._runs])

    def oldest_alive(
        self, alive: Callable[[Int64s], npt.NDArray[np.bool_]], block: int = 64
    ) -> tuple[int, int] | None:
        """The least (timestamp, row) of an entry whose row is ``alive`` (entries of rows
        deleted meanwhile are skipped): O(runs x the dead entries before it)."""
        best: tuple[int, int] | None = None
        for run in self._runs:
            start = run.head
            while start < len(run.rows):
                rows = run.rows[start : start + block]
                found = np.flatnonzero(alive(rows))
                if len(found):
                    at = start + int(found[0])
                    entry = (int(run.timestamps[at]), int(run.rows[at]))
                    best = entry if best is None else min(best, entry)
                    break
                start += block
        return best

    def take_oldest(self, count: int) -> tuple[Int64s, Int64s]:
        """Take off the ``count`` least (timestamp, row) entries (all, if fewer)."""
        if count <= 0 or not self._count:
            return _no_entries()
        if count >= self._count:
            return self._collected([run.take(len(run)) for run in self._runs])
        # The count least entries are among the first count of each run.
        heads = [
            (run.timestamps[run.head : run.head + count], run.rows[run.head : run.head + count])
            for run in self._runs
        ]
        stamps = np.concatenate([h[0] for h in heads])
        rows = np.concatenate([h[1] for h in heads])
        last = np.lexsort((rows, stamps))[count - 1]
        through = int(stamps[last]), int(rows[last])
        return self._collected([run.take(run.count_through(*through)) for run in self._runs])

    def compact(self, alive: Callable[[Int64s], npt.NDArray[np.bool_]]) -> int:
        """Drop the entries of rows for which ``alive`` is false; returns how many."""
        dropped = 0
        for run in self._runs:
            rows = run.rows[run.head :]
            keep = alive(rows) if len(rows) else np.zeros(0, dtype=np.bool_)
            dropped += int(len(rows) - np.count_nonzero(keep))
            run.timestamps, run.rows, run.head = run.timestamps[run.head :][keep], rows[keep], 0
        self._runs = [run for run in self._runs if len(run)]
        self._count -= dropped
        return dropped

    def _collected(self, taken: list[tuple[Int64s, Int64s]]) -> tuple[Int64s, Int64s]:
        self._runs = [run for run in self._runs if len(run)]
        if not taken:
            return _no_entries()
        stamps = np.concatenate([t[0] for t in taken])
        rows = np.concatenate([t[1] for t in taken])
        self._count -= len(rows)
        order = np.lexsort((rows, stamps))
        return stamps[order], rows[order]

    def _check(self) -> None:
        """Assert: runs sorted by (timestamp, row), rows of later runs above earlier ones,
        the count right."""
        total = 0
        previous_max = -1
        for run in self._runs:
            stamps, rows = run.timestamps[run.head :], run.rows[run.head :]
            assert len(rows) > 0, "an empty run is kept"
            order = np.lexsort((rows, stamps))
            assert np.array_equal(order, np.arange(len(rows))), "a run is out of order"
            assert int(rows.min()) > previous_max, "runs overlap in rows"
            previous_max = int(rows.max())
            total += len(rows)
        assert total == self._count, f"count {self._count} != {total}"


def _merge(older: _Run, newer: _Run) -> _Run:
    stamps = np.concatenate([older.timestamps[older.head :], newer.timestamps[newer.head :]])
    rows = np.concatenate([older.rows[older.head :], newer.rows[newer.head :]])
    if len(older) and len(newer) and newer.timestamps[newer.head] >= older.timestamps[-1]:
        return _Run(stamps, rows)  # in time order already: an append
    order = np.argsort(stamps, kind="stable")
    return _Run(stamps[order], rows[order])
