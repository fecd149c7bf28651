"""The answers of the service as dataclasses, read from its JSON.

Readers ignore fields they do not know, so that a newer service (the contract is extended,
never broken) still works with this client.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from neardup_client._errors import BatchError

OnDuplicate = Literal["insert", "skip"]
# A document's time as the service takes it: ISO 8601 with a UTC offset or Z, Unix
# seconds, or an aware datetime.
TimeLike = str | int | float | datetime


def time_value(value: TimeLike) -> str | int | float:
    """A time for a JSON body or a query string."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime needs a time zone (datetime.now(UTC), say)")
        return value.isoformat()
    return value


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage both texts hold: code points ``[start, end)`` of the query (or of the
    document inserted) and ``[match_start, match_end)`` of the matched document, in each
    text as it was sent (Python string indexes)."""

    start: int
    end: int
    match_start: int
    match_end: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Passage:
        return cls(
            int(data["start"]), int(data["end"]), int(data["match_start"]), int(data["match_end"])
        )


@dataclass(frozen=True, slots=True)
class Match:
    """A stored document near the query: ``similarity`` (Jaccard, estimated by MinHash or
    exact for short texts), ``hamming_distance`` of the SimHash fingerprints, and
    ``methods``, the indexes that found it (exact, simhash, minhash, ngram, passage).
    With "passage" (collections with passages on): the ``passages`` both texts hold and
    the share of each text inside them (``query_coverage``, ``match_coverage``)."""

    id: str
    similarity: float
    hamming_distance: int
    methods: tuple[str, ...]
    passages: tuple[Passage, ...] = ()
    query_coverage: float | None = None
    match_coverage: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Match:
        query_coverage, match_coverage = data.get("query_coverage"), data.get("match_coverage")
        return cls(
            id=str(data["id"]),
            similarity=float(data["similarity"]),
            hamming_distance=int(data["hamming_distance"]),
            methods=tuple(str(method) for method in data["methods"]),
            passages=tuple(Passage.from_json(p) for p in data.get("passages") or ()),
            query_coverage=None if query_coverage is None else float(query_coverage),
            match_coverage=None if match_coverage is None else float(match_coverage),
        )


def _matches(data: Any) -> tuple[Match, ...]:
    return tuple(Match.from_json(match) for match in data)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A document the methods matched and a rule refused (``explain``): ``methods`` the
    ones whose match it refused, ``reason`` why ("numbers differ: 1627 / 1222": two
    reports of one template, the collection's ``ngram.same_numbers``)."""

    id: str
    similarity: float
    methods: tuple[str, ...]
    reason: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Refusal:
        methods = tuple(str(method) for method in data["methods"])
        return cls(str(data["id"]), float(data["similarity"]), methods, str(data["reason"]))


@dataclass(frozen=True, slots=True)
class Explained:
    """An explained search: its ``matches``, and what a rule ``refused``, best first."""

    matches: list[Match]
    refused: list[Refusal]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Explained:
        return cls(
            [Match.from_json(match) for match in data["matches"]],
            [Refusal.from_json(refusal) for refusal in data.get("refused") or ()],
        )


@dataclass(frozen=True, slots=True)
class InsertResult:
    """The answer to an insert. ``inserted`` is false for a duplicate skipped with
    ``on_duplicate="skip"`` and for a retry (the same id, text and metadata again).
    ``duplicate_of`` is the oldest live document of the best match's cluster, or None
    for a new story; ``cluster_id`` names the story. ``replaced`` is set by
    ``replace()`` only: True when a document of that id was replaced. For a page
    (``html=True``), ``extracted`` says which text of it was matched ("main": its main
    content, "all": its visible text) and ``title`` is its title, if it has one. In a
    collection with passages on, ``contains`` are the earlier documents mostly inside
    this one and ``contained_in`` those it is mostly inside (None elsewhere)."""

    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: tuple[Match, ...]
    replaced: bool | None = None
    extracted: str | None = None
    title: str | None = None
    contains: tuple[Match, ...] | None = None
    contained_in: tuple[Match, ...] | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.duplicate_of is not None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], replaced: bool | None = None) -> InsertResult:
        duplicate_of = data.get("duplicate_of")
        return cls(
            id=str(data["id"]),
            inserted=bool(data["inserted"]),
            duplicate_of=None if duplicate_of is None else str(duplicate_of),
            cluster_id=str(data["cluster_id"]),
            matches=_matches(data.get("matches", ())),
            replaced=replaced,
            extracted=data.get("extracted"),
            title=data.get("title"),
            contains=None if data.get("contains") is None else _matches(data["contains"]),
            contained_in=(
                None if data.get("contained_in") is None else _matches(data["contained_in"])
            ),
        )


