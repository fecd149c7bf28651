"""The HTTP contract on the Redis backend (NEARDUP_BACKEND=redis://...), on the session's
standalone redis-server (tests/redis_servers.py), where it differs from the embedded
service's or needs two apps on one server: the answers of seeded streams of operations
are compared with the embedded service's for the same input; what the backend refuses.
The contract tests themselves (tests/api/test_api.py) run on every backend through
tests/conftest.py's `backend` fixture.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from fastapi.testclient import TestClient

from app.backends.redis.store.connect import connect
from app.backends.redis.store.wire import Wire
from app.config import Settings
from app.main import create_app
from devkit.corpus import english_like_text, mutate_words
from devkit.server import neardup_command
from tests import reference
from tests.conftest import LIMITS, make_client
from tests.redis_servers import RedisServer, emptied, standalone
from tests.time_model import FakeClock

DOCS = "/v1/collections/default/documents"
WEEK_START = 1_714_521_600  # 2024-05-01, Unix seconds: the stream's timestamps


def _document(rng: random.Random, bases: list[str], number: int) -> dict[str, Any]:
    """A document of the stream: a near or exact copy of a base, another text, or an
    empty one; an id from a small pool (so that retries and conflicts come up), a
    timestamp from a week, metadata sometimes."""
    base = rng.choice(bases)
    rate = rng.choice([0, 0, 0.005, 0.01, 0.03, 0.1, 0.3, 1.0])
    text = base if rate == 0 else mutate_words(rng, base, rate)
    if rng.random() < 0.03:
        text = " \t "
    document: dict[str, Any] = {
        "id": f"d{rng.randrange(number)}",
        "text": text,
        "timestamp": WEEK_START + rng.randrange(7 * 86_400),
    }
    if rng.random() < 0.3:
        document["metadata"] = {"source": rng.choice(["wire", "web"])}
    return document


def _window(rng: random.Random) -> dict[str, int]:
    if rng.random() < 0.7:
        return {}
    since = WEEK_START + rng.randrange(7 * 86_400)
    return {"since": since, "until": since + rng.randrange(3 * 86_400)}


def _operations(
    seed: int, count: int, windows: bool = False, shorts: bool = False, passages: bool = False
) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(kind, method, path under the collection, JSON body or query) of a seeded stream;
    with ``windows``, PATCHes of the collection's match window among them; with
    ``shorts``, short texts too (the n-gram index's); with ``passages``, texts that hold
    two or three others (roundups) too."""
    rng = random.Random(seed)
    bases = [english_like_text(random.Random(seed * 100 + i), 900) for i in range(6)]
    if shorts:
        bases += [english_like_text(random.Random(seed * 100 + i), 60) for i in range(6, 10)]
    if passages:
        bases += ["\n\n".join(rng.sample(bases[:6], rng.randint(2, 3))) for _ in range(4)]
    sent: list[dict[str, Any]] = []
    for _ in range(count):
        if windows and rng.random() < 0.05:
            window = rng.choice(["12h", "1d", "3d", None])
            yield "patch", "PATCH", "", {"match_window": window}
            continue
        kind = rng.random()
        if kind < 0.3:
            documents = [_document(rng, bases, 60) for _ in range(rng.randint(1, 8))]
            if sent and rng.random() < 0.3:
                documents.append(rng.choice(sent))  # sent again: a retry, or a conflict
            sent += documents
            on_duplicate = rng.choice(["insert", "insert", "skip"])
            body = {"documents": documents, "on_duplicate": on_duplicate, **_window(rng)}
            yield "batch", "POST", "/documents/batch", body
        elif kind < 0.5:
            document = (
                rng.choice(sent) if sent and rng.random() < 0.2 else _document(rng, bases, 60)
            )
            sent.append(document)
            yield "insert", "POST", "/documents", {**document, **_window(rng)}
        elif kind < 0.55:
            document = _document(rng, bases, 60)
            yield "put", "PUT", f"/documents/{document.pop('id')}", document
        elif kind < 0.62:
            yield "delete", "DELETE", f"/documents/d{rng.randrange(60)}", {}
        elif kind < 0.8:
            query: dict[str, Any] = {
                "text": _document(rng, bases, 1)["text"],
                "limit": rng.choice([1, 3, 10, 100]),
            }
            if rng.random() < 0.3:
                query["min_similarity"] = rng.choice([0.5, 0.8, 0.9, 1.0])
            if rng.random() < 0.3:
                query["max_distance"] = rng.randint(0, 3)
            yield "search", "POST", "/search", {**query, **_window(rng)}
        elif kind < 0.9:
            similar = f"/documents/d{rng.randrange(60)}/similar"
            yield "similar", "GET", similar, {"limit": 100, **_window(rng)}
        else:
            yield "get", "GET", f"/documents/d{rng.randrange(60)}", {}


