"""Durability: restarts answer as before, a SIGKILL loses nothing acknowledged, faults are
clear errors that lose nothing."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.errors import StorageUnavailable, StoreDamaged
from app.main import DATABASE_FILE, create_app
from app.storage import MemoryStore, StoredCollection
from app.storage import sqlite_load as sqlite_module
from app.storage.base import (
    Covered,
    DocumentBatch,
    Eviction,
    SavedRows,
    no_saved_rows,
    not_among,
)
from app.storage.commit import Commit
from app.storage.sqlite import SQLiteStore
from devkit.corpus import english_like_text, mutate_words
from devkit.server import Server, neardup_command
from tests.conftest import make_client

DOCS = "/v1/collections/default/documents"


def corpus(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    bases = [english_like_text(rng, rng.randint(300, 2000)) for _ in range(count // 3 + 1)]
    return [
        mutate_words(rng, rng.choice(bases), rng.choice([0, 0.01, 0.03, 0.3])) for _ in range(count)
    ]


def snapshot(client: TestClient, ids: list[str], texts: list[str]) -> dict[str, Any]:
    """Everything a client can see about these documents."""
    seen: dict[str, Any] = {
        # Merges and index bytes depend on the history of the process, not on the data.
        info["name"]: (info["settings"], info["stats"]["documents"], info["stats"]["duplicates"])
        for info in client.get("/v1/collections").json()["collections"]
    }
    for document_id in ids:
        seen[f"get {document_id}"] = client.get(f"{DOCS}/{document_id}").json()
        seen[f"similar {document_id}"] = client.get(
            f"{DOCS}/{document_id}/similar", params={"limit": 50}
        ).json()
    for number, text in enumerate(texts):
        seen[f"search {number}"] = client.post(
            "/v1/collections/default/search", json={"text": text, "limit": 50}
        ).json()
    return seen


def test_a_restart_answers_exactly_as_before(tmp_path: Path) -> None:
    texts = corpus(1, 60)
    ids = [f"d{i}" for i in range(60)]
    for client in make_client(tmp_path):
        client.put(
            "/v1/collections/words",
            json={"shingle": {"unit": "word", "size": 2}, "store_text": True},
        )
        for start in range(0, 40, 10):
            batch = [
                {"id": ids[i], "text": texts[i], "metadata": {"n": i}}
                for i in range(start, start + 10)
            ]
            assert client.post(f"{DOCS}/batch", json={"documents": batch}).status_code == 200
        for i in range(40, 60):
            assert client.post(DOCS, json={"id": ids[i], "text": texts[i]}).status_code == 201
        client.post("/v1/collections/words/documents", json={"id": "w", "text": texts[0]})
        assert client.delete(f"{DOCS}/d3").status_code == 204
        # Delete the first document of a cluster that lives on, and the newest document.
        roots = {client.get(f"{DOCS}/{i}").json()["cluster_id"] for i in ids[5:40]}
        root = min(roots - {"d3", "d4"}, key=lambda i: int(i[1:]))
        assert client.delete(f"{DOCS}/{root}").status_code == 204
        named = [i for i in ids[5:40] if client.get(f"{DOCS}/{i}").json().get("cluster_id") == root]
        assert named, "the deleted document must still name a live cluster"
        assert client.delete(f"{DOCS}/d59").status_code == 204
        assert client.put(f"{DOCS}/d4", json={"text": texts[9]}).status_code == 200
        before = snapshot(client, ids, texts[::7])
        assert before["default"][1] == 57 and before["words"][1] == 1
    for client in make_client(tmp_path):
        after = snapshot(client, ids, texts[::7])
        assert client.get("/v1/collections/words/documents/w").json()["text"] == texts[0]
        # New inserts continue after the restored rows and join restored clusters.
        answer = client.post(DOCS, json={"id": "late", "text": texts[10]}).json()
        assert answer["matches"] and answer["duplicate_of"] is not None
    assert after == before


def acknowledged_inserts(url: str, seed: int, stop: threading.Event, acked: dict[str, str]) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=10) as client:
        number = 0
        while not stop.is_set():
            batch_size = rng.choice([1, 1, 5])
            documents = [
                {"id": f"c{seed}-{number + i}", "text": english_like_text(rng, 400)}
                for i in range(batch_size)
            ]
            number += batch_size
            try:
                if batch_size == 1:
                    response = client.post(DOCS, json=documents[0])
                else:
                    response = client.post(f"{DOCS}/batch", json={"documents": documents})
            except httpx.TransportError:
                return  # the server died under us: that answer was never acknowledged
            if response.status_code in (200, 201):
                for document in documents:
                    acked[document["id"]] = document["text"]


def writers_until_acknowledged(
    server: Server, seed: int
) -> tuple[list[threading.Thread], threading.Event, dict[str, str], int]:
    """Four concurrent writers, returned once a seeded random number of documents (20 to
    150) is acknowledged: (writers, their stop event, acknowledged id -> text, number)."""
    acked: dict[str, str] = {}
    stop = threading.Event()
    writers = [
        threading.Thread(target=acknowledged_inserts, args=(server.url, seed * 10 + i, stop, acked))
        for i in range(4)
    ]
    for writer in writers:
        writer.start()
    target = random.Random(seed).randint(20, 150)
    deadline = threading.Event()
    while len(acked) < target and not deadline.wait(0.01):
        pass
    return writers, stop, acked, target


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    data = tmp_path / "data"
    server = Server(data).start()
    # Kill after a random number of acknowledged documents, wherever the writers are.
    writers, stop, acked, target = writers_until_acknowledged(server, seed)
    server.kill()
    stop.set()
    for writer in writers:
        writer.join()
    assert len(acked) >= target
    assert_every_acknowledged_document_is_back(data, acked)


def assert_every_acknowledged_document_is_back(data: Path, acked: dict[str, str]) -> None:
    with Server(data) as restarted, httpx.Client(base_url=restarted.url, timeout=10) as client:
        stats = client.get("/v1/collections/default").json()["stats"]
        for document_id, text in acked.items():
            stored = client.get(f"{DOCS}/{document_id}")
            assert stored.status_code == 200, document_id
            found = client.post("/v1/collections/default/search", json={"text": text}).json()
            assert document_id in {m["id"] for m in found["matches"]}
        # Unacknowledged inserts may have landed, but only whole and only once.
        assert stats["documents"] >= len(acked)
        database = sqlite3.connect(data / DATABASE_FILE)
        ids = [row[0] for row in database.execute("SELECT id FROM documents")]
        database.close()
        assert len(ids) == len(set(ids)) == stats["documents"]
        assert restarted.stop() == 0


@pytest.mark.parametrize("seed", [4, 5])
def test_sigterm_during_inserts_finishes_them_loses_nothing_and_exits_0(
    tmp_path: Path, seed: int
) -> None:
    data = tmp_path / "data"
    server = Server(data).start()
    writers, stop, acked, target = writers_until_acknowledged(server, seed)
    # SIGTERM while four writers are mid-request: uvicorn stops accepting, finishes the
    # requests in flight, the lifespan closes the store (its last commit), exit 0.
    assert server.stop() == 0
    stop.set()
    for writer in writers:
        writer.join()
    output = server.output()
    assert "Traceback" not in output and '"level": "ERROR"' not in output, output
    assert len(acked) >= target
    assert_every_acknowledged_document_is_back(data, acked)


def test_a_damaged_database_refuses_to_start_and_says_what_to_do(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / DATABASE_FILE).write_bytes(b"this is not a database" * 1000)
    with pytest.raises(StoreDamaged, match="Restore it from a backup"):
        SQLiteStore(data / DATABASE_FILE)
    server = Server(data)
    with pytest.raises(RuntimeError, match="not a usable neardup database"):
        server.start()
    assert server.process is not None and server.process.returncode != 0


def test_a_read_only_database_gives_503_and_reads_go_on(tmp_path: Path) -> None:
    for client in make_client(tmp_path):
        texts = corpus(6, 4)
        assert client.post(DOCS, json={"id": "kept", "text": texts[0]}).status_code == 201
        store = client.app.state.registry._store  # type: ignore[attr-defined]
        # What SQLite reports for a read-only file or directory: SQLITE_READONLY.
        store._connection.execute("PRAGMA query_only=ON")
        failed = client.post(DOCS, json={"id": "lost", "text": texts[1]})
        assert failed.status_code == 503
        assert "readonly" in failed.json()["error"]["message"]
        assert client.delete(f"{DOCS}/kept").status_code == 503
        assert client.get(f"{DOCS}/kept").status_code == 200
        assert client.get(f"{DOCS}/lost").status_code == 404
        store._connection.execute("PRAGMA query_only=OFF")
    for client in make_client(tmp_path):
        assert client.get(f"{DOCS}/kept").status_code == 200
        assert client.get(f"{DOCS}/lost").status_code == 404


def test_a_full_disk_gives_503_and_loses_nothing(tmp_path: Path) -> None:
    for client in make_client(tmp_path):
        texts = corpus(5, 30)
        for i in range(10):
            assert client.post(DOCS, json={"id": f"ok{i}", "text": texts[i]}).status_code == 201
        store = client.app.state.registry._store  # type: ignore[attr-defined]
        pages = store._connection.execute("PRAGMA page_count").fetchone()[0]
        # SQLite's own disk-full path: the file may not grow past its current size.
        store._connection.execute(f"PRAGMA max_page_count={pages}")
        big = [{"id": f"big{i}", "text": texts[10 + i] * 5} for i in range(20)]
        failed = client.post(f"{DOCS}/batch", json={"documents": big})
        assert failed.status_code == 503
        assert failed.json()["error"]["code"] == "storage_unavailable"
        assert "nothing of this request was stored" in failed.json()["error"]["message"]
        assert client.get(f"{DOCS}/big0").status_code == 404
        found = client.post("/v1/collections/default/search", json={"text": texts[10] * 5})
        assert "big0" not in {m["id"] for m in found.json()["matches"]}
        for i in range(10):
            assert client.get(f"{DOCS}/ok{i}").status_code == 200
        store._connection.execute("PRAGMA max_page_count=1073741823")
        assert client.post(f"{DOCS}/batch", json={"documents": big}).status_code == 200
    for client in make_client(tmp_path):
        assert client.get("/v1/collections/default").json()["stats"]["documents"] == 30


@pytest.mark.parametrize(("chunk_rows", "record_rows"), [(1, 7), (16_384, 1 << 20)])
def test_sqlite_store_round_trips_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_rows: int, record_rows: int
) -> None:
    """What was stored comes back, whatever the chunks ``load`` reads it in (one row, a
    few, all at once) and the ranges it aggregates records over, deleted rows left out:
    times to the last bit, negative timestamps, rows with gaps, an imported id with a NUL
    in it; fingerprints below a segment's rows are zeros, but for the last few (checked
    against the segment)."""
    monkeypatch.setattr(sqlite_module, "LOAD_CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(sqlite_module, "RECORD_CHUNK_ROWS", record_rows)
    monkeypatch.setattr(sqlite_module, "SPOT_CHECK_ROWS", 3)
    store = SQLiteStore(tmp_path / "x.db", "NORMAL")
    config = {"minhash": {"enabled": True, "num_perm": 4}, "store_text": True}
    store.create_collection("c", config)
    rng = np.random.default_rng(0)
    count = 40
    batch = DocumentBatch(
        ids=[f"d{i}" if i != 22 else "imported\x00id" for i in range(count)],
        rows=np.arange(count) * 3,
        created_at=1.7e9 + rng.random(count) * 1e8,
        clusters=np.arange(count) // 2 * 6,
        metadata=[{"k": [i, "é", "\x00"]} if i % 3 else None for i in range(count)],
        simhash=rng.integers(0, 2**64, size=count, dtype=np.uint64),
        minhash=rng.integers(0, 2**32, size=(count, 4), dtype=np.uint32),
        exact=rng.integers(0, 2**64, size=(count, 2), dtype=np.uint64),
        texts=[f"text {i}" if i % 4 else None for i in range(count)],
        shorts=[f"short {i}" if i % 5 == 1 else None for i in range(count)],
        timestamps=(np.arange(count) - 5) * 1_000_003,
    )
    store.add_documents("c", batch)
    store.delete_documents("c", [3, 51, 117])
    store.close()
    reopened = SQLiteStore(tmp_path / "x.db")
    kept = batch.select(np.array([i for i in range(count) if i not in (1, 17, 39)]))
    for fingerprints_from in (0, 60):
        covered = Covered(fingerprints_from, 0, True) if fingerprints_from else None
        [loaded] = reopened.load(lambda name, settings, given=covered: given)
        assert loaded.name == "c" and loaded.config == config
        assert loaded.fingerprints_from == fingerprints_from
        documents = loaded.documents
        # Below a segment's rows: only the last 3 live documents (the spot check), read
        # whole with everything after them; the rows removed since; no text below (a
        # collection reads a kept text when it verifies it: read_texts, below).
        whole = np.arange(len(kept.rows)) >= np.searchsorted(kept.rows, fingerprints_from) - 3
        if not fingerprints_from:
            whole[:] = True
            assert loaded.removed.tolist() == []
        else:
            assert loaded.removed.tolist() == [3, 51, 117]  # the log since entry 0
        read = kept.select(np.flatnonzero(whole))
        assert documents.ids == read.ids and documents.metadata == read.metadata
        assert documents.texts == read.texts and documents.shorts == read.shorts
        for column in ("rows", "created_at", "clusters", "timestamps"):
            assert np.array_equal(getattr(documents, column), getattr(read, column)), column
        for column in ("simhash", "minhash", "exact"):
            assert np.array_equal(getattr(documents, column), getattr(read, column)), column
    # Past the log's entry for the first delete, only the later ones.
    [loaded] = reopened.load(lambda name, settings: Covered(60, 1, False))
    assert loaded.removed.tolist() == [51, 117]
    # Every text as stored, by row, from any thread; none for a deleted row or an absent one.
    rows = [*batch.rows.tolist(), 10_000]
    expected = [None if i in (1, 17, 39) else t for i, t in enumerate(batch.text_column())]
    assert reopened.read_texts("c", rows) == [*expected, None]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda row: reopened.read_texts("c", [row]), rows[:9])) == [
            [text] for text in expected[:9]
        ]
    reopened.close()


def test_the_clusters_not_among_the_live_rows_are_those_of_a_set_difference() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        rows = np.unique(rng.integers(0, 60, rng.integers(0, 40)))
        clusters = rows.copy()
        if len(rows):
            chosen = rng.integers(0, len(rows), rng.integers(0, len(rows) + 1))
            clusters[chosen] = np.minimum(rows[chosen], rng.integers(0, 60, len(chosen)))
        expected = sorted(set(clusters.tolist()) - set(rows.tolist()))
        assert not_among(clusters, rows).tolist() == expected


def test_settings_choose_the_synchronous_mode(tmp_path: Path) -> None:
    for mode in ("FULL", "NORMAL"):
        store = SQLiteStore(tmp_path / f"{mode}.db", mode)  # type: ignore[arg-type]
        level = store._connection.execute("PRAGMA synchronous").fetchone()[0]
        assert level == {"FULL": 2, "NORMAL": 1}[mode]
        store.close()
    assert Settings(synchronous="NORMAL").synchronous == "NORMAL"


def test_export_then_import_into_a_fresh_directory_answers_identically(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    texts = corpus(7, 40)
    ids = [f"e{i}" for i in range(40)]
    for client in make_client(source):
        client.put(
            "/v1/collections/other", json={"minhash": {"enabled": False}, "store_text": True}
        )
        batch = [{"id": ids[i], "text": texts[i], "metadata": {"n": i}} for i in range(40)]
        assert client.post(f"{DOCS}/batch", json={"documents": batch}).status_code == 200
        client.post("/v1/collections/other/documents", json={"id": "o", "text": texts[0]})
        roots = [i for i in ids if client.get(f"{DOCS}/{i}").json()["cluster_id"] == i]
        named = [i for i in ids if client.get(f"{DOCS}/{i}").json()["cluster_id"] != i]
        root = client.get(f"{DOCS}/{named[0]}").json()["cluster_id"]
        assert client.delete(f"{DOCS}/{root}").status_code == 204
        assert len(roots) > 1
        before = snapshot(client, ids, texts[::5])
    command = str(Path(neardup_command()))
    exported = tmp_path / "backup.jsonl"
    run = subprocess.run(
        [command, "export", "--data-dir", str(source / "data"), "--output", str(exported)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    lines = exported.read_text().splitlines()
    assert len(lines) == 2 + 39 + 1  # two collections, 39 live documents and one
    run = subprocess.run(
        [command, "import", str(exported), "--data-dir", str(target / "data")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "default: 39 documents imported" in run.stderr
    for client in make_client(target):
        assert snapshot(client, ids, texts[::5]) == before
        kept = client.get("/v1/collections/other/documents/o").json()
        assert kept["text"] == texts[0]
    again = subprocess.run(
        [command, "import", str(exported), "--data-dir", str(target / "data")],
        capture_output=True,
        text=True,
    )
    assert again.returncode != 0 and "already exists" in again.stderr


class _SlowStore(MemoryStore):
    """A store whose start-up load waits until the test lets it go."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def load(
        self, saved_rows: SavedRows = no_saved_rows, *, texts: bool = True
    ) -> list[StoredCollection]:
        assert self.release.wait(30)
        return super().load(saved_rows, texts=texts)


def test_readiness_waits_for_the_rebuild_while_liveness_answers(tmp_path: Path) -> None:
    release = threading.Event()
    app = create_app(Settings(data_dir=tmp_path), store_factory=lambda _: _SlowStore(release))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503
        assert client.get("/v1/collections").json()["error"]["code"] == "not_ready"
        release.set()
        assert app.state.ready.wait(30)
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/collections").status_code == 200


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    database = sqlite3.connect(path)
    database.execute("PRAGMA user_version=99")
    database.close()
    with pytest.raises(StoreDamaged, match="upgrade neardup"):
        SQLiteStore(path)


class _CountingStore(SQLiteStore):
    def __init__(self, path: Path) -> None:
        self.groups: list[int] = []
        super().__init__(path, "NORMAL")

    def _commit(self, group: list[Any]) -> None:
        self.groups.append(len(group))
        super()._commit(group)


def _hold_writer(store: SQLiteStore) -> tuple[threading.Event, Commit]:
    """Hold the writer inside a commit until the returned gate is set: what is queued
    meanwhile shares the next commit. Returns the gate and the holding change's future."""
    gate, inside = threading.Event(), threading.Event()

    def hold(db: sqlite3.Connection) -> None:
        inside.set()
        assert gate.wait(30)

    blocked = store._enqueue(hold)
    assert inside.wait(30)
    return gate, blocked


