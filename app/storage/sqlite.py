"""SQLiteStore: the durable record, in one SQLite file in WAL mode, with group commit.

Every write goes through one writer thread. Callers hand it their change and wait; the
writer takes every change queued by then, applies them in one transaction, commits, and
only then wakes the callers: concurrent inserts share one fsync (group commit), and a
call returns only once its change is on disk.
"""

from __future__ import annotations

import functools
import itertools
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig
from app.core.row_array import reserved_rows
from app.errors import StorageUnavailable, StoreDamaged
from app.storage.base import (
    SPOT_CHECK_ROWS,
    CommitObserver,
    DocumentBatch,
    Eviction,
    Mark,
    SavedRows,
    StoredCollection,
    no_saved_rows,
    not_among,
)
from app.storage.commit import Commit, settle
from app.storage.segments import SegmentStore

SCHEMA_VERSION = 3
# The statements that bring a database of version v - 1 to version v, applied in order at
# start-up inside one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: the normalised text of short documents, for the n-gram index (older documents
    # have none: their collections were created without the n-gram index).
    2: ("ALTER TABLE documents ADD COLUMN short TEXT",),
    # 3: document time (microseconds since the epoch; older documents read their
    # created_at instead), and per collection the retention mark (every document with
    # (timestamp, row) at or below it expired) and the next row, which evictions may
    # otherwise take away with the highest rows.
    3: (
        "ALTER TABLE documents ADD COLUMN timestamp INTEGER",
        "ALTER TABLE collections ADD COLUMN expired_timestamp INTEGER",
        "ALTER TABLE collections ADD COLUMN expired_row INTEGER",
        "ALTER TABLE collections ADD COLUMN next_row INTEGER NOT NULL DEFAULT 0",
    ),
}
# Changes of at most this many callers share a transaction: large enough that a burst of
# small inserts costs one fsync, small enough that one transaction never holds the writer
# for long.
GROUP_COMMIT_MAX_CHANGES = 512
Synchronous = Literal["FULL", "NORMAL"]
Change = Callable[[sqlite3.Connection], object]
T = TypeVar("T")


# Not frozen: a frozen dataclass sets each field through object.__setattr__, ~1 us a change.
@dataclass(slots=True)
class Queued:
    """A change waiting for the writer, and its commit."""

    change: Change
    done: Commit
    documents: int  # the documents it adds
    # Whether it needs the foreign key checks (False for one that only removes documents:
    # that cannot break their reference to their collection).
    checked: bool = True
    # Whether it is one statement, which alone in its group runs as its own transaction.
    one_statement: bool = False


_SCHEMA = """
CREATE TABLE collections (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    expired_timestamp INTEGER,
    expired_row INTEGER,
    next_row INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE documents (
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    row INTEGER NOT NULL,
    id TEXT NOT NULL,
    created_at REAL NOT NULL,
    cluster INTEGER NOT NULL,
    metadata TEXT,
    simhash INTEGER NOT NULL,
    minhash BLOB NOT NULL,
    exact BLOB NOT NULL,
    text TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    short TEXT,
    timestamp INTEGER,
    PRIMARY KEY (collection, row)
) WITHOUT ROWID;
"""


_MARK_DELETED = (
    "UPDATE documents SET deleted = 1, minhash = x'', metadata = NULL, text = NULL, "
    "short = NULL WHERE collection = ? AND row = ?"
)


def _ignore_commit(changes: int, documents: int, seconds: float) -> None:
    pass


def _set_mark(db: sqlite3.Connection, name: str, mark: tuple[int, int]) -> None:
    db.execute(
        "UPDATE collections SET expired_timestamp = ?, expired_row = ? WHERE name = ?",
        (mark[0], mark[1], name),
    )


# Documents go in by multi-row INSERTs of at most this many rows: one statement step
# instead of one per row. Each step lets the GIL go to the event loop and waits to take it
# back, and between two cores that hand-over costs more than the row (issue 11).
ROWS_PER_INSERT = 64
# Documents read at a time by ``load``: its peak of row tuples (~2 KB each with a MinHash
# signature and a 3 KB text) is this many, not the collection's.
LOAD_CHUNK_ROWS = 16_384
_DOCUMENT_COLUMNS = (
    "collection, row, id, created_at, cluster, metadata, simhash, minhash, exact, text, "
    "deleted, short, timestamp"
)
_DOCUMENT_VALUES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"


@functools.cache
def _insert_statement(rows: int) -> str:
    values = ", ".join([_DOCUMENT_VALUES] * rows)
    return f"INSERT INTO documents ({_DOCUMENT_COLUMNS}) VALUES {values}"


_VALUES_PER_ROW = _DOCUMENT_VALUES.count("?")


def _insert_documents(db: sqlite3.Connection, values: list[Any]) -> None:
    """Insert document rows, their values one after another (_VALUES_PER_ROW each, as
    _DOCUMENT_VALUES binds them): one step per ROWS_PER_INSERT rows; at most
    ROWS_PER_INSERT statement texts ever built."""
    rows = len(values) // _VALUES_PER_ROW
    for start in range(0, rows, ROWS_PER_INSERT):
        chunk = min(ROWS_PER_INSERT, rows - start)
        at = start * _VALUES_PER_ROW
        db.execute(_insert_statement(chunk), values[at : at + chunk * _VALUES_PER_ROW])


def _signed(values: np.ndarray) -> list[int]:
    # SQLite integers are signed 64-bit: store the same bits.
    signed: list[int] = values.astype(np.uint64).view(np.int64).tolist()
    return signed


def _apply_change(
    connection: sqlite3.Connection, queued: Queued, *, alone: bool
) -> StorageUnavailable | None:
    """Apply one queued change in the group's transaction; its refusal when SQLite
    refused it. A change alone needs no savepoint, its refusal ending the whole
    transaction (one statement alone is its own transaction): each statement hands the
    GIL to the event loop and waits to take it back, which between two cores costs more
    than a small statement (issue 11)."""
    if not alone:
        connection.execute("SAVEPOINT change")
    try:
        queued.change(connection)
    except sqlite3.IntegrityError as error:
        if not alone:
            # One caller's bad change must not fail the others of its group.
            connection.execute("ROLLBACK TO change")
        elif connection.in_transaction:
            connection.execute("ROLLBACK")
        return StorageUnavailable(f"change refused: {error}")
    if not alone:
        connection.execute("RELEASE change")
    return None


# Rows of a collection whose records one aggregate reads: its strings stay under ~100 MB.
RECORD_CHUNK_ROWS = 1 << 20
# Every column SQLite aggregates into one string per range of rows, in the same order,
# parsed by numpy: created_at with 17 significant digits (it reads back exactly), ids and
# metadata separated by NUL (an id is printable, JSON has no raw control characters).
_RECORDS = (
    "SELECT count(*), group_concat(row), group_concat(id, char(0)), "
    "group_concat(printf('%!.17g', created_at)), group_concat(cluster), "
    "group_concat(coalesce(timestamp, cast(round(created_at * 1000000) AS INTEGER))), "
    "group_concat(coalesce(metadata, ''), char(0)) FROM (SELECT row, id, created_at, cluster, "
    "timestamp, metadata FROM documents "
    "WHERE collection = ? AND deleted = 0 AND row >= ? AND row < ? ORDER BY row)"
)


