"""Fingerprinting speed from raw text: neardup against the libraries a user would reach for.

Run from the repository root::

    .venv/bin/python -m bench.fingerprints [--runs 5] [--docs 256] [--seed 0] [--quick]

Every contender starts from the raw text, normalises it with ``app.core.text.normalize``
and works on the same shingles, character 5-grams of the normalised text. The peers get
them from a Python list comprehension, since that is what their users write (gaoya cuts
them itself, which is how that library is meant to be used), and that time is theirs.
Everything runs on one pinned core; the table gives microseconds per document and how
many times faster neardup's median is. It is printed and written to
``bench/results/fingerprints.md``.
"""

from __future__ import annotations

import os

from devkit.harness import THREAD_LIMITS

# Thread pools size themselves when their library is imported, so cap them first.
os.environ.update(THREAD_LIMITS)

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version

import datasketch
import gaoya
import numpy as np
import numpy.typing as npt
import rensa
import simhash

from app.core.fingerprint import FingerprintParams, fingerprint, seed_mix, shingle_hashes
from app.core.text import normalize
from devkit.harness import (
    Timing,
    format_ratio,
    format_us,
    load_reuters,
    machine_summary,
    markdown_table,
    pin_to_one_core,
    reuters_text,
    time_per_item,
    write_result,
)

U64Array = npt.NDArray[np.uint64]
U32Array = npt.NDArray[np.uint32]
I64Array = npt.NDArray[np.int64]

SHINGLE_SIZE = 5
NUM_PERM = 128
HASH_SEED = 1  # datasketch's default seed; only fixes which hash functions are drawn
PEERS = ("datasketch", "rensa", "gaoya", "simhash")
NEARDUP_BATCH = 256  # documents per fingerprint() call

ENGLISH_MIN_CHARS = 2500
ENGLISH_MAX_CHARS = 3500
CHINESE_CHARS = 500

# 300 of the most frequent characters of modern written Chinese, most frequent first.
COMMON_HANZI = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得"
    "就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日"
    "于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
    "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月"
    "明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便"
    "位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加"
    "化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目"
    "华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做"
    "系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接"
    "它许八特觉望直服毛林题建南度统色字请交爱让"
)
# Full-width comma and ideographic full stop, escaped because they look like ',' and '.'.
HANZI_COMMA = "\uff0c"
HANZI_FULL_STOP = "\u3002"

# The polynomial and finaliser of neardup's shingle hash (app/core/fingerprint.py), so
# the numpy contender does the same work and its SimHash can be checked against neardup's.
POLY_MULTIPLIER = np.uint64(0x100000001B3)
FMIX_SHIFT = np.uint64(33)
FMIX_MULTIPLIER_1 = np.uint64(0xFF51AFD7ED558CCD)
FMIX_MULTIPLIER_2 = np.uint64(0xC4CEB93F40A6BEC5)
HIGH_HALF_SHIFT = np.uint64(32)
# (chunk x 128) uint64 is 512 KiB: the MinHash block stays in L2 instead of going through
# memory as a (shingles x 128) matrix would.
MINHASH_CHUNK = 512


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    texts: list[str]
    note: str


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    computes: str
    run: Callable[[Sequence[str]], object]


# --- corpora --------------------------------------------------------------------------


def english_corpus(count: int, seed: int) -> Corpus:
    """Reuters stories of 2.5 to 3.5 KB, or synthetic English-like text if the file is absent."""
    rng = random.Random(seed)
    stories = load_reuters()
    if stories is None:
        texts = [synthetic_english(rng) for _ in range(count)]
        note = "SYNTHETIC: Reuters-21578 not found, seeded random English-like text"
        return Corpus("english-3kb", texts, note)
    candidates = [
        text
        for text in map(reuters_text, stories)
        if ENGLISH_MIN_CHARS <= len(text) <= ENGLISH_MAX_CHARS
    ]
    chosen = rng.sample(candidates, min(count, len(candidates)))
    note = f"Reuters-21578, {len(chosen)} of the {len(candidates)} stories of 2500-3500 chars"
    return Corpus("english-3kb", chosen, note)


