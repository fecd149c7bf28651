"""Crawler traffic through the API: per-document batch outcomes, safe retries, real-world
text, each followed by a restart (nothing lost, nothing doubled)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devkit.corpus import english_like_text, mutate_words
from tests import reference
from tests.conftest import make_client

NEWS = "/v1/collections/news"
DOCS = f"{NEWS}/documents"
LIMITS = {"max_text_chars": 5_000, "max_metadata_bytes": 200, "max_batch_documents": 50}


def story(seed: int) -> str:
    return english_like_text(random.Random(seed), 1500)


def clients(tmp_path: Path) -> Iterator[TestClient]:
    """The same data directory served twice: before and after a restart."""
    for _ in range(2):
        yield from make_client(tmp_path, **LIMITS)


def stored_ids(client: TestClient, candidates: list[str]) -> set[str]:
    found = {i for i in candidates if client.get(f"{DOCS}/{i}").status_code == 200}
    assert client.get(NEWS).json()["stats"]["documents"] == len(found), "a document counted twice"
    return found


def word5_jaccard(a: str, b: str) -> float:
    """The match rule's similarity, from sets of word 5-grams (independent of the service)."""
    return reference.jaccard(
        set(reference.word_shingles(a.lower(), 5)), set(reference.word_shingles(b.lower(), 5))
    )


