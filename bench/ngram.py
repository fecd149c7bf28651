"""NgramIndex: speed, candidates and memory on short texts, against brute force.

Run from the repository root::

    .venv/bin/python -m bench.ngram [--sizes 100000,1000000] [--runs 3] [--seed 0] [--quick]

One pinned core, every thread pool capped at one thread, seeded data:

- English titles of 40-80 characters: words drawn with the frequencies of the words of
  the Reuters-21578 titles (../shared/data; made-up words with Zipf frequencies when it
  is absent), normalised;
- Chinese-like texts of 20-40 characters: words of 1-4 characters drawn with Zipf
  frequencies from 30,000 words over 3,500 CJK characters, themselves Zipf-distributed;
- one text in ten a near-duplicate of an earlier one: 1 to 3 character edits
  (substitution, insertion or deletion).

Sections:

1. The choice of q: on real titles (Reuters, 30+ characters) and on the Chinese-like
   texts, the share of 1- and 2-edit copies found at each threshold for q = 2, 3, 4, and
   the pairs of distinct real titles matched (which should be near-duplicates only).
2. Token order and prefix matches at 100K: hash order against the learned order, and
   ``prefix_matches`` 1 to 4: candidates verified per query, latency, memory.
3. The index at each size (half English, half Chinese-like; threshold 0.7): batched
   insert rate (batches of 10,000 with the merges and order rebuilds ``needs_merge()``
   asks for), single inserts, query latency p50 / p99 for near-duplicate queries (an
   edited copy of a stored text) and for new texts, candidates and matches per query,
   bytes per text (``memory_bytes()`` and the RSS growth).
4. Against brute force (exact Jaccard of every stored q-gram set, numpy) at 20,000 texts,
   answers compared; and the Reuters titles themselves as real short texts.

Every answer checked is asserted equal to brute force. Figures over runs are shown as
``median (min-max)``. The report is printed and written to ``bench/results/ngram.md``.
"""

from __future__ import annotations

import os

from devkit.harness import THREAD_LIMITS

# Thread pools size themselves when their library is imported, so cap them first.
os.environ.update(THREAD_LIMITS)

import argparse
import collections
import functools
import inspect
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core import ngram
from app.core.ngram import NgramIndex
from app.core.text import normalize
from devkit.harness import (
    REPO_ROOT,
    REUTERS_PATH,
    format_spread,
    format_us,
    latencies_us,
    load_reuters,
    machine_summary,
    markdown_table,
    percentile,
    pin_to_one_core,
    release_memory,
    rss_bytes,
    spread,
    write_result,
)

BATCH = 10_000
THRESHOLD = 0.7
# What is timed: CPU time by default (this thread's for a query, the process's for a
# build: the machine is shared, and other jobs' load inflates the wall clock, not these);
# ``--clock wall`` for the wall clock. Set by main().
QUERY_CLOCK: Callable[[], int] = time.thread_time_ns
SECONDS: Callable[[], float] = time.process_time
# q of the grams that start at a CJK character (None: one q); ``--cjk-size``.
CJK_SIZE: int | None = ngram.DEFAULT_CJK_SIZE
NEAR_DUPLICATE_SHARE = 0.1
LATIN = "abcdefghijklmnopqrstuvwxyz"
CJK_CHARACTERS = 3_500
CJK_WORDS = 30_000


# ---------------------------------------------------------------- data


def edit(rng: np.random.Generator, text: str, edits: int, alphabet: str) -> str:
    """The text with ``edits`` random character substitutions, insertions or deletions."""
    chars = list(text)
    for _ in range(edits):
        kind = int(rng.integers(3))
        letter = alphabet[int(rng.integers(len(alphabet)))]
        if kind == 1 or len(chars) < 2:
            chars.insert(int(rng.integers(len(chars) + 1)), letter)
        elif kind == 0:
            chars[int(rng.integers(len(chars)))] = letter
        else:
            del chars[int(rng.integers(len(chars)))]
    return "".join(chars)


def zipf_weights(count: int, exponent: float = 1.0) -> npt.NDArray[np.float64]:
    weights = 1.0 / np.arange(1, count + 1) ** exponent
    return weights / weights.sum()


@dataclass
class Vocabulary:
    """Words with their probabilities, and the characters edits draw from."""

    words: list[str]
    weights: npt.NDArray[np.float64]
    alphabet: str
    separator: str


def english_vocabulary(rng: np.random.Generator) -> tuple[Vocabulary, str]:
    """The words of the Reuters titles with their frequencies, or made-up words."""
    stories = load_reuters()
    if stories is not None:
        counts: collections.Counter[str] = collections.Counter()
        for story in stories:
            counts.update(normalize(story.get("title") or "").split())
        words, frequencies = zip(*counts.most_common(), strict=True)
        weights = np.array(frequencies, dtype=np.float64)
        source = f"the {len(words):,} words of the Reuters titles, with their frequencies"
        return Vocabulary(list(words), weights / weights.sum(), LATIN, " "), source
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"]
    made_up = {"".join(rng.choice(syllables, int(rng.integers(1, 4)))) for _ in range(40_000)}
    words = sorted(made_up)
    rng.shuffle(words)
    source = f"{len(words):,} made-up words with Zipf frequencies (Reuters absent)"
    return Vocabulary(words, zipf_weights(len(words)), LATIN, " "), source


def wordfreq_vocabulary(language: str) -> Vocabulary | None:
    """Every word of wordfreq's large list for ``language`` (English: 316K words of
    lowercase letters, digits and ' . -; Chinese: 297K words of CJK characters) with its
    frequency in real text: a long tail, so that the vocabulary of a sample keeps growing
    with its size as that of real titles does. None when wordfreq is absent."""
    try:
        import wordfreq
    except ImportError:
        return None
    frequencies = wordfreq.get_frequency_dict(language, wordlist="large")
    english = language == "en"
    pattern = re.compile(r"[a-z0-9][a-z0-9'.-]*\Z" if english else r"[\u4e00-\u9fff]+\Z")
    kept = [(word, value) for word, value in frequencies.items() if pattern.match(word)]
    weights = np.array([value for _, value in kept], dtype=np.float64)
    words = [word for word, _ in kept]
    alphabet = LATIN if english else "".join(sorted({c for word in words[:3000] for c in word}))
    return Vocabulary(words, weights / weights.sum(), alphabet, " " if english else "")


def chinese_vocabulary(rng: np.random.Generator) -> Vocabulary:
    """30,000 words of 1-4 characters over 3,500 CJK characters, both Zipf-distributed."""
    characters = np.array(
        [chr(0x4E00 + int(i)) for i in rng.permutation(0x9FA5 - 0x4E00)[:CJK_CHARACTERS]]
    )
    character_weights = zipf_weights(CJK_CHARACTERS)
    lengths = rng.choice([1, 2, 2, 2, 3, 4], CJK_WORDS)
    words = ["".join(rng.choice(characters, int(n), p=character_weights)) for n in lengths]
    return Vocabulary(words, zipf_weights(CJK_WORDS), "".join(characters[:500]), "")


