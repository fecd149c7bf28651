"""The stored API keys of the Redis backend, shared by every process on the Redis.

Two keys in one hash slot (so a cluster runs the script on one node): ``{nd:keys}`` is a
hash of key id -> the key's JSON (app/service/keys.py ``Grant.to_record``: the SHA-256 of
the key, never the key), ``{nd:keys}:version`` counts the changes. A save or delete
writes both in one script, so a process that sees the new version loads the change.
"""

from __future__ import annotations

import orjson

from app.backends.redis.store.connect import connect
from app.backends.redis.store.types import Client
from app.service.keys import Grant

RECORDS_KEY = "{nd:keys}"
VERSION_KEY = "{nd:keys}:version"

_SAVE = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
"""
_DELETE = """
local deleted = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
return deleted
"""


class RedisKeyStore:
    """KeyStore over a ``redis://`` or ``redis-cluster://`` URL; its own connection, so
    that the key ring's poll never queues behind a collection's pipeline."""

    def __init__(self, url: str) -> None:
        self._client: Client = connect(url)

    def version(self) -> int:
        """One GET: what each process pays every poll."""
        value = self._client.get(VERSION_KEY)
        return int(value) if value is not None else 0

    def load(self) -> list[Grant]:
        """Every key, one HGETALL: O(number of keys)."""
        records = self._client.hgetall(RECORDS_KEY)
        return [Grant.from_record(orjson.loads(raw)) for raw in records.values()]

    def save(self, grant: Grant) -> None:
        record = orjson.dumps(grant.to_record())
        self._client.eval(_SAVE, 2, RECORDS_KEY, VERSION_KEY, grant.id, record)

    def delete(self, key_id: str) -> bool:
        return bool(self._client.eval(_DELETE, 2, RECORDS_KEY, VERSION_KEY, key_id))

    def close(self) -> None:
        self._client.close()
