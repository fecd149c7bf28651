"""Indexes against brute force: seeded random operation sequences, threads, the LSH curve."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from itertools import pairwise

import numpy as np
import pytest

from app.core import sorted_table
from app.core._shared_kernels import uniform_order
from app.core.exact import ExactIndex
from app.core.hamming import HammingIndex
from app.core.lsh import LSHIndex, candidate_probability, min_matches, optimal_bands
from app.core.run_builder import RunBuilder
from app.core.saved import SavedStateError
from app.core.sorted_table import LANE_BY_LANE_ENTRIES, TAIL_CAPACITY, Run, SortedTable
from tests.reference import agreeing

SEEDS = [0, 1, 2]


def batch_sizes(rng: np.random.Generator) -> int:
    """Mostly single inserts, sometimes a batch larger than the tail."""
    return int(rng.choice([1, 1, 1, 3, 17, TAIL_CAPACITY + 5]))


def flip_bits(rng: np.random.Generator, value: int, count: int) -> int:
    for bit in rng.choice(64, size=count, replace=False):
        value ^= 1 << int(bit)
    return value


# ---------------------------------------------------------------- SortedTable


@pytest.mark.parametrize("levels", ["as shipped", "small thresholds"])
@pytest.mark.parametrize("seed", SEEDS)
def test_sorted_table_matches_a_dictionary(
    seed: int, levels: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inserts, merges and lookups against a brute force over every entry inserted. With
    small thresholds the buffer is promoted into the middle level, merges fold both, and
    every run of 16 keys or more has a directory (crowded buckets: the keys share few top
    bits), extended by merges or rebuilt when its size needs more buckets; _check rebuilds
    each one."""
    if levels == "small thresholds":
        monkeypatch.setattr(sorted_table, "MERGE_MIN_ENTRIES", 8)
        monkeypatch.setattr(sorted_table, "PROMOTION_BATCH", 4)
        monkeypatch.setattr(sorted_table, "MIN_DIRECTORY_ENTRIES", 16)
    promotions = 0
    rng = np.random.default_rng(seed)
    lanes = 3
    table = SortedTable(lanes)
    # The reference: every (row, keys) inserted, searched by brute force.
    stored_rows: list[np.ndarray] = []
    stored_keys: list[np.ndarray] = []
    next_row = 0
    for _ in range(1000):
        operation = rng.random()
        if operation < 0.5:
            count = batch_sizes(rng)
            # Small key space so that equal keys and shared prefixes are common.
            keys = rng.integers(0, 64, size=(count, lanes), dtype=np.uint64) << np.uint64(58)
            keys |= rng.integers(0, 4, size=(count, lanes), dtype=np.uint64)
            rows = np.arange(next_row, next_row + count)
            next_row += count
            middle = len(table.snapshot().middle)
            table.insert(keys, rows)
            promotions += len(table.snapshot().middle) > middle
            stored_rows.append(rows)
            stored_keys.append(keys.copy())
        elif operation < 0.55:
            if table.needs_merge() or rng.random() < 0.2:
                table.merge()
        else:
            lane = int(rng.integers(lanes))
            probe = int(rng.integers(0, 64)) << 58 | int(rng.integers(0, 4))
            bits = int(rng.choice([0, 3, 6, 64]))
            rows = np.concatenate(stored_rows) if stored_rows else np.zeros(0, np.int64)
            keys = np.concatenate(stored_keys)[:, lane] if stored_keys else np.zeros(0, np.uint64)
            if bits:
                shift = np.uint64(64 - bits)
                expected = set(rows[keys >> shift == np.uint64(probe) >> shift].tolist())
            else:
                expected = set(rows.tolist())
            found = table.lookup_prefix(lane, probe, bits).tolist()
            assert len(found) == len(set(found))
            assert set(found) == expected
            equal = set(rows[keys == np.uint64(probe)].tolist())
            assert set(table.lookup_equal(lane, probe).tolist()) == equal
            # Many probes at once (repeated, unsorted), a cap on the rows a key may hold
            # and some rows marked deleted: by the brute force.
            probes = [int(rng.integers(0, 64)) << 58 | int(rng.integers(0, 4)) for _ in range(9)]
            cap = int(rng.integers(1, 6))
            deleted = rng.random(next_row + 1) < 0.2
            holders = {p: rows[keys == np.uint64(p)].tolist() for p in probes}
            wanted = sorted(
                (at, r)
                for at, p in enumerate(probes)
                if len(holders[p]) <= cap
                for r in holders[p]
                if not deleted[r]
            )
            positions, found_rows = table.lookup_equal_many(
                lane, np.array(probes, dtype=np.uint64), cap, deleted
            )
            assert sorted(zip(positions.tolist(), found_rows.tolist(), strict=True)) == wanted
        table._check()
    assert len(table) == next_row
    if levels == "small thresholds":
        assert promotions > 0
        assert table.snapshot().main.directory.shape[0] == lanes


