"""The collections of a service over Redis (``NEARDUP_BACKEND``): nothing kept in process.

Every collection's settings are a field of one hash, ``{nd:collections}``: name -> JSON
``{"key": "<name>~<epoch>", "config": {...}}``. The key names the collection in its
Redis keys (``{nd:<key>:...}``) and is new at every create, so that a collection dropped
and created again starts on fresh keys even while the old ones are being deleted. Every
call reads the settings (one ``HGET``, in the first round trip of a search): a collection
created, changed or dropped by another process is seen at once. The time settings
(``match_window``, ``retention``, ``limits``) may change (PATCH, or PUT with new values),
by a compare-and-set of the settings value; what the old retention expired stays so
(``"marked"`` in the value once a collection had one). ``NEARDUP_MAX_DOCUMENTS`` (one
budget over every collection) is counted at each insert that may add documents
(``held_everywhere``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator

import orjson

from app.backends.embedded.registry import warm_up
from app.backends.redis.collection import RedisCollection
from app.backends.redis.failures import Failures, storage_errors
from app.backends.redis.resolved import Resolved
from app.backends.redis.store import functions
from app.backends.redis.store.connect import connect, replicas_lacking
from app.backends.redis.store.layout import DEFAULT_SHARD_BITS
from app.backends.redis.store.loop_links import close_loop_links
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Command, Wire
from app.collection_config import CollectionConfig
from app.errors import (
    NeardupError,
    StorageUnavailable,
    TooManyCollections,
    UnknownCollection,
)
from app.service.protocols import CollectionFigures, ServiceFigures
from app.service.times import Clock
from app.service.types import DEFAULT_COLLECTION, BackgroundObserver, Unobserved

log = logging.getLogger("neardup")

NAMESPACE = "nd"
# Expired documents evicted per round of the evictor (a few round trips each).
EVICTION_CHUNK = 2048
# The evictor wakes this often to catch a max_age passing while nothing is written.
EVICT_POLL_SECONDS = 1.0
COLLECTIONS_KEY = "{" + NAMESPACE + ":collections}"
# Keys deleted per round trip when a collection is dropped.
DROP_CHUNK = 1000


# A collection's settings replaced only if they are still those read: a PATCH never
# brings back a collection dropped meanwhile, nor overwrites one created again.
_SWAP = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"""


def parse_record(name: str, raw: bytes) -> Resolved:
    """A collection as its record in COLLECTIONS_KEY says: its key, settings, retention
    mark, the shard bits of its layout (the creating process's; collections from
    before the setting have none recorded, so the default) and whether its passage
    entries are keyed by spread fingerprints (those created before are not)."""
    stored = orjson.loads(raw)
    config = CollectionConfig.from_dict(stored["config"])
    marked = bool(stored.get("marked", False))
    shard_bits = int(stored.get("shard_bits", DEFAULT_SHARD_BITS))
    spread = bool(stored.get("spread_passages", False))
    return Resolved.of(name, stored["key"], config, NAMESPACE, marked, shard_bits, spread)


def record_of(
    key: str, config: CollectionConfig, marked: bool, shard_bits: int, spread_passages: bool
) -> bytes:
    """The record parse_record reads: written at the creation and at every change of the
    settings, so that nothing recorded (the layout's shard bits above all) is lost."""
    stored = {
        "key": key,
        "config": config.to_dict(),
        "marked": marked,
        "shard_bits": shard_bits,
        "spread_passages": spread_passages,
    }
    return orjson.dumps(stored)


