"""The wire on the event loop (app/backends/redis/store/loop_links.py, Wire.send_packed_async) and
reads written as steps (app/backends/redis/store/steps.py), against independent references on
real servers: redis-py's own replies to the same commands, the blocking wire's answers
to the same searches, and Redis's own view of the connections (CLIENT ID, CLIENT LIST).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

import redis
from redis.cluster import RedisCluster

from app.backends.redis.store.connect import connect
from app.backends.redis.store.layout import Layout
from app.backends.redis.store.loop_links import close_loop_links
from app.backends.redis.store.steps import Batch, run_async
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Command, Wire
from tests.backends.redis.test_redis_lookups import client, raw_reply
from tests.backends.redis.test_redis_store import Corpus, documents
from tests.redis_servers import RedisServer

__all__ = ["client"]  # a fixture, used by name

_names = itertools.count()


async def sent(wire: Wire, commands: list[Command]) -> list[Any]:
    batch = Batch.of(commands, cluster=wire.cluster)
    return await wire.send_packed_async(batch.packed, batch.keys, batch.durable)


def test_replies_on_the_loop_are_redis_pys(client: Client) -> None:
    """Every kind of reply (bulk, integer, nil, arrays, nested, a script's, one over many
    socket reads) as redis-py parses it, on a standalone server and across a cluster's
    nodes; an error reply raised after the others are read, the connection in step."""
    tag = f"{{loop{next(_names)}}}"
    big = bytes(range(256)) * 1024  # 256 KB: several reads of the socket
    client.execute_command("HSET", tag + "h", "a", "1", "b", big)
    client.execute_command("ZADD", tag + "z", 0, b"\x00\xff", 0, b"m")
    commands: list[Command] = [
        ("HGET", tag + "h", "b"),
        ("HMGET", tag + "h", "a", "nope", "b"),
        ("HGETALL", tag + "h"),
        ("ZRANGE", tag + "z", "+", "-", "BYLEX", "REV"),
        ("GET", tag + "missing"),
        ("EVAL", "return {1, {2, 'x'}, false}", 1, tag + "h"),
        *[("ECHO", f"{{other{n}}}") for n in range(6)],  # other slots: other nodes
    ]
    theirs = [raw_reply(client, c) for c in commands]
    wire = Wire(client)

    async def scenario() -> None:
        for _ in range(2):  # the second on the kept connections
            assert await sent(wire, commands) == theirs
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await sent(wire, [("GET", tag + "z"), ("HGET", tag + "h", "a")])
        assert await sent(wire, [("HGET", tag + "h", "a")]) == [b"1"]
        close_loop_links()

    asyncio.run(scenario())
    assert wire.on_loop and wire.round_trips == 4


def client_ids(client: Client) -> set[int]:
    listed = client.execute_command("CLIENT", "LIST").decode().splitlines()
    return {int(line.split()[0].removeprefix("id=")) for line in listed}


def test_gathered_batches_never_read_each_others_replies(redis_server: RedisServer) -> None:
    """Forty coroutines sending at once on one loop each get their own replies, on as
    many connections as were in flight together, kept for the next batches."""
    client = connect(redis_server.url)
    wire = Wire(client)

    async def worker(n: int) -> None:
        for i in range(40):
            value = b"%d-%d" % (n, i)
            assert await sent(wire, [("ECHO", value), ("ECHO", value + b"!")]) == [
                value,
                value + b"!",
            ]

    async def scenario() -> set[int]:
        await asyncio.gather(*(worker(n) for n in range(40)))
        ids = await asyncio.gather(*(sent(wire, [("CLIENT", "ID")]) for _ in range(40)))
        close_loop_links()
        return {i for (i,) in ids}

    kept = asyncio.run(scenario())
    assert 1 < len(kept) <= 41
    open_ids = {
        int(line.split()[0][3:])
        for line in client.execute_command("CLIENT", "LIST").decode().splitlines()
    }
    assert not kept & open_ids, "close_loop_links left connections open"
    client.close()


def test_a_connection_closed_by_the_server_is_replaced_on_the_loop(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    wire = Wire(client)
    killer = redis.Redis(port=redis_server.port)

    async def scenario() -> None:
        (kept,) = await sent(wire, [("CLIENT", "ID")])
        assert await sent(wire, [("CLIENT", "ID")]) == [kept]
        assert killer.execute_command("CLIENT", "KILL", "ID", kept) == 1
        for _ in range(100):  # the loop learns of the close when it reads the socket
            await asyncio.sleep(0)
        (now,) = await sent(wire, [("CLIENT", "ID")])
        assert now != kept
        close_loop_links()

    asyncio.run(scenario())
    client.close()


def test_a_timeout_or_a_cancellation_drops_the_connection(redis_server: RedisServer) -> None:
    """A batch that times out raises redis-py's TimeoutError, and a cancelled one (a client
    gone) is abandoned: neither connection, with a reply still to come, is used again."""
    client = redis.Redis(port=redis_server.port, socket_timeout=0.2)
    wire = Wire(client)
    key = f"loop-never{next(_names)}"

    async def scenario() -> None:
        with pytest.raises(redis.TimeoutError):
            await sent(wire, [("BLPOP", key, 1)])
        assert await sent(wire, [("PING",), ("ECHO", "x")]) == [b"PONG", b"x"]
        waiting = asyncio.ensure_future(sent(wire, [("BLPOP", key, 1)]))
        while not client.execute_command("CLIENT", "LIST", "TYPE", "normal").count(b"blpop"):
            await asyncio.sleep(0.001)  # until Redis holds the BLPOP (polled, not slept on)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await sent(wire, [("ECHO", "y")]) == [b"y"]
        close_loop_links()

    asyncio.run(scenario())
    client.execute_command("RPUSH", key, "late")  # read by no dropped connection
    assert client.execute_command("LPOP", key) == b"late"


def test_searches_on_the_loop_answer_as_in_a_thread(client: Client) -> None:
    """A store's searches driven on the loop (run_async of search_steps) answer what the
    blocking wire answers for the same queries: rows, scores and records; in a cluster
    too when the slot map is wrong (MOVED followed)."""
    rng = np.random.default_rng(5)
    layout = Layout(f"loop{next(_names)}", num_perm=32, threshold=0.75, shard_bits=4, groups=8)
    store = RedisStore(client, layout)
    store.setup()
    corpus = Corpus(rng)
    sim, sig, ex = corpus.make(300)
    store.insert(documents([f"d{i}" for i in range(300)], sim, sig, ex))
    corpus.remember(sim, sig, ex)
    queries = [corpus.make(1) for _ in range(12)]
    expected = [store.search(*q) for q in queries]
    if isinstance(client, RedisCluster):  # one slot map entry wrong: MOVED on the loop
        manager = client.nodes_manager
        slot = client.keyslot(layout.group_keys(0)[1])
        right = manager.get_node_from_slot(slot)
        manager.slots_cache[slot] = [n for n in client.get_primaries() if n.name != right.name][:1]

    async def scenario() -> list[Any]:
        answers = await asyncio.gather(
            *(run_async(store.search_steps(*q), store.wire) for q in queries)
        )
        close_loop_links()
        return list(answers)

    found = 0
    for ours, theirs in zip(asyncio.run(scenario()), expected, strict=True):
        for method in ("exact", "simhash", "minhash"):
            a, b = getattr(ours, method), getattr(theirs, method)
            assert a.positions.tolist() == b.positions.tolist()
            assert a.rows.tolist() == b.rows.tolist()
            assert a.values.tolist() == b.values.tolist()
            found += len(a)
        assert ours.rows.rows.tolist() == theirs.rows.rows.tolist()
        assert ours.rows.records == theirs.rows.records
    assert found > 12, "the planted near copies were not found"