def _numbers(text: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
    parsed: npt.NDArray[Any] = np.fromstring(text, dtype=dtype, sep=",")
    return parsed


class _Records:
    """The records of a collection's live documents, filled range of rows by range."""

    def __init__(self, count: int) -> None:
        self.rows = np.empty(count, dtype=np.int64)
        self.created_at = np.empty(count, dtype=np.float64)
        self.clusters = np.empty(count, dtype=np.int64)
        self.timestamps = np.empty(count, dtype=np.int64)
        self.ids: list[str] = []
        self.metadata: list[dict[str, Any] | None] = []
        self.done = 0

    def read(self, connection: sqlite3.Connection, name: str, start: int, end: int) -> None:
        number, rows, ids, created, clusters, stamps, metadata = connection.execute(
            _RECORDS, (name, start, end)
        ).fetchone()
        if not number:
            return
        at, until = self.done, self.done + number
        if until > len(self.rows):  # one snapshot: the count cannot be short
            raise StoreDamaged(f"{name}: more documents than counted while loading")
        columns = (
            (self.rows, rows, np.int64),
            (self.clusters, clusters, np.int64),
            (self.timestamps, stamps, np.int64),
            (self.created_at, created, np.float64),
        )
        for column, text, dtype in columns:
            parsed = _numbers(text, dtype)
            if len(parsed) != number:
                raise StoreDamaged(f"{name}: a column of {number} documents read as {len(parsed)}")
            column[at:until] = parsed
        names = ids.split("\0")
        if len(names) != number:  # an imported id with a NUL in it: read them one by one
            names = [
                found
                for (found,) in connection.execute(
                    "SELECT id FROM documents WHERE collection = ? AND deleted = 0 "
                    "AND row >= ? AND row < ? ORDER BY row",
                    (name, start, end),
                )
            ]
        self.ids.extend(names)
        if not metadata.strip("\0"):
            self.metadata.extend([None] * number)  # none has metadata: the usual case
        else:
            self.metadata.extend(json.loads(m) if m else None for m in metadata.split("\0"))
        self.done = until


def _live_rows(
    connection: sqlite3.Connection, name: str, start: int, end: int
) -> npt.NDArray[np.int64]:
    """The rows of the live documents in [start, end), ascending: SQLite aggregates each
    range of RECORD_CHUNK_ROWS rows into one string, numpy parses it."""
    parts = [np.zeros(0, dtype=np.int64)]
    for low in range(start, end, RECORD_CHUNK_ROWS):
        number, text = connection.execute(
            "SELECT count(*), group_concat(row) FROM (SELECT row FROM documents WHERE "
            "collection = ? AND deleted = 0 AND row >= ? AND row < ? ORDER BY row)",
            (name, low, min(end, low + RECORD_CHUNK_ROWS)),
        ).fetchone()
        if number:
            rows = _numbers(text, np.int64)
            if len(rows) != number:
                raise StoreDamaged(f"{name}: {number} rows read as {len(rows)}")
            parts.append(rows)
    return np.concatenate(parts)


def _texts(
    connection: sqlite3.Connection, name: str, rows: npt.NDArray[np.int64]
) -> tuple[list[str | None] | None, list[str | None] | None]:
    """(texts, shorts) of the live documents ``rows``, each None where no document has
    one: only the rows that have either are fetched, in one pass."""
    texts: list[str | None] = [None] * len(rows)
    shorts: list[str | None] = [None] * len(rows)
    has_text = has_short = False
    cursor = connection.execute(
        "SELECT row, text, short FROM documents WHERE collection = ? AND deleted = 0 "
        "AND row >= ? AND (text IS NOT NULL OR short IS NOT NULL) ORDER BY row",
        (name, int(rows[0]) if len(rows) else 0),
    )
    while chunk := cursor.fetchmany(LOAD_CHUNK_ROWS):
        numbers, chunk_texts, chunk_shorts = zip(*chunk, strict=True)
        at = np.searchsorted(rows, np.array(numbers, dtype=np.int64))
        if int(at[-1]) >= len(rows) or not np.array_equal(rows[at], numbers):
            raise StoreDamaged(f"{name}: the documents changed while loading")
        for position, text, short in zip(at.tolist(), chunk_texts, chunk_shorts, strict=True):
            texts[position], shorts[position] = text, short
            has_text = has_text or text is not None
            has_short = has_short or short is not None
    return (texts if has_text else None), (shorts if has_short else None)


class SQLiteStore:
    """The Store interface on SQLite. ``synchronous`` FULL survives power loss, NORMAL
    survives a crash of the process (WAL), at a fraction of the fsyncs."""

    def __init__(
        self,
        path: Path,
        synchronous: Synchronous = "FULL",
        segments: SegmentStore | Literal["beside"] | None = "beside",
    ) -> None:
        """``segments``: where the index segments are kept ("beside": a directory next
        to the database, named like it with .segments; None: none, every start
        rebuilds the indexes from the documents)."""
        self.path = path
        self.synchronous = synchronous
        self.segments = (
            SegmentStore(path.with_suffix(".segments")) if segments == "beside" else segments
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = self._open()
        self._changes: queue.SimpleQueue[Queued | None] = queue.SimpleQueue()
        self._checking = True  # PRAGMA foreign_keys, as _open left it
        self._observe_commit: CommitObserver = _ignore_commit
        self.eviction_seconds = 0.0  # CPU time of the evictions' changes (writer thread)
        self._writer = threading.Thread(target=self._write_loop, name="sqlite-writer", daemon=True)
        self._writer.start()

    def _open(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={self.synchronous}")
            connection.execute("PRAGMA foreign_keys=ON")
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise StoreDamaged(f"{self.path} has tables but no neardup schema version")
                connection.executescript(_SCHEMA)
                connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version > SCHEMA_VERSION:
                raise StoreDamaged(
                    f"{self.path} has schema version {version}, newer than this neardup "
                    f"({SCHEMA_VERSION}): upgrade neardup"
                )
            elif version < SCHEMA_VERSION:
                connection.execute("BEGIN IMMEDIATE")
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    # One statement each, with execute: executescript would commit the
                    # transaction first, and a failed migration must change nothing.
                    for statement in MIGRATIONS[target]:
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                connection.execute("COMMIT")
            check = connection.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreDamaged(f"{self.path} failed its integrity check: {check}")
        except sqlite3.DatabaseError as error:
            raise StoreDamaged(
                f"{self.path} is not a usable neardup database ({error}). Restore it from a "
                "backup (neardup export/import) or move it away to start empty"
            ) from error
        return connection

    # ------------------------------------------------------------------ writes

    def _submit(self, change: Change) -> None:
        self._enqueue(change).result()

    def _enqueue(
        self,
        change: Change,
        documents: int = 0,
        *,
        checked: bool = True,
        one_statement: bool = False,
    ) -> Commit:
        done = Commit()
        self._changes.put(Queued(change, done, documents, checked, one_statement))
        return done

    def observe_commits(self, observer: CommitObserver) -> None:
        self._observe_commit = observer

    def _write_loop(self) -> None:
        while True:
            first = self._changes.get()
            if first is None:
                return
            group = [first]
            while len(group) < GROUP_COMMIT_MAX_CHANGES:
                try:
                    following = self._changes.get_nowait()
                except queue.Empty:
                    break
                if following is None:
                    self._changes.put(None)
                    break
                group.append(following)
            self._commit(group)

    def _check_references(self, wanted: bool) -> None:
        """Foreign key checks on or off for the next transaction (outside one: SQLite
        ignores the pragma inside, so the state is read back rather than assumed)."""
        if wanted != self._checking:
            connection = self._connection
            connection.execute(f"PRAGMA foreign_keys={'ON' if wanted else 'OFF'}")
            self._checking = bool(connection.execute("PRAGMA foreign_keys").fetchone()[0])

    def _commit(self, group: list[Queued]) -> None:
        connection = self._connection
        started = time.perf_counter()
        alone = len(group) == 1
        refusals: list[StorageUnavailable | None] = []
        try:
            # A range delete from a table with a foreign key is two passes in SQLite (the
            # keys into a temporary b-tree, then a seek for each): twice the cost of one.
            # A group of evictions alone needs no checks; any other change turns them on.
            self._check_references(any(queued.checked for queued in group))
            if not (alone and group[0].one_statement):
                connection.execute("BEGIN IMMEDIATE")
            documents = 0
            for queued in group:
                refusal = _apply_change(connection, queued, alone=alone)
                refusals.append(refusal)
                if refusal is None:
                    documents += queued.documents
            if connection.in_transaction:
                connection.execute("COMMIT")
        except sqlite3.Error as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            failure = StorageUnavailable(
                f"could not write to {self.path}: {error}; nothing of this request was stored"
            )
            refusals += [None] * (len(group) - len(refusals))
            settle(
                (queued.done, refusal or failure)
                for queued, refusal in zip(group, refusals, strict=True)
            )
            return
        self._observe_commit(len(group), documents, time.perf_counter() - started)
        settle((queued.done, refusal) for queued, refusal in zip(group, refusals, strict=True))

    def create_collection(self, name: str, config: dict[str, Any]) -> None:
        text = json.dumps(config, sort_keys=True)
        self._submit(
            lambda db: db.execute(
                "INSERT INTO collections (name, config) VALUES (?, ?)", (name, text)
            )
        )
        if self.segments is not None:  # one a collection of this name left, if any
            self.segments.remove(name)

    def drop_collection(self, name: str) -> None:
        # The segment first: a crash before the drop commits leaves a collection that
        # rebuilds, never a segment of a dropped collection beside a new one.
        if self.segments is not None:
            self.segments.remove(name)

        def drop(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM documents WHERE collection = ?", (name,))
            db.execute("DELETE FROM collections WHERE name = ?", (name,))

        self._submit(drop)

    def update_collection(self, name: str, config: dict[str, Any], mark: Mark | None) -> None:
        text = json.dumps(config, sort_keys=True)

        def update(db: sqlite3.Connection) -> None:
            db.execute("UPDATE collections SET config = ? WHERE name = ?", (text, name))
            if mark is not None:
                _set_mark(db, name, mark)

        self._submit(update)

    def add_documents(self, name: str, documents: DocumentBatch, mark: Mark | None = None) -> None:
        self.begin_add_documents(name, documents, mark).result()

    def begin_add_documents(
        self, name: str, documents: DocumentBatch, mark: Mark | None = None
    ) -> Commit:
        """Queue the documents for the next group commit; the commit settles with it."""
        values = list(
            itertools.chain.from_iterable(
                zip(
                    [name] * len(documents),
                    documents.rows.tolist(),
                    documents.ids,
                    documents.created_at.tolist(),
                    documents.clusters.tolist(),
                    [None if m is None else json.dumps(m) for m in documents.metadata],
                    _signed(documents.simhash),
                    [signature.tobytes() for signature in np.ascontiguousarray(documents.minhash)],
                    [pair.tobytes() for pair in np.ascontiguousarray(documents.exact)],
                    documents.text_column(),
                    documents.short_column(),
                    documents.timestamp_column().tolist(),
                    strict=True,
                )
            )
        )

        def add(db: sqlite3.Connection) -> None:
            _insert_documents(db, values)
            if mark is not None:
                _set_mark(db, name, mark)

        one_statement = len(documents) <= ROWS_PER_INSERT and mark is None
        return self._enqueue(add, len(documents), one_statement=one_statement)

    def begin_evict(self, name: str, eviction: Eviction) -> Commit:
        """Queue expired documents for removal (deleted, or kept as a cluster's name)."""
        # Runs of consecutive rows (what expiring the oldest first gives) go in one range
        # delete each, cheaper than a delete per row.
        rows = np.unique(np.asarray(eviction.removed, dtype=np.int64))
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        runs = [(name, int(run[0]), int(run[-1])) for run in np.split(rows, breaks) if len(run)]
        named = [(name, row) for row in eviction.named]

        def evict(db: sqlite3.Connection) -> None:
            started = time.thread_time()
            db.executemany(
                "DELETE FROM documents WHERE collection = ? AND row BETWEEN ? AND ?", runs
            )
            db.executemany(_MARK_DELETED, named)
            _set_mark(db, name, eviction.expired_through)
            db.execute(
                "UPDATE collections SET next_row = max(next_row, ?) WHERE name = ?",
                (eviction.next_row, name),
            )
            self.eviction_seconds += time.thread_time() - started

        return self._enqueue(evict, checked=False)

    def delete_documents(self, name: str, rows: list[int]) -> None:
        pairs = [(name, row) for row in rows]
        # The row stays, without its fingerprints: its id may name a cluster.
        self._submit(lambda db: db.executemany(_MARK_DELETED, pairs))

    # ------------------------------------------------------------------ reads

    def load(self, saved_rows: SavedRows = no_saved_rows) -> list[StoredCollection]:
        """Every collection and its documents, columns built with numpy, not row by row,
        from one snapshot of the database (a read transaction on a connection of its own:
        another process may be writing, as the service does under ``neardup export``).
        ``saved_rows(name, config)``: the row below which a collection's segment holds the
        fingerprints: they are not read (zeros)."""
        return self._read(lambda connection: self._load_from(connection, saved_rows))

    def load_collection(self, name: str) -> StoredCollection:
        """One collection with every fingerprint (a rebuild after a damaged segment)."""
        for stored in self._read(lambda connection: self._load_from(connection, name=name)):
            return stored
        raise StoreDamaged(f"collection {name!r} vanished while loading")

    def collection_configs(self) -> dict[str, dict[str, Any]]:
        """Every collection's settings, by name."""
        rows = self._read(lambda c: c.execute("SELECT name, config FROM collections").fetchall())
        return {name: json.loads(text) for name, text in rows}

    def _read(self, read: Callable[[sqlite3.Connection], T]) -> T:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            connection.execute("BEGIN")
            result = read(connection)
            connection.execute("COMMIT")
            return result
        finally:
            connection.close()

    def _load_from(
        self,
        connection: sqlite3.Connection,
        saved_rows: SavedRows = no_saved_rows,
        name: str | None = None,
    ) -> list[StoredCollection]:
        collections = connection.execute(
            "SELECT name, config, expired_timestamp, expired_row, next_row FROM collections "
            "WHERE ?1 IS NULL OR name = ?1 ORDER BY name",
            (name,),
        )
        loaded = []
        for name, config_text, expired_timestamp, expired_row, next_floor in collections.fetchall():
            config = json.loads(config_text)
            fingerprints_from = saved_rows(name, config)
            documents, covered, covered_texts = self._load_documents(
                connection, name, config, fingerprints_from
            )
            # Clusters named by a row that is not live: few, looked up by primary key (a
            # segment holds the clusters of the covered rows, and the names of theirs).
            live = np.concatenate([covered, documents.rows])
            orphans = not_among(documents.clusters, live).tolist()
            names: dict[int, str] = {}
            for row in orphans:
                found = connection.execute(
                    "SELECT id FROM documents WHERE collection = ? AND row = ?", (name, row)
                ).fetchone()
                if found is not None:
                    names[row] = found[0]
                else:
                    # Its first document never committed (a failed write): the oldest
                    # stored member names the cluster instead.
                    members = documents.clusters == row
                    documents.clusters[members] = documents.rows[members].min()
            last = connection.execute(
                "SELECT max(row) FROM documents WHERE collection = ?", (name,)
            ).fetchone()[0]
            next_row = max(0 if last is None else int(last) + 1, int(next_floor))
            mark = None if expired_timestamp is None else (expired_timestamp, expired_row)
            loaded.append(
                StoredCollection(
                    name,
                    config,
                    documents,
                    names,
                    next_row,
                    mark,
                    fingerprints_from,
                    covered,
                    covered_texts,
                )
            )
        return loaded

    def _load_documents(
        self,
        connection: sqlite3.Connection,
        name: str,
        config: dict[str, Any],
        fingerprints_from: int,
    ) -> tuple[DocumentBatch, npt.NDArray[np.int64], list[str | None] | None]:
        """(a collection's live documents as columns, the rows of those a segment holds,
        their texts where the collection keeps any).
        Below ``fingerprints_from`` (a segment's rows) only the live rows are read, but for
        the last SPOT_CHECK_ROWS of them; from there on, in up to three passes: the records
        (ids, times, clusters, metadata) aggregated by SQLite into one string a column per
        range of rows, parsed by numpy (no Python tuple a row: ~5 s of 7 at 1M); the
        fingerprints, LOAD_CHUNK_ROWS rows at a time, the signatures copied once, into an
        array their index can hold as it is; and texts, where the collection keeps any."""
        num_perm = int(config["minhash"]["num_perm"]) if config["minhash"]["enabled"] else 0
        # Apart: SQLite reads one end of the primary key for each, where both at once scan.
        (low,) = connection.execute(
            "SELECT min(row) FROM documents WHERE collection = ?", (name,)
        ).fetchone()
        (high,) = connection.execute(
            "SELECT max(row) FROM documents WHERE collection = ?", (name,)
        ).fetchone()
        below = _live_rows(
            connection, name, int(low or 0), min(fingerprints_from, int(high or 0) + 1)
        )
        covered, spot = below[: max(0, len(below) - SPOT_CHECK_ROWS)], below[-SPOT_CHECK_ROWS:]
        first = int(spot[0]) if len(spot) else fingerprints_from
        (count,) = connection.execute(
            "SELECT count(*) FROM documents WHERE collection = ? AND deleted = 0 AND row >= ?",
            (name, first),
        ).fetchone()
        records = _Records(count)
        for start in range(max(first, int(low or 0)), int(high or 0) + 1, RECORD_CHUNK_ROWS):
            records.read(connection, name, start, start + RECORD_CHUNK_ROWS)
        if records.done != count:
            raise StoreDamaged(f"{name}: {records.done} documents read of {count} counted")
        rows = records.rows
        simhash = np.zeros(count, dtype=np.uint64)
        minhash = reserved_rows(count, (num_perm,), np.uint32)
        exact = np.zeros((count, 2), dtype=np.uint64)
        cursor = connection.execute(
            "SELECT row, simhash, minhash, exact FROM documents "
            "WHERE collection = ? AND deleted = 0 AND row >= ? ORDER BY row",
            (name, first),
        )
        done = 0
        while chunk := cursor.fetchmany(LOAD_CHUNK_ROWS):
            end = done + len(chunk)
            columns = list(zip(*chunk, strict=True))
            if end > count or not np.array_equal(rows[done:end], columns[0]):
                raise StoreDamaged(f"{name}: the documents changed while loading")
            simhash[done:end] = np.array(columns[1], dtype=np.int64).view(np.uint64)
            if num_perm:
                minhash[done:end] = np.frombuffer(b"".join(columns[2]), np.uint32).reshape(
                    -1, num_perm
                )
            exact[done:end] = np.frombuffer(b"".join(columns[3]), np.uint64).reshape(-1, 2)
            done = end
            del chunk, columns
        if done != count:
            raise StoreDamaged(f"{name}: {done} fingerprints read of {count}")
        # Texts of covered rows only where the collection keeps them (a scan of every row).
        keeps_text = CollectionConfig.from_dict(config).keeps_text
        texts, shorts = _texts(
            connection, name, np.concatenate([covered, rows]) if keeps_text else rows
        )
        # The covered rows' texts, for the collection to hold (their shorts are in the
        # segment's n-gram index).
        skipped = len(covered) if keeps_text else 0
        covered_texts = None if texts is None or not keeps_text else texts[:skipped]
        texts = None if texts is None else texts[skipped:]
        shorts = None if shorts is None else shorts[skipped:]
        documents = DocumentBatch(
            ids=records.ids,
            rows=rows,
            created_at=records.created_at,
            clusters=records.clusters,
            metadata=records.metadata,
            simhash=simhash,
            minhash=minhash,
            exact=exact,
            texts=texts,
            shorts=shorts,
            timestamps=records.timestamps,
        )
        return documents, covered, covered_texts

    def close(self) -> None:
        self._changes.put(None)
        self._writer.join()
        self._connection.close()
