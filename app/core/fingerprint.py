"""Text to fingerprints: SimHash (64 bits), MinHash (K x uint32) and a 128-bit exact hash.

The pipeline, for every document of a batch at once::

    normalize -> code points (one uint32 array for the whole batch)
              -> 64-bit shingle hashes (character or word n-grams, seeded)
              -> SimHash, one-permutation MinHash      (compiled, one pass per document)
    normalize -> xxh3-128 of its UTF-8 bytes         (exact duplicates)

Shingle hash of the n-gram ``c_0 .. c_{n-1}`` (code points, or token hashes for words)::

    p = 0; for c in gram: p = p * 0x100000001B3 + (c + 1)     (mod 2**64)
    hash = fmix64(p ^ seed_mix)               seed_mix = fmix64(seed * 0x9E37..15 + 1)

A token's hash is ``fmix64`` of the same polynomial over its code points, without seed.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import xxhash

from app.core import _kernels
from app.core.text import _NO_SPACE_SCRIPT_RANGES, EmptyDocument, normalize
from app.core.types import ExactHashes, MinHashes, ShingleHashes, SimHashes

ShingleUnit = Literal["char", "word"]

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
UNICODE_SIZE = 0x110000

# The core's own defaults, for callers that name nothing: character 5-grams work for any
# script without a tokenizer. The service's collections default to word 5-grams
# (app/collection_config.py, chosen on Reuters-21578: docs/evaluation.md). 128 MinHash
# values give a Jaccard estimate with a standard error of at most 0.044.
DEFAULT_SHINGLE_UNIT: ShingleUnit = "char"
DEFAULT_SHINGLE_SIZE = 5
DEFAULT_NUM_PERM = 128
MAX_SHINGLE_SIZE = 32
MAX_NUM_PERM = 1024


def fmix64(value: int) -> int:
    """MurmurHash3's 64-bit finaliser on a Python int (the same function the kernels use)."""
    value &= MASK64
    value ^= value >> 33
    value = (value * 0xFF51AFD7ED558CCD) & MASK64
    value ^= value >> 33
    value = (value * 0xC4CEB93F40A6BEC5) & MASK64
    value ^= value >> 33
    return value


def seed_mix(seed: int) -> int:
    """The 64-bit value a collection's seed is mixed into every shingle hash with."""
    return fmix64((seed * GOLDEN_GAMMA + 1) & MASK64)


@dataclass(frozen=True, slots=True)
class FingerprintParams:
    """What a collection's fingerprints are made with; fixed once it holds data.

    Fingerprints made with different parameters are never comparable.
    """

    unit: ShingleUnit = DEFAULT_SHINGLE_UNIT
    size: int = DEFAULT_SHINGLE_SIZE
    num_perm: int = DEFAULT_NUM_PERM
    seed: int = 0

    def __post_init__(self) -> None:
        if self.unit not in ("char", "word"):
            raise ValueError(f"shingle unit must be 'char' or 'word', not {self.unit!r}")
        if not 1 <= self.size <= MAX_SHINGLE_SIZE:
            raise ValueError(f"shingle size must be 1 to {MAX_SHINGLE_SIZE}, not {self.size}")
        if not 1 <= self.num_perm <= MAX_NUM_PERM:
            raise ValueError(f"num_perm must be 1 to {MAX_NUM_PERM}, not {self.num_perm}")
        if not 0 <= self.seed <= MASK64:
            raise ValueError(f"seed must be 0 to 2**64-1, not {self.seed}")


@dataclass(frozen=True, slots=True)
class Fingerprints:
    """Fingerprints of N documents, row d for document d of the batch."""

    simhash: SimHashes  # uint64[N]
    minhash: MinHashes  # uint32[N, K]
    exact: ExactHashes  # uint64[N, 2]: xxh3-128 of the normalised text, high then low
    # The normalised text of each short document (at most the short_chars asked for),
    # None for the others: what the n-gram index stores. None when none were asked for.
    shorts: list[str | None] | None = None
    # The texts as fingerprinted (before normalisation), where a collection's exact
    # MinHash verification may read them (app/core/verify.py); None when not kept.
    texts: Sequence[str | None] | None = None

    def __len__(self) -> int:
        return int(self.simhash.shape[0])

    def select(self, positions: npt.NDArray[np.integer]) -> Fingerprints:
        """The fingerprints of some documents, in the order given."""
        at = positions.tolist()
        shorts = None if self.shorts is None else [self.shorts[i] for i in at]
        texts = None if self.texts is None else [self.texts[i] for i in at]
        return Fingerprints(
            self.simhash[positions], self.minhash[positions], self.exact[positions], shorts, texts
        )

    def with_texts(self, texts: Sequence[str | None]) -> Fingerprints:
        """The same fingerprints carrying their texts."""
        return Fingerprints(self.simhash, self.minhash, self.exact, self.shorts, texts)