def test_changes_queued_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    store = _CountingStore(tmp_path / "g.db")
    store.create_collection("c", {"minhash": {"enabled": True, "num_perm": 2}})
    gate, blocked = _hold_writer(store)
    waiting = []
    for row in range(10):
        batch = DocumentBatch(
            ids=[f"d{row}"],
            rows=np.array([row]),
            created_at=np.zeros(1),
            clusters=np.array([row]),
            metadata=[None],
            simhash=np.zeros(1, dtype=np.uint64),
            minhash=np.zeros((1, 2), dtype=np.uint32),
            exact=np.zeros((1, 2), dtype=np.uint64),
        )
        waiting.append(store.begin_add_documents("c", batch))
    assert not any(future.done() for future in waiting)  # nothing answers before its commit
    gate.set()
    blocked.result()
    for future in waiting:
        future.result()
    assert store.groups == [1, 1, 10]  # create, the gate, then all ten in one transaction
    [loaded] = store.load()
    assert loaded.documents.ids == [f"d{row}" for row in range(10)]
    store.close()


def _batch(rows: list[int], clusters: list[int] | None = None) -> DocumentBatch:
    return DocumentBatch(
        ids=[f"d{row}" for row in rows],
        rows=np.array(rows, dtype=np.int64),
        created_at=np.zeros(len(rows)),
        clusters=np.array(clusters if clusters is not None else rows, dtype=np.int64),
        metadata=[None] * len(rows),
        simhash=np.zeros(len(rows), dtype=np.uint64),
        minhash=np.zeros((len(rows), 2), dtype=np.uint32),
        exact=np.zeros((len(rows), 2), dtype=np.uint64),
        timestamps=np.array(rows, dtype=np.int64),
    )