def synthetic_english(rng: random.Random) -> str:
    """English-like text: Zipf-distributed words from a seeded random vocabulary."""
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    letter_weights = [12.0, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8]
    letter_weights += [2.4, 2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1]
    vocabulary = [
        "".join(rng.choices(letters, letter_weights, k=rng.randint(2, 10))) for _ in range(3000)
    ]
    word_weights = [1 / rank for rank in range(1, len(vocabulary) + 1)]
    target = rng.randint(ENGLISH_MIN_CHARS, ENGLISH_MAX_CHARS)
    parts = [" ".join(rng.choices(vocabulary, word_weights, k=6)).upper(), "\n"]
    length = sum(map(len, parts))
    while length < target:
        words = rng.choices(vocabulary, word_weights, k=rng.randint(6, 28))
        sentence = " ".join(words).capitalize() + rng.choice([". ", ". ", ", ", ".\n    "])
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts)[:target]


def chinese_corpus(count: int, seed: int) -> Corpus:
    """Synthetic Chinese texts of exactly 500 characters (no Chinese corpus ships)."""
    rng = random.Random(seed)
    weights = [1 / rank for rank in range(1, len(COMMON_HANZI) + 1)]
    texts = []
    for _ in range(count):
        parts: list[str] = []
        length = 0
        while length < CHINESE_CHARS:
            clause = "".join(rng.choices(COMMON_HANZI, weights, k=rng.randint(4, 18)))
            clause += rng.choice([HANZI_COMMA, HANZI_COMMA, HANZI_FULL_STOP])
            parts.append(clause)
            length += len(clause)
        texts.append("".join(parts)[: CHINESE_CHARS - 1] + HANZI_FULL_STOP)
    note = (
        f"SYNTHETIC: seeded Zipf draws from {len(COMMON_HANZI)} common hanzi plus "
        f"{HANZI_COMMA}{HANZI_FULL_STOP}, exactly {CHINESE_CHARS} chars each"
    )
    return Corpus("chinese-500", texts, note)


# --- contenders -----------------------------------------------------------------------


def char_shingles(text: str) -> list[str]:
    """What a peer's user writes: normalise, then every character 5-gram as a str."""
    normalized = normalize(text)
    return [normalized[i : i + SHINGLE_SIZE] for i in range(len(normalized) - SHINGLE_SIZE + 1)]


def run_neardup(texts: Sequence[str]) -> object:
    params = FingerprintParams(unit="char", size=SHINGLE_SIZE, num_perm=NUM_PERM, seed=HASH_SEED)
    return [
        fingerprint(list(texts[start : start + NEARDUP_BATCH]), params)
        for start in range(0, len(texts), NEARDUP_BATCH)
    ]


def run_datasketch(texts: Sequence[str]) -> object:
    signatures = []
    for text in texts:
        # One MinHash per document, as datasketch's documentation does; its constructor
        # draws the 128 permutations again every time, and that cost is part of the use.
        minhash = datasketch.MinHash(num_perm=NUM_PERM, seed=HASH_SEED)
        minhash.update_batch([shingle.encode("utf-8") for shingle in char_shingles(text)])
        signatures.append(minhash.hashvalues)
    return signatures


def run_rensa(texts: Sequence[str]) -> object:
    signatures = []
    for text in texts:
        minhash = rensa.RMinHash(num_perm=NUM_PERM, seed=HASH_SEED)
        # A list, never a bare str: update() would iterate a str as one-character tokens.
        minhash.update(char_shingles(text))
        signatures.append(minhash.digest())
    return signatures


def make_gaoya() -> Callable[[Sequence[str]], object]:
    # gaoya only exposes MinHash through its LSH index; 32 bands x 4 rows gives 128 32-bit
    # values, and its Rust tokenizer cuts the character 5-grams (ngram_range=(5, 5)).
    index = gaoya.minhash.MinHashStringIndex(
        hash_size=32,
        num_bands=NUM_PERM // 4,
        band_size=4,
        analyzer="char",
        lowercase=False,  # normalize() has casefolded; tokenize_and_minhash ignores it anyway
        ngram_range=(SHINGLE_SIZE, SHINGLE_SIZE),
    )
    # The signature method lives on the native object; the Python wrapper has no
    # equivalent. bulk_hash_docs would be the same work fanned out over rayon threads.
    signature = index.minhash_index.tokenize_and_minhash

    def run_gaoya(texts: Sequence[str]) -> object:
        return [signature(normalize(text)) for text in texts]

    return run_gaoya


def run_simhash(texts: Sequence[str]) -> object:
    # A list of features: given a str, Simhash would tokenise it its own way (4-grams of
    # word characters only), not into our shingles.
    return [simhash.Simhash(char_shingles(text), f=64).value for text in texts]


