"""NgramIndex against brute force: exact Jaccard of Python sets of q-gram strings.

Every answer must be exactly the brute force's: every live stored text with Jaccard >=
t, none below, with its Jaccard, best first and ties by row. Hypothesis drives random
sequences of inserts, deletes, merges (and order rebuilds) and searches over small
alphabets (many shared q-grams), Chinese, mixed scripts of every packed width, and
empty texts; ``_check()`` runs after every step.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.core import _gram_kernels as kernels
from app.core import ngram
from app.core.fingerprint import code_points_of
from app.core.ngram import NgramIndex
from app.core.sorted_table import MIN_DIRECTORY_ENTRIES, TAIL_CAPACITY, Run, SortedTable
from app.core.template import differing_numbers

# ---------------------------------------------------------------- brute force


def is_cjk(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in ngram.CJK_RANGES)


def qgrams(text: str, size: int, cjk_size: int | None = None) -> set[str]:
    """The q-gram set: no q-gram for an empty text; the substring of q characters at each
    position where one fits, q being ``cjk_size`` at a CJK character and ``size`` at any
    other (``cjk_size`` None: ``size`` everywhere); the whole text when none fits."""
    if not text:
        return set()
    grams = set()
    for i, char in enumerate(text):
        q = cjk_size if cjk_size is not None and is_cjk(char) else size
        if i + q <= len(text):
            grams.add(text[i : i + q])
    return grams or {text}


def brute_force(
    texts: dict[int, str],
    deleted: set[int],
    query: str,
    size: int,
    threshold: float,
    cjk_size: int | None = None,
    same_numbers: bool = False,
) -> list[tuple[int, float]]:
    """(row, Jaccard) of every live text at or above the threshold, best first, ties by row;
    with ``same_numbers``, not those ``differing_numbers`` refuses (tested against plain
    references in tests/api/test_short_templates.py)."""
    wanted = qgrams(query, size, cjk_size)
    found = []
    for row, text in texts.items():
        grams = qgrams(text, size, cjk_size)
        if row in deleted or not grams or not wanted:
            continue
        if same_numbers and differing_numbers(query, text) is not None:
            continue
        shared = len(grams & wanted)
        similarity = shared / (len(grams) + len(wanted) - shared)
        if similarity >= threshold:
            found.append((row, similarity))
    return sorted(found, key=lambda pair: (-pair[1], pair[0]))


def answer(index: NgramIndex, query: str, threshold: float) -> list[tuple[int, float]]:
    rows, similarities = index.search(query, threshold)
    return list(zip(rows.tolist(), similarities.tolist(), strict=True))


@contextmanager
def small_order_constants() -> Iterator[None]:
    """Learn (and re-learn) the token order after a handful of texts, from a small
    sample, so that rebuilds happen inside short test sequences."""
    with (
        patch.object(ngram, "ORDER_FIRST_ROWS", 6),
        patch.object(ngram, "ORDER_GROWTH", 2),
        patch.object(ngram, "ORDER_SAMPLE_ROWS", 5),
    ):
        yield


# ---------------------------------------------------------------- strategies

ALPHABETS = {
    "binary": "ab",
    "small": "abc ",
    "latin": "aeiou rstln",
    "latin-1": "aé ñü",  # one byte per character
    "chinese": "的一是不了人我在有他这中大来上国",  # two bytes per character
    "mixed": "ab 中国。é😀",  # an astral character: four bytes per character
    "scripts": "ab 中国かな한글",  # Latin, Han, kana and Hangul side by side
    "figures": "a 12٣十三",  # digits, another script's digit, Chinese numerals
}

# Thresholds a / b with small b hit similarities exactly (2/3 is both a threshold and a
# Jaccard of two small sets), where a rounding error in a filter would show.
FRACTIONS = sorted({Fraction(a, b) for b in range(1, 11) for a in range(1, b + 1)})


def threshold_at_least(low: float) -> st.SearchStrategy[float]:
    fractions = [float(f) for f in FRACTIONS if float(f) >= low]
    return st.one_of(st.sampled_from(fractions), st.floats(low, 1.0), st.just(low), st.just(1.0))


@st.composite
def texts_over(draw: st.DrawFn, alphabet: str, max_size: int = 14) -> str:
    return draw(st.text(alphabet=alphabet, min_size=0, max_size=max_size))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, int | None, float, list[tuple[object, ...]]]:
    size = draw(st.integers(1, 5))
    cjk_size = draw(st.one_of(st.none(), st.integers(1, 5)))
    build = float(draw(st.sampled_from([f for f in FRACTIONS if f >= Fraction(1, 10)])))
    alphabet = ALPHABETS[draw(st.sampled_from(sorted(ALPHABETS)))]
    text = texts_over(alphabet)
    operations: list[tuple[object, ...]] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["insert", "insert", "delete", "merge", "search", "search"]))
        if kind == "insert":
            operations.append((kind, draw(st.lists(text, min_size=1, max_size=8))))
        elif kind == "delete":
            operations.append((kind, draw(st.lists(st.integers(0, 60), max_size=3))))
        elif kind == "merge":
            operations.append((kind,))
        else:
            operations.append((kind, draw(text), draw(threshold_at_least(build))))
    return size, cjk_size, build, operations


# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans(), st.integers(1, 4), st.booleans())
def test_search_equals_brute_force_jaccard(
    scenario: tuple[int, int | None, float, list[tuple[object, ...]]],
    learn_order: bool,
    prefix_matches: int,
    same_numbers: bool,
) -> None:
    size, cjk_size, build, operations = scenario
    with small_order_constants():
        index = NgramIndex(
            threshold=build,
            size=size,
            learn_order=learn_order,
            prefix_matches=prefix_matches,
            cjk_size=cjk_size,
            same_numbers=same_numbers,
        )
        texts: dict[int, str] = {}
        deleted: set[int] = set()
        for operation in operations:
            kind = operation[0]
            if kind == "insert":
                batch = list(operation[1])  # type: ignore[call-overload]
                rows = list(range(len(texts), len(texts) + len(batch)))
                index.insert(batch, rows)
                texts.update(zip(rows, batch, strict=True))
            elif kind == "delete":
                victims = [row for row in operation[1] if row in texts]  # type: ignore[attr-defined]
                index.delete(victims)
                deleted.update(victims)
            elif kind == "merge":
                index.merge()
            else:
                query, threshold = str(operation[1]), float(operation[2])  # type: ignore[arg-type]
                assert answer(index, query, threshold) == brute_force(
                    texts, deleted, query, size, threshold, cjk_size, same_numbers
                ), (size, cjk_size, build, index.order.learned_rows, texts, deleted, query)
            index._check()
        assert len(index) == len(set(texts) - deleted)
        # Every stored text finds itself (unless empty or deleted), and what brute force says.
        queries = list(texts.values())
        ends, rows, similarities = index.search_many(queries, build)
        start = 0
        for query, end in zip(queries, ends.tolist(), strict=True):
            found = list(
                zip(rows[start:end].tolist(), similarities[start:end].tolist(), strict=True)
            )
            assert found == brute_force(texts, deleted, query, size, build, cjk_size, same_numbers)
            start = end


@settings(max_examples=40, deadline=None)
@given(
    st.lists(texts_over(ALPHABETS["latin"], 40), min_size=1, max_size=30),
    st.integers(2, 4),
    st.sampled_from([0.3, 0.5, 0.7, 0.9]),
)
def test_batch_search_equals_single_searches(texts: list[str], size: int, threshold: float) -> None:
    index = NgramIndex(threshold=threshold, size=size)
    index.insert(texts, np.arange(len(texts)))
    ends, rows, similarities = index.search_many(texts)
    start = 0
    for text, end in zip(texts, ends.tolist(), strict=True):
        single_rows, single_similarities = index.search(text)
        assert rows[start:end].tolist() == single_rows.tolist()
        assert similarities[start:end].tolist() == single_similarities.tolist()
        start = end


# ---------------------------------------------------------------- seeded cases


def edit(rng: np.random.Generator, text: str, edits: int, alphabet: str) -> str:
    """The text with ``edits`` random substitutions, insertions or deletions."""
    chars = list(text)
    for _ in range(edits):
        kind = int(rng.integers(3))
        position = int(rng.integers(len(chars) + (kind == 1))) if chars else 0
        letter = alphabet[int(rng.integers(len(alphabet)))]
        if kind == 0 and chars:
            chars[position] = letter
        elif kind == 1 or not chars:
            chars.insert(position, letter)
        else:
            del chars[position]
    return "".join(chars)


@pytest.mark.parametrize("cjk_size", [None, 3])
def test_long_texts_cap_sizes_and_positions_in_keys_without_losing_matches(
    cjk_size: int | None,
) -> None:
    """Sets of 255 or more q-grams store size and position 255 in their keys: the filters
    must then read the real size and never drop a match."""
    rng = np.random.default_rng(3)
    alphabet = "abcdefghijklmnopqrstuvwxyz 中国的人"
    bases = ["".join(rng.choice(list(alphabet), int(n))) for n in rng.integers(200, 700, 6)]
    texts = {
        row: edit(rng, bases[row % len(bases)], int(rng.integers(0, 60)), alphabet)
        for row in range(120)
    }
    index = NgramIndex(threshold=0.2, size=2, cjk_size=cjk_size)
    index.insert(list(texts.values()), list(texts))
    assert index.set_sizes(list(texts)).max() > 255
    index.merge()
    index._check()
    for threshold in (0.2, 0.35, 0.6, 0.9):
        for query in [texts[row] for row in range(0, 120, 7)] + [
            edit(rng, bases[0], 100, alphabet)
        ]:
            assert answer(index, query, threshold) == brute_force(
                texts, set(), query, 2, threshold, cjk_size
            )


def test_every_run_of_the_table_is_searched_with_tombstones() -> None:
    """Main (with its directory), a middle run, the buffer and the tail (a large one, read
    in one pass), each holding tombstoned rows: answers stay brute force's."""
    rng = np.random.default_rng(11)
    alphabet = "abcdefghij 的一是不了"
    bases = ["".join(rng.choice(list(alphabet), int(n))) for n in rng.integers(20, 60, 300)]
    texts: dict[int, str] = {}

    def add(count: int, single: bool = False) -> None:
        batch = [edit(rng, bases[int(rng.integers(300))], int(rng.integers(0, 4)), alphabet)
                 for _ in range(count)]  # fmt: skip
        rows = list(range(len(texts), len(texts) + count))
        if single:
            for row, text in zip(rows, batch, strict=True):
                index.insert([text], [row])
        else:
            index.insert(batch, rows)
        texts.update(zip(rows, batch, strict=True))

    index = NgramIndex(threshold=0.5, size=3, learn_order=False)
    add(6_000)
    index.merge()
    table = index._state.table
    assert table.snapshot().main.directory.shape[0] == 1
    assert len(table.snapshot().main) >= MIN_DIRECTORY_ENTRIES
    add(300)
    # A merge caught when it has just moved the buffer to the middle run.
    state = table.snapshot()
    table._snapshot = dataclasses.replace(state, middle=state.buffer, buffer=Run.empty(1))
    add(300)
    add(120, single=True)
    state = table.snapshot()
    # The index's tail holds many single inserts (several entries each), past the default.
    assert table.tail_capacity == ngram.TAIL_ENTRIES > TAIL_CAPACITY
    assert len(state.middle) and len(state.buffer)
    assert TAIL_CAPACITY < state.tail_count <= table.tail_capacity
    deleted = set(rng.choice(len(texts), 400, replace=False).tolist())
    index.delete(list(deleted))
    index._check()
    for query in [texts[int(row)] for row in rng.integers(0, len(texts), 40)] + bases[:10]:
        for threshold in (0.5, 0.75):
            assert answer(index, query, threshold) == brute_force(
                texts, deleted, query, 3, threshold
            )


