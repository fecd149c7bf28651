"""Request and response bodies of the HTTP contract (v1)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from app.collection_config import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_SHINGLE_SIZE,
    DEFAULT_SHINGLE_UNIT,
    DEFAULT_THRESHOLD,
    CollectionConfig,
    MinHashConfig,
    ShingleConfig,
    SimHashConfig,
)
from app.core.fingerprint import DEFAULT_NUM_PERM, MAX_NUM_PERM, MAX_SHINGLE_SIZE
from app.core.hamming import MAX_DISTANCE_LIMIT

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


# C0 and C1 controls other than tab, line feed, vertical tab, form feed and carriage return:
# binary junk, not text; a client sending them has a bug worth hearing about.
_CONTROL_CHARACTER = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
# The same test on the UTF-8 bytes, at C speed (the regex takes 13 us for 3 KB): C0
# controls and DEL are single bytes that occur in no other character's encoding, and
# every C1 control starts with the byte 0xC2.
_C0_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])


def check_text(value: str) -> str:
    encoded = _utf8(value)
    suspect = len(encoded.translate(None, _C0_CONTROL_BYTES)) != len(encoded) or (
        b"\xc2" in encoded
    )
    control = _CONTROL_CHARACTER.search(value) if suspect else None
    if control is not None:
        raise ValueError(
            f"has the control character U+{ord(control.group()):04X} at {control.start()}; "
            "texts may hold tab, line breaks and printable characters only"
        )
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


class CollectionSettings(Input):
    shingle: ShingleSettings = Field(default_factory=ShingleSettings)
    simhash: SimHashSettings = Field(default_factory=SimHashSettings)
    minhash: MinHashSettings = Field(default_factory=MinHashSettings)
    store_text: bool = Field(False, description="Keep each document's text.")

    def to_config(self) -> CollectionConfig:
        return CollectionConfig(
            shingle=ShingleConfig(**self.shingle.model_dump()),
            simhash=SimHashConfig(**self.simhash.model_dump()),
            minhash=MinHashConfig(**self.minhash.model_dump()),
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
    documents: list[BatchDocument] = Field(min_length=1)
    on_duplicate: Literal["insert", "skip"] = "insert"


class DocumentPut(DocumentFields):
    pass


class MatchOut(BaseModel):
    id: str
    similarity: float
    hamming_distance: int
    methods: list[Literal["exact", "simhash", "minhash"]]


class InsertOut(BaseModel):
    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: list[MatchOut]


class BatchOut(BaseModel):
    results: list[InsertOut]


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


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail
