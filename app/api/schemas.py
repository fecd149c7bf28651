"""Request and response bodies of the HTTP contract (v1)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.collection_config import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_NGRAM_CJK_SIZE,
    DEFAULT_NGRAM_MAX_CHARS,
    DEFAULT_NGRAM_SIZE,
    DEFAULT_NGRAM_THRESHOLD,
    DEFAULT_SHINGLE_SIZE,
    DEFAULT_SHINGLE_UNIT,
    DEFAULT_THRESHOLD,
    CollectionConfig,
    HtmlConfig,
    LimitsConfig,
    MinHashConfig,
    NgramConfig,
    PassagesConfig,
    RetentionConfig,
    ShingleConfig,
    SimHashConfig,
    parse_duration,
)
from app.core import passages
from app.core.fingerprint import DEFAULT_NUM_PERM, MAX_NUM_PERM, MAX_SHINGLE_SIZE
from app.core.hamming import MAX_DISTANCE_LIMIT
from app.core.ngram import MAX_SIZE as MAX_NGRAM_SIZE
from app.core.page import Extraction
from app.service.times import BadTime, parse_time
from app.service.types import MIN_COVERAGE_DESCRIPTION

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


def _time(value: object) -> int:
    try:
        return parse_time(value)
    except BadTime as error:
        raise ValueError(str(error)) from None


# A time as a client sends it: an ISO 8601 string with a UTC offset or Z, or Unix seconds
# (a JSON number); held as int64 microseconds since the epoch.
Time = Annotated[
    int,
    BeforeValidator(_time),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}],
            "description": "ISO 8601 with a UTC offset or Z, or Unix seconds",
            "examples": ["2024-05-01T12:00:00Z", 1714564800],
        }
    ),
]


def check_duration(value: str) -> str:
    parse_duration(value)
    return value


# "48h", "30m", "7d": a positive whole number and one unit of s, m, h, d, w.
Duration = Annotated[
    str,
    AfterValidator(check_duration),
    WithJsonSchema({"type": "string", "pattern": "^[1-9][0-9]*[smhdw]$", "examples": ["48h"]}),
]


class TimeRange(Input):
    """Matching only documents with a timestamp from ``since`` to ``until``."""

    since: Time | None = Field(None, description="Only documents at or after this time.")
    until: Time | None = Field(None, description="Only documents at or before this time.")

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since must not be later than until")
        return self


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
    exact: bool = Field(
        True,
        description="Candidates whose estimate is within 0.15 of the threshold are decided "
        "by the exact Jaccard of the two texts' shingles (the texts must be kept: passages "
        "on, or store_text); false: by the estimate alone.",
    )


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
    cjk_size: int | None = Field(
        DEFAULT_NGRAM_CJK_SIZE,
        ge=1,
        le=MAX_NGRAM_SIZE,
        description="q of the grams that start at a CJK character (Han, kana, Hangul); "
        "null: size (collections created before this setting).",
    )
    same_numbers: bool = Field(
        True,
        description="Two short texts match only when they state the same numbers, as values "
        '("3" and "three" are one; "1222" and "1627", "six-day" and "two-day" are not): two '
        "reports of one template are not duplicates.",
    )


class HtmlSettings(Input):
    """How a page (a document or search sent with html or html_base64) is read."""

    extract: Extraction = Field(
        "main",
        description='"main": the main content (the article, without navigation, teasers, '
        'comments and footers) is matched; "all": the whole visible text. Where the main '
        "content is empty or a small share of the page, the visible text is used; answers "
        "say which (`extracted`).",
    )


class PassageSettings(Input):
    """Shared passages: a document inside another (a story in a roundup or a page, a
    quoted or copied passage), with offsets. Fixed at creation; the collection keeps its
    documents' texts while it is on."""

    enabled: bool = Field(
        True,
        description="Find shared passages. On by default; it keeps each document's text "
        "(its size) and ~1.2 KB of index a 3 KB text; false turns it off.",
    )
    k: int = Field(passages.DEFAULT_K, ge=2, le=passages.MAX_K, description="Tokens a k-gram.")
    window: int = Field(
        passages.DEFAULT_WINDOW,
        ge=1,
        le=passages.MAX_WINDOW,
        description="k-grams a winnowing window: every shared run of window + k - 1 tokens "
        "is found.",
    )
    min_tokens: int = Field(
        passages.DEFAULT_MINIMUM,
        ge=2,
        le=passages.MAX_MINIMUM,
        description="Tokens of the shortest passage reported (at least k).",
    )
    max_rows: int = Field(
        passages.DEFAULT_MAX_ROWS,
        ge=1,
        le=passages.MAX_MAX_ROWS,
        description="A fingerprint held by more documents than this (boilerplate) finds nothing.",
    )

    @model_validator(mode="after")
    def _minimum_of_k(self) -> PassageSettings:
        if self.min_tokens < self.k:
            raise ValueError("passages.min_tokens must be at least passages.k")
        return self


# A count of documents both backends can hold: a signed 64-bit integer (Redis's, SQLite's).
MOST_DOCUMENTS = 2**63 - 1


class RetentionSettings(Input):
    """Documents past either bound expire: they leave every answer at once and are
    evicted from memory and disk in the background."""

    max_age: Duration | None = Field(
        None, description="Expire documents whose timestamp is older than now minus this."
    )
    max_documents: int | None = Field(
        None,
        ge=1,
        le=MOST_DOCUMENTS,
        description="Keep at most this many documents: the newest by timestamp.",
    )


class LimitsSettings(Input):
    """A cap that refuses instead of evicting."""

    max_documents: int | None = Field(
        None,
        ge=1,
        le=MOST_DOCUMENTS,
        description="Past this many live documents an insert is refused: 507 insufficient_storage.",
    )


class CollectionSettings(Input):
    shingle: ShingleSettings = Field(default_factory=ShingleSettings)
    simhash: SimHashSettings = Field(default_factory=SimHashSettings)
    minhash: MinHashSettings = Field(default_factory=MinHashSettings)
    ngram: NgramSettings = Field(default_factory=NgramSettings)
    html: HtmlSettings = Field(default_factory=HtmlSettings)
    passages: PassageSettings = Field(default_factory=PassageSettings)
    store_text: bool = Field(
        False, description="Keep each document's text (for a page, the text extracted from it)."
    )
    match_window: Duration | None = Field(
        None,
        description="A new document matches only documents whose timestamp is within this "
        "of its own (may change: PATCH).",
    )
    retention: RetentionSettings | None = Field(
        default_factory=RetentionSettings, description="May change: PATCH."
    )
    limits: LimitsSettings | None = Field(
        default_factory=LimitsSettings, description="May change: PATCH."
    )

    def to_config(self) -> CollectionConfig:
        return CollectionConfig(
            shingle=ShingleConfig(**self.shingle.model_dump()),
            simhash=SimHashConfig(**self.simhash.model_dump()),
            minhash=MinHashConfig(**self.minhash.model_dump()),
            ngram=NgramConfig(**self.ngram.model_dump()),
            html=HtmlConfig(**self.html.model_dump()),
            passages=PassagesConfig(**self.passages.model_dump()),
            store_text=self.store_text,
            match_window=self.match_window,
            retention=RetentionConfig(**(self.retention or RetentionSettings()).model_dump()),
            limits=LimitsConfig(**(self.limits or LimitsSettings()).model_dump()),
        )

    @staticmethod
    def from_config(config: CollectionConfig) -> CollectionSettings:
        return CollectionSettings.model_validate(config.to_dict())


class CollectionPatch(Input):
    """Settings to change, as a JSON merge patch (RFC 7396) of the collection's settings:
    a field left out keeps its value, null clears it. Only match_window, retention and
    limits may differ from the collection's; any other setting sent must equal it."""

    shingle: ShingleSettings | None = None
    simhash: SimHashSettings | None = None
    minhash: MinHashSettings | None = None
    ngram: NgramSettings | None = None
    html: HtmlSettings | None = None
    passages: PassageSettings | None = None
    store_text: bool | None = None
    match_window: Duration | None = None
    retention: RetentionSettings | None = None
    limits: LimitsSettings | None = None


class CollectionStats(BaseModel):
    documents: int
    duplicates: int
    merges: int
    index_bytes: int
    evicted: int = Field(0, description="Documents evicted by the retention since the start.")
    expiring: int = Field(0, description="Expired documents not evicted yet.")
    oldest_timestamp: str | None = Field(None, description="The oldest live document's time.")


class CollectionInfo(BaseModel):
    name: str
    settings: CollectionSettings
    stats: CollectionStats


class CollectionList(BaseModel):
    collections: list[CollectionInfo]


class PageFields(Input):
    """A text, or a page: HTML as text (``html``), or as fetched (``html_base64``, in the
    ``charset`` of its Content-Type if known). Exactly one of text and html_base64."""

    text: Annotated[str, StringConstraints(min_length=1), AfterValidator(check_text)] | None = (
        Field(None, description="The document's text (HTML when html is true).")
    )
    html: bool = Field(
        False,
        description="text is a web page: what is matched is its main content, or its visible "
        "text, by the collection's html.extract.",
    )
    html_base64: Annotated[str, StringConstraints(min_length=1)] | None = Field(
        None,
        description="A web page as fetched, its bytes in base64 (instead of text): decoded by "
        "charset, else by the page's own declaration, else as UTF-8, else by detection.",
    )
    charset: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        None,
        description="The charset of html_base64 (from the Content-Type it was fetched with).",
    )

    @model_validator(mode="after")
    def _text_or_page(self) -> PageFields:
        if (self.text is None) == (self.html_base64 is None):
            raise ValueError("send exactly one of text and html_base64")
        if self.charset is not None and self.html_base64 is None:
            raise ValueError("charset goes with html_base64 (a text is already decoded)")
        return self

    @property
    def is_page(self) -> bool:
        return self.html or self.html_base64 is not None


class DocumentFields(PageFields):
    metadata: Metadata | None = Field(None, description="Any JSON object, stored as is.")
    timestamp: Time | None = Field(
        None, description="The document's time (a publication time, say); default: now."
    )


class DocumentIn(DocumentFields, TimeRange):
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


class BatchIn(TimeRange):
    # Objects here; each is validated as a BatchDocument on its own by the route, so that
    # one bad document is refused at its position instead of costing the whole batch.
    documents: list[dict[str, Any]] = Field(
        min_length=1,
        json_schema_extra={"items": {"$ref": "#/components/schemas/BatchDocument"}},
        description="Documents, each as a single insert takes it (BatchDocument). One "
        "that is refused on its own gets an error at its position in `results`.",
    )
    on_duplicate: Literal["insert", "skip"] = "insert"


class DocumentPut(DocumentFields, TimeRange):
    pass


class PassageOut(BaseModel):
    """Code points [start, end) of the query (or the document inserted) and
    [match_start, match_end) of the matched document, in each text as sent."""

    start: int
    end: int
    match_start: int
    match_end: int


class MatchOut(BaseModel):
    id: str
    similarity: float
    hamming_distance: int
    methods: list[Literal["exact", "simhash", "minhash", "ngram", "passage"]]
    passages: list[PassageOut] | None = Field(
        None, description='With "passage" among the methods: the passages both texts hold.'
    )
    query_coverage: float | None = Field(
        None, description="The share of the query's text inside the passages."
    )
    match_coverage: float | None = Field(
        None, description="The share of the matched document's text inside the passages."
    )


class InsertOut(BaseModel):
    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: list[MatchOut]
    extracted: Extraction | None = Field(
        None,
        description='A page only: "main" if its main content was matched, "all" if its '
        "visible text was (the collection's html.extract, or the fallback).",
    )
    title: str | None = Field(
        None, description="A page only: its title (og:title, <title> or <h1>), if it has one."
    )
    contains: list[MatchOut] | None = Field(
        None,
        description="With passages on: earlier documents mostly (80%) inside this one.",
    )
    contained_in: list[MatchOut] | None = Field(
        None,
        description="With passages on: earlier documents that hold most (80%) of this one.",
    )


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
    timestamp: str = Field(description="The document's time, ISO 8601 in UTC.")
    cluster_id: str
    simhash: str
    text: str | None = Field(None, description="Present when the collection keeps texts.")


class SearchIn(PageFields, TimeRange):
    limit: int = Field(10, ge=1)
    min_similarity: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    max_distance: int | None = Field(None, ge=0)
    min_coverage: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description=MIN_COVERAGE_DESCRIPTION,
    )
    explain: bool = Field(
        False,
        description="Also list the documents the methods matched and a rule refused "
        "(`refused`, each with its reason): two reports of one template that state other "
        "figures (ngram.same_numbers), a MinHash candidate whose texts' exact Jaccard is "
        "under the threshold (minhash.exact). Costs a second search.",
    )


class RefusedOut(BaseModel):
    id: str
    similarity: float
    methods: list[Literal["exact", "simhash", "minhash", "ngram", "passage"]]
    reason: str = Field(description='Why it is not a match, e.g. "numbers differ: 1222 / 1627".')


class MatchesOut(BaseModel):
    matches: list[MatchOut]
    refused: list[RefusedOut] | None = Field(
        None, description="With explain: the matches a rule refused, best first."
    )


class ErrorOut(BaseModel):
    error: ErrorDetail
