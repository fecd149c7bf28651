"""Document time through HTTP and under load: timestamps in and out, since / until, match
windows, settings that change (PATCH, PUT), 507 under concurrent writers against the real
process, evictions beside searches and inserts, restarts in the middle of an eviction."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.backends.embedded.registry import Registry
from app.collection_config import CollectionConfig, RetentionConfig
from app.config import Settings
from app.main import DATABASE_FILE, create_app
from app.service import NewDocument, Query
from app.service.times import iso_time_us
from app.storage.sqlite import SQLiteStore
from app.transfer import export_lines, import_lines
from devkit.corpus import english_like_text
from devkit.server import Server
from tests.conftest import READY_TIMEOUT_SECONDS
from tests.time_model import FakeClock, Model

NEWS = "/v1/collections/news"
DOCS = f"{NEWS}/documents"
HOUR = 3600 * 1_000_000
STORIES = [english_like_text(random.Random(2000 + i), 600) for i in range(10)]


def timed_client(tmp_path: Path, clock: FakeClock, **overrides: Any) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=tmp_path / "data", **overrides), clock=clock)
    with TestClient(app) as client:
        assert app.state.ready.wait(READY_TIMEOUT_SECONDS), app.state.startup_error
        yield client


def error_of(response: httpx.Response, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    body: dict[str, str] = response.json()["error"]
    return body


# ---------------------------------------------------------------- timestamps


def test_timestamps_in_every_form_come_back_in_utc_and_survive_restarts(tmp_path: Path) -> None:
    clock = FakeClock(1_714_564_800.0)  # 2024-05-01T12:00:00Z
    sent = {
        "offset": ("2024-05-01T14:00:00+02:00", "2024-05-01T12:00:00Z"),
        "zulu": ("2024-05-01T12:00:00.123456Z", "2024-05-01T12:00:00.123456Z"),
        "seconds": (1714564800.25, "2024-05-01T12:00:00.250000Z"),
        "integer": (0, "1970-01-01T00:00:00Z"),
        "old": ("1987-02-26T15:01:01.790000+00:00", "1987-02-26T15:01:01.790000Z"),
    }
    for client in timed_client(tmp_path, clock):
        client.put(NEWS, json={"store_text": True})
        for number, (name, (timestamp, _)) in enumerate(sent.items()):
            body = {"id": name, "text": STORIES[number], "timestamp": timestamp}
            assert client.post(DOCS, json=body).status_code == 201
        assert client.post(DOCS, json={"id": "now", "text": STORIES[6]}).status_code == 201
        stored = client.get(f"{DOCS}/now").json()
        assert stored["timestamp"] == stored["created_at"] == "2024-05-01T12:00:00Z"
        for name, (_, expected) in sent.items():
            assert client.get(f"{DOCS}/{name}").json()["timestamp"] == expected
        # A replacement takes its own time.
        put = client.put(f"{DOCS}/old", json={"text": STORIES[7], "timestamp": 86400})
        assert put.status_code == 200
        assert client.get(f"{DOCS}/old").json()["timestamp"] == "1970-01-02T00:00:00Z"
        for bad in (
            "yesterday",
            "2024-05-01T12:00:00",  # no offset
            "1714564800",  # a number in a string is not ISO 8601
            True,
            [1],
            {"s": 1},
            1e20,
            "10000-01-01T00:00:00Z",
        ):
            message = error_of(client.post(DOCS, json={"text": STORIES[8], "timestamp": bad}), 422)[
                "message"
            ]
            assert message.startswith("timestamp"), message
        batch = client.post(
            f"{DOCS}/batch",
            json={
                "documents": [
                    {"id": "b1", "text": STORIES[8], "timestamp": "noon"},
                    {"id": "b2", "text": STORIES[9], "timestamp": 1714564800},
                ]
            },
        ).json()["results"]
        assert batch[0]["id"] == "b1" and batch[0]["error"]["code"] == "invalid_body"
        assert "timestamp" in batch[0]["error"]["message"]
        assert batch[1]["inserted"] is True
        before = {name: client.get(f"{DOCS}/{name}").json() for name in [*sent, "now", "b2"]}
    for client in timed_client(tmp_path, clock):
        after = {name: client.get(f"{DOCS}/{name}").json() for name in before}
        assert after == before
    # Export and import carry the times.
    source = SQLiteStore(tmp_path / "data" / DATABASE_FILE)
    lines = list(export_lines(source.load()))
    source.close()
    exported = {
        record["id"]: record["timestamp"]
        for record in map(json.loads, lines)
        if record["type"] == "document" and record["collection"] == "news"
    }
    assert exported == {name: document["timestamp"] for name, document in before.items()}
    target_dir = tmp_path / "copy"
    (target_dir / "data").mkdir(parents=True)
    target = SQLiteStore(target_dir / "data" / DATABASE_FILE)
    import_lines(target, lines)
    target.close()
    for client in timed_client(target_dir, clock):
        assert {name: client.get(f"{DOCS}/{name}").json() for name in before} == before


def test_an_export_without_timestamps_imports_with_the_insert_times(tmp_path: Path) -> None:
    settings = CollectionConfig().to_dict()
    record = {
        "type": "document",
        "collection": "c",
        "id": "a",
        "created_at": 1714564800.5,
        "cluster_id": "a",
        "metadata": None,
        "simhash": "0" * 16,
        "minhash": "",
        "exact": "0" * 32,
        "text": None,
        "short": None,
    }
    settings["minhash"]["enabled"] = False
    store = SQLiteStore(tmp_path / "x.db")
    import_lines(store, [json.dumps({"type": "collection", "name": "c", "settings": settings})])
    store.close()
    store = SQLiteStore(tmp_path / "y.db")
    lines = [json.dumps({"type": "collection", "name": "c", "settings": settings})]
    import_lines(store, [*lines, json.dumps(record)])
    [loaded] = store.load()
    assert iso_time_us(int(loaded.documents.timestamp_column()[0])) == "2024-05-01T12:00:00.500000Z"
    store.close()


# ---------------------------------------------------------------- since / until, windows


def test_since_until_and_the_window_through_http(tmp_path: Path) -> None:
    clock = FakeClock(1_714_564_800.0)
    now = clock.us
    for client in timed_client(tmp_path, clock):
        client.put(NEWS, json={"match_window": "48h"})
        times = {f"h{hours}": now - hours * HOUR for hours in (0, 10, 30, 50, 100)}
        for name, timestamp in times.items():
            answer = client.post(
                DOCS, json={"id": name, "text": STORIES[0], "timestamp": timestamp / 1e6}
            ).json()
            # Each matches only the earlier ones within 48 hours of its own time.
            expected = [
                other
                for other, t in times.items()
                if other != name
                and t in range(timestamp - 48 * HOUR, timestamp + 48 * HOUR + 1)
                and list(times).index(other) < list(times).index(name)
            ]
            assert sorted(m["id"] for m in answer["matches"]) == sorted(expected), name
        search = f"{NEWS}/search"
        body = {"text": STORIES[0], "limit": 100}
        everything = [m["id"] for m in client.post(search, json=body).json()["matches"]]
        assert sorted(everything) == sorted(times)  # searches have no window
        ranged = client.post(
            search, json={**body, "since": "2024-04-30T00:00:00Z", "until": now / 1e6}
        ).json()["matches"]
        assert sorted(m["id"] for m in ranged) == ["h0", "h10", "h30"]
        got = client.get(
            search, params={"text": STORIES[0], "since": "2024-04-29T14:00:00+02:00"}
        ).json()["matches"]
        assert sorted(m["id"] for m in got) == ["h0", "h10", "h30"]
        got = client.get(
            f"{DOCS}/h30/similar", params={"until": str((now - 40 * HOUR) / 1e6)}
        ).json()["matches"]
        assert sorted(m["id"] for m in got) == ["h100", "h50"]
        # An insert's own since / until narrow its matching further.
        answer = client.post(
            DOCS,
            json={"id": "late", "text": STORIES[0], "since": (now - 20 * HOUR) / 1e6},
        ).json()
        assert [m["id"] for m in answer["matches"]] == ["h0", "h10"]
        batch = client.post(
            f"{DOCS}/batch",
            json={
                "documents": [{"id": "b", "text": STORIES[0]}],
                "until": (now - 5 * HOUR) / 1e6,
            },
        ).json()["results"]
        assert [m["id"] for m in batch[0]["matches"]] == ["h10", "h30"]
        # Bad values: 400 in a query string, 422 in a body; since after until too.
        assert (
            error_of(client.get(search, params={"text": "x", "since": "soon"}), 400)["code"]
            == "invalid_parameter"
        )
        error_of(client.get(search, params={"text": "x", "since": "2", "until": "1"}), 400)
        error_of(client.get(f"{DOCS}/h0/similar", params={"until": "1 May"}), 400)
        assert (
            error_of(client.post(search, json={**body, "since": "soon"}), 422)["code"]
            == "invalid_body"
        )
        error_of(client.post(search, json={**body, "since": 2, "until": 1}), 422)
        error_of(client.post(DOCS, json={"text": "x y", "since": 2, "until": 1}), 422)


# ---------------------------------------------------------------- settings that change


def test_time_settings_change_and_nothing_expired_comes_back(tmp_path: Path) -> None:
    clock = FakeClock(1_714_564_800.0)
    now = clock.us
    for client in timed_client(tmp_path, clock):
        created = client.put(NEWS, json={"retention": {"max_age": "1h"}})
        assert created.status_code == 201
        assert created.json()["settings"]["retention"] == {"max_age": "1h", "max_documents": None}
        for i in range(6):
            ts = (now - i * 20 * 60 * 1_000_000) / 1e6  # 0, 20, ..., 100 minutes ago
            client.post(DOCS, json={"id": f"m{i * 20}", "text": STORIES[i], "timestamp": ts})
        alive = {i for i in range(6) if client.get(f"{DOCS}/m{i * 20}").status_code == 200}
        assert alive == {0, 1, 2, 3}  # 60 minutes is not older than an hour
        # Longer retention: what expired stays expired, evicted yet or not.
        longer = client.patch(NEWS, json={"retention": {"max_age": "7d"}, "match_window": "2h"})
        assert longer.status_code == 200, longer.text
        settings = longer.json()["settings"]
        assert settings["retention"] == {"max_age": "7d", "max_documents": None}
        assert settings["match_window"] == "2h"
        assert {i for i in range(6) if client.get(f"{DOCS}/m{i * 20}").status_code == 200} == alive
        # A merge patch: max_documents joins max_age; null clears a setting.
        patched = client.patch(NEWS, json={"retention": {"max_documents": 2}, "limits": None})
        assert patched.json()["settings"]["retention"] == {"max_age": "7d", "max_documents": 2}
        assert client.get(NEWS).json()["stats"]["documents"] == 2
        assert (
            client.patch(NEWS, json={"match_window": None}).json()["settings"]["match_window"]
            is None
        )
        # PUT with the full settings and new time values changes them too (200).
        put = client.put(NEWS, json={"retention": {"max_documents": 3}})
        assert put.status_code == 200
        assert put.json()["settings"]["retention"] == {"max_age": None, "max_documents": 3}
        # Fixed settings: 409 naming what differs; equal ones are fine.
        conflict = error_of(client.patch(NEWS, json={"shingle": {"size": 3}}), 409)
        assert (
            conflict["code"] == "settings_conflict"
            and "shingle.size: 5, not 3" in conflict["message"]
        )
        conflict = error_of(client.put(NEWS, json={"minhash": {"num_perm": 64}}), 409)
        assert "minhash.num_perm" in conflict["message"]
        assert client.patch(NEWS, json={"shingle": {"size": 5}, "store_text": False}).status_code
        error_of(client.patch(NEWS, json={"match_window": "48 h"}), 422)
        error_of(client.patch(NEWS, json={"retention": {"max_age": "0s"}}), 422)
        error_of(client.patch(NEWS, json={"retention": {"max_documents": 0}}), 422)
        # More than a signed 64-bit count (a Redis collection answered 500): refused.
        error_of(client.patch(NEWS, json={"retention": {"max_documents": 2**64}}), 422)
        error_of(client.put(NEWS, json={"limits": {"max_documents": 52433389438715265024}}), 422)
        error_of(client.patch(NEWS, json={"windows": "1h"}), 422)
        error_of(client.patch("/v1/collections/nothing", json={}), 404)
        kept = client.get(NEWS).json()["settings"]
        documents = client.get(NEWS).json()["stats"]["documents"]
    for client in timed_client(tmp_path, clock):
        assert client.get(NEWS).json()["settings"] == kept
        assert client.get(NEWS).json()["stats"]["documents"] == documents
        assert {i for i in range(6) if client.get(f"{DOCS}/m{i * 20}").status_code == 200} <= alive


def test_expired_on_arrival_is_answered_and_not_stored(tmp_path: Path) -> None:
    clock = FakeClock(1_714_564_800.0)
    now = clock.us
    for client in timed_client(tmp_path, clock):
        client.put(NEWS, json={"retention": {"max_age": "1d"}, "match_window": "3d"})
        client.post(DOCS, json={"id": "fresh", "text": STORIES[0], "timestamp": now / 1e6})
        old = (now - 2 * 24 * HOUR) / 1e6
        answer = client.post(DOCS, json={"id": "old", "text": STORIES[0], "timestamp": old})
        assert answer.status_code == 200
        body = answer.json()
        assert body["inserted"] is False and body["duplicate_of"] == "fresh"
        assert [m["id"] for m in body["matches"]] == ["fresh"]
        error_of(client.get(f"{DOCS}/old"), 404)
        # A replacement with an expired time changes nothing either.
        put = client.put(f"{DOCS}/fresh", json={"text": STORIES[1], "timestamp": old})
        assert put.status_code == 200 and put.json()["inserted"] is False
        assert client.get(f"{DOCS}/fresh").json()["timestamp"] == iso_time_us(now)
        stats = client.get(NEWS).json()["stats"]
        assert stats["documents"] == 1 and stats["oldest_timestamp"] == iso_time_us(now)
        clock.advance(2 * 86400)
        stats = client.get(NEWS).json()["stats"]
        assert stats["documents"] == 0 and stats["oldest_timestamp"] is None
        error_of(client.get(f"{DOCS}/fresh"), 404)
        metrics = client.get("/metrics").text
        assert 'neardup_documents{collection="news"} 0.0' in metrics
        assert "neardup_evicted_documents_total" in metrics


def test_durations_are_parsed_strictly(tmp_path: Path) -> None:
    clock = FakeClock()
    for client in timed_client(tmp_path, clock):
        for good in ("1s", "30m", "48h", "7d", "2w", "36500d"):
            response = client.put(f"/v1/collections/g{len(good)}x", json={"match_window": good})
            assert response.status_code in (200, 201), (good, response.text)
        for bad in ("48", "h", "0h", "-1h", "1.5h", "1h30m", "48H", " 48h", "1y", 48, "36501d"):
            response = client.put("/v1/collections/bad", json={"match_window": bad})
            assert error_of(response, 422)["message"].startswith("match_window"), bad


# ---------------------------------------------------------------- restarts


def snapshot(database: Path, target: Path) -> None:
    """What a crash at this moment would leave on disk: the committed transactions."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(database) as source, sqlite3.connect(target) as copy:
        source.backup(copy)