class RedisRegistry:
    """Every collection in one Redis or Redis Cluster (ServiceRegistry)."""

    def __init__(
        self,
        url: str,
        *,
        max_collections: int = 1000,
        wait_replicas: int = 0,
        clock: Clock = time.time,
        max_documents: int | None = None,
        shard_bits: int = DEFAULT_SHARD_BITS,
    ) -> None:
        self.url = url
        self.shard_bits = shard_bits  # of the collections this process creates
        self.clock = clock
        self.max_documents = max_documents  # NEARDUP_MAX_DOCUMENTS
        self._max_collections = max_collections
        self._wait_replicas = wait_replicas
        self._client: Client | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._resolved: dict[str, tuple[bytes, Resolved]] = {}
        self._set_up: set[str] = set()  # collection keys whose layout this process checked
        self._handles: dict[str, RedisCollection] = {}
        self.failures = Failures()
        self._wires: list[Wire] = []  # every thread's, for the count of round trips
        self._wires_lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._evictor: threading.Thread | None = None
        self._observer: BackgroundObserver = Unobserved()

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.url)
        return self._client

    def _wire(self) -> Wire:
        wire: Wire | None = getattr(self._local, "wire", None)
        if wire is None:
            wire = self._local.wire = Wire(self.client)
            with self._wires_lock:
                self._wires.append(wire)
        return wire

    def open(self) -> None:
        """Load the functions, create ``default`` if no process has, compile the kernels."""
        with storage_errors(self.failures):
            self.client.function_load(functions.SOURCE, replace=True)
            if not self._wire().send([("HEXISTS", COLLECTIONS_KEY, DEFAULT_COLLECTION)])[0]:
                self.create(DEFAULT_COLLECTION, CollectionConfig())
        warm_up()

    def stop_background(self) -> None:
        """Stop the evictor, waiting for its chunk in flight (evictions then happen only
        when ``evict`` is called: what a consistency check needs)."""
        self._stopping.set()
        self._wake.set()
        if self._evictor is not None:
            self._evictor.join()
        self._evictor = None
        self._stopping.clear()

    def close(self) -> None:
        self.stop_background()
        close_loop_links()  # called from the app's lifespan, on its loop
        if self._client is not None:
            self._client.close()

    def ping(self) -> None:
        """Redis answers; with wait_replicas, every primary has that many replicas online.
        A write WAITs for them, so until they have attached (and again once they are
        lost) a write is refused: not ready, and the body says which primary lacks them."""
        with storage_errors(self.failures):
            self.client.ping()
            lacking = replicas_lacking(self.client, self._wait_replicas)
        if lacking:
            raise StorageUnavailable(
                f"Redis primaries without the {self._wait_replicas} replicas writes wait for: "
                + "; ".join(lacking)
            )

    def start_background(self, observer: BackgroundObserver | None = None) -> None:
        """Start the evictor, reporting each chunk to ``observer`` (nothing to merge:
        Redis's sorted sets take every entry at once). Every process runs one; they
        share the work safely."""
        if observer is not None:
            self._observer = observer
        self._evictor = threading.Thread(target=self._evict_loop, name="evictor", daemon=True)
        self._evictor.start()

    def evict(self) -> int:
        """Evict what the retention of every collection expired by now, a chunk at a
        time (the evictor's work; tests call it to evict at a moment of their choosing).
        Returns the documents evicted."""
        evicted = 0
        for resolved in self._every():
            if not resolved.retains:
                continue
            handle = self.get(resolved.name)
            with storage_errors(self.failures):
                store = self.store(resolved)
                mark = handle.expire(resolved, store)
                while mark.member and not self._stopping.is_set():
                    started = time.perf_counter()
                    (members,) = store.wire.send(
                        [
                            (
                                "ZRANGE",
                                resolved.time_key(),
                                b"-",
                                b"[" + mark.member,
                                "BYLEX",
                                "LIMIT",
                                0,
                                EVICTION_CHUNK,
                            )
                        ]
                    )
                    if not members:
                        break
                    count = handle.evict(resolved, store, members)
                    evicted += count
                    self._observer.record_eviction(
                        handle.name, count, time.perf_counter() - started
                    )
        return evicted

    def _evict_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(EVICT_POLL_SECONDS)
            self._wake.clear()
            try:
                self.evict()
            except StorageUnavailable:
                log.warning("eviction: Redis out of reach; trying again")

    def figures(self) -> ServiceFigures:
        """Round trips to Redis so far, failures by kind, and each collection's stats
        (a round trip each); none when Redis is out of reach (its failures say so)."""
        with self._wires_lock:
            round_trips = sum(wire.round_trips for wire in self._wires)
        collections: list[CollectionFigures] = []
        try:
            handles = self.list()
        except NeardupError:
            handles = []
        for collection in handles:
            try:
                collections.append(CollectionFigures(collection.name, collection.stats()))
            except NeardupError:  # dropped meanwhile, or Redis out of reach
                continue
        return ServiceFigures(collections, round_trips, dict(self.failures.counts))

    # ------------------------------------------------------------------ collections

    def resolve(self, name: str) -> Resolved:
        """The collection's settings now (one round trip); UnknownCollection if none."""
        (raw,) = self._wire().send([self.settings_command(name)])
        if raw is None:
            raise UnknownCollection(name)
        return self.parsed(name, raw)

    def parsed(self, name: str, raw: bytes) -> Resolved:
        """The settings as stored (``raw``), parsed; the same object while they do not change."""
        cached = self._resolved.get(name)
        if cached is not None and cached[0] == raw:
            return cached[1]
        resolved = parse_record(name, raw)
        self._resolved[name] = (raw, resolved)
        return resolved

    def _every(self) -> list[Resolved]:
        """Every collection's settings: one round trip."""
        with storage_errors(self.failures):
            (flat,) = self._wire().send([("HGETALL", COLLECTIONS_KEY)])
        pairs = flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2], strict=True)
        return [self.parsed(name.decode(), raw) for name, raw in pairs]

    def held_everywhere(self) -> int:
        """The documents every collection holds (above its retention mark), for
        NEARDUP_MAX_DOCUMENTS: two round trips, a command per collection."""
        commands: list[Command] = [
            ("EVAL", HELD, 2, resolved.counters_key(), resolved.time_key())
            for resolved in self._every()
        ]
        return sum(int(count) for count in self._wire().send(commands))

    def settings_command(self, name: str) -> Command:
        return ("HGET", COLLECTIONS_KEY, name)

    def cached(self, name: str) -> tuple[bytes, Resolved] | None:
        return self._resolved.get(name)

    def store(self, resolved: Resolved) -> RedisStore:
        """This thread's store of a collection (one per thread: a store's round-trip
        state is not shared), its layout checked once per process."""
        stores: dict[str, RedisStore] | None = getattr(self._local, "stores", None)
        if stores is None:
            stores = self._local.stores = {}
        store = stores.get(resolved.key)
        if store is None:
            store = RedisStore(self.client, resolved.layout, wait_replicas=self._wait_replicas)
            with self._wires_lock:
                self._wires.append(store.wire)
            if resolved.key not in self._set_up:
                store.setup()
                self._set_up.add(resolved.key)
            stores[resolved.key] = store
        return store

    def get(self, name: str) -> RedisCollection:
        """A handle, without a round trip: its calls find out whether the collection
        exists (404 then)."""
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles.setdefault(name, RedisCollection(name, self))
        return handle

    def create(self, name: str, config: CollectionConfig) -> tuple[RedisCollection, bool]:
        with storage_errors(self.failures), self._lock:
            for _ in range(2):  # a second time if another process dropped it meanwhile
                try:
                    self._change(self.resolve(name), config)
                    return self.get(name), False
                except UnknownCollection:
                    pass
                (count,) = self._wire().send([("HLEN", COLLECTIONS_KEY)])
                if count >= self._max_collections:
                    raise TooManyCollections(
                        f"at most {self._max_collections} collections; delete one first"
                    )
                key = f"{name}~{uuid.uuid4().hex[:12]}"
                value = record_of(key, config, False, self.shard_bits, spread_passages=True)
                (created,) = self._wire().send([("HSETNX", COLLECTIONS_KEY, name, value)])
                if created:
                    self.store(self.resolve(name))  # records the layout
                    return self.get(name), True
            raise StorageUnavailable(f"collection {name!r} is being created and dropped; retry")

    def update(self, name: str, config: CollectionConfig) -> RedisCollection:
        with storage_errors(self.failures):
            self._change(self.resolve(name), config)
        return self.get(name)

    def _change(self, resolved: Resolved, config: CollectionConfig) -> None:
        resolved.config.check_change(resolved.name, config)
        if config != resolved.config:  # new time settings: match_window, retention, limits
            # What the old retention expired stays expired: applied up to now first.
            self.get(resolved.name).expire(resolved, self.store(resolved))
            value = record_of(
                resolved.key,
                config,
                resolved.retains,
                resolved.layout.shard_bits,
                resolved.spread_passages,
            )
            read = self.cached(resolved.name)
            raw = read[0] if read is not None and read[1] is resolved else b""
            changed = self.client.eval(_SWAP, 1, COLLECTIONS_KEY, resolved.name, raw, value)
            if not changed:  # changed, dropped or created again meanwhile
                raise StorageUnavailable(
                    f"collection {resolved.name!r} changed while its settings were written; retry"
                )
            fresh = self.resolve(resolved.name)
            self.get(resolved.name).expire(fresh, self.store(fresh))

    def list(self) -> list[RedisCollection]:
        with storage_errors(self.failures):
            (names,) = self._wire().send([("HKEYS", COLLECTIONS_KEY)])
        return [self.get(name) for name in sorted(n.decode() for n in names)]

    def drop(self, name: str) -> None:
        """Forget the collection (at once, for every process), then delete its keys."""
        with storage_errors(self.failures):
            resolved = self.resolve(name)
            (removed,) = self._wire().send([("HDEL", COLLECTIONS_KEY, name)])
            if not removed:
                raise UnknownCollection(name)
            self._resolved.pop(name, None)
            wire = self._wire()
            for chunk in _chunks(self._keys_of(resolved), DROP_CHUNK):
                wire.send([("UNLINK", key) for key in chunk])

    def _keys_of(self, resolved: Resolved) -> Iterator[bytes]:
        """Every key of a collection, by SCAN on each primary."""
        pattern = f"{{{NAMESPACE}:{resolved.key}:*"
        yield from self.client.scan_iter(match=pattern, count=DROP_CHUNK)


# The documents a collection holds (KEYS: its counters hash, its time index): the time
# index's entries above the retention mark. Read-only.
HELD = """
local mark = redis.call('HGET', KEYS[1], 'mark')
if mark then return redis.call('ZLEXCOUNT', KEYS[2], '(' .. mark, '+') end
return redis.call('ZCARD', KEYS[2])
"""


def _chunks(keys: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for key in keys:
        chunk.append(key)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
