"""The service's match rule for pairs of documents, and the output lines of both engines.

Two documents match, as in the service (app/core/rule.py, app/service/indexes.py):

- ``exact``: equal 128-bit hashes of the normalised text;
- ``simhash``: SimHash fingerprints at most ``simhash.max_distance`` bits apart (the
  permutation tables find every such pair);
- ``minhash``: a whole LSH band in common (equal band keys, as the index's tables find
  them) and at least ``min_matches(threshold, num_perm)`` equal signature values; where
  the settings keep texts, a pair whose estimate is near the threshold decided by the
  exact Jaccard of the texts' shingles instead (app/core/verify.py; the engines read
  those texts again);
- ``ngram``: both texts short (at most ``ngram.max_chars`` normalised characters) and the
  exact Jaccard of their character q-gram sets at least ``ngram.threshold``.

``similarity`` is the MinHash estimate, or the q-gram Jaccard where the n-gram rule
matched and that is higher; with MinHash off, that Jaccard where there is one, else
``1 - hamming_distance / 64``; rounded to 6 digits (``Collection._scored``).

Documents with equal exact hashes have the same normalised text, so the same
fingerprints: they match each other by every rule that is on (``within_group_bits``) with
similarity 1, and any other document matches all of them or none. Both engines therefore
match one representative of each such group and expand its pairs to the group's members.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from app.collection_config import CollectionConfig, NgramConfig
from app.core import _gram_kernels as gram_kernels
from app.core.hamming import block_layout
from app.core.lsh import LSHIndex, min_matches
from app.core.methods import EXACT, METHODS_OF_BITS, MINHASH, NGRAM, SIMHASH
from app.core.ngram import CJK_RANGES
from app.core.page import read_page
from app.core.rule import similarity_of
from app.core.template import differing_numbers
from app.core.types import MinHashes, SimHashes
from app.core.verify import ExactMinHash, ShingleSets, candidate_threshold, unsure_pairs

Bits = npt.NDArray[np.uint8]
Floats = npt.NDArray[np.float64]


def check_batch_settings(config: CollectionConfig, timestamp_field: str | None) -> None:
    """Settings a corpus job cannot apply are refused, not ignored (InputError): a
    retention (a batch job keeps nothing, so nothing expires); a match window without the
    field that holds the documents' times, or that field without a window."""
    from app.batch.readers import InputError

    if config.retention.enabled:
        raise InputError(
            "--settings: a retention (max_age, max_documents) expires documents a collection "
            "holds; a corpus job holds none, so it has nothing to apply it to: remove "
            '"retention" from the settings (to de-duplicate only documents near in time, '
            "use match_window with --timestamp-field)"
        )
    if config.match_window is not None and timestamp_field is None:
        raise InputError(
            f"--settings: match_window {config.match_window!r} pairs documents by their "
            "times: give the field that holds them with --timestamp-field"
        )
    if config.match_window is None and timestamp_field is not None:
        raise InputError(
            "--timestamp-field is used by a match_window only: add one to --settings "
            '(like {"match_window": "48h"})'
        )


def parse_settings(text: str) -> CollectionConfig:
    """Collection settings as the service takes them (``PUT /v1/collections/{name}``'s
    body, or the ``settings`` of ``GET``'s answer), validated by the same schema."""
    from app.api.schemas import CollectionSettings

    data = orjson.loads(text)
    if isinstance(data, dict) and isinstance(data.get("settings"), dict):
        data = data["settings"]
    return CollectionSettings.model_validate(data).to_config()


