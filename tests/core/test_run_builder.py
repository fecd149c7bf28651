"""RunBuilder (a bulk load merged once, its inputs given back) and release_prefix,
against sorted Python lists and the memory the kernel reports for the mapping."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from app.core import run_builder
from app.core.passages import PassageIndex
from app.core.reservations import MAPPED_MIN_BYTES, PAGE_BYTES, releasable_empty, release_prefix
from app.core.run_builder import RunBuilder
from app.core.sorted_table import MIN_DIRECTORY_ENTRIES, Run, SortedTable


def entries_of(run: Run, lane: int) -> list[tuple[int, int]]:
    return list(zip(run.keys[lane].tolist(), run.rows[lane].tolist(), strict=True))


def batches(
    rng: np.random.Generator, lanes: int, sizes: list[int], key_space: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    made, next_row = [], 0
    for size in sizes:
        keys = rng.integers(0, key_space, size=(size, lanes), dtype=np.uint64)
        keys <<= np.uint64(64 - max(1, int(key_space).bit_length()))  # the top bits
        made.append((keys, np.arange(next_row, next_row + size)))
        next_row += size
    return made


@pytest.mark.parametrize(
    ("lanes", "sizes", "key_space", "partition"),
    [
        (1, [5000, 1, 7000, 300, 6000], 1 << 40, 1000),  # many partitions, distinct keys
        (3, [4000, 4000, 10, 2500], 50, 700),  # few keys: long runs of one key
        (2, [3000, 3000], 1, 500),  # one key: every partition bound is the same
        (1, [200_000, 150_000, 170_000], 1 << 62, 1 << 16),  # mapped: pages given back
        (2, [9], 1 << 10, 4),  # one batch: itself
    ],
)
def test_finish_holds_every_entry_sorted(
    lanes: int, sizes: list[int], key_space: int, partition: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each lane of the merged run is the sorted list of every (key, row) added; the
    builder is empty after."""
    monkeypatch.setattr(run_builder, "PARTITION_ENTRIES", partition)
    rng = np.random.default_rng(len(sizes) * lanes)
    builder = RunBuilder(lanes)
    added = batches(rng, lanes, sizes, key_space)
    for keys, rows in added:
        builder.add(keys, rows)
        builder._check()
    assert len(builder) == sum(sizes)
    run = builder.finish()
    assert len(builder) == 0 and len(builder.finish()) == 0
    for lane in range(lanes):
        expected = sorted(
            (int(key), int(row))
            for keys, rows in added
            for key, row in zip(keys[:, lane].tolist(), rows.tolist(), strict=True)
        )
        assert sorted(entries_of(run, lane)) == expected
        assert run.keys[lane].tolist() == [key for key, _ in expected]
    assert bool(run.directory.shape[0]) == (len(run) >= MIN_DIRECTORY_ENTRIES)


def test_an_empty_builder_makes_an_empty_run() -> None:
    builder = RunBuilder(2)
    builder.add(np.zeros((0, 2), dtype=np.uint64), np.zeros(0, dtype=np.int64))
    run = builder.finish()
    assert len(run) == 0 and run.keys.shape == (2, 0)
    with pytest.raises(ValueError, match="at least one lane"):
        RunBuilder(0)
    with pytest.raises(ValueError, match="one row number each"):
        builder.add(np.zeros((3, 1), dtype=np.uint64), np.arange(3))


def test_insert_run_into_a_table_answers_as_inserts_do() -> None:
    """A table given a built run (into an empty buffer, then into one holding entries,
    beside a tail) answers every lookup as a dictionary of the same entries does."""
    rng = np.random.default_rng(5)
    lanes = 2
    table = SortedTable(lanes)
    stored: dict[int, list[int]] = {}
    for step in range(3):
        builder = RunBuilder(lanes)
        base = step * 10_000
        for keys, rows in batches(rng, lanes, [3000, 2000], 1 << 8):
            builder.add(keys, rows + base)
            stored.update(zip((rows + base).tolist(), keys.tolist(), strict=True))
        table.insert_run(builder.finish())
        single = rng.integers(0, 1 << 8, size=(1, lanes), dtype=np.uint64) << np.uint64(56)
        table.insert(single, np.array([base + 9999]))  # a tail entry beside the runs
        stored[base + 9999] = single[0].tolist()
        table._check()
    with pytest.raises(ValueError, match="lanes"):
        table.insert_run(Run.empty(3))
    for lane in range(lanes):
        for key in {keys[lane] for keys in stored.values()}:
            expected = sorted(row for row, keys in stored.items() if keys[lane] == key)
            assert sorted(table.lookup_equal(lane, key).tolist()) == expected