@pytest.mark.parametrize("retention", ["age", "count"])
def test_a_restart_in_the_middle_of_an_eviction_loses_nothing_and_brings_nothing_back(
    tmp_path: Path, retention: str
) -> None:
    clock = FakeClock()
    config = CollectionConfig(
        retention=RetentionConfig(max_age="2h")
        if retention == "age"
        else RetentionConfig(max_documents=60)
    )
    model = Model(max_age=config.retention.max_age_us, max_kept=config.retention.max_documents)
    path = tmp_path / "live.db"
    registry = Registry(SQLiteStore(path, "NORMAL"), clock=clock)
    registry.open()
    collection, _ = registry.create("t", config)
    rng = random.Random(5)
    snapshots: list[tuple[Path, float, set[str]]] = []
    number = 0
    for step in range(40):
        now = clock.us
        batch = []
        for _ in range(rng.choice([1, 4, 9])):
            ts = now - rng.choice([0, 0, 10, 70]) * 60_000_000
            batch.append((f"r{number}", rng.randrange(len(STORIES)), ts))
            number += 1
        collection.insert([NewDocument(STORIES[s] + f" {i}", i, None, t) for i, s, t in batch])
        model.insert(batch, now)
        if rng.random() < 0.3:  # a client delete: the count retention must not refill
            victims = [d for d in model.visible(now)]
            if victims:
                victim = rng.choice(victims)
                collection.delete(victim.id)
                model.delete(victim.id, now)
        clock.advance(rng.choice([60, 600, 1800]))
        collection.evict(rng.choice([1, 5, 20]))  # part of what is due, never all
        collection.flush()
        model.expire(clock.us)
        visible = {d.id for d in model.visible(clock.us)}
        assert collection.expiring() >= 0
        if step % 4 == 3:
            target = tmp_path / f"crash-{step}.db"
            snapshot(path, target)
            snapshots.append((target, clock.now, visible))
    registry.close()
    assert snapshots
    for target, moment, visible in snapshots:
        restarted_clock = FakeClock(moment)
        restarted = Registry(SQLiteStore(target, "NORMAL"), clock=restarted_clock)
        restarted.open()
        again = restarted.get("t")
        held = {
            document_id
            for document_id in (f"r{i}" for i in range(number))
            if _exists(again, document_id)
        }
        assert held == visible, f"{target.name}: lost {visible - held}, back {held - visible}"
        again._check()
        restarted.evict()
        again.flush()
        again._check()
        restarted.close()


