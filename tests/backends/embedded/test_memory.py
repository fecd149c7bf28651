"""app/memory.py: background trims at most once per interval."""

from __future__ import annotations

import pytest

from app.memory import PeriodicTrim, release_free_memory


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
