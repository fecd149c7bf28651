"""Reading a SQLite store's collections for a start: columns built by numpy from
SQLite's aggregates, no Python tuple a row, and around an index segment only what it
does not hold (app/storage/sqlite.py writes what this reads)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import numpy as np
import numpy.typing as npt

from app.core.paged_list import PackedStrings
from app.core.reservations import reserved_rows
from app.errors import StoreDamaged
from app.storage.base import (
    SPOT_CHECK_ROWS,
    Covered,
    DocumentBatch,
    SavedRows,
    StoredCollection,
    no_saved_rows,
    not_among,
)

# Documents read at a time: the peak of row tuples (~2 KB each with a MinHash signature
# and a 3 KB text) is this many, not the collection's.
LOAD_CHUNK_ROWS = 16_384

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
        self._id_bytes: list[npt.NDArray[np.uint8]] = []  # each range's ids, end to end
        self._id_lengths: list[npt.NDArray[np.int64]] = []
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
        # Packed, not a Python string an id: UTF-8 has a zero byte only for a NUL.
        encoded = np.frombuffer(ids.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        separators = np.flatnonzero(encoded == 0)
        if len(separators) == number - 1:
            self._id_bytes.append(encoded[encoded != 0])
            self._id_lengths.append(np.diff(separators, prepend=-1, append=len(encoded)) - 1)
        else:  # an imported id with a NUL in it: read them one by one
            names = [
                found
                for (found,) in connection.execute(
                    "SELECT id FROM documents WHERE collection = ? AND deleted = 0 "
                    "AND row >= ? AND row < ? ORDER BY row",
                    (name, start, end),
                )
            ]
            packed = PackedStrings.of(names)
            self._id_bytes.append(packed.data)
            self._id_lengths.append(np.diff(packed.ends, prepend=0))
        if not metadata.strip("\0"):
            self.metadata.extend([None] * number)  # none has metadata: the usual case
        else:
            self.metadata.extend(json.loads(m) if m else None for m in metadata.split("\0"))
        self.done = until

    def ids(self) -> PackedStrings:
        """Every id read, packed (16 bytes and its text an id; a list of Python strings
        held some 70 more at the peak of a rebuild)."""
        data = np.concatenate(self._id_bytes) if self._id_bytes else np.zeros(0, np.uint8)
        lengths = np.concatenate(self._id_lengths) if self._id_lengths else np.zeros(0, np.int64)
        self._id_bytes, self._id_lengths = [], []
        return PackedStrings(data, np.cumsum(lengths))


def _texts(
    connection: sqlite3.Connection, name: str, rows: npt.NDArray[np.int64], with_texts: bool
) -> tuple[list[str | None] | None, list[str | None] | None]:
    """(texts, shorts) of the live documents ``rows``, each None where no document has
    one (texts: or where not ``with_texts``): only the rows that have either are fetched,
    in one pass."""
    texts: list[str | None] = [None] * len(rows)
    shorts: list[str | None] = [None] * len(rows)
    has_text = has_short = False
    cursor = connection.execute(
        "SELECT row, text, short FROM documents WHERE collection = ? AND deleted = 0 "
        "AND row >= ? AND (text IS NOT NULL OR short IS NOT NULL) ORDER BY row"
        if with_texts
        else "SELECT row, NULL, short FROM documents WHERE collection = ? AND deleted = 0 "
        "AND row >= ? AND short IS NOT NULL ORDER BY row",
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


def load_collections(
    connection: sqlite3.Connection,
    saved_rows: SavedRows = no_saved_rows,
    name: str | None = None,
    texts: bool = True,
) -> list[StoredCollection]:
    """Every collection (or the one ``name``d) with its live documents; their texts only
    with ``texts`` (a service's start reads none: a collection reads a kept text when it
    needs it)."""
    collections = connection.execute(
        "SELECT name, config, expired_timestamp, expired_row, next_row FROM collections "
        "WHERE ?1 IS NULL OR name = ?1 ORDER BY name",
        (name,),
    )
    loaded = []
    for name, config_text, expired_timestamp, expired_row, next_floor in collections.fetchall():
        config = json.loads(config_text)
        covered = saved_rows(name, config)
        documents = _load_documents(connection, name, config, covered, texts)
        removed = np.zeros(0, dtype=np.int64)
        if covered is not None:
            removed = np.array(
                [
                    row
                    for (row,) in connection.execute(
                        "SELECT row FROM removed WHERE collection = ? AND seq > ?",
                        (name, covered.removed_through),
                    )
                ],
                dtype=np.int64,
            )
        # Clusters named by a row that is not live: few, looked up by primary key (a
        # segment holds the rows below its own, and the names of their clusters).
        below = 0 if covered is None else covered.rows_below
        orphans = [r for r in not_among(documents.clusters, documents.rows).tolist() if r >= below]
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
                below,
                removed,
            )
        )
    return loaded


def _load_documents(
    connection: sqlite3.Connection,
    name: str,
    config: dict[str, Any],
    covered: Covered | None,
    with_texts: bool = True,
) -> DocumentBatch:
    """A collection's live documents as columns. With a segment (``covered``) only the
    last SPOT_CHECK_ROWS live documents below its rows are read (no text below: a
    collection reads a kept text when it verifies it); from there on, in up
    to three passes: the records (ids, times, clusters, metadata) aggregated by SQLite
    into one string a column per range of rows, parsed by numpy (no Python tuple a row,
    which was most of a load: docs/journal.md, "Issue 27"); the fingerprints,
    LOAD_CHUNK_ROWS rows at a time, the signatures copied once, into an array their index
    can hold as it is; and texts, where the collection keeps any."""
    num_perm = int(config["minhash"]["num_perm"]) if config["minhash"]["enabled"] else 0
    # Apart: SQLite reads one end of the primary key for each, where both at once scan.
    (low,) = connection.execute(
        "SELECT min(row) FROM documents WHERE collection = ?", (name,)
    ).fetchone()
    (high,) = connection.execute(
        "SELECT max(row) FROM documents WHERE collection = ?", (name,)
    ).fetchone()
    first = 0
    if covered is not None:
        spot = connection.execute(
            "SELECT min(row) FROM (SELECT row FROM documents WHERE collection = ? AND "
            "deleted = 0 AND row < ? ORDER BY row DESC LIMIT ?)",
            (name, covered.rows_below, SPOT_CHECK_ROWS),
        ).fetchone()[0]
        first = covered.rows_below if spot is None else int(spot)
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
            minhash[done:end] = np.frombuffer(b"".join(columns[2]), np.uint32).reshape(-1, num_perm)
        exact[done:end] = np.frombuffer(b"".join(columns[3]), np.uint64).reshape(-1, 2)
        done = end
        del chunk, columns
    if done != count:
        raise StoreDamaged(f"{name}: {done} fingerprints read of {count}")
    texts, shorts = _texts(connection, name, rows, with_texts)
    documents = DocumentBatch(
        ids=records.ids(),
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
    return documents
