"""A collection's settings: what its fingerprints are made with and when documents match."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from app.core import ngram
from app.core.fingerprint import DEFAULT_NUM_PERM, FingerprintParams, ShingleUnit

# Defaults measured on Reuters-21578 replayed in date order (docs/evaluation.md): word
# 5-grams with k = 3 and t = 0.8 have the best F1 (0.978) of the settings that find every
# identical pair; character n-grams score the same story's figures-only updates too high.
# In scripts without spaces every character is a word, so Chinese gets 5-character grams.
DEFAULT_SHINGLE_UNIT: ShingleUnit = "word"
DEFAULT_SHINGLE_SIZE = 5
DEFAULT_MAX_DISTANCE = 3
DEFAULT_THRESHOLD = 0.8
# Short texts (titles, tweets) in the n-gram index: up to this many normalised characters.
DEFAULT_NGRAM_MAX_CHARS = 200
DEFAULT_NGRAM_SIZE = ngram.DEFAULT_SIZE
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


@dataclass(frozen=True, slots=True)
class NgramConfig:
    """The exact n-gram index of short texts: character q-grams of ``size``, Jaccard at
    least ``threshold``, for texts of at most ``max_chars`` normalised characters."""

    enabled: bool = True
    max_chars: int = DEFAULT_NGRAM_MAX_CHARS
    size: int = DEFAULT_NGRAM_SIZE
    threshold: float = DEFAULT_NGRAM_THRESHOLD


# Collections created before the n-gram index existed have no "ngram" in their stored
# settings: they keep working as they were created, without it.
_NGRAM_ABSENT = {"enabled": False}


@dataclass(frozen=True, slots=True)
class CollectionConfig:
    """Fixed for the life of a collection: fingerprints made otherwise never compare."""

    shingle: ShingleConfig = field(default_factory=ShingleConfig)
    simhash: SimHashConfig = field(default_factory=SimHashConfig)
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    ngram: NgramConfig = field(default_factory=NgramConfig)
    store_text: bool = False  # keep each document's text (GET returns it; export carries it)

    @property
    def short_chars(self) -> int:
        """Texts of at most this many normalised characters go to the n-gram index."""
        return self.ngram.max_chars if self.ngram.enabled else 0

    @property
    def fingerprint_params(self) -> FingerprintParams:
        return FingerprintParams(
            unit=self.shingle.unit, size=self.shingle.size, num_perm=self.minhash.num_perm
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> CollectionConfig:
        return CollectionConfig(
            shingle=ShingleConfig(**data.get("shingle", {})),
            simhash=SimHashConfig(**data.get("simhash", {})),
            minhash=MinHashConfig(**data.get("minhash", {})),
            ngram=NgramConfig(**data.get("ngram", _NGRAM_ABSENT)),
            store_text=bool(data.get("store_text", False)),
        )