def test_a_passage_index_loaded_in_chunks_equals_one_loaded_by_inserts() -> None:
    """insert_chunks holds the same rows under the same fingerprints as insert_many of
    the same texts, texts without a fingerprint included (not held)."""
    rng = np.random.default_rng(11)
    texts = [
        np.unique(rng.integers(0, 5000, size=int(rng.integers(0, 40)), dtype=np.uint64))
        for _ in range(3000)
    ]
    rows = np.arange(3000, dtype=np.int64) * 2
    hashes = [int(h) for h in rng.integers(1, 2**63, size=3000, dtype=np.int64)]
    by_inserts, in_chunks = PassageIndex(), PassageIndex()
    for start in range(0, 3000, 500):
        end = start + 500
        by_inserts.insert_many(texts[start:end], rows[start:end], hashes[start:end])
    in_chunks.insert_chunks(
        (texts[start : start + 700], rows[start : start + 700], hashes[start : start + 700])
        for start in range(0, 3000, 700)
    )
    in_chunks._check()
    assert in_chunks.holds(rows).tolist() == [len(keys) > 0 for keys in texts]
    for keys in texts[:300]:
        assert [a.tolist() for a in in_chunks.candidates(keys)] == [
            a.tolist() for a in by_inserts.candidates(keys)
        ]
    held = rows[[len(keys) > 0 for keys in texts]]
    for index in (by_inserts, in_chunks):  # each row's text hash, and no other
        assert index.identical(held[:50], hashes[0]).tolist() == [
            row == 0 for row in held[:50].tolist()
        ]
        assert all(index.identical(np.array([row]), hashes[row // 2])[0] for row in held.tolist())


def resident_bytes(array: np.ndarray) -> int:
    """The bytes of the pages under an array that are resident, from the kernel's page
    map of this process (bit 63 of each page's entry: present)."""
    first = array.ctypes.data // PAGE_BYTES
    last = (array.ctypes.data + array.nbytes - 1) // PAGE_BYTES
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first + 1) * 8), dtype=np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63))) * PAGE_BYTES


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/pagemap")
def test_release_prefix_gives_back_whole_pages_of_what_was_read() -> None:
    """Pages wholly below ``through`` are given back (the kernel's resident count falls by
    them and they read as zeros); items from the page holding ``through`` on keep their
    values; the second lane's first page, shared with the first lane, is kept."""
    array = releasable_empty((2, MAPPED_MIN_BYTES // 8), np.uint64)  # mapped: 1 MB a lane
    values = np.arange(1, array.size + 1, dtype=np.uint64).reshape(array.shape)
    array[:] = values
    full = resident_bytes(array)
    assert full >= array.nbytes
    per_page = PAGE_BYTES // 8
    through = 3 * per_page + 5  # three whole pages and a few items of the fourth
    assert release_prefix(array[0], through) == 3 * PAGE_BYTES
    assert resident_bytes(array) == full - 3 * PAGE_BYTES
    assert not array[0, : 3 * per_page].any()
    assert array[0, 3 * per_page :].tolist() == values[0, 3 * per_page :].tolist()
    # Continued from where the last call stopped: the fourth page goes now.
    assert release_prefix(array[0], 5 * per_page, after=through) == 2 * PAGE_BYTES
    assert array[0, 5 * per_page :].tolist() == values[0, 5 * per_page :].tolist()
    offset = array[1, 3:]  # starts inside a page whose start holds other items
    assert release_prefix(offset, per_page) == 0  # never the page before it
    assert array[1].tolist() == values[1].tolist()
    assert release_prefix(np.arange(10_000, dtype=np.uint64), 9000) == 0  # heap: nothing


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/pagemap")
def test_finish_gives_back_the_batches_it_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once merged, every batch's pages are given back, but for the page each lane ends
    in: the memory of the builder's input is not held beside the run it made."""
    monkeypatch.setattr(run_builder, "PARTITION_ENTRIES", 1 << 15)
    rng = np.random.default_rng(3)
    builder = RunBuilder(1)
    for keys, rows in batches(rng, 1, [300_000, 300_000], 1 << 60):
        builder.add(keys, rows)
    inputs = list(builder._runs)
    held = [resident_bytes(run.keys) + resident_bytes(run.rows) for run in inputs]
    assert all(bytes_ >= 300_000 * 12 for bytes_ in held)
    builder.finish()
    for run in inputs:
        assert resident_bytes(run.keys) + resident_bytes(run.rows) <= 4 * PAGE_BYTES


def test_partitions_hold_about_their_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of unequal sizes, each spanning the whole key range: every partition of
    the merge holds close to PARTITION_ENTRIES entries (counted from the bounds)."""
    monkeypatch.setattr(run_builder, "PARTITION_ENTRIES", 10_000)
    rng = np.random.default_rng(8)
    builder = RunBuilder(1)
    for keys, rows in batches(rng, 1, [30_000] * 9 + [1_000, 17], 1 << 62):
        builder.add(keys, rows)
    bounds = run_builder._bounds(builder._runs, 0, len(builder))
    sizes = (bounds[:, 1:] - bounds[:, :-1]).sum(axis=0)
    assert sizes.sum() == len(builder) and len(sizes) == 28
    assert sizes.max() <= 15_000 and sizes.min() >= 5_000
