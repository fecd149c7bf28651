"""The Redis store against brute force and the in-process indexes, on real redis-servers.

Seeded random sequences of inserts, replacements and removes, with many planted near
pairs; after each step every search (SimHash within k, MinHash LSH verified, exact) must
give exactly what a brute-force scan of the live documents gives, and what the in-process
HammingIndex, LSHIndex and ExactIndex give for the same rows. On a standalone server and
on a 3-primary cluster (tests/redis_servers.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from redis.cluster import RedisCluster

from app.backends.redis.store import functions, wire
from app.backends.redis.store.connect import cluster_nodes, connect
from app.backends.redis.store.layout import Layout, PrefixTable, group_of
from app.backends.redis.store.rows import pack_record
from app.backends.redis.store.store import NewDocuments, RedisStore, Status
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import ReplicasBehind, Wire
from app.core.exact import ExactIndex
from app.core.hamming import HammingIndex
from app.core.lsh import LSHIndex, min_matches
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.reference import agreeing

NUM_PERM = 32  # few values, so that a threshold of 0.75 is crossed often
THRESHOLD = 0.75
K = 3
_names = itertools.count()


def fresh_layout(**overrides: Any) -> Layout:
    """A layout of a collection no other test uses; few shard bits and groups, so that
    sets hold many members and lookups are real ranges inside them."""
    settings: dict[str, Any] = {
        "max_distance": K,
        "num_perm": NUM_PERM,
        "threshold": THRESHOLD,
        "shard_bits": 4,
        "groups": 8,
    }
    settings.update(overrides)
    return Layout(f"test{next(_names)}", **settings)


@pytest.fixture(params=["standalone", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    servers: RedisServer | RedisClusterServers = request.getfixturevalue(
        "redis_server" if request.param == "standalone" else "redis_cluster"
    )
    made = connect(servers.url)
    yield made
    made.close()


@dataclass
class Model:
    """The live documents by id, and the in-process indexes fed the same rows."""

    layout: Layout
    docs: dict[str, tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=dict)
    hamming: HammingIndex = field(init=False)
    lsh: LSHIndex = field(init=False)
    exact: ExactIndex = field(init=False)

    def __post_init__(self) -> None:
        self.hamming = HammingIndex(self.layout.max_distance, self.layout.blocks)
        self.lsh = LSHIndex(self.layout.threshold, self.layout.num_perm)
        self.exact = ExactIndex()

    def add(
        self, ids: list[str], rows: np.ndarray, sim: np.ndarray, sig: np.ndarray, ex: np.ndarray
    ) -> None:
        for i, doc in enumerate(ids):
            self.docs[doc] = (int(rows[i]), int(sim[i]), sig[i], ex[i])
        self.hamming.insert(sim, rows)
        self.lsh.insert(sig, rows)
        self.exact.insert(ex, rows)

    def drop(self, rows: list[int]) -> None:
        gone = set(rows)
        self.docs = {k: v for k, v in self.docs.items() if v[0] not in gone}
        array = np.array(rows, dtype=np.int64)
        self.hamming.delete(array)
        self.lsh.delete(array)
        self.exact.delete(array)


def pairs(rows: np.ndarray, values: np.ndarray) -> set[tuple[int, Any]]:
    return set(zip(rows.tolist(), values.tolist(), strict=True))


def brute_force(
    model: Model, sim: np.ndarray, sig: np.ndarray, ex: np.ndarray, distance: int
) -> list[tuple[set[tuple[int, int]], set[tuple[int, float]], set[int]]]:
    """Per query: (row, distance) within ``distance``, (row, score) sharing a whole band
    and verified, rows with the same exact hash; by scanning every live document."""
    held = list(model.docs.values())
    if not held:
        return [(set(), set(), set()) for _ in range(len(sim))]
    rows = np.array([h[0] for h in held], dtype=np.int64)
    stored_sim = np.array([h[1] for h in held], dtype=np.uint64)
    stored_sig = np.array([h[2] for h in held], dtype=np.uint32)
    stored_ex = np.array([h[3] for h in held], dtype=np.uint64)
    bands, width = model.layout.bands
    bar = min_matches(model.layout.threshold, model.layout.num_perm)
    out = []
    for q in range(len(sim)):
        distances = np.bitwise_count(stored_sim ^ sim[q]).astype(np.int64)
        equal = stored_sig == sig[q]
        by_band = equal[:, : bands * width].reshape(len(rows), bands, width)
        shares_band = by_band.all(axis=2).any(axis=1)
        agree = agreeing(stored_sig, sig[q])
        verified = shares_band & (agree >= bar)
        near = distances <= distance
        same = (stored_ex == ex[q]).all(axis=1)
        out.append(
            (
                pairs(rows[near], distances[near]),
                pairs(rows[verified], agree[verified] / model.layout.num_perm),
                set(rows[same].tolist()),
            )
        )
    return out


def check_searches(
    store: RedisStore,
    model: Model,
    sim: np.ndarray,
    sig: np.ndarray,
    ex: np.ndarray,
    distance: int | None = None,
) -> tuple[int, int, int]:
    """Assert every search equal to brute force and the in-process indexes; the pairs
    found by SimHash, MinHash and exact hash."""
    d = model.layout.max_distance if distance is None else distance
    result = store.search(sim, sig, ex, max_distance=d)
    ends, lsh_rows, lsh_scores = model.lsh.search_many(sig)
    lsh_at = np.repeat(np.arange(len(sim)), np.diff(ends, prepend=0))
    for q, (near, similar, same) in enumerate(brute_force(model, sim, sig, ex, d)):
        at = result.simhash.positions == q
        assert pairs(result.simhash.rows[at], result.simhash.values[at].astype(int)) == near
        at = result.minhash.positions == q
        assert pairs(result.minhash.rows[at], result.minhash.values[at]) == similar
        scores = result.minhash.values[at]
        assert np.all(np.diff(scores) <= 0), "best first"
        assert set(result.exact.rows[result.exact.positions == q].tolist()) == same
        # The in-process indexes, fed the same rows, answer the same.
        rows, distances = model.hamming.search(sim[q], d)
        assert pairs(rows, distances) == near
        in_process = lsh_at == q
        assert pairs(lsh_rows[in_process], lsh_scores[in_process]) == similar
        assert set(model.exact.search(ex[q]).tolist()) == same
    # Every row found resolves to its document.
    by_row = {v[0]: k for k, v in model.docs.items()}
    for row, doc_id in zip(result.rows.rows.tolist(), result.rows.ids, strict=True):
        assert by_row[row] == doc_id
    return len(result.simhash), len(result.minhash), len(result.exact)


@dataclass
class Corpus:
    """Fingerprints with planted near pairs: each new document copies an earlier one
    (or a query copies a stored one) often, with a few SimHash bits flipped, some
    signature values replaced, sometimes the same exact hash."""

    rng: np.random.Generator
    sim: list[int] = field(default_factory=list)
    sig: list[np.ndarray] = field(default_factory=list)
    ex: list[np.ndarray] = field(default_factory=list)

    def make(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = self.rng
        sims, sigs, exs = [], [], []
        for _ in range(count):
            if self.sim and rng.random() < 0.6:
                source = int(rng.integers(len(self.sim)))
                value = self.sim[source]
                for bit in rng.choice(64, size=int(rng.integers(0, K + 3)), replace=False):
                    value ^= 1 << int(bit)
                sig = self.sig[source].copy()
                changed = rng.random(NUM_PERM) < rng.choice([0.0, 0.1, 0.2, 0.3, 0.5])
                sig[changed] = rng.integers(0, 2**32, size=int(changed.sum()), dtype=np.uint32)
                same_text = rng.random() < 0.3
                ex = self.ex[source].copy() if same_text else rng.integers(0, 2**64, 2, np.uint64)
            else:
                value = int(rng.integers(0, 2**64, dtype=np.uint64))
                sig = rng.integers(0, 2**32, size=NUM_PERM, dtype=np.uint32)
                ex = rng.integers(0, 2**64, size=2, dtype=np.uint64)
            sims.append(value)
            sigs.append(sig)
            exs.append(ex)
        return (
            np.array(sims, dtype=np.uint64),
            np.array(sigs, dtype=np.uint32),
            np.array(exs, dtype=np.uint64),
        )

    def remember(self, sim: np.ndarray, sig: np.ndarray, ex: np.ndarray) -> None:
        self.sim += [int(v) for v in sim]
        self.sig += list(sig)
        self.ex += list(ex)


def documents(
    ids: list[str], sim: np.ndarray, sig: np.ndarray, ex: np.ndarray, tag: bytes = b""
) -> NewDocuments:
    count = len(ids)
    digests = [ex[i].tobytes() + tag for i in range(count)]
    records = [b'{"n": %d}' % i for i in range(count)]
    return NewDocuments(
        ids, sim, sig, ex, np.arange(count, dtype=np.int64) * 1000, digests, records
    )


def run_sequence(client: Client, seed: int, steps: int, batch: int, layout: Layout) -> None:
    rng = np.random.default_rng(seed)
    store = RedisStore(client, layout)
    store.setup()
    model = Model(layout)
    corpus = Corpus(rng)
    serial = itertools.count()
    found = np.zeros(3, dtype=np.int64)
    for _ in range(steps):
        action = rng.random()
        if action < 0.6 or not model.docs:
            count = int(rng.integers(1, batch + 1))
            ids = [f"doc-{next(serial)}" for _ in range(count)]
            sim, sig, ex = corpus.make(count)
            written = store.insert(documents(ids, sim, sig, ex))
            assert (written.status == Status.INSERTED).all()
            model.add(ids, written.rows, sim, sig, ex)
            corpus.remember(sim, sig, ex)
        elif action < 0.8:
            held = sorted(model.docs)
            picks = rng.choice(
                len(held), size=min(len(held), int(rng.integers(1, 6))), replace=False
            )
            chosen = [held[i] for i in picks]
            rows = store.remove([*chosen, "never-stored"])
            assert rows.tolist() == [model.docs[i][0] for i in chosen] + [-1]
            model.drop([model.docs[i][0] for i in chosen])
        else:  # replace one document's content under its id
            doc = sorted(model.docs)[int(rng.integers(len(model.docs)))]
            sim, sig, ex = corpus.make(1)
            written = store.insert(documents([doc], sim, sig, ex, tag=b"v2"), replace=True)
            old_row = model.docs[doc][0]
            if written.status[0] == Status.REPLACED:
                assert written.replaced[0] == old_row
                model.drop([old_row])
                model.add([doc], written.rows, sim, sig, ex)
            else:  # the same digest: nothing changed
                assert written.status[0] == Status.SAME
            corpus.remember(sim, sig, ex)
        found += check_searches(store, model, *corpus.make(8))
    assert (found > 0).all(), f"the planted pairs were not found: {found}"
    assert store.count() == len(model.docs)
    assert store.repair() == 0  # nothing left half done
    # Removed and replaced rows left no entry behind: every table holds the live rows.
    tables = 1 + len(layout.simhash_tables) + len(layout.band_tables)
    assert sum(_table_sizes(client, layout).values()) == tables * len(model.docs)
    check_searches(store, model, *corpus.make(30), distance=1)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_operations_match_brute_force(client: Client, seed: int) -> None:
    run_sequence(client, seed, steps=40, batch=40, layout=fresh_layout())


def test_more_blocks_and_the_default_shards(client: Client) -> None:
    """k = 3 in 5 blocks (10 tables with 25-26 prefix bits), and the default layout."""
    run_sequence(client, 2, steps=15, batch=60, layout=fresh_layout(blocks=5, shard_bits=8))
    default = Layout(f"test{next(_names)}", num_perm=NUM_PERM, threshold=THRESHOLD)
    run_sequence(client, 3, steps=15, batch=60, layout=default)


def test_tables_of_mixed_shard_bits(client: Client) -> None:
    """k = 4 in 5 blocks: prefixes of 13 and 12 bits, so that 13 shard bits split four
    tables by 13 bits and the fifth by 12 (lookups in runs of different shard bits)."""
    layout = fresh_layout(max_distance=4, blocks=5, shard_bits=13)
    assert {t.shard_bits for t in layout.simhash_tables} == {12, 13}
    run_sequence(client, 4, steps=12, batch=40, layout=layout)


def test_a_search_is_two_round_trips(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    store = RedisStore(client, fresh_layout())
    store.setup()
    corpus = Corpus(rng)
    sim, sig, ex = corpus.make(300)
    store.insert(documents([f"d{i}" for i in range(300)], sim, sig, ex))
    writes: list[int] = []
    original = wire._Link.write

    def counting(self: Any, packet: bytes) -> None:
        writes.append(id(self))
        original(self, packet)

    monkeypatch.setattr(wire._Link, "write", counting)
    nodes = len(client.get_primaries()) if isinstance(client, RedisCluster) else 1
    for q in range(20):
        before = store.round_trips
        writes.clear()
        result = store.search(sim[q : q + 1], sig[q : q + 1], ex[q : q + 1])
        assert f"d{q}" in result.rows.ids  # it finds itself, so both phases ran
        assert store.round_trips - before == 2
        # One write per node reached, per round trip.
        assert len(writes) <= 2 * nodes


def test_a_writer_that_died_is_repaired(client: Client) -> None:
    """An insert that stopped after its atomic group write (no table entries yet) is
    invisible to searches until repair() indexes it; a remove that stopped after its
    group write is already invisible, and repair() drops its entries."""
    rng = np.random.default_rng(7)
    layout = fresh_layout()
    store = RedisStore(client, layout)
    store.setup()
    sim, sig, ex = Corpus(rng).make(3)
    store.insert(documents(["kept", "victim"], sim[:2], sig[:2], ex[:2]))
    # A writer dies after round trip 1 of an insert of "late".
    (group,) = group_of(["late"], layout.groups).tolist()
    blob = layout.blobs(sim[2:], ex[2:], np.zeros(1, dtype=np.int64), sig[2:])[0]
    args = [group, layout.groups, 0, "late", b"digest", blob, pack_record("late", b"")]
    client.fcall(functions.INSERT, 4, *layout.group_keys(group), *args)  # type: ignore[union-attr]
    # Another dies after round trip 1 of a remove of "victim".
    (group,) = group_of(["victim"], layout.groups).tolist()
    client.fcall(functions.REMOVE, 4, *layout.group_keys(group), "victim")  # type: ignore[union-attr]
    result = store.search(sim, sig, ex)
    assert sorted(result.rows.ids) == ["kept"]
    rows, _ = store.lookup(["late", "victim"])
    assert rows[0] >= 0 and rows[1] == -1
    assert store.repair() == 2
    result = store.search(sim, sig, ex)
    assert sorted(result.rows.ids) == ["kept", "late"]
    assert store.repair() == 0
    # The removed document's entries are gone from every table, not just filtered.
    members = sum(_table_sizes(client, layout).values())
    assert members == 2 * (1 + layout.max_distance + 1 + layout.bands[0])


def _table_sizes(client: Client, layout: Layout) -> dict[bytes, int]:
    """Members of every sorted set of the layout's tables that has any (one round trip)."""
    tables: list[PrefixTable] = [layout.exact_table, *layout.simhash_tables, *layout.band_tables]
    keys = [table.key(shard) for table in tables for shard in range(1 << table.shard_bits)]
    sizes = Wire(client).send([("ZCARD", key) for key in keys])
    return {key: int(size) for key, size in zip(keys, sizes, strict=True) if size}


