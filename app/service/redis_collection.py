"""A collection kept in Redis (``NEARDUP_BACKEND=redis://...``): the process holds nothing.

Every document, fingerprint, index table, cluster and setting lives in Redis (the
documents and tables in a RedisStore, app/redis_store), so any number of processes serve
the same collection and each sees the others' acknowledged writes at once. The answers
are the embedded Collection's: the same fingerprints (app/core), the same match rule and
scores, the same retries, clusters and errors.

Per document, beside the store's fixed fields and signature, a JSON record:
``{"s": seq, "c": created_at, "k": cluster seq, "n": cluster name, "m": metadata, "t":
text}``. ``seq`` numbers a collection's inserts in order (one ``HINCRBY`` a batch): it is
what "older" means where the embedded service compares rows (the store's row numbers
are per row group, not in insert order). A cluster is named by its first document's
seq (``k``; ``n`` is that document's id, kept when it goes), and its members are a sorted
set by seq, ``{nd:<collection>:c<k>}``, so that ``duplicate_of`` (the oldest live member)
is its first member still held.

An insert (a batch), in round trips: the collection's settings (``HGET``), the ids
(lookup: retries and conflicts), the seqs, the search (2), the clusters' member sets, the
store's insert (3), the counters, and for the documents whose cluster's first document
is not known to be live, the member sets read and looked up (2). A process's inserts
into one collection are serialised by a lock, so that each matches the ones before it
as in the embedded service; inserts from other processes at the same moment do not see
each other until acknowledged (a near-duplicate pair sent at once to two processes may
start two clusters), and the store's functions keep ids unique across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson
import xxhash
from redis.exceptions import RedisError

from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints, fingerprint_nonempty
from app.core.types import Backlog, Rows
from app.errors import (
    DocumentExists,
    DuplicateId,
    InsufficientStorage,
    InvalidDocument,
    InvalidParameter,
    NeardupError,
    StorageUnavailable,
    UnknownDocument,
)
from app.redis_store.grams import GramTable
from app.redis_store.layout import Layout
from app.redis_store.store import Floats, NewDocuments, RedisStore, RowData, Status, Written
from app.redis_store.wire import Command, ReplicasBehind
from app.service.coalesce import Options, SingleInserts
from app.service.indexes import (
    DocumentIndex,
    ExactMatcher,
    MinHashMatcher,
    NgramMatcher,
    SimHashMatcher,
)
from app.service.matching import EXACT, METHODS_OF_BITS, MINHASH, NGRAM, SIMHASH
from app.service.redis_ngram import RedisNgram
from app.service.redis_retention import (
    EXPIRE,
    NO_RETENTION,
    Mark,
    cutoff_of,
    parse_member,
    time_bytes,
    time_member,
)
from app.service.times import MICROSECONDS, Clock, iso_time_us, now_us
from app.service.types import (
    INSERT_MATCH_LIMIT,
    InsertResult,
    Match,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    StoredDocument,
    iso_time,
)

# Members of a cluster read a page at a time when its first document is gone.
MEMBER_PAGE = 32


class Failures:
    """Redis failures by kind (``redis_error``, ``replicas_behind``), for /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"redis_error": 0, "replicas_behind": 0}

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1


@contextlib.contextmanager
def storage_errors(failures: Failures | None = None) -> Iterator[None]:
    """Redis out of reach, an error reply, or replicas behind: 503 storage_unavailable.
    What a write did before it failed stays; a retry of the same request is safe."""
    try:
        yield
    except ReplicasBehind as error:
        if failures is not None:
            failures.add("replicas_behind")
        raise StorageUnavailable(f"Redis replicas did not confirm the write: {error}") from error
    except RedisError as error:
        if failures is not None:
            failures.add("redis_error")
        raise StorageUnavailable(f"Redis: {error}") from error


@dataclass(frozen=True)
class Resolved:
    """A collection as stored now: its settings and where its keys are."""

    name: str
    key: str  # the collection's name in its Redis keys: name~epoch (a new one per create)
    config: CollectionConfig
    layout: Layout
    matchers: list[DocumentIndex] = field(compare=False)
    ngram: RedisNgram | None = field(compare=False)
    # Had a retention once: what it expired stays expired (the mark is kept and read)
    # even when the retention is gone.
    marked: bool = False

    @staticmethod
    def of(
        name: str, key: str, config: CollectionConfig, namespace: str, marked: bool = False
    ) -> Resolved:
        layout = Layout(
            key,
            namespace=namespace,
            simhash=config.simhash.enabled,
            max_distance=config.simhash.max_distance,
            minhash=config.minhash.enabled,
            num_perm=config.minhash.num_perm,
            threshold=config.minhash.threshold,
        )
        matchers: list[DocumentIndex] = [ExactMatcher()]
        if config.simhash.enabled:
            matchers.append(SimHashMatcher(config.simhash.max_distance))
        if config.minhash.enabled:
            matchers.append(MinHashMatcher(config.minhash.threshold, config.minhash.num_perm))
        ngram = None
        if config.ngram.enabled:
            settings = config.ngram
            matchers.append(NgramMatcher(settings.threshold, settings.size, settings.cjk_size))
            # Beside the store's tables: the same hash tags, so the same slots.
            table = GramTable(f"{{{namespace}:{key}:t".encode(), layout.shard_bits)
            ngram = RedisNgram(settings, table)
        return Resolved(name, key, config, layout, matchers, ngram, marked)

    @property
    def num_perm(self) -> int:
        return self.config.minhash.num_perm if self.config.minhash.enabled else 0

    def counters_key(self) -> bytes:
        """A hash beside the layout's (same slot): seq, duplicates."""
        return self.layout.meta_key() + b"c"

    def time_key(self) -> bytes:
        """The time index (app/service/redis_retention.py), in the counters' slot."""
        return self.layout.meta_key() + b"t"

    @property
    def retains(self) -> bool:
        """Whether reads and writes must heed a retention mark."""
        return self.config.retention.enabled or self.marked

    def members_key(self, cluster: int) -> bytes:
        return f"{{{self.layout.namespace}:{self.key}:c{cluster}}}".encode()

    def retry_methods(self, record: _Record) -> tuple[Any, ...]:
        """Every index that holds a document (the n-gram index: short texts only)."""
        bits = EXACT
        if self.config.simhash.enabled:
            bits |= SIMHASH
        if self.config.minhash.enabled:
            bits |= MINHASH
        if self.ngram is not None and record.short is not None:
            bits |= NGRAM
        return METHODS_OF_BITS[bits]