_WORD_CATEGORIES = frozenset(("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No"))


def computed_char_classes() -> npt.NDArray[np.uint8]:
    """uint8 class of every code point for word tokenisation (a visible part of a start,
    hence kept by app/kernel_tables.py: maps and array operations, no Python loop over the
    1.1 million code points, but one unicodedata call each, holding the GIL).

    Letters, marks and digits are word characters; a character of a script written
    without spaces (the ranges of ``is_no_space_script``) is a token by itself; everything
    else separates tokens.
    """
    categories = map(unicodedata.category, map(chr, range(UNICODE_SIZE)))
    word = np.fromiter(map(_WORD_CATEGORIES.__contains__, categories), np.bool_, UNICODE_SIZE)
    no_space = np.zeros(UNICODE_SIZE, dtype=np.bool_)
    for low, high in _NO_SPACE_SCRIPT_RANGES:
        no_space[low : high + 1] = True
    classes = np.zeros(UNICODE_SIZE, dtype=np.uint8)
    classes[word] = _kernels.CLASS_WORD
    classes[word & no_space] = _kernels.CLASS_SINGLE_CHAR_TOKEN
    return classes


def char_classes_key() -> str:
    """What ``computed_char_classes`` depends on (this Python's Unicode version, the
    categories, the ranges, the classes' values), hashed: a table kept under this key
    (app/kernel_tables.py) is that table."""
    inputs = (
        unicodedata.unidata_version,
        UNICODE_SIZE,
        sorted(_WORD_CATEGORIES),
        _NO_SPACE_SCRIPT_RANGES,
        _kernels.CLASS_WORD,
        _kernels.CLASS_SINGLE_CHAR_TOKEN,
    )
    return xxhash.xxh3_64_hexdigest(repr(inputs).encode())


_char_classes: npt.NDArray[np.uint8] | None = None


def char_classes() -> npt.NDArray[np.uint8]:
    """The class table of word tokenisation: made on first use, or the one adopted."""
    global _char_classes
    if _char_classes is None:
        _char_classes = computed_char_classes()
    return _char_classes


def has_char_classes() -> bool:
    """Whether the table is made or adopted already."""
    return _char_classes is not None


def adopt_char_classes(table: npt.NDArray[np.uint8]) -> bool:
    """Use ``table`` (``computed_char_classes``'s, kept under ``char_classes_key``) where
    none is made yet and it has the table's shape and values. Whether it was taken."""
    global _char_classes
    fits = (
        table.shape == (UNICODE_SIZE,)
        and table.dtype == np.uint8
        and int(table.max(initial=0)) <= _kernels.CLASS_SINGLE_CHAR_TOKEN
    )
    if _char_classes is None and fits:
        _char_classes = table
        return True
    return False


_NO_CLASSES = np.zeros(1, dtype=np.uint8)


def _classes_for(params: FingerprintParams) -> np.ndarray:
    return char_classes() if params.unit == "word" else _NO_CLASSES


def code_points_of(text: str) -> npt.NDArray[np.uint32]:
    """A text's code points, one per ``len``, as the kernels take them. O(length).

    surrogatepass: a lone surrogate is a code point like any other here; rejecting it is
    the API's job, not a reason to crash. Writable (a bytearray, one copy), as the arrays
    the kernels are also given are: numba compiles a kernel again for a read-only one
    (bench/compile_costs.py)."""
    encoded = bytearray(text.encode("utf-32-le", "surrogatepass"))
    return np.frombuffer(encoded, dtype=np.uint32)


def shingle_hashes(normalized_text: str, params: FingerprintParams) -> ShingleHashes:
    """The 64-bit hashes of every shingle of an already normalised text, in text order.

    >>> len(shingle_hashes("abcdef", FingerprintParams(size=5)))
    2
    """
    if not normalized_text:
        raise EmptyDocument("text is empty after normalisation")
    code_points = code_points_of(normalized_text)
    out = np.empty(len(code_points), dtype=np.uint64)
    mix = np.uint64(seed_mix(params.seed))
    if params.unit == "word":
        scratch = np.empty(len(code_points), dtype=np.uint64)
        count: int = _kernels.word_shingle_hashes(
            code_points, params.size, mix, char_classes(), scratch, out
        )
    else:
        count = _kernels.char_shingle_hashes(code_points, params.size, mix, out)
    return out[:count]


def exact_hashes(normalized_texts: list[str]) -> ExactHashes:
    """xxh3-128 of each normalised text's UTF-8 bytes, as (high, low) uint64 pairs."""
    digests = b"".join(
        xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass")) for text in normalized_texts
    )
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64).reshape(-1, 2)