def _exists(collection: Any, document_id: str) -> bool:
    try:
        collection.get(document_id)
    except Exception:
        return False
    return True


def test_sigkill_under_a_count_retention_keeps_the_newest_and_brings_nothing_back(
    tmp_path: Path,
) -> None:
    """Writers with rising timestamps into a collection that keeps 150 documents, a
    SIGKILL, a restart: every acknowledged document among the 150 newest sent is there,
    nothing older than what was seen gone comes back, at most 150 are held."""
    data = tmp_path / "data"
    keep = 150
    sent: dict[str, int] = {}
    acked: set[str] = set()
    seen_gone: set[str] = set()
    counter = iter(range(10**9))
    lock = threading.Lock()
    stop = threading.Event()

    def write(seed: int, url: str) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                with lock:
                    batch = []
                    for _ in range(rng.choice([1, 3, 8])):
                        number = next(counter)
                        batch.append(
                            {
                                "id": f"k{number}",
                                "text": STORIES[number % 10] + f" {number}",
                                "timestamp": 1_700_000_000 + number,
                            }
                        )
                        sent[batch[-1]["id"]] = number
                try:
                    response = client.post(f"{DOCS}/batch", json={"documents": batch})
                except httpx.TransportError:
                    return
                if response.status_code == 200:
                    with lock:
                        acked.update(d["id"] for d in batch)
                # Read an old acknowledged one: once gone, it must stay gone.
                with lock:
                    probe = rng.choice(sorted(acked)) if acked else None
                if probe is not None:
                    try:
                        if client.get(f"{DOCS}/{probe}").status_code == 404:
                            with lock:
                                seen_gone.add(probe)
                    except httpx.TransportError:
                        return

    server = Server(data).start()
    try:
        with httpx.Client(base_url=server.url) as client:
            client.put(NEWS, json={"retention": {"max_documents": keep}})
        writers = [threading.Thread(target=write, args=(i, server.url)) for i in range(3)]
        for writer in writers:
            writer.start()
        waited = threading.Event()
        while len(acked) < 900 and not waited.wait(0.02):
            pass
        assert server.process is not None
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        stop.set()
        for writer in writers:
            writer.join()
    finally:
        server.kill()
    with Server(data) as restarted, httpx.Client(base_url=restarted.url) as client:
        held = {i for i in sent if client.get(f"{DOCS}/{i}").status_code == 200}
        stats = client.get(NEWS).json()["stats"]
    newest = sorted(sent, key=sent.__getitem__)[-keep:]
    assert len(held) == stats["documents"] <= keep
    assert {i for i in newest if i in acked} <= held, "an acknowledged recent document is lost"
    assert not (held & seen_gone), "an expired document came back"
    assert held <= set(sent)


