"""What the service takes and answers: documents, queries, matches, results."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from app.core.hosts import NO_HOST, host_key
from app.core.methods import Method
from app.errors import InvalidParameter, NeardupError

OnDuplicate = Literal["insert", "skip"]
DEFAULT_COLLECTION = "default"  # exists from the start on every backend


class BackgroundObserver(Protocol):
    """Told of each piece of a backend's background work as it ends (the metrics)."""

    def record_merge(self, collection: str, seconds: float) -> None: ...

    def record_eviction(self, collection: str, documents: int, seconds: float) -> None:
        """``seconds``: how long the eviction held the collection's writes."""


class Unobserved:
    """The observer before one is given: background work is not reported."""

    def record_merge(self, collection: str, seconds: float) -> None:
        pass

    def record_eviction(self, collection: str, documents: int, seconds: float) -> None:
        pass


def new_document_id() -> str:
    """A random version-4 UUID as 32 hex digits, as ``uuid.uuid4().hex`` writes it, in a
    fraction of the time (uuid.UUID's constructor checks and converts, on every insert
    without an id; docs/journal.md, "Issue 11")."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def check_range(since: int | None, until: int | None) -> None:
    """A time range of an insert or a query (400 when it is empty by construction)."""
    if since is not None and until is not None and since > until:
        raise InvalidParameter("since must not be later than until")


@dataclass(frozen=True, slots=True)
class InsertOptions:
    """How an insert treats its documents, the same for each of them: ``on_duplicate``
    "skip" stores none that matches; ``replace`` replaces an existing id (PUT); ``since``
    and ``until`` (microseconds) limit its matches to documents timestamped in that
    range. Hashable: the single inserts gathered into one batch share their options."""

    on_duplicate: OnDuplicate = "insert"
    replace: bool = False
    since: int | None = None
    until: int | None = None

    def __post_init__(self) -> None:
        check_range(self.since, self.until)


PLAIN_INSERT = InsertOptions()

# An insert answers with its best matches only; a search asks for as many as it wants.
INSERT_MATCH_LIMIT = 10


@dataclass(frozen=True, slots=True)
class Match:
    id: str
    similarity: float
    hamming_distance: int
    methods: tuple[Method, ...]


@dataclass(frozen=True, slots=True)
class SharedPassage:
    """A passage both texts hold: code points [start, end) of the query (or of the
    document being inserted) and [match_start, match_end) of the matched document, each
    in its text as sent."""

    start: int
    end: int
    match_start: int
    match_end: int


@dataclass(frozen=True, slots=True)
class PassageMatch(Match):
    """A match with shared passages ("passage" among its methods): where they are, and
    the share of each text inside them (query_coverage: the query's)."""

    passages: tuple[SharedPassage, ...]
    query_coverage: float
    match_coverage: float


@dataclass(frozen=True, slots=True)
class InsertResult:
    id: str
    inserted: bool
    duplicate_of: str | None
    cluster_id: str
    matches: list[Match]
    replaced: bool = False
    # With passages on (None otherwise): earlier documents mostly inside this one, and
    # earlier documents this one is mostly inside (app/service/passages.py).
    contains: list[PassageMatch] | None = None
    contained_in: list[PassageMatch] | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """A document of an insert refused on its own: nothing of it was stored, and the
    other documents of its batch went on without it."""

    id: str | None
    error: NeardupError


@dataclass(frozen=True, slots=True)
class NewDocument:
    text: str
    id: str | None = None
    metadata: dict[str, Any] | None = None
    timestamp: int | None = None  # microseconds since the epoch; None: the insert time
    # Its host's key (app/core/hosts.py), where its page names it; else its metadata's url.
    host: int = NO_HOST

    def host_key(self) -> int:
        """Its host's key: the one given (a page's own URL), else its metadata's url's."""
        return self.host if self.host != NO_HOST else host_key(self.metadata)


@dataclass(frozen=True, slots=True)
class StoredDocument:
    id: str
    metadata: dict[str, Any] | None
    created_at: str
    cluster_id: str
    simhash: str
    text: str | None = None
    timestamp: str = ""  # ISO 8601, UTC


# A match by shared passages alone, by default, is a containment or a copy: its passages
# cover at least half of one of the two texts. A quote, a shared sentence of a press
# statement or a site's footer cover far less of either (docs/evaluation-passages.md);
# ``min_coverage: 0`` asks for them too. A story inside a roundup is covered ~100% on
# its side, so roundups stay found.
DEFAULT_MIN_COVERAGE = 0.5
MIN_COVERAGE_DESCRIPTION = (
    "Matches found by shared passages alone: the larger of query_coverage and "
    f"match_coverage at least this (default {DEFAULT_MIN_COVERAGE}: containments and "
    "copies; 0: every shared passage, quotes and shared sentences too)."
)


@dataclass(frozen=True, slots=True)
class Query:
    """How a search filters: Hamming distance at most ``max_distance`` (default the
    collection's k), similarity at least ``min_similarity`` (default: any that matched),
    timestamp from ``since`` to ``until`` (microseconds, both included; None: unbounded);
    a match found by its shared passages alone, a coverage (the larger of the two) at
    least ``min_coverage`` (0: every shared passage, a quote as much as a copy)."""

    limit: int = 10
    max_distance: int | None = None
    min_similarity: float | None = None
    since: int | None = None
    until: int | None = None
    min_coverage: float = DEFAULT_MIN_COVERAGE
    # False: the template rule of short texts set aside (ngram.same_numbers), so that an
    # explained search can name the matches it refused (app/service/explain.py).
    same_numbers: bool = True
    # The host of the searched page (app/core/hosts.py): its chrome is no evidence against
    # that host's pages.
    host: int = NO_HOST
    # False: MinHash decided by its estimate alone (minhash.exact set aside), for the same
    # reason.
    exact_minhash: bool = True


def iso_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