@dataclass(frozen=True)
class MatchRule:
    """The match rule of a collection's settings, on arrays of pairs."""

    config: CollectionConfig = field(default_factory=CollectionConfig)
    # SimHash blocks: k + 1 (the service's default, the fewest tables) unless given.
    simhash_blocks: int | None = None

    @property
    def simhash_on(self) -> bool:
        return self.config.simhash.enabled

    @property
    def minhash_on(self) -> bool:
        return self.config.minhash.enabled

    @property
    def ngram_on(self) -> bool:
        return self.config.ngram.enabled

    @property
    def max_distance(self) -> int:
        return self.config.simhash.max_distance

    @property
    def num_perm(self) -> int:
        """Signature length the fingerprints carry (0 with MinHash off, as in the service)."""
        return self.config.minhash.num_perm if self.minhash_on else 0

    @cached_property
    def _lsh(self) -> LSHIndex:
        return LSHIndex(self.config.minhash.threshold, self.config.minhash.num_perm)

    @property
    def bands(self) -> int:
        return self._lsh.bands if self.minhash_on else 0

    @property
    def min_matches(self) -> int:
        """Equal signature values a band pair needs to be a MinHash candidate (with exact
        verification, the lower estimate app/core/verify.py looks at)."""
        minhash = self.config.minhash
        bar = candidate_threshold(minhash.threshold, self.config.verifies_exactly)
        return min_matches(bar, minhash.num_perm)

    def unsure(self, bits: Bits, agree: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Positions of the pairs whose MinHash decision needs their texts (none when
        the settings keep no texts: the estimate decides, as in the service)."""
        if not self.config.verifies_exactly:
            return np.zeros(0, dtype=np.int64)
        minhash = self.config.minhash
        return unsure_pairs(bits, agree, minhash.threshold, minhash.num_perm)

    def decided(
        self,
        a: npt.NDArray[np.int64],
        b: npt.NDArray[np.int64],
        bits: Bits,
        agree: npt.NDArray[np.int64],
        similarity: Floats,
        ngram_similarity: Floats,
        text_of: Callable[[int], str | None],
    ) -> tuple[Bits, Floats]:
        """(bits, similarity) of pairs (``a``, ``b``: keys of ``text_of``) with the MinHash
        bit decided as the service decides it (app/core/verify.py), every pair by its
        texts; bits 0: no match."""
        if not self.config.verifies_exactly or not len(a):
            return bits, similarity
        params = self.config.fingerprint_params
        texts = ShingleSets(params, lambda keys: [text_of(key) for key in keys])
        # Every pair: a job asks for all of them, and shingles a text once for the pairs
        # decided together (the service bounds a query's, MAX_DECIDED_PER_QUERY, by what
        # its answer shows; a job's chunks would also decide differently chunk by chunk).
        decision = ExactMinHash(
            self.config.minhash.threshold, params.num_perm, texts, texts, most=len(a)
        )
        return decision.decide(a, b, bits, agree, similarity, ngram_similarity)

    def band_keys(self, signatures: MinHashes) -> npt.NDArray[np.uint64]:
        """(m, bands) band keys, exactly as the service's LSH index makes them."""
        if not self.minhash_on:
            return np.zeros((len(signatures), 0), dtype=np.uint64)
        return self._lsh.band_keys(signatures)

    @cached_property
    def table_masks(self) -> npt.NDArray[np.uint64]:
        """One mask per permutation table: the bits of its leading blocks. A pair within
        k bits has, by pigeonhole, equal bits under at least one of them."""
        k = self.max_distance
        blocks = self.simhash_blocks or k + 1
        shifts, widths = block_layout(blocks)
        masks = []
        for leading in itertools.combinations(range(blocks), blocks - k):
            mask = 0
            for block in leading:
                mask |= ((1 << widths[block]) - 1) << shifts[block]
            masks.append(mask)
        return np.array(masks, dtype=np.uint64)

    def evaluate(
        self,
        exact_equal: npt.NDArray[np.bool_],
        simhash_a: SimHashes,
        simhash_b: SimHashes,
        agree: npt.NDArray[np.int64],
        band_shared: npt.NDArray[np.bool_],
        ngram_similarity: Floats,
    ) -> tuple[Bits, Floats]:
        """(method bits, similarity) of pairs: ``agree`` their equal signature values,
        ``band_shared`` whether they have a band key in common, ``ngram_similarity`` the
        q-gram Jaccard where both are short and it reaches the n-gram threshold (NaN
        elsewhere). Bits 0: no match."""
        distances = np.bitwise_count(simhash_a ^ simhash_b).astype(np.int64)
        bits = np.where(exact_equal, EXACT, 0).astype(np.uint8)
        if self.simhash_on:
            bits |= np.where(distances <= self.max_distance, SIMHASH, 0).astype(np.uint8)
        if self.minhash_on:
            found = band_shared & (agree >= self.min_matches)
            bits |= np.where(found, MINHASH, 0).astype(np.uint8)
        if self.ngram_on:
            bits |= np.where(np.isnan(ngram_similarity), 0, NGRAM).astype(np.uint8)
        return bits, similarity_of(self.num_perm, agree, distances, ngram_similarity)

    def within_group_bits(self, short: bool) -> int:
        """Methods two documents with the same normalised text match by."""
        bits = EXACT
        if self.simhash_on:
            bits |= SIMHASH
        if self.minhash_on:
            bits |= MINHASH
        if self.ngram_on and short:
            bits |= NGRAM
        return bits


def qgrams(text: str, size: int, cjk_size: int | None = None) -> set[str]:
    """The character q-grams of a normalised text as app.core.ngram counts them: the
    substring of q characters at each position where one fits, q being ``cjk_size`` at a
    CJK character (CJK_RANGES) and ``size`` at any other; the whole text when none fits."""
    if cjk_size is None or cjk_size == size:
        if len(text) <= size:
            return {text}
        return {text[i : i + size] for i in range(len(text) - size + 1)}
    grams = set()
    for i, char in enumerate(text):
        code = ord(char)
        q = cjk_size if any(low <= code <= high for low, high in CJK_RANGES) else size
        if i + q <= len(text):
            grams.add(text[i : i + q])
    return grams or {text}


def qgram_jaccard(a: set[str], b: set[str]) -> float:
    """Exact Jaccard of two q-gram sets, computed as the n-gram index compares it."""
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def ngram_similarity(short_a: str, short_b: str, ngram: NgramConfig) -> float:
    """The q-gram Jaccard of two short texts where the n-gram method matches them (at
    least the threshold; with ``same_numbers``, not two reports of one template, as the
    n-gram index checks: app/core/template.py), else NaN."""
    value = qgram_jaccard(
        qgrams(short_a, ngram.size, ngram.cjk_size), qgrams(short_b, ngram.size, ngram.cjk_size)
    )
    if value < ngram.threshold:
        return math.nan
    if ngram.same_numbers and differing_numbers(short_a, short_b) is not None:
        return math.nan
    return value


def prefix_length(size: int, threshold: float) -> int:
    """Tokens of a set of ``size`` that any set with Jaccard >= threshold must share one
    of (AllPairs' prefix filter): the n-gram index's rule (its kernels' prefix_length)
    with one shared token."""
    return int(gram_kernels.prefix_length(size, threshold, 1))


# ---------------------------------------------------------------------------- output


def pair_line(a: Any, b: Any, similarity: float, bits: int) -> bytes:
    """One line of pairs.jsonl (a: the earlier document in input order)."""
    return orjson.dumps(
        {"a": a, "b": b, "similarity": similarity, "methods": METHODS_OF_BITS[bits]},
        option=orjson.OPT_APPEND_NEWLINE,
    )


def cluster_line(document: Any, cluster: Any) -> bytes:
    """One line of clusters.jsonl."""
    return orjson.dumps({"id": document, "cluster_id": cluster}, option=orjson.OPT_APPEND_NEWLINE)


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run did; printed on stdout and written to DIR/summary.json."""

    engine: str
    documents: int
    empty: int
    pairs: int
    clusters: int
    seconds: float
    passage_pairs: int | None = None  # with --passages: pairs sharing passages
    contained: int | None = None  # with --drop-contained: documents dropped as contained

    @property
    def removed(self) -> int:
        return self.documents - self.clusters + (self.contained or 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "documents": self.documents,
            "empty": self.empty,
            "pairs": self.pairs,
            "clusters": self.clusters,
            "removed": self.removed,
            "seconds": round(self.seconds, 3),
            "documents_per_second": round(self.documents / max(self.seconds, 1e-9), 1),
        } | {
            name: value
            for name, value in (
                ("passage_pairs", self.passage_pairs),
                ("contained", self.contained),
            )
            if value is not None
        }

    def text(self) -> str:
        rate = self.documents / max(self.seconds, 1e-9)
        return (
            f"documents  {self.documents:,} ({self.empty:,} empty once normalised)\n"
            f"pairs      {self.pairs:,}\n"
            f"clusters   {self.clusters:,}\n"
            f"removed    {self.removed:,}\n"
            + (
                f"passages   {self.passage_pairs:,} pairs\n"
                if self.passage_pairs is not None
                else ""
            )
            + (f"contained  {self.contained:,}\n" if self.contained is not None else "")
            + f"time       {self.seconds:.1f} s ({rate:,.0f} documents/s, {self.engine})"
        )


def document_text(text: str | None, config: CollectionConfig, html: bool) -> str:
    """The text a document is fingerprinted and its passages found in, by both engines:
    with ``html``, the text the page is read as (``read_page`` by the settings'
    html.extract, as the service reads a document sent with ``"html": true``)."""
    if not text:
        return ""
    return read_page(text, config.html.extract).text if html else text