@dataclass(frozen=True, slots=True)
class DocumentError:
    """A document of a batch refused on its own: nothing of it was stored. ``position``
    is its index in what was given to the batch helper (across chunks), ``id`` the id
    it was sent with, ``code`` the one it would get alone (``invalid_body``,
    ``invalid_document``, ``too_large``, ``document_exists``, ``duplicate_id``)."""

    position: int
    id: str | None
    code: str
    message: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any], position: int) -> DocumentError:
        error = data["error"]
        document_id = data.get("id")
        return cls(
            position=position,
            id=None if document_id is None else str(document_id),
            code=str(error["code"]),
            message=str(error["message"]),
        )


BatchItem = InsertResult | DocumentError


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One result per document given, in order: an InsertResult or a DocumentError."""

    results: tuple[BatchItem, ...]

    @property
    def inserted(self) -> list[InsertResult]:
        return [result for result in self.results if isinstance(result, InsertResult)]

    @property
    def errors(self) -> list[DocumentError]:
        return [result for result in self.results if isinstance(result, DocumentError)]

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> BatchResult:
        """Raise BatchError if any document was refused; else return self."""
        if self.errors:
            raise BatchError(self.errors)
        return self

    def __len__(self) -> int:
        return len(self.results)


@dataclass(frozen=True, slots=True)
class NewDocument:
    """A document to insert (batch helpers take these or plain dicts of the same keys)."""

    text: str
    id: str | None = None
    metadata: Mapping[str, Any] | None = None
    html: bool = False
    timestamp: TimeLike | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"text": self.text}
        if self.id is not None:
            body["id"] = self.id
        if self.metadata is not None:
            body["metadata"] = dict(self.metadata)
        if self.html:
            body["html"] = True
        if self.timestamp is not None:
            body["timestamp"] = time_value(self.timestamp)
        return body


@dataclass(frozen=True, slots=True)
class NewPage:
    """A web page as fetched, to insert: its ``body`` bytes (sent base64 as
    ``html_base64``), the ``charset`` of the Content-Type it came with (None: the service
    reads the page's own declaration, else UTF-8, else detects), its ``url`` (kept in the
    metadata as ``url``) and by default its id; ``timestamp`` the time it was fetched.
    ``neardup insert --warc`` and the Scrapy pipeline send pages as this."""

    body: bytes
    url: str | None = None
    charset: str | None = None
    id: str | None = None
    metadata: Mapping[str, Any] | None = None
    timestamp: TimeLike | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"html_base64": base64.b64encode(self.body).decode("ascii")}
        document_id = self.id if self.id is not None else self.url
        if document_id is not None:
            body["id"] = document_id
        if self.charset:
            body["charset"] = self.charset
        metadata = {} if self.url is None else {"url": self.url}
        metadata.update(self.metadata or {})
        if metadata:
            body["metadata"] = metadata
        if self.timestamp is not None:
            body["timestamp"] = time_value(self.timestamp)
        return body


@dataclass(frozen=True, slots=True)
class Document:
    """A stored document. ``text`` is None unless the collection keeps texts
    (``store_text``); ``simhash`` is 16 hex digits; ``created_at`` and ``timestamp`` (the
    document's own time, from services that have one) ISO 8601 in UTC."""

    id: str
    metadata: dict[str, Any] | None
    created_at: str
    cluster_id: str
    simhash: str
    text: str | None
    timestamp: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Document:
        metadata = data.get("metadata")
        text = data.get("text")
        timestamp = data.get("timestamp")
        return cls(
            id=str(data["id"]),
            metadata=None if metadata is None else dict(metadata),
            created_at=str(data["created_at"]),
            cluster_id=str(data["cluster_id"]),
            simhash=str(data["simhash"]),
            text=None if text is None else str(text),
            timestamp=None if timestamp is None else str(timestamp),
        )


@dataclass(frozen=True, slots=True)
class ShingleSettings:
    unit: str = "word"
    size: int = 5


@dataclass(frozen=True, slots=True)
class SimHashSettings:
    enabled: bool = True
    max_distance: int = 3


@dataclass(frozen=True, slots=True)
class MinHashSettings:
    """``exact``: candidates near the threshold decided by the exact Jaccard of the two
    texts' shingles, where the collection keeps its texts."""

    enabled: bool = True
    num_perm: int = 128
    threshold: float = 0.8
    exact: bool = True


DEFAULT_CJK_SIZE = 2


@dataclass(frozen=True, slots=True)
class NgramSettings:
    """``cjk_size``: q of the grams that start at a CJK character; None (collections made
    before the setting): ``size``."""

    enabled: bool = True
    max_chars: int = 100
    size: int = 3
    threshold: float = 0.7
    cjk_size: int | None = DEFAULT_CJK_SIZE


@dataclass(frozen=True, slots=True)
class PassageSettings:
    """Shared passages (a document inside another, with offsets): on unless
    ``enabled`` is False; k-grams of ``k`` tokens, a winnowing ``window``, passages of at
    least ``min_tokens`` tokens, fingerprints of more than ``max_rows`` documents ignored."""

    enabled: bool = True
    k: int = 5
    window: int = 8
    min_tokens: int = 10
    max_rows: int = 64


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """Documents older than ``max_age`` ("48h", "7d") or past the newest
    ``max_documents`` expire. None: no bound."""

    max_age: str | None = None
    max_documents: int | None = None


@dataclass(frozen=True, slots=True)
class LimitsSettings:
    """Past ``max_documents`` live documents an insert is refused (507)."""

    max_documents: int | None = None


def _known(kind: type[Any], data: Mapping[str, Any] | None) -> dict[str, Any]:
    names = set(kind.__dataclass_fields__)
    return {key: value for key, value in (data or {}).items() if key in names}


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


@dataclass(frozen=True, slots=True)
class CollectionSettings:
    """A collection's settings. The defaults here are the service's documented ones; to
    create a collection with only some settings changed, a partial dict
    (``{"store_text": True}``) leaves the rest to the service. ``match_window``,
    ``retention`` and ``limits`` (services with document times) are sent only when set."""

    shingle: ShingleSettings = field(default_factory=ShingleSettings)
    simhash: SimHashSettings = field(default_factory=SimHashSettings)
    minhash: MinHashSettings = field(default_factory=MinHashSettings)
    ngram: NgramSettings = field(default_factory=NgramSettings)
    passages: PassageSettings = field(default_factory=PassageSettings)
    store_text: bool = False
    match_window: str | None = None
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "shingle": {"unit": self.shingle.unit, "size": self.shingle.size},
                "simhash": {
                    "enabled": self.simhash.enabled,
                    "max_distance": self.simhash.max_distance,
                },
                "minhash": {
                    "enabled": self.minhash.enabled,
                    "num_perm": self.minhash.num_perm,
                    "threshold": self.minhash.threshold,
                },
                "ngram": {
                    "enabled": self.ngram.enabled,
                    "max_chars": self.ngram.max_chars,
                    "size": self.ngram.size,
                    "threshold": self.ngram.threshold,
                }
                # Sent only when not the default, so that a service from before the setting
                # still takes the defaults.
                | (
                    {}
                    if self.ngram.cjk_size == DEFAULT_CJK_SIZE
                    else {"cjk_size": self.ngram.cjk_size}
                ),
                "store_text": self.store_text,
            }
            | (
                # Sent only when not the defaults: a service from before the setting takes
                # the rest.
                {"passages": asdict(self.passages)} if self.passages != PassageSettings() else {}
            )
            | _set(
                {
                    "match_window": self.match_window,
                    "retention": _set(
                        {
                            "max_age": self.retention.max_age,
                            "max_documents": self.retention.max_documents,
                        }
                    )
                    or None,
                    "limits": _set({"max_documents": self.limits.max_documents}) or None,
                }
            )
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CollectionSettings:
        window = data.get("match_window")
        return cls(
            shingle=ShingleSettings(**_known(ShingleSettings, data.get("shingle"))),
            simhash=SimHashSettings(**_known(SimHashSettings, data.get("simhash"))),
            minhash=MinHashSettings(**_known(MinHashSettings, data.get("minhash"))),
            ngram=NgramSettings(**_known(NgramSettings, data.get("ngram"))),
            passages=PassageSettings(**_known(PassageSettings, data.get("passages"))),
            store_text=bool(data.get("store_text", False)),
            match_window=None if window is None else str(window),
            retention=RetentionSettings(**_known(RetentionSettings, data.get("retention"))),
            limits=LimitsSettings(**_known(LimitsSettings, data.get("limits"))),
        )


