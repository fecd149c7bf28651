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
    MAX_DECIDED_PER_QUERY,
    UNCERTAIN,
    ExactMinHash,
    ShingleSets,
    candidate_threshold,
    exact_minhash,
    highest_per_query,
    set_jaccard,
    shingle_set,
    shingle_sets,
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
        ShingleSets(PARAMS, lambda keys: [queries[k] for k in keys]),
        ShingleSets(PARAMS, lambda keys: [stored[k] for k in keys]),
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
    batch: list[str] = ["", " \t ", "..."]
    for _ in range(40):
        words = [rng.choice(VOCABULARY[:300]).upper() for _ in range(rng.randint(1, 80))]
        gaps = [rng.choice([" ", "  ", "\t", "\n ", "\x07"]) for _ in words]
        text = "".join(gap + word for gap, word in zip(gaps, words, strict=True)) + " "
        for sent in (text, text + "é"):
            expected = np.unique(shingle_hashes(normalize(sent), PARAMS))
            assert np.array_equal(shingle_set(sent, PARAMS), expected)
            batch.append(sent)
    rng.shuffle(batch)
    for params in (PARAMS, FingerprintParams(unit="char", size=4)):
        made = shingle_sets(batch, params)  # one compiled call, ASCII and not mixed
        for sent, one in zip(batch, made, strict=True):
            normal = normalize(sent)
            expected = np.unique(shingle_hashes(normal, params)) if normal else np.zeros(0)
            assert np.array_equal(one, expected), sent


@pytest.mark.parametrize("seed", range(6))
def test_highest_per_query_against_sorting_each_query(seed: int) -> None:
    """The pairs among their query's ``most`` highest estimates (ties: the earlier pair),
    against each query's pairs sorted in Python."""
    rng = random.Random(seed)
    count = rng.randint(0, 300)
    queries = np.array([rng.randint(0, 6) for _ in range(count)], dtype=np.int64)
    agree = np.array([rng.randint(80, 128) for _ in range(count)], dtype=np.int64)
    most = rng.randint(1, 40)
    expected: list[int] = []
    for query in set(queries.tolist()):
        mine = [i for i in range(count) if queries[i] == query]
        expected += sorted(mine, key=lambda i: (-agree[i], i))[:most]
    assert highest_per_query(queries, agree, most).tolist() == sorted(expected)


def test_a_query_near_many_texts_has_only_its_highest_estimates_decided_by_them() -> None:
    """A query with three times ``most`` unsure pairs (a page's template near every page
    of its site) and one with a few: the crowded one's ``most`` highest estimates are
    decided by the reference's exact Jaccard, its other pairs by the estimate at the
    bar, as where no text is at hand; each side's texts are read in one call, and only
    those of the pairs decided."""
    rng = random.Random(11)
    bar, most = 0.8, 32
    extra = 3 * most
    base = [rng.choice(VOCABULARY) for _ in range(200)]
    stored = [edited(rng, base, rng.randint(2, 7)) for _ in range(extra + 4)]
    queries = [" ".join(base), edited(rng, base, 2)]
    positions = np.array([0] * extra + [1] * 4, dtype=np.int64)
    rows = np.arange(extra + 4, dtype=np.int64)
    prints = fingerprint(queries + stored, PARAMS)
    agree = agreeing(prints.minhash[positions], prints.minhash[2 + rows])
    unsure = agree < (bar + UNCERTAIN) * 128
    assert unsure[:extra].sum() > most + 10, "a weak test: few unsure pairs"
    reads: list[list[int]] = []

    def stored_texts(keys: list[int]) -> list[str | None]:
        reads.append(list(keys))
        return [stored[key] for key in keys]

    decision = ExactMinHash(
        bar,
        128,
        ShingleSets(PARAMS, lambda keys: [queries[k] for k in keys]),
        ShingleSets(PARAMS, stored_texts),
        most,
    )
    methods = np.full(len(rows), MINHASH | SIMHASH, dtype=np.uint8)
    similarity = np.round(agree / 128, 6)
    bits, scored = decision.decide(
        positions, rows, methods, agree, similarity, np.full(len(rows), np.nan)
    )
    crowded = [i for i in range(extra) if unsure[i]]
    decided = set(sorted(crowded, key=lambda i: (-agree[i], i))[:most])
    decided |= {i for i in range(extra, extra + 4) if unsure[i]}
    assert len(reads) == 1 and set(reads[0]) == decided
    assert exact_minhash(PARAMS, bar, queries).most == MAX_DECIDED_PER_QUERY > most
    assert exact_minhash(PARAMS, bar, queries, answers=10_000).most == 10_000
    outcomes = {(i in decided, bool(bits[i] & MINHASH)) for i in range(len(rows)) if unsure[i]}
    assert outcomes == {(True, True), (True, False), (False, True), (False, False)}, "weak"
    for i in range(len(rows)):
        assert bits[i] & SIMHASH, "another method's bit changed"
        if not unsure[i]:
            assert bits[i] & MINHASH and scored[i] == similarity[i]
        elif i in decided:
            exact = reference_jaccard(queries[positions[i]], stored[i])
            assert bool(bits[i] & MINHASH) == (exact >= bar) and scored[i] == round(exact, 6)
        else:
            assert bool(bits[i] & MINHASH) == (agree[i] >= min_matches(bar, 128))
            assert scored[i] == similarity[i]