@pytest.mark.parametrize("spread", ["uniform", "clustered"])
def test_lookup_equal_many_through_a_directory_agrees_with_sorting(spread: str) -> None:
    """A main run large enough for a directory is searched inside each key's bucket
    (counted when it holds a few keys, halved when crowded): keys on bucket edges, in
    long runs, in empty and crowded buckets, and probes between and outside them find
    what numpy's searchsorted finds."""
    rng = np.random.default_rng(11)
    count = 200_000
    if spread == "uniform":
        keys = rng.integers(0, 2**63, count, dtype=np.uint64) * np.uint64(2)
    else:  # a few crowded buckets, most empty
        tops = rng.integers(0, 40, count, dtype=np.uint64) << np.uint64(48)
        keys = tops | (rng.integers(0, 2**16, count, dtype=np.uint64) ** np.uint64(2))
    keys[:500] = np.uint64(7 << 48)  # a long run on a bucket's first key
    keys[500:600] = np.uint64((9 << 48) - 1)  # and one on a bucket's last key
    table = SortedTable(lanes=1)
    table.insert(keys.reshape(-1, 1), np.arange(count))
    table.merge()
    assert table.snapshot().main.directory.shape[0] == 1  # the directed path is tested
    probes = np.concatenate(
        [
            keys[rng.integers(0, count, 3000)],
            keys[rng.integers(0, count, 1000)] + np.uint64(1),
            keys[rng.integers(0, count, 1000)] - np.uint64(1),
            rng.integers(0, 2**63, 1000, dtype=np.uint64),
            np.array([0, 2**64 - 1, 7 << 48, (9 << 48) - 1, 9 << 48], dtype=np.uint64),
        ]
    )
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    cap = 120
    expected = []
    for at, probe in enumerate(probes.tolist()):
        start = int(np.searchsorted(ordered, np.uint64(probe), "left"))
        end = int(np.searchsorted(ordered, np.uint64(probe), "right"))
        if end - start <= cap:
            expected.extend((at, int(row)) for row in order[start:end])
    positions, rows = table.lookup_equal_many(0, probes, cap)
    assert sorted(zip(positions.tolist(), rows.tolist(), strict=True)) == sorted(expected)


@pytest.mark.parametrize(
    ("first", "second"), [(0, 7), (9, 0), (1000, 900), (900, 1000), (70_000, 100), (5, 5000)]
)
@pytest.mark.parametrize("drop", [False, True])
def test_merged_runs_equal_a_stable_sort_and_their_directories_a_rebuild(
    first: int, second: int, drop: bool
) -> None:
    """merge_runs, whichever way it merges (block copies for a much longer first run,
    entry by entry otherwise, dropping rows), holds each lane's entries as a stable sort
    of the two runs' concatenation does (the first run's first among equal keys), and its
    directory, extended or rebuilt, equals one built from its keys alone."""
    rng = np.random.default_rng(first + second)
    lanes = 2

    def run_of(count: int, rows_from: int) -> Run:
        keys = np.sort(rng.integers(0, 300, (lanes, count), dtype=np.uint64) << np.uint64(55), 1)
        keys |= rng.integers(0, 3, (lanes, 1), dtype=np.uint64)  # equal keys across runs
        rows = rng.integers(rows_from, rows_from + 50_000, (lanes, count)).astype(np.int32)
        rows[1] = rows[0]  # lanes hold the same rows (each lane sorted on its own keys)
        return sorted_table.with_directory(Run(np.sort(keys, 1), rows))

    one, other = run_of(first, 0), run_of(second, 50_000)
    dropped = rng.random(100_000) < 0.3 if drop else None
    merged = sorted_table.merge_runs(one, other, dropped)
    for lane in range(lanes):
        keys = np.concatenate([one.keys[lane], other.keys[lane]])
        rows = np.concatenate([one.rows[lane], other.rows[lane]])
        order = np.argsort(keys, kind="stable")
        keep = np.ones(len(keys), bool) if dropped is None else ~dropped[rows[order]]
        assert np.array_equal(merged.keys[lane], keys[order][keep])
        assert np.array_equal(merged.rows[lane], rows[order][keep])
    rebuilt = sorted_table.with_directory(Run(merged.keys, merged.rows)).directory
    assert np.array_equal(merged.directory, rebuilt)
    if len(merged) >= sorted_table.MIN_DIRECTORY_ENTRIES:
        bits = sorted_table.directory_bits(len(merged))
        assert merged.directory.shape == (lanes, (1 << bits) + 1)
        for lane in range(lanes):
            tops = (merged.keys[lane] >> np.uint64(64 - bits)).astype(np.int64)
            starts = np.searchsorted(tops, np.arange((1 << bits) + 1), "left")
            assert np.array_equal(merged.directory[lane], starts)


