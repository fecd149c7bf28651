"""Checksums taken ahead of a start (app/storage/segment_checks.py): each is the file's
xxh3-64, handed out only for the file as it is, and the open and the thread never both
hash a file nor wait for work the other could do."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xxhash

from app.storage import segment_checks
from app.storage.segment_checks import ChecksumsAhead
from app.storage.segments import SegmentDamaged, SegmentStore
from tests.storage.test_segments import SETTINGS, arrays_of, assert_same


def files(tmp_path: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(count)
    paths = []
    for number in range(count):
        path = tmp_path / f"f{number}.bin"
        # Sizes around the 16 MB chunk, and an empty file.
        size = [0, 5, (1 << 24) + 3][number % 3]
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(path)
    return paths


def test_checksums_are_those_of_the_files(tmp_path: Path) -> None:
    paths = files(tmp_path, 6)
    ahead = ChecksumsAhead(iter(paths))
    ahead.wait()
    for path in paths:
        assert ahead.checksum(path) == xxhash.xxh3_64_hexdigest(path.read_bytes())
        ahead._check()
    # Handed out once: a second open hashes for itself.
    assert ahead.checksum(paths[0]) is None


def test_a_file_replaced_after_it_was_hashed_is_left_to_the_open(tmp_path: Path) -> None:
    paths = files(tmp_path, 2)
    ahead = ChecksumsAhead(iter(paths))
    ahead.wait()
    replacement = tmp_path / "replacement"
    replacement.write_bytes(b"other bytes")
    os.replace(replacement, paths[1])
    assert ahead.checksum(paths[1]) is None
    assert ahead.checksum(paths[0]) == xxhash.xxh3_64_hexdigest(paths[0].read_bytes())


def test_a_file_not_reached_yet_is_taken_over_by_the_open_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = files(tmp_path, 3)
    hashed: list[Path] = []
    real = segment_checks.file_checksum

    def recorded(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(segment_checks, "file_checksum", recorded)
    go_on = threading.Event()

    def listing() -> Iterator[Path]:
        yield paths[0]
        go_on.wait()
        yield from paths[1:]

    ahead = ChecksumsAhead(listing())
    # paths[2] is not reached while the listing waits: the open hashes it itself.
    assert ahead.checksum(paths[2]) is None
    go_on.set()
    ahead.wait()
    assert hashed == [paths[0], paths[1]]
    assert ahead.checksum(paths[1]) == xxhash.xxh3_64_hexdigest(paths[1].read_bytes())
    ahead._check()


def test_the_file_being_hashed_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = files(tmp_path, 3)
    entered, release = threading.Event(), threading.Event()
    real = segment_checks.file_checksum

    def held(path: Path) -> str:
        entered.set()
        release.wait()
        return real(path)

    monkeypatch.setattr(segment_checks, "file_checksum", held)
    ahead = ChecksumsAhead(iter(paths[2:]))
    assert entered.wait(60)
    answers: list[str | None] = []
    asking = threading.Thread(target=lambda: answers.append(ahead.checksum(paths[2])))
    asking.start()
    # Released only once the caller waits on the file being hashed (it must not take
    # it over: that would hash it twice).
    deadline = time.monotonic() + 60
    while not ahead._condition._waiters:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the caller never waited"
    release.set()
    asking.join()
    assert answers == [xxhash.xxh3_64_hexdigest(paths[2].read_bytes())]


def test_a_segment_opened_with_checksums_ahead_reads_as_written(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments")
    written = {name: arrays_of(seed, 5_000) for name, seed in (("a", 1), ("b/c", 2))}
    for name, arrays in written.items():
        store.write(name, SETTINGS, 5_000, arrays)
    starting = SegmentStore(tmp_path / "segments")
    ahead = starting.check_ahead()
    ahead.wait()
    assert len(ahead._done) == sum(len(arrays) for arrays in written.values())
    for name, arrays in written.items():
        segment = starting.open(name, SETTINGS)
        assert segment is not None
        assert_same(segment.arrays, arrays)
    assert not ahead._done, "every checksum taken ahead was used by the open"


def test_a_file_damaged_after_it_was_hashed_ahead_is_still_refused(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments")
    store.write("c", SETTINGS, 5_000, arrays_of(1, 5_000))
    starting = SegmentStore(tmp_path / "segments")
    starting.check_ahead().wait()
    target = max(store.directory("c").glob("*.bin"), key=lambda path: path.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1
    damaged = target.with_suffix(".new")
    damaged.write_bytes(bytes(data))
    os.replace(damaged, target)
    with pytest.raises(SegmentDamaged, match="checksum"):
        starting.open("c", SETTINGS)