class NumpyFingerprinter:
    """SimHash and classic MinHash-128 of a batch, as a competent numpy user writes them.

    Shingle hashes are neardup's (polynomial over code points, then fmix64), computed for
    the whole batch at once; SimHash and MinHash then loop over documents, never over
    shingles. Every document must have at least ``SHINGLE_SIZE`` characters.
    """

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        # Odd multipliers: (a h + b) mod 2**64 is then a bijection of the 64-bit hashes.
        self.multipliers: U64Array = rng.integers(0, 2**64, NUM_PERM, dtype=np.uint64) | np.uint64(
            1
        )
        self.increments: U64Array = rng.integers(0, 2**64, NUM_PERM, dtype=np.uint64)
        self.seed_mix = np.uint64(seed_mix(seed))
        self.block: U64Array = np.empty((MINHASH_CHUNK, NUM_PERM), dtype=np.uint64)

    def batch_hashes(self, normalized: list[str]) -> tuple[U64Array, I64Array, I64Array]:
        """Hashes of every 5-gram window of the concatenated batch, and each document's span.

        Windows that straddle two documents are computed and never read: cheaper than
        slicing the batch apart first.
        """
        lengths = np.fromiter(map(len, normalized), dtype=np.int64, count=len(normalized))
        ends = np.cumsum(lengths)
        starts = ends - lengths
        code_points = np.frombuffer("".join(normalized).encode("utf-32-le"), dtype=np.uint32)
        windows = np.lib.stride_tricks.sliding_window_view(
            code_points.astype(np.uint64) + 1, SHINGLE_SIZE
        )
        poly = windows[:, 0].copy()
        for offset in range(1, SHINGLE_SIZE):
            poly *= POLY_MULTIPLIER
            poly += windows[:, offset]
        poly ^= self.seed_mix
        # fmix64 in place; uint64 arithmetic wraps modulo 2**64 as intended.
        poly ^= poly >> FMIX_SHIFT
        poly *= FMIX_MULTIPLIER_1
        poly ^= poly >> FMIX_SHIFT
        poly *= FMIX_MULTIPLIER_2
        poly ^= poly >> FMIX_SHIFT
        return poly, starts, ends - SHINGLE_SIZE + 1

    @staticmethod
    def simhash(hashes: U64Array) -> np.uint64:
        # Over the distinct shingles, as in neardup.
        hashes = np.unique(hashes)
        # Little-endian bytes with little bit order: column b of the bit matrix is bit b.
        as_bytes = hashes.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
        bits = np.unpackbits(as_bytes, axis=1, bitorder="little")
        ones = bits.sum(axis=0, dtype=np.int64)
        # Bit b is set when more than half the shingles have it, as in neardup.
        packed = np.packbits(2 * ones > len(hashes), bitorder="little")
        return np.uint64(packed.view("<u8")[0])

    def minhash(self, hashes: U64Array, out: U32Array) -> None:
        lowest = np.full(NUM_PERM, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, len(hashes), MINHASH_CHUNK):
            chunk = hashes[start : start + MINHASH_CHUNK]
            block = self.block[: len(chunk)]
            np.multiply(chunk[:, None], self.multipliers, out=block)
            block += self.increments
            block >>= HIGH_HALF_SHIFT
            np.minimum(lowest, block.min(axis=0), out=lowest)
        out[:] = lowest

    def __call__(self, texts: Sequence[str]) -> tuple[U64Array, U32Array]:
        normalized = [normalize(text) for text in texts]
        hashes, starts, stops = self.batch_hashes(normalized)
        simhashes = np.empty(len(texts), dtype=np.uint64)
        minhashes = np.empty((len(texts), NUM_PERM), dtype=np.uint32)
        for document, (start, stop) in enumerate(zip(starts, stops, strict=True)):
            own = hashes[start:stop]
            simhashes[document] = self.simhash(own)
            self.minhash(own, minhashes[document])
        return simhashes, minhashes


def check_numpy_contender(numpy_batch: NumpyFingerprinter, texts: list[str]) -> None:
    """Fail loudly if the numpy contender does not do the same work as neardup.

    Its shingle hashes and SimHash must equal neardup's, and its MinHash the classic
    formula evaluated with Python ints.
    """
    sample = texts[:4]
    params = FingerprintParams(unit="char", size=SHINGLE_SIZE, num_perm=NUM_PERM, seed=HASH_SEED)
    expected = fingerprint(sample, params)
    simhashes, minhashes = numpy_batch(sample)
    if not np.array_equal(simhashes, expected.simhash):
        raise AssertionError("numpy-batch SimHash differs from neardup's")
    normalized = [normalize(text) for text in sample]
    hashes, starts, stops = numpy_batch.batch_hashes(normalized)
    first = shingle_hashes(normalized[0], params)
    if not np.array_equal(hashes[starts[0] : stops[0]], first):
        raise AssertionError("numpy-batch shingle hashes differ from neardup's")
    for k in (0, NUM_PERM - 1):
        a, b = int(numpy_batch.multipliers[k]), int(numpy_batch.increments[k])
        classic = min(((a * int(h) + b) % 2**64) >> 32 for h in first)
        if int(minhashes[0, k]) != classic:
            raise AssertionError(f"numpy-batch MinHash value {k} is not the classic one")


