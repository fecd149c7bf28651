"""Index segment files (app/storage/segments.py): what is written is read back bit for bit,
anything damaged is refused, and a kill at any step of a write leaves a usable segment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash

from app.core.row_array import RowArray
from app.core.saved import SavedArrays
from app.storage import segments as segments_module
from app.storage.segments import (
    MANIFEST,
    WRITE_STEPS,
    SegmentDamaged,
    SegmentStore,
    settings_hash,
)

SETTINGS = settings_hash({"simhash": {"max_distance": 3}})


def arrays_of(seed: int, rows: int = 70_000) -> SavedArrays:
    """Arrays of every kind a segment holds: a large per-row column, runs, empties."""
    rng = np.random.default_rng(seed)
    return {
        "minhash/values@rows": rng.integers(0, 2**32, (rows, 16), dtype=np.uint32),
        "minhash/table/main.keys": np.sort(rng.integers(0, 2**64, (3, rows), dtype=np.uint64)),
        "minhash/table/main.rows": rng.integers(0, rows, (3, rows), dtype=np.int32),
        "minhash/table/middle.directory": np.zeros((0, 0), dtype=np.int64),
        "minhash/book/deleted@rows": rng.random(rows) < 0.1,
        "minhash/book/counts": np.array([7, 3], dtype=np.int64),
        "empty@rows": np.zeros(0, dtype=np.uint64),
    }


def assert_same(read: SavedArrays, written: SavedArrays) -> None:
    assert sorted(read) == sorted(written)
    for name, array in written.items():
        assert read[name].dtype == array.dtype, name
        assert read[name].shape == array.shape, name
        assert np.array_equal(read[name], array), name


def test_written_arrays_are_read_back_exactly_and_columns_can_be_adopted(
    tmp_path: Path,
) -> None:
    store = SegmentStore(tmp_path / "segments")
    written = arrays_of(1)
    result = store.write("news/en", SETTINGS, 70_000, written)
    assert result.files == len(written)
    assert result.nbytes == sum(array.nbytes for array in written.values())
    segment = store.open("news/en", SETTINGS)
    assert segment is not None and segment.rows_below == 70_000
    assert_same(segment.arrays, written)
    # A per-row column is held as it was read (no second copy); runs are mapped.
    column = RowArray(np.uint32, (16,))
    assert column.take(segment.arrays["minhash/values@rows"])
    assert not segment.arrays["minhash/table/main.keys"].flags.owndata
    # A second write replaces the first and leaves only its own files.
    again = arrays_of(2)
    assert store.write("news/en", SETTINGS, 80_000, again).generation == 2
    reopened = store.open("news/en", SETTINGS)
    assert reopened is not None and reopened.rows_below == 80_000
    assert_same(reopened.arrays, again)
    files = {path.name for path in store.directory("news/en").iterdir()}
    assert files == {MANIFEST} | {f"g00000002-{n:04d}.bin" for n in range(len(again))}
    assert store.open("other", SETTINGS) is None
    store.remove("news/en")
    assert store.open("news/en", SETTINGS) is None


def _damage_file(store: SegmentStore, name: str, how: str) -> None:
    directory = store.directory("c")
    body = json.loads((directory / MANIFEST).read_text())["body"]
    path = directory / body["arrays"][name]["file"]
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "bit flipped":
        data[len(data) // 3] ^= 0x10
        path.write_bytes(bytes(data))
    elif how == "missing":
        path.unlink()


def _rewrite_manifest(store: SegmentStore, change: dict[str, object]) -> None:
    """A manifest with a valid checksum of its own, but other contents."""
    path = store.directory("c") / MANIFEST
    body = {**json.loads(path.read_text())["body"], **change}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    path.write_text(json.dumps({"body": body, "xxh3": xxhash.xxh3_64_hexdigest(text.encode())}))


def _edit_manifest(store: SegmentStore, change: dict[str, object]) -> None:
    """A manifest whose contents changed after its checksum was taken."""
    path = store.directory("c") / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["body"].update(change)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: _damage_file(s, "minhash/values@rows", "truncated"), "holds"),
        (lambda s: _damage_file(s, "minhash/table/main.keys", "truncated"), "holds"),
        (lambda s: _damage_file(s, "minhash/values@rows", "bit flipped"), "checksum"),
        (lambda s: _damage_file(s, "minhash/table/main.rows", "bit flipped"), "checksum"),
        (lambda s: _damage_file(s, "minhash/book/deleted@rows", "bit flipped"), "checksum"),
        (lambda s: _damage_file(s, "minhash/book/deleted@rows", "missing"), "missing"),
        (lambda s: _rewrite_manifest(s, {"format": 0}), "format version"),
        (lambda s: _rewrite_manifest(s, {"settings": "another"}), "other settings"),
        (lambda s: _rewrite_manifest(s, {"collection": "d"}), "names"),
        (
            lambda s: (s.directory("c") / MANIFEST).write_text('{"body": {"format": 1'),
            "cannot be read",
        ),
        (lambda s: _edit_manifest(s, {"rows_below": 7}), "checksum"),
    ],
    ids=[
        "truncated column",
        "truncated run",
        "flipped column",
        "flipped run",
        "flipped narrow column",
        "missing file",
        "stale version",
        "other settings",
        "other collection",
        "torn manifest",
        "edited manifest",
    ],
)
@pytest.mark.parametrize("ahead", [False, True], ids=["read by the open", "read ahead"])
def test_a_damaged_segment_is_refused(
    tmp_path: Path, damage: object, message: str, ahead: bool
) -> None:
    store = SegmentStore(tmp_path / "segments")
    store.write("c", SETTINGS, 70_000, arrays_of(3))
    assert store.open("c", SETTINGS) is not None
    damage(store)  # type: ignore[operator]
    # A start's store: its files read and hashed ahead (as neardup serve's), or by the open.
    starting = SegmentStore(tmp_path / "segments")
    if ahead:
        starting.read_ahead().wait()  # every file done before the open asks
    with pytest.raises(SegmentDamaged, match=message):
        starting.open("c", SETTINGS)


KILLED_WRITE = """
import sys
from pathlib import Path
from app.storage.segments import SegmentStore
from tests.storage.test_segments import arrays_of
store = SegmentStore(Path(sys.argv[1]), fail_at=sys.argv[2])
store.write("c", sys.argv[3], 80_000, arrays_of(2))
"""


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_write_killed_at_any_step_leaves_the_old_segment_or_the_new(
    tmp_path: Path, step: str
) -> None:
    root = tmp_path / "segments"
    store = SegmentStore(root)
    first = arrays_of(1)
    store.write("c", SETTINGS, 70_000, first)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITE, str(root), step, SETTINGS],
        capture_output=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert killed.returncode == -9, killed.stderr.decode()
    segment = store.open("c", SETTINGS)
    assert segment is not None
    renamed = WRITE_STEPS.index(step) >= WRITE_STEPS.index("renamed")
    assert segment.rows_below == (80_000 if renamed else 70_000)
    assert_same(segment.arrays, arrays_of(2) if renamed else first)
    # The next write clears what the killed one left behind.
    store.write("c", SETTINGS, 90_000, arrays_of(4))
    names = {path.name for path in store.directory("c").iterdir()}
    assert names == {MANIFEST} | {f"g{3:08d}-{n:04d}.bin" for n in range(len(first))}


def test_a_write_that_fails_leaves_the_current_segment_and_no_stray_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SegmentStore(tmp_path / "segments")
    first = arrays_of(1)
    store.write("c", SETTINGS, 70_000, first)
    written = segments_module._write_file
    calls = []

    def full_disk(path: Path, array: np.ndarray) -> tuple[str, int]:
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return written(path, array)

    monkeypatch.setattr(segments_module, "_write_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.write("c", SETTINGS, 80_000, arrays_of(2))
    names = {path.name for path in store.directory("c").iterdir()}
    assert names == {MANIFEST} | {f"g00000001-{n:04d}.bin" for n in range(len(first))}
    segment = store.open("c", SETTINGS)
    assert segment is not None and segment.rows_below == 70_000
    assert_same(segment.arrays, first)
