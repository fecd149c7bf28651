"""Scoped keys on every backend: the matrix of actions against keys that have them, have
them elsewhere, have another action, have expired or were revoked; key management; the
rates; the audit trail; a key revoked through one process refused by another."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import LIMITS, Backend

ADMIN_KEY = "a" * 12 + "-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TEXT = "the quick brown fox jumps over the lazy dog near the river bank today"
PAST = (datetime.now(UTC) - timedelta(hours=1)).isoformat()

# For each action, requests that need it and succeed on the collection ``news`` (which
# holds the document ``doc``), or on the collection they name, with their status.
Request = tuple[str, str, dict[str, Any], int]
ACTION_REQUESTS: dict[str, list[Request]] = {
    "search": [
        ("POST", "/v1/collections/news/search", {"json": {"text": TEXT}}, 200),
        ("GET", "/v1/collections/news/search", {"params": {"text": TEXT}}, 200),
        ("GET", "/v1/collections/news/documents/doc", {}, 200),
        ("GET", "/v1/collections/news/documents/doc/similar", {}, 200),
    ],
    "documents.add": [
        ("POST", "/v1/collections/news/documents", {"json": {"text": TEXT + " one"}}, 201),
        (
            "POST",
            "/v1/collections/news/documents/batch",
            {"json": {"documents": [{"text": TEXT + " two"}]}},
            200,
        ),
        ("PUT", "/v1/collections/news/documents/put", {"json": {"text": TEXT + " 3"}}, 201),
    ],
    "documents.delete": [("DELETE", "/v1/collections/news/documents/doc", {}, 204)],
    "collections.create": [("PUT", "/v1/collections/fresh", {"json": {}}, 201)],
    "collections.delete": [("DELETE", "/v1/collections/news", {}, 204)],
    "collections.settings": [
        ("PATCH", "/v1/collections/news", {"json": {"match_window": "1h"}}, 200)
    ],
    "metrics": [("GET", "/metrics", {}, 200)],
    # No HTTP route needs `export` yet (`neardup export` reads the storage itself).
    "*": [
        ("POST", "/v1/collections/news/documents", {"json": {"text": TEXT + " star"}}, 201),
        ("DELETE", "/v1/collections/news/documents/doc", {}, 204),
        ("PATCH", "/v1/collections/news", {"json": {"match_window": "2h"}}, 200),
        ("PUT", "/v1/collections/fresh", {"json": {}}, 201),
    ],
}
# The collections each action's requests are about (else news).
TARGETS = {"collections.create": ["fresh"], "*": ["news", "fresh"]}


@pytest.fixture
def keyed(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    """A service with an admin key, the collections news (holding ``doc``) and forum."""
    for client in backend.serve(tmp_path, api_keys=ADMIN_KEY, metrics_require_key=True, **LIMITS):
        for name in ("news", "forum"):
            assert client.put(f"/v1/collections/{name}", headers=ADMIN).status_code == 201
        stored = client.post(
            "/v1/collections/news/documents", json={"id": "doc", "text": TEXT}, headers=ADMIN
        )
        assert stored.status_code == 201, stored.text
        yield client


def new_key(client: TestClient, actions: list[str], collections: list[str], **more: Any) -> str:
    body = {"name": f"{'+'.join(actions)} on {','.join(collections)}", "actions": actions}
    created = client.post(
        "/v1/keys", json={**body, "collections": collections, **more}, headers=ADMIN
    )
    assert created.status_code == 201, created.text
    secret: str = created.json()["key"]
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def state(client: TestClient) -> Any:
    """Everything a refused request must leave alone: each collection (settings, document
    count), the document, the keys."""
    listing = client.get("/v1/collections", headers=ADMIN).json()["collections"]
    collections = {c["name"]: (c["settings"], c["stats"]["documents"]) for c in listing}
    document = client.get("/v1/collections/news/documents/doc", headers=ADMIN).status_code
    keys = client.get("/v1/keys", headers=ADMIN).json()
    return collections, document, keys


def missing_body(client: TestClient, name: str) -> Any:
    """What the admin key gets for a collection that does not exist, named ``name``."""
    answer = client.get("/v1/collections/ghost", headers=ADMIN)
    assert answer.status_code == 404
    return {
        "error": {
            **answer.json()["error"],
            "message": answer.json()["error"]["message"].replace("ghost", name),
        }
    }


def send(client: TestClient, request: Request, headers: dict[str, str]) -> Any:
    method, path, options, _ = request
    return client.request(method, path, headers=headers, **options)


@pytest.mark.parametrize("action", sorted(ACTION_REQUESTS))
def test_each_action_against_each_kind_of_key(keyed: TestClient, action: str) -> None:
    target = TARGETS.get(action, ["news"])
    other_action = "documents.add" if action == "search" else "search"
    right = new_key(keyed, [action], target)
    elsewhere = new_key(keyed, [action], ["forum"])
    wrong_action = new_key(keyed, [other_action], target)
    expired = new_key(keyed, [action], target, expires_at=PAST)
    revoked = new_key(keyed, [action], target)
    revoked_id = keyed.get("/v1/keys", headers=ADMIN).json()["keys"][-1]["id"]
    assert keyed.delete(f"/v1/keys/{revoked_id}", headers=ADMIN).status_code == 204

    before = state(keyed)
    for request in ACTION_REQUESTS[action]:
        refusals = [
            (elsewhere, 200 if action == "metrics" else 404),
            (wrong_action, 403),
            (expired, 401),
            (revoked, 401),
        ]
        for secret, status in refusals:
            answer = send(keyed, request, bearer(secret))
            assert answer.status_code == status, (request, status, answer.text)
            if status == 404:
                assert answer.json() == missing_body(keyed, request[1].split("/")[3])
        assert state(keyed) == before, request
    for request in ACTION_REQUESTS[action]:
        answer = send(keyed, request, bearer(right))
        assert answer.status_code == request[3], (request, answer.text)


def test_a_scoped_key_lists_and_sees_only_its_collections(keyed: TestClient) -> None:
    for name in ("news-fr", "news-de", "sport"):
        assert keyed.put(f"/v1/collections/{name}", headers=ADMIN).status_code == 201
    secret = new_key(keyed, ["search"], ["news-*", "forum"])
    listed = keyed.get("/v1/collections", headers=bearer(secret)).json()["collections"]
    assert sorted(c["name"] for c in listed) == ["forum", "news-de", "news-fr"]
    assert keyed.get("/v1/collections/news-fr", headers=bearer(secret)).status_code == 200
    hidden = keyed.get("/v1/collections/sport", headers=bearer(secret))
    assert hidden.status_code == 404
    assert hidden.json() == missing_body(keyed, "sport")
    # The name `news` is not covered by `news-*`.
    assert keyed.get("/v1/collections/news", headers=bearer(secret)).status_code == 404


def test_keys_are_managed_by_the_admin_key_only(keyed: TestClient) -> None:
    created = keyed.post(
        "/v1/keys",
        json={
            "name": "crawler",
            "description": "the news crawl",
            "actions": ["documents.add", "search"],
            "collections": ["news-*"],
            "rate": {"requests_per_second": 50},
        },
        headers=ADMIN,
    )
    assert created.status_code == 201, created.text
    shown = created.json()
    secret, key_id = shown.pop("key"), shown["id"]
    assert secret.startswith("nd_") and len(secret) > 40
    listed = keyed.get("/v1/keys", headers=ADMIN).json()["keys"]
    assert listed == [shown]  # the secret is shown once, never again
    assert secret not in keyed.get(f"/v1/keys/{key_id}", headers=ADMIN).text
    # No key but the admin key manages keys, a wildcard one included.
    star = new_key(keyed, ["*"], ["*"])
    for key in (secret, star):
        assert keyed.get("/v1/keys", headers=bearer(key)).status_code == 403
        assert (
            keyed.post(
                "/v1/keys",
                json={"name": "x", "actions": ["*"], "collections": ["*"]},
                headers=bearer(key),
            ).status_code
            == 403
        )
    changed = keyed.patch(
        f"/v1/keys/{key_id}", json={"collections": ["news"], "expires_at": None}, headers=ADMIN
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["collections"] == ["news"]
    assert changed.json()["rate"]["requests_per_second"] == 50
    assert keyed.get("/v1/collections/news", headers=bearer(secret)).status_code == 200
    assert keyed.delete(f"/v1/keys/{key_id}", headers=ADMIN).status_code == 204
    assert keyed.get("/v1/collections/news", headers=bearer(secret)).status_code == 401
    assert keyed.delete(f"/v1/keys/{key_id}", headers=ADMIN).status_code == 404
    bad = keyed.post(
        "/v1/keys", json={"name": "x", "actions": ["fly"], "collections": ["News!"]}, headers=ADMIN
    )
    assert bad.status_code == 422


def test_keys_survive_a_restart(backend: Backend, tmp_path: Path) -> None:
    for client in backend.serve(tmp_path, api_keys=ADMIN_KEY):
        secret = new_key(client, ["search"], ["*"])
    for client in backend.serve(tmp_path, api_keys=ADMIN_KEY):
        assert client.get("/v1/collections", headers=bearer(secret)).status_code == 200


def test_rates_answer_429_with_retry_after(keyed: TestClient) -> None:
    slow = new_key(keyed, ["*"], ["news"], rate={"requests_per_second": 0.01})
    assert keyed.get("/v1/collections/news", headers=bearer(slow)).status_code == 200
    refused = keyed.post("/v1/collections/news/search", json={"text": TEXT}, headers=bearer(slow))
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 1
    few = new_key(keyed, ["documents.add"], ["news"], rate={"documents_per_second": 0.01})
    batch = {"documents": [{"text": f"{TEXT} {i}"} for i in range(3)]}
    before = state(keyed)
    first = keyed.post("/v1/collections/news/documents/batch", json=batch, headers=bearer(few))
    assert first.status_code == 200  # a full bucket lets a batch through
    after_first = state(keyed)
    again = keyed.post("/v1/collections/news/documents", json={"text": "more"}, headers=bearer(few))
    assert again.status_code == 429 and int(again.headers["retry-after"]) >= 1
    assert state(keyed) == after_first != before


def test_every_write_and_key_change_is_audited(
    keyed: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="neardup.audit")
    secret = new_key(keyed, ["documents.add", "documents.delete"], ["news"])
    writer = bearer(secret)
    keyed.post(
        "/v1/collections/news/documents", json={"id": "a1", "text": TEXT + " a"}, headers=writer
    )
    keyed.post(
        "/v1/collections/news/documents/batch",
        json={"documents": [{"id": "b1", "text": "one b"}, {"id": "b2", "text": "two b"}]},
        headers=writer,
    )
    keyed.delete("/v1/collections/news/documents/a1", headers=writer)
    keyed.delete("/v1/collections/forum", headers=writer)  # refused: not its collection
    keyed.patch("/v1/collections/news", json={"match_window": "1h"}, headers=ADMIN)
    keyed.post("/v1/collections/news/search", json={"text": TEXT}, headers=ADMIN)  # not audited
    lines = [r.__dict__ for r in caplog.records if r.name == "neardup.audit"]
    seen = [(line["action"], line["collection"], line["ids"], line["status"]) for line in lines]
    assert seen[1:] == [
        ("documents.add", "news", ["a1"], 201),
        ("documents.add", "news", ["b1", "b2"], 200),
        ("documents.delete", "news", ["a1"], 204),
        ("collections.delete", "forum", None, 404),
        ("collections.settings", "news", None, 200),
    ]
    assert seen[0][0] == "keys.create" and lines[0]["key"] == "configured-write-1"
    assert lines[1]["key"] == "documents.add+documents.delete on news"
    assert lines[4]["outcome"] == "refused" and lines[1]["outcome"] == "ok"
    assert all(line["request_id"] for line in lines)
    text = caplog.text + "".join(str(line) for line in lines)
    assert secret not in text and ADMIN_KEY not in text


def test_a_key_revoked_through_one_process_is_refused_by_another(
    backend: Backend, tmp_path: Path
) -> None:
    if backend.url is None:
        pytest.skip("one process owns an embedded service")
    for first in backend.serve(tmp_path / "one", api_keys=ADMIN_KEY):
        for second in backend.serve(tmp_path / "two", api_keys=ADMIN_KEY):
            secret = new_key(first, ["search"], ["*"])
            key_id = first.get("/v1/keys", headers=ADMIN).json()["keys"][0]["id"]
            assert wait_for(second, secret, 200) < 1.0
            assert first.delete(f"/v1/keys/{key_id}", headers=ADMIN).status_code == 204
            took = wait_for(second, secret, 401)
            assert took < 1.0, took
            print(f"revocation seen by the other process in {took * 1000:.0f} ms")


def wait_for(client: TestClient, secret: str, status: int, deadline: float = 2.0) -> float:
    """Seconds until ``client`` answers ``status`` to the key (polled; AssertionError
    past ``deadline``)."""
    started = time.perf_counter()
    while (took := time.perf_counter() - started) < deadline:
        if client.get("/v1/collections", headers=bearer(secret)).status_code == status:
            return took
    raise AssertionError(f"still not {status} after {deadline} s")


def test_a_scoped_key_reads_the_metrics_of_its_collections_only(keyed: TestClient) -> None:
    secret = new_key(keyed, ["metrics"], ["forum"])
    text = keyed.get("/metrics", headers=bearer(secret)).text
    assert 'collection="forum"' in text and 'collection="news"' not in text
    assert 'collection="news"' in keyed.get("/metrics", headers=ADMIN).text
