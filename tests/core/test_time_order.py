"""The core structures of retention against brute force: TimeOrder (rows by timestamp),
RowArray.release and PagedList (per-row memory given back by pages)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.core.paged_list import PagedList
from app.core.reservations import PAGE_BYTES
from app.core.row_array import RowArray
from app.core.time_order import TimeOrder


@pytest.mark.parametrize("seed", range(6))
def test_time_order_takes_entries_as_a_sorted_list_would(seed: int) -> None:
    rng = random.Random(seed)
    order = TimeOrder()
    reference: list[tuple[int, int]] = []  # (timestamp, row), kept sorted
    next_row = 0
    dead: set[int] = set()
    for _ in range(300):
        action = rng.random()
        if action < 0.5:
            size = rng.choice([1, 3, 50, 256])
            base = next_row * 10
            # In order, slightly out of order, or far out of order; ties on purpose.
            spread = rng.choice([0, 20, 5000])
            stamps = [base + rng.randint(-spread, spread) // 7 * 7 for _ in range(size)]
            rows = list(range(next_row, next_row + size))
            next_row += size
            order.insert(np.array(stamps), np.array(rows))
            reference.extend(zip(stamps, rows, strict=True))
            reference.sort()
        elif action < 0.7 and reference:
            cut = rng.choice(reference)[0] + rng.randint(-3, 3)
            stamps, rows = order.take_before(cut)
            expected = [entry for entry in reference if entry[0] < cut]
            reference = [entry for entry in reference if entry[0] >= cut]
            assert list(zip(stamps.tolist(), rows.tolist(), strict=True)) == expected
        elif action < 0.9:
            count = rng.choice([0, 1, 7, 300, 10_000])
            stamps, rows = order.take_oldest(count)
            expected, reference = reference[:count], reference[count:]
            assert list(zip(stamps.tolist(), rows.tolist(), strict=True)) == expected
        elif reference:
            dead.update(row for _, row in rng.sample(reference, len(reference) // 3))
            dropped = order.compact(lambda rows: ~np.isin(rows, list(dead)))
            before = len(reference)
            reference = [entry for entry in reference if entry[1] not in dead]
            assert dropped == before - len(reference)
        order._check()
        assert len(order) == len(reference)
        assert order.oldest() == (reference[0] if reference else None)
        cut = rng.randint(-100, next_row * 10 + 100)
        assert order.count_before(cut) == sum(1 for entry in reference if entry[0] < cut)
    assert order.runs <= 2 * max(1, len(reference)).bit_length() + 2


def test_time_order_refuses_rows_that_do_not_ascend() -> None:
    order = TimeOrder()
    order.insert(np.array([5, 6]), np.array([3, 4]))
    with pytest.raises(ValueError):
        order.insert(np.array([1]), np.array([4]))


def resident_pages(array: RowArray) -> int:
    """Pages of the array's mapping that are resident (mincore, through /proc)."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    address = array.array.ctypes.data
    pages = array.array.nbytes // PAGE_BYTES
    vector = (ctypes.c_ubyte * pages)()
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(pages * PAGE_BYTES), vector) == 0
    return sum(v & 1 for v in vector)


def test_row_array_release_gives_back_whole_dead_pages_and_keeps_the_rest() -> None:
    rows_total = 20_000
    array = RowArray(np.uint32, (128,))  # 512-byte rows: 8 to a page
    array.ensure(rows_total)
    values = np.arange(rows_total * 128, dtype=np.uint32).reshape(rows_total, 128)
    array.array[:rows_total] = values
    dead = np.zeros(rows_total + 10_000, dtype=np.bool_)
    rng = np.random.default_rng(1)
    gone = np.concatenate([np.arange(0, 12_000), rng.choice(rows_total, 500, replace=False)])
    dead[gone] = True
    before = resident_pages(array)
    released = array.release(np.unique(gone), lambda rows: dead[rows])
    assert released >= 12_000 // 8
    assert resident_pages(array) <= before - released
    live = np.flatnonzero(~dead[:rows_total])
    assert np.array_equal(array.array[live], values[live])  # nothing held was touched
    # Growth copies the held pages only: the released ones stay out of memory.
    array.ensure(rows_total + 10_000)
    assert np.array_equal(array.array[live], values[live])
    assert resident_pages(array) <= (rows_total - 12_000) // 8 + 2
    array.array[rows_total : rows_total + 5] = 7
    assert array.nbytes == (rows_total + 10_000) * 512 - array.released_pages * PAGE_BYTES


def test_paged_list_drops_a_page_when_its_last_object_goes() -> None:
    names = PagedList[str]()
    rows = np.arange(0, 10_000)
    names.assign(rows, [f"d{i}" if i % 3 else None for i in range(10_000)])
    assert [names[i] for i in (0, 1, 9_999, 20_000)] == [None, "d1", None, None]
    assert names.pages == 3
    assert names.release(np.arange(0, PagedList.PAGE_ROWS)) == PagedList.PAGE_ROWS * 2 // 3
    assert names.pages == 2 and names[5] is None and names[PagedList.PAGE_ROWS + 1] is not None


def test_paged_list_answers_as_a_dict_of_the_rows_set() -> None:
    # Runs (one slice, also over a page's end), scattered rows, None values, and values
    # that are sequences (each one object, never unpacked into slots).
    rng = np.random.default_rng(7)
    stored = PagedList[object]()
    reference: dict[int, object] = {}
    next_row = 0
    for step in range(400):
        size = int(rng.integers(1, 600))
        if rng.random() < 0.7:
            rows = np.arange(next_row, next_row + size)
        else:
            rows = np.sort(rng.choice(np.arange(next_row, next_row + 3 * size), size, False))
        next_row = int(rows[-1]) + 1
        # Some None, none (a run is then one slice), or lists only.
        kinds = [rng.integers(0, 5, size), rng.integers(1, 5, size), np.full(size, 2)][step % 3]
        values: list[object] = [
            [None, f"id{row}", [row, step], {"row": row}, (row,)][kind]
            for row, kind in zip(rows.tolist(), kinds.tolist(), strict=True)
        ]
        stored.assign(rows, values)
        reference.update(
            (r, v) for r, v in zip(rows.tolist(), values, strict=True) if v is not None
        )
        if step % 5 == 4:
            low = int(rng.integers(0, next_row))
            gone = np.arange(low, min(next_row, low + int(rng.integers(1, 3000))))
            if rng.random() < 0.5:
                gone = gone[rng.random(len(gone)) < 0.5]
            held = sum(reference.pop(r, None) is not None for r in gone.tolist())
            assert stored.release(gone) == held
    probe = list(range(0, next_row + 10))
    assert [stored[row] for row in probe] == [reference.get(row) for row in probe]
    for start in rng.integers(0, next_row, 50).tolist():
        run = list(range(start, start + int(rng.integers(2, 300))))
        assert stored.get_many(run) == [reference.get(row) for row in run]
    # The first half released: its pages are dropped, a page partly held stays.
    first_half = np.arange(0, next_row // 2)
    held = sum(reference.pop(row, None) is not None for row in first_half.tolist())
    assert stored.release(first_half) == held
    assert stored.pages == len({row // PagedList.PAGE_ROWS for row in reference})
