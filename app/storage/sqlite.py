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

from app.errors import StorageUnavailable, StoreDamaged
from app.storage.base import (
    CommitObserver,
    Covered,
    DocumentBatch,
    Eviction,
    Mark,
    SavedRows,
    StoredCollection,
    no_saved_rows,
)
from app.storage.commit import Commit, settle
from app.storage.segments import SegmentStore, segments_beside
from app.storage.sqlite_load import load_collections

SCHEMA_VERSION = 4
# The statements that bring a database of version v - 1 to version v, applied in order at
# start-up inside one transaction.
# AUTOINCREMENT: a sequence number is never used twice, even once the log is pruned.
_REMOVED_TABLE = (
    "CREATE TABLE removed (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "collection TEXT NOT NULL, row INTEGER NOT NULL)"
)
_REMOVED_INDEX = "CREATE INDEX removed_by_collection ON removed (collection, seq)"
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
    # 4: the log of rows removed (deleted, replaced, evicted), so that a start from an
    # index segment learns what left after it without reading every row.
    4: (_REMOVED_TABLE, _REMOVED_INDEX),
}
# Changes of at most this many callers share a transaction: large enough that a burst of
# small inserts costs one fsync, small enough that one transaction never holds the writer
# for long.
GROUP_COMMIT_MAX_CHANGES = 512
Synchronous = Literal["FULL", "NORMAL"]
Change = Callable[[sqlite3.Connection], object]
T = TypeVar("T")


# Not frozen: a frozen dataclass sets each field through object.__setattr__, a slow path
# for a record changed on every write.
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


PAGE_SIZE = 16_384

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
_SCHEMA += f"{_REMOVED_TABLE};\n{_REMOVED_INDEX};\n"


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
        self.segments = SegmentStore(segments_beside(path)) if segments == "beside" else segments
        path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = self._open()
        # Each reading thread's own connection (read_texts), closed with the store.
        self._readers = threading.local()
        self._readers_lock = threading.Lock()
        self._reader_connections: list[sqlite3.Connection] = []
        self._changes: queue.SimpleQueue[Queued | None] = queue.SimpleQueue()
        self._checking = True  # PRAGMA foreign_keys, as _open left it
        self._observe_commit: CommitObserver = _ignore_commit
        self.eviction_seconds = 0.0  # CPU time of the evictions' changes (writer thread)
        self._writer = threading.Thread(target=self._write_loop, name="sqlite-writer", daemon=True)
        self._writer.start()

    def _open(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            # A new database's pages (an existing one keeps its own): the kept texts (3 KB
            # a row beside its fingerprints) fit a 16 KB page where a 4 KB one chains two
            # overflow pages a row, so a row is written and read by primary key (a search's
            # candidates) about twice as fast (docs/journal.md, "Issue 42").
            connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
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
            # No integrity check of the whole file here: it reads every page, which at
            # millions of documents is most of a start (docs/journal.md, "Issue 27"), where
            # a start from segments reads a few. SQLite refuses a damaged page when it reads
            # it; ``integrity`` (neardup check) reads them all.
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
            db.execute("DELETE FROM removed WHERE collection = ?", (name,))
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
            self._log_removed(db, name, rows.tolist() + eviction.named)
            _set_mark(db, name, eviction.expired_through)
            db.execute(
                "UPDATE collections SET next_row = max(next_row, ?) WHERE name = ?",
                (eviction.next_row, name),
            )
            self.eviction_seconds += time.thread_time() - started

        return self._enqueue(evict, checked=False)

    def delete_documents(self, name: str, rows: list[int]) -> None:
        pairs = [(name, row) for row in rows]

        def delete(db: sqlite3.Connection) -> None:
            # The row stays, without its fingerprints: its id may name a cluster.
            db.executemany(_MARK_DELETED, pairs)
            self._log_removed(db, name, rows)

        self._submit(delete)

    def _log_removed(self, db: sqlite3.Connection, name: str, rows: list[int]) -> None:
        """Rows removed, in the transaction that removes them: what a start from a segment
        taken before must take out (only where segments are kept: nothing prunes the log
        otherwise)."""
        if self.segments is not None and rows:
            db.executemany(
                "INSERT INTO removed (collection, row) VALUES (?, ?)", [(name, r) for r in rows]
            )

    def removal_mark(self) -> int:
        """The last entry of the removal log committed so far (0: none ever)."""
        found = self._read(
            lambda c: c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'removed'").fetchone()
        )
        return 0 if found is None else int(found[0])

    def forget_removals(self, name: str, through: int) -> None:
        """A segment that reflects the removals up to ``through`` is written: their
        entries are not needed any more (queued, not waited for)."""
        self._enqueue(
            lambda db: db.execute(
                "DELETE FROM removed WHERE collection = ? AND seq <= ?", (name, through)
            ),
            checked=False,
        )

    # ------------------------------------------------------------------ reads

    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        """Every collection and its documents, columns built with numpy, not row by row,
        from one snapshot of the database (a read transaction on a connection of its own:
        another process may be writing, as the service does under ``neardup export``).
        ``saved_rows(name, config)``: the row below which a collection's segment holds the
        fingerprints: they are not read (zeros). Texts only with ``texts``."""
        return self._read(lambda connection: load_collections(connection, saved_rows, texts=texts))

    def load_collection(
        self, name: str, covered: Covered | None = None, *, texts: bool = True
    ) -> StoredCollection:
        """One collection with every fingerprint (a rebuild after a damaged segment), or
        around what a segment ``covered``; texts only with ``texts``."""
        for stored in self._read(
            lambda connection: load_collections(
                connection, lambda n, c: covered, name=name, texts=texts
            )
        ):
            return stored
        raise StoreDamaged(f"collection {name!r} vanished while loading")

    def integrity(self) -> str:
        """SQLite's check of every page of the database: "ok", or what is wrong."""
        try:
            found = self._read(lambda c: c.execute("PRAGMA quick_check").fetchall())
        except sqlite3.DatabaseError as error:
            return str(error)
        problems = [str(row[0]) for row in found]
        return "ok" if problems == ["ok"] else "; ".join(problems)

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

    def read_texts(self, name: str, rows: list[int]) -> list[str | None]:
        """The texts of rows, in order (Store.read_texts): one statement by primary key
        on the calling thread's own connection (WAL: beside the writer, seeing what is
        committed). O(rows log N), a few pages each, from the OS's cache when warm."""
        if not rows:
            return []
        marks = ", ".join("?" * len(rows))
        try:
            found = dict(
                self._reader().execute(
                    f"SELECT row, text FROM documents WHERE collection = ? AND row IN ({marks})",
                    (name, *rows),
                )
            )
        except sqlite3.Error as error:  # a search answers 503 storage_unavailable, not 500
            raise StorageUnavailable(f"could not read texts from {self.path}: {error}") from error
        return [found.get(row) for row in rows]

    def _reader(self) -> sqlite3.Connection:
        """This thread's read connection, opened on its first read."""
        connection: sqlite3.Connection | None = getattr(self._readers, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA query_only=ON")
            self._readers.connection = connection
            with self._readers_lock:
                self._reader_connections.append(connection)
        return connection

    def close(self) -> None:
        self._changes.put(None)
        self._writer.join()
        self._connection.close()
        with self._readers_lock:
            for connection in self._reader_connections:
                connection.close()
            self._reader_connections.clear()
