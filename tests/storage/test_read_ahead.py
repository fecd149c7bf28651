"""Segment files read ahead of a start (app/storage/read_ahead.py): what a file's work made
is handed out only for the file as it is, and the open and the thread never both do a
file nor wait for work the other could do; a segment read ahead is the segment."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xxhash

from app.storage.read_ahead import ReadAhead
from app.storage.segments import SegmentDamaged, SegmentStore
from tests.storage.test_segments import SETTINGS, arrays_of, assert_same


def files(tmp_path: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(count)
    paths = []
    for number in range(count):
        path = tmp_path / f"f{number}.bin"
        path.write_bytes(rng.integers(0, 256, [0, 5, 70_000][number % 3], np.uint8).tobytes())
        paths.append(path)
    return paths


def digest(path: Path) -> str:
    return xxhash.xxh3_64_hexdigest(path.read_bytes())


def hashing(paths: list[Path]) -> Iterator[tuple[Path, object]]:
    return ((path, digest) for path in paths)


def test_what_was_made_of_each_file_is_handed_out_once(tmp_path: Path) -> None:
    paths = files(tmp_path, 6)
    ahead: ReadAhead[str] = ReadAhead(hashing(paths))  # type: ignore[arg-type]
    ahead.wait()
    for path in paths:
        assert ahead.take(path) == digest(path)
        ahead._check()
    # Handed out once: a second open does it itself.
    assert ahead.take(paths[0]) is None


def test_a_file_replaced_after_it_was_read_is_left_to_the_open(tmp_path: Path) -> None:
    paths = files(tmp_path, 2)
    ahead: ReadAhead[str] = ReadAhead(hashing(paths))  # type: ignore[arg-type]
    ahead.wait()
    replacement = tmp_path / "replacement"
    replacement.write_bytes(b"other bytes")
    os.replace(replacement, paths[1])
    assert ahead.take(paths[1]) is None
    assert ahead.take(paths[0]) == digest(paths[0])


def test_a_work_that_fails_leaves_the_file_to_the_open(tmp_path: Path) -> None:
    paths = files(tmp_path, 2)

    def failing(path: Path) -> str:
        raise ValueError("cannot read this one")

    ahead = ReadAhead(iter([(paths[0], failing), (paths[1], digest)]))
    ahead.wait()
    assert ahead.take(paths[0]) is None
    assert ahead.take(paths[1]) == digest(paths[1])


def test_a_file_not_reached_yet_is_taken_over_by_the_open_and_skipped(tmp_path: Path) -> None:
    paths = files(tmp_path, 3)
    done: list[Path] = []

    def recorded(path: Path) -> str:
        done.append(path)
        return digest(path)

    go_on = threading.Event()

    def listing() -> Iterator[tuple[Path, object]]:
        yield paths[0], recorded
        go_on.wait()
        yield from ((path, recorded) for path in paths[1:])

    ahead: ReadAhead[str] = ReadAhead(listing())  # type: ignore[arg-type]
    # paths[2] is not reached while the listing waits: the open does it itself.
    assert ahead.take(paths[2]) is None
    go_on.set()
    ahead.wait()
    assert done == [paths[0], paths[1]]
    assert ahead.take(paths[1]) == digest(paths[1])
    ahead._check()


def test_the_file_in_hand_is_waited_for(tmp_path: Path) -> None:
    paths = files(tmp_path, 3)
    entered, release = threading.Event(), threading.Event()

    def held(path: Path) -> str:
        entered.set()
        release.wait()
        return digest(path)

    ahead = ReadAhead(iter([(paths[2], held)]))
    assert entered.wait(60)
    answers: list[str | None] = []
    asking = threading.Thread(target=lambda: answers.append(ahead.take(paths[2])))
    asking.start()
    # Released only once the caller waits on the file in hand (it must not take it
    # over: that would do it twice).
    deadline = time.monotonic() + 60
    while not ahead._condition._waiters:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the caller never waited"
    release.set()
    asking.join()
    assert answers == [digest(paths[2])]


def test_a_segment_opened_after_its_read_ahead_is_the_segment(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments")
    written = {name: arrays_of(seed, 5_000) for name, seed in (("a", 1), ("b/c", 2))}
    for name, arrays in written.items():
        store.write(name, SETTINGS, 5_000, arrays)
    starting = SegmentStore(tmp_path / "segments")
    ahead = starting.read_ahead()
    ahead.wait()
    made = {id(array) for array in ahead._done.values()}
    assert len(made) == sum(len(arrays) for arrays in written.values())
    opened = []
    for name, arrays in written.items():
        segment = starting.open(name, SETTINGS)
        assert segment is not None
        assert_same(segment.arrays, arrays)
        opened.extend(segment.arrays.values())
    # The open took the arrays read ahead; it read nothing again.
    assert {id(array) for array in opened} == made
    assert not ahead._done


def test_a_file_damaged_after_it_was_read_ahead_is_still_refused(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments")
    store.write("c", SETTINGS, 5_000, arrays_of(1, 5_000))
    starting = SegmentStore(tmp_path / "segments")
    starting.read_ahead().wait()
    target = max(store.directory("c").glob("*.bin"), key=lambda path: path.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1
    damaged = target.with_suffix(".new")
    damaged.write_bytes(bytes(data))
    os.replace(damaged, target)
    with pytest.raises(SegmentDamaged, match="checksum"):
        starting.open("c", SETTINGS)


@pytest.mark.parametrize(
    ("argv", "environment"),
    [
        (["serve", "--data-dir", "{d}"], {}),
        (["serve", "--port", "9000", "--data-dir={d}"], {}),
        (["serve"], {"NEARDUP_DATA_DIR": "{d}"}),
        (["serve", "--workers", "1"], {}),
    ],
    ids=["option", "option=", "environment", "default"],
)
def test_neardup_serve_reads_ahead_the_segments_its_settings_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], environment: dict[str, str]
) -> None:
    from app.cli import _segments_read_ahead
    from app.config import Settings
    from app.storage.base import DATABASE_FILE
    from app.storage.segments import segments_beside

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEARDUP_DATA_DIR", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(d=tmp_path / "data"))
    argv = [word.format(d=tmp_path / "data") for word in argv]
    early = _segments_read_ahead(argv)
    assert early is not None
    # The reference: the directory the settings serve() reads name.
    data_dir = next(
        (
            word.partition("=")[2] or argv[at + 1]
            for at, word in enumerate(argv)
            if "data-dir" in word
        ),
        None,
    )
    settings = Settings() if data_dir is None else Settings(data_dir=Path(data_dir))
    assert early.root == segments_beside(settings.data_dir / DATABASE_FILE)


@pytest.mark.parametrize(
    ("argv", "environment"),
    [
        (["serve", "--workers", "2"], {}),
        (["serve"], {"NEARDUP_BACKEND": "redis://localhost:6379"}),
        (["serve"], {"NEARDUP_SEGMENTS": "false"}),
        (["export", "--data-dir", "x"], {}),
        ([], {}),
    ],
    ids=["workers", "redis", "no segments", "another command", "no command"],
)
def test_no_read_ahead_where_the_service_keeps_no_segments(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], environment: dict[str, str]
) -> None:
    from app.cli import _segments_read_ahead

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert _segments_read_ahead(argv) is None


def test_what_the_open_did_not_take_is_dropped_when_the_start_ends(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path / "segments")
    store.write("a", SETTINGS, 5_000, arrays_of(1, 5_000))
    store.write("b", SETTINGS, 5_000, arrays_of(2, 5_000))
    starting = SegmentStore(tmp_path / "segments")
    ahead = starting.read_ahead()
    ahead.wait()
    with pytest.raises(SegmentDamaged, match="other settings"):
        starting.open("b", "other settings")  # refused after it was read ahead
    segment = starting.open("a", SETTINGS)
    assert segment is not None
    assert_same(segment.arrays, arrays_of(1, 5_000))
    assert len(ahead._done) == len(arrays_of(2, 5_000))
    starting.end_read_ahead()
    assert not ahead._done


def test_serve_uses_the_early_segments_only_where_its_settings_name_them(tmp_path: Path) -> None:
    from app.cli import _segments_to_serve
    from app.config import Settings
    from app.storage.base import DATABASE_FILE
    from app.storage.segments import segments_beside

    guessed = tmp_path / "guessed"
    early = _segments_read_ahead_at(guessed)
    same = _segments_to_serve(Settings(data_dir=guessed), early)
    assert same is early and early._ahead is not None and not early._ahead._closed
    # Settings that name another directory: new segments there, the early ones ended.
    other = tmp_path / "other"
    early = _segments_read_ahead_at(guessed)
    chosen = _segments_to_serve(Settings(data_dir=other), early)
    assert chosen is not None and chosen.root == segments_beside(other / DATABASE_FILE)
    assert early._ahead is not None and early._ahead._closed
    # A service that keeps no segments: none, and the early ones ended.
    early = _segments_read_ahead_at(guessed)
    assert _segments_to_serve(Settings(data_dir=guessed, segments=False), early) is None
    assert early._ahead is not None and early._ahead._closed


def _segments_read_ahead_at(data_dir: Path) -> SegmentStore:
    from app.cli import _segments_read_ahead

    early = _segments_read_ahead(["serve", "--data-dir", str(data_dir)])
    assert early is not None
    return early