def test_retries_conflicts_and_lookups(client: Client) -> None:
    rng = np.random.default_rng(9)
    store = RedisStore(client, fresh_layout())
    store.setup()
    sim, sig, ex = Corpus(rng).make(3)
    first = store.insert(documents(["a", "b", "a"], sim, sig, ex))
    # The batch's second "a" comes after the first: other content, so OTHER.
    assert first.status.tolist() == [Status.INSERTED, Status.INSERTED, Status.OTHER]
    again = store.insert(documents(["a", "b"], sim[:2], sig[:2], ex[:2]))
    assert again.status.tolist() == [Status.SAME, Status.SAME]
    assert again.rows.tolist() == first.rows[:2].tolist()
    rows, data = store.lookup(["b", "zz", "a"])
    assert rows.tolist() == [first.rows[1], -1, first.rows[0]]
    assert sorted(data.ids) == ["a", "b"]
    at = data.index(np.array([first.rows[1]]))[0]
    assert data.simhash[at] == sim[1] and (data.exact[at] == ex[1]).all()
    assert (data.signatures[at] == sig[1]).all() and data.records[at] == b'{"n": 1}'
    assert data.timestamps[at] == 1000


def test_a_remove_under_a_row_leaves_an_id_stored_again(client: Client) -> None:
    """remove(ids, rows_held) removes an id only while it is held under the row the
    caller read: one replaced meanwhile (a new row) stays, and is found."""
    rng = np.random.default_rng(10)
    store = RedisStore(client, fresh_layout())
    store.setup()
    sim, sig, ex = Corpus(rng).make(2)
    first = store.insert(documents(["a"], sim[:1], sig[:1], ex[:1]))
    replaced = store.insert(documents(["a"], sim[1:], sig[1:], ex[1:]), replace=True)
    assert replaced.status.tolist() == [Status.REPLACED]
    assert store.remove(["a"], first.rows).tolist() == [-1]  # the row read is gone
    found = store.search(sim[1:], sig[1:], ex[1:])
    assert found.exact.rows.tolist() == replaced.rows.tolist()
    assert store.remove(["a"], replaced.rows).tolist() == replaced.rows.tolist()
    assert store.lookup(["a"])[0].tolist() == [-1]
    assert not len(store.search(sim[1:], sig[1:], ex[1:]).exact)


