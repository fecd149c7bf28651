"""The Redis backend's _check() (app/backends/redis/check.py): quiet on a collection that
inserts, replacements, deletes and short texts left consistent, and loud on each kind of
damage it is there to catch (each planted by hand in Redis's keys)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from app.backends.redis.collection import RedisCollection
from app.backends.redis.records import Held
from app.backends.redis.resolved import Resolved
from app.backends.redis.store.store import RedisStore
from devkit.corpus import english_like_text, mutate_words
from tests.conftest import make_client
from tests.redis_servers import RedisServer, emptied

Damage = Callable[[Resolved, RedisStore], None]


@contextlib.contextmanager
def _filled(url: str, tmp_path: Path) -> Iterator[RedisCollection]:
    """A collection with clusters, a replacement, a delete and short texts."""
    emptied(url)
    with contextlib.contextmanager(make_client)(tmp_path, backend=url) as client:
        assert client.put("/v1/collections/c", json={}).status_code == 201
        base = english_like_text(random.Random(1), 300)
        documents: list[dict[str, Any]] = [
            {"id": "a", "text": base},
            {"id": "b", "text": base + " and one more line"},
            {"id": "c", "text": english_like_text(random.Random(2), 300)},
            {"id": "t1", "text": "Breaking: quake hits Tokyo"},
            {"id": "t2", "text": "Breaking: quake hits Tokyo, 5 dead"},
        ]
        answer = client.post("/v1/collections/c/documents/batch", json={"documents": documents})
        assert answer.status_code == 200
        rng = random.Random(3)
        client.put("/v1/collections/c/documents/a", json={"text": mutate_words(rng, base, 0.02)})
        assert client.delete("/v1/collections/c/documents/c").status_code == 204
        yield client.app.state.registry.get("c")  # type: ignore[attr-defined]


def _duplicates_off(resolved: Resolved, store: RedisStore) -> None:
    store.wire.send([("HINCRBY", resolved.counters_key(), "duplicates", 1)])


def _time_entry_gone(resolved: Resolved, store: RedisStore) -> None:
    (first,) = store.wire.send([("ZRANGE", resolved.time_key(), 0, 0)])
    store.wire.send([("ZREM", resolved.time_key(), first[0])])


def _stray_time_entry(resolved: Resolved, store: RedisStore) -> None:
    store.wire.send([("ZADD", resolved.time_key(), 0, b"\x00" * 8 + b"\x00" * 8 + b"ghost")])


def _left_its_cluster(resolved: Resolved, store: RedisStore) -> None:
    _, data = store.lookup(["b"])
    record = Held(data).record(0)
    store.wire.send([("ZREM", resolved.members_key(record.cluster), "b")])


def _ngram_entry_gone(resolved: Resolved, store: RedisStore) -> None:
    assert resolved.ngram is not None
    table = resolved.ngram.table
    for shard in range(1 << table.shard_bits):
        (entries,) = store.wire.send([("ZRANGE", table.key(shard), 0, 0)])
        if entries:
            store.wire.send([("ZREM", table.key(shard), entries[0])])
            return
    raise AssertionError("no n-gram entry to remove")


def _work_mark_left(resolved: Resolved, store: RedisStore) -> None:
    store.wire.send([("HSET", store.layout.group_keys(0)[3], b"\x00\x00\x00\x63", b"+")])


@pytest.mark.parametrize(
    "damage",
    [
        _duplicates_off,
        _time_entry_gone,
        _stray_time_entry,
        _left_its_cluster,
        _ngram_entry_gone,
        _work_mark_left,
    ],
)
def test_check_finds_what_was_damaged(
    redis_server: RedisServer, tmp_path: Path, damage: Damage
) -> None:
    with _filled(redis_server.url, tmp_path) as collection:
        collection._check()  # consistent as the service left it
        damage(*collection.opened())
        with pytest.raises(AssertionError):
            collection._check()