def sentences(
    rng: np.random.Generator, vocabulary: Vocabulary, count: int, low: int, high: int
) -> list[str]:
    """``count`` texts of low..high characters: words drawn by weight until long enough."""
    lengths = rng.integers(low, high + 1, count)
    draws = rng.choice(len(vocabulary.words), size=count * (high + 2), p=vocabulary.weights)
    words, separator = vocabulary.words, vocabulary.separator
    texts = []
    k = 0
    for length in lengths.tolist():
        parts: list[str] = []
        total = -len(separator)
        while total < length:
            word = words[draws[k]]
            k += 1
            parts.append(word)
            total += len(word) + len(separator)
        texts.append(separator.join(parts)[:length].strip())
    return texts


def with_near_duplicates(
    rng: np.random.Generator, texts: list[str], alphabet: str
) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The texts with one in ten replaced by 1-3 character edits of an earlier one; and
    for each text the one it was made from (-1: none) and the number of edits."""
    out = list(texts)
    sources = np.full(len(out), -1, dtype=np.int64)
    edits = np.zeros(len(out), dtype=np.int64)
    for i in np.flatnonzero(rng.random(len(out)) < NEAR_DUPLICATE_SHARE).tolist():
        if i > 0:
            source = int(rng.integers(i))
            count = int(rng.integers(1, 4))
            out[i] = edit(rng, out[source], count, alphabet)
            sources[i], edits[i] = source, count
    return out, sources, edits


@dataclass
class Corpus:
    """Half English titles, half Chinese-like texts, interleaved at random; ``sources[i]``
    the text that text i is a planted edit of (-1: none), with ``edits[i]`` edits."""

    texts: list[str]
    english: npt.NDArray[np.bool_]
    english_source: str
    chinese_alphabet: str
    sources: npt.NDArray[np.int64] | None = None
    edits: npt.NDArray[np.int64] | None = None


# The corpora: "reuters", words of the 20K-word Reuters title vocabulary (which every
# title of a large corpus then reuses) and made-up Chinese; "wordfreq", the long-tail
# vocabularies of real English and Chinese text.
CORPORA = ("reuters", "wordfreq")


def make_corpus(size: int, seed: int, kind: str = "reuters") -> Corpus:
    rng = np.random.default_rng(seed)
    english_words, source = english_vocabulary(rng)
    chinese_words = chinese_vocabulary(rng)
    if kind == "wordfreq":
        english_long, chinese_long = wordfreq_vocabulary("en"), wordfreq_vocabulary("zh")
        if english_long is None or chinese_long is None:
            raise SystemExit("the wordfreq corpus needs wordfreq (pip install -e '.[bench]')")
        english_words, chinese_words = english_long, chinese_long
        source = (
            f"wordfreq's {len(english_words.words):,} English words with their frequencies"
            f" (Chinese: its {len(chinese_words.words):,} words)"
        )
    half = size // 2
    english, english_sources, english_edits = with_near_duplicates(
        rng, sentences(rng, english_words, half, 40, 80), english_words.alphabet
    )
    chinese, chinese_sources, chinese_edits = with_near_duplicates(
        rng, sentences(rng, chinese_words, size - half, 20, 40), chinese_words.alphabet
    )
    order = rng.permutation(size)
    texts = english + chinese
    is_english = np.arange(size) < half
    # Sources in the shuffled order.
    sources = np.concatenate(
        [english_sources, np.where(chinese_sources < 0, -1, chinese_sources + half)]
    )
    position = np.empty(size, dtype=np.int64)
    position[order] = np.arange(size)
    shuffled = sources[order]
    shuffled = np.where(shuffled < 0, -1, position[np.maximum(shuffled, 0)])
    return Corpus(
        [texts[i] for i in order.tolist()], is_english[order], source, chinese_words.alphabet,
        shuffled, np.concatenate([english_edits, chinese_edits])[order],
    )  # fmt: skip


def near_queries(
    rng: np.random.Generator, corpus: Corpus, count: int
) -> tuple[list[str], list[str]]:
    """(English, Chinese) queries: stored texts with 1 or 2 character edits."""
    out: tuple[list[str], list[str]] = ([], [])
    for english, bucket in ((True, out[0]), (False, out[1])):
        positions = np.flatnonzero(corpus.english == english)
        alphabet = LATIN if english else corpus.chinese_alphabet
        for i in rng.choice(positions, count).tolist():
            bucket.append(edit(rng, corpus.texts[i], int(rng.integers(1, 3)), alphabet))
    return out


def new_texts(corpus_seed: int, count: int, kind: str = "reuters") -> tuple[list[str], list[str]]:
    """(English, Chinese) texts drawn like the corpus's but not in it."""
    fresh = make_corpus(2 * count, corpus_seed + 1000, kind)
    english = [t for t, e in zip(fresh.texts, fresh.english.tolist(), strict=True) if e]
    chinese = [t for t, e in zip(fresh.texts, fresh.english.tolist(), strict=True) if not e]
    return english[:count], chinese[:count]


# ---------------------------------------------------------------- brute force


_CJK = re.compile(
    "[" + "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in ngram.CJK_RANGES)
    + "]"
)  # fmt: skip


def qgram_set(text: str, size: int, cjk_size: int | None = None) -> frozenset[str]:
    """The q-gram set as NgramIndex defines it: at each position the substring of q
    characters if it fits, q = ``cjk_size`` at a CJK character (``ngram.CJK_RANGES``),
    ``size`` elsewhere; the whole text when none fits; nothing for an empty text."""
    if not text:
        return frozenset()
    if cjk_size is None or cjk_size == size or not _CJK.search(text):
        if len(text) < size:
            return frozenset([text])
        return frozenset(text[i : i + size] for i in range(len(text) - size + 1))
    grams = set()
    for i, char in enumerate(text):
        q = cjk_size if _CJK.match(char) else size
        if i + q <= len(text):
            grams.add(text[i : i + q])
    return frozenset(grams or [text])


def brute_force(
    sets: Sequence[frozenset[str]],
    query: str,
    size: int,
    threshold: float,
    cjk_size: int | None = None,
) -> list[tuple[int, float]]:
    """(row, Jaccard) of every set at or above the threshold, best first, ties by row."""
    wanted = qgram_set(query, size, cjk_size)
    found = []
    if wanted:
        for row, grams in enumerate(sets):
            if grams:
                shared = len(grams & wanted)
                similarity = shared / (len(grams) + len(wanted) - shared)
                if similarity >= threshold:
                    found.append((row, similarity))
    return sorted(found, key=lambda pair: (-pair[1], pair[0]))


def answer(index: NgramIndex, query: str, threshold: float) -> list[tuple[int, float]]:
    rows, similarities = index.search(query, threshold)
    return list(zip(rows.tolist(), similarities.tolist(), strict=True))


# ---------------------------------------------------------------- measuring


