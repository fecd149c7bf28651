"""The hot routes (app/api/hot.py) answer exactly as FastAPI's routes do.

The reference is the same application with ``hot_routes=False``: every request goes
through FastAPI, its validation, dependencies and middlewares, as the rest of the tests
check them. Both apps get the same requests in the same order, good and bad, and must give
the same status, body, headers that matter and metrics; a spy on the hand-over shows
which requests the hot path answered itself, so that the comparison is not vacuous.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from app.api.hot import HotRoutes
from app.config import Settings
from app.main import create_app

WRITE_KEY = "write-key-0123456789"
READ_KEY = "read-key-0123456789"
SETTINGS = {
    "max_text_chars": 2_000,
    "max_body_bytes": 20_000,
    "max_metadata_bytes": 200,
    "max_limit": 20,
}
TEXT = (
    "The central bank raised its key interest rate by a quarter point on Tuesday, "
    "citing inflation that has stayed above its target for a year."
)
SEARCH = "/v1/collections/{}/search"
INSERT = "/v1/collections/{}/documents"


class Spy:
    """Counts the requests the hot routes hand on to FastAPI."""

    def __init__(self, hot: HotRoutes) -> None:
        self.handed_on = 0
        self._fallback = hot.fallback
        hot.fallback = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.handed_on += 1
        await self._fallback(scope, receive, send)


def _client(root: Path, hot: bool, keys: str | None) -> Iterator[tuple[TestClient, Spy | None]]:
    settings = Settings(data_dir=root, api_keys=keys, **SETTINGS)  # type: ignore[arg-type]
    app = create_app(settings, hot_routes=hot)
    spy = Spy(app.hot_routes) if app.hot_routes is not None else None
    with TestClient(app) as client:
        assert app.state.ready.wait(60), app.state.startup_error
        yield client, spy


@pytest.fixture(params=[None, f"{WRITE_KEY},{READ_KEY}:read"], ids=["open", "keys"])
def pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[TestClient, Spy, TestClient, str | None]]:
    keys = request.param
    hot = _client(tmp_path / "hot", True, keys)
    reference = _client(tmp_path / "reference", False, keys)
    hot_client, spy = next(hot)
    reference_client, _ = next(reference)
    assert spy is not None
    for client in (hot_client, reference_client):
        headers = {"Authorization": f"Bearer {WRITE_KEY}"} if keys else {}
        client.put("/v1/collections/news", headers=headers).raise_for_status()
    yield hot_client, spy, reference_client, keys
    for generator in (hot, reference):
        generator.close()


def _requests(keys: str | None) -> list[tuple[str, dict[str, Any], bool]]:
    """(path, httpx arguments, answered by the hot path itself) in order."""
    write = {"Authorization": f"Bearer {WRITE_KEY}"} if keys else {}
    read = {"Authorization": f"Bearer {READ_KEY}"} if keys else {}
    as_json = {"Content-Type": "application/json"}
    charset = {"Content-Type": "application/json; charset=utf-8"}
    plain = {"Content-Type": "text/plain"}
    near = TEXT.replace("Tuesday", "Wednesday")

    def body(document: dict[str, Any]) -> bytes:
        return json.dumps(document).encode()

    search, insert = SEARCH.format("news"), INSERT.format("news")
    cases: list[tuple[str, dict[str, Any], bool]] = [
        # Answered by the hot path.
        (insert, {"json": {"id": "a", "text": TEXT, "metadata": {"n": 1}}, "headers": write}, True),
        (insert, {"json": {"id": "b", "text": near, "timestamp": 1_700_000_000}}, True),
        (insert, {"json": {"id": "b", "text": near, "timestamp": 1_700_000_000}}, True),  # retry
        (insert, {"json": {"id": "b", "text": "other text entirely here"}}, True),  # 409
        (insert, {"json": {"id": "c", "text": near, "on_duplicate": "skip"}}, True),
        (insert, {"json": {"id": "d", "text": "<p>" + TEXT + "</p>", "html": True}}, True),
        (insert, {"json": {"id": "e", "text": "\x91quoted\x92 \x00 text\x85 here"}}, True),
        (insert, {"json": {"id": "f", "text": "!!! ... ???"}}, True),  # empty once normalised
        (insert, {"json": {"id": "g", "text": "x" * 2_001}}, True),  # 413: text
        (insert, {"json": {"id": "h", "text": TEXT, "metadata": {"k": "v" * 300}}}, True),
        (insert, {"json": {"id": "i", "text": TEXT, "since": 10, "until": 5}}, False),
        (INSERT.format("nowhere"), {"json": {"id": "j", "text": TEXT}}, True),  # 404
        (search, {"json": {"text": near}}, True),
        (search, {"json": {"text": near, "limit": 1, "min_similarity": 0.5}}, True),
        (search, {"json": {"text": near, "max_distance": 0}}, True),
        (search, {"json": {"text": near, "since": "2023-11-14T22:13:20Z"}}, True),
        (search, {"json": {"text": near, "limit": 21}}, True),  # 413: limit
        (search, {"content": body({"text": near}), "headers": as_json | read}, True),
        (search, {"content": body({"text": TEXT}), "headers": charset | read}, True),
        (SEARCH.format("nowhere"), {"json": {"text": TEXT}}, True),  # 404
        # Handed on to FastAPI, which says what is wrong.
        (search, {"content": b"{not json", "headers": as_json}, False),
        (search, {"content": b"", "headers": as_json}, False),
        (search, {"content": b"[1, 2]", "headers": as_json}, False),
        (search, {"json": {"text": ""}}, False),
        (search, {"json": {"text": near, "limit": "5"}}, False),  # strict: no coercion
        (search, {"json": {"text": near, "unknown": 1}}, False),
        (search, {"content": b'{"text": "a \\ud800 b"}', "headers": as_json}, False),
        (search, {"content": b'{"text": "a", "min_similarity": NaN}', "headers": as_json}, False),
        (search, {"content": b'{"text": "a", "limit": 1e400}', "headers": as_json}, False),
        (search, {"content": b'{"text": "a", "limit": 99999999999999999999}'}, False),
        (search, {"content": body({"text": near}), "headers": plain}, False),
        (search, {"content": json.dumps({"text": near}).encode("utf-16")}, False),
        (search, {"content": iter([body({"text": near})])}, False),  # chunked: no length
        (search, {"content": body({"text": "y " * 12_000})}, False),  # 413: body
        (SEARCH.format("Bad_Name"), {"json": {"text": TEXT}}, False),  # 400: name
        (insert, {"json": {"id": "", "text": TEXT}}, False),
        (insert, {"json": {"id": "a\x00b", "text": TEXT}}, False),
        (insert, {"json": {"id": "k", "text": TEXT, "metadata": [1]}}, False),
        (insert, {"json": {"id": "k", "text": TEXT, "timestamp": 10**12}}, False),
        (insert, {"json": {"text": TEXT, "on_duplicate": "replace"}}, False),
    ]
    if keys:
        cases += [
            (search, {"json": {"text": near}, "headers": {}}, False),  # 401
            (search, {"json": {"text": near}, "headers": {"Authorization": "Bearer nope"}}, False),
            (insert, {"json": {"id": "m", "text": TEXT}, "headers": read}, False),  # 403
            (insert, {"json": {"id": "n", "text": TEXT + " more"}, "headers": write}, True),
        ]
    for _, arguments, _ in cases:
        arguments.setdefault("headers", write)
    return cases


def _requests_metric(client: TestClient, headers: dict[str, str]) -> list[str]:
    text = client.get("/metrics", headers=headers).text
    return sorted(
        re.sub(r"\.0$", "", line)
        for line in text.splitlines()
        if line.startswith("neardup_requests_total") and "/v1/collections/{name}/" in line
    )


def test_the_hot_routes_answer_as_fastapi_does(
    pair: tuple[TestClient, Spy, TestClient, str | None],
) -> None:
    hot_client, spy, reference_client, keys = pair
    handed_on = 0
    for number, (path, arguments, answered_hot) in enumerate(_requests(keys)):
        arguments.setdefault("headers", {})
        arguments["headers"] = {**arguments["headers"], "X-Request-ID": f"request-{number}"}
        content = arguments.get("content")
        if isinstance(content, Iterator):  # a generator is read once: one per client
            data = b"".join(content)
            arguments_hot = {**arguments, "content": iter([data])}
            arguments_reference = {**arguments, "content": iter([data])}
        else:
            arguments_hot = arguments_reference = arguments
        got = hot_client.post(path, **arguments_hot)
        expected = reference_client.post(path, **arguments_reference)
        where = f"request {number}: POST {path} {arguments}"
        assert (got.status_code, got.json()) == (expected.status_code, expected.json()), where
        for header in ("content-type", "retry-after", "www-authenticate", "x-request-id"):
            assert got.headers.get(header) == expected.headers.get(header), (where, header)
        assert got.headers["x-request-id"] == f"request-{number}"
        handed_on += not answered_hot
        assert spy.handed_on == handed_on, f"{where}: expected hot={answered_hot}"
    # Every stored document is the same in both.
    headers = {"Authorization": f"Bearer {WRITE_KEY}"} if keys else {}
    for document_id in "abcdefghijkmn":
        got = hot_client.get(f"{INSERT.format('news')}/{document_id}", headers=headers)
        expected = reference_client.get(f"{INSERT.format('news')}/{document_id}", headers=headers)
        assert got.status_code == expected.status_code, document_id
        if got.status_code == 200:
            stored, reference = got.json(), expected.json()
            del stored["created_at"], reference["created_at"]
            if stored["timestamp"] != reference["timestamp"]:  # the time of each insert
                del stored["timestamp"], reference["timestamp"]
            assert stored == reference, document_id
    metrics_headers = headers
    assert _requests_metric(hot_client, metrics_headers) == _requests_metric(
        reference_client, metrics_headers
    )


def test_an_insert_without_id_gets_a_fresh_one_on_the_hot_path(
    pair: tuple[TestClient, Spy, TestClient, str | None],
) -> None:
    hot_client, spy, _, keys = pair
    headers = {"Authorization": f"Bearer {WRITE_KEY}"} if keys else {}
    answers = [
        hot_client.post(INSERT.format("news"), json={"text": f"{TEXT} {n}"}, headers=headers)
        for n in ("one", "two")
    ]
    assert spy.handed_on == 0
    assert [answer.status_code for answer in answers] == [201, 201]
    first, second = (answer.json() for answer in answers)
    assert re.fullmatch(r"[0-9a-f]{32}", first["id"]) and first["cluster_id"] == first["id"]
    assert second["id"] != first["id"] and second["duplicate_of"] == first["id"]
