"""One server-side call a shard for many tokens' entries (``GramTable.range_reads``, the
``neardup_ranges_v1`` function) against the plain ``ZRANGE BYLEX`` of each token, its
members decoded by hand, on a standalone server and a 3-primary cluster: entries of both
widths (with and without a host's key), sizes inside and outside the range asked, tokens
held more often than the limit, tokens held by nothing, repeated tokens.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from app.backends.redis.store import functions
from app.backends.redis.store.connect import connect
from app.backends.redis.store.grams import MAX_SET_SIZE, GramTable
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Wire
from tests.redis_servers import RedisClusterServers, RedisServer

_names = itertools.count()


@pytest.fixture(params=["standalone", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    servers: RedisServer | RedisClusterServers = request.getfixturevalue(
        "redis_server" if request.param == "standalone" else "redis_cluster"
    )
    made = connect(servers.url)
    made.function_load(functions.SOURCE, replace=True)
    yield made
    made.close()


def by_hand(
    client: Client, table: GramTable, token: int, low: int, high: int, limit: int
) -> list[tuple[int, int, int]]:
    """(size, row, host) of a token's entries by one ZRANGE, each member cut by hand."""
    raw = token.to_bytes(8, "big")
    shard = token >> (64 - table.shard_bits) if table.shard_bits else 0
    members = client.execute_command(
        "ZRANGE", table.key(shard), b"[" + raw + low.to_bytes(2, "big"),
        b"[" + raw + high.to_bytes(2, "big") + b"\xff" * 5, "BYLEX", "LIMIT", 0, limit,
    )  # fmt: skip
    found = []
    for member in members:
        assert member[:8] == raw
        host = int.from_bytes(member[14:], "big") if len(member) == 18 else 0
        size, row = int.from_bytes(member[8:10], "big"), int.from_bytes(member[10:14], "big")
        found.append((size, row, host))
    return found


@pytest.mark.parametrize("shard_bits", [0, 3])
def test_range_reads_are_each_tokens_zrange(client: Client, shard_bits: int) -> None:
    chance = random.Random(shard_bits)
    table = GramTable(f"{{rg{next(_names)}:t".encode(), shard_bits, b"p")
    held = [chance.getrandbits(64) for _ in range(40)]
    wire = Wire(client)
    commands = []
    for number, token in enumerate(held):
        for copy in range(number % 7):  # 0 to 6 entries a token
            key = np.array([token], dtype=np.uint64)
            size, row = np.array([chance.choice([1, 5, 9])]), np.array([100 * number + copy])
            if copy % 2:  # an entry with a host's key beside one without
                commands += table.writes("ZADD", key, size, row, np.array([7 + copy]))
            else:
                commands += table.writes("ZADD", key, size, row)
    wire.send(commands)
    asked = [*held, *(chance.getrandbits(64) for _ in range(10)), held[5], held[5]]
    keys = np.array(asked, dtype=np.uint64)
    for low, high, limit, drop in ((0, MAX_SET_SIZE, 4, True), (2, 9, 5, False), (5, 5, 0, False)):
        reads = table.range_reads(keys, low, high, limit, drop_full=drop)
        counts, token, sizes, rows, hosts = reads.decode(wire.send(reads.commands))
        got = list(zip(token.tolist(), sizes.tolist(), rows.tolist(), hosts.tolist(), strict=True))
        expected_counts, expected = [], []
        for place, value in enumerate(asked):
            found = by_hand(client, table, value, low, high, limit or MAX_SET_SIZE)
            expected_counts.append(len(found))
            if not (drop and len(found) >= limit):
                expected += [(place, *entry) for entry in found]
        assert counts.tolist() == expected_counts
        assert got == expected
    empty = table.range_reads(np.zeros(0, dtype=np.uint64), 0, MAX_SET_SIZE, 4, drop_full=True)
    assert empty.commands == [] and empty.decode([])[0].tolist() == []
