"""The store's own RESP: lookups encoded by numpy (app/backends/redis/store/lookups.py) and batches
read by one hiredis Reader a connection (app/backends/redis/store/wire.py), against independent
references: hiredis's packing of the same commands built as tuples from
PrefixTable.bounds and PrefixTable.key, and redis-py's own replies to the same commands
on real servers (a standalone one and a 3-primary cluster).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

import hiredis
import redis
from redis.cluster import RedisCluster

from app.backends.redis.store import lookups as lookups_module
from app.backends.redis.store import wire
from app.backends.redis.store.connect import connect
from app.backends.redis.store.grams import GramTable
from app.backends.redis.store.layout import Layout, PrefixTable, exact_extra
from app.backends.redis.store.lookups import LookupTables, RangeLookups
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Wire, pack, unpack
from tests.backends.redis.test_redis_store import Corpus, documents
from tests.redis_servers import RedisClusterServers, RedisServer

_names = itertools.count()
FEW_LOOKUPS = lookups_module._FEW_LOOKUPS


@pytest.fixture(params=["standalone", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    servers: RedisServer | RedisClusterServers = request.getfixturevalue(
        "redis_server" if request.param == "standalone" else "redis_cluster"
    )
    made = connect(servers.url)
    yield made
    made.close()


def reference(
    tables: list[PrefixTable], low: np.ndarray, high: np.ndarray | None, extra: np.ndarray | None
) -> list[tuple[Any, ...]]:
    """The lookups as tuples, lane-major, as the store built them before: forward, or
    backward (REV, the bounds swapped) when the key is in the upper half of its shard."""
    commands = []
    for lane, table in enumerate(tables):
        lows = np.ascontiguousarray(low[:, lane])
        highs = lows if high is None else np.ascontiguousarray(high[:, lane])
        bounds = table.bounds(lows, highs, extra if table.extra_bytes else None)
        for key, shard, (lo, hi) in zip(
            lows.tolist(), table.shards(lows).tolist(), bounds, strict=True
        ):
            name = table.key(shard)
            if (key >> (63 - table.shard_bits)) & 1:
                commands.append(("ZRANGE", name, hi, lo, "BYLEX", "REV"))
            else:
                commands.append(("ZRANGE", name, lo, hi, "BYLEX"))
    return commands


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(1, 5),
    shard_bits=st.integers(0, 24),
    blocks=st.sampled_from([None, 5, 6]),
    max_distance=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_lookups_are_the_tuples_packed_by_hiredis(
    count: int, shard_bits: int, blocks: int | None, max_distance: int, seed: int
) -> None:
    """Every method's commands, byte for byte, and the keys a cluster routes them by;
    tables of mixed shard bits (short SimHash prefixes) included."""
    if blocks is not None and blocks <= max_distance:
        blocks = max_distance + 1
    rng = np.random.default_rng(seed)
    layout = Layout(
        f"c{next(_names)}", max_distance=max_distance, blocks=blocks, shard_bits=shard_bits
    )
    simhash = rng.integers(0, 2**64, count, dtype=np.uint64)
    exact = rng.integers(0, 2**64, (count, 2), dtype=np.uint64)
    signatures = rng.integers(0, 2**32, (count, layout.num_perm), dtype=np.uint32)
    permuted = layout.permute(simhash)
    masks = layout.prefix_masks()
    cases = [
        ([layout.exact_table], exact[:, :1], None, exact_extra(exact)),
        (layout.simhash_tables, permuted & masks, (permuted & masks) | ~masks, None),
        (layout.band_tables, layout.band_keys(signatures), None, None),
    ]
    for (tables, low, high, extra), few in itertools.product(cases, [0, 10**6]):
        lookups_module._FEW_LOOKUPS = few  # numpy, or Python ints
        try:
            lookups = RangeLookups(count, keyed=True)
            lookups.add(LookupTables("m", tables), low, high, extra)
        finally:
            lookups_module._FEW_LOOKUPS = FEW_LOOKUPS
        expected = reference(tables, low, high, extra)
        assert lookups.packed == [hiredis.pack_command(c) for c in expected]
        assert lookups.keys == [c[1] for c in expected]
        assert [tuple(unpack(p)) for p in lookups.packed] == [
            tuple(a if isinstance(a, bytes) or i == 0 else a.encode() for i, a in enumerate(c))
            for c in expected
        ]


@pytest.mark.parametrize("few", [False, True])
def test_answers_are_redis_pys_replies_decoded(
    client: Client, few: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real server, the members every method's lookups answer (through the wire, in
    both directions) are those of redis-py's own replies to forward lookups, decoded
    by PrefixTable.decode; and a search finds the stored documents it must. Commands
    encoded and answers decoded by numpy, and by Python ints (``few``: what a search
    of one text does)."""
    monkeypatch.setattr(lookups_module, "_FEW_LOOKUPS", 10**6 if few else 0)
    monkeypatch.setattr(lookups_module, "_FEW_MEMBERS", 10**6 if few else 0)
    rng = np.random.default_rng(3)
    layout = Layout(f"lookups{next(_names)}", num_perm=32, threshold=0.75, shard_bits=4, groups=8)
    store = RedisStore(client, layout)
    store.setup()
    corpus = Corpus(rng)
    sim, sig, ex = corpus.make(400)
    store.insert(documents([f"d{i}" for i in range(400)], sim, sig, ex))
    corpus.remember(sim, sig, ex)
    qs, qsig, qex = corpus.make(25)
    permuted = layout.permute(qs)
    masks = layout.prefix_masks()
    cases = [
        ([layout.exact_table], qex[:, :1], None, exact_extra(qex)),
        (layout.simhash_tables, permuted & masks, (permuted & masks) | ~masks, None),
        (layout.band_tables, layout.band_keys(qsig), None, None),
    ]
    found = 0
    for tables, low, high, extra in cases:
        lookups = RangeLookups(len(qs), keyed=isinstance(client, RedisCluster))
        lookups.add(LookupTables("m", tables), low, high, extra)
        replies = store.wire.send_packed(lookups.packed, lookups.keys or None)
        (hits,) = lookups.answers(replies) or [None]
        ours = set()
        if hits is not None:
            ours = set(
                zip(
                    hits.queries.tolist(),
                    hits.lanes.tolist(),
                    hits.keys.tolist(),
                    [bytes(e) for e in hits.extra],
                    hits.rows.tolist(),
                    strict=True,
                )
            )
        theirs = set()
        for lane, table in enumerate(tables):
            lows = np.ascontiguousarray(low[:, lane])
            highs = lows if high is None else np.ascontiguousarray(high[:, lane])
            bounds = table.bounds(lows, highs, extra if table.extra_bytes else None)
            for q, (shard, (lo, hi)) in enumerate(
                zip(table.shards(lows).tolist(), bounds, strict=True)
            ):
                members = client.execute_command("ZRANGE", table.key(shard), lo, hi, "BYLEX")
                keys, extra_bytes, rows = table.decode(shard, members)
                theirs |= {
                    (q, lane, k, bytes(e), r)
                    for k, e, r in zip(keys.tolist(), extra_bytes, rows.tolist(), strict=True)
                }
        assert ours == theirs
        found += len(ours)
    assert found > 25, "the planted near copies were not found"
    result = store.search(qs, qsig, qex)
    assert len(result.simhash) and len(result.minhash) and len(result.exact)


