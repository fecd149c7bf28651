"""The class table of word tokenisation kept beside the kernels (app/kernel_tables.py): a
start adopts exactly the table it would make, and never a damaged or other one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app import kernel_tables
from app.core import fingerprint


@pytest.fixture
def no_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as at a start: no table made yet (restored after the test)."""
    monkeypatch.setattr(fingerprint, "_char_classes", None)


@pytest.mark.usefixtures("no_table")
def test_a_kept_table_is_adopted_and_is_the_table_made(tmp_path: Path) -> None:
    kernel_tables.ready_char_classes(tmp_path)  # made, and kept
    path = kernel_tables.char_classes_path(tmp_path)
    assert path.exists()
    fingerprint._char_classes = None
    assert kernel_tables.load_char_classes(tmp_path)
    adopted = fingerprint.char_classes()
    assert np.array_equal(adopted, fingerprint.computed_char_classes())
    assert adopted.flags.writeable  # numba would compile again for a read-only array
    # Made already: nothing read or written again.
    path.unlink()
    kernel_tables.ready_char_classes(tmp_path)
    assert not path.exists()


@pytest.mark.usefixtures("no_table")
@pytest.mark.parametrize("damage", ["flipped", "truncated", "empty"])
def test_a_damaged_table_is_not_adopted(tmp_path: Path, damage: str) -> None:
    kernel_tables.save_char_classes(tmp_path)
    path = kernel_tables.char_classes_path(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flipped":
        data[0x4E00] ^= 1  # a CJK ideograph's class
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    fingerprint._char_classes = None
    assert not kernel_tables.load_char_classes(tmp_path)
    assert not fingerprint.has_char_classes()
    kernel_tables.ready_char_classes(tmp_path)  # made again, and kept whole
    assert np.array_equal(fingerprint.char_classes(), fingerprint.computed_char_classes())
    fingerprint._char_classes = None
    assert kernel_tables.load_char_classes(tmp_path)


@pytest.mark.usefixtures("no_table")
def test_a_table_kept_under_another_key_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel_tables.save_char_classes(tmp_path)
    fingerprint._char_classes = None
    # Another Unicode version (another Python) makes another table under another name.
    monkeypatch.setattr(fingerprint.unicodedata, "unidata_version", "0.0.0")
    assert not kernel_tables.load_char_classes(tmp_path)


def test_a_table_of_another_shape_is_not_adopted(no_table: None) -> None:
    assert not fingerprint.adopt_char_classes(np.zeros(10, dtype=np.uint8))
    assert not fingerprint.adopt_char_classes(np.full(fingerprint.UNICODE_SIZE, 9, np.uint8))
    assert not fingerprint.has_char_classes()
