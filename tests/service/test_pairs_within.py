"""Pairs within a batch, each index's rule, against brute force over every pair: batches
below and above the sizes where the matchers switch from comparing every pair to sorting
keys, with planted equal, near and banded documents. Also the small helpers of a batch's
way through the service: result positions of a batched search, generated ids."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pytest

from app.collection_config import CollectionConfig, PassagesConfig
from app.core.lsh import LSHIndex
from app.core.rule import positions_of
from app.core.verify import UNCERTAIN
from app.service.indexes import ExactMatcher, MinHashMatcher, SimHashMatcher, build_indexes
from app.service.types import new_document_id

K = 128


@dataclass
class Batch:
    simhash: np.ndarray
    minhash: np.ndarray
    exact: np.ndarray
    shorts: list[str | None] | None = None


def make_batch(size: int, seed: int) -> Batch:
    """Random documents, a third of them planted copies of an earlier one: the same exact
    hash or a SimHash a few bits off, a signature with some values changed (some keeping a
    band whole, some above and some below the threshold's agreements, some with every
    band broken), or only one word of the exact hash equal."""
    rng = np.random.default_rng(seed)
    simhash = rng.integers(0, 2**63, size, dtype=np.uint64)
    minhash = rng.integers(0, 2**32, (size, K), dtype=np.uint32)
    exact = rng.integers(0, 2**63, (size, 2), dtype=np.uint64)
    for later in range(1, size):
        if rng.random() > 0.35:
            continue
        earlier = int(rng.integers(0, later))
        kind = int(rng.integers(0, 4))
        if kind == 0:
            exact[later] = exact[earlier]
        elif kind == 1:  # one of the two words equal: not the same text
            word = int(rng.integers(0, 2))
            exact[later, word] = exact[earlier, word]
        flips = rng.choice(64, size=int(rng.integers(0, 8)), replace=False)
        simhash[later] = simhash[earlier] ^ np.uint64(sum(1 << int(bit) for bit in flips))
        minhash[later] = minhash[earlier]
        if rng.random() < 0.3:
            # One value changed in every band: agreements above the threshold, no band
            # whole, so LSH never makes it a candidate.
            changed = np.arange(0, K, K // 16) + rng.integers(0, K // 16, 16)
        else:
            changed = rng.choice(K, size=int(rng.integers(0, 60)), replace=False)
        minhash[later, changed] = rng.integers(0, 2**32, len(changed), dtype=np.uint32)
    return Batch(simhash, minhash, exact)


def brute_exact(batch: Batch) -> set[tuple[int, int]]:
    n = len(batch.exact)
    return {
        (later, earlier)
        for later in range(n)
        for earlier in range(later)
        if (batch.exact[later] == batch.exact[earlier]).all()
    }


def brute_simhash(batch: Batch, k: int) -> set[tuple[int, int]]:
    n = len(batch.simhash)
    return {
        (later, earlier)
        for later in range(n)
        for earlier in range(later)
        if bin(int(batch.simhash[later]) ^ int(batch.simhash[earlier])).count("1") <= k
    }


def brute_minhash(batch: Batch, threshold: float, needed: float) -> set[tuple[int, int]]:
    """A band of rows equal value for value (the LSH rule: bands for ``threshold``), and
    at least needed * K values equal in all."""
    lsh = LSHIndex(threshold, K)
    r = lsh.rows_per_band
    pairs = set()
    n = len(batch.minhash)
    for later in range(n):
        for earlier in range(later):
            a, b = batch.minhash[later].tolist(), batch.minhash[earlier].tolist()
            banded = any(a[j * r : (j + 1) * r] == b[j * r : (j + 1) * r] for j in range(lsh.bands))
            agree = sum(x == y for x, y in zip(a, b, strict=True))
            if banded and agree >= needed * K - 1e-9:
                pairs.add((later, earlier))
    return pairs


@pytest.mark.parametrize("size", [0, 1, 2, 7, 16, 17, 40, 64, 65, 90])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("texts_kept", [True, False])
def test_pairs_within_match_brute_force(size: int, seed: int, texts_kept: bool) -> None:
    config = CollectionConfig()
    if not texts_kept:  # nothing to verify with: the estimate decides at the threshold
        config = CollectionConfig(passages=PassagesConfig(enabled=False))
    indexes = build_indexes(config)
    batch = make_batch(size, seed * 1000 + size)
    expected = {
        "exact": brute_exact(batch),
        "simhash": brute_simhash(batch, config.simhash.max_distance),
        # The defaults keep texts, so MinHash candidates are looked at from UNCERTAIN
        # below the threshold and decided when scored (tests/core/test_verify.py).
        "minhash": brute_minhash(
            batch,
            config.minhash.threshold,
            config.minhash.threshold - (UNCERTAIN if texts_kept else 0.0),
        ),
    }
    assert config.verifies_exactly == texts_kept
    checked = 0
    for index in indexes:
        if not isinstance(index, ExactMatcher | SimHashMatcher | MinHashMatcher):
            continue
        found = index.pairs_within(batch)
        got = list(zip(found.positions.tolist(), found.rows.tolist(), strict=True))
        assert set(got) == expected[index.name], index.name
        checked += 1
    assert checked == 3
    if size >= 40:  # the planting makes pairs of every kind
        assert all(expected.values())


@pytest.mark.parametrize("seed", range(20))
def test_positions_of_matches_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, int(rng.integers(0, 6))) * (rng.random() < 0.8)
    ends = np.cumsum(counts).astype(np.int64)
    expected = [query for query, count in enumerate(counts.tolist()) for _ in range(count)]
    assert positions_of(ends).tolist() == expected


def test_new_document_ids_are_version_4_uuids() -> None:
    ids = [new_document_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:200]:
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