def test_learned_order_is_rebuilt_by_merges_and_cuts_candidates() -> None:
    """Past ORDER_FIRST_ROWS the order is learned, and learned again after ORDER_GROWTH-fold
    growth, by merge; texts inserted during a rebuild are re-keyed at the swap. A query
    whose rarest tokens are rare verifies fewer candidates than under the hash order."""
    rng = np.random.default_rng(5)
    common = ["the ", "and ", "of ", "ing ", "tion "]
    words = [*common * 40, *("".join(rng.choice(list("bcdfgkmpvwxz"), 4)) for _ in range(400))]

    def title() -> str:
        return " ".join(rng.choice(words, int(rng.integers(5, 10))))

    texts = {row: title() for row in range(3_000)}
    hashed = NgramIndex(threshold=0.6, size=3, learn_order=False)
    learned = NgramIndex(threshold=0.6, size=3)
    with patch.object(ngram, "ORDER_FIRST_ROWS", 500):
        for index in (hashed, learned):
            for start in range(0, 3_000, 250):
                rows = list(range(start, start + 250))
                index.insert([texts[row] for row in rows], rows)
                if index.needs_merge():
                    index.merge()
        assert learned.order.learned_rows >= 2_000 and len(learned.order.table_codes)
        assert hashed.order.learned_rows == 0
        # A rebuild with inserts arriving in the middle of it.
        original = learned._learn

        def learn_while_inserting(rows: np.ndarray, learned_rows: int) -> ngram.QgramOrder:
            extra = {row: title() for row in range(3_000, 3_100)}
            learned.insert(list(extra.values()), list(extra))
            texts.update(extra)
            return original(rows, learned_rows)

        with (
            patch.object(learned, "_learn", learn_while_inserting),
            patch.object(ngram, "ORDER_GROWTH", 1),
        ):
            assert learned.merge()
        learned._check()
    queries = [texts[row] for row in range(0, 3_100, 61)]
    for query in queries:
        assert answer(learned, query, 0.6) == brute_force(texts, set(), query, 3, 0.6)
    assert learned.candidate_counts(queries).sum() < hashed.candidate_counts(queries).sum() / 2