# ---------------------------------------------------------------- eviction under load


def _wanted(
    document: tuple[int, int],
    moment: int,
    story: int,
    max_age: int,
    since: int | None,
    until: int | None,
) -> bool:
    """Whether a search at ``moment`` must return a document (story, timestamp)."""
    told, timestamp = document
    return (
        told == story
        and timestamp >= moment - max_age
        and (since is None or timestamp >= since)
        and (until is None or timestamp <= until)
    )


def test_eviction_runs_beside_searches_and_inserts(tmp_path: Path) -> None:
    """The evictor thread evicts while a writer inserts (moving the clock) and readers
    search with since / until. Every answer holds only documents that were visible at some
    moment of the search, and every document visible throughout it."""
    clock = FakeClock()
    registry = Registry(SQLiteStore(tmp_path / "t.db", "NORMAL"), clock=clock)
    registry.open()
    max_age = 2 * HOUR
    collection, _ = registry.create(
        "t", CollectionConfig(retention=RetentionConfig(max_age="2h", max_documents=100_000))
    )
    registry.start_background()
    documents: dict[str, tuple[int, int]] = {}  # id -> (story, timestamp)
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[str] = []
    searches = [0]

    def writer() -> None:
        rng = random.Random(1)
        number = 0
        while not stop.is_set() and number < 6000:
            now = clock.us
            batch = []
            for _ in range(rng.choice([1, 16, 64])):
                ts = now - rng.randint(0, 90) * 60_000_000
                batch.append((f"w{number}", rng.randrange(len(STORIES)), ts))
                number += 1
            with lock:
                documents.update({i: (s, t) for i, s, t in batch})
            collection.insert([NewDocument(STORIES[s], i, None, t) for i, s, t in batch])
            with lock:
                acknowledged.extend(i for i, _, _ in batch)
            with lock:
                clock.advance(rng.choice([10, 60, 300]))

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            story = rng.randrange(len(STORIES))
            with lock:
                start = clock.us
                known_before = list(acknowledged)
            since = start - rng.randint(0, 3) * HOUR if rng.random() < 0.5 else None
            until = start - rng.randint(0, 2) * HOUR if rng.random() < 0.5 else None
            if since is not None and until is not None and since > until:
                since, until = until, since
            found = [
                m.id
                for m in collection.search(
                    STORIES[story], Query(limit=100_000, since=since, until=until)
                )
            ]
            with lock:
                end = clock.us
                sent = dict(documents)
            searches[0] += 1

            within = (story, max_age, since, until)
            extra = [i for i in found if i not in sent or not _wanted(sent[i], start, *within)]
            missing = [
                i for i in known_before if _wanted(sent[i], end, *within) and i not in set(found)
            ]
            if extra or missing:
                failures.append(f"extra {extra[:5]} missing {missing[:5]}")

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(i,)) for i in range(2)
    ]
    for thread in threads:
        thread.start()
    threads[0].join()
    stop.set()
    for thread in threads[1:]:
        thread.join()
    assert collection.stats()["evicted"] > 0, "the evictor did not run beside the others"
    registry.evict()
    collection.flush()
    assert not failures, failures[:5]
    assert searches[0] > 20
    assert collection.stats()["evicted"] > 1000
    collection._check()
    now = clock.us
    alive = {i for i, (_, t) in documents.items() if t >= now - max_age}
    assert {i for i in documents if _exists(collection, i)} == alive
    registry.close()