def _answer(client: TestClient, method: str, path: str, payload: dict[str, Any]) -> Any:
    url = "/v1/collections/stream" + path
    if method == "GET":
        response = client.get(url, params=payload)
    elif method == "DELETE":
        response = client.delete(url)
    else:
        response = client.request(method, url, json=payload)
    body = response.json() if response.content else None
    for result in body.get("results", []) if isinstance(body, dict) else []:
        if result.get("error", {}).get("code") == "insufficient_storage":
            # The embedded service names the service's limit where a batch crosses the
            # collection's (its count is the one before the batch): the code is the answer.
            result["error"].pop("message")
    if isinstance(body, dict):
        body.pop("created_at", None)  # the insert's own time
        body.pop("stats", None)  # a collection's: merges and index bytes are in-process
    return response.status_code, body


@pytest.mark.parametrize("seed", [1, 2])
def test_a_stream_of_operations_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path, seed: int
) -> None:
    compare_stream(redis_server.url, tmp_path, seed)


def test_a_stream_with_match_windows_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    compare_stream(redis_server.url, tmp_path, 4, windows=True)


@pytest.mark.parametrize("seed", [11, 12])
def test_a_stream_with_passages_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path, seed: int
) -> None:
    """Passages on, roundups of the stream's texts among them: the same passages,
    coverages, contains and contained_in, through batches, replacements and deletes."""
    compare_stream(redis_server.url, tmp_path, seed, shorts=True, passages=True)


def test_a_collection_of_before_spread_passage_keys_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A collection whose record predates spread passage keys (no ``spread_passages``)
    keeps its raw keys through the stream and a change of settings: the same answers."""
    compare_stream(redis_server.url, tmp_path, 11, shorts=True, passages=True, raw_keys=True)


def _entries_by_shard(url: str, collection: str) -> list[int]:
    """The passage entries in each shard's set of a collection (4 shard bits)."""
    made = connect(url)
    counts = [0] * 16
    for key in made.scan_iter(match=f"{{nd:{collection}~*:t*}}p", count=1000):
        shard = int(key.split(b"}")[0].rsplit(b":t", 1)[1], 16)
        counts[shard] += made.zcard(key)
    made.close()
    return counts


def test_passage_entries_spread_over_the_shards_where_raw_fingerprints_crowd(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Winnowing keeps each window's smallest hash, so raw fingerprints crowd the low
    shards; a new collection's entries fill every shard near its share (16 shards: none
    above 1.5 times the mean), where a collection of before (raw keys) puts more than
    twice its share in shard 0."""
    emptied(redis_server.url)
    rng = random.Random(3)
    texts = [english_like_text(rng, 1500) for _ in range(160)]
    served = contextlib.contextmanager(make_client)
    with served(tmp_path / "r", backend=redis_server.url, redis_shard_bits=4, **LIMITS) as app:
        for name in ("spread", "raw"):
            assert app.put(f"/v1/collections/{name}", json={}).status_code == 201
        _drop_spread_flag(redis_server.url, "raw")
        for name, at in itertools.product(("spread", "raw"), range(0, len(texts), 20)):
            chunk = [{"text": text} for text in texts[at : at + 20]]
            answer = app.post(f"/v1/collections/{name}/documents/batch", json={"documents": chunk})
            assert answer.status_code == 200
    spread, raw = (_entries_by_shard(redis_server.url, name) for name in ("spread", "raw"))
    assert sum(spread) == sum(raw) > 16 * 200
    mean = sum(spread) / 16
    assert max(spread) < 1.5 * mean and min(spread) > mean / 1.5, spread
    assert raw[0] > 2 * mean, raw


def _drop_spread_flag(url: str, name: str) -> None:
    """Rewrite a collection's record as one written before spread passage keys."""
    from app.backends.redis.registry import COLLECTIONS_KEY

    made = connect(url)
    stored = json.loads(made.hget(COLLECTIONS_KEY, name))
    assert stored.pop("spread_passages") is True
    made.hset(COLLECTIONS_KEY, name, json.dumps(stored))
    made.close()