def test_thresholds_below_the_index_are_refused_and_empty_texts_match_nothing() -> None:
    index = NgramIndex(threshold=0.6)
    index.insert(["", "abc", "abcd"], [0, 1, 2])
    with pytest.raises(ValueError, match="threshold"):
        index.search("abc", 0.5)
    with pytest.raises(ValueError, match="threshold"):
        NgramIndex(threshold=0.0)
    with pytest.raises(ValueError, match="size"):
        NgramIndex(size=0)
    assert answer(index, "", 0.6) == []
    assert answer(index, "abc", 1.0) == [(1, 1.0)]
    assert answer(index, "abcd", 0.6) == [(2, 1.0)]  # not "abc": {abc, bcd} vs {abc} is 0.5
    index.delete([0])
    index.merge()
    index._check()
    assert len(index) == 2
    with pytest.raises(ValueError, match="new"):
        index.insert(["x"], [0])


def test_the_q_of_a_gram_is_that_of_its_first_characters_script() -> None:
    """cjk_size 2, size 3: "ab中国c" has "ab中", "b中国" (Latin starts), "中国", "国c" (CJK
    starts) and nothing at "c"; a text where no gram fits is one gram, itself."""
    assert qgrams("ab中国c", 3, 2) == {"ab中", "b中国", "中国", "国c"}
    assert qgrams("a中", 3, 2) == {"a中"} and qgrams("中", 3, 2) == {"中"}
    index = NgramIndex(threshold=0.1, size=3, cjk_size=2)
    texts = {0: "ab中国c", 1: "ab中国", 2: "中国c", 3: "a中", 4: "한국어 뉴스", 5: "한국 뉴스"}
    index.insert(list(texts.values()), list(texts))
    # {ab中, b中国, 中国, 国c} against {ab中, b中国, 中国}: 3 / 4; against {中国, 国c}: 2 / 4.
    assert answer(index, "ab中国c", 0.1) == [(0, 1.0), (1, 0.75), (2, 0.5)]
    # Hangul syllables are CJK here: 한국, 국어, "어 ", then " 뉴스" (q 3 at the space), 뉴스.
    expected = brute_force(texts, set(), "한국어 뉴스", 3, 0.1, 2)
    assert answer(index, "한국어 뉴스", 0.1) == expected and expected[1][0] == 5


