"""RunBuilder: many batches of a SortedTable's entries made into one sorted Run while the
memory of what is merged is given back, so that building a table in bulk (a restart's
passage index: every kept text, in chunks) holds about one copy of it at any time.

Merging each chunk into a growing run, as ``SortedTable.insert`` does, holds the old run
and the new one at once (two copies of the table at the last chunk: a rebuild's peak of
1.23x its running memory with passages on) and copies the run once per chunk (quadratic
in the chunks). Here each chunk is sorted on its own into memory of its own mapping; the
last step merges all of them key range by key range, and gives back each chunk's pages
as the merge passes them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.core.reservations import releasable_empty, release_prefix
from app.core.sorted_table import KeyMatrix, KeyType, Run, as_keys, with_directory

# Entries of a lane merged at a time: the partition's keys, rows and order (20 bytes an
# entry, 40 MB) are the merge's only memory beyond the runs it reads and writes.
PARTITION_ENTRIES = 1 << 21
# Keys sampled from each run a partition, to place the partitions' bounds (quantiles of
# the samples): a partition then holds about PARTITION_ENTRIES entries.
SAMPLES_A_PARTITION = 4
# A chunk's merged pages are given back once they are this share of it: at most 1/32 of
# the chunks' memory lingers, with at most 32 system calls a chunk and lane.
RELEASE_SHARE = 32


class RunBuilder:
    """Entries added in batches (``add``), made into one Run (``finish``).

    Memory: the batches' entries, sorted (12 bytes an entry and lane); while finishing,
    the merged run grows as they shrink, plus one partition (about PARTITION_ENTRIES
    entries, 20 bytes each) and at most 1/RELEASE_SHARE of them not yet given back.
    Costs: add O(L m log m) for m entries; finish O(L N log K) for N entries in K batches
    (a stable sort of the K sorted slices of each partition: timsort merges them as runs).
    """

    def __init__(self, lanes: int, key_type: KeyType = np.uint64) -> None:
        """``key_type``: the keys' type, as the table's (SortedTable)."""
        if lanes < 1:
            raise ValueError("a RunBuilder needs at least one lane")
        self.lanes = lanes
        self.key_type = key_type
        self._runs: list[Run] = []
        self._entries = 0

    def __len__(self) -> int:
        """Entries added."""
        return self._entries

    def add(self, keys: KeyMatrix, rows: npt.NDArray[np.integer]) -> None:
        """Add m entries: ``keys`` (m, lanes) of the key type, ``rows`` (m,) their row
        numbers. O(L m log m); the entries are copied (sorted), the arguments not kept."""
        keys = as_keys(keys, self.key_type)
        if keys.ndim != 2 or keys.shape[1] != self.lanes or len(rows) != keys.shape[0]:
            raise ValueError(f"keys must be (m, {self.lanes}) with one row number each")
        count = keys.shape[0]
        if not count:
            return
        rows32 = np.asarray(rows, dtype=np.int32)
        sorted_keys = releasable_empty((self.lanes, count), self.key_type)
        sorted_rows = releasable_empty((self.lanes, count), np.int32)
        for lane in range(self.lanes):
            lane_keys = np.ascontiguousarray(keys[:, lane])
            order = np.argsort(lane_keys)
            np.take(lane_keys, order, out=sorted_keys[lane])
            np.take(rows32, order, out=sorted_rows[lane])
        self._runs.append(Run(sorted_keys, sorted_rows))
        self._entries += count

    def finish(self) -> Run:
        """Every entry added, in one Run with its directory; the builder is empty after.
        The batches' memory is given back as the merge passes it."""
        runs, total = self._runs, self._entries
        self._runs, self._entries = [], 0
        if len(runs) <= 1:
            return with_directory(runs[0]) if runs else Run.empty(self.lanes, self.key_type)
        keys = np.empty((self.lanes, total), dtype=self.key_type)
        rows = np.empty((self.lanes, total), dtype=np.int32)
        for lane in range(self.lanes):
            _merge_lane(runs, lane, keys[lane], rows[lane])
        return with_directory(Run(keys, rows))

    def _check(self) -> None:
        """Each batch sorted per lane, and the count of entries."""
        assert sum(len(run) for run in self._runs) == self._entries
        for run in self._runs:
            assert run.keys.shape == run.rows.shape == (self.lanes, len(run))
            assert bool(np.all(run.keys[:, 1:] >= run.keys[:, :-1]))


def _bounds(runs: list[Run], lane: int, total: int) -> npt.NDArray[np.int64]:
    """(runs, partitions + 1): where each partition of the lane starts in each run. The
    partitions' first keys are quantiles of a sample of every run, so each holds about
    PARTITION_ENTRIES entries; all entries of one key fall in one partition."""
    partitions = -(-total // PARTITION_ENTRIES)
    # Each run spans the whole key range: as many samples of each as of the whole, spread
    # over it, each weighing the entries it stands for (a short last batch weighs less).
    samples, weights = [], []
    for run in runs:
        taken = min(len(run), SAMPLES_A_PARTITION * partitions)
        positions = ((np.arange(taken) + 0.5) * (len(run) / taken)).astype(np.int64)
        samples.append(run.keys[lane, positions])
        weights.append(np.full(taken, len(run) / taken))
    pooled = np.concatenate(samples)
    order = np.argsort(pooled)
    passed = np.cumsum(np.concatenate(weights)[order])
    picks = np.searchsorted(passed, np.arange(1, partitions) * (total / partitions))
    firsts = pooled[order[np.minimum(picks, len(pooled) - 1)]]
    bounds = np.empty((len(runs), partitions + 1), dtype=np.int64)
    for index, run in enumerate(runs):
        bounds[index, 0] = 0
        bounds[index, 1:-1] = np.searchsorted(run.keys[lane], firsts, side="left")
        bounds[index, -1] = len(run)
    return bounds


def _merge_lane(
    runs: list[Run], lane: int, out_keys: KeyMatrix, out_rows: npt.NDArray[np.int32]
) -> None:
    """The lane's entries of every run, merged into ``out_keys`` and ``out_rows``,
    partition by partition, each run's pages given back as the merge passes them."""
    bounds = _bounds(runs, lane, len(out_keys))
    released = np.zeros(len(runs), dtype=np.int64)  # entries of each run given back
    due = np.array([max(1, len(run) // RELEASE_SHARE) for run in runs], dtype=np.int64)
    written = 0
    for partition in range(bounds.shape[1] - 1):
        starts, ends = bounds[:, partition].tolist(), bounds[:, partition + 1].tolist()
        part_keys = np.concatenate(
            [run.keys[lane, s:e] for run, s, e in zip(runs, starts, ends, strict=True)]
        )
        part_rows = np.concatenate(
            [run.rows[lane, s:e] for run, s, e in zip(runs, starts, ends, strict=True)]
        )
        order = np.argsort(part_keys, kind="stable")
        end = written + len(order)
        np.take(part_keys, order, out=out_keys[written:end])
        np.take(part_rows, order, out=out_rows[written:end])
        written = end
        del part_keys, part_rows, order
        last = partition == bounds.shape[1] - 2
        for index in np.flatnonzero(last | (bounds[:, partition + 1] - released >= due)).tolist():
            run, through = runs[index], int(bounds[index, partition + 1])
            release_prefix(run.keys[lane], through, after=int(released[index]))
            release_prefix(run.rows[lane], through, after=int(released[index]))
            released[index] = through
    assert written == len(out_keys)