class Backend(Protocol):
    """What a RedisCollection asks of its registry."""

    clock: Clock
    failures: Failures

    def resolve(self, name: str) -> Resolved:
        """The collection's settings now (UnknownCollection if it is not stored)."""

    def cached(self, name: str) -> tuple[bytes, Resolved] | None:
        """The settings this process read last (as stored, and parsed), if any."""

    def settings_command(self, name: str) -> Command:
        """The read of the collection's settings (to send with other commands)."""

    def store(self, resolved: Resolved) -> RedisStore:
        """This thread's store of the collection."""


@dataclass(frozen=True, slots=True)
class _Record:
    seq: int
    created: float
    cluster: int
    cluster_name: str
    metadata: dict[str, Any] | None
    text: str | None
    short: str | None = None  # the normalised text, when the n-gram index holds it

    def pack(self) -> bytes:
        return orjson.dumps(
            {
                "s": self.seq,
                "c": self.created,
                "k": self.cluster,
                "n": self.cluster_name,
                "m": self.metadata,
                "t": self.text,
                "q": self.short,
            }
        )

    @staticmethod
    def unpack(raw: bytes) -> _Record:
        data = orjson.loads(raw)
        return _Record(
            data["s"], data["c"], data["k"], data["n"], data["m"], data["t"], data.get("q")
        )


class _Held:
    """Rows a read returned, with their records parsed on demand."""

    def __init__(self, data: RowData) -> None:
        self.data = data
        self._records: dict[int, _Record] = {}

    def record(self, at: int) -> _Record:
        record = self._records.get(at)
        if record is None:
            record = self._records[at] = _Record.unpack(self.data.records[at])
        return record

    def seqs(self, at: Rows) -> Rows:
        return np.array([self.record(i).seq for i in at.tolist()], dtype=np.int64)


def _joined(first: RowData, second: RowData) -> RowData:
    """The rows of two reads together, sorted by row (a row in both: the first's)."""
    rows = np.concatenate([first.rows, second.rows])
    _, unique = np.unique(rows, return_index=True)
    ids, records = first.ids + second.ids, first.records + second.records
    return RowData(
        rows[unique],
        np.concatenate([first.simhash, second.simhash])[unique],
        np.concatenate([first.exact, second.exact])[unique],
        np.concatenate([first.timestamps, second.timestamps])[unique],
        np.concatenate([first.signatures, second.signatures])[unique],
        [ids[i] for i in unique.tolist()],
        [records[i] for i in unique.tolist()],
    )


def _digest(exact: npt.NDArray[np.uint64], metadata: dict[str, Any] | None) -> bytes:
    """What decides a retry: the normalised text's hash and the metadata."""
    meta = orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)
    return exact.astype(">u8").tobytes() + xxhash.xxh3_64_digest(meta)


def _check_range(since: int | None, until: int | None) -> None:
    if since is not None and until is not None and since > until:
        raise InvalidParameter("since must not be later than until")


def _in_range(stamps: npt.NDArray[np.int64], since: int | None, until: int | None) -> Any:
    keep = np.ones(len(stamps), dtype=np.bool_)
    if since is not None:
        keep &= stamps >= since
    if until is not None:
        keep &= stamps <= until
    return keep


@dataclass(slots=True)
class _Scored:
    """Matches as columns: query position, key (a row of the store, or a batch's
    document), method bits, similarity, Hamming distance, age (seq: lower is older)."""

    positions: Rows
    keys: Rows
    bits: npt.NDArray[np.uint8]
    similarity: npt.NDArray[np.float64]
    distances: Rows
    ages: Rows

    @staticmethod
    def empty() -> _Scored:
        none = np.zeros(0, dtype=np.int64)
        return _Scored(none, none, np.zeros(0, np.uint8), np.zeros(0), none, none)

    def sorted(self) -> _Scored:
        """By position, then best first: similarity, nearer SimHash, older."""
        order = np.lexsort((self.ages, self.distances, -self.similarity, self.positions))
        return _Scored(
            self.positions[order],
            self.keys[order],
            self.bits[order],
            self.similarity[order],
            self.distances[order],
            self.ages[order],
        )

    def spans(self, count: int) -> list[tuple[int, int]]:
        bounds = np.searchsorted(self.positions, np.arange(count + 1), "left").tolist()
        return list(itertools.pairwise(bounds))


# A method's pairs: (positions, keys, bit, exact similarity of each pair or None).
Part = tuple[Rows, Rows, int, "npt.NDArray[np.float64] | None"]


