"""RowArray growth: within its reservation a longer view of the same memory (no copy on
the event loop), beyond it a move that keeps every held row; checked against a dict of
what was written."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core import reservations
from app.core.reservations import reserved_rows, reserved_rows_of_file
from app.core.row_array import RowArray


def _fill(array: RowArray, rows: range, written: dict[int, np.ndarray]) -> None:
    for row in rows:
        array.ensure(row + 1)
        value = np.full(array.array.shape[1:], row * 7 + 1, dtype=array.array.dtype)
        array.array[row] = value
        written[row] = value


def _assert_holds(array: RowArray, written: dict[int, np.ndarray], released: set[int]) -> None:
    for row, value in written.items():
        expected = 0 if row in released else value
        assert np.array_equal(array.array[row], np.broadcast_to(expected, value.shape)), row


def test_growth_within_the_reservation_copies_nothing() -> None:
    signatures = RowArray(np.uint32, (128,))  # 512 bytes a row: mapped from 2,048 rows
    written: dict[int, np.ndarray] = {}
    _fill(signatures, range(3000), written)
    assert signatures._mapping is not None
    before = signatures.array
    _fill(signatures, range(3000, 40_000), written)
    assert signatures.array.shape[0] > before.shape[0]
    # The reader's old view is the start of the same memory, still with its rows.
    assert np.shares_memory(before, signatures.array)
    assert np.array_equal(before[:3000], signatures.array[:3000])
    _assert_holds(signatures, written, set())


def test_moves_past_the_reservation_keep_held_rows_and_released_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reservations, "RESERVE_ROWS", 2048)
    monkeypatch.setattr(reservations, "RESERVE_FACTOR", 1)
    signatures = RowArray(np.uint32, (128,))
    written: dict[int, np.ndarray] = {}
    _fill(signatures, range(2500), written)
    # Rows 0-799 dead: whole pages of 8 rows given back, then the array moves twice.
    dead = set(range(800))
    released = signatures.release(np.arange(800), lambda rows: rows < 800)
    assert released == 100
    moves = 0
    for stop in (6000, 12_000):
        mapping = signatures._mapping
        _fill(signatures, range(len(written), stop), written)
        moves += signatures._mapping is not mapping
    assert moves == 2
    _assert_holds(signatures, written, dead)
    assert signatures.nbytes == len(written) * 512 - 100 * mmap.PAGESIZE


def test_without_address_space_to_reserve_it_grows_by_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_mmap = mmap.mmap
    asked: list[int] = []

    def no_reservations(fileno: int, length: int, **options: Any) -> mmap.mmap:
        asked.append(length)
        if options.get("flags", 0) & reservations._MAP_NORESERVE:
            raise OSError(12, "Cannot allocate memory")
        return real_mmap(fileno, length, **options)

    monkeypatch.setattr(reservations.mmap, "mmap", no_reservations)
    stamps = RowArray(np.int64)
    written: dict[int, np.ndarray] = {}
    _fill(stamps, range(300_000), written)
    assert stamps._reserved.shape[0] == stamps.array.shape[0]  # exactly what it needs
    assert len(asked) >= 4  # a reservation tried and refused, then a plain mapping, each move
    _assert_holds(stamps, written, set())


def test_a_loaded_column_is_adopted_not_copied() -> None:
    """A column made by reserved_rows (a restart's signatures) becomes the RowArray's own
    memory: no copy; growth stays in its reservation; written rows keep their values.
    Anything else (a heap array, a view not at the start, a second adoption) is refused."""
    width = (128,)
    column = reserved_rows(20_000, width, np.uint32)
    column[:] = np.arange(20_000, dtype=np.uint32)[:, None]
    signatures = RowArray(np.uint32, width)
    assert signatures.adopt(column)
    assert np.shares_memory(signatures.array, column) and signatures.size == 20_000
    signatures.ensure(30_000)  # within the reservation: the same memory, longer
    assert np.shares_memory(signatures.array, column)
    signatures.array[29_999] = 5
    assert (signatures.array[:20_000, 0] == np.arange(20_000)).all()
    assert not signatures.adopt(reserved_rows(20_000, width, np.uint32))  # not empty now
    assert not RowArray(np.uint32, width).adopt(np.zeros((20_000, 128), np.uint32))
    assert not RowArray(np.uint32, width).adopt(reserved_rows(20_000, width, np.uint32)[1:])
    assert not RowArray(np.uint64, (64,)).adopt(reserved_rows(20_000, width, np.uint32))


def test_a_file_mapped_over_a_reservation_reads_as_the_file_and_is_never_written(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(4)
    values = rng.integers(0, 2**32, size=(5000, 128), dtype=np.uint32)  # 2.5 MB, mapped
    path = tmp_path / "column.bin"
    path.write_bytes(values.tobytes())
    with open(path, "rb", buffering=0) as file:
        mapped = reserved_rows_of_file(file, len(values), (128,), np.uint32)
    if mapped is None:
        pytest.skip("no file mapping over a reservation on this platform")
    assert np.array_equal(mapped, values)
    column = RowArray(np.uint32, (128,))
    assert column.take(mapped)  # adopted, not copied
    column.array[10] = 7  # a row written: a private copy of its page
    column.ensure(40_000)  # grows in place, past the file: zeros
    column.array[39_999] = 9
    assert not column.array[5000:39_999].any() and column.array[39_999, 0] == 9
    assert np.array_equal(column.array[11:5000], values[11:5000])
    assert path.read_bytes() == values.tobytes()  # the file never changes
