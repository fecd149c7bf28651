"""A collection's settings: what its fingerprints are made with and when documents match."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core import ngram, passages
from app.core.fingerprint import (
    DEFAULT_NUM_PERM,
    FingerprintParams,
    Fingerprints,
    ShingleUnit,
    fingerprint_nonempty,
)
from app.core.page import EXTRACTIONS, Extraction
from app.core.verify import ExactMinHash, TextsOf, exact_minhash, search_bar
from app.errors import SettingsConflict

# Defaults measured on Reuters-21578 replayed in date order (docs/evaluation.md): word
# 5-grams with k = 3 and t = 0.8 have the best F1 (0.978) of the settings that find every
# identical pair; character n-grams score the same story's figures-only updates too high.
# In scripts without spaces every character is a word, so Chinese gets 5-character grams.
DEFAULT_SHINGLE_UNIT: ShingleUnit = "word"
DEFAULT_SHINGLE_SIZE = 5
DEFAULT_MAX_DISTANCE = 3
DEFAULT_THRESHOLD = 0.8
# Short texts (titles, short posts) in the n-gram index: up to this many normalised
# characters. Measured on the Reuters replay (docs/evaluation-http.md): at 200, the 3,715
# stories of at most 200 characters (templates: "qtr shr 12 cts vs 10 cts...") gave 464
# false pairs at t = 0.7 (F1 0.978 -> 0.678); at 100, 16 (F1 0.963), and every title but
# 10 of 21,578 is at most 100 characters. Longer short texts (tweets): set it higher.
DEFAULT_NGRAM_MAX_CHARS = 100
DEFAULT_NGRAM_SIZE = ngram.DEFAULT_SIZE
# Grams that start at a CJK character have 2 characters in new collections: Chinese texts
# of 20-40 characters keep 88% of their 1-3-character edits at t = 0.7 with them, 57% with
# 3, at no loss of precision on the planted corpus (bench/ngram.py, section 6;
# docs/benchmarks.md).
DEFAULT_NGRAM_CJK_SIZE = ngram.DEFAULT_CJK_SIZE
DEFAULT_NGRAM_THRESHOLD = ngram.DEFAULT_THRESHOLD


@dataclass(frozen=True, slots=True)
class ShingleConfig:
    unit: ShingleUnit = DEFAULT_SHINGLE_UNIT
    size: int = DEFAULT_SHINGLE_SIZE


@dataclass(frozen=True, slots=True)
class SimHashConfig:
    enabled: bool = True
    max_distance: int = DEFAULT_MAX_DISTANCE


@dataclass(frozen=True, slots=True)
class MinHashConfig:
    enabled: bool = True
    num_perm: int = DEFAULT_NUM_PERM
    threshold: float = DEFAULT_THRESHOLD
    # Candidates whose estimate is near the threshold decided by the exact Jaccard of the
    # texts' shingles, where the texts are kept (app/core/verify.py).
    exact: bool = True


@dataclass(frozen=True, slots=True)
class NgramConfig:
    """The exact n-gram index of short texts: character q-grams of ``size`` (``cjk_size``
    for the grams that start at a CJK character; None: ``size`` for all, as collections
    created before the setting have it), Jaccard at least ``threshold``, for texts of at
    most ``max_chars`` normalised characters; with ``same_numbers``, only texts stating the
    same numbers match."""

    enabled: bool = True
    max_chars: int = DEFAULT_NGRAM_MAX_CHARS
    size: int = DEFAULT_NGRAM_SIZE
    threshold: float = DEFAULT_NGRAM_THRESHOLD
    cjk_size: int | None = DEFAULT_NGRAM_CJK_SIZE
    # Two short texts match only when they state the same numbers (app/core/template.py):
    # two price reports of one template are not duplicates.
    same_numbers: bool = True


@dataclass(frozen=True, slots=True)
class HtmlConfig:
    """How a page (a document sent with ``html``) is read: ``extract`` "main" matches its
    main content (the article, without navigation, teasers and footers), "all" its whole
    visible text (app/core/page.py)."""

    extract: Extraction = "main"

    def __post_init__(self) -> None:
        if self.extract not in EXTRACTIONS:
            raise ValueError(f"html.extract is one of {list(EXTRACTIONS)}, not {self.extract!r}")


@dataclass(frozen=True, slots=True)
class PassagesConfig:
    """Shared passages (app/core/passages.py): texts' winnowed k-grams of ``k`` tokens in
    windows of ``window`` (every shared run of window + k - 1 tokens is found), verified
    token by token; passages of at least ``min_tokens`` tokens are reported, and a
    fingerprint more than ``max_rows`` documents hold (boilerplate) seeds nothing.
    The collection keeps its documents' texts while it is on (what verification and
    offsets need). Measured defaults: bench/passages.py, docs/evaluation-passages.md."""

    enabled: bool = True
    k: int = passages.DEFAULT_K
    window: int = passages.DEFAULT_WINDOW
    min_tokens: int = passages.DEFAULT_MINIMUM
    max_rows: int = passages.DEFAULT_MAX_ROWS

    def __post_init__(self) -> None:
        if not 2 <= self.k <= passages.MAX_K:
            raise ValueError(f"passages.k is 2 to {passages.MAX_K}, not {self.k}")
        if not 1 <= self.window <= passages.MAX_WINDOW:
            raise ValueError(f"passages.window is 1 to {passages.MAX_WINDOW}, not {self.window}")
        if not self.k <= self.min_tokens <= passages.MAX_MINIMUM:
            raise ValueError(
                f"passages.min_tokens is k ({self.k}) to {passages.MAX_MINIMUM}, "
                f"not {self.min_tokens}"
            )
        if not 1 <= self.max_rows <= passages.MAX_MAX_ROWS:
            raise ValueError(
                f"passages.max_rows is 1 to {passages.MAX_MAX_ROWS}, not {self.max_rows}"
            )

    def fingerprints(self, texts: Sequence[str]) -> list[npt.NDArray[np.uint64]]:
        """Each text's winnowed fingerprints with these settings, in one compiled call:
        what every backend and ``neardup dedup`` index and look up. O(total length)."""
        return passages.fingerprints_many(texts, self.k, self.window)


# Durations ("48h", "30m", "7d"): one whole number of one unit, nothing else.
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_DURATION_SECONDS = 100 * 365 * 86_400  # a century: longer is a typo
_DURATION = re.compile(r"([1-9][0-9]{0,10})([smhdw])")


def parse_duration(text: str) -> int:
    """A duration string as microseconds: a positive whole number and one unit, s (seconds),
    m (minutes), h (hours), d (days) or w (weeks), like "48h"; ValueError otherwise."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: a positive whole number and one unit of s, m, h, d "
            'or w, like "48h" or "7d"'
        )
    seconds = int(match[1]) * DURATION_UNITS[match[2]]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is longer than a century")
    return seconds * 1_000_000


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Documents kept: those at most ``max_age`` older than now (by their timestamp), and of
    those the ``max_documents`` newest. Neither set: everything is kept."""

    max_age: str | None = None
    max_documents: int | None = None

    def __post_init__(self) -> None:
        if self.max_age is not None:
            parse_duration(self.max_age)
        if self.max_documents is not None and self.max_documents < 1:
            raise ValueError("retention.max_documents must be at least 1")

    @property
    def max_age_us(self) -> int | None:
        return None if self.max_age is None else parse_duration(self.max_age)

    @property
    def enabled(self) -> bool:
        return self.max_age is not None or self.max_documents is not None


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """A cap, not a retention: past ``max_documents`` live documents an insert is refused
    (507 insufficient_storage) instead of evicting anything."""

    max_documents: int | None = None

    def __post_init__(self) -> None:
        if self.max_documents is not None and self.max_documents < 1:
            raise ValueError("limits.max_documents must be at least 1")


# Settings an existing collection may change (PATCH, or PUT with new values): they decide
# which stored documents match or stay, not how a fingerprint is made.
MUTABLE_SETTINGS = ("match_window", "retention", "limits")


# Collections created before the n-gram index existed have no "ngram" in their stored
# settings: they keep working as they were created, without it. Those created before
# ngram.cjk_size existed have none: one q for every script, as they were created.
_NGRAM_ABSENT = {"enabled": False, "cjk_size": None}
_NGRAM_BEFORE_CJK_SIZE = {"cjk_size": None}
# Collections created before html.extract existed read pages as their visible text.
_HTML_ABSENT = {"extract": "all"}
# Collections created before the passage index existed keep none (their texts were not
# kept, so nothing could be verified).
_PASSAGES_ABSENT = {"enabled": False}
# Collections created before minhash.exact existed keep deciding by the estimate.
_MINHASH_BEFORE_EXACT = {"exact": False}


@dataclass(frozen=True, slots=True)
class CollectionConfig:
    """A collection's settings. Those that make fingerprints (shingle, simhash, minhash,
    ngram, html, passages) and store_text are fixed for its life: fingerprints made
    otherwise never compare. The time settings (MUTABLE_SETTINGS) may change."""

    shingle: ShingleConfig = field(default_factory=ShingleConfig)
    simhash: SimHashConfig = field(default_factory=SimHashConfig)
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    ngram: NgramConfig = field(default_factory=NgramConfig)
    html: HtmlConfig = field(default_factory=HtmlConfig)
    passages: PassagesConfig = field(default_factory=PassagesConfig)
    store_text: bool = False  # keep each document's text (GET returns it; export carries it)
    # These may change on an existing collection (MUTABLE_SETTINGS).
    match_window: str | None = None  # a new document matches documents this near in time
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self) -> None:
        if self.match_window is not None:
            parse_duration(self.match_window)

    @property
    def match_window_us(self) -> int | None:
        return None if self.match_window is None else parse_duration(self.match_window)

    def fixed(self) -> dict[str, Any]:
        """The settings that can never change once the collection exists."""
        data = self.to_dict()
        for name in MUTABLE_SETTINGS:
            del data[name]
        return data

    def fixed_differences(self, other: CollectionConfig) -> list[str]:
        """The fixed settings that differ, as "shingle.size: 2, not 5" (self's, other's)."""
        mine, theirs = _flat(self.fixed()), _flat(other.fixed())
        return [
            f"{key}: {mine.get(key)!r}, not {theirs.get(key)!r}"
            for key in sorted(set(mine) | set(theirs))
            if mine.get(key) != theirs.get(key)
        ]

    def check_change(self, name: str, asked: CollectionConfig) -> None:
        """SettingsConflict (409) unless ``asked`` of collection ``name``, which has these
        settings, differs in the time settings only (MUTABLE_SETTINGS)."""
        differences = self.fixed_differences(asked)
        if differences:
            raise SettingsConflict(
                f"collection {name!r} exists with other settings that cannot "
                f"change: {'; '.join(differences)} (stored, not asked). Only match_window, "
                "retention and limits can change (PATCH)"
            )

    def with_changes(self, **changes: Any) -> CollectionConfig:
        """A copy with some settings replaced (only MUTABLE_SETTINGS)."""
        unknown = set(changes) - set(MUTABLE_SETTINGS)
        if unknown:
            raise ValueError(f"settings {sorted(unknown)} cannot change")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return CollectionConfig(**values)

    @property
    def keeps_text(self) -> bool:
        """Whether documents' texts are kept: asked for (store_text), or needed by the
        passages' verification and offsets."""
        return self.store_text or self.passages.enabled

    @property
    def verifies_exactly(self) -> bool:
        """Whether MinHash candidates near the threshold are decided by the exact Jaccard
        of the texts' shingles (app/core/verify.py): asked for (minhash.exact) and the
        texts kept."""
        return self.minhash.enabled and self.minhash.exact and self.keeps_text

    def minhash_decision(
        self,
        min_similarity: float | None,
        texts: Sequence[str | None] | None,
        stored_texts: TextsOf | None = None,
        answers: int = 0,
    ) -> ExactMinHash | None:
        """How a search's MinHash pairs are decided (``score``'s ``minhash``): by the
        texts near the bar (the search's min_similarity, else the threshold) where the
        collection verifies exactly, else None (the estimate). ``texts``: the queries'
        (None: set aside, as an explained search does); ``stored_texts``: by rows (None:
        the queries' own, for the pairs within a batch); ``answers``: the matches a
        query asks for (app/core/verify.py: MAX_DECIDED_PER_QUERY)."""
        if not self.verifies_exactly:
            return None
        bar = search_bar(self.minhash.threshold, min_similarity)
        return exact_minhash(self.fingerprint_params, bar, texts, stored_texts, answers)

    @property
    def short_chars(self) -> int:
        """Texts of at most this many normalised characters go to the n-gram index."""
        return self.ngram.max_chars if self.ngram.enabled else 0

    def fingerprints(self, texts: list[str]) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        """(fingerprints, kept) of the texts not empty once normalised, as this
        collection makes them: its shingles, the normalised text of its short texts, and
        no MinHash signatures when MinHash is off (nothing would read them). Every
        backend and ``neardup dedup`` fingerprint through this."""
        fingerprints, kept = fingerprint_nonempty(
            texts, self.fingerprint_params, short_chars=self.short_chars
        )
        if not self.minhash.enabled:
            fingerprints = Fingerprints(
                fingerprints.simhash,
                fingerprints.minhash[:, :0],
                fingerprints.exact,
                fingerprints.shorts,
            )
        if self.verifies_exactly:
            kept_texts = texts if len(kept) == len(texts) else [texts[i] for i in kept.tolist()]
            fingerprints = fingerprints.with_texts(kept_texts)
        return fingerprints, kept

    @property
    def fingerprint_params(self) -> FingerprintParams:
        return _fingerprint_params(self.shingle.unit, self.shingle.size, self.minhash.num_perm)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> CollectionConfig:
        return CollectionConfig(
            shingle=ShingleConfig(**data.get("shingle", {})),
            simhash=SimHashConfig(**data.get("simhash", {})),
            minhash=MinHashConfig(**{**_MINHASH_BEFORE_EXACT, **data.get("minhash", {})}),
            ngram=NgramConfig(**{**_NGRAM_BEFORE_CJK_SIZE, **data.get("ngram", _NGRAM_ABSENT)}),
            html=HtmlConfig(**data.get("html", _HTML_ABSENT)),
            passages=PassagesConfig(**data.get("passages", _PASSAGES_ABSENT)),
            store_text=bool(data.get("store_text", False)),
            match_window=data.get("match_window"),
            retention=RetentionConfig(**(data.get("retention") or {})),
            limits=LimitsConfig(**(data.get("limits") or {})),
        )


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@lru_cache(maxsize=64)
def _fingerprint_params(unit: ShingleUnit, size: int, num_perm: int) -> FingerprintParams:
    """One frozen FingerprintParams a setting, made once: every search and insert asks for
    its collection's, some several times."""
    return FingerprintParams(unit=unit, size=size, num_perm=num_perm)