# ---------------------------------------------------------------- 507


def test_507_under_concurrent_writers_and_the_process_still_answers(tmp_path: Path) -> None:
    """NEARDUP_MAX_DOCUMENTS 300 over every collection and a collection limited to 60:
    six writers at once get exactly the room there is, every refused document gets 507
    insufficient_storage and is not stored, and the service answers on (ready, searches,
    reads); room freed by deletes is taken again; a restart keeps the count."""
    cap, limited_cap = 300, 60
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def write(seed: int, url: str) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=30) as client:
            for round_ in range(25):
                collection = rng.choice(["news", "limited", "default"])
                docs = f"/v1/collections/{collection}/documents"
                ids = [f"{collection}-{seed}-{round_}-{i}" for i in range(rng.choice([1, 7, 20]))]
                texts = [english_like_text(rng, 300) for _ in ids]
                if len(ids) == 1:
                    response = client.post(docs, json={"id": ids[0], "text": texts[0]})
                    assert response.status_code in (201, 507), response.text
                    if response.status_code == 507:
                        assert response.json()["error"]["code"] == "insufficient_storage"
                    codes = [response.status_code]
                else:
                    response = client.post(
                        f"{docs}/batch",
                        json={
                            "documents": [
                                {"id": i, "text": t} for i, t in zip(ids, texts, strict=True)
                            ]
                        },
                    )
                    assert response.status_code == 200, response.text
                    codes = [
                        507
                        if "error" in r and r["error"]["code"] == "insufficient_storage"
                        else 201
                        for r in response.json()["results"]
                    ]
                with lock:
                    outcomes.update(zip(ids, codes, strict=True))

    data = tmp_path / "data"
    with (
        Server(data, NEARDUP_MAX_DOCUMENTS=str(cap)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        client.put(NEWS)
        client.put("/v1/collections/limited", json={"limits": {"max_documents": limited_cap}})
        writers = [threading.Thread(target=write, args=(i, server.url)) for i in range(6)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        stored = [i for i, code in outcomes.items() if code == 201]
        refused = [i for i, code in outcomes.items() if code == 507]
        assert len(stored) == cap and refused
        assert len([i for i in stored if i.startswith("limited-")]) <= limited_cap
        for document_id in stored[::7] + refused[::7]:
            collection = document_id.split("-")[0]
            status = client.get(f"/v1/collections/{collection}/documents/{document_id}")
            assert status.status_code == (200 if document_id in stored else 404)
        counts = {
            c["name"]: c["stats"]["documents"]
            for c in client.get("/v1/collections").json()["collections"]
        }
        assert sum(counts.values()) == cap and counts["limited"] <= limited_cap
        assert client.get("/readyz").status_code == 200
        search = client.post(
            "/v1/collections/news/search",
            json={"text": english_like_text(random.Random(9), 300)},
        )
        assert search.status_code == 200
        # Deletes make room again, exactly as much.
        victims = [i for i in stored if i.startswith("news-")][:5]
        for victim in victims:
            assert client.delete(f"{DOCS}/{victim}").status_code == 204
        again = client.post(
            f"{DOCS}/batch",
            json={"documents": [{"text": f"room {i} " + STORIES[i]} for i in range(7)]},
        ).json()["results"]
        assert ["error" in r for r in again] == [False] * 5 + [True] * 2
        # A collection whose retention keeps it at its count takes documents still.
        client.put("/v1/collections/rolling", json={"retention": {"max_documents": 1}})
        first = client.post("/v1/collections/rolling/documents", json={"text": STORIES[1]})
        assert first.status_code == 507  # it would add one: no room
    with (
        Server(data, NEARDUP_MAX_DOCUMENTS=str(cap)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.post(DOCS, json={"text": STORIES[2]}).status_code == 507
        assert client.get("/readyz").status_code == 200


def test_a_full_service_still_takes_documents_into_a_rolling_collection(tmp_path: Path) -> None:
    clock = FakeClock()
    for client in timed_client(tmp_path, clock, max_documents=3):
        client.put("/v1/collections/rolling", json={"retention": {"max_documents": 2}})
        docs = "/v1/collections/rolling/documents"
        assert client.post(docs, json={"id": "a", "text": STORIES[0]}).status_code == 201
        assert client.post(docs, json={"id": "b", "text": STORIES[1]}).status_code == 201
        assert (
            client.post(DOCS.replace("news", "default"), json={"text": STORIES[2]}).status_code
            == 201
        )
        assert (
            client.post(DOCS.replace("news", "default"), json={"text": STORIES[3]}).json()["error"][
                "code"
            ]
            == "insufficient_storage"
        )
        clock.advance(1)
        # Full, but at its retention count: c replaces the oldest, a.
        assert client.post(docs, json={"id": "c", "text": STORIES[4]}).status_code == 201
        assert client.get(f"{docs}/a").status_code == 404
        assert client.get(f"{docs}/c").status_code == 200