def build(texts: Sequence[str], **options: object) -> tuple[NgramIndex, float]:
    """An index of the texts inserted in batches of BATCH, merging when it asks; returns
    it and the seconds taken (the final merge included)."""
    index_class = options.pop("index_class", NgramIndex)
    if "cjk_size" in inspect.signature(index_class).parameters:  # type: ignore[arg-type]
        options.setdefault("cjk_size", CJK_SIZE)
    index = index_class(**options)  # type: ignore[operator]
    start = SECONDS()
    for begin in range(0, len(texts), BATCH):
        end = min(len(texts), begin + BATCH)
        index.insert(texts[begin:end], np.arange(begin, end))
        if index.needs_merge():
            index.merge()
    while index.merge():
        pass
    return index, SECONDS() - start


@dataclass
class Latency:
    p50: float
    p99: float
    candidates: float
    matches: float


def query_latency(index: NgramIndex, queries: Sequence[str], threshold: float) -> Latency:
    timings = latencies_us(lambda text: index.search(text, threshold), queries, QUERY_CLOCK)
    candidates = index.candidate_counts(queries, threshold)
    ends, _, _ = index.search_many(queries, threshold)
    return Latency(
        percentile(timings, 50),
        percentile(timings, 99),
        float(candidates.mean()),
        float(np.diff(ends, prepend=0).mean()),
    )


def warm_up() -> None:
    """Compile (or load) every kernel before anything is timed."""
    index = NgramIndex(threshold=0.5)
    index.insert(["warm up", "warm-up"], [0, 1])
    index.search("warm up")
    index.merge()


def fmt_spread(values: Sequence[float], fmt: Callable[[float], str] = format_us) -> str:
    return format_spread(spread(values), fmt)