def fingerprint_normalized(normalized_texts: list[str], params: FingerprintParams) -> Fingerprints:
    """Fingerprints of texts already normalised. Raises EmptyDocument for an empty one.

    Cost: O(total characters x shingle size) in compiled code plus O(N) Python calls.
    """
    for index, text in enumerate(normalized_texts):
        if not text:
            raise EmptyDocument(f"document {index}: text is empty after normalisation")
    count = len(normalized_texts)
    lengths = np.fromiter(map(len, normalized_texts), dtype=np.int64, count=count)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    simhash, minhash = _sketch(code_points_of("".join(normalized_texts)), offsets, params)
    return Fingerprints(simhash=simhash, minhash=minhash, exact=exact_hashes(normalized_texts))


def _sketch(
    code_points: npt.NDArray[np.uint32], offsets: npt.NDArray[np.int64], params: FingerprintParams
) -> tuple[SimHashes, MinHashes]:
    """SimHash and MinHash of documents laid end to end, document d at offsets[d:d+2]."""
    count = len(offsets) - 1
    simhash = np.empty(count, dtype=np.uint64)
    minhash = np.empty((count, params.num_perm), dtype=np.uint32)
    _kernels.fingerprint_documents(
        code_points,
        offsets,
        params.unit == "word",
        params.size,
        np.uint64(seed_mix(params.seed)),
        _classes_for(params),
        simhash,
        minhash,
    )
    return simhash, minhash


def fingerprint(texts: list[str], params: FingerprintParams) -> Fingerprints:
    """Normalise and fingerprint a batch of texts. Raises EmptyDocument for a text with
    nothing left once normalised; ``fingerprint_nonempty`` reports them instead.

    A document's fingerprints depend only on its own text and ``params``, never on the
    other documents of the batch or their order. ASCII texts are normalised in compiled
    code (str.split and join held the GIL for a quarter of an insert), the others by
    ``normalize``; the result is the same.

    >>> fp = fingerprint(["Hello world", "hello   WORLD"], FingerprintParams())
    >>> bool(fp.simhash[0] == fp.simhash[1]), fp.minhash.shape
    (True, (2, 128))
    """
    fingerprints, kept = fingerprint_nonempty(texts, params)
    if len(kept) < len(texts):
        empty = np.ones(len(texts), dtype=np.bool_)
        empty[kept] = False
        first = int(np.flatnonzero(empty)[0])
        raise EmptyDocument(f"document {first}: text is empty after normalisation")
    return fingerprints


def fingerprint_nonempty(
    texts: list[str], params: FingerprintParams, *, short_chars: int = 0
) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
    """(fingerprints, kept): the fingerprints of the texts that are not empty once
    normalised, row i for ``texts[kept[i]]``; the service refuses the others one by one,
    so that one empty text does not cost a batch. With ``short_chars``, ``shorts`` holds
    the normalised text of each one of at most that many characters.

    Cost: O(total characters x shingle size) in compiled code plus O(N) Python calls.
    """
    if len(texts) == 1 and texts[0].isascii():
        one = _fingerprint_one_ascii(texts[0], params, short_chars)
        if one is not None:
            return one
    plain = np.fromiter(map(str.isascii, texts), dtype=np.bool_, count=len(texts))
    if not plain.all():
        fingerprints, kept, normalized_texts = _fingerprint_mixed(texts, plain, params)
        if short_chars:
            fingerprints = _with_shorts(fingerprints, normalized_texts, short_chars)
        return fingerprints, kept
    normalized, offsets = _normalize_ascii(texts)
    empty = np.diff(offsets) == 0
    if empty.any():
        offsets = np.concatenate([offsets[:1], offsets[1:][~empty]])
    kept = np.flatnonzero(~empty).astype(np.int64)
    fingerprints = _fingerprint_ascii(normalized, offsets, params)
    if short_chars:
        shorts: list[str | None] = [None] * len(kept)
        if (np.diff(offsets) <= short_chars).any():
            data = normalized.tobytes()
            bounds = itertools.pairwise(offsets.tolist())
            shorts = [
                data[start:end].decode("ascii") if end - start <= short_chars else None
                for start, end in bounds
            ]
        fingerprints = Fingerprints(
            fingerprints.simhash, fingerprints.minhash, fingerprints.exact, shorts
        )
    return fingerprints, kept