def test_evictions_remove_their_rows_and_references_stay_checked(tmp_path: Path) -> None:
    # Evictions alone commit without SQLite's foreign key checks (removing documents
    # cannot break a reference); every other change must still be checked, in a group
    # with an eviction and after one.
    store = _CountingStore(tmp_path / "e.db")
    store.create_collection("c", {"minhash": {"enabled": True, "num_perm": 2}})
    store.add_documents("c", _batch(list(range(10)), [0, 1, 2, 3, 4, 5, 6, 7, 7, 9]))
    store.begin_evict("c", Eviction([0, 1, 2, 4], [7], (7, 7), 10)).result()
    with pytest.raises(StorageUnavailable, match="FOREIGN KEY"):
        store.add_documents("missing", _batch([10]))
    gate, blocked = _hold_writer(store)
    eviction = store.begin_evict("c", Eviction([3, 5], [], (7, 7), 12))
    refused = store.begin_add_documents("missing", _batch([11]))
    added = store.begin_add_documents("c", _batch([12]))
    gate.set()
    blocked.result()
    eviction.result()
    added.result()
    with pytest.raises(StorageUnavailable, match="FOREIGN KEY"):
        refused.result()
    assert store.groups[-1] == 3  # the eviction shared the transaction of the inserts
    store.close()
    reopened = SQLiteStore(tmp_path / "e.db")
    [loaded] = reopened.load()
    assert loaded.documents.rows.tolist() == [6, 8, 9, 12]
    assert loaded.names == {7: "d7"}  # kept as a deleted row: it names 8's cluster
    assert loaded.expired_through == (7, 7) and loaded.next_row == 13
    reopened.close()