def fmt_count(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# ---------------------------------------------------------------- sections


def choice_of_q(corpus: Corpus, report: list[str]) -> None:
    """Recall of planted 1- and 2-edit copies per q and threshold; distinct real titles
    matched (pairs of Reuters titles, self-join with the index itself)."""
    rng = np.random.default_rng(7)
    stories = load_reuters()
    titles = (
        sorted({normalize(s.get("title") or "") for s in stories} - {""})
        if stories is not None
        else []
    )
    long_titles = [t for t in titles if len(t) >= 30]
    chinese = [t for t, e in zip(corpus.texts, corpus.english.tolist(), strict=True) if not e]
    sources = {
        "Reuters titles, 30+ chars": (long_titles, LATIN),
        "Chinese-like, 20-40 chars": (chinese[:5000], corpus.chinese_alphabet),
    }
    thresholds = (0.5, 0.6, 0.7, 0.8)
    rows = []
    for name, (texts, alphabet) in sources.items():
        if not texts:
            continue
        picked = [texts[i] for i in rng.choice(len(texts), min(1000, len(texts)), replace=False)]
        for edits in (1, 2):
            copies = [edit(rng, text, edits, alphabet) for text in picked]
            for size in (2, 3, 4):
                cells = []
                for threshold in thresholds:
                    found = sum(
                        _jaccard(qgram_set(a, size), qgram_set(b, size)) >= threshold
                        for a, b in zip(picked, copies, strict=True)
                    )
                    cells.append(f"{100 * found / len(picked):.0f}%")
                rows.append([name, str(edits), str(size), *cells])
    report.append("### 1. The choice of q: planted copies found\n")
    report.append(
        markdown_table(
            ["texts", "edits", "q", *(f"t = {t}" for t in thresholds)],
            rows,
            ["left", "right", "right", *(["right"] * len(thresholds))],
        )
    )
    if titles:
        pair_rows = []
        for size in (2, 3, 4):
            index, _ = build(titles, threshold=0.5, size=size)
            ends, others, similarities = index.search_many(titles, 0.5)
            at = np.repeat(np.arange(len(titles)), np.diff(ends, prepend=0))
            pairs = at < others
            cells = [f"{int(np.count_nonzero(pairs & (similarities >= t))):,}" for t in thresholds]
            pair_rows.append([str(size), *cells])
        report.append(
            "\nPairs of distinct Reuters titles (all "
            f"{len(titles):,}) matched: each such pair is a near-duplicate or a false match.\n"
        )
        report.append(
            markdown_table(
                ["q", *(f"t = {t}" for t in thresholds)],
                pair_rows,
                ["right", *(["right"] * len(thresholds))],
            )
        )


def _jaccard(first: frozenset[str], second: frozenset[str]) -> float:
    if not first or not second:
        return 0.0
    shared = len(first & second)
    return shared / (len(first) + len(second) - shared)


def order_and_prefix(corpus: Corpus, size: int, report: list[str]) -> None:
    """Hash order against the learned one, and prefix_matches 1 to 4, at ``size`` texts."""
    texts = corpus.texts[:size]
    sub = Corpus(texts, corpus.english[:size], corpus.english_source, corpus.chinese_alphabet)
    english, chinese = near_queries(np.random.default_rng(3), sub, 500)
    rows = []
    variants: list[tuple[str, dict[str, object]]] = [
        ("hash order, k = 3", {"learn_order": False, "prefix_matches": 3}),
        *((f"learned order, k = {k}", {"prefix_matches": k}) for k in (1, 2, 3, 4)),
    ]
    for name, options in variants:
        index, seconds = build(texts, threshold=THRESHOLD, **options)
        cells = [name, f"{len(texts) / seconds:,.0f}"]
        for queries in (english, chinese):
            result = query_latency(index, queries, THRESHOLD)
            cells += [fmt_count(result.candidates), format_us(result.p50), format_us(result.p99)]
        cells.append(f"{index.memory_bytes() / len(texts):.0f}")
        rows.append(cells)
        del index
        release_memory()
    report.append(f"\n### 2. Token order and prefix matches k, {size:,} texts, t = {THRESHOLD}\n")
    report.append(
        markdown_table(
            [
                "variant",
                "inserts/s",
                "en cand.",
                "en p50 us",
                "en p99 us",
                "zh cand.",
                "zh p50 us",
                "zh p99 us",
                "bytes/text",
            ],
            rows,
            ["left", *(["right"] * 8)],
        )
    )


def parse_variants(text: str) -> list[tuple[str, dict[str, object]]]:
    """``"cjk_size=0;cjk_size=2,prefix_matches=3;rev=abc1234"``: index options per
    variant (integers; cjk_size 0 is None, one q for every script; ``rev``: the index of
    that commit, ``baseline_index``, for a before and after in one run)."""
    variants: list[tuple[str, dict[str, object]]] = []
    for item in text.split(";"):
        options: dict[str, object] = {}
        for pair in filter(None, item.split(",")):
            key, value = pair.split("=")
            if key == "rev":
                options["index_class"] = baseline_index(value)
            else:
                options[key] = None if key == "cjk_size" and value == "0" else int(value)
        variants.append((item or "this commit", options))
    return variants


def baseline_index(rev: str) -> type[NgramIndex]:
    """NgramIndex as it was at commit ``rev`` (app/core/ngram.py and its kernels, from
    git, loaded beside today's under other names; numba compiles them once, in a
    temporary directory)."""
    import importlib.util
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"ngram-{rev}-")
    tag = re.sub(r"\W", "_", rev)
    for name in ("ngram", "_ngram_kernels"):
        source = subprocess.run(
            ["git", "show", f"{rev}:app/core/{name}.py"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        source = source.replace(
            "from app.core import _ngram_kernels as kernels",
            f"import _ngram_kernels_{tag} as kernels",
        )
        with open(os.path.join(folder, f"{name}_{tag}.py"), "w", encoding="utf-8") as out:
            out.write(source)
    for name in (f"_ngram_kernels_{tag}", f"ngram_{tag}"):  # the kernels first: ngram imports them
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # ngram_<tag> imports its kernels by this name
        spec.loader.exec_module(module)
    index_class: type[NgramIndex] = sys.modules[f"ngram_{tag}"].NgramIndex
    return index_class


def at_size(
    corpus: Corpus,
    size: int,
    runs: int,
    seed: int,
    report: list[str],
    variants: Sequence[tuple[str, dict[str, object]]] = (("defaults", {}),),
    kind: str = "reuters",
) -> None:
    """Inserts, single inserts, latency, candidates and memory at ``size`` texts, for each
    variant of the index's options (in turn within each run, so that they share the
    machine's state)."""
    texts = corpus.texts[:size]
    sub = Corpus(texts, corpus.english[:size], corpus.english_source, corpus.chinese_alphabet)
    english, chinese = near_queries(np.random.default_rng(seed + 5), sub, 1000)
    fresh_english, fresh_chinese = new_texts(seed, 500, kind)
    every: dict[str, dict[str, list[float]]] = {
        name: collections.defaultdict(list) for name, _ in variants
    }
    for _, options in variants:  # compile (or load) each variant's kernels first
        build(["warm up", "warm-up", "暖机"], threshold=0.5, **options)[0].search("warm up")
    for _ in range(runs):
        for name, options in variants:
            _measure_at_size(
                texts, options, every[name], english, chinese, fresh_english, fresh_chinese
            )
    report.append(f"\n### 3. {size:,} texts (half English, half Chinese-like), t = {THRESHOLD}\n")
    lines: list[tuple[str, Callable[[dict[str, list[float]]], str]]] = [
        ("batched inserts / s (batches of 10,000, merges included)",
         lambda f: fmt_spread(f["insert"], fmt_count)),
        ("single insert, us (500 into the full index)", lambda f: fmt_spread(f["single"])),
        ("bytes per text, memory_bytes()", lambda f: fmt_spread(f["memory"], fmt_count)),
        ("bytes per text, RSS growth", lambda f: fmt_spread(f["rss"], fmt_count)),
        ("query p50 / p99 us, mixed near-duplicate queries",
         lambda f: f"{fmt_spread(f['mixed p50'])} / {fmt_spread(f['mixed p99'])}"),
    ]  # fmt: skip
    for key, label in (
        ("en", "English, 1-2 edits of a stored title"),
        ("zh", "Chinese-like, 1-2 edits of a stored text"),
        ("en new", "English, new titles"),
        ("zh new", "Chinese-like, new texts"),
    ):
        lines.append((
            f"query p50 / p99 us, {label}",
            lambda f, k=key: f"{fmt_spread(f[k + ' p50'])} / {fmt_spread(f[k + ' p99'])}",
        ))  # fmt: skip
        lines.append((
            f"candidates / matches per query, {label}",
            lambda f, k=key: f"{fmt_count(statistics.median(f[k + ' cand']))} / "
            f"{fmt_count(statistics.median(f[k + ' match']))}",
        ))  # fmt: skip
    rows = [[label, *(cell(every[name]) for name, _ in variants)] for label, cell in lines]
    report.append(
        markdown_table(
            ["figure, median (min-max)", *(name for name, _ in variants)],
            rows,
            ["left", *(["right"] * len(variants))],
        )
    )
    if len(variants) > 1:
        first = every[variants[0][0]]
        for name, _ in variants[1:]:
            f = every[name]
            ratios = []
            for key in ("mixed p50", "mixed p99", "en p50", "zh p50"):
                paired = [b / a for a, b in zip(first[key], f[key], strict=True)]
                ratios.append(f"{key} {statistics.median(paired):.2f}x")
            report.append(
                f"\n{name} against {variants[0][0]}, same-run ratios (medians over runs): "
                + ", ".join(ratios)
                + "."
            )


def _measure_at_size(
    texts: Sequence[str],
    options: dict[str, object],
    figures: dict[str, list[float]],
    english: Sequence[str],
    chinese: Sequence[str],
    fresh_english: Sequence[str],
    fresh_chinese: Sequence[str],
) -> None:
    size = len(texts)
    release_memory()
    before = rss_bytes()
    index, seconds = build(texts, threshold=THRESHOLD, **options)
    release_memory()
    figures["rss"].append((rss_bytes() - before) / size)
    figures["insert"].append(size / seconds)
    figures["memory"].append(index.memory_bytes() / size)
    for name, queries in (
        ("en", english),
        ("zh", chinese),
        ("en new", fresh_english),
        ("zh new", fresh_chinese),
    ):
        result = query_latency(index, queries, THRESHOLD)
        figures[f"{name} p50"].append(result.p50)
        figures[f"{name} p99"].append(result.p99)
        figures[f"{name} cand"].append(result.candidates)
        figures[f"{name} match"].append(result.matches)
    mixed = [q for pair in zip(english, chinese, strict=True) for q in pair]
    timings = latencies_us(functools.partial(index.search, threshold=THRESHOLD), mixed, QUERY_CLOCK)
    figures["mixed p50"].append(percentile(timings, 50))
    figures["mixed p99"].append(percentile(timings, 99))
    singles = [*fresh_english[:250], *fresh_chinese[:250]]
    start = SECONDS()
    for offset, text in enumerate(singles):
        index.insert([text], [size + offset])
    figures["single"].append((SECONDS() - start) / len(singles) * 1e6)
    # Exactness spot check against brute force (q-gram sets of every stored text).
    if size <= 100_000 and not figures.get("checked"):
        cjk_size = getattr(index, "cjk_size", None)  # an index before cjk_size has one q
        sets = [qgram_set(text, index.size, cjk_size) for text in texts]
        for query in [*english[:20], *chinese[:20]]:
            assert answer(index, query, THRESHOLD) == brute_force(
                sets, query, index.size, THRESHOLD, cjk_size
            ), query
        figures["checked"].append(1.0)
    del index
    release_memory()


def against_brute_force(corpus: Corpus, report: list[str]) -> None:
    """At 20,000 texts: the index and a brute-force scan give the same answers."""
    size = 20_000
    texts = corpus.texts[:size]
    sub = Corpus(texts, corpus.english[:size], corpus.english_source, corpus.chinese_alphabet)
    english, chinese = near_queries(np.random.default_rng(11), sub, 50)
    queries = english + chinese
    index, _ = build(texts, threshold=THRESHOLD)
    sets = [qgram_set(text, index.size, index.cjk_size) for text in texts]
    for query in queries:
        assert answer(index, query, THRESHOLD) == brute_force(
            sets, query, index.size, THRESHOLD, index.cjk_size
        )
    ours = latencies_us(lambda text: index.search(text, THRESHOLD), queries, QUERY_CLOCK)
    brute = latencies_us(
        lambda text: brute_force(sets, text, index.size, THRESHOLD, index.cjk_size),
        queries,
        QUERY_CLOCK,
    )
    rows = [
        ["NgramIndex", format_us(percentile(ours, 50)), format_us(percentile(ours, 99))],
        ["brute force (Python sets)", format_us(percentile(brute, 50)),
         format_us(percentile(brute, 99))],
    ]  # fmt: skip
    report.append(f"\n### 4. Against brute force, {size:,} texts, {len(queries)} queries\n")
    report.append("Every answer equal (rows and exact Jaccard).\n")
    report.append(markdown_table(["", "p50 us", "p99 us"], rows, ["left", "right", "right"]))
    stories = load_reuters()
    if stories is None:
        return
    titles = [normalize(s.get("title") or "") for s in stories]
    titles = [t for t in titles if t]
    index, seconds = build(titles, threshold=THRESHOLD)
    rng = np.random.default_rng(13)
    picked = [t for t in titles if len(t) >= 30]
    queries = [edit(rng, picked[int(i)], int(rng.integers(1, 3)), LATIN)
               for i in rng.integers(0, len(picked), 1000)]  # fmt: skip
    result = query_latency(index, queries, THRESHOLD)
    sets = [qgram_set(text, index.size, index.cjk_size) for text in titles]
    for query in queries[:50]:
        assert answer(index, query, THRESHOLD) == brute_force(
            sets, query, index.size, THRESHOLD, index.cjk_size
        )
    report.append(
        f"\nReuters titles: {len(titles):,} inserted at {len(titles) / seconds:,.0f}/s; "
        f"1,000 queries (a title of 30+ characters with 1-2 edits): p50 "
        f"{format_us(result.p50)} us, p99 {format_us(result.p99)} us, "
        f"{fmt_count(result.candidates)} candidates and {fmt_count(result.matches)} matches "
        f"per query; {index.memory_bytes() / len(titles):.0f} bytes per title.\n"
    )


# ---------------------------------------------------------------- q per script

# The q measured for each script: English around the default, Chinese below and above.
Q_CHOICES = {"English": (3, 4, 5), "Chinese": (2, 3, 4)}


def _families(sources: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The text each text's chain of planted edits starts from."""
    root = np.arange(len(sources))
    for i in np.flatnonzero(sources >= 0).tolist():
        j = i
        while sources[j] >= 0:
            j = int(sources[j])
        root[i] = j
    return root


def _self_join(
    index: NgramIndex, texts: Sequence[str]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(later, earlier) of every pair of texts with Jaccard >= THRESHOLD (rows = positions)."""
    later, earlier = [], []
    for begin in range(0, len(texts), BATCH):
        ends, rows, _ = index.search_many(texts[begin : begin + BATCH], THRESHOLD)
        at = np.repeat(np.arange(begin, begin + len(ends)), np.diff(ends, prepend=0))
        keep = rows < at
        later.append(at[keep])
        earlier.append(rows[keep])
    return np.concatenate(later), np.concatenate(earlier)


def q_per_script(corpus: Corpus, size: int, runs: int, report: list[str], kind: str) -> None:
    """Section 6: for each script alone, each q: the pairs a self-join at THRESHOLD finds
    against the planted edits (recall: planted pairs found, by number of edits; precision:
    pairs found inside a family of planted edits), candidates and CPU latency of
    near-duplicate queries (1-2 edits of a stored text) and new texts, memory; and for
    English, real Reuters titles with planted copies."""
    assert corpus.sources is not None and corpus.edits is not None
    # Families over the whole corpus: two copies of one text are one family even when
    # that text is past ``size``.
    whole_family = _families(corpus.sources)
    rows = []
    for script, english in (("English", True), ("Chinese", False)):
        positions = np.flatnonzero(corpus.english[:size] == english)
        local = np.full(len(corpus.texts), -1, dtype=np.int64)
        local[positions] = np.arange(len(positions))
        texts = [corpus.texts[i] for i in positions.tolist()]
        sources = corpus.sources[positions]
        sources = np.where(sources < 0, -1, local[np.maximum(sources, 0)])
        edits = corpus.edits[positions]
        family = whole_family[positions]
        planted = np.flatnonzero(sources >= 0)
        alphabet = LATIN if english else corpus.chinese_alphabet
        rng = np.random.default_rng(23)
        near = [edit(rng, texts[i], int(rng.integers(1, 3)), alphabet)
                for i in rng.choice(len(texts), 1000).tolist()]  # fmt: skip
        fresh = new_texts(29, 500, kind)[0 if english else 1]
        for q in Q_CHOICES[script]:
            index, _ = build(texts, threshold=THRESHOLD, size=q, cjk_size=None)
            later, earlier = _self_join(index, texts)
            inside = family[later] == family[earlier]
            direct = np.zeros(len(texts), dtype=np.bool_)
            direct[later[sources[later] == earlier]] = True  # the copy is the later row
            direct[earlier[sources[earlier] == later]] = True  # or the earlier (shuffled)
            cells = [script, str(q)]
            for count in (1, 2, 3):
                wanted = planted[edits[planted] == count]
                cells.append(f"{100 * direct[wanted].mean():.1f}%")
            cells.append(f"{100 * direct[planted].mean():.1f}%")
            cells.append(f"{100 * inside.mean():.2f}%" if len(inside) else "-")
            cells.append(f"{int((~inside).sum()):,}")
            for queries in (near, fresh):
                p50s, p99s = [], []
                for _ in range(runs):
                    timings = latencies_us(
                        functools.partial(index.search, threshold=THRESHOLD),
                        queries,
                        QUERY_CLOCK,
                    )
                    p50s.append(percentile(timings, 50))
                    p99s.append(percentile(timings, 99))
                candidates = float(index.candidate_counts(queries, THRESHOLD).mean())
                cells += [fmt_count(candidates), format_us(statistics.median(p50s)),
                          format_us(statistics.median(p99s))]  # fmt: skip
            cells.append(f"{index.memory_bytes() / len(texts):.0f}")
            rows.append(cells)
            print(f"q per script: {script} q = {q} done", file=sys.stderr, flush=True)
            del index
            release_memory()
    report.append(
        f"\n### 6. q per script: each script's texts of the first {size:,}, alone, t = "
        f"{THRESHOLD}\n"
    )
    report.append(
        "Planted: a text that is a 1-3-character edit of an earlier one (one in ten). Recall: "
        "planted pairs (copy, original) that the self-join finds; precision: pairs found "
        "whose texts are edits of one text (a copy of a copy included); false pairs: the "
        "others. Queries: 1,000 stored texts with 1-2 edits (near), 500 new texts; CPU "
        f"p50 / p99 in us, medians of {runs} passes.\n"
    )
    report.append(
        markdown_table(
            ["script", "q", "recall, 1 edit", "2 edits", "3 edits", "all", "precision",
             "false pairs", "near cand.", "near p50", "near p99", "new cand.", "new p50",
             "new p99", "bytes/text"],
            rows,
            ["left", *(["right"] * 14)],
        )
    )  # fmt: skip
    reuters_q(report)


def reuters_q(report: list[str]) -> None:
    """Real titles, English q 3-5: every distinct normalised Reuters title and a planted
    copy (1 or 2 edits) of 2,000 of those of 30+ characters, self-joined at THRESHOLD.
    A pair found is right when it is a copy and its original, or two titles of stories
    labelled near-duplicates (../shared/data: word 5-gram Jaccard >= 0.5 of the stories),
    or a copy and a title labelled so with its original; any other is a false match (the
    labels are silver: a false one may be a re-issue the labels missed)."""
    stories = load_reuters()
    pairs_path = REUTERS_PATH.parent / "reuters21578.near_dup_pairs.tsv"
    if stories is None or not pairs_path.is_file():
        return
    titles: dict[str, int] = {}
    ids_of: dict[int, list[str]] = collections.defaultdict(list)
    for story in stories:
        title = normalize(story.get("title") or "")
        if title:
            number = titles.setdefault(title, len(titles))
            ids_of[number].append(str(story["id"]))
    title_of_id = {i: number for number, ids in ids_of.items() for i in ids}
    related: set[tuple[int, int]] = set()
    for line in pairs_path.read_text(encoding="utf-8").splitlines()[1:]:
        a, b = line.split("\t")[:2]
        if a in title_of_id and b in title_of_id:
            x, y = title_of_id[a], title_of_id[b]
            related.add((min(x, y), max(x, y)))
    real = list(titles)
    rng = np.random.default_rng(31)
    long = [i for i, t in enumerate(real) if len(t) >= 30]
    originals = rng.choice(long, 2000, replace=False).tolist()
    counts = rng.integers(1, 3, len(originals)).tolist()
    copies = [edit(rng, real[i], c, LATIN) for i, c in zip(originals, counts, strict=True)]
    texts = real + copies
    origin = np.arange(len(texts))  # a copy stands for its original's title
    origin[len(real) :] = originals
    rows = []
    for q in Q_CHOICES["English"]:
        index, _ = build(texts, threshold=THRESHOLD, size=q, cjk_size=None)
        later, earlier = _self_join(index, texts)
        copy_found = np.zeros(len(copies), dtype=np.bool_)
        right = wrong = labelled = 0
        for a, b in zip(later.tolist(), earlier.tolist(), strict=True):
            x, y = int(origin[a]), int(origin[b])
            if a >= len(real) and b == x:
                copy_found[a - len(real)] = True
                right += 1
            elif x == y or (min(x, y), max(x, y)) in related:
                right += 1
                labelled += a < len(real)
            else:
                wrong += 1
        one = np.array(counts) == 1
        rows.append([
            str(q), f"{100 * copy_found[one].mean():.1f}%", f"{100 * copy_found[~one].mean():.1f}%",
            f"{labelled:,}", f"{wrong:,}", f"{100 * right / max(1, right + wrong):.1f}%",
        ])  # fmt: skip
        del index
        release_memory()
    report.append(
        f"\nReal titles: the {len(real):,} distinct normalised Reuters titles and planted "
        f"copies (1 or 2 character edits) of 2,000 of those of 30+ characters, self-joined "
        f"at t = {THRESHOLD}. Labelled: pairs of real titles whose stories are labelled "
        "near-duplicates (found, right); false: pairs of titles neither planted nor "
        "labelled (same wording, other figures or names).\n"
    )
    report.append(
        markdown_table(
            ["q", "copies found, 1 edit", "2 edits", "labelled pairs found", "false pairs",
             "precision"],
            rows,
            ["right"] * 6,
        )
    )  # fmt: skip


# ---------------------------------------------------------------- peers


@dataclass
class PeerRow:
    """One peer at one size: build seconds, query latencies, recall of the exact answer."""

    name: str
    size: int
    build_s: float
    p50: float
    p99: float
    recall: float
    extra: float  # answers per query that are not in the exact answer
    bytes_per_text: float
    queries: int
    note: str = ""


def _recall(exact: Sequence[set[object]], found: Sequence[set[object]]) -> tuple[float, float]:
    """(share of the exact answers found, answers per query outside the exact answer)."""
    wanted = sum(len(e) for e in exact)
    hit = sum(len(e & f) for e, f in zip(exact, found, strict=True))
    outside = sum(len(f - e) for e, f in zip(exact, found, strict=True))
    return (hit / wanted if wanted else 1.0), outside / max(1, len(exact))


def _timed_answers(
    search: Callable[[str], set[object]], queries: Sequence[str], runs: int
) -> tuple[float, float, list[set[object]]]:
    """(median over runs of p50, of p99, answers of the first run)."""
    p50s, p99s = [], []
    answers: list[set[object]] = []
    for run in range(runs):
        found: list[set[object]] = []

        def one(text: str, found: list[set[object]] = found) -> None:
            found.append(search(text))

        timings = latencies_us(one, queries, QUERY_CLOCK)
        p50s.append(percentile(timings, 50))
        p99s.append(percentile(timings, 99))
        if run == 0:
            answers = found
    return statistics.median(p50s), statistics.median(p99s), answers


# A peer whose build has used this much CPU time is stopped where it is, and reported as
# such: how many texts it had taken (CPU time: on a shared machine the wall clock would
# charge a peer for other jobs' load). Builds that take one call (SetSimilaritySearch) cannot
# be stopped; their progress is logged before and after.
PEER_BUILD_BUDGET_S = 20 * 60


class _Progress:
    """Logs a peer's build to stderr (texts taken, wall and CPU seconds, RSS) and says when
    it has used up PEER_BUILD_BUDGET_S."""

    def __init__(self, name: str, total: int) -> None:
        self.name, self.total = name, total
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.done = 0

    def log(self, done: int, what: str = "") -> None:
        self.done = done
        print(
            f"  {self.name}: {done:,} of {self.total:,} texts {what}after "
            f"{time.perf_counter() - self.wall:,.0f} s wall, "
            f"{time.process_time() - self.cpu:,.0f} s CPU, RSS {rss_bytes() / 2**30:.1f} GiB",
            file=sys.stderr,
            flush=True,
        )

    def over(self) -> bool:
        return time.process_time() - self.cpu > PEER_BUILD_BUDGET_S

    def note(self) -> str:
        if self.done >= self.total:
            return ""
        return (
            f"; build stopped after {PEER_BUILD_BUDGET_S // 60} min of CPU at {self.done:,} of "
            f"{self.total:,} texts (queried as built so far)"
        )


def _rss_delta(build: Callable[[], object]) -> tuple[object, float, float]:
    """(what ``build`` returned, seconds, RSS growth in bytes)."""
    release_memory()
    before = rss_bytes()
    start = SECONDS()
    built = build()
    seconds = SECONDS() - start
    release_memory()
    return built, seconds, float(rss_bytes() - before)


def peers_at(
    corpus: Corpus, size: int, peers: set[str], runs: int, queries_per_script: int
) -> list[PeerRow]:
    """The n-gram index and the peers asked for, on the first ``size`` texts of the corpus,
    with the same near-duplicate queries (half English, half Chinese-like), threshold
    THRESHOLD; recall against the exact answer (the index's, checked against brute force
    on a sample here and everywhere by the tests)."""
    texts = corpus.texts[:size]
    sub = Corpus(texts, corpus.english[:size], corpus.english_source, corpus.chinese_alphabet)
    english, chinese = near_queries(np.random.default_rng(17), sub, queries_per_script)
    queries = [q for pair in zip(english, chinese, strict=True) for q in pair]
    row, exact_rows = _ours(texts, queries, runs)
    print(f"  {row}", file=sys.stderr, flush=True)
    out = [row]
    exact_texts: list[set[object]] = [{texts[int(r)] for r in rows} for rows in exact_rows]  # type: ignore[call-overload]
    release_memory()
    if "setsimilaritysearch" in peers:
        out.append(_setsimilaritysearch(texts, queries, exact_rows, runs))
        print(f"  {out[-1]}", file=sys.stderr, flush=True)
    if "datasketch" in peers:
        out.append(_datasketch(texts, queries, exact_rows, runs))
        print(f"  {out[-1]}", file=sys.stderr, flush=True)
    if "simstring" in peers:
        out.append(_simstring(texts, queries, exact_texts, runs))
        print(f"  {out[-1]}", file=sys.stderr, flush=True)
    if "rapidfuzz" in peers:
        out.append(_rapidfuzz(texts, queries[:40], exact_rows[:40]))
    return out


def _ours(
    texts: Sequence[str], queries: Sequence[str], runs: int
) -> tuple[PeerRow, list[set[object]]]:
    """The index's row and answers, checked against brute force on 10 queries."""
    index, seconds = build(texts, threshold=THRESHOLD)

    def search(text: str) -> set[object]:
        return set(index.search(text, THRESHOLD)[0].tolist())

    p50, p99, exact = _timed_answers(search, queries, runs)
    sets = [qgram_set(text, index.size, index.cjk_size) for text in texts]
    for query, rows in zip(queries[:10], exact, strict=False):
        assert rows == {
            row for row, _ in brute_force(sets, query, index.size, THRESHOLD, index.cjk_size)
        }
    row = PeerRow(
        "neardup NgramIndex", len(texts), seconds, p50, p99, 1.0, 0.0,
        index.memory_bytes() / len(texts), len(queries), "exact; inserts and deletes",
    )  # fmt: skip
    return row, exact


def peer_grams() -> Callable[[str], frozenset[str]]:
    """The q-gram sets the peers get: the index's (``CJK_SIZE`` included)."""
    return functools.partial(qgram_set, size=ngram.DEFAULT_SIZE, cjk_size=CJK_SIZE)


def _setsimilaritysearch(
    texts: Sequence[str], queries: Sequence[str], exact: list[set[object]], runs: int
) -> PeerRow:
    from SetSimilaritySearch import SearchIndex

    grams = peer_grams()
    progress = _Progress("SetSimilaritySearch", len(texts))

    def make() -> SearchIndex:
        sets = [list(grams(text)) for text in texts]
        progress.log(0, "(sets made; building) ")
        built = SearchIndex(sets, similarity_func_name="jaccard", similarity_threshold=THRESHOLD)
        progress.log(len(texts), "indexed ")
        return built

    built, seconds, grown = _rss_delta(make)

    def search(text: str) -> set[object]:
        return {row for row, _ in built.query(list(grams(text)))}  # type: ignore[attr-defined]

    p50, p99, found = _timed_answers(search, queries, runs)
    recall, extra = _recall(exact, found)
    return PeerRow(
        "SetSimilaritySearch 1.0.1", len(texts), seconds, p50, p99, recall, extra,
        grown / len(texts), len(queries), "static: no inserts after the build",
    )  # fmt: skip


def _datasketch(
    texts: Sequence[str], queries: Sequence[str], exact: list[set[object]], runs: int
) -> PeerRow:
    from datasketch import MinHash, MinHashLSH

    grams = peer_grams()
    permutations = 128

    def encoded(text: str) -> list[bytes]:
        return [gram.encode("utf-8") for gram in grams(text)]

    progress = _Progress("datasketch", len(texts))

    def make() -> MinHashLSH:
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=permutations)
        with lsh.insertion_session() as session:
            for begin in range(0, len(texts), BATCH):
                chunk = texts[begin : begin + BATCH]
                hashes = MinHash.bulk([encoded(text) for text in chunk], num_perm=permutations)
                for row, minhash in enumerate(hashes, start=begin):
                    session.insert(row, minhash, check_duplication=False)
                if (begin + len(chunk)) % 100_000 == 0 or begin + len(chunk) == len(texts):
                    progress.log(begin + len(chunk))
                if progress.over():
                    progress.log(begin + len(chunk), "(budget used up) ")
                    break
        return lsh

    built, seconds, grown = _rss_delta(make)

    def search(text: str) -> set[object]:
        minhash = MinHash(num_perm=permutations)
        minhash.update_batch(encoded(text))
        return set(built.query(minhash))  # type: ignore[attr-defined]

    p50, p99, found = _timed_answers(search, queries, runs)
    recall, extra = _recall(exact, found)
    return PeerRow(f"datasketch MinHashLSH ({permutations} perm.)", len(texts), seconds, p50,
                   p99, recall, extra, grown / max(1, progress.done), len(queries),
                   "candidates, not verified" + progress.note())  # fmt: skip


def _simstring(
    texts: Sequence[str], queries: Sequence[str], exact: list[set[object]], runs: int
) -> PeerRow:
    from simstring.database.dict import DictDatabase
    from simstring.feature_extractor.character_ngram import (
        CharacterNgramFeatureExtractor,
    )
    from simstring.measure.jaccard import JaccardMeasure
    from simstring.searcher import Searcher

    progress = _Progress("simstring", len(texts))

    def make() -> Searcher:
        # Its character n-grams of one n for every script (its feature extractors are
        # compiled classes: no other can be given), no end markers (numbered repeats: a
        # multiset Jaccard, SimString's own measure).
        database = DictDatabase(CharacterNgramFeatureExtractor(ngram.DEFAULT_SIZE, endmarker=""))
        for done, text in enumerate(texts, start=1):
            database.add(text)
            if done % 100_000 == 0 or done == len(texts):
                progress.log(done)
                if progress.over():
                    progress.log(done, "(budget used up) ")
                    break
        return Searcher(database, JaccardMeasure())

    built, seconds, grown = _rss_delta(make)

    def search(text: str) -> set[object]:
        return set(built.search(text, THRESHOLD))  # type: ignore[attr-defined]

    p50, p99, found = _timed_answers(search, queries, runs)
    recall, extra = _recall(exact, found)
    measure = f"multiset Jaccard of {ngram.DEFAULT_SIZE}-grams in every script"
    return PeerRow("simstring-fast 0.6 (CPMerge)", len(texts), seconds, p50, p99, recall,
                   extra, grown / max(1, progress.done), len(queries),
                   measure + progress.note())  # fmt: skip


def _rapidfuzz(texts: Sequence[str], queries: Sequence[str], exact: list[set[object]]) -> PeerRow:
    from rapidfuzz import fuzz, process

    choices = list(texts)

    def search(text: str) -> set[object]:
        found = process.extract(
            text, choices, scorer=fuzz.ratio, score_cutoff=RAPIDFUZZ_CUTOFF, limit=None
        )
        return {row for _, _, row in found}

    p50, p99, found = _timed_answers(search, queries, 1)
    recall, extra = _recall(exact, found)
    return PeerRow(f"rapidfuzz process.extract (ratio >= {RAPIDFUZZ_CUTOFF})", len(texts), 0.0,
                   p50, p99, recall, extra, 0.0, len(queries), "brute force")  # fmt: skip


# fuzz.ratio (normalised InDel similarity, 0-100) at which rapidfuzz keeps a text: a
# 1-2 character edit of a 20-80-character text scores 95-99, a q-gram Jaccard of 0.7 is
# near 90.
RAPIDFUZZ_CUTOFF = 85
PEERS = ("setsimilaritysearch", "datasketch", "simstring", "rapidfuzz")


def against_peers(
    corpus: Corpus, sizes: Sequence[tuple[int, set[str]]], runs: int, report: list[str]
) -> list[PeerRow]:
    """Section 5: the peers on the same texts and queries, in the same run."""
    rows: list[PeerRow] = []
    for size, peers in sizes:
        rows += peers_at(corpus, size, peers, runs, 250)
        print(f"peers done {size}", file=sys.stderr, flush=True)
    report.append(
        f"\n### 5. Against peers, t = {THRESHOLD}, q = {ngram.DEFAULT_SIZE}"
        + (f" (CJK: {CJK_SIZE})" if CJK_SIZE else "")
        + ", same texts and "
        "near-duplicate queries (1-2 character edits of a stored text, half English, half "
        "Chinese-like)\n"
    )
    report.append(
        "Recall: share of the exact answers (every stored text with q-gram Jaccard >= t) "
        "returned; extra: answers per query outside them. Latency p50 / p99: medians over "
        f"{runs} passes over the queries.\n"
    )
    ours = {row.size: row for row in rows if row.name.startswith("neardup")}
    table = []
    for row in rows:
        base = ours[row.size]
        table.append([
            f"{row.size:,}", row.name, f"{row.build_s:,.1f}" if row.build_s else "-",
            format_us(row.p50), format_us(row.p99),
            f"{row.p50 / base.p50:,.1f}x" if row is not base else "1x",
            f"{100 * row.recall:.1f}%", f"{row.extra:.2g}",
            f"{row.bytes_per_text:,.0f}" if row.bytes_per_text else "-",
            str(row.queries), row.note,
        ])  # fmt: skip
    report.append(
        markdown_table(
            [
                "texts",
                "",
                "build s",
                "p50 us",
                "p99 us",
                "p50 / ours",
                "recall",
                "extra",
                "bytes/text",
                "queries",
                "note",
            ],
            table,
            [
                "right",
                "left",
                "right",
                "right",
                "right",
                "right",
                "right",
                "right",
                "right",
                "right",
                "left",
            ],
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="10K and 50K texts, one run")
    parser.add_argument("--sections", default="1,2,3,4,5")
    parser.add_argument("--corpus", choices=CORPORA, default="reuters")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="time queries by the thread's CPU time and builds by the process's (default), "
        "or both by the wall clock",
    )
    parser.add_argument("--output", default="ngram.md", help="report name in bench/results/")
    parser.add_argument(
        "--cjk-size",
        type=int,
        default=ngram.DEFAULT_CJK_SIZE,
        help="q of grams that start at a CJK character (0: one q for every script)",
    )
    parser.add_argument(
        "--variants",
        default="",
        help='section 3: index options to compare in the same run, "cjk_size=0;cjk_size=2"',
    )
    parser.add_argument(
        "--peers",
        default="100000:all,1000000:rapidfuzz",
        help="section 5: size:peer+peer,... ('all': every peer)",
    )
    args = parser.parse_args()
    global QUERY_CLOCK, SECONDS, CJK_SIZE
    CJK_SIZE = args.cjk_size or None
    variants = parse_variants(args.variants)
    if args.clock == "wall":
        QUERY_CLOCK, SECONDS = time.perf_counter_ns, time.perf_counter
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = args.runs
    if args.quick:
        sizes, runs = [10_000, 50_000], 1
    sections = set(args.sections.split(","))
    cpu = pin_to_one_core()
    warm_up()
    peer_sizes = []
    for part in args.peers.split(","):
        count, names = part.split(":")
        chosen = set(PEERS) if names == "all" else set(names.split("+"))
        peer_sizes.append((int(count), chosen))
    if args.quick:
        peer_sizes = [(20_000, set(PEERS))]
    largest = max(*sizes, *(count for count, _ in peer_sizes), 100_000)
    corpus = make_corpus(largest, args.seed, args.corpus)
    report = [
        "## NgramIndex (bench/ngram.py)\n",
        f"{machine_summary(cpu)}; load average {os.getloadavg()[0]:.1f} at the start; "
        + (
            "times are CPU time (a query: its thread's; a build: the process's)."
            if args.clock == "cpu"
            else "times are wall-clock time."
        ),
        f"English titles from {corpus.english_source}"
        + (
            "; "
            if args.corpus == "wordfreq"
            else f"; Chinese-like texts from {CJK_WORDS:,} words over {CJK_CHARACTERS:,} "
            "characters; "
        )
        + f"q = {ngram.DEFAULT_SIZE}"
        + (
            f" ({CJK_SIZE} for grams that start at a CJK character)"
            if CJK_SIZE
            else " for every script"
        )
        + f", prefix_matches = {ngram.DEFAULT_PREFIX_MATCHES} unless said.\n",
    ]
    if "1" in sections:
        choice_of_q(corpus, report)
    if "2" in sections:
        order_and_prefix(corpus, min(100_000, max(sizes)), report)
    if "3" in sections:
        for size in sizes:
            at_size(corpus, size, runs, args.seed, report, variants, args.corpus)
            print(f"done {size}", file=sys.stderr, flush=True)
    if "4" in sections:
        against_brute_force(corpus, report)
    if "5" in sections:
        against_peers(corpus, peer_sizes, runs, report)
    if "6" in sections:
        q_per_script(corpus, max(sizes), runs, report, args.corpus)
    report.append(f"\nLoad average {os.getloadavg()[0]:.1f} at the end.")
    text = "\n".join(report) + "\n"
    print(text)
    print(f"written to {write_result(args.output, text)}", file=sys.stderr)


if __name__ == "__main__":
    main()