def _fingerprint_one_ascii(
    text: str, params: FingerprintParams, short_chars: int
) -> tuple[Fingerprints, npt.NDArray[np.int64]] | None:
    """fingerprint_nonempty of one ASCII text (a search, a single insert) without the
    batch's bookkeeping: the numpy calls that lay out and sort a batch cost one text more
    than normalising it (docs/journal.md, "Issue 11"). None when the text is empty once
    normalised (the batch path reports that)."""
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    normalized = np.empty(len(raw), dtype=np.uint8)
    offsets = np.empty(2, dtype=np.int64)
    _kernels.normalize_ascii(raw, np.array([0, len(raw)], dtype=np.int64), normalized, offsets)
    length = int(offsets[1])
    if length == 0:
        return None
    normalized = normalized[:length]
    fingerprints = _fingerprint_ascii(normalized, offsets, params)
    if short_chars:
        short = normalized.tobytes().decode("ascii") if length <= short_chars else None
        fingerprints = Fingerprints(
            fingerprints.simhash, fingerprints.minhash, fingerprints.exact, [short]
        )
    return fingerprints, np.zeros(1, dtype=np.int64)


def _with_shorts(
    fingerprints: Fingerprints, normalized_texts: list[str], short_chars: int
) -> Fingerprints:
    shorts = [text if len(text) <= short_chars else None for text in normalized_texts]
    return Fingerprints(fingerprints.simhash, fingerprints.minhash, fingerprints.exact, shorts)


def _fingerprint_mixed(
    texts: list[str], plain: npt.NDArray[np.bool_], params: FingerprintParams
) -> tuple[Fingerprints, npt.NDArray[np.int64], list[str]]:
    """Each part its own way, reassembled in the batch's order, empty texts left out;
    and the normalised texts of those kept, in the same order."""
    ascii_positions, other_positions = np.flatnonzero(plain), np.flatnonzero(~plain)
    normalized, offsets = _normalize_ascii([texts[i] for i in ascii_positions])
    empty_ascii = np.diff(offsets) == 0
    if empty_ascii.any():
        offsets = np.concatenate([offsets[:1], offsets[1:][~empty_ascii]])
        ascii_positions = ascii_positions[~empty_ascii]
    others = [normalize(texts[i]) for i in other_positions]
    nonempty_others = [i for i, text in enumerate(others) if text]
    other_positions = other_positions[nonempty_others]
    parts = [fingerprint_normalized([others[i] for i in nonempty_others], params)]
    if len(ascii_positions):
        parts.insert(0, _fingerprint_ascii(normalized, offsets, params))
    positions = np.concatenate([ascii_positions, other_positions]).astype(np.int64)
    order = np.argsort(positions, kind="stable")
    fingerprints = Fingerprints(
        np.concatenate([part.simhash for part in parts])[order],
        np.concatenate([part.minhash for part in parts])[order],
        np.concatenate([part.exact for part in parts])[order],
    )
    data = normalized.tobytes()
    bounds = offsets.tolist()
    normalized_texts = [data[a:b].decode("ascii") for a, b in itertools.pairwise(bounds)]
    normalized_texts += [others[i] for i in nonempty_others]
    return fingerprints, positions[order], [normalized_texts[i] for i in order.tolist()]


def _normalize_ascii(texts: list[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """(bytes, offsets): ``normalize`` of ASCII texts, document d at [offsets[d], offsets[d+1])."""
    count = len(texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=count)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    raw = np.frombuffer("".join(texts).encode("ascii"), dtype=np.uint8)
    normalized = np.empty(len(raw), dtype=np.uint8)
    normalized_offsets = np.empty(count + 1, dtype=np.int64)
    _kernels.normalize_ascii(raw, offsets, normalized, normalized_offsets)
    return normalized, normalized_offsets


def _fingerprint_ascii(
    normalized: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], params: FingerprintParams
) -> Fingerprints:
    """fingerprint_normalized for texts normalised by _normalize_ascii (none empty)."""
    simhash, minhash = _sketch(normalized.astype(np.uint32), offsets, params)
    data = normalized.tobytes()
    if len(offsets) == 2:  # one text
        digests = xxhash.xxh3_128_digest(data[int(offsets[0]) : int(offsets[1])])
    else:
        bounds = offsets.tolist()
        digests = b"".join(
            xxhash.xxh3_128_digest(data[start:end]) for start, end in itertools.pairwise(bounds)
        )
    exact = np.frombuffer(digests, dtype=">u8").astype(np.uint64).reshape(-1, 2)
    return Fingerprints(simhash=simhash, minhash=minhash, exact=exact)


def jaccard_estimate(signature: MinHashes, others: MinHashes) -> np.ndarray:
    """Estimated Jaccard similarity of one signature (K,) with each row of others (M, K).

    The fraction of positions where the values agree; O(M K).
    """
    matches = np.count_nonzero(others == signature, axis=-1)
    estimates: np.ndarray = matches / signature.shape[-1]
    return estimates


def hamming_distance(fingerprint_value: np.uint64 | int, others: SimHashes) -> np.ndarray:
    """Number of differing bits between one SimHash and each of ``others``."""
    distances: np.ndarray = np.bitwise_count(others ^ np.uint64(fingerprint_value))
    return distances.astype(np.int64)
