"""Fingerprints against the slow reference implementations of tests/reference.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.fingerprint import (
    FingerprintParams,
    fingerprint,
    fingerprint_nonempty,
    fingerprint_normalized,
    hamming_distance,
    jaccard_estimate,
    shingle_hashes,
)
from app.core.page import read_page
from app.core.text import EmptyDocument, normalize
from devkit.corpus import CHINESE_NEWS, english_like_text, mutate_words
from tests import reference

PARAMS = [
    FingerprintParams(),
    FingerprintParams(unit="char", size=3, num_perm=64, seed=7),
    FingerprintParams(unit="word", size=1),
    FingerprintParams(unit="word", size=3, num_perm=32, seed=2**64 - 1),
]
SAMPLES = [
    "a",
    "ab",
    "hello world, hello world!",
    "中国经济增长放缓，央行宣布降息。",
    "東京 tokyo 2024年 ラーメン",
    "ภาษาไทย ไม่มี ช่องว่าง",
    "!!! ... ???",
    "e\u0301le\u0300ve 😀👍🏽 mixed ℌ𝔢𝔩𝔩𝔬 Ⅻ",
    english_like_text(random.Random(1), 400),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"{p.unit}{p.size}")
@pytest.mark.parametrize("text", SAMPLES)
def test_every_fingerprint_equals_the_reference(text: str, params: FingerprintParams) -> None:
    normalized = normalize(text)
    expected_hashes = reference.shingle_hashes(normalized, params.unit, params.size, params.seed)

    assert shingle_hashes(normalized, params).tolist() == expected_hashes
    fp = fingerprint([text], params)
    assert int(fp.simhash[0]) == reference.simhash(expected_hashes)
    assert fp.minhash[0].tolist() == reference.one_permutation_minhash(
        expected_hashes, params.num_perm, params.seed
    )


def test_shingles_of_a_text_shorter_than_n_are_the_whole_text() -> None:
    params = FingerprintParams(size=5)
    assert len(shingle_hashes("abc", params)) == 1
    assert len(shingle_hashes("abcde", params)) == 1
    assert len(shingle_hashes("abcdef", params)) == 2
    assert len(shingle_hashes("one two", FingerprintParams(unit="word", size=3))) == 1


def test_word_tokens_split_cjk_into_characters() -> None:
    assert reference.word_tokens("新华社 reports: 经济") == [
        "新",
        "华",
        "社",
        "reports",
        "经",
        "济",
    ]
    params = FingerprintParams(unit="word", size=1)
    hashes = shingle_hashes(normalize("新华社 reports: 经济"), params)
    assert len(hashes) == 6


def test_exact_hash_depends_on_the_normalised_text_only() -> None:
    fp = fingerprint(["Hello  World", "ＨＥＬＬＯ world\n", "Hello World!"], FingerprintParams())
    assert fp.exact[0].tolist() == fp.exact[1].tolist()
    assert fp.exact[0].tolist() != fp.exact[2].tolist()
    assert fp.exact.dtype == np.uint64 and fp.exact.shape == (3, 2)


def test_html_is_reduced_to_its_visible_text() -> None:
    html = "<html><head><style>p {}</style></head><body><p>Oil <b>prices</b> rose</p>"
    html += "<script>var x = 1;</script></body></html>"
    assert normalize(html, html=True) == "oil prices rose"
    fp = fingerprint([read_page(html, "all").text, "Oil prices rose"], FingerprintParams())
    assert (
        fp.exact[0].tolist()
        == fingerprint(["oil prices rose"], FingerprintParams()).exact[0].tolist()
    )


def test_empty_text_is_a_clear_error() -> None:
    with pytest.raises(EmptyDocument, match="document 1: text is empty after normalisation"):
        fingerprint(["fine", " \n\t\u3000 "], FingerprintParams())


def test_minhash_estimates_jaccard_within_its_standard_error() -> None:
    """300 pairs over the whole range of Jaccard, exact Jaccard from Python sets."""
    rng = random.Random(42)
    params = FingerprintParams()
    estimates: list[float] = []
    truths: list[float] = []
    for pair in range(300):
        base = english_like_text(rng, rng.randint(200, 3000))
        other = mutate_words(rng, base, fraction=pair / 300)
        a, b = normalize(base), normalize(other)
        truths.append(
            reference.jaccard(
                set(reference.char_shingles(a, 5)), set(reference.char_shingles(b, 5))
            )
        )
        fp = fingerprint([a, b], params)
        estimates.append(float(jaccard_estimate(fp.minhash[0], fp.minhash[1:])[0]))
    truth = np.array(truths)
    error = np.array(estimates) - truth
    assert truth.min() < 0.1 and truth.max() > 0.9, "pairs must span the range of Jaccard"
    assert abs(error.mean()) <= 0.01
    allowed = 1.2 * np.sqrt(np.mean(truth * (1 - truth) / params.num_perm))
    assert np.sqrt(np.mean(error**2)) <= allowed


def test_chinese_near_duplicates_are_close_and_unrelated_news_is_not() -> None:
    """Every near-duplicate pair is closer than every unrelated pair, by both measures."""
    params = FingerprintParams()
    near_distances: list[int] = []
    for story in CHINESE_NEWS:
        variants = [story.original, story.word_changed, story.sentence_moved, story.sentence_added]
        fp = fingerprint(variants, params)
        near_distances += hamming_distance(fp.simhash[0], fp.simhash[1:]).tolist()
        similarities = jaccard_estimate(fp.minhash[0], fp.minhash[1:])
        assert similarities.min() >= 0.75, (story.original[:10], similarities)
    originals = fingerprint([story.original for story in CHINESE_NEWS], params)
    for i in range(len(CHINESE_NEWS)):
        others = np.delete(np.arange(len(CHINESE_NEWS)), i)
        assert hamming_distance(originals.simhash[i], originals.simhash[others]).min() > max(
            near_distances
        )
        assert jaccard_estimate(originals.minhash[i], originals.minhash[others]).max() < 0.2


def test_near_duplicates_are_closer_than_unrelated_texts_in_hamming_distance() -> None:
    rng = random.Random(3)
    texts = [english_like_text(rng, 2000) for _ in range(20)]
    near = [mutate_words(rng, text, fraction=0.02) for text in texts]
    fp = fingerprint(texts + near, FingerprintParams())
    near_distances = [
        int(hamming_distance(fp.simhash[i], fp.simhash[20 + i : 21 + i])[0]) for i in range(20)
    ]
    unrelated = hamming_distance(fp.simhash[0], fp.simhash[1:20])
    assert max(near_distances) < unrelated.min()


@settings(max_examples=200, deadline=None)
@given(st.text(), st.sampled_from(PARAMS))
def test_any_unicode_gives_fingerprints_or_a_clear_error(
    text: str, params: FingerprintParams
) -> None:
    try:
        fp = fingerprint([text], params)
    except EmptyDocument:
        assert normalize(text) == ""
        return
    assert fp.minhash.shape == (1, params.num_perm)
    again = fingerprint([normalize(text)], params)
    assert fp.simhash.tolist() == again.simhash.tolist()
    assert fp.minhash.tolist() == again.minhash.tolist()
    assert fp.exact.tolist() == again.exact.tolist()


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.text(min_size=1).filter(lambda t: normalize(t) != ""), min_size=1, max_size=8),
    st.randoms(use_true_random=False),
)
def test_a_document_does_not_depend_on_its_batch(texts: list[str], rnd: random.Random) -> None:
    params = FingerprintParams(unit="char", size=4, num_perm=32)
    batch = fingerprint(texts, params)
    order = list(range(len(texts)))
    rnd.shuffle(order)
    shuffled = fingerprint([texts[i] for i in order], params)
    for position, original in enumerate(order):
        alone = fingerprint([texts[original]], params)
        for fp, row in ((batch, original), (shuffled, position)):
            assert int(fp.simhash[row]) == int(alone.simhash[0])
            assert fp.minhash[row].tolist() == alone.minhash[0].tolist()
            assert fp.exact[row].tolist() == alone.exact[0].tolist()


def test_a_megabyte_of_text_is_fingerprinted() -> None:
    rng = random.Random(5)
    text = english_like_text(rng, 1_000_000) + "中文" * 1000 + "😀" * 1000
    fp = fingerprint([text], FingerprintParams(unit="word", size=2))
    assert fp.minhash.shape == (1, 128)


def test_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="shingle unit"):
        FingerprintParams(unit="byte")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shingle size"):
        FingerprintParams(size=0)
    with pytest.raises(ValueError, match="num_perm"):
        FingerprintParams(num_perm=0)


ASCII_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(
        st.lists(
            st.sampled_from(
                [*"abcXYZ019.,;'-_!?", *ASCII_WHITESPACE, "Straße", "中文", "é", "\u3000"]
            ),
            min_size=1,
            max_size=60,
        ).map("".join),
        min_size=1,
        max_size=8,
    ),
    unit=st.sampled_from(["word", "char"]),
    size=st.integers(1, 5),
)
def test_the_compiled_ascii_path_equals_python_normalisation(
    texts: list[str], unit: str, size: int
) -> None:
    """ASCII texts are normalised in compiled code; the Python normalize is the reference,
    batch by batch, mixed with non-ASCII texts that take the Python path."""
    params = FingerprintParams(unit=unit, size=size)  # type: ignore[arg-type]
    normalized = [normalize(text) for text in texts]
    if not all(normalized):
        first_empty = next(i for i, text in enumerate(normalized) if not text)
        with pytest.raises(EmptyDocument, match=f"document {first_empty}:"):
            fingerprint(texts, params)
        return
    expected = fingerprint_normalized(normalized, params)
    found = fingerprint(texts, params)
    assert np.array_equal(found.simhash, expected.simhash)
    assert np.array_equal(found.minhash, expected.minhash)
    assert np.array_equal(found.exact, expected.exact)


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.sampled_from([*"abcXYZ019.,;'-_!?", *ASCII_WHITESPACE, "\x00", "\x7f", "\x85"]),
        min_size=0,
        max_size=80,
    ).map("".join),
    unit=st.sampled_from(["word", "char"]),
    size=st.integers(1, 5),
    short_chars=st.sampled_from([0, 10, 100]),
)
def test_one_text_alone_is_fingerprinted_as_the_python_reference_does(
    text: str, unit: str, size: int, short_chars: int
) -> None:
    """A search or a single insert takes the one-text path: the Python normalisation is
    the reference, short text and empty result included."""
    params = FingerprintParams(unit=unit, size=size)  # type: ignore[arg-type]
    normalized = normalize(text)
    found, kept = fingerprint_nonempty([text], params, short_chars=short_chars)
    if not normalized:
        assert kept.tolist() == [] and len(found) == 0
        return
    expected = fingerprint_normalized([normalized], params)
    assert kept.tolist() == [0]
    assert np.array_equal(found.simhash, expected.simhash)
    assert np.array_equal(found.minhash, expected.minhash)
    assert np.array_equal(found.exact, expected.exact)
    if short_chars:
        assert found.shorts == [normalized if len(normalized) <= short_chars else None]
    else:
        assert found.shorts is None
