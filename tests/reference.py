"""Slow, obviously correct reference implementations the tests compare the core against.

One Python loop per shingle, Python ints for every hash, Python sets for Jaccard. They
share only the documented definitions (docs/design.md) with app/core, not its code.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np

MASK = (1 << 64) - 1
MULTIPLIER = 0x100000001B3


def mix(value: int) -> int:
    value &= MASK
    value ^= value >> 33
    value = (value * 0xFF51AFD7ED558CCD) & MASK
    value ^= value >> 33
    value = (value * 0xC4CEB93F40A6BEC5) & MASK
    return value ^ (value >> 33)


def seed_value(seed: int) -> int:
    return mix(seed * 0x9E3779B97F4A7C15 + 1)


def polynomial(values: list[int]) -> int:
    result = 0
    for value in values:
        result = (result * MULTIPLIER + value) & MASK
    return result


def char_shingles(text: str, size: int) -> list[str]:
    if len(text) < size:
        return [text]
    return [text[i : i + size] for i in range(len(text) - size + 1)]


def _without_spaces(char: str) -> bool:
    cp = ord(char)
    ranges = [
        (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x2E80, 0x2FDF),
        (0x3000, 0x303F), (0x3040, 0x30FF), (0x3100, 0x312F), (0x31F0, 0x31FF),
        (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF),
        (0x20000, 0x3134F),
    ]  # fmt: skip
    return any(lo <= cp <= hi for lo, hi in ranges)


def word_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    current = ""
    for char in text:
        if unicodedata.category(char)[0] in "LMN":
            if _without_spaces(char):
                if current:
                    tokens.append(current)
                current = ""
                tokens.append(char)
            else:
                current += char
        else:
            if current:
                tokens.append(current)
            current = ""
    if current:
        tokens.append(current)
    return tokens or [text]


def word_shingles(text: str, size: int) -> list[tuple[str, ...]]:
    tokens = word_tokens(text)
    if len(tokens) < size:
        return [tuple(tokens)]
    return [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]


def code_points(text: str) -> list[int]:
    return [ord(char) + 1 for char in text]


def char_shingle_hash(shingle: str, seed: int) -> int:
    return mix(polynomial(code_points(shingle)) ^ seed_value(seed))


def word_shingle_hash(shingle: tuple[str, ...], seed: int) -> int:
    token_hashes = [mix(polynomial(code_points(token))) for token in shingle]
    return mix(polynomial(token_hashes) ^ seed_value(seed))


def shingle_hashes(text: str, unit: str, size: int, seed: int) -> list[int]:
    if unit == "char":
        return [char_shingle_hash(s, seed) for s in char_shingles(text, size)]
    return [word_shingle_hash(s, seed) for s in word_shingles(text, size)]


def simhash(hashes: list[int]) -> int:
    """Over the set of shingle hashes: a repeated shingle counts once."""
    distinct = set(hashes)
    result = 0
    for bit in range(64):
        ones = sum(1 for h in distinct if (h >> bit) & 1)
        if 2 * ones > len(distinct):
            result |= 1 << bit
    return result


def one_permutation_minhash(hashes: list[int], num_bins: int, seed: int) -> list[int]:
    bins: list[int | None] = [None] * num_bins
    for h in hashes:
        index = ((h >> 32) * num_bins) >> 32
        value = h & 0xFFFFFFFF
        current = bins[index]
        if current is None or value < current:
            bins[index] = value
    filled = list(bins)
    for j in range(num_bins):
        attempt = 1
        while filled[j] is None:
            probe = mix(
                seed_value(seed) ^ ((j * 0x9E3779B97F4A7C15 + attempt * 0xC2B2AE3D27D4EB4F) & MASK)
            )
            filled[j] = bins[probe % num_bins]
            attempt += 1
    return [value for value in filled if value is not None]


def jaccard(a: set[object], b: set[object]) -> float:
    return len(a & b) / len(a | b)


def hamming(a: int, b: int) -> int:
    return bin(a ^ b).count("1")


def as_windows_1252(text: str) -> str:
    """The reference repair: each C1 character is the Windows-1252 character of its byte
    (Python's cp1252 codec), any other control character a space."""
    repaired = []
    for char in text:
        if 0x80 <= ord(char) <= 0x9F:
            try:
                char = bytes([ord(char)]).decode("cp1252")
            except UnicodeDecodeError:  # the five bytes Windows-1252 leaves undefined
                char = " "
        elif unicodedata.category(char) == "Cc" and char not in "\t\n\r\x0b\x0c":
            char = " "
        repaired.append(char)
    return "".join(repaired)


def whole_document_matches(matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An answer's matches as the whole-document rule alone makes them (collections have
    shared passages on by default): those found by passages alone left out, "passage"
    and the passages' fields taken from the others. Passages have their own references
    (tests/core/test_passages.py, tests/api/test_passages_api.py)."""
    passage_fields = {"passages", "query_coverage", "match_coverage"}
    kept = []
    for match in matches:
        methods = [method for method in match["methods"] if method != "passage"]
        if methods:
            whole = {key: value for key, value in match.items() if key not in passage_fields}
            kept.append(whole | {"methods": methods})
    return kept


# Half the band of estimates around the threshold where the texts decide (the README:
# "one whose estimate is within 0.15 of the threshold is decided by the exact Jaccard").
UNCERTAIN = 0.15


def agreeing(a: Any, b: Any) -> Any:
    """Positions (the last axis) where two MinHash signatures agree, as the README's rule
    counts them: in the low 16 bits of each value (b-bit minwise hashing)."""
    return np.count_nonzero(
        (np.asarray(a, dtype=np.int64) % 65536) == (np.asarray(b, dtype=np.int64) % 65536), axis=-1
    )


def banded(a: list[int], b: list[int], bands: int = 16, rows: int = 8) -> bool:
    """Whether two signatures agree on a whole band (an LSH candidate)."""
    return any(a[i * rows : (i + 1) * rows] == b[i * rows : (i + 1) * rows] for i in range(bands))


def minhash_verdict(
    signature_a: list[int],
    signature_b: list[int],
    shingles_a: set[object],
    shingles_b: set[object],
    threshold: float = 0.8,
    texts_kept: bool = True,
) -> tuple[bool, float]:
    """(MinHash matches the pair, the similarity it reports) by the README's rule: a band
    in common, then the estimate, or near the threshold with the texts kept the exact
    Jaccard of the shingle sets."""
    agree = sum(x % 65536 == y % 65536 for x, y in zip(signature_a, signature_b, strict=True))
    estimate = agree / len(signature_a)
    candidate = banded(signature_a, signature_b) and estimate >= threshold - UNCERTAIN - 1e-9
    if candidate and texts_kept and estimate < threshold + UNCERTAIN:
        exact = jaccard(shingles_a, shingles_b)
        return exact >= threshold, exact
    return candidate and estimate >= threshold - 1e-9, estimate