def _combined(parts: list[Part]) -> tuple[Rows, Rows, npt.NDArray[np.uint8], Floats]:
    """(positions, keys, method bits, exact similarity or NaN): each (position, key)
    once, with every method's bit (as Collection's _combined)."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.uint8), np.zeros(0)
    positions = np.concatenate([p for p, _, _, _ in parts]).astype(np.int64)
    keys = np.concatenate([k for _, k, _, _ in parts]).astype(np.int64)
    bits = np.concatenate([np.full(len(k), bit, np.uint8) for _, k, bit, _ in parts])
    known = np.concatenate([np.full(len(k), np.nan) if s is None else s for _, k, _, s in parts])
    unique, inverse = np.unique((positions << 32) | keys, return_inverse=True)
    methods = np.zeros(len(unique), dtype=np.uint8)
    np.bitwise_or.at(methods, inverse, bits)
    exact_similarity = np.full(len(unique), np.nan)
    np.fmax.at(exact_similarity, inverse, known)  # fmax keeps a number over NaN
    return unique >> 32, unique & 0xFFFFFFFF, methods, exact_similarity


def _scored(
    resolved: Resolved,
    queries: Fingerprints,
    positions: Rows,
    keys: Rows,
    bits: npt.NDArray[np.uint8],
    simhashes: npt.NDArray[np.uint64],
    signatures: npt.NDArray[np.uint32],
    ages: Rows,
    min_similarity: float | None,
    exact_similarity: Floats,
) -> _Scored:
    """The embedded service's scores (Collection._scored): the MinHash estimate, or the
    n-gram index's exact Jaccard where it found the pair and that is higher; with
    MinHash off, that Jaccard where there is one, else 1 - distance / 64; 6 decimals."""
    distances = np.bitwise_count(simhashes ^ queries.simhash[positions]).astype(np.int64)
    num_perm = resolved.num_perm
    if num_perm:
        agree = np.count_nonzero(signatures == queries.minhash[positions], axis=1)
        similarity = np.fmax(agree / num_perm, exact_similarity)
    else:
        estimate = 1.0 - distances / 64.0
        similarity = np.where(np.isnan(exact_similarity), estimate, exact_similarity)
    similarity = np.round(similarity, 6)
    scored = _Scored(positions, keys, bits, similarity, distances, ages)
    if min_similarity is not None:
        keep = similarity >= min_similarity
        scored = _Scored(
            positions[keep], keys[keep], bits[keep], similarity[keep], distances[keep], ages[keep]
        )
    return scored.sorted()


@dataclass(slots=True)
class _Pending:
    """A document of a batch that will be stored."""

    position: int
    seq: int
    cluster: int
    cluster_name: str


class RedisCollection:
    """One collection over Redis, as the API uses it (ServiceCollection). Holds no data:
    a handle that reads the collection's settings at every call, so that a collection
    created, changed or dropped by another process is seen at once."""

    blocking = True  # every read is a round trip: the async handlers use the thread pool
    eviction_seconds = 0.0  # no retention on this backend

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self._backend = backend
        self._write_lock = threading.Lock()
        self._single_inserts = SingleInserts(self._insert_many_async)

    @property
    def config(self) -> CollectionConfig:
        with storage_errors(self._backend.failures):
            return self._backend.resolve(self.name).config

    def _open(self) -> tuple[Resolved, RedisStore]:
        resolved = self._backend.resolve(self.name)
        return resolved, self._backend.store(resolved)

    # ------------------------------------------------------------------ reads

    def get(self, document_id: str) -> StoredDocument:
        with storage_errors(self._backend.failures):
            resolved, store = self._open()
            held, at = self._held(store, document_id, self._mark(resolved, store))
        record = held.record(at)
        return StoredDocument(
            id=document_id,
            metadata=record.metadata,
            created_at=iso_time(record.created),
            cluster_id=record.cluster_name,
            simhash=f"{int(held.data.simhash[at]):016x}",
            text=record.text,
            timestamp=iso_time_us(int(held.data.timestamps[at])),
        )

    def _held(self, store: RedisStore, document_id: str, mark: Mark) -> tuple[_Held, int]:
        """The stored document with this id, if it is visible (not expired)."""
        rows, data = store.lookup([document_id])
        if rows[0] < 0:
            raise UnknownDocument(self.name, document_id)
        held, at = _Held(data), int(data.index(rows)[0])
        if not mark.visible(int(data.timestamps[at]), held.record(at).seq):
            raise UnknownDocument(self.name, document_id)  # expired
        return held, at

    def _mark(self, resolved: Resolved, store: RedisStore) -> Mark:
        """What the retention expired (the mark as stored, max_age by the clock): a
        read's view. One round trip, for collections with a retention only."""
        if not resolved.retains:
            return NO_RETENTION
        (member,) = store.wire.send([("HGET", resolved.counters_key(), "mark")])
        return Mark.of(member, self._cutoff(resolved))

    def _cutoff(self, resolved: Resolved) -> int | None:
        return cutoff_of(resolved.config.retention.max_age_us, self.clock_us())

    def expire(self, resolved: Resolved, store: RedisStore) -> Mark:
        """Move the mark up to what the retention expires now (atomic in Redis: every
        process agrees), and answer it with the count of documents held. One round trip,
        for collections with a retention or a limit."""
        if not resolved.retains and resolved.config.limits.max_documents is None:
            return NO_RETENTION
        cutoff = self._cutoff(resolved)
        kept = resolved.config.retention.max_documents or 0
        ((member, held),) = store.wire.send(
            [
                (
                    "EVAL",
                    EXPIRE,
                    2,
                    resolved.counters_key(),
                    resolved.time_key(),
                    b"" if cutoff is None else time_bytes(cutoff),
                    kept,
                )
            ],
            durable=True,
        )
        return Mark.of(member, cutoff, int(held))

    def search(self, text: str, query: Query, *, html: bool = False) -> list[Match]:
        """Documents matching a text, best first; nothing is stored. Two round trips: the
        settings this process last read are used, and read again in the search's first
        round trip; if they changed meanwhile (the collection was dropped, or dropped and
        created again), the search is made again on the settings read."""
        with storage_errors(self._backend.failures):
            known = self._backend.cached(self.name)
            if known is not None:
                raw, resolved = known
                with contextlib.suppress(InvalidParameter):  # judged on fresh settings
                    self._validate(resolved, query)
                    fingerprints = self._fingerprint(resolved, [text], html)
                    scored, held, (now,) = self._match_store(
                        resolved,
                        self._backend.store(resolved),
                        fingerprints,
                        query,
                        also=[self._backend.settings_command(self.name)],
                        read_mark=True,
                    )
                    if now == raw:
                        return self._matches(scored, held, (0, len(scored.keys)), query.limit)
            resolved, store = self._open()
            self._validate(resolved, query)
            fingerprints = self._fingerprint(resolved, [text], html)
            scored, held, _ = self._match_store(
                resolved, store, fingerprints, query, read_mark=True
            )
        return self._matches(scored, held, (0, len(scored.keys)), query.limit)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded."""
        with storage_errors(self._backend.failures):
            resolved, store = self._open()
            self._validate(resolved, query)
            mark = self._mark(resolved, store)
            own, at = self._held(store, document_id, mark)
            data = own.data
            fingerprints = Fingerprints(
                data.simhash[at : at + 1],
                data.signatures[at : at + 1, : resolved.num_perm],
                data.exact[at : at + 1],
                [own.record(at).short] if resolved.ngram is not None else None,
            )
            exclude = data.rows[at : at + 1]
            scored, held, _ = self._match_store(
                resolved, store, fingerprints, query, exclude, mark=mark
            )
        return self._matches(scored, held, (0, len(scored.keys)), query.limit)

    def _validate(self, resolved: Resolved, query: Query) -> None:
        k = resolved.config.simhash.max_distance
        if query.max_distance is not None and not 0 <= query.max_distance <= k:
            raise InvalidParameter(
                f"max_distance must be between 0 and the collection's max_distance {k}, "
                f"not {query.max_distance}"
            )
        if query.min_similarity is not None and not 0.0 <= query.min_similarity <= 1.0:
            raise InvalidParameter(f"min_similarity must be 0 to 1, not {query.min_similarity}")
        if query.limit < 1:
            raise InvalidParameter(f"limit must be at least 1, not {query.limit}")
        _check_range(query.since, query.until)

    def stats(self) -> dict[str, Any]:
        """Documents: the store's count (a round trip over its row groups), or with a
        retention the time index's entries above the mark (the retention applied
        first, as in the embedded service); duplicates and evicted: counters the writers
        and evictors keep (over every process); expiring: entries at or below the mark;
        the oldest timestamp: the time index's first entry above the mark. No merges."""
        with storage_errors(self._backend.failures):
            resolved, store = self._open()
            mark = self.expire(resolved, store)
            member = mark.member if mark.member else None
            above = b"(" + member if member else b"-"
            time_key = resolved.time_key()
            commands: list[Command] = [
                ("HMGET", resolved.counters_key(), "duplicates", "evicted"),
                ("ZRANGE", time_key, above, b"+", "BYLEX", "LIMIT", 0, 1),
            ]
            if member:
                commands += [
                    ("ZLEXCOUNT", time_key, above, b"+"),
                    ("ZLEXCOUNT", time_key, b"-", b"[" + member),
                ]
            counters, first, *counts = store.wire.send(commands)
            documents = int(counts[0]) if member else store.count()
        oldest = parse_member(first[0])[0] if first else None
        return {
            "documents": documents,
            "duplicates": max(0, int(counters[0] or 0)),
            "merges": 0,
            "index_bytes": 0,
            "evicted": int(counters[1] or 0),
            "expiring": int(counts[1]) if member else 0,
            "oldest_timestamp": None if oldest is None else iso_time_us(oldest),
            "oldest_seconds": None if oldest is None else oldest / MICROSECONDS,
        }

    def backlogs(self) -> dict[str, Backlog]:
        """Per index: Redis's sorted sets take every entry at once, so no buffer and no
        tombstones."""
        with storage_errors(self._backend.failures):
            resolved = self._backend.resolve(self.name)
        return {matcher.name: Backlog(0, 0) for matcher in resolved.matchers}

    # ------------------------------------------------------------------ matching

    def _fingerprint(self, resolved: Resolved, texts: Sequence[str], html: bool) -> Fingerprints:
        fingerprints, kept = self._fingerprint_nonempty(resolved, texts, html)
        if len(kept) < len(texts):
            raise InvalidDocument("text is empty after normalisation")
        return fingerprints

    def _fingerprint_nonempty(
        self, resolved: Resolved, texts: Sequence[str], html: bool
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        config = resolved.config
        fingerprints, kept = fingerprint_nonempty(
            list(texts), config.fingerprint_params, html=html, short_chars=config.short_chars
        )
        if not resolved.num_perm:
            fingerprints = Fingerprints(
                fingerprints.simhash,
                fingerprints.minhash[:, :0],
                fingerprints.exact,
                fingerprints.shorts,
            )
        return fingerprints, kept

    def _match_store(
        self,
        resolved: Resolved,
        store: RedisStore,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        also: Sequence[Command] = (),
        stamps: Rows | None = None,
        mark: Mark = NO_RETENTION,
        read_mark: bool = False,
    ) -> tuple[_Scored, _Held, list[Any]]:
        """Every visible stored document (``mark``, or with ``read_mark`` the mark read in
        the first round trip) matching each of a batch of documents, by any method (two
        round trips; a third for short texts found by the n-gram index alone), within
        since / until, and with ``stamps`` (the times of a batch being inserted) within
        the collection's match window of each, scored and sorted best first. The
        replies to ``also`` (sent in the first round trip) come last."""
        ngram = resolved.ngram
        probes = ngram.probes(fingerprints.shorts) if ngram is not None else None
        probing = probes.commands if probes is not None else []
        read_mark = read_mark and resolved.retains
        reading: list[Command] = [("HGET", resolved.counters_key(), "mark")] if read_mark else []
        found = store.search(
            fingerprints.simhash,
            fingerprints.minhash if resolved.num_perm else None,
            fingerprints.exact,
            max_distance=query.max_distance,
            threshold=query.min_similarity,
            also=[*also, *reading, *probing],
        )
        if read_mark:
            mark = Mark.of(found.also[len(also)], self._cutoff(resolved))
        also_replies = found.also[: len(also)]
        found = dataclasses.replace(found, also=found.also[len(also) + len(reading) :])
        data = found.rows
        parts: list[Part] = [
            (found.exact.positions, found.exact.rows, EXACT, None),
            (found.simhash.positions, found.simhash.rows, SIMHASH, None),
            (found.minhash.positions, found.minhash.rows, MINHASH, None),
        ]
        if ngram is not None and probes is not None and probes.commands:
            positions, rows = ngram.candidates(probes, found.also)
            missing = np.setdiff1d(rows, data.rows)
            if len(missing):  # found by the n-gram index alone: their records now
                data = _joined(data, store.rows(missing))
            live = np.isin(rows, data.rows)
            positions, rows = positions[live], rows[live]
            held = _Held(data)
            texts = [held.record(i).short for i in data.index(rows).tolist()]
            bar = max(ngram.threshold, query.min_similarity or 0.0)
            positions, rows, similarity = ngram.verified(probes, positions, rows, texts, bar)
            parts.append((positions, rows, NGRAM, similarity))
        held = _Held(data)
        positions, rows, bits, exact_similarity = _combined([p for p in parts if len(p[1])])
        keep = np.ones(len(rows), dtype=np.bool_)
        if exclude is not None:
            keep &= rows != exclude[positions]
        at = data.index(rows)
        if mark is not NO_RETENTION:
            keep &= mark.visible_many(data.timestamps[at], held.seqs(at))
        keep &= _in_range(data.timestamps[at], query.since, query.until)
        window = resolved.config.match_window_us
        if stamps is not None and window is not None:
            keep &= np.abs(data.timestamps[at] - stamps[positions]) <= window
        positions, rows, bits, at = positions[keep], rows[keep], bits[keep], at[keep]
        scored = _scored(
            resolved,
            fingerprints,
            positions,
            rows,
            bits,
            data.simhash[at],
            data.signatures[at],
            held.seqs(at),
            query.min_similarity,
            exact_similarity[keep],
        )
        return scored, held, also_replies

    def _matches(
        self, scored: _Scored, held: _Held, span: tuple[int, int], limit: int
    ) -> list[Match]:
        start, end = span[0], min(span[1], span[0] + limit)
        if start >= end:
            return []
        at = held.data.index(scored.keys[start:end])
        return [
            Match(held.data.ids[i], similarity, distance, METHODS_OF_BITS[bits])
            for i, similarity, distance, bits in zip(
                at.tolist(),
                scored.similarity[start:end].tolist(),
                scored.distances[start:end].tolist(),
                scored.bits[start:end].tolist(),
                strict=True,
            )
        ]

    def _match_within(
        self, resolved: Resolved, fingerprints: Fingerprints, stamps: Rows, query: Query
    ) -> _Scored:
        """(later, earlier) documents of one batch matching by the indexes' own rules,
        the earlier within since / until and the match window of the later: a batch
        answers as one-by-one inserts would."""
        parts: list[Part] = []
        for matcher in resolved.matchers:
            pairs = matcher.pairs_within(fingerprints)
            parts.append((pairs.positions, pairs.rows, matcher.bit, pairs.similarity))
        later, earlier, bits, exact_similarity = _combined([p for p in parts if len(p[1])])
        keep = _in_range(stamps[earlier], query.since, query.until)
        window = resolved.config.match_window_us
        if window is not None:
            keep &= np.abs(stamps[later] - stamps[earlier]) <= window
        later, earlier, bits = later[keep], earlier[keep], bits[keep]
        return _scored(
            resolved,
            fingerprints,
            later,
            earlier,
            bits,
            fingerprints.simhash[earlier],
            fingerprints.minhash[earlier],
            earlier,  # within a batch, the earlier position is the older
            None,
            exact_similarity[keep],
        )

    # ------------------------------------------------------------------ writes

    def insert(
        self,
        documents: Sequence[NewDocument],
        on_duplicate: OnDuplicate = "insert",
        *,
        replace: bool = False,
        html: bool = False,
        since: int | None = None,
        until: int | None = None,
    ) -> list[InsertResult | Refused]:
        """Insert documents in order, as Collection.insert does (the same answers, the
        same refusals at their positions). Answers once Redis has every write (and, with
        NEARDUP_REDIS_WAIT_REPLICAS, the replicas); a Redis failure is 503 and a retry
        of the request finishes what it started."""
        _check_range(since, until)
        with storage_errors(self._backend.failures):
            resolved, store = self._open()
            with self._write_lock:
                return _Insertion(self, resolved, store, documents, html).run(
                    on_duplicate, replace, since, until
                )

    async def insert_async(
        self,
        document: NewDocument,
        on_duplicate: OnDuplicate = "insert",
        *,
        html: bool = False,
        since: int | None = None,
        until: int | None = None,
    ) -> InsertResult | Refused:
        """One document; the single inserts of one turn of the event loop go in together
        as one batch (app/service/coalesce.py), in the thread pool."""
        _check_range(since, until)
        return await self._single_inserts.insert(document, (on_duplicate, html, since, until))

    async def _insert_many_async(
        self, documents: list[NewDocument], options: Options
    ) -> list[InsertResult | Refused]:
        on_duplicate, html, since, until = options
        return await asyncio.to_thread(
            self.insert, documents, on_duplicate, html=html, since=since, until=until
        )

    def delete(self, document_id: str) -> None:
        with storage_errors(self._backend.failures):
            resolved, store = self._open()
            held, at = self._held(store, document_id, self.expire(resolved, store))
            record = held.record(at)
            if store.remove([document_id])[0] < 0:
                raise UnknownDocument(self.name, document_id)  # removed meanwhile
            stamp = int(held.data.timestamps[at])
            commands: list[Command] = [
                ("ZREM", resolved.members_key(record.cluster), document_id),
                ("ZREM", resolved.time_key(), time_member(stamp, record.seq, document_id)),
            ]
            if resolved.ngram is not None and record.short is not None:
                row = held.data.rows[at : at + 1]
                commands += resolved.ngram.writes("ZREM", [record.short], row)
            if record.cluster != record.seq:
                commands.append(("HINCRBY", resolved.counters_key(), "duplicates", -1))
            store.wire.send(commands, durable=True)

    def clock_us(self) -> int:
        return now_us(self._backend.clock)

    def evict(self, resolved: Resolved, store: RedisStore, members: list[bytes]) -> int:
        """Remove the documents of expired time index entries: those whose record's
        seq is the entry's (an id stored again since is another document); then the
        entries, and what each document has beside its fields: its cluster membership,
        its n-gram entries, the counters. Returns the documents removed."""
        if not members:
            return 0
        entries = [parse_member(member) for member in members]
        ids = [document_id for _, _, document_id in entries]
        rows, data = store.lookup(ids)
        held = _Held(data)
        doomed: list[tuple[str, _Record, int]] = []
        for (_, seq, document_id), row in zip(entries, rows.tolist(), strict=True):
            if row >= 0:
                record = held.record(int(data.index(np.array([row]))[0]))
                if record.seq == seq:
                    doomed.append((document_id, record, row))
        removed = store.remove([d[0] for d in doomed]) if doomed else np.zeros(0, np.int64)
        commands: list[Command] = [("ZREM", resolved.time_key(), *members)]
        evicted = joined = 0
        for (document_id, record, row), gone in zip(doomed, removed.tolist(), strict=True):
            if gone != row:
                continue  # removed, or stored again, meanwhile
            evicted += 1
            joined += record.cluster != record.seq
            commands.append(("ZREM", resolved.members_key(record.cluster), document_id))
            if resolved.ngram is not None and record.short is not None:
                commands += resolved.ngram.writes("ZREM", [record.short], np.array([row]))
        counters = resolved.counters_key()
        commands.append(("HINCRBY", counters, "evicted", evicted))
        commands.append(("HINCRBY", counters, "duplicates", -joined))
        store.wire.send(commands, durable=True)
        return evicted


class _Insertion:
    """One insert call: refusals, retries, matching, clusters, the writes, the answers."""

    def __init__(
        self,
        collection: RedisCollection,
        resolved: Resolved,
        store: RedisStore,
        documents: Sequence[NewDocument],
        html: bool,
    ) -> None:
        self.collection = collection
        self.resolved = resolved
        self.store = store
        self.documents = documents
        self.ids = [document.id or uuid.uuid4().hex for document in documents]
        self.fingerprints, kept = collection._fingerprint_nonempty(
            resolved, [document.text for document in documents], html
        )
        self.now = collection.clock_us()
        self.stamps = np.array(
            [self.now if d.timestamp is None else d.timestamp for d in documents], dtype=np.int64
        )
        self.fingerprint_at = np.full(len(documents), -1, dtype=np.int64)
        self.fingerprint_at[kept] = np.arange(len(kept))
        self.results: list[InsertResult | Refused | None] = [None] * len(documents)
        self.refused: dict[int, NeardupError] = {}
        # Position -> (cluster, its name, whether its first document is known live), for
        # the answers with matches: their duplicate_of is found once everything is written.
        self.clusters: dict[int, tuple[int, str, bool]] = {}
        # Position -> the record of the document a replacement replaces, and its time.
        self.old_records: dict[int, _Record] = {}
        self.old_times: dict[int, int] = {}
        self.mark = NO_RETENTION  # what the retention expired when the insert began

    def run(
        self, on_duplicate: OnDuplicate, replace: bool, since: int | None, until: int | None
    ) -> list[InsertResult | Refused]:
        first_position: dict[str, int] = {}
        for position, document_id in enumerate(self.ids):
            if self.fingerprint_at[position] < 0:
                self.refused[position] = InvalidDocument("text is empty after normalisation")
            elif document_id in first_position:
                self.refused[position] = DuplicateId(document_id, first_position[document_id])
            else:
                first_position[document_id] = position
        candidates = [p for p in range(len(self.ids)) if p not in self.refused]
        self.mark = self.collection.expire(self.resolved, self.store)
        old_rows, retried = self._held_ids(candidates, replace)
        accepted = [p for p in candidates if p not in retried and p not in self.refused]
        pending: list[_Pending] = []
        if accepted:
            query = Query(limit=INSERT_MATCH_LIMIT, since=since, until=until)
            pending = self._match(accepted, old_rows, on_duplicate, query)
        self._write(pending, retried, replace)
        if pending and self.resolved.retains:
            # The count is applied after each request: the batch was matched against
            # the documents held before it and each other.
            self.collection.expire(self.resolved, self.store)
        for position, error in self.refused.items():
            given = self.documents[position].id
            self.results[position] = Refused(self.ids[position] if given else None, error)
        return [result for result in self.results if result is not None]

    def _exact(self, position: int) -> npt.NDArray[np.uint64]:
        exact: npt.NDArray[np.uint64] = self.fingerprints.exact[self.fingerprint_at[position]]
        return exact

    def _held_ids(
        self, candidates: list[int], replace: bool
    ) -> tuple[dict[int, int], dict[int, _Record]]:
        """(position -> row held under its id, for a replacement), (position -> stored
        record of the documents sent again: retries); conflicts are refused."""
        if not candidates:
            return {}, {}
        rows, data = self.store.lookup([self.ids[p] for p in candidates])
        held = _Held(data)
        old_rows: dict[int, int] = {}
        retried: dict[int, _Record] = {}
        expired: list[bytes] = []
        at_of = data.index(rows[rows >= 0])
        for position, at in zip(
            [p for p, row in zip(candidates, rows.tolist(), strict=True) if row >= 0],
            at_of.tolist(),
            strict=True,
        ):
            record = held.record(at)
            stamp = int(data.timestamps[at])
            if not self.mark.visible(stamp, record.seq):
                # An expired document's id is free again: evicted now, before the insert.
                expired.append(time_member(stamp, record.seq, self.ids[position]))
                continue
            if replace:
                old_rows[position] = int(data.rows[at])
                self.old_records[position] = record
                self.old_times[position] = stamp
                continue
            same = bool((data.exact[at] == self._exact(position)).all())
            if same and record.metadata == self.documents[position].metadata:
                retried[position] = record
            else:
                self.refused[position] = DocumentExists(self.ids[position])
        self.collection.evict(self.resolved, self.store, expired)
        return old_rows, retried

    def _room(self, new: int) -> tuple[int, bool]:
        """(granted, unlimited) for a batch that may add ``new`` documents: at most
        ``granted`` may be stored, or any number when ``unlimited`` (the retention
        expires one for each past that point, so they add nothing), as in Collection.
        Between processes a limit can be passed by what they insert at the same moment."""
        held = self.mark.held
        limits = self.resolved.config
        adds = new
        kept = limits.retention.max_documents
        if kept is not None:
            adds = max(0, min(new, kept - held))
        limit = limits.limits.max_documents
        granted = adds if limit is None else min(adds, max(0, limit - held))
        return granted, granted >= adds

    def _refusal(self) -> InsufficientStorage:
        limit = self.resolved.config.limits.max_documents
        return InsufficientStorage(
            f"collection {self.resolved.name!r} holds its limit of {limit} documents "
            "(limits.max_documents): delete documents, raise the limit, or set a retention"
        )

    def _retry_result(self, position: int, record: _Record) -> InsertResult:
        document_id = self.ids[position]
        return InsertResult(
            id=document_id,
            inserted=False,
            duplicate_of=document_id,
            cluster_id=record.cluster_name,
            matches=[Match(document_id, 1.0, 0, self.resolved.retry_methods(record))],
        )

    def _match(
        self,
        accepted: list[int],
        old_rows: dict[int, int],
        on_duplicate: OnDuplicate,
        query: Query,
    ) -> list[_Pending]:
        """Each accepted document matched against the store and the earlier accepted
        documents of the batch; its answer, and the documents to store."""
        fingerprints = self.fingerprints.select(self.fingerprint_at[accepted])
        stamps = self.stamps[accepted]
        exclude = np.array([old_rows.get(p, -1) for p in accepted], dtype=np.int64)
        # WAITed like the documents: a failover must not hand out a seq again.
        (last,) = self.store.wire.send(
            [("HINCRBY", self.resolved.counters_key(), "seq", len(accepted))], durable=True
        )
        first_seq = int(last) - len(accepted) + 1
        from_store, held, _ = self.collection._match_store(
            self.resolved, self.store, fingerprints, query, exclude, stamps=stamps, mark=self.mark
        )
        if len(accepted) > 1:
            within = self.collection._match_within(self.resolved, fingerprints, stamps, query)
        else:
            within = _Scored.empty()
        store_spans = from_store.spans(len(accepted))
        batch_spans = within.spans(len(accepted))
        stored_at = held.data.index(from_store.keys)
        pending: list[_Pending] = []
        pending_of: dict[int, _Pending] = {}  # index in accepted -> its pending document
        # Clusters whose first document is live: found by the search, or of this batch.
        seqs = held.seqs(np.arange(len(held.data.rows)))
        live = set(seqs[self.mark.visible_many(held.data.timestamps, seqs)].tolist())
        expired = [self.mark.expired_on_arrival(int(self.stamps[p])) for p in accepted]
        new = sum(p not in old_rows and not e for p, e in zip(accepted, expired, strict=True))
        granted, unlimited = self._room(new)
        added = 0
        # (A document being replaced still counts: the embedded service answers while
        # the old version is live, and names it when it is its cluster's first.)
        for i, position in enumerate(accepted):
            start, end = store_spans[i]
            candidates: list[tuple[float, int, int, str, int, tuple[int, str]]] = []
            for j in range(start, min(end, start + INSERT_MATCH_LIMIT)):
                record = held.record(int(stored_at[j]))
                candidates.append(
                    (
                        float(from_store.similarity[j]),
                        int(from_store.distances[j]),
                        record.seq,
                        held.data.ids[int(stored_at[j])],
                        int(from_store.bits[j]),
                        (record.cluster, record.cluster_name),
                    )
                )
            start, end = batch_spans[i]
            for j in range(start, end):
                earlier = pending_of.get(int(within.keys[j]))
                if earlier is None:
                    continue  # skipped: it is not stored
                candidates.append(
                    (
                        float(within.similarity[j]),
                        int(within.distances[j]),
                        earlier.seq,
                        self.ids[earlier.position],
                        int(within.bits[j]),
                        (earlier.cluster, earlier.cluster_name),
                    )
                )
            candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
            candidates = candidates[:INSERT_MATCH_LIMIT]
            matches = [Match(c[3], c[0], c[1], METHODS_OF_BITS[c[4]]) for c in candidates]
            # Already expired when it arrives: matched, answered, not stored.
            skipped = (bool(matches) and on_duplicate == "skip") or expired[i]
            adds = position not in old_rows and not skipped
            if adds and not unlimited and added >= granted:
                self.refused[position] = self._refusal()
                continue
            added += adds
            cluster = candidates[0][5] if candidates else None
            if not skipped:
                seq = first_seq + i
                cluster = cluster or (seq, self.ids[position])
                entry = _Pending(position, seq, cluster[0], cluster[1])
                pending.append(entry)
                pending_of[i] = entry
                live.add(seq)
            assert cluster is not None or skipped
            if matches and cluster is not None:
                self.clusters[position] = (cluster[0], cluster[1], cluster[0] in live)
            self.results[position] = InsertResult(
                id=self.ids[position],
                inserted=not skipped,
                duplicate_of=None,  # filled in once the clusters are written (_oldest)
                cluster_id=cluster[1] if cluster is not None else self.ids[position],
                matches=matches,
                replaced=position in old_rows and not skipped,
            )
        return pending

    def _write(self, pending: list[_Pending], retried: dict[int, _Record], replace: bool) -> None:
        """The clusters' members, then the documents (the store's three round trips;
        retries go through it too, so that a first attempt that died before its table
        entries were all written is finished), then the counters; then the answers'
        duplicate_of."""
        resolved, store = self.resolved, self.store
        positions = [p.position for p in pending] + sorted(retried)
        new_records: dict[int, _Record] = {}
        commands: list[Command] = []
        for entry in pending:
            document = self.documents[entry.position]
            record = _Record(
                entry.seq,
                self.now / MICROSECONDS,
                entry.cluster,
                entry.cluster_name,
                document.metadata,
                document.text if resolved.config.store_text else None,
                self._short(entry.position),
            )
            new_records[entry.position] = record
            document_id = self.ids[entry.position]
            stamp = int(self.stamps[entry.position])
            commands.append(("ZADD", resolved.members_key(entry.cluster), entry.seq, document_id))
            commands.append(
                ("ZADD", resolved.time_key(), 0, time_member(stamp, entry.seq, document_id))
            )
        if positions:
            at = self.fingerprint_at[positions]
            batch = NewDocuments(
                ids=[self.ids[p] for p in positions],
                simhash=self.fingerprints.simhash[at],
                minhash=self.fingerprints.minhash[at],
                exact=self.fingerprints.exact[at],
                timestamps=self.stamps[positions],
                digests=[
                    _digest(self._exact(p), self.documents[p].metadata)
                    # A replacement replaces even the same content (a new row, as in the
                    # embedded service): its digest is its own.
                    + (new_records[p].seq.to_bytes(8, "big") if replace else b"")
                    for p in positions
                ],
                records=[
                    new_records[p].pack() if p in new_records else retried[p].pack()
                    for p in positions
                ],
            )
            # A replacement leaves the cluster its old document was in.
            leave: list[Command] = []
            for position, old in self.old_records.items():
                document_id = self.ids[position]
                leave.append(("ZREM", resolved.members_key(old.cluster), document_id))
                old_entry = time_member(self.old_times[position], old.seq, document_id)
                leave.append(("ZREM", resolved.time_key(), old_entry))
            store.wire.send(leave + commands, durable=True)
            written = store.insert(batch, replace=replace)
            if resolved.ngram is not None:
                self._index_shorts(resolved.ngram, positions, written, new_records, retried)
            self._settle(positions, written, new_records, retried)
        for position, record in retried.items():
            if position not in self.refused and self.results[position] is None:
                self.results[position] = self._retry_result(position, record)
        self._oldest()

    def _short(self, position: int) -> str | None:
        """The normalised text of a short document (the n-gram index's), else None."""
        shorts = self.fingerprints.shorts
        return None if shorts is None else shorts[int(self.fingerprint_at[position])]

    def _index_shorts(
        self,
        ngram: RedisNgram,
        positions: list[int],
        written: Written,
        new_records: dict[int, _Record],
        retried: dict[int, _Record],
    ) -> None:
        """The n-gram entries of the short texts stored (and of retries: their first
        attempt may have died before writing them; an entry written twice is one), and
        the removal of those of replaced documents. After the store's insert: a row is
        in a table only once its fields are written."""
        adds: tuple[list[str], list[int]] = ([], [])
        removes: tuple[list[str], list[int]] = ([], [])
        for i, position in enumerate(positions):
            status = int(written.status[i])
            record = new_records.get(position) or retried.get(position)
            stored = status in (Status.INSERTED, Status.REPLACED) or (
                status == Status.SAME and position in retried
            )
            if stored and record is not None and record.short is not None:
                adds[0].append(record.short)
                adds[1].append(int(written.rows[i]))
            old = self.old_records.get(position)
            if status == Status.REPLACED and old is not None and old.short is not None:
                removes[0].append(old.short)
                removes[1].append(int(written.replaced[i]))
        commands = ngram.writes("ZADD", adds[0], np.array(adds[1], dtype=np.int64))
        commands += ngram.writes("ZREM", removes[0], np.array(removes[1], dtype=np.int64))
        self.store.wire.send(commands, durable=True)

    def _settle(
        self,
        positions: list[int],
        written: Written,
        new_records: dict[int, _Record],
        retried: dict[int, _Record],
    ) -> None:
        """What the store did with each document: a new one counts as a duplicate when
        it joined a cluster; one another process stored meanwhile is a retry (same
        content) or a conflict."""
        joined = 0
        raced: list[int] = []
        unstored: list[bytes] = []  # time index entries of documents not stored
        for position, status in zip(positions, written.status.tolist(), strict=True):
            record = new_records.get(position)
            if record is not None and status in (Status.SAME, Status.OTHER):
                stamp = int(self.stamps[position])
                unstored.append(time_member(stamp, record.seq, self.ids[position]))
            if status in (Status.INSERTED, Status.REPLACED):
                if record is not None and record.cluster != record.seq:
                    joined += 1
                old = self.old_records.get(position)
                if status == Status.REPLACED and old is not None and old.cluster != old.seq:
                    joined -= 1
            elif status == Status.OTHER and position not in retried:
                self.results[position] = None
                self.refused[position] = DocumentExists(self.ids[position])
            elif record is not None:  # SAME: stored by another attempt meanwhile
                raced.append(position)
        commands: list[Command] = []
        if joined:
            commands.append(("HINCRBY", self.resolved.counters_key(), "duplicates", joined))
        if unstored:
            commands.append(("ZREM", self.resolved.time_key(), *unstored))
        self.store.wire.send(commands)
        if raced:
            rows, data = self.store.lookup([self.ids[p] for p in raced])
            held = _Held(data)
            for position, row in zip(raced, rows.tolist(), strict=True):
                self.results[position] = None
                self.clusters.pop(position, None)
                if row < 0:
                    self.refused[position] = StorageUnavailable(
                        f"document {self.ids[position]!r} changed while it was inserted; "
                        "send it again"
                    )
                    continue
                retried[position] = held.record(int(data.index(np.array([row]))[0]))

    def _oldest(self) -> None:
        """duplicate_of of each answer with matches: the oldest live member of its
        cluster; its first document when that is known to be live, else the member sets
        read a page at a time and their members looked up (held, and still in it)."""
        unknown = {cluster: name for cluster, name, live in self.clusters.values() if not live}
        oldest: dict[int, str | None] = {}
        for cluster, name, live in self.clusters.values():
            if live:
                oldest[cluster] = name
        start = 0
        while unknown:
            clusters = sorted(unknown)
            pages = self.store.wire.send(
                [
                    ("ZRANGE", self.resolved.members_key(c), start, start + MEMBER_PAGE - 1)
                    for c in clusters
                ]
            )
            ids = sorted({m.decode() for page in pages for m in page})
            cluster_of: dict[str, int] = {}
            if ids:
                rows, data = self.store.lookup(ids)
                held = _Held(data)
                for document_id, at in zip(
                    [i for i, r in zip(ids, rows.tolist(), strict=True) if r >= 0],
                    data.index(rows[rows >= 0]).tolist(),
                    strict=True,
                ):
                    record = held.record(at)
                    if self.mark.visible(int(data.timestamps[at]), record.seq):
                        cluster_of[document_id] = record.cluster
            for cluster, page in zip(clusters, pages, strict=True):
                for member in page:
                    if cluster_of.get(member.decode()) == cluster:
                        oldest[cluster] = member.decode()
                        del unknown[cluster]
                        break
                else:
                    if len(page) < MEMBER_PAGE:
                        oldest[cluster] = None
                        del unknown[cluster]
            start += MEMBER_PAGE
        for position, (cluster, _, _) in self.clusters.items():
            result = self.results[position]
            if isinstance(result, InsertResult):
                self.results[position] = InsertResult(
                    id=result.id,
                    inserted=result.inserted,
                    duplicate_of=oldest.get(cluster),
                    cluster_id=result.cluster_id,
                    matches=result.matches,
                    replaced=result.replaced,
                )
