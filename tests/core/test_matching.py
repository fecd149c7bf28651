"""app/core/rule.py's merge of what several methods found, against a dictionary."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from app.core.rule import merge_methods


def _reference(
    positions: list[int], rows: list[int], bits: list[int], known: list[float]
) -> list[tuple[int, int, int, float]]:
    merged: dict[tuple[int, int], tuple[int, float]] = {}
    for position, row, bit, value in zip(positions, rows, bits, known, strict=True):
        old_bits, old_value = merged.get((position, row), (0, math.nan))
        if math.isnan(old_value) or (not math.isnan(value) and value > old_value):
            old_value = value
        merged[(position, row)] = (old_bits | bit, old_value)
    return [(p, r, b, v) for (p, r), (b, v) in sorted(merged.items())]


@pytest.mark.parametrize("seed", range(40))
def test_merge_methods_equals_a_dictionary_merge(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 5, 30, 300])
    high_row = rng.choice([4, 1000, 2**32 - 1])
    positions = [rng.randrange(3) for _ in range(count)]
    rows = [rng.choice([0, high_row, rng.randrange(high_row + 1)]) for _ in range(count)]
    bits = [rng.choice([1, 2, 4, 8]) for _ in range(count)]
    known = [rng.choice([math.nan, rng.random(), 1.0, 0.0]) for _ in range(count)]
    got = merge_methods(
        np.array(positions, dtype=np.int64),
        np.array(rows, dtype=np.int64),
        np.array(bits, dtype=np.uint8),
        np.array(known, dtype=np.float64),
    )
    expected = _reference(positions, rows, bits, known)
    assert got[0].tolist() == [p for p, _, _, _ in expected]
    assert got[1].tolist() == [r for _, r, _, _ in expected]
    assert got[2].tolist() == [b for _, _, b, _ in expected]
    values = got[3].tolist()
    for value, (_, _, _, wanted) in zip(values, expected, strict=True):
        assert (math.isnan(value) and math.isnan(wanted)) or value == wanted