def test_writes_wait_for_replicas_when_asked(client: Client) -> None:
    """With wait_replicas, the writing round trips end in WAIT on every node they reach: the
    cluster's primaries each have a replica, the standalone server has none."""
    rng = np.random.default_rng(11)
    layout = fresh_layout()
    store = RedisStore(client, layout, wait_replicas=1, wait_timeout_ms=2000)
    store.setup()
    sim, sig, ex = Corpus(rng).make(40)
    ids = [f"w{i}" for i in range(40)]
    if isinstance(client, RedisCluster):
        written = store.insert(documents(ids, sim, sig, ex))
        assert (written.status == Status.INSERTED).all()
        assert (store.remove(ids[:10]) >= 0).all()
        assert store.count() == 30
    else:
        impatient = RedisStore(client, layout, wait_replicas=1, wait_timeout_ms=20)
        with pytest.raises(ReplicasBehind, match="replicas acknowledged"):
            impatient.insert(documents(ids, sim, sig, ex))
        # Written all the same (WAIT cannot take writes back), but not indexed: the first
        # round trip raised. A retry is recognised, and finishes the table entries.
        rows, _ = store.lookup(ids)
        assert (rows >= 0).all()
        assert not store.search(sim, sig, ex).rows.ids
        plain = RedisStore(client, layout)
        again = plain.insert(documents(ids, sim, sig, ex))
        assert (again.status == Status.SAME).all()
        assert set(plain.search(sim, sig, ex).simhash.rows.tolist()) == set(rows.tolist())
        assert plain.repair() == 0


