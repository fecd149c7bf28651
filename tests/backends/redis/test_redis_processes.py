"""Real `neardup serve` processes on one Redis (NEARDUP_BACKEND): stateless workers.

Two processes serve the same collections: what one writes the other reads at once. A
process killed (SIGKILL) in the middle of a stream of inserts loses nothing it
acknowledged, and a retry of what it had not answered, through the other process,
finishes it. The references are the documents the test sent, nothing the service
computed.
"""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.corpus import english_like_text, mutate_words
from devkit.server import Server
from tests.redis_servers import RedisServer, emptied

DOCS = "/v1/collections/default/documents"
ACKNOWLEDGED_BEFORE_KILL = 300


def serve(tmp_path: Path, name: str, url: str) -> Server:
    return Server(tmp_path / name, NEARDUP_BACKEND=url, NEARDUP_LOG_LEVEL="warning")


@pytest.fixture
def two(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    emptied(redis_server.url)
    with serve(tmp_path, "a", redis_server.url) as a, serve(tmp_path, "b", redis_server.url) as b:
        yield a, b


def test_what_one_process_writes_the_other_reads_at_once(two: tuple[Server, Server]) -> None:
    a, b = two
    rng = random.Random(3)
    text = english_like_text(rng, 1500)
    near = mutate_words(rng, text, 0.005)
    with httpx.Client(base_url=a.url) as first, httpx.Client(base_url=b.url) as second:
        assert first.post(DOCS, json={"id": "one", "text": text}).status_code == 201
        assert second.get(f"{DOCS}/one").json()["cluster_id"] == "one"
        found = second.post("/v1/collections/default/search", json={"text": text}).json()
        assert [(m["id"], m["methods"]) for m in found["matches"]] == [
            ("one", ["exact", "simhash", "minhash", "passage"])
        ]
        # A near copy through the second joins the first's cluster; each sees the other.
        joined = second.post(DOCS, json={"id": "two", "text": near}).json()
        assert (joined["duplicate_of"], joined["cluster_id"]) == ("one", "one")
        similar = first.get(f"{DOCS}/one/similar").json()["matches"]
        assert [m["id"] for m in similar] == ["two"]
        # A retry through the other process is a retry; other content is a conflict.
        again = first.post(DOCS, json={"id": "two", "text": near})
        assert again.status_code == 200 and again.json()["inserted"] is False
        assert first.post(DOCS, json={"id": "two", "text": text}).status_code == 409
        # Collections: created through one, used and dropped through the other.
        assert second.put("/v1/collections/news", json={"store_text": True}).status_code == 201
        assert first.put("/v1/collections/news", json={"store_text": True}).status_code == 200
        news = "/v1/collections/news/documents"
        assert first.post(news, json={"id": "n", "text": text}).status_code == 201
        assert second.get(f"{news}/n").json()["text"] == text
        assert first.delete("/v1/collections/news").status_code == 204
        assert second.get(f"{news}/n").json()["error"]["code"] == "collection_not_found"
        assert second.delete(f"{DOCS}/one").status_code == 204
        assert first.get(f"{DOCS}/one").status_code == 404
        third = first.post(DOCS, json={"id": "three", "text": text}).json()
        assert third["duplicate_of"] == "two" and third["cluster_id"] == "one"


def _stream(
    url: str,
    seed: int,
    acknowledged: dict[str, str],
    unanswered: list[Any],
    enough: threading.Event,
) -> None:
    """Single inserts and batches of distinct texts until the process stops answering."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=30) as client:
        for number in range(100_000):
            count = rng.choice([1, 1, 1, 5, 20])
            documents = [
                {"id": f"s{seed}-{number}-{i}", "text": english_like_text(rng, 600)}
                for i in range(count)
            ]
            try:
                if count == 1:
                    response = client.post(DOCS, json=documents[0])
                    answers = [response.json()]
                else:
                    response = client.post(f"{DOCS}/batch", json={"documents": documents})
                    answers = response.json()["results"]
            except (httpx.TransportError, ValueError):
                unanswered.append(documents)
                return
            assert response.status_code in (200, 201), response.text
            for document, answer in zip(documents, answers, strict=True):
                assert answer["inserted"] is True, answer
                acknowledged[document["id"]] = document["text"]
            if len(acknowledged) >= ACKNOWLEDGED_BEFORE_KILL:
                enough.set()


def test_a_process_killed_during_inserts_loses_nothing_it_acknowledged(
    two: tuple[Server, Server],
) -> None:
    a, b = two
    acknowledged: dict[str, str] = {}
    unanswered: list[Any] = []
    enough = threading.Event()
    senders = [
        threading.Thread(target=_stream, args=(a.url, seed, acknowledged, unanswered, enough))
        for seed in range(4)
    ]
    for sender in senders:
        sender.start()
    assert enough.wait(120), "the stream did not get going"
    assert a.process is not None
    a.process.send_signal(signal.SIGKILL)
    for sender in senders:
        sender.join(60)
    assert len(unanswered) == len(senders)  # every sender was cut off mid-request
    with httpx.Client(base_url=b.url, timeout=30) as other:
        for document_id, text in acknowledged.items():
            assert other.get(f"{DOCS}/{document_id}").status_code == 200, document_id
            found = other.post("/v1/collections/default/search", json={"text": text}).json()
            assert [m["id"] for m in found["matches"]] == [document_id]
            assert found["matches"][0]["methods"] == ["exact", "simhash", "minhash", "passage"]
        # What was sent but not answered: sent again, every document is then stored
        # once, inserted now or a retry of a first attempt the kill cut short.
        retried = [d for documents in unanswered for d in documents]
        for document in retried:
            answer = other.post(DOCS, json=document)
            assert answer.status_code in (200, 201), answer.text
            assert answer.json()["duplicate_of"] in (None, document["id"])
            search = {"text": document["text"]}
            found = other.post("/v1/collections/default/search", json=search).json()
            assert [m["id"] for m in found["matches"]] == [document["id"]]
        stats = other.get("/v1/collections/default").json()["stats"]
        assert stats["documents"] == len(acknowledged) + len(retried)