def test_inserts_across_statement_chunks_store_every_row_or_none(tmp_path: Path) -> None:
    # Documents go in by multi-row statements of ROWS_PER_INSERT rows: every size around
    # the chunk edge stores exactly its rows, and a batch refused in a later chunk (a row
    # already stored) leaves nothing of its earlier chunks, alone or in a group.
    from app.storage.sqlite import ROWS_PER_INSERT

    store = SQLiteStore(tmp_path / "k.db", "NORMAL")
    store.create_collection("c", {"minhash": {"enabled": True, "num_perm": 2}})
    expected: list[int] = []
    next_row = 0
    for size in (1, ROWS_PER_INSERT - 1, ROWS_PER_INSERT, ROWS_PER_INSERT + 1, 3 * ROWS_PER_INSERT):
        rows = list(range(next_row, next_row + size))
        store.add_documents("c", _batch(rows))
        expected += rows
        next_row += size
    clash = [*range(next_row, next_row + 2 * ROWS_PER_INSERT), 0]  # 0 is stored
    with pytest.raises(StorageUnavailable, match="UNIQUE"):
        store.add_documents("c", _batch(clash))
    with pytest.raises(StorageUnavailable, match="UNIQUE"):  # one statement, alone
        store.add_documents("c", _batch([next_row + 1000, 0]))
    gate, blocked = _hold_writer(store)
    refused = store.begin_add_documents("c", _batch(clash))
    good = list(range(next_row + 500, next_row + 500 + ROWS_PER_INSERT + 3))
    added = store.begin_add_documents("c", _batch(good))
    gate.set()
    blocked.result()
    added.result()
    with pytest.raises(StorageUnavailable, match="UNIQUE"):
        refused.result()
    expected += good
    store.close()
    reopened = SQLiteStore(tmp_path / "k.db")
    [loaded] = reopened.load()
    assert loaded.documents.rows.tolist() == expected
    assert loaded.documents.ids == [f"d{row}" for row in expected]
    assert loaded.documents.timestamps.tolist() == expected
    reopened.close()