def raw_reply(client: Client, command: tuple[Any, ...]) -> Any:
    """redis-py's own parsing of a command's reply (no response callback), on a
    connection of the node that holds its key; an error reply as its exception."""
    if isinstance(client, RedisCluster):
        node = client.nodes_manager.get_node_from_slot(client.keyslot(wire.key_of(command)))
        pool = client.get_redis_connection(node).connection_pool
    else:
        pool = client.connection_pool
    connection: Any = pool.get_connection()
    try:
        connection.send_command(*command)
        try:
            return connection.read_response()
        except redis.ResponseError as error:
            return error
    finally:
        pool.release(connection)


def test_replies_are_redis_pys(client: Client) -> None:
    """Every kind of reply the store reads (bulk, integer, nil, arrays, nested arrays, a
    script's answers, a reply over many socket reads) as redis-py parses it; an error
    reply raised after the others are read, the connection still in step."""
    tag = f"{{wire{next(_names)}}}"
    big = bytes(range(256)) * 1024  # 256 KB: several reads of the socket
    client.execute_command("HSET", tag + "h", "a", "1", "b", big)
    client.execute_command("ZADD", tag + "z", 0, b"\x00\xff", 0, b"m")
    commands: list[tuple[Any, ...]] = [
        ("HGET", tag + "h", "b"),
        ("HMGET", tag + "h", "a", "nope", "b"),
        ("HGETALL", tag + "h"),
        ("ZRANGE", tag + "z", "-", "+", "BYLEX"),
        ("ZRANGE", tag + "z", "+", "-", "BYLEX", "REV"),
        ("GET", tag + "missing"),
        ("ZRANGE", tag + "z", 0, -1, "WITHSCORES"),
        ("EVAL", "return {1, {2, 'x'}, false}", 1, tag + "h"),
        ("ZRANGE", tag + "z", "-", "+", "BYLEX", "LIMIT", 0, 1),
    ]
    fast = Wire(client)
    for _ in range(2):  # the second on the kept connection
        theirs = [raw_reply(client, c) for c in commands]
        ours = fast.send(commands)
        assert ours == theirs
        assert ours[7] == [1, [2, b"x"], None]
    assert fast.send([("HINCRBY", tag + "i", "n", 3)] * 2) == [3, 6]
    assert raw_reply(client, ("HINCRBY", tag + "i", "n", 3)) == 9
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        fast.send([("GET", tag + "z"), ("HGET", tag + "h", "a")])
    error = raw_reply(client, ("GET", tag + "z"))
    assert isinstance(error, redis.ResponseError) and "WRONGTYPE" in str(error)
    assert fast.send([("HGET", tag + "h", "a")]) == [b"1"]  # the replies after were read


