"""app/service/beside.py: work is done on a pool thread only where it is large enough,
gives the same result as done inline, and raises what it raised."""

from __future__ import annotations

import threading

import pytest

from app.service import beside as beside_module
from app.service.beside import BESIDE_MIN_ITEMS, beside


def _where(values: list[int]) -> tuple[int, int]:
    return threading.get_ident(), sum(values)


def test_small_work_is_done_inline_now() -> None:
    values = list(range(BESIDE_MIN_ITEMS - 1))
    wait = beside(_where, values, len(values))
    assert wait() == (threading.get_ident(), sum(values))


def test_large_work_runs_on_another_thread_with_a_spare_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(beside_module, "_WORKERS", 1)
    values = list(range(BESIDE_MIN_ITEMS))
    thread, total = beside(_where, values, len(values))()
    assert thread != threading.get_ident()
    assert total == sum(values)


def test_a_one_core_machine_does_it_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beside_module, "_WORKERS", 0)
    values = list(range(4 * BESIDE_MIN_ITEMS))
    assert beside(_where, values, len(values))()[0] == threading.get_ident()


def test_what_the_work_raises_is_raised_to_the_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beside_module, "_WORKERS", 1)

    def fails(_: list[int]) -> int:
        raise ValueError("no fingerprints")

    wait = beside(fails, [0] * BESIDE_MIN_ITEMS, BESIDE_MIN_ITEMS)
    with pytest.raises(ValueError, match="no fingerprints"):
        wait()
