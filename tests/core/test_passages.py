"""app/core/passages.py against slow, obviously correct references: tokens by a plain loop
over Unicode categories, winnowing by the definition, every maximal common run of two
token lists by dynamic programming, the index's candidates by Python sets."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest

from app.core.passages import (
    SEEDS_PER_KGRAM,
    PassageIndex,
    coverage,
    fingerprints,
    fingerprints_many,
    identical_passages,
    kgrams,
    shared_passages,
    shared_passages_texts,
    spread,
    tokenize,
)
from app.core.text import is_no_space_script, normalize

WORD = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No"}
VOCABULARY = [
    "wire", "story", "market", "Prices", "rose", "fell", "bank", "rates", "said", "on",
    "Tuesday", "the", "a", "of", "in", "Oil", "gold", "shares", "trade", "deal", "talks",
    "minister", "straße", "Ünïcode", "naïve", "café", "2024", "3.5", "per", "cent",
]  # fmt: skip
CHINESE = "新华社北京电国务院总理今天在人民大会堂会见了来访的外国代表团双方就经济合作交换意见"


def reference_tokens(text: str) -> list[tuple[int, int, str]]:
    """(start, end, folded token) by a loop over characters."""
    tokens: list[tuple[int, int, str]] = []
    start = -1
    for position, char in enumerate(text + "\x00"):
        word = unicodedata.category(char) in WORD and position < len(text)
        single = word and is_no_space_script(ord(char))
        if start >= 0 and (not word or single):
            tokens.append((start, position, normalize(text[start:position])))
            start = -1
        if single:
            tokens.append((position, position + 1, normalize(char)))
        elif word and start < 0:
            start = position
    return tokens


def maximal_runs(a: list[str], b: list[str], minimum: int) -> set[tuple[int, int, int, int]]:
    """Every maximal run of equal tokens (a start, a end, b start, b end), by DP."""
    runs = set()
    length = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                length[i][j] = length[i - 1][j - 1] + 1
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            run = length[i][j]
            ends_here = i == len(a) or j == len(b) or a[i] != b[j]
            if run >= minimum and ends_here:
                runs.add((i - run, i, j - run, j))
    return runs


def reference_winnow(hashes: list[int], window: int) -> set[int]:
    """The positions chosen: the rightmost minimum of each window."""
    width = min(window, len(hashes))
    chosen = set()
    for start in range(len(hashes) - width + 1):
        values = hashes[start : start + width]
        smallest = min(values)
        chosen.add(start + max(i for i, v in enumerate(values) if v == smallest))
    return chosen


def random_text(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        word = rng.choice(VOCABULARY)
        roll = rng.random()
        if roll < 0.1:
            word = word.upper()
        elif roll < 0.15:
            word += rng.choice([",", ".", ";", " -"])
        parts.append(word)
    return " ".join(parts)


def spliced(rng: random.Random, inside: str, words: int) -> str:
    """``inside`` among random words, with punctuation and case changed at its edges."""
    before, after = random_text(rng, words), random_text(rng, words)
    return f"{before}. {inside}\n\n{after}"


@pytest.mark.parametrize("seed", range(5))
def test_tokens_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    text = random_text(rng, 40) + " " + CHINESE[: rng.randint(0, 20)] + " ﬁne ÉCOLE_x Ⅻ"
    tokens = tokenize(text)
    expected = reference_tokens(text)
    assert [(int(s), int(e)) for s, e in zip(tokens.starts, tokens.ends, strict=True)] == [
        (s, e) for s, e, _ in expected
    ]
    # Equal hashes exactly where the folded tokens are equal.
    by_token: dict[str, int] = {}
    for (_, _, folded), value in zip(expected, tokens.hashes.tolist(), strict=True):
        assert by_token.setdefault(folded, value) == value
    assert len(set(by_token.values())) == len(by_token)


@pytest.mark.parametrize("seed", range(5))
def test_winnowing_is_the_definition(seed: int) -> None:
    rng = random.Random(seed)
    tokens = tokenize(random_text(rng, rng.randint(1, 200)))
    hashes = kgrams(tokens, 3)
    window = rng.randint(1, 10)
    chosen = reference_winnow(hashes.tolist(), window) if len(hashes) else set()
    assert set(fingerprints(tokens, 3, window).tolist()) == {int(hashes[i]) for i in chosen}


@pytest.mark.parametrize("seed", range(5))
def test_a_batch_is_fingerprinted_as_each_text_alone(seed: int) -> None:
    """fingerprints_many (one compiled call, no offsets) against each text's tokens and
    fingerprints made alone: empty, short, Chinese, non-ASCII and lone-surrogate texts."""
    rng = random.Random(seed)
    texts = [random_text(rng, rng.randint(0, 150)) for _ in range(40)]
    texts += ["", "two words", CHINESE, "Straße STRASSE naïve \ud800 café " * 5, "x" * 300]
    rng.shuffle(texts)
    k, window = rng.randint(2, 6), rng.randint(1, 10)
    made = fingerprints_many(texts, k, window)
    assert len(made) == len(texts)
    for text, keys in zip(texts, made, strict=True):
        assert keys.tolist() == fingerprints(tokenize(text), k, window).tolist()


@pytest.mark.parametrize("seed", range(20))
def test_every_shared_run_of_the_guarantee_shares_a_fingerprint(seed: int) -> None:
    rng = random.Random(seed)
    k, window = rng.randint(2, 6), rng.randint(2, 10)
    shared = random_text(rng, window + k - 1 + rng.randint(0, 3))
    a, b = spliced(rng, shared, 30), spliced(rng, shared, 30)
    assert set(fingerprints(tokenize(a), k, window).tolist()) & set(
        fingerprints(tokenize(b), k, window).tolist()
    )


@pytest.mark.parametrize("seed", range(30))
def test_passages_are_the_maximal_common_runs(seed: int) -> None:
    """Every maximal run of at least ``minimum`` equal tokens, nothing shorter, offsets
    that hold the same normalised tokens; several passages, in any order."""
    rng = random.Random(seed)
    k = rng.randint(2, 6)
    minimum = k + rng.randint(0, 6)
    pieces = [random_text(rng, rng.randint(5, 40)) for _ in range(3)]
    a = spliced(rng, pieces[0], 20) + " " + spliced(rng, pieces[1], 10)
    b = spliced(rng, pieces[1], 15) + " " + pieces[2] + " " + spliced(rng, pieces[0], 5)
    ta, tb = tokenize(a), tokenize(b)
    words_a = [t for _, _, t in reference_tokens(a)]
    words_b = [t for _, _, t in reference_tokens(b)]
    found = shared_passages(ta, tb, k, minimum)
    runs = {
        (
            int(np.searchsorted(ta.starts, p.start)),
            int(np.searchsorted(ta.ends, p.end)) + 1,
            int(np.searchsorted(tb.starts, p.match_start)),
            int(np.searchsorted(tb.ends, p.match_end)) + 1,
        )
        for p in found
    }
    assert runs == maximal_runs(words_a, words_b, minimum)
    for passage in found:  # the same tokens; punctuation between them may differ
        quoted = a[passage.start : passage.end]
        source = b[passage.match_start : passage.match_end]
        assert [t for _, _, t in reference_tokens(quoted)] == [
            t for _, _, t in reference_tokens(source)
        ]


@pytest.mark.parametrize("seed", range(30))
def test_a_copy_has_the_passages_verification_finds(seed: int) -> None:
    """A text against an identical copy, without verifying: its every maximal run with
    itself (the DP reference), or None where a run of ``minimum`` tokens repeats (then
    the runs between its repeats are passages too, and only verification finds them)."""
    rng = random.Random(seed)
    k = rng.randint(2, 6)
    minimum = k + rng.randint(0, 6)
    text = random_text(rng, rng.randint(0, 60))  # k-grams repeat, runs of minimum seldom
    if seed % 3 == 0:  # a sentence said twice
        repeated = random_text(rng, minimum + rng.randint(0, 4))
        text = f"{text} {repeated}. More words here. {repeated}"
    elif seed % 3 == 1:
        text = CHINESE[: rng.randint(0, len(CHINESE))] + " " + text
    words = [t for _, _, t in reference_tokens(text)]
    tokens = tokenize(text)
    derived = identical_passages(tokens, minimum)
    grams = [tuple(words[at : at + minimum]) for at in range(len(words) - minimum + 1)]
    if len(set(grams)) < len(grams):
        assert derived is None
        return
    assert derived is not None
    verified = shared_passages(tokens, tokens, k, minimum)
    assert derived == verified
    expected = maximal_runs(words, words, minimum)  # only the diagonal: nothing repeats
    assert {(0, len(words), 0, len(words))} == expected if len(words) >= minimum else not expected
    assert derived == [] or text[derived[0].start : derived[0].end].split()[0] == text.split()[0]


def test_chinese_passage_offsets_are_code_points() -> None:
    story = CHINESE[4:40]
    a = "新闻摘要：" + story + "。其他消息"
    b = "🙂 " + story + "（完）"
    [passage] = shared_passages(tokenize(a), tokenize(b), 5, 12)
    assert a[passage.start : passage.end] == story
    assert b[passage.match_start : passage.match_end] == story
    assert coverage([passage], len(b), of_match=True) == pytest.approx(len(story) / len(b))


def test_coverage_counts_overlaps_once() -> None:
    from app.core.passages import Passage

    passages = [Passage(0, 10, 0, 10, 3), Passage(5, 20, 30, 45, 4), Passage(30, 40, 50, 60, 2)]
    assert coverage(passages, 100) == pytest.approx(0.30)
    assert coverage(passages, 100, of_match=True) == pytest.approx(0.35)
    assert coverage([], 100) == 0.0


def test_index_candidates_are_the_rows_sharing_a_fingerprint() -> None:
    rng = random.Random(7)
    texts = [random_text(rng, rng.randint(3, 120)) for _ in range(60)]
    prints = [fingerprints(tokenize(t), 4, 6) for t in texts]
    index = PassageIndex(max_rows=10)
    index.insert_many(prints[:40], np.arange(40))
    for row in range(40, 60):
        index.insert_row(prints[row], row)
    index.delete(np.array([3, 41]))
    index._check()
    index.merge()
    index._check()
    held = {row: set(p.tolist()) for row, p in enumerate(prints) if row not in (3, 41)}
    counts: dict[int, int] = {}
    for keys in prints:
        for key in keys.tolist():
            counts[key] = counts.get(key, 0) + 1
    for query in range(0, 60, 7):
        keys = {k for k in prints[query].tolist() if counts[k] <= 10}
        shared = {row: len(keys & values) for row, values in held.items() if keys & values}
        rows, numbers = index.candidates(prints[query])
        assert dict(zip(rows.tolist(), numbers.tolist(), strict=True)) == shared
        assert list(numbers) == sorted(numbers, reverse=True)


def test_counted_candidates_keep_what_may_cover_the_bar_and_the_near_ones() -> None:
    """The filter of a batch at a bar, against counting with Python sets and the rule
    written out: shared + boilerplate + 2 >= (0.45 + 0.25 bar) x bar x the fewer
    fingerprints."""
    rng = random.Random(11)
    base = [random_text(rng, rng.randint(20, 120)) for _ in range(40)]
    # Texts that share parts of each other: a copy of a slice of an earlier text inside.
    texts = [
        t + " " + " ".join(base[rng.randrange(i + 1)].split()[: rng.randint(5, 60)])
        for i, t in enumerate(base)
    ]
    prints = [fingerprints(tokenize(t), 4, 6) for t in texts]
    index = PassageIndex(max_rows=6)
    index.insert_many(prints[:30], np.arange(30))
    held = {row: set(p.tolist()) for row, p in enumerate(prints[:30])}
    counts: dict[int, int] = {}
    for keys in prints[:30]:
        for key in set(keys.tolist()):
            counts[key] = counts.get(key, 0) + 1
    queries = prints[25:40]
    # Near-duplicates, kept whatever they share: every third row of each text.
    near_pairs = [(text, row) for text in range(len(queries)) for row in range(text % 3, 30, 3)]
    near_texts, near_rows = (np.array(column) for column in zip(*near_pairs, strict=True))
    hits = index.hits(queries)  # looked up once, counted at each bar (an insert's, beside)
    for bar in (0.3, 0.8):
        found, boilerplate = index.candidates_counted(queries, bar, (near_texts, near_rows))
        again, boilerplate_again, _ = index.candidates_hosted(
            queries, bar, (near_texts, near_rows), looked_up=hits
        )
        assert boilerplate_again.tolist() == boilerplate.tolist()
        assert [(r.tolist(), n.tolist()) for r, n in again] == [
            (r.tolist(), n.tolist()) for r, n in found
        ]
        for text, keys in enumerate(queries):
            query = set(keys.tolist())
            common = sum(1 for k in keys.tolist() if counts.get(k, 0) > 6)
            assert boilerplate[text] == common
            near = {row for t, row in near_pairs if t == text}
            expected = {}
            for row, values in held.items():
                shared = len({k for k in query & values if counts[k] <= 6})
                fewer = min(len(keys), len(prints[row]))
                slack = 0.45 + 0.25 * bar
                if shared and (shared + common + 2 >= slack * bar * fewer or row in near):
                    expected[row] = shared
            rows, numbers = found[text]
            assert dict(zip(rows.tolist(), numbers.tolist(), strict=True)) == expected
            pairs = list(zip((-numbers).tolist(), rows.tolist(), strict=True))
            assert pairs == sorted(pairs)  # most shared first, ties by row


def test_boilerplate_seeds_nothing() -> None:
    footer = "All rights reserved by the news wire service and its partners worldwide today"
    texts = [random_text(random.Random(i), 50) + " " + footer for i in range(30)]
    index = PassageIndex(max_rows=5)
    for row, text in enumerate(texts):
        index.insert_row(fingerprints(tokenize(text), 5, 4), row)
    rows, _ = index.candidates(fingerprints(tokenize("Other words. " + footer), 5, 4))
    assert not len(rows)


def test_spread_is_a_bijection_that_can_be_undone() -> None:
    """The passage table holds spread keys: each is undone by the inverse steps (an
    xorshift by 33 is its own inverse, an odd multiplier has one mod 2^64), so two
    fingerprints are equal in the table exactly when they are equal."""
    mask = (1 << 64) - 1
    inverses = [pow(m, -1, 1 << 64) for m in (0xC4CEB93F40A6BEC5, 0xFF51AFD7ED558CCD)]
    rng = np.random.default_rng(5)
    keys = np.concatenate(
        [
            rng.integers(0, 2**63, 2000, dtype=np.uint64) * np.uint64(2),
            np.array([0, 1, mask], np.uint64),
        ]
    )
    spread_keys = spread(keys)
    assert spread_keys.dtype == np.uint64 and not np.shares_memory(spread_keys, keys)
    for original, value in zip(keys.tolist(), spread_keys.tolist(), strict=True):
        for inverse in inverses:
            value ^= value >> 33
            value = (value * inverse) & mask
        value ^= value >> 33
        assert value == original
    # Winnowed keys crowd the low end; spread, a quarter of them lies in each quarter.
    low = (rng.random(40_000) * 0.05 * 2**64).astype(np.uint64)
    quarters = np.bincount((spread(low) >> np.uint64(62)).astype(np.int64), minlength=4)
    assert quarters.min() > 9_000


def seeded_runs(
    a: list[str], b: list[str], k: int, minimum: int, per_kgram: int
) -> set[tuple[int, int, int, int]]:
    """The maximal runs of equal tokens through a seed, at least ``minimum`` long: a seed
    is a k-gram both lists hold, at one of its first ``per_kgram`` places in each."""

    def firsts(tokens: list[str]) -> dict[tuple[str, ...], list[int]]:
        places: dict[tuple[str, ...], list[int]] = {}
        for at in range(len(tokens) - k + 1):
            held = places.setdefault(tuple(tokens[at : at + k]), [])
            if len(held) < per_kgram:
                held.append(at)
        return places

    in_a, in_b = firsts(a), firsts(b)
    runs = set()
    for gram, places in in_a.items():
        for i in places:
            for j in in_b.get(gram, []):
                start_a, start_b = i, j
                while start_a > 0 and start_b > 0 and a[start_a - 1] == b[start_b - 1]:
                    start_a, start_b = start_a - 1, start_b - 1
                end_a, end_b = i + k, j + k
                while end_a < len(a) and end_b < len(b) and a[end_a] == b[end_b]:
                    end_a, end_b = end_a + 1, end_b + 1
                if end_a - start_a >= minimum:
                    runs.add((start_a, end_a, start_b, end_b))
    return runs


def _token_runs(found: list, ta, tb) -> set[tuple[int, int, int, int]]:  # type: ignore[no-untyped-def]
    return {
        (
            int(np.searchsorted(ta.starts, p.start)),
            int(np.searchsorted(ta.ends, p.end)) + 1,
            int(np.searchsorted(tb.starts, p.match_start)),
            int(np.searchsorted(tb.ends, p.match_end)) + 1,
        )
        for p in found
    }


@pytest.mark.parametrize("seed", range(12))
def test_repeated_kgrams_seed_from_their_first_places_in_each_text(seed: int) -> None:
    """Texts made of a few phrases repeated (a list, a chorus, a template), k-grams held
    up to 80 times: the passages are the maximal runs through the first SEEDS_PER_KGRAM
    places of a k-gram in each text, by the slow reference."""
    rng = random.Random(seed)
    k = rng.randint(2, 5)
    minimum = k + rng.randint(0, 4)
    phrases = [random_text(rng, rng.randint(3, 12)) for _ in range(rng.randint(2, 3))]
    a = " ".join(rng.choice(phrases) for _ in range(rng.randint(5, 80)))
    b = " ".join(rng.choice(phrases) for _ in range(rng.randint(40, 80)))
    ta, tb = tokenize(a), tokenize(b)
    words_a = [t for _, _, t in reference_tokens(a)]
    words_b = [t for _, _, t in reference_tokens(b)]
    expected = seeded_runs(words_a, words_b, k, minimum, SEEDS_PER_KGRAM)
    assert _token_runs(shared_passages(ta, tb, k, minimum), ta, tb) == expected
    [many] = shared_passages_texts(ta, [b], k, minimum)
    assert _token_runs(many, ta, tb) == expected


def test_a_text_repeating_one_sentence_against_its_copy() -> None:
    """One sentence of 9 tokens 3,000 times, against the same text with a word more: the
    whole text is one passage, and the others are the shifts of one to 15 sentences each
    way, 31 in all (every shift seeded before, 6,000 passages)."""
    text = "the quick brown fox jumps over the lazy dog " * 3000
    query, stored = tokenize(text), tokenize(text + " end")
    found = shared_passages(query, stored)
    runs = _token_runs(found, query, stored)
    tokens = len(query)
    assert (0, tokens, 0, tokens) in runs
    shifts = {run[2] - run[0] for run in runs}
    assert shifts == {9 * shift for shift in range(-15, 16)} and len(runs) == 31