@dataclass(frozen=True, slots=True)
class CollectionStats:
    """Live documents, those that joined an earlier one's cluster, index merges since the
    start, bytes the indexes hold; from services with a retention, documents evicted
    since the start, expired ones not evicted yet and the oldest live document's time."""

    documents: int
    duplicates: int
    merges: int
    index_bytes: int
    evicted: int = 0
    expiring: int = 0
    oldest_timestamp: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CollectionStats:
        oldest = data.get("oldest_timestamp")
        return cls(
            documents=int(data["documents"]),
            duplicates=int(data["duplicates"]),
            merges=int(data["merges"]),
            index_bytes=int(data["index_bytes"]),
            evicted=int(data.get("evicted", 0)),
            expiring=int(data.get("expiring", 0)),
            oldest_timestamp=None if oldest is None else str(oldest),
        )


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """A collection with its settings and stats. ``created`` is set by
    ``create_collection()`` only: True for 201 (new), False for 200 (it existed with the
    same settings)."""

    name: str
    settings: CollectionSettings
    stats: CollectionStats
    created: bool | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], created: bool | None = None) -> CollectionInfo:
        return cls(
            name=str(data["name"]),
            settings=CollectionSettings.from_json(data["settings"]),
            stats=CollectionStats.from_json(data["stats"]),
            created=created,
        )


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample of the Prometheus text format: ``name{labels} value``."""

    name: str
    labels: dict[str, str]
    value: float


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_metrics(text: str) -> list[MetricSample]:
    """The samples of a Prometheus text exposition (comments and blank lines skipped)."""
    samples = []
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None or line.startswith("#"):
            continue
        name, labels, value = found.groups()
        parsed = {
            key: re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], raw)
            for key, raw in _LABEL.findall(labels or "")
        }
        samples.append(MetricSample(name, parsed, float(value)))
    return samples


@dataclass(frozen=True, slots=True)
class IndexHealth:
    """What /metrics knows of one collection's indexes: live documents, merges since the
    start, and per index (exact, simhash, minhash, ngram) the entries in the insert
    buffer not merged yet and the tombstones held until the next merge."""

    collection: str
    documents: int
    duplicates: int
    merges: int
    index_bytes: int
    unmerged_entries: dict[str, int]
    tombstones: dict[str, int]

    @classmethod
    def from_samples(cls, collection: str, samples: list[MetricSample]) -> IndexHealth:
        mine = [s for s in samples if s.labels.get("collection") == collection]
        value = {s.name: int(s.value) for s in mine if set(s.labels) == {"collection"}}
        per_index: dict[str, dict[str, int]] = {
            "neardup_index_unmerged_entries": {},
            "neardup_index_tombstones": {},
        }
        for sample in mine:
            if sample.name in per_index and "index" in sample.labels:
                per_index[sample.name][sample.labels["index"]] = int(sample.value)
        return cls(
            collection=collection,
            documents=value.get("neardup_documents", 0),
            duplicates=value.get("neardup_duplicates", 0),
            merges=value.get("neardup_merges", 0),
            index_bytes=value.get("neardup_index_bytes", 0),
            unmerged_entries=per_index["neardup_index_unmerged_entries"],
            tombstones=per_index["neardup_index_tombstones"],
        )


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored API key as the service shows it. ``key``, the secret, is set only in the
    answer of ``create_key()``: the service keeps its digest, never the key. Times are
    ISO 8601 (UTC)."""

    id: str
    name: str
    description: str
    actions: tuple[str, ...]
    collections: tuple[str, ...]
    expires_at: str | None
    created_at: str
    requests_per_second: float | None = None
    documents_per_second: float | None = None
    key: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApiKey:
        rate = data.get("rate") or {}
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            description=str(data.get("description") or ""),
            actions=tuple(data["actions"]),
            collections=tuple(data["collections"]),
            expires_at=data.get("expires_at"),
            created_at=str(data["created_at"]),
            requests_per_second=rate.get("requests_per_second"),
            documents_per_second=rate.get("documents_per_second"),
            key=data.get("key"),
        )