def contenders(numpy_batch: NumpyFingerprinter) -> list[Contender]:
    return [
        Contender("neardup", "SimHash-64 + one-permutation MinHash-128 + xxh3-128", run_neardup),
        Contender("datasketch", "MinHash-128 (128 permutations, SHA-1 hash)", run_datasketch),
        Contender("rensa", "MinHash-128 (RMinHash)", run_rensa),
        Contender("gaoya", "MinHash-128, 32-bit (its own Rust 5-gram tokenizer)", make_gaoya()),
        Contender("simhash", "SimHash-64 (MD5 shingle hash)", run_simhash),
        Contender(
            "numpy-batch",
            "SimHash-64 + classic MinHash-128 (128 permutations), neardup's shingle hash",
            numpy_batch,
        ),
    ]


# --- report ---------------------------------------------------------------------------


def report(
    corpora: list[Corpus],
    field: list[Contender],
    timings: dict[tuple[str, str], Timing],
    header: list[str],
) -> str:
    rows = []
    for contender in field:
        for corpus in corpora:
            timing = timings[(contender.name, corpus.name)]
            reference = timings[("neardup", corpus.name)].median_us
            speed_up = (
                "1x (reference)"
                if contender.name == "neardup"
                else f"{contender.name}/neardup = {format_ratio(timing.median_us / reference)}"
            )
            rows.append(
                [
                    contender.name,
                    corpus.name,
                    format_us(timing.min_us),
                    format_us(timing.median_us),
                    format_us(timing.max_us),
                    speed_up,
                ]
            )
    table = markdown_table(
        ["contender", "corpus", "min µs/doc", "median µs/doc", "max µs/doc", "neardup speed-up"],
        rows,
        ["left", "left", "right", "right", "right", "left"],
    )
    lines = ["# Fingerprinting from raw text, one core", "", *header, "", table, "", "Corpora:"]
    lines += [
        f"- **{corpus.name}**: {len(corpus.texts)} docs, mean "
        f"{sum(map(len, corpus.texts)) / len(corpus.texts):,.0f} chars; {corpus.note}"
        for corpus in corpora
    ]
    lines += ["", "What each contender computes:"]
    lines += [f"- **{contender.name}**: {contender.computes}" for contender in field]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender")
    parser.add_argument("--docs", type=int, default=256, help="documents per corpus")
    parser.add_argument("--seed", type=int, default=0, help="seed of the document sample")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 run, 32 documents")
    args = parser.parse_args(argv)
    runs, docs = (1, 32) if args.quick else (args.runs, args.docs)
    if runs < 1 or docs < 1:
        parser.error("--runs and --docs must be at least 1")

    cpu = pin_to_one_core()
    corpora = [english_corpus(docs, args.seed), chinese_corpus(docs, args.seed)]
    for corpus in corpora:
        if corpus.note.startswith("SYNTHETIC"):
            print(f"note: {corpus.name} is synthetic ({corpus.note})", file=sys.stderr)

    numpy_batch = NumpyFingerprinter(HASH_SEED)
    for corpus in corpora:
        check_numpy_contender(numpy_batch, corpus.texts)
    field = contenders(numpy_batch)

    timings: dict[tuple[str, str], Timing] = {}
    for corpus in corpora:
        for contender in field:
            print(f"timing {contender.name} on {corpus.name}...", file=sys.stderr, flush=True)
            timings[(contender.name, corpus.name)] = time_per_item(
                contender.run, corpus.texts, runs
            )

    versions = ", ".join(f"{name} {version(name)}" for name in ("numpy", "numba", *PEERS))
    header = [
        f"- machine: {machine_summary(cpu)}",
        f"- {runs} timed run(s) after one warm-up, each over all documents of the corpus; "
        f"sample seed {args.seed}",
        f"- versions: {versions}",
        "- every contender: NFKC + casefold + whitespace normalisation, character 5-grams; "
        "the peers' time includes shingling in Python",
    ]
    text = report(corpora, field, timings, header)
    print(text)
    path = write_result("fingerprints.md", text)
    print(f"written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