def test_a_restart_holds_the_loaded_signatures_and_answers_as_before(tmp_path: Path) -> None:
    """3,000 documents (their signatures over a mapped array's minimum): the restart's
    MinHash index holds the low 16 bits of the column load() read (the default collection
    keeps its texts; one that keeps whole values holds the column itself, not a copy:
    tests/core/test_row_array.py); similar answers equal those before the restart; new
    documents, deletes and merges after it work on that memory."""
    rng = random.Random(5)
    bases = [english_like_text(rng, 600) for _ in range(1500)]
    texts = [text for base in bases for text in (base, mutate_words(rng, base, 0.02))]
    for client in make_client(tmp_path):
        for start in range(0, len(texts), 500):
            batch = [{"id": f"x{i}", "text": texts[i]} for i in range(start, start + 500)]
            assert client.post(f"{DOCS}/batch", json={"documents": batch}).status_code == 200
        sample = [f"x{i}" for i in range(0, len(texts), 97)]
        before = {i: client.get(f"{DOCS}/{i}/similar").json() for i in sample}
    for client in make_client(tmp_path):
        registry = client.app.state.registry  # type: ignore[attr-defined]
        collection = registry.get("default")
        lsh = collection._matcher.lsh
        assert lsh.signatures(np.arange(3)).dtype == np.uint16 and not lsh.adopted_values
        assert {i: client.get(f"{DOCS}/{i}/similar").json() for i in sample} == before
        for number in range(0, 40, 2):  # a new copy of each: found through the held column
            answer = client.post(DOCS, json={"id": f"y{number}", "text": texts[number]}).json()
            assert answer["duplicate_of"] == f"x{number}", answer
        for number in range(0, 200, 2):
            assert client.delete(f"{DOCS}/x{number}").status_code == 204
        collection.merge(force=True)
        collection._check()
        # x1's base x0 is deleted; y0, its copy inserted after the restart, is found.
        assert [m["id"] for m in client.get(f"{DOCS}/x1/similar").json()["matches"]] == ["y0"]


def test_a_text_that_cannot_be_read_is_storage_unavailable(tmp_path: Path) -> None:
    """A kept text the database cannot give (here: its table gone under it) refuses the
    read that needs it with StorageUnavailable (a 503 with its JSON body), not a 500."""
    store = SQLiteStore(tmp_path / "x.db")
    store.create_collection("c", {"minhash": {"enabled": False}})
    database = sqlite3.connect(tmp_path / "x.db")
    database.execute("ALTER TABLE documents RENAME TO elsewhere")
    database.commit()
    database.close()
    with pytest.raises(StorageUnavailable):
        store.read_texts("c", [0])
    store.close()