def test_the_kernels_cjk_test_is_the_documented_ranges() -> None:
    """``is_cjk`` in the kernels against ngram.CJK_RANGES: every range's ends and their
    neighbours, and a seeded sample of every plane in use."""
    points = {0, 0x10FFFF}
    for low, high in ngram.CJK_RANGES:
        points.update((low - 1, low, high, high + 1))
    points.update(np.random.default_rng(1).integers(0, 0x40000, 3000).tolist())
    for point in sorted(points):
        assert kernels.is_cjk(np.uint64(point)) == is_cjk(chr(point)), hex(point)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(texts_over(ALPHABETS["scripts"]), texts_over("abc "), texts_over("中国人民")),
    st.integers(1, 5),
    st.integers(1, 5),
)
def test_one_script_texts_get_the_same_codes_by_the_rolling_path(
    text: str, size: int, cjk_size: int
) -> None:
    """With two q, a text of one script takes a rolling window (``_two_q_codes``): its
    codes must be those of the general path, whose q is decided at each character."""
    assume(size != cjk_size)  # one q: the path of old, whose codes are its own
    # Writable, as the service's packed texts are: a read-only array is another compile.
    points = code_points_of(text).view(np.uint8)
    fast, general = np.zeros(32, np.uint64), np.zeros(32, np.uint64)
    count = kernels.gram_codes((points, 0, 4, len(text)), (size, cjk_size), fast)
    if not text:
        assert count == 0
        return
    expected = kernels._script_codes((points, 0, 4, len(text)), (size, cjk_size), general)
    assert fast[:count].tolist() == general[:expected].tolist()