@pytest.mark.parametrize(
    "keys",
    ["spread", "crowded", "repeated", "tiny"],
)
def test_uniform_order_sorts_any_keys(keys: str) -> None:
    """uniform_order against Python's sort: spread keys (its case), keys crowding one
    bucket (their top bits equal: argsort's fallback), many repeats, and 0 to 3 keys.
    32-bit keys, as the one uniform table has them (the passage index's)."""
    dtype = np.uint32
    rng = np.random.default_rng(5)
    top = int(np.iinfo(dtype).max)
    made = {
        "spread": rng.integers(0, top, 5000, dtype=dtype),
        "crowded": rng.integers(0, 1 << 12, 5000, dtype=dtype),
        "repeated": rng.choice(np.array([7, top // 2 + 1, 3], dtype=dtype), 300),
        "tiny": np.array([9, 1, 4], dtype=dtype),
    }[keys]
    for size in (0, 1, 2, len(made)):
        chosen = made[:size]
        order = uniform_order(chosen)
        assert sorted(order.tolist()) == list(range(size))  # a permutation
        assert chosen[order].tolist() == sorted(chosen.tolist())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_uniform_table_finds_what_a_plain_one_does(seed: int) -> None:
    """A table whose batches are ordered by uniform_order answers every lookup as one
    sorted by argsort, through tails, buffers, promotions and merges."""
    rng = np.random.default_rng(seed)
    # 32-bit keys, as the one uniform table has them (the passage index's).
    plain = SortedTable(lanes=1, key_type=np.uint32)
    uniform = SortedTable(lanes=1, uniform=True, key_type=np.uint32)
    held: list[int] = []
    for batch in range(40):
        size = int(rng.choice([1, 7, TAIL_CAPACITY + 3, 2000]))
        keys = rng.integers(0, 2**32 - 1, (size, 1), dtype=np.uint32)
        if held and batch % 3 == 0:  # repeats of keys held already
            keys[: size // 2, 0] = rng.choice(np.array(held, dtype=np.uint32), size // 2)
        rows = np.arange(len(held), len(held) + size)
        held += keys[:, 0].tolist()
        plain.insert(keys, rows)
        uniform.insert(keys, rows)
        if batch % 10 == 9:
            plain.merge()
            uniform.merge()
    asked = np.array(rng.choice(np.array(held, dtype=np.uint32), 500), dtype=np.uint32)
    found_plain = plain.lookup_equal_many(0, asked)
    found_uniform = uniform.lookup_equal_many(0, asked)
    assert sorted(zip(*(part.tolist() for part in found_plain), strict=True)) == sorted(
        zip(*(part.tolist() for part in found_uniform), strict=True)
    )
    expected = sorted(
        (position, row)
        for position, key in enumerate(asked.tolist())
        for row, held_key in enumerate(held)
        if held_key == key
    )
    assert sorted(zip(*(part.tolist() for part in found_uniform), strict=True)) == expected


@pytest.mark.parametrize("seed", SEEDS)
def test_a_table_of_32_bit_keys_matches_a_dictionary(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A uniform table of uint32 keys (the passage index's: the top halves of spread
    fingerprints), through tails, buffers, promotions, merges with and without dropped
    rows, directories built and extended, and a bulk load (RunBuilder): every lookup
    against a brute force over the (key, row) pairs inserted, with a cap and deletions."""
    monkeypatch.setattr(sorted_table, "MERGE_MIN_ENTRIES", 8)
    monkeypatch.setattr(sorted_table, "PROMOTION_BATCH", 4)
    monkeypatch.setattr(sorted_table, "MIN_DIRECTORY_ENTRIES", 16)
    rng = np.random.default_rng(seed)
    table = SortedTable(lanes=1, uniform=True, key_type=np.uint32)
    # Keys spread over 32 bits, with a pool of repeats (a key many rows hold) and the
    # extremes, so that buckets hold runs and edges.
    pool = np.concatenate(
        [rng.integers(0, 2**32, 60, dtype=np.uint32), np.array([0, 2**32 - 1], np.uint32)]
    )
    held_keys: list[int] = []
    deleted = np.zeros(0, dtype=np.bool_)
    gone = np.zeros(0, dtype=np.bool_)  # dropped by a merge: no longer held at all
    for step in range(120):
        size = int(rng.choice([1, 3, TAIL_CAPACITY + 5, 700]))
        keys = rng.integers(0, 2**32, size, dtype=np.uint32)
        repeats = rng.random(size) < 0.4
        keys[repeats] = rng.choice(pool, int(repeats.sum()))
        rows = np.arange(len(held_keys), len(held_keys) + size)
        if step == 60:  # a bulk load, as a restart's
            builder = RunBuilder(lanes=1, key_type=np.uint32)
            builder.add(keys[: size // 2].reshape(-1, 1), rows[: size // 2])
            builder.add(keys[size // 2 :].reshape(-1, 1), rows[size // 2 :])
            table.insert_run(builder.finish())
        else:
            table.insert(keys.reshape(-1, 1), rows)
        held_keys += keys.tolist()
        deleted = np.concatenate([deleted, rng.random(size) < 0.05])
        gone = np.concatenate([gone, np.zeros(size, dtype=np.bool_)])
        if step % 17 == 16:
            dropping = step % 34 == 33
            table.merge(deleted.copy() if dropping else None)
            gone |= deleted if dropping else False
        table._check(one_entry_a_row=False)
        probes = np.concatenate([rng.choice(pool, 20), rng.integers(0, 2**32, 20, np.uint32)])
        cap = int(rng.integers(1, 40))
        positions, found = table.lookup_equal_many(0, probes, cap, deleted)
        held = np.array(held_keys, dtype=np.uint32)
        expected = []
        for at, probe in enumerate(probes.tolist()):
            holders = np.flatnonzero((held == probe) & ~gone)  # tombstoned ones count
            if len(holders) <= cap:
                expected += [(at, int(row)) for row in holders if not deleted[row]]
        assert sorted(zip(positions.tolist(), found.tolist(), strict=True)) == sorted(expected)
    assert table.snapshot().main.directory.shape[0] == 1  # the directed path was taken


def test_a_table_of_32_bit_keys_takes_only_32_bit_keys() -> None:
    """A wider key cast to uint32 would keep its low bits where the table keeps the top
    ones: refused, as a saved run of 64-bit keys is (a segment from before: rebuilt)."""
    table = SortedTable(lanes=1, key_type=np.uint32)
    with pytest.raises(ValueError, match="uint64"):
        table.insert(np.array([[1 << 40]], dtype=np.uint64), np.array([0]))
    wide = SortedTable(lanes=1)
    wide.insert(np.array([[5], [9]], dtype=np.uint64), np.array([0, 1]))
    wide.merge()
    with pytest.raises(SavedStateError, match="uint64"):
        table.adopt_saved(wide.saved_arrays())
    assert sorted_table.top_halves(np.array([(7 << 32) | 5, 2**64 - 1], np.uint64)).tolist() == [
        7,
        2**32 - 1,
    ]


@pytest.mark.parametrize("seed", range(3))
def test_a_large_batch_into_an_empty_table_is_sorted_lane_by_lane(seed: int) -> None:
    """A restart's one batch (over LANE_BY_LANE_ENTRIES entries, into an empty table, then
    merged): each lane holds the batch's (key, row) pairs in key order, and lookups find
    by a dictionary, before and after the merge that takes the buffer as it is."""
    rng = np.random.default_rng(seed)
    lanes, count = 4, LANE_BY_LANE_ENTRIES + 1000
    keys = rng.integers(0, 5000, size=(count, lanes), dtype=np.uint64)
    rows = np.arange(count) * 3
    table = SortedTable(lanes)
    table.insert(keys, rows)
    for merged in (False, True):
        if merged:
            assert table.merge()
        run = table.snapshot().main if merged else table.snapshot().buffer
        for lane in range(lanes):
            assert (np.diff(run.keys[lane].astype(np.int64)) >= 0).all()
            pairs = sorted(zip(run.keys[lane].tolist(), run.rows[lane].tolist(), strict=True))
            assert pairs == sorted(zip(keys[:, lane].tolist(), rows.tolist(), strict=True))
        for probe in rng.integers(0, 5000, size=20).tolist():
            lane = int(rng.integers(lanes))
            expected = {int(r) for r, k in zip(rows, keys[:, lane], strict=True) if k == probe}
            assert set(table.lookup_equal(lane, probe).tolist()) == expected


def test_sorted_table_merge_drops_marked_rows() -> None:
    table = SortedTable(lanes=2)
    keys = np.arange(20, dtype=np.uint64).reshape(10, 2)
    table.insert(keys, np.arange(10))
    dropped = np.zeros(10, dtype=np.bool_)
    dropped[[2, 5]] = True
    assert table.merge(dropped)
    table._check()
    assert sorted(table.rows().tolist()) == [0, 1, 3, 4, 6, 7, 8, 9]


# ---------------------------------------------------------------- HammingIndex


def brute_force_hamming(
    fingerprints: dict[int, int], deleted: set[int], query: int, distance: int
) -> list[tuple[int, int]]:
    rows = np.array([row for row in fingerprints if row not in deleted], dtype=np.int64)
    if len(rows) == 0:
        return []
    values = np.array([fingerprints[row] for row in rows.tolist()], dtype=np.uint64)
    distances = np.bitwise_count(values ^ np.uint64(query)).astype(np.int64)
    keep = distances <= distance
    return sorted(zip(rows[keep].tolist(), distances[keep].tolist(), strict=True))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("k", "blocks"), [(0, 1), (1, 2), (3, 4), (3, 6), (6, 7), (8, 9)])
def test_hamming_index_matches_brute_force(seed: int, k: int, blocks: int) -> None:
    rng = np.random.default_rng(seed * 100 + k)
    index = HammingIndex(max_distance=k, blocks=blocks)
    fingerprints: dict[int, int] = {}
    deleted: set[int] = set()
    centres = [int(x) for x in rng.integers(0, 2**64, size=8, dtype=np.uint64)]
    next_row = 0
    for _ in range(600):
        operation = rng.random()
        if operation < 0.45:
            count = batch_sizes(rng)
            # Plant fingerprints at exactly 0..k+2 bits from a few centres, the rest random.
            values = [
                flip_bits(rng, int(rng.choice(centres)), int(rng.integers(0, k + 3)))
                if rng.random() < 0.7
                else int(rng.integers(0, 2**64, dtype=np.uint64))
                for _ in range(count)
            ]
            rows = np.arange(next_row, next_row + count)
            next_row += count
            index.insert(np.array(values, dtype=np.uint64), rows)
            fingerprints.update(zip(rows.tolist(), values, strict=True))
        elif operation < 0.55 and fingerprints:
            victims = rng.choice(list(fingerprints), size=min(3, len(fingerprints)))
            index.delete(victims)
            deleted.update(victims.tolist())
        elif operation < 0.6:
            index.merge()
        else:
            query = flip_bits(rng, int(rng.choice(centres)), int(rng.integers(0, 3)))
            distance = int(rng.integers(0, k + 1))
            rows, distances = index.search(query, distance)
            found = sorted(zip(rows.tolist(), distances.tolist(), strict=True))
            assert found == brute_force_hamming(fingerprints, deleted, query, distance)
        index._check()
    assert len(index) == len(fingerprints) - len(deleted)


def test_hamming_finds_exactly_k_and_never_k_plus_one() -> None:
    rng = np.random.default_rng(7)
    for k in (0, 1, 3, 6, 8):
        index = HammingIndex(max_distance=k)
        query = int(rng.integers(0, 2**64, dtype=np.uint64))
        at_k = [flip_bits(rng, query, k) for _ in range(50)]
        beyond = [flip_bits(rng, query, k + 1) for _ in range(50)]
        index.insert(np.array(at_k + beyond, dtype=np.uint64), np.arange(100))
        rows, distances = index.search(query)
        assert rows.tolist() == list(range(50)) and set(distances.tolist()) == {k}
        index.merge()
        assert index.search(query)[0].tolist() == list(range(50))


def test_hamming_batch_search_equals_single_searches() -> None:
    rng = np.random.default_rng(11)
    index = HammingIndex(max_distance=3)
    values = rng.integers(0, 2**64, size=500, dtype=np.uint64)
    index.insert(values, np.arange(500))
    queries = np.array([flip_bits(rng, int(v), 2) for v in values[:40]], dtype=np.uint64)
    ends, rows, _ = index.search_many(queries)
    start = 0
    for query, end in zip(queries, ends.tolist(), strict=True):
        single_rows, _ = index.search(int(query))
        assert sorted(rows[start:end].tolist()) == sorted(single_rows.tolist())
        start = end


def test_hamming_rejects_a_distance_above_its_own_and_reused_rows() -> None:
    index = HammingIndex(max_distance=3)
    with pytest.raises(ValueError, match="max_distance"):
        index.search(0, 4)
    index.insert(np.array([1], dtype=np.uint64), np.array([0]))
    with pytest.raises(ValueError, match="new"):
        index.insert(np.array([2], dtype=np.uint64), np.array([0]))


# ---------------------------------------------------------------- LSHIndex


def brute_force_lsh(
    signatures: dict[int, np.ndarray],
    deleted: set[int],
    query: np.ndarray,
    index: LSHIndex,
    threshold: float,
) -> list[tuple[int, float]]:
    """Rows sharing a whole band of values (compared directly, not hashed) and agreeing on
    at least the threshold's share of positions."""
    live = [row for row in signatures if row not in deleted]
    if not live:
        return []
    matrix = np.array([signatures[row] for row in live])
    used = index.bands * index.rows_per_band
    shape = (len(live), index.bands, index.rows_per_band)
    band_equal = (matrix[:, :used].reshape(shape) == query[:used].reshape(shape[1:])).all(axis=2)
    agree = agreeing(matrix, query)
    keep = band_equal.any(axis=1) & (agree >= min_matches(threshold, index.num_perm))
    return sorted(
        (row, count / index.num_perm)
        for row, count in zip(np.array(live)[keep].tolist(), agree[keep].tolist(), strict=True)
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_lsh_index_matches_brute_force(seed: int, threshold: float) -> None:
    rng = np.random.default_rng(seed)
    num_perm = 32
    index = LSHIndex(threshold=threshold, num_perm=num_perm)
    bases = rng.integers(0, 2**32, size=(6, num_perm), dtype=np.uint32)
    signatures: dict[int, np.ndarray] = {}
    deleted: set[int] = set()

    def near(base: np.ndarray, agreement: float) -> np.ndarray:
        noise = rng.integers(0, 2**32, size=num_perm, dtype=np.uint32)
        return np.where(rng.random(num_perm) < agreement, base, noise).astype(np.uint32)

    next_row = 0
    for _ in range(600):
        operation = rng.random()
        if operation < 0.45:
            count = batch_sizes(rng)
            batch = np.array([near(bases[rng.integers(6)], rng.random()) for _ in range(count)])
            rows = np.arange(next_row, next_row + count)
            next_row += count
            index.insert(batch, rows)
            signatures.update(zip(rows.tolist(), batch, strict=True))
        elif operation < 0.55 and signatures:
            victims = rng.choice(list(signatures), size=min(3, len(signatures)))
            index.delete(victims)
            deleted.update(victims.tolist())
        elif operation < 0.6:
            index.merge()
        else:
            query = near(bases[rng.integers(6)], float(rng.uniform(0.6, 1.0)))
            bar = float(rng.choice([threshold, min(1.0, threshold + 0.1)]))
            rows, scores = index.search(query, bar)
            assert list(scores) == sorted(scores, reverse=True)
            found = sorted(zip(rows.tolist(), scores.tolist(), strict=True))
            assert found == brute_force_lsh(signatures, deleted, query, index, bar)
        index._check()


def test_lsh_batch_search_equals_single_searches_in_every_lane() -> None:
    """search_many over main (with its directory), middle, buffer and tail, each with
    tombstones, gives every query exactly what search gives it: brute force's rows and
    scores, best first."""
    rng = np.random.default_rng(31)
    num_perm, threshold = 32, 0.5
    index = LSHIndex(threshold=threshold, num_perm=num_perm)
    bases = rng.integers(0, 2**32, size=(300, num_perm), dtype=np.uint32)

    def near(sources: np.ndarray, agreement: float) -> np.ndarray:
        noise = rng.integers(0, 2**32, size=sources.shape, dtype=np.uint32)
        return np.where(rng.random(sources.shape) < agreement, sources, noise).astype(np.uint32)

    main, middle, buffer, tail = 70_000, 2_000, 2_000, 100
    bounds = np.cumsum([0, main, middle, buffer, tail]).tolist()
    total = bounds[-1]
    values = near(bases[rng.integers(0, len(bases), total)], 0.75)
    index.insert(values[:main], np.arange(main))
    index.merge()
    index.insert(values[bounds[1] : bounds[2]], np.arange(bounds[1], bounds[2]))
    # A merge in progress, caught when it has just moved the buffer to the middle run.
    table = index._table
    state = table.snapshot()
    table._snapshot = dataclasses.replace(state, middle=state.buffer, buffer=Run.empty(table.lanes))
    index.insert(values[bounds[2] : bounds[3]], np.arange(bounds[2], bounds[3]))
    for row in range(bounds[3], total):
        index.insert(values[row : row + 1], np.array([row]))
    state = table.snapshot()
    assert state.main.directory.shape[0] == index.bands
    assert (len(state.main), len(state.middle), len(state.buffer)) == (main, middle, buffer)
    assert state.tail_count == tail
    deleted = np.concatenate(
        [rng.choice(np.arange(low, high), 30, replace=False) for low, high in pairwise(bounds)]
    )
    index.delete(deleted)
    index._check()

    stored = values[rng.integers(0, total, 60)]
    # Copies of one band of a stored row, noise elsewhere: with a bar of 1/K every row
    # sharing that band is returned, so a single missed band lookup shows.
    one_band = rng.integers(0, 2**32, size=(60, num_perm), dtype=np.uint32)
    for query, source, band in zip(one_band, stored, rng.integers(0, index.bands, 60), strict=True):
        values_of_band = slice(band * index.rows_per_band, (band + 1) * index.rows_per_band)
        query[values_of_band] = source[values_of_band]
    alive = np.ones(total, dtype=np.bool_)
    alive[deleted] = False
    shape = (index.bands, index.rows_per_band)
    used = index.bands * index.rows_per_band
    banded = values[:, :used].reshape(total, *shape)
    most = 0
    for queries, bar in (
        (np.concatenate([near(stored, 0.9), near(bases[:20], 0.8), stored[:5]]), threshold),
        (one_band, 1 / num_perm),
    ):
        ends, rows, scores = index.search_many(queries, bar)
        start = 0
        for query, end in zip(queries, ends.tolist(), strict=True):
            batch = list(zip(rows[start:end].tolist(), scores[start:end].tolist(), strict=True))
            single = list(zip(*(part.tolist() for part in index.search(query, bar)), strict=True))
            assert batch == single
            agree = agreeing(values, query)
            shares_band = (banded == query[:used].reshape(shape)).all(axis=2).any(axis=1)
            keep = np.flatnonzero(alive & shares_band & (agree >= min_matches(bar, num_perm)))
            best_first = sorted(zip((-agree[keep]).tolist(), keep.tolist(), strict=True))
            assert batch == [(row, -negative / num_perm) for negative, row in best_first]
            start = end
        most = max(most, int(np.diff(ends, prepend=0).max()))
    assert most > 32  # long results take the library sorts


def test_lsh_candidate_probability_follows_the_s_curve() -> None:
    """P(candidate | Jaccard s) = 1 - (1 - s^r)^b within 4 standard errors."""
    rng = np.random.default_rng(5)
    num_perm = 128
    index = LSHIndex(threshold=0.8, num_perm=num_perm)
    trials = 400
    stored = rng.integers(0, 2**32, size=(trials, num_perm), dtype=np.uint32)
    index.insert(stored, np.arange(trials))
    for similarity in (0.5, 0.65, 0.75, 0.8, 0.85, 0.95):
        agree = rng.random((trials, num_perm)) < similarity
        noise = rng.integers(0, 2**32, size=(trials, num_perm), dtype=np.uint32)
        queries = np.where(agree, stored, noise).astype(np.uint32)
        # A bar of 1/K keeps every candidate: the band decides, not the verification.
        ends, rows, _ = index.search_many(queries, threshold=1 / num_perm)
        starts = np.concatenate([[0], ends[:-1]])
        hits = sum(int(i in rows[s:e]) for i, (s, e) in enumerate(zip(starts, ends, strict=True)))
        expected = float(candidate_probability(similarity, index.bands, index.rows_per_band))
        error = np.sqrt(expected * (1 - expected) / trials)
        assert abs(hits / trials - expected) <= 4 * error + 1e-9, (similarity, hits, expected)


def test_optimal_bands_fit_in_the_signature_and_move_with_the_threshold() -> None:
    previous_rows = 0
    for threshold in (0.3, 0.5, 0.7, 0.8, 0.9):
        bands, rows = optimal_bands(threshold, 128)
        assert bands * rows <= 128
        assert rows >= previous_rows
        previous_rows = rows
        # Weighted towards recall: a pair at the threshold is a candidate at least 90% of
        # the time, one 0.3 below it at most 20%.
        assert candidate_probability(threshold, bands, rows) >= 0.9
        assert candidate_probability(max(threshold - 0.3, 0.01), bands, rows) <= 0.2


def _bands_by_brute_force(threshold: float, num_perm: int) -> tuple[int, int]:
    """Every (b, r) with b r <= K, its weighted error areas by the trapezoid rule in
    plain Python over the same 2,001-point grid; the least, first in (b, r) order."""
    grid = [i / 2000 for i in range(2001)]

    def area(points: list[float], height: Callable[[float], float]) -> float:
        return sum(
            (right - left) * (height(left) + height(right)) / 2 for left, right in pairwise(points)
        )

    below = [s for s in grid if s <= threshold]
    above = [s for s in grid if s >= threshold]
    scored = []
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):

            def chance(s: float, bands: int = bands, rows: int = rows) -> float:
                return 1 - (1 - s**rows) ** bands

            error = 0.05 * area(below, chance) + 0.95 * area(above, lambda s: 1 - chance(s))
            scored.append((error, bands, rows))
    least = min(error for error, _, _ in scored)
    return next((b, r) for error, b, r in scored if error < least + 1e-9)


@pytest.mark.parametrize(
    ("threshold", "num_perm"), [(0.3, 16), (0.55, 16), (0.93, 16), (0.3, 64), (0.7, 64), (0.8, 128)]
)
def test_optimal_bands_are_those_of_a_brute_force_search(threshold: float, num_perm: int) -> None:
    assert optimal_bands(threshold, num_perm) == _bands_by_brute_force(threshold, num_perm)


# (threshold, K, b, r) as the first implementation (one pair at a time) chose them: the
# bands of a stored collection's index (segments, the Redis layout) must never change.
BANDS_CHOSEN_BEFORE = [
    (0.05, 128, 91, 1),
    (0.1, 128, 44, 1),
    (0.15, 128, 28, 1),
    (0.2, 128, 64, 2),
    (0.25, 128, 60, 2),
    (0.3, 128, 41, 2),
    (0.35, 128, 29, 2),
    (0.4, 128, 42, 3),
    (0.45, 128, 37, 3),
    (0.5, 128, 26, 3),
    (0.55, 128, 32, 4),
    (0.6, 128, 24, 4),
    (0.65, 128, 25, 5),
    (0.7, 128, 21, 6),
    (0.75, 128, 18, 7),
    (0.8, 128, 16, 8),
    (0.85, 128, 12, 10),
    (0.9, 128, 9, 14),
    (0.95, 128, 6, 21),
    (0.05, 256, 91, 1),
    (0.1, 256, 44, 1),
    (0.15, 256, 128, 2),
    (0.2, 256, 95, 2),
    (0.25, 256, 60, 2),
    (0.3, 256, 85, 3),
    (0.35, 256, 82, 3),
    (0.4, 256, 54, 3),
    (0.45, 256, 64, 4),
    (0.5, 256, 53, 4),
    (0.55, 256, 51, 5),
    (0.6, 256, 41, 5),
    (0.65, 256, 42, 6),
    (0.7, 256, 36, 7),
    (0.75, 256, 30, 8),
    (0.8, 256, 25, 10),
    (0.85, 256, 19, 13),
    (0.9, 256, 15, 17),
    (0.95, 256, 9, 28),
]


def test_optimal_bands_are_those_chosen_before() -> None:
    for threshold, num_perm, bands, rows in BANDS_CHOSEN_BEFORE:
        assert optimal_bands(threshold, num_perm) == (bands, rows), (threshold, num_perm)


# ---------------------------------------------------------------- ExactIndex


def test_exact_index_verifies_both_words_and_honours_tombstones() -> None:
    index = ExactIndex()
    hashes = np.array([[1, 7], [2, 7], [1, 7], [3, 9]], dtype=np.uint64)
    index.insert(hashes, np.arange(4))
    assert index.search(np.array([1, 7], dtype=np.uint64)).tolist() == [0, 2]
    index.delete(np.array([0]))
    assert index.search(np.array([1, 7], dtype=np.uint64)).tolist() == [2]
    index.merge()
    index._check()
    assert index.search(np.array([2, 7], dtype=np.uint64)).tolist() == [1]
    assert index.search(np.array([4, 4], dtype=np.uint64)).tolist() == []


# ---------------------------------------------------------------- threads


def run_threads(targets: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as error:  # reported to the test below
                errors.append(error)

        return run

    threads = [threading.Thread(target=guarded(target)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_readers_never_miss_an_entry_during_inserts_and_merges() -> None:
    """One writer, a merger merging continuously, two readers checking every answer."""
    rng = np.random.default_rng(9)
    total = 20_000
    values = rng.integers(0, 2**64, size=total, dtype=np.uint64)
    signatures = rng.integers(0, 2**32, size=(total, 64), dtype=np.uint32)
    hamming = HammingIndex(max_distance=3)
    lsh = LSHIndex(threshold=0.8, num_perm=64)
    inserted = [0]  # rows below this were inserted before the reader looks
    deleted: set[int] = set()
    done = threading.Event()

    def writer() -> None:
        writer_rng = np.random.default_rng(1)
        row = 0
        while row < total:
            count = int(writer_rng.choice([1, 1, 7, 300]))
            rows = np.arange(row, min(total, row + count))
            hamming.insert(values[rows], rows)
            lsh.insert(signatures[rows], rows)
            row = int(rows[-1]) + 1
            inserted[0] = row
            if writer_rng.random() < 0.05:
                victim = int(writer_rng.integers(row))
                deleted.add(victim)
                hamming.delete(np.array([victim]))
                lsh.delete(np.array([victim]))
        done.set()

    def merger() -> None:
        while not done.is_set():
            hamming.merge()
            lsh.merge()

    def reader(seed: int) -> None:
        reader_rng = np.random.default_rng(seed)
        checked = 0
        while not done.is_set() or checked < 200:
            limit = inserted[0]
            if limit == 0:
                continue
            row = int(reader_rng.integers(limit))
            hamming_rows, _ = hamming.search(int(values[row]))
            lsh_rows, _ = lsh.search(signatures[row])
            if row not in deleted:  # a concurrent delete may hide it, nothing else may
                assert row in hamming_rows.tolist() or row in deleted, row
                assert row in lsh_rows.tolist() or row in deleted, row
            checked += 1

    run_threads([writer, merger, lambda: reader(2), lambda: reader(3)])
    hamming._check()
    lsh._check()
    live = {row: int(values[row]) for row in range(total)}
    for row in range(0, total, 97):
        found = sorted(zip(*(a.tolist() for a in hamming.search(int(values[row]))), strict=True))
        assert found == brute_force_hamming(live, deleted, int(values[row]), 3)


def test_large_main_runs_are_searched_through_their_directory() -> None:
    """Past 65,536 entries the main run gets a directory; answers stay those of brute force."""
    rng = np.random.default_rng(21)
    count = 70_000
    centres = rng.integers(0, 2**64, size=50, dtype=np.uint64)
    values = np.array(
        [flip_bits(rng, int(centres[i % 50]), int(rng.integers(0, 6))) for i in range(count)],
        dtype=np.uint64,
    )
    hamming = HammingIndex(max_distance=3)
    hamming.insert(values, np.arange(count))
    hamming.merge()
    assert hamming._table.snapshot().main.directory.shape[0] == hamming.tables
    hamming._check()
    for query in values[:100]:
        distances = np.bitwise_count(values ^ query)
        expected = np.flatnonzero(distances <= 3)
        rows, found = hamming.search(int(query))
        assert sorted(rows.tolist()) == expected.tolist()
        assert sorted(found.tolist()) == sorted(distances[expected].tolist())

    num_perm = 16
    lsh = LSHIndex(threshold=0.5, num_perm=num_perm)
    bases = rng.integers(0, 2**32, size=(100, num_perm), dtype=np.uint32)
    noise = rng.integers(0, 2**32, size=(count, num_perm), dtype=np.uint32)
    signatures = np.where(rng.random((count, num_perm)) < 0.7, bases[np.arange(count) % 100], noise)
    signatures = signatures.astype(np.uint32)
    lsh.insert(signatures, np.arange(count))
    lsh.merge()
    assert lsh._table.snapshot().main.directory.shape[0] == lsh.bands
    signature_of = dict(enumerate(signatures))
    for query in signatures[:30]:
        rows, scores = lsh.search(query)
        found = sorted(zip(rows.tolist(), scores.tolist(), strict=True))
        assert found == brute_force_lsh(signature_of, set(), query, lsh, 0.5)


def test_lsh_verification_compares_the_low_16_bits_of_each_value() -> None:
    """Two signatures equal in a band agree at a position when their values' low 16 bits
    are equal (the rule of app/core/lsh.py), whether the index keeps those bits only (the
    default, 2 bytes a value) or the whole values; each kind of index refuses the
    other's saved values."""
    rng = np.random.default_rng(7)
    num_perm = 32
    stored = rng.integers(0, 2**32, size=(3, num_perm), dtype=np.uint32)
    query = stored[0].copy()
    # Positions 8 on of stored row 0 differ from the query in their high bits only: the
    # rule counts them as agreeing; rows 1 and 2 agree with it in the first band only.
    stored[0, 8:] ^= np.uint32(0xABCD0000)
    stored[1, :8] = query[:8]
    stored[2, :8] = query[:8]
    stored[2, 8:20] = query[8:20] ^ np.uint32(0x00010000)  # high bits: agree
    kinds = [LSHIndex(0.5, num_perm, bands=(4, 8)), LSHIndex(0.5, num_perm, (4, 8), True)]
    for index in kinds:
        index.insert(stored, np.arange(3))
        rows, scores = index.search(query, 0.25)
        expected = sorted(
            ((row, agreeing(stored[row], query) / num_perm) for row in range(3)),
            key=lambda pair: (-pair[1], pair[0]),
        )
        assert list(zip(rows.tolist(), scores.tolist(), strict=True)) == expected
        assert expected[0] == (0, 1.0) and expected[1] == (2, 20 / num_perm)
    short, whole = kinds
    assert short.signatures(np.arange(3)).dtype == np.uint16
    assert (whole.signatures(np.arange(3)) == stored).all()
    assert short.memory_bytes() < whole.memory_bytes()
    for whole_values, other in ((False, whole), (True, short)):
        with pytest.raises(SavedStateError):
            LSHIndex(0.5, num_perm, (4, 8), whole_values).adopt_saved(other.saved_arrays())