def test_a_layout_mismatch_is_refused(redis_server: RedisServer) -> None:
    from app.backends.redis.store.store import LayoutMismatch

    client = connect(redis_server.url)
    layout = fresh_layout()
    RedisStore(client, layout).setup()
    RedisStore(client, layout).setup()  # the same layout opens again
    other = Layout(layout.collection, max_distance=2, num_perm=NUM_PERM, threshold=THRESHOLD)
    with pytest.raises(LayoutMismatch, match="open it with the layout it was created with"):
        RedisStore(client, other).setup()


# ---------------------------------------------------------------- without a server


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20),
    shard_bits=st.integers(0, 24),
    prefix_bits=st.integers(0, 64),
    extra=st.booleans(),
    data=st.data(),
)
def test_members_sort_as_keys_and_ranges_hold_their_prefix(
    keys: list[int], shard_bits: int, prefix_bits: int, extra: bool, data: st.DataObject
) -> None:
    """decode(encode) gives the keys back; members of one shard sort as (key, extra, row);
    the BYLEX bounds of a prefix of at least shard_bits bits take exactly the members
    sharing it."""
    count = len(keys)
    prefix_bits = max(prefix_bits, shard_bits)
    table = PrefixTable(b"{t:", b"x", shard_bits, extra_bytes=8 if extra else 0)
    values = np.array(keys, dtype=np.uint64)
    rows = np.array(data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=count, max_size=count)))
    extras = None
    if extra:
        raw = data.draw(st.binary(min_size=8 * count, max_size=8 * count))
        extras = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 8)
    shards, members = table.encode(values, extras, rows)

    def order(i: int) -> tuple[int, bytes, int]:
        return keys[i], b"" if extras is None else extras[i].tobytes(), int(rows[i])

    for shard in set(shards.tolist()):
        at = np.flatnonzero(shards == shard)
        decoded, decoded_extra, decoded_rows = table.decode(shard, [members[i] for i in at])
        assert decoded.tolist() == values[at].tolist()
        assert decoded_rows.tolist() == rows[at].tolist()
        if extras is not None:
            assert (decoded_extra == extras[at]).all()
        by_member = sorted(at.tolist(), key=lambda i: members[i])
        assert by_member == sorted(at.tolist(), key=order)
    # A probe near a stored key; its prefix's range, in the probe's shard.
    noise = data.draw(st.integers(0, 2**64 - 1)) >> data.draw(st.integers(0, 64))
    probe = data.draw(st.sampled_from(keys)) ^ noise
    mask = ((1 << prefix_bits) - 1) << (64 - prefix_bits) if prefix_bits else 0
    low = np.array([probe & mask], dtype=np.uint64)
    high = np.array([(probe & mask) | (~mask & (2**64 - 1))], dtype=np.uint64)
    lo, hi = table.bounds(low, high, None)[0]
    (probe_shard,) = table.shards(low).tolist()
    for i, member in enumerate(members):
        inside = lo[1:] <= member <= hi[1:] and int(shards[i]) == probe_shard
        assert inside == ((keys[i] & mask) == (probe & mask))


def test_cluster_urls() -> None:
    assert cluster_nodes("redis-cluster://10.0.0.1:7000,host-b:7001") == [
        ("10.0.0.1", 7000),
        ("host-b", 7001),
    ]
    with pytest.raises(ValueError, match="host:port"):
        cluster_nodes("redis-cluster://10.0.0.1")
    with pytest.raises(ValueError, match="starts redis://"):
        connect("http://localhost:6379")
