"""MinHash decided exactly near the threshold (app/core/verify.py), against a reference
over Python sets: the word 5-grams of the texts as tuples, no hashing."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.core.fingerprint import FingerprintParams, fingerprint, shingle_hashes
from app.core.lsh import min_matches
from app.core.methods import EXACT, MINHASH, SIMHASH
from app.core.text import normalize
from app.core.verify import (
    UNCERTAIN,
    ExactMinHash,
    ShingleSets,
    candidate_threshold,
    set_jaccard,
    shingle_set,
)
from tests.reference import agreeing

PARAMS = FingerprintParams(unit="word", size=5)
VOCABULARY = [f"w{i}" for i in range(3000)]


def word_grams(text: str) -> set[tuple[str, ...]]:
    words = normalize(text).split()
    if len(words) < 5:
        return {tuple(words)}
    return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}


def reference_jaccard(a: str, b: str) -> float:
    first, second = word_grams(a), word_grams(b)
    return len(first & second) / len(first | second)


def edited(rng: random.Random, words: list[str], edits: int) -> str:
    other = list(words)
    for _ in range(edits):
        other[rng.randrange(len(other))] = rng.choice(VOCABULARY)
    return " ".join(other)


@pytest.mark.parametrize("seed", range(5))
def test_set_jaccard_equals_python_sets(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        words = [rng.choice(VOCABULARY[:200]) for _ in range(rng.randint(1, 60))]
        a, b = " ".join(words), edited(rng, words, rng.randint(0, 8))
        exact = set_jaccard(shingle_set(a, PARAMS), shingle_set(b, PARAMS))
        assert exact == pytest.approx(reference_jaccard(a, b), abs=1e-12)


def test_candidates_are_looked_at_from_below_the_threshold() -> None:
    assert candidate_threshold(0.8, exact=True) == pytest.approx(0.8 - UNCERTAIN)
    assert candidate_threshold(0.8, exact=False) == 0.8
    assert candidate_threshold(0.1, exact=True) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_decide_follows_the_exact_jaccard_near_the_threshold(seed: int) -> None:
    """Pairs at every distance from the threshold: the MinHash bit is the reference's
    exact J >= 0.8 where the estimate is within UNCERTAIN above, the estimate's verdict
    above that; a stored text gone (deleted meanwhile) drops the pair there; the other
    methods' bits are never touched; the similarity is the exact Jaccard where it
    decided."""
    rng = random.Random(seed)
    queries: list[str] = []
    stored: list[str | None] = []
    for i in range(120):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(40, 140))]
        queries.append(" ".join(words))
        text = edited(rng, words, rng.randint(0, 7))
        stored.append(None if i % 10 == 9 else text)  # some texts gone
    kept = [text if text is not None else queries[i] for i, text in enumerate(stored)]
    prints = fingerprint(queries + kept, PARAMS)
    count = len(queries)
    agree = agreeing(prints.minhash[:count], prints.minhash[count:])
    estimate = agree / 128
    bar = 0.8
    looked_at = np.flatnonzero(agree >= min_matches(bar - UNCERTAIN, 128))
    methods = np.where(np.arange(count) % 3 == 0, MINHASH | SIMHASH, MINHASH).astype(np.uint8)
    methods[::7] |= EXACT
    positions = looked_at
    rows = looked_at  # stored row i is query i's edited text
    similarity = np.round(estimate[looked_at], 6)
    ngram = np.full(len(looked_at), np.nan)
    decision = ExactMinHash(
        bar,
        128,
        ShingleSets(PARAMS, queries.__getitem__),
        ShingleSets(PARAMS, stored.__getitem__),
    )
    bits, scored = decision.decide(
        positions, rows, methods[looked_at], agree[looked_at], similarity, ngram
    )
    flips = 0
    for k, i in enumerate(looked_at.tolist()):
        if estimate[i] < bar + UNCERTAIN and stored[i] is None:
            # Its document was deleted while the search ran: no answer at all.
            assert bits[k] == 0, "a pair whose stored text is gone is still an answer"
            continue
        others = int(methods[i]) & ~MINHASH
        assert int(bits[k]) & ~MINHASH == others, "another method's bit changed"
        if estimate[i] >= bar + UNCERTAIN:
            assert bits[k] & MINHASH and scored[k] == similarity[k]
        else:
            exact = reference_jaccard(queries[i], stored[i] or "")
            assert bool(bits[k] & MINHASH) == (exact >= bar), (i, exact, estimate[i])
            assert scored[k] == round(exact, 6)
            flips += (exact >= bar) != (estimate[i] >= bar)
    assert flips, "no pair where the estimate and the exact Jaccard disagree: a weak test"


@pytest.mark.parametrize("seed", range(3))
def test_shingle_sets_are_the_normalised_texts_shingles(seed: int) -> None:
    """ASCII texts go through the compiled normaliser, the others through normalize: both
    give the distinct sorted shingle hashes of normalize(text), white space, case and
    control characters included."""
    rng = random.Random(seed)
    for _ in range(40):
        words = [rng.choice(VOCABULARY[:300]).upper() for _ in range(rng.randint(1, 80))]
        gaps = [rng.choice([" ", "  ", "\t", "\n ", "\x07"]) for _ in words]
        text = "".join(gap + word for gap, word in zip(gaps, words, strict=True)) + " "
        for sent in (text, text + "é"):
            expected = np.unique(shingle_hashes(normalize(sent), PARAMS))
            assert np.array_equal(shingle_set(sent, PARAMS), expected)