def mixed_batch() -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Good documents (one a near-duplicate of another) with bad ones among them, and the
    error code each bad position must get: what the document alone would get."""
    original = story(1)
    near = mutate_words(random.Random(2), original, 0.01)
    assert word5_jaccard(original, near) >= 0.8
    documents: list[dict[str, Any]] = [
        {"id": "good-1", "text": original, "metadata": {"source": "wire"}},
        {"id": "empty", "text": " \n\t "},
        {"id": "good-2", "text": story(3)},
        {"id": "long", "text": "x " * 3000},
        {"id": "taken", "text": story(4)},  # the id exists with another text
        {"id": "good-3", "text": near},
        {"id": "good-1", "text": story(5)},  # the id came earlier in this batch
        {"id": "fat", "text": story(6), "metadata": {"blob": "y" * 300}},
        {"id": "typed", "text": 42},
        {"text": story(7), "unknown": True},
        {"id": "good-4", "text": story(8)},
    ]
    errors = {
        1: "invalid_document",
        3: "too_large",
        4: "document_exists",
        6: "duplicate_id",
        7: "too_large",
        8: "invalid_body",
        9: "invalid_body",
    }
    return documents, errors


def test_a_batch_refuses_bad_documents_one_by_one_and_a_retry_changes_nothing(
    tmp_path: Path,
) -> None:
    documents, errors = mixed_batch()
    good = ["good-1", "good-2", "good-3", "good-4"]
    for run, client in enumerate(clients(tmp_path)):
        if run == 0:
            assert client.put(NEWS).status_code == 201
            assert client.post(DOCS, json={"id": "taken", "text": story(9)}).status_code == 201
            first = client.post(f"{DOCS}/batch", json={"documents": documents})
            assert first.status_code == 200, first.text
            results = first.json()["results"]
            assert len(results) == len(documents)
            for position, result in enumerate(results):
                if position in errors:
                    assert set(result) == {"id", "error"}
                    assert result["error"]["code"] == errors[position], result
                    assert result["error"]["message"]
                    assert result["id"] == documents[position].get("id")
                else:
                    assert result["id"] == documents[position]["id"] and result["inserted"]
            # The near-duplicate matched the earlier good document of the same batch.
            assert results[5]["duplicate_of"] == "good-1"
            assert results[5]["cluster_id"] == "good-1"
            assert [m["id"] for m in results[5]["matches"]] == ["good-1"]
            assert {r["cluster_id"] for i, r in enumerate(results) if i in (2, 10)} == {
                "good-2",
                "good-4",
            }
            assert stored_ids(client, [*good, "taken", "empty", "long", "fat"]) == {
                *good,
                "taken",
            }
        # The crawler timed out and sends the same batch again (before and after a
        # restart): every document gets a definite answer, nothing is stored twice.
        again = client.post(f"{DOCS}/batch", json={"documents": documents}).json()["results"]
        for position, result in enumerate(again):
            if position in errors:
                assert result["error"]["code"] == errors[position]
            else:
                assert result["inserted"] is False
                assert result["duplicate_of"] == result["id"]
                assert [m["id"] for m in result["matches"]] == [result["id"]]
        clusters = {i: r["cluster_id"] for i, r in enumerate(again) if i not in errors}
        assert clusters == {0: "good-1", 2: "good-2", 5: "good-1", 10: "good-4"}
        assert stored_ids(client, [*good, "taken"]) == {*good, "taken"}
        assert client.get(f"{DOCS}/good-1").json()["metadata"] == {"source": "wire"}


def test_the_same_id_with_other_content_is_a_conflict_and_the_same_is_a_retry(
    tmp_path: Path,
) -> None:
    text = story(20)
    for run, client in enumerate(clients(tmp_path)):
        if run == 0:
            client.put(NEWS)
            created = client.post(DOCS, json={"id": "a", "text": text, "metadata": {"v": 1}})
            assert created.status_code == 201
            assert client.post(DOCS, json={"text": story(21), "id": "b"}).status_code == 201
        retry = client.post(DOCS, json={"id": "a", "text": text, "metadata": {"v": 1}})
        assert retry.status_code == 200
        assert retry.json() == {
            "id": "a",
            "inserted": False,
            "duplicate_of": "a",
            "cluster_id": "a",
            "matches": [
                {
                    "id": "a",
                    "similarity": 1.0,
                    "hamming_distance": 0,
                    "methods": ["exact", "simhash", "minhash"],
                }
            ],
        }
        for other in (
            {"id": "a", "text": story(22), "metadata": {"v": 1}},  # other text
            {"id": "a", "text": text, "metadata": {"v": 2}},  # other metadata
            {"id": "a", "text": text},  # no metadata
        ):
            response = client.post(DOCS, json=other)
            assert response.status_code == 409, response.text
            assert response.json()["error"]["code"] == "document_exists"
            batch = client.post(f"{DOCS}/batch", json={"documents": [other]}).json()
            assert batch["results"][0]["error"]["code"] == "document_exists"
        assert stored_ids(client, ["a", "b"]) == {"a", "b"}
        assert client.get(f"{DOCS}/a").json()["metadata"] == {"v": 1}


# Real crawled text: Windows-1252 curly quotes decoded as Latin-1 (U+0091/U+0092), a
# stray NUL, NEL (U+0085, Windows-1252's ellipsis), escape and DEL.
DIRTY = {
    "c1-quotes": "The minister said \x91no comment\x92 and left. " + story(30),
    "nul": story(31)[:700] + "\x00" + story(31)[700:],
    "nel": "Prices rose\x85 then fell\x85" + story(32),
    "escape-del": story(33).replace(" ", "\x1b", 3).replace(" ", "\x7f", 3),
    "chinese-c1": "中国经济增长\x92加快。" * 20,
}


def test_real_world_text_is_stored_as_sent_and_found_as_a_browser_reads_it(
    tmp_path: Path,
) -> None:
    for run, client in enumerate(clients(tmp_path)):
        if run == 0:
            assert client.put(NEWS, json={"store_text": True}).status_code == 201
            single = {"id": "c1-quotes", "text": DIRTY["c1-quotes"]}
            assert client.post(DOCS, json=single).status_code == 201, "refused real text"
            rest = [{"id": i, "text": t} for i, t in DIRTY.items() if i != "c1-quotes"]
            results = client.post(f"{DOCS}/batch", json={"documents": rest}).json()["results"]
            assert all(r["inserted"] for r in results), results
        for document_id, text in DIRTY.items():
            assert client.get(f"{DOCS}/{document_id}").json()["text"] == text
            for query in (text, reference.as_windows_1252(text)):
                found = client.post(f"{NEWS}/search", json={"text": query, "limit": 1}).json()
                assert found["matches"][0]["id"] == document_id
                assert "exact" in found["matches"][0]["methods"]
        assert stored_ids(client, list(DIRTY)) == set(DIRTY)
    # Only what is not text at all is refused: a lone surrogate.
    for client in make_client(tmp_path):
        body = b'{"id": "bad", "text": "half \\ud800 a pair"}'
        response = client.post(DOCS, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422
        assert client.get(f"{DOCS}/bad").status_code == 404


@pytest.mark.parametrize("text", ["\x00\x01\x02", "\x85\x1b \x7f", "\x81\x8d\x8f\x90\x9d"])
def test_a_text_of_control_characters_only_is_empty_not_invalid(
    client: TestClient, text: str
) -> None:
    """U+0085 is an ellipsis in Windows-1252 (something to fingerprint); the others are
    white space, so such a text is empty once normalised."""
    response = client.post("/v1/collections/default/documents", json={"text": text})
    expected = reference.as_windows_1252(text).split()
    if expected:
        assert response.status_code == 201, response.text
    else:
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_document"


def test_a_single_insert_waits_in_a_thread_while_a_batch_holds_the_lock(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Single inserts run on the event loop; when the collection's write lock is taken
    they must not block the loop on it but wait in a thread, and still be stored."""
    collection = client.app.state.registry.get("default")  # type: ignore[attr-defined]
    waiting = threading.Event()
    apply_locked = collection._writes._apply_locked

    def observed(*arguments: Any) -> None:
        waiting.set()
        apply_locked(*arguments)

    monkeypatch.setattr(collection._writes, "_apply_locked", observed)
    answers: list[int] = []
    with collection._write_lock:
        sender = threading.Thread(
            target=lambda: answers.append(
                client.post(
                    "/v1/collections/default/documents", json={"id": "late", "text": story(40)}
                ).status_code
            )
        )
        sender.start()
        assert waiting.wait(30), "the insert did not fall back to a thread"
        # The loop is free meanwhile: a read answers while the insert waits for the lock.
        assert client.get("/v1/collections/default/documents/late").status_code == 404
    sender.join(30)
    assert answers == [201]
    assert client.get("/v1/collections/default/documents/late").status_code == 200


@pytest.mark.parametrize("seconds", [1.7976931348623155e308, -1e300, 10**30, 253402300800])
def test_a_timestamp_past_the_year_9999_is_the_documents_error_not_a_crash(
    client: TestClient, seconds: float
) -> None:
    """Schemathesis found a 500 here: seconds x 10^6 overflowed to infinity."""
    docs = "/v1/collections/default/documents"
    single = client.post(docs, json={"id": "far", "text": story(50), "timestamp": seconds})
    assert single.status_code == 422 and single.json()["error"]["code"] == "invalid_body"
    batch = client.post(
        f"{docs}/batch",
        json={"documents": [{"id": "far", "text": story(50), "timestamp": seconds}]},
    )
    assert batch.json()["results"][0]["error"]["code"] == "invalid_body"
    assert client.get(f"{docs}/far").status_code == 404
