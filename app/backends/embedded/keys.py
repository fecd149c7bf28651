"""The stored API keys of the embedded service: a SQLite file beside the database, or
memory (the memory store's services).

``keys.sqlite3`` is its own file so that the documents' database, its schema and its
backups hold no secrets' digests, and a key change never waits on a group commit. Every
record is the key's JSON (app/service/keys.py ``Grant.to_record``: the SHA-256 of the
key, never the key); ``version`` counts the changes, for the key ring's poll.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import orjson

from app.service.keys import Grant

KEYS_FILE = "keys.sqlite3"
BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys_version (
    one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL
);
INSERT OR IGNORE INTO api_keys_version VALUES (1, 0);
"""


class SQLiteKeyStore:
    """KeyStore in a SQLite file (WAL: the poll's read never waits for a write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.executescript(_SCHEMA)

    def version(self) -> int:
        with self._lock:
            row = self._connection.execute("SELECT version FROM api_keys_version").fetchone()
        return int(row[0])

    def load(self) -> list[Grant]:
        """Every key: O(number of keys)."""
        with self._lock:
            rows = self._connection.execute("SELECT record FROM api_keys").fetchall()
        return [Grant.from_record(orjson.loads(row[0])) for row in rows]

    def save(self, grant: Grant) -> None:
        record = orjson.dumps(grant.to_record())
        with self._lock, self._connection:
            self._connection.execute("BEGIN IMMEDIATE")
            self._connection.execute(
                "INSERT OR REPLACE INTO api_keys (id, record) VALUES (?, ?)", (grant.id, record)
            )
            self._connection.execute("UPDATE api_keys_version SET version = version + 1")

    def save_many(self, grants: list[Grant]) -> None:
        """Keys in one transaction, one version step (imports, benchmarks)."""
        rows = [(grant.id, orjson.dumps(grant.to_record())) for grant in grants]
        with self._lock, self._connection:
            self._connection.execute("BEGIN IMMEDIATE")
            self._connection.executemany(
                "INSERT OR REPLACE INTO api_keys (id, record) VALUES (?, ?)", rows
            )
            self._connection.execute("UPDATE api_keys_version SET version = version + 1")

    def delete(self, key_id: str) -> bool:
        with self._lock, self._connection:
            self._connection.execute("BEGIN IMMEDIATE")
            deleted = self._connection.execute("DELETE FROM api_keys WHERE id = ?", (key_id,))
            self._connection.execute("UPDATE api_keys_version SET version = version + 1")
        return deleted.rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class MemoryKeyStore:
    """KeyStore in memory: nothing survives the process."""

    def __init__(self) -> None:
        self._records: dict[str, Grant] = {}
        self._version = 0
        self._lock = threading.Lock()

    def version(self) -> int:
        return self._version

    def load(self) -> list[Grant]:
        with self._lock:
            return list(self._records.values())

    def save(self, grant: Grant) -> None:
        with self._lock:
            self._records[grant.id] = grant
            self._version += 1

    def delete(self, key_id: str) -> bool:
        with self._lock:
            found = self._records.pop(key_id, None) is not None
            self._version += 1
        return found

    def close(self) -> None:
        pass
