"""Request and response bodies of the HTTP contract (v1)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from app.collection_config import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_NGRAM_MAX_CHARS,
    DEFAULT_NGRAM_SIZE,
    DEFAULT_NGRAM_THRESHOLD,
    DEFAULT_SHINGLE_SIZE,
    DEFAULT_SHINGLE_UNIT,
    DEFAULT_THRESHOLD,
    CollectionConfig,
    MinHashConfig,
    NgramConfig,
    ShingleConfig,
    SimHashConfig,
)
from app.core.fingerprint import DEFAULT_NUM_PERM, MAX_NUM_PERM, MAX_SHINGLE_SIZE
from app.core.hamming import MAX_DISTANCE_LIMIT
from app.core.ngram import MAX_SIZE as MAX_NGRAM_SIZE

# The n-gram index verifies every candidate exactly: its cost grows with the texts' length.
MAX_NGRAM_MAX_CHARS = 1000
COLLECTION_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
MAX_ID_LENGTH = 256


class Input(BaseModel):
    """Request bodies reject fields they do not know and values of the wrong JSON type
    (``"store_text": 0`` is not false): a client's mistake must not pass silently."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _utf8(value: str) -> bytes:
    """JSON may escape half of a surrogate pair alone; such a string is not Unicode text
    and could be neither hashed nor stored."""
    try:
        return value.encode()
    except UnicodeEncodeError as error:
        raise ValueError(
            f"has a lone surrogate \\u{ord(value[error.start]):04x} at {error.start}: "
            "not valid Unicode"
        ) from None


def check_unicode(value: str) -> str:
    _utf8(value)
    return value


def check_text(value: str) -> str:
    """Any Unicode text is a text: control characters are repaired when it is normalised
    (app/core/text.repair_controls) and stored as sent. Only what is not Unicode at all
    (a lone surrogate) is refused."""
    _utf8(value)
    return value


def check_metadata_unicode(value: dict[str, Any]) -> dict[str, Any]:
    check_unicode(json.dumps(value, ensure_ascii=False))
    return value


Text = Annotated[str, AfterValidator(check_text)]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata_unicode)]


def check_document_id(value: str | None) -> str | None:
    if value is None:
        return value
    check_unicode(value)
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise ValueError(f"a document id has 1 to {MAX_ID_LENGTH} characters")
    if not value.isprintable():
        raise ValueError("a document id has printable characters only")
    return value


class ShingleSettings(Input):
    unit: Literal["char", "word"] = DEFAULT_SHINGLE_UNIT
    size: int = Field(DEFAULT_SHINGLE_SIZE, ge=1, le=MAX_SHINGLE_SIZE)


class SimHashSettings(Input):
    enabled: bool = True
    max_distance: int = Field(DEFAULT_MAX_DISTANCE, ge=0, le=MAX_DISTANCE_LIMIT)


class MinHashSettings(Input):
    enabled: bool = True
    num_perm: int = Field(DEFAULT_NUM_PERM, ge=16, le=MAX_NUM_PERM)
    threshold: float = Field(DEFAULT_THRESHOLD, gt=0.0, lt=1.0, allow_inf_nan=False)


class NgramSettings(Input):
    """The exact n-gram index of short texts (titles, tweets, short posts)."""

    enabled: bool = True
    max_chars: int = Field(
        DEFAULT_NGRAM_MAX_CHARS,
        ge=1,
        le=MAX_NGRAM_MAX_CHARS,
        description="Texts of at most this many normalised characters are indexed here.",
    )
    size: int = Field(DEFAULT_NGRAM_SIZE, ge=1, le=MAX_NGRAM_SIZE, description="q, characters")
    threshold: float = Field(DEFAULT_NGRAM_THRESHOLD, gt=0.0, le=1.0, allow_inf_nan=False)


class CollectionSettings(Input):
    shingle: ShingleSettings = Field(default_factory=ShingleSettings)
    simhash: SimHashSettings = Field(default_factory=SimHashSettings)
    minhash: MinHashSettings = Field(default_factory=MinHashSettings)
    ngram: NgramSettings = Field(default_factory=NgramSettings)
    store_text: bool = Field(False, description="Keep each document's text.")

    def to_config(self) -> CollectionConfig:
        return CollectionConfig(
            shingle=ShingleConfig(**self.shingle.model_dump()),
            simhash=SimHashConfig(**self.simhash.model_dump()),
            minhash=MinHashConfig(**self.minhash.model_dump()),
            ngram=NgramConfig(**self.ngram.model_dump()),
            store_text=self.store_text,
        )

    @staticmethod
    def from_config(config: CollectionConfig) -> CollectionSettings:
        return CollectionSettings.model_validate(config.to_dict())


class CollectionStats(BaseModel):
    documents: int
    duplicates: int
    merges: int
    index_bytes: int


class CollectionInfo(BaseModel):
    name: str
    settings: CollectionSettings
    stats: CollectionStats


class CollectionList(BaseModel):
    collections: list[CollectionInfo]


class DocumentFields(Input):
    text: Text = Field(min_length=1, description="The document's text (HTML when html is true).")
    metadata: Metadata | None = Field(None, description="Any JSON object, stored as is.")
    html: bool = Field(False, description="Strip HTML tags, scripts and styles before hashing.")


class DocumentIn(DocumentFields):
    id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ID_LENGTH,
        description="1-256 printable characters; a UUID if absent.",
    )
    on_duplicate: Literal["insert", "skip"] = "insert"

    _check_id = field_validator("id")(check_document_id)


class BatchDocument(DocumentFields):
    id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ID_LENGTH,
        description="1-256 printable characters; a UUID if absent.",
    )

    _check_id = field_validator("id")(check_document_id)


class BatchIn(Input):
    # Objects here; each is validated as a BatchDocument on its own by the route, so that
    # one bad document is refused at its position instead of costing the whole batch.
    documents: list[dict[str, Any]] = Field(
        min_length=1,
        json_schema_extra={"items": {"$ref": "#/components/schemas/BatchDocument"}},
        description="Documents, each as a single insert takes it (BatchDocument). One "
        "that is refused on its own gets an error at its position in `results`.",
    )
    on_duplicate: Literal["insert", "skip"] = "insert"


class DocumentPut(DocumentFields):
    pass


class MatchOut(BaseModel):
    id: str
    similarity: float
    hamming_distance: int
    methods: list[Literal["exact", "simhash", "minhash", "ngram"]]


class InsertOut(BaseModel):
    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: list[MatchOut]


class ErrorDetail(BaseModel):
    code: str
    message: str


class DocumentErrorOut(BaseModel):
    """A document of a batch refused on its own; nothing of it was stored."""

    id: str | None = Field(description="The document's id as sent (null if it had none).")
    error: ErrorDetail


class BatchOut(BaseModel):
    results: list[InsertOut | DocumentErrorOut]


class DocumentOut(BaseModel):
    id: str
    metadata: dict[str, Any] | None
    created_at: str
    cluster_id: str
    simhash: str
    text: str | None = Field(None, description="Present when the collection keeps texts.")


class SearchIn(Input):
    text: Text = Field(min_length=1)
    limit: int = Field(10, ge=1)
    min_similarity: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    max_distance: int | None = Field(None, ge=0)
    html: bool = False


class MatchesOut(BaseModel):
    matches: list[MatchOut]


class ErrorOut(BaseModel):
    error: ErrorDetail