@pytest.mark.parametrize("seed", [5, 6])
def test_a_stream_with_short_texts_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path, seed: int
) -> None:
    """The default settings: the n-gram index of short texts too."""
    compare_stream(redis_server.url, tmp_path, seed, shorts=True)


def compare_stream(
    url: str,
    tmp_path: Path,
    seed: int,
    windows: bool = False,
    shorts: bool = False,
    passages: bool = False,
    raw_keys: bool = False,
    **settings: Any,
) -> None:
    """Inserts (batches with retries, conflicts, empty texts and skips, single inserts,
    replacements), deletes, searches, similar and gets, sent to the embedded service and
    to the Redis backend: every status and answer the same (the embedded service is the
    reference; its indexes are tested against brute force elsewhere). ``raw_keys``: the
    Redis collection's record as written before spread passage keys, and its settings
    changed (PATCH) midway."""
    emptied(url)
    served = contextlib.contextmanager(make_client)
    with (
        served(tmp_path / "embedded", **LIMITS) as embedded,
        served(tmp_path / "redis", backend=url, **LIMITS, **settings) as over_redis,
    ):
        created_with: dict[str, Any] = {} if shorts else {"ngram": {"enabled": False}}
        if windows:
            created_with["match_window"] = "2d"
        if passages:
            created_with["passages"] = {"enabled": True}
        for made in (embedded, over_redis):
            created = made.put("/v1/collections/stream", json=created_with)
            assert created.status_code == 201
        if raw_keys:
            _drop_spread_flag(url, "stream")
        seen: Counter[tuple[str, int]] = Counter()
        for name, method, path, payload in _operations(seed, 300, windows, shorts, passages):
            if raw_keys and seen[("search", 200)] == 5 and not seen[("patch", 200)]:
                seen[("patch", 200)] += 1
                for made in (embedded, over_redis):
                    patched = made.patch("/v1/collections/stream", json={"match_window": "30d"})
                    assert patched.status_code == 200
            expected = _answer(embedded, method, path, payload)
            got = _answer(over_redis, method, path, payload)
            if got != expected:  # whose bookkeeping broke, before saying that they differ
                for made in (embedded, over_redis):
                    made.app.state.registry.get("stream")._check()  # type: ignore[attr-defined]
            assert got == expected, (name, payload)
            seen[(name, expected[0])] += 1
            seen[("ngram", 0)] += "'ngram'" in repr(expected[1])
            seen[("passage", 0)] += "'passage'" in repr(expected[1])
            seen[("contains", 0)] += "'contains': [{" in repr(expected[1])
        for made in (embedded, over_redis):  # each backend's own bookkeeping holds
            made.app.state.registry.get("stream")._check()  # type: ignore[attr-defined]
        resolved = over_redis.app.state.registry.resolve("stream")  # type: ignore[attr-defined]
        assert resolved.spread_passages is not raw_keys
        stats = [c.get("/v1/collections/stream").json()["stats"] for c in (embedded, over_redis)]
    assert stats[1]["documents"] == stats[0]["documents"] > 0
    assert stats[1]["duplicates"] == stats[0]["duplicates"] > 0
    # The stream did what it is for: retries, conflicts, new documents, deletes.
    assert seen[("insert", 409)] and seen[("insert", 200)] and seen[("insert", 201)], seen
    assert seen[("delete", 204)] and seen[("delete", 404)] and seen[("put", 200)], seen
    assert seen[("patch", 200)] or not windows, seen
    assert seen[("ngram", 0)] or not shorts, seen  # short texts matched by the n-gram index
    assert (seen[("passage", 0)] and seen[("contains", 0)]) or not passages, seen