def test_stored_texts_round_trip_at_every_width() -> None:
    texts = ["plain", "café", "中文标题", "emoji 😀 mixed 中", ""]
    index = NgramIndex()
    index.insert(texts, [0, 1, 2, 3, 5])
    assert [index.text(row) for row in (0, 1, 2, 3, 5)] == texts
    assert index._texts.widths.array[[0, 1, 2, 3, 5]].tolist() == [1, 1, 2, 4, 1]
    assert index.holds([0, 4, 5, 9, -1]).tolist() == [True, False, True, False, False]


def test_planted_one_and_two_character_edits_of_titles_are_found() -> None:
    """A 40-character title with one edit is above 0.7 at q = 3; the index finds every
    planted copy with its exact similarity."""
    rng = np.random.default_rng(8)
    letters = "abcdefghijklmnopqrstuvwxyz"
    titles = [
        " ".join("".join(rng.choice(list(letters), int(rng.integers(3, 9)))) for _ in range(6))
        for _ in range(500)
    ]
    texts = dict(enumerate(titles))
    texts.update({500 + i: edit(rng, titles[i], 1 + i % 2, letters) for i in range(200)})
    index = NgramIndex(threshold=0.5)
    index.insert(list(texts.values()), list(texts))
    for i in range(200):
        expected = brute_force(texts, set(), titles[i], 3, 0.5)
        assert answer(index, titles[i], 0.5) == expected
        assert 500 + i in [row for row, _ in expected]


# ---------------------------------------------------------------- threads