def test_a_connection_closed_by_the_server_is_replaced(redis_server: RedisServer) -> None:
    """A kept connection that the server closed between batches (a restart, CLIENT KILL,
    its idle timeout) is noticed before it is written to, and a new one is taken: the
    batch succeeds, as redis-py's pool checkout would have made it."""
    client = connect(redis_server.url)
    fast = Wire(client)
    (kept,) = fast.send([("CLIENT", "ID")])
    assert fast.send([("CLIENT", "ID")]) == [kept]  # the same connection, kept
    killer = redis.Redis(port=redis_server.port)
    assert killer.execute_command("CLIENT", "KILL", "ID", kept) == 1
    (now,) = fast.send([("CLIENT", "ID")])
    assert now != kept
    client.close()
    assert fast.send([("PING",)]) == [b"PONG"]  # disconnected by close(): reconnected


def test_a_timeout_drops_the_connection(redis_server: RedisServer) -> None:
    """A batch that times out raises redis-py's TimeoutError; its connection, with a
    reply still to come, is not used again."""
    client = redis.Redis(port=redis_server.port, socket_timeout=0.2)
    fast = Wire(client)
    with pytest.raises(redis.TimeoutError):
        fast.send([("BLPOP", "wire-never", 1)])
    assert fast.send([("PING",), ("ECHO", "x")]) == [b"PONG", b"x"]
    client.execute_command("RPUSH", "wire-never", "late")  # not read by the dropped one
    assert client.execute_command("LPOP", "wire-never") == b"late"


def test_concurrent_batches_use_their_own_connections(redis_server: RedisServer) -> None:
    """Threads sending at once through wires of one client never read each other's
    replies."""
    client = connect(redis_server.url)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        fast = Wire(client)
        try:
            for i in range(300):
                value = b"%d-%d" % (n, i)
                assert fast.send([("ECHO", value), ("ECHO", value + b"!")]) == [
                    value,
                    value + b"!",
                ]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_a_command_sent_to_the_wrong_node_follows_moved(
    redis_cluster: RedisClusterServers,
) -> None:
    """With the client's slot map wrong (a slot moved), the node answers MOVED and the
    command is sent again where it belongs, through redis-py's client."""
    client = connect(redis_cluster.url)
    assert isinstance(client, RedisCluster)
    key = b"{moved}k"
    client.execute_command("SET", key, b"v")
    slot = client.keyslot(key)
    manager = client.nodes_manager
    right = manager.get_node_from_slot(slot)
    wrong = next(n for n in client.get_primaries() if n.name != right.name)
    manager.slots_cache[slot] = [wrong]
    fast = Wire(client)
    assert fast.send([("GET", key), ("ECHO", b"x")]) == [b"v", b"x"]
    assert manager.get_node_from_slot(slot).name == right.name  # the map was refreshed
    client.close()


def _waits_served(node: Any) -> int:
    stats = node.redis_connection.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_a_durable_write_sent_to_the_wrong_node_waits_where_it_ran(
    redis_cluster: RedisClusterServers,
) -> None:
    """A durable batch (WAIT 1) whose write is answered MOVED: the write is sent again to
    the slot's owner followed by that node's WAIT, which counts its replica; the node
    that refused it holds nothing."""
    client = connect(redis_cluster.url)
    assert isinstance(client, RedisCluster)
    key = b"{durable-moved}k"
    slot = client.keyslot(key)
    manager = client.nodes_manager
    right = manager.get_node_from_slot(slot)
    wrong = next(n for n in client.get_primaries() if n.name != right.name)
    waits_before = _waits_served(right)
    manager.slots_cache[slot] = [wrong]
    durable = Wire(client, wait_replicas=1)
    assert durable.send([("SET", key, b"v1")], durable=True) == [b"OK"]
    assert _waits_served(right) == waits_before + 1
    assert client.execute_command("GET", key) == b"v1"
    assert manager.get_node_from_slot(slot).name == right.name
    client.close()


def test_pack_and_unpack() -> None:
    packed = pack(("FCALL", "f", 2, b"{a}k", b"{a}l", 1.5))
    assert packed == hiredis.pack_command(("FCALL", "f", 2, b"{a}k", b"{a}l", 1.5))
    assert unpack(packed) == ["FCALL", b"f", b"2", b"{a}k", b"{a}l", b"1.5"]
    with pytest.raises(ValueError, match="not one packed command"):
        unpack(packed + packed)
    assert wire.key_of(("FCALL", "f", 2, b"{a}k")) == b"{a}k"


