"""app/core/rule.py's merge of what several methods found, against a dictionary."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from app.core.lsh import agreements, pair_agreements
from app.core.rule import equal_pairs, merge_methods


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


@pytest.mark.parametrize("seed", range(8))
def test_equal_pairs_are_every_pair_equal_in_some_lane(seed: int) -> None:
    """Every (later, earlier) pair of rows equal in at least one lane, once, in order,
    against a double loop; keys from a small range so that runs are long, and batches of
    copies (every lane equal)."""
    rng = random.Random(seed)
    count, lanes = rng.randint(0, 120), rng.randint(1, 6)
    keys = np.array(
        [[rng.randrange(rng.choice([3, 40, 1 << 62])) for _ in range(lanes)] for _ in range(count)],
        dtype=np.uint64,
    ).reshape(count, lanes)
    if seed % 4 == 0 and count:
        keys[rng.randrange(count) :] = keys[0]  # copies of one document
    expected = [
        (later, earlier)
        for later in range(count)
        for earlier in range(later)
        if any(keys[later, lane] == keys[earlier, lane] for lane in range(lanes))
    ]
    later, earlier = equal_pairs(keys)
    assert list(zip(later.tolist(), earlier.tolist(), strict=True)) == expected


@pytest.mark.parametrize("seed", range(4))
def test_pair_agreements_are_the_agreements_of_the_pairs_rows(seed: int) -> None:
    """Without making the pairs' rows: the count of equal kept values of each pair."""
    rng = np.random.default_rng(seed)
    signatures = rng.integers(0, 1 << 18, size=(50, 128), dtype=np.uint32)
    signatures[10:20] = signatures[3]  # copies agree everywhere
    later, earlier = np.tril_indices(50, -1)
    expected = agreements(signatures[later], signatures[earlier])
    assert np.array_equal(pair_agreements(signatures, later, signatures, earlier), expected)
    kept = signatures.astype(np.uint16)  # whole values against kept ones
    assert np.array_equal(pair_agreements(signatures, later, kept, earlier), expected)
    assert (expected == 128).sum() >= 45 and (expected < 128).any()