def test_readers_see_every_text_during_inserts_merges_and_rebuilds() -> None:
    """One writer, a merger (whose merges include order rebuilds), two readers: a text
    inserted before a search began is always found by itself."""
    rng = np.random.default_rng(13)
    words = ["".join(rng.choice(list("abcdefghijklmnop"), 5)) for _ in range(300)]
    total = 6_000
    texts = [" ".join(rng.choice(words, 6)) + f" {row}" for row in range(total)]
    index = NgramIndex(threshold=0.8)
    inserted = [0]
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        row = 0
        writer_rng = np.random.default_rng(1)
        while row < total:
            count = int(writer_rng.choice([1, 5, 200]))
            rows = list(range(row, min(total, row + count)))
            index.insert([texts[r] for r in rows], rows)
            row = rows[-1] + 1
            inserted[0] = row
        done.set()

    def merger() -> None:
        while not done.is_set():
            index.merge()

    def reader(seed: int) -> None:
        reader_rng = np.random.default_rng(seed)
        checked = 0
        while not done.is_set() or checked < 100:
            limit = inserted[0]
            if limit == 0:
                continue
            row = int(reader_rng.integers(limit))
            rows, _ = index.search(texts[row])
            assert row in rows.tolist(), row
            checked += 1

    def guarded(target: object) -> threading.Thread:
        def run() -> None:
            try:
                target()  # type: ignore[operator]
            except BaseException as error:
                errors.append(error)

        return threading.Thread(target=run)

    with patch.object(ngram, "ORDER_FIRST_ROWS", 1_000), patch.object(ngram, "ORDER_GROWTH", 2):
        threads = [guarded(writer), guarded(merger), guarded(lambda: reader(2)),
                   guarded(lambda: reader(3))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    assert index.order.learned_rows >= 1_000
    index.merge()
    index._check()


def test_a_table_with_its_own_tail_capacity_flushes_when_that_is_full() -> None:
    """SortedTable(tail_capacity=c): inserts stay in the tail up to c entries, then the
    tail and the batch are sorted into the buffer; lookups see every entry throughout."""
    table = SortedTable(lanes=1, tail_capacity=10)
    keys = np.arange(25, dtype=np.uint64)[::-1].copy()
    for row, key in enumerate(keys.tolist()):
        table.insert(np.array([[key]], dtype=np.uint64), np.array([row]))
        state = table.snapshot()
        assert state.tail_count == (row + 1) % 11 or len(state.buffer) > 0
        assert state.tail_count <= 10
        table._check()
        assert table.lookup_equal(0, key).tolist() == [row]
    assert sorted(table.lookup_range(0, 0, 24).tolist()) == list(range(25))
    with pytest.raises(ValueError):
        SortedTable(lanes=1, tail_capacity=0)


def test_same_numbers_drops_exactly_what_the_rule_refuses() -> None:
    """Templated reports (one line, other figures) against brute force with the rule:
    the index refuses exactly the pairs ``differing_numbers`` refuses, through inserts,
    deletes and merges, and refuses some (the test can fail)."""
    rng = random.Random(11)
    figures_pool = ["1222", "1627", "7", "8", "three", "3", "六", "十二", "٣", "205.81", ""]

    def report() -> str:
        return f"lme nickel ring {rng.choice(figures_pool)} - apr {rng.choice(figures_pool)}"

    index = NgramIndex(threshold=0.5, size=3, same_numbers=True)
    texts: dict[int, str] = {}
    deleted: set[int] = set()
    refused = 0
    for step in range(12):
        batch = [report() for _ in range(20)]
        rows = list(range(len(texts), len(texts) + len(batch)))
        index.insert(batch, rows)
        texts.update(zip(rows, batch, strict=True))
        if step % 3 == 2:
            victims = rng.sample(sorted(texts), 5)
            index.delete(victims)
            deleted.update(victims)
        if step % 4 == 3:
            index.merge()
        index._check()
        for query in [report() for _ in range(10)]:
            expected = brute_force(texts, deleted, query, 3, 0.5, None, same_numbers=True)
            assert answer(index, query, 0.5) == expected
            refused += len(brute_force(texts, deleted, query, 3, 0.5)) - len(expected)
    assert refused > 100
