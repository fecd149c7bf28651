"""app/memory.py: background trims at most once per interval, and once when writes stop."""

from __future__ import annotations

import threading

import pytest

from app.memory import IdleTrim, PeriodicTrim, release_free_memory


def test_a_periodic_trim_trims_first_then_waits_for_its_interval() -> None:
    if not release_free_memory():
        pytest.skip("no malloc_trim in this C library")
    trim = PeriodicTrim(interval=3600)
    assert trim() is True
    assert [trim() for _ in range(5)] == [False] * 5
    assert trim.trims == 1


def test_a_periodic_trim_with_no_interval_trims_every_time() -> None:
    if not release_free_memory():
        pytest.skip("no malloc_trim in this C library")
    trim = PeriodicTrim(interval=0)
    assert [trim() for _ in range(3)] == [True] * 3
    assert trim.trims == 3


def _idle_trim(quiet_polls: int) -> tuple[IdleTrim, list[int]]:
    released: list[int] = []

    def release() -> bool:
        released.append(1)
        return True

    return IdleTrim(quiet_polls, release), released


def test_an_idle_trim_trims_once_after_the_writes_stop() -> None:
    trim, released = _idle_trim(quiet_polls=2)
    # Writes at the first polls (the first sets the baseline), then none.
    polls = [0, 250, 500, 500, 500, 500, 500]
    assert [trim(writes) for writes in polls] == [False, False, False, False, True, False, False]
    assert len(released) == trim.trims == 1


def test_an_idle_trim_waits_out_every_pause_shorter_than_its_polls() -> None:
    trim, released = _idle_trim(quiet_polls=3)
    polls = [0, 10, 10, 10, 20, 20, 30, 30, 30, 30]  # pauses of 2, 1, then 3 polls
    assert [trim(writes) for writes in polls] == [False] * 9 + [True]
    assert len(released) == 1


def test_an_idle_trim_of_a_service_never_written_never_trims() -> None:
    trim, released = _idle_trim(quiet_polls=1)
    assert [trim(7) for _ in range(5)] == [False] * 5
    assert not released


def test_an_idle_trim_trims_again_after_the_next_burst() -> None:
    trim, released = _idle_trim(quiet_polls=1)
    polls = [0, 5, 5, 5, 9, 9, 9]
    assert [trim(writes) for writes in polls] == [False, False, True, False, False, True, False]
    assert len(released) == 2


def test_the_merger_gives_the_heap_back_once_the_inserts_stop() -> None:
    """A registry's background merger trims when its collections stop taking rows: the
    idle trim's count is the rows the collections took (Collection.rows_taken)."""
    from app.backends.embedded.registry import Registry
    from app.collection_config import CollectionConfig
    from app.service import NewDocument
    from app.storage import MemoryStore

    registry = Registry(MemoryStore())
    registry.open()
    collection, _ = registry.create("c", CollectionConfig())
    before = collection.rows_taken
    collection.insert([NewDocument(f"text number {i} of the test", f"d{i}") for i in range(3)])
    assert collection.rows_taken == before + 3
    seen: list[int] = []
    polled = threading.Event()

    def record(writes: int) -> bool:
        seen.append(writes)
        polled.set()
        return False

    registry._idle_trim = record  # type: ignore[assignment]
    registry.start_background()
    try:
        registry._wake.set()
        assert polled.wait(30), "the merger never polled"
    finally:
        registry.close()
    assert seen[0] == before + 3