def test_the_service_limit_counts_every_collection(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """NEARDUP_MAX_DOCUMENTS over every collection: past it a document is refused (507,
    the service's message) at its position; a collection whose retention keeps it at its
    size still takes documents; a delete makes room."""
    emptied(redis_server.url)
    texts = [english_like_text(random.Random(i), 400) for i in range(12)]
    served = contextlib.contextmanager(make_client)
    with served(tmp_path, backend=redis_server.url, max_documents=5) as client:
        for name, settings in (
            ("a", {}),
            ("b", {}),
            ("rolling", {"retention": {"max_documents": 1}}),
        ):
            assert client.put(f"/v1/collections/{name}", json=settings).status_code == 201
        for i in range(3):
            body = {"id": f"a{i}", "text": texts[i]}
            assert client.post("/v1/collections/a/documents", json=body).status_code == 201
        batch = [{"id": f"b{i}", "text": texts[3 + i]} for i in range(4)]
        results = client.post("/v1/collections/b/documents/batch", json={"documents": batch})
        answers = results.json()["results"]
        assert [a.get("inserted") for a in answers[:2]] == [True, True]
        for refused in answers[2:]:
            assert refused["error"]["code"] == "insufficient_storage"
            assert "NEARDUP_MAX_DOCUMENTS" in refused["error"]["message"]
        rolling = "/v1/collections/rolling/documents"
        assert client.post(rolling, json={"id": "r0", "text": texts[8]}).status_code == 507
        assert client.delete("/v1/collections/a/documents/a0").status_code == 204
        for i in range(3):  # one place, kept by a retention of one: adds nothing net
            body = {"id": f"r{i}", "text": texts[8 + i]}
            assert client.post(rolling, json=body).status_code == 201
        assert (
            client.post("/v1/collections/a/documents", json={"text": texts[11]}).status_code == 507
        )


def test_redis_out_of_reach_is_503_with_the_error_body(tmp_path: Path) -> None:
    with standalone(tmp_path / "redis") as server:
        served = contextlib.contextmanager(make_client)
        with served(tmp_path / "app", backend=server.url) as client:
            assert client.post(DOCS, json={"id": "a", "text": "before"}).status_code == 201
            server.stop()
            for response in (
                client.get("/readyz"),
                client.post(DOCS, json={"id": "b", "text": "after"}),
                client.post(f"{DOCS}/batch", json={"documents": [{"text": "after"}]}),
                client.post("/v1/collections/default/search", json={"text": "before"}),
                client.get(f"{DOCS}/a"),
                client.get("/v1/collections/default"),
            ):
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] in ("storage_unavailable", "not_ready")
            metrics = client.get("/metrics")
            assert metrics.status_code == 200
            failures = _sample(metrics.text, 'neardup_storage_failures_total{kind="redis_error"}')
            assert failures >= 5
            assert _sample(metrics.text, "neardup_storage_round_trips_total") > 0


def _sample(text: str, name: str) -> float:
    """A sample's value in Prometheus's text format."""
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[-1])