@settings(max_examples=100, deadline=None)
@given(
    shard_bits=st.integers(0, 24),
    low_size=st.integers(-3, 70_000),
    span=st.integers(0, 70_000),
    limit=st.sampled_from([None, 1, 37, 1001]),
    seed=st.integers(0, 2**32 - 1),
)
def test_gram_lookups_packed_are_the_tuples_packed_by_hiredis(
    shard_bits: int, low_size: int, span: int, limit: int | None, seed: int
) -> None:
    """GramTable.packed_lookups, byte for byte: the tuples of ``lookups`` packed by hiredis,
    REV with the bounds swapped for a key in the upper half of its shard; its keys the
    sets' names. Keys holding '%' bytes included."""
    table = GramTable(b"{nd:c%:t", shard_bits, b"p")
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64, 12, dtype=np.uint64)
    keys[:3] = [0x2525252525252525, 0, 2**64 - 1]
    packed = table.packed_lookups(keys, low_size, low_size + span, limit)
    expected = []
    tuples = table.lookups(keys, low_size, low_size + span, limit)
    for key, command in zip(keys.tolist(), tuples, strict=True):
        name, low, high, *tail = command[1:]
        if (key >> (63 - shard_bits)) & 1:
            tail.insert(1, "REV")
            expected.append(("ZRANGE", name, high, low, *tail))
        else:
            expected.append(tuple(command))
    assert packed.commands == [hiredis.pack_command(c) for c in expected]
    assert packed.keys == [c[1] for c in expected]


def test_gram_lookups_packed_find_what_the_tuples_find(client: Client) -> None:
    """On a real server: every lookup's members, as a set, those of the tuple's, and a
    lookup of a key held more often than its limit reaches the limit both ways."""
    table = GramTable(f"{{nd:g{next(_names)}:t".encode(), 3, b"p")
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**64, 40, dtype=np.uint64)
    held = np.repeat(keys, 30)
    sizes = rng.integers(1, 500, len(held))
    rows = np.arange(len(held))
    commands = table.writes("ZADD", held, sizes, rows)
    probes = np.concatenate([keys, rng.integers(0, 2**64, 20, dtype=np.uint64)])
    made = Wire(client)
    made.send(commands)
    for limit in (None, 10):
        by_tuples = made.send(table.lookups(probes, 0, 65_535, limit))
        packed = table.packed_lookups(probes, 0, 65_535, limit)
        by_packed = made.send_packed(packed.commands, packed.keys if made.cluster else None)
        assert [len(r) for r in by_packed] == [len(r) for r in by_tuples]
        assert sum(len(r) for r in by_packed) == 40 * (30 if limit is None else limit)
        if limit is None:
            assert [set(r) for r in by_packed] == [set(r) for r in by_tuples]


@settings(max_examples=100, deadline=None)
@given(
    shard_bits=st.integers(0, 24),
    count=st.integers(1, 300),
    hosted=st.booleans(),
    command=st.sampled_from(["ZADD", "ZREM"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_gram_writes_are_every_entry_in_its_shards_set(
    shard_bits: int, count: int, hosted: bool, command: str, seed: int
) -> None:
    """GramTable.writes against entries made one at a time: each set's command holds
    exactly the members (key, capped size, row[, host], big-endian) of the keys whose top
    ``shard_bits`` bits name it, one command a set (ZADD with score 0)."""
    table = GramTable(b"{nd:w:t", shard_bits, b"p")
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64, count, dtype=np.uint64)
    keys[: count // 3] &= np.uint64(0x00FF_FFFF_FFFF_FFFF)  # crowded low shards
    sizes = rng.integers(0, 70_000, count)
    rows = rng.integers(0, 2**32, count)
    hosts = rng.integers(0, 2**32, count) if hosted else None
    expected: dict[bytes, list[bytes]] = {}
    for at, key in enumerate(keys.tolist()):
        member = key.to_bytes(8, "big") + min(int(sizes[at]), 65_535).to_bytes(2, "big")
        member += int(rows[at]).to_bytes(4, "big")
        if hosts is not None:
            member += int(hosts[at]).to_bytes(4, "big")
        shard = key >> (64 - shard_bits) if shard_bits else 0
        expected.setdefault(b"{nd:w:t%x}p" % shard, []).append(member)
    commands = table.writes(command, keys, sizes, rows, hosts)
    assert len(commands) == len(expected)
    for written in commands:
        assert written[0] == command
        members = list(written[3::2]) if command == "ZADD" else list(written[2:])
        if command == "ZADD":
            assert set(written[2::2]) == {0}
        assert sorted(members) == sorted(expected[written[1]])