def test_replicas_behind_is_503_and_nothing_is_acknowledged(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A standalone server has no replica: with NEARDUP_REDIS_WAIT_REPLICAS=1 the first
    write of an insert waits in vain and the answer is 503; sent again without the wait,
    the document is inserted (and then a retry), found by every method."""
    emptied(redis_server.url)
    text = english_like_text(random.Random(5), 1200)
    served = contextlib.contextmanager(make_client)
    with served(tmp_path / "a", backend=redis_server.url, redis_wait_replicas=1) as waiting:
        refused = waiting.post(DOCS, json={"id": "w", "text": text})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "storage_unavailable"
        assert waiting.delete(f"{DOCS}/w").status_code == 404  # a read: no wait
        metrics = waiting.get("/metrics").text
        assert _sample(metrics, 'neardup_storage_failures_total{kind="replicas_behind"}') == 1
    with served(tmp_path / "b", backend=redis_server.url) as plain:
        assert plain.post(DOCS, json={"id": "w", "text": text}).status_code == 201
        again = plain.post(DOCS, json={"id": "w", "text": text})
        assert again.status_code == 200 and again.json()["inserted"] is False
        found = plain.post("/v1/collections/default/search", json={"text": text}).json()
        assert reference.whole_document_matches(found["matches"]) == [
            {
                "id": "w",
                "similarity": 1.0,
                "hamming_distance": 0,
                "methods": ["exact", "simhash", "minhash"],
            }
        ]


def test_a_search_is_two_round_trips_and_sees_a_collection_dropped_elsewhere(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings a process read last ride in the search's first round trip; when
    another process dropped the collection, or dropped it and created it again with
    other settings, the search answers for what is stored now."""
    emptied(redis_server.url)
    sent: list[int] = []
    # Every batch goes through one of them (send packs, then calls send_packed; the API's
    # searches await send_packed_async, which hands TLS batches to send_packed).
    send, send_async = Wire.send_packed, Wire.send_packed_async

    def counted(wire: Wire, packed: Any, keys: Any = None, durable: bool = False) -> list[Any]:
        if packed:
            sent.append(len(packed))
        return send(wire, packed, keys, durable)

    async def counted_async(
        wire: Wire, packed: Any, keys: Any = None, durable: bool = False
    ) -> list[Any]:
        if packed and wire.on_loop:
            sent.append(len(packed))
        return await send_async(wire, packed, keys, durable)

    monkeypatch.setattr(Wire, "send_packed", counted)
    monkeypatch.setattr(Wire, "send_packed_async", counted_async)
    text = english_like_text(random.Random(8), 1200)
    search = "/v1/collections/news/search"
    served = contextlib.contextmanager(make_client)
    with (
        served(tmp_path / "a", backend=redis_server.url) as one,
        served(tmp_path / "b", backend=redis_server.url) as other,
    ):
        # Passages off: with them a search takes two round trips more (test_passages_api).
        settings = {"passages": {"enabled": False}}
        assert one.put("/v1/collections/news", json=settings).status_code == 201
        assert one.post("/v1/collections/news/documents", json={"text": text}).status_code == 201
        assert len(one.post(search, json={"text": text}).json()["matches"]) == 1
        sent.clear()
        assert len(one.post(search, json={"text": text}).json()["matches"]) == 1
        assert len(sent) == 2, sent
        near = one.post("/v1/collections/news/documents", json={"text": text + " more"})
        similar = f"/v1/collections/news/documents/{near.json()['id']}/similar"
        assert len(one.get(similar).json()["matches"]) == 1
        sent.clear()
        assert len(one.get(similar).json()["matches"]) == 1
        assert len(sent) == 3, sent  # the document and the settings, then the search's two
        document = similar.removesuffix("/similar")
        sent.clear()
        assert one.get(document).json()["id"] == near.json()["id"]
        assert len(sent) == 1, sent  # the document, the settings beside it
        assert other.delete("/v1/collections/news").status_code == 204
        gone = one.post(search, json={"text": text})
        assert gone.json()["error"]["code"] == "collection_not_found"
        assert one.get(similar).json()["error"]["code"] == "collection_not_found"
        assert one.get(document).json()["error"]["code"] == "collection_not_found"
        assert other.put("/v1/collections/news", json={"simhash": {"max_distance": 2}}).is_success
        assert one.post(search, json={"text": text}).json() == {"matches": []}
        wider = one.post(search, json={"text": text, "max_distance": 3})
        assert wider.json()["error"]["code"] == "invalid_parameter"
        assert one.get(similar).json()["error"]["code"] == "document_not_found"
        assert one.get(document).json()["error"]["code"] == "document_not_found"
        wider = one.get(similar, params={"max_distance": 3})
        assert wider.json()["error"]["code"] == "invalid_parameter"


def test_a_collection_keeps_the_shard_bits_it_was_created_with_in_every_process(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """NEARDUP_REDIS_SHARD_BITS=3 where the collection is created; another process with the
    default (12) serves it with the recorded 3 bits, also after it changed the settings
    (PATCH): its answers are the embedded service's, and every index entry lies in one of
    the 2^3 shard numbers' sets."""
    emptied(redis_server.url)
    served = contextlib.contextmanager(make_client)
    with (
        served(tmp_path / "embedded", **LIMITS) as embedded,
        served(tmp_path / "a", backend=redis_server.url, redis_shard_bits=3, **LIMITS) as creator,
        served(tmp_path / "b", backend=redis_server.url, **LIMITS) as other,
    ):
        for made in (embedded, creator):
            assert made.put("/v1/collections/stream", json={}).status_code == 201
        answered = Counter()
        for name, method, path, payload in _operations(8, 200, shorts=True):
            expected = _answer(embedded, method, path, payload)
            assert _answer(other, method, path, payload) == expected, (name, payload)
            answered[name] += 1
            if answered["search"] == 5 and name == "search":
                # A change of settings rewrites the collection's record: the layout stays.
                for made in (embedded, other):
                    patched = made.patch("/v1/collections/stream", json={"match_window": "30d"})
                    assert patched.status_code == 200
        assert answered["search"] and answered["insert"] and answered["batch"], answered
    made = connect(redis_server.url)
    shards = set()
    for key in made.scan_iter(match="{nd:stream~*:t*}*", count=1000):
        tag = key.split(b"}")[0]
        shards.add(int(tag.rsplit(b":t", 1)[1], 16))
    made.close()
    assert shards and max(shards) < 2**3, shards


def test_a_match_window_changed_through_one_process_applies_in_the_other(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    emptied(redis_server.url)
    text = english_like_text(random.Random(9), 1200)
    day = 86_400
    news = "/v1/collections/news"
    served = contextlib.contextmanager(make_client)
    with (
        served(tmp_path / "a", backend=redis_server.url) as one,
        served(tmp_path / "b", backend=redis_server.url) as other,
    ):
        assert one.put(news, json={"match_window": "1d"}).status_code == 201
        first = {"id": "first", "text": text, "timestamp": WEEK_START}
        assert other.post(f"{news}/documents", json=first).status_code == 201
        later = {"id": "later", "text": text, "timestamp": WEEK_START + 3 * day}
        assert other.post(f"{news}/documents", json=later).json()["matches"] == []
        patched = other.patch(news, json={"match_window": "7d"})
        assert patched.status_code == 200 and patched.json()["settings"]["match_window"] == "7d"
        assert one.get(news).json()["settings"]["match_window"] == "7d"
        third = {"id": "third", "text": text, "timestamp": WEEK_START + 5 * day}
        answer = one.post(f"{news}/documents", json=third).json()
        assert [m["id"] for m in answer["matches"]] == ["first", "later"]
        assert answer["duplicate_of"] == "first"
        # Searches are not windowed.
        found = other.post(f"{news}/search", json={"text": text}).json()["matches"]
        assert [m["id"] for m in found] == ["first", "later", "third"]


def _neardup(*arguments: str, backend: str | None = None) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    if backend is not None:
        environment["NEARDUP_BACKEND"] = backend
    ran = subprocess.run(
        [neardup_command(), *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_collections_move_between_the_backends_by_export_and_import(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The embedded service's export imported into Redis answers as the embedded service
    (documents, clusters, a cluster named by a deleted document, short texts, searches,
    the next insert), and Redis's export of it is the same lines."""
    emptied(redis_server.url)
    rng = random.Random(21)
    base = english_like_text(rng, 1500)
    documents = [
        {"id": "root", "text": base, "metadata": {"n": 1}, "timestamp": WEEK_START},
        {"id": "near", "text": mutate_words(rng, base, 0.01), "timestamp": WEEK_START + 60},
        {"id": "nearer", "text": mutate_words(rng, base, 0.005)},
        {"id": "other", "text": english_like_text(rng, 900)},
        {"id": "t1", "text": "Breaking: quake hits Tokyo"},
        {"id": "t2", "text": "Breaking: quake hits Tokyo, 5 dead"},
    ]
    news = "/v1/collections/news"
    queries = [base, documents[3]["text"], "quake hits Tokyo", documents[1]["text"]]
    served = contextlib.contextmanager(make_client)
    exported = tmp_path / "export.jsonl"
    with served(tmp_path / "embedded") as embedded:
        assert embedded.put(news, json={"store_text": True}).status_code == 201
        embedded.post(f"{news}/documents/batch", json={"documents": documents})
        assert embedded.delete(f"{news}/documents/root").status_code == 204
        exported.write_text(_neardup("export", "--data-dir", str(tmp_path / "embedded" / "data")))
        _neardup("import", str(exported), backend=redis_server.url)
        with served(tmp_path / "redis", backend=redis_server.url) as over_redis:
            for document in documents:
                path = f"{news}/documents/{document['id']}"
                assert over_redis.get(path).json() == embedded.get(path).json()
                similar = f"{path}/similar"
                assert over_redis.get(similar).json() == embedded.get(similar).json()
            for text in queries:
                body = {"text": text, "limit": 100}
                answer = over_redis.post(f"{news}/search", json=body).json()
                assert answer == embedded.post(f"{news}/search", json=body).json()
            stats = [c.get(news).json()["stats"] for c in (embedded, over_redis)]
            for key in ("documents", "duplicates", "oldest_timestamp"):
                assert stats[1][key] == stats[0][key], key
            again = {"id": "again", "text": mutate_words(rng, base, 0.005)}
            answer = over_redis.post(f"{news}/documents", json=again).json()
            assert answer == embedded.post(f"{news}/documents", json=again).json()
            assert answer["cluster_id"] == "root" and answer["duplicate_of"] == "near"
            exported_again = _neardup("export", "--collection", "news", backend=redis_server.url)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    ours = [json.loads(line) for line in exported_again.splitlines()]
    assert ours[:-1] == [
        line for line in lines if line.get("collection", line.get("name")) == "news"
    ]
    assert ours[-1]["id"] == "again"


def _timed_operations(seed: int, count: int) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """The stream of _operations with short texts and match windows, the clock moved
    now and then, and the retention changed."""
    rng = random.Random(seed * 7919)
    for operation in _operations(seed, count, windows=True, shorts=True):
        if rng.random() < 0.08:
            yield "tick", "TICK", "", {"seconds": rng.choice([600, 3600, 6 * 3600, 86_400])}
        if rng.random() < 0.03:
            retention = {
                "max_age": rng.choice(["2d", "4d", "7d", None]),
                "max_documents": rng.choice([10, 25, 40, None]),
            }
            limits = {"max_documents": rng.choice([8, 20, 30, None])}
            yield "patch", "PATCH", "", {"retention": retention, "limits": limits}
        yield operation


@pytest.mark.parametrize(
    ("seed", "budget", "passages"),
    [(7, None, False), (8, None, False), (9, 18, False), (10, None, True)],
)
def test_a_stream_with_retention_answers_as_the_embedded_service(
    redis_server: RedisServer, tmp_path: Path, seed: int, budget: int | None, passages: bool
) -> None:
    """Retention by age and by count (changed on the way), a clock that moves, documents
    expired on arrival, ids of expired documents used again: every answer as the
    embedded service gives it, on one fake clock; then, both evicted, the same counts."""
    emptied(redis_server.url)
    clock = FakeClock(WEEK_START + 4 * 86_400.0)
    apps = [
        create_app(
            Settings(data_dir=tmp_path / name, backend=backend, max_documents=budget, **LIMITS),
            clock=clock,
        )
        for name, backend in (("embedded", None), ("redis", redis_server.url))
    ]
    with TestClient(apps[0]) as embedded, TestClient(apps[1]) as over_redis:
        for app in apps:
            assert app.state.ready.wait(60), app.state.startup_error
        created_with = {
            "retention": {"max_age": "4d", "max_documents": 25},
            "limits": {"max_documents": 20},
            "match_window": "2d",
        }
        if passages:  # their visibility: the retention's mark, read beside their lookups
            created_with["passages"] = {"enabled": True}
        for made in (embedded, over_redis):
            assert made.put("/v1/collections/stream", json=created_with).status_code == 201
        seen: Counter[tuple[str, int]] = Counter()
        for name, method, path, payload in _timed_operations(seed, 400):
            if method == "TICK":
                clock.advance(payload["seconds"])
                continue
            expected = _answer(embedded, method, path, payload)
            got = _answer(over_redis, method, path, payload)
            if got != expected:  # whose bookkeeping broke, before saying that they differ
                for made in (embedded, over_redis):
                    made.app.state.registry.get("stream")._check()  # type: ignore[attr-defined]
            assert got == expected, (name, payload)
            seen[(name, expected[0])] += 1
            seen[("not stored", 0)] += "'inserted': False" in repr(expected[1])
            seen[("full", 0)] += "insufficient_storage" in repr(expected[1])
        # The evictor stopped first: an eviction in the middle of a check's reads would
        # make the records and the side entries disagree.
        apps[1].state.registry.stop_background()
        for app in apps:
            app.state.registry.get("stream")._check()
            app.state.registry.evict()
            app.state.registry.get("stream")._check()
        stats = [c.get("/v1/collections/stream").json()["stats"] for c in (embedded, over_redis)]
    for key in ("documents", "duplicates", "expiring", "oldest_timestamp"):
        assert stats[1][key] == stats[0][key], (key, stats)
    assert stats[1]["evicted"] > 0 and seen[("patch", 200)] and seen[("not stored", 0)], seen
    assert seen[("full", 0)], seen  # a limit refused documents (507)
