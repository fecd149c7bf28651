"""Property tests through the HTTP API: odd Unicode and every limit at its boundary.

Whatever a client sends gets an answer from the contract: a 2xx, or a 4xx with the JSON
error body that changes nothing. Never a 5xx.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import reference
from tests.conftest import make_client

DOCS = "/v1/collections/default/documents"
MAX_TEXT = 300
MAX_BATCH = 5
MAX_METADATA = 200
MAX_LIMIT = 20
MAX_ID = 256
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    for client in make_client(
        tmp_path_factory.mktemp("api-fuzz"),
        max_text_chars=MAX_TEXT,
        max_batch_documents=MAX_BATCH,
        max_metadata_bytes=MAX_METADATA,
        max_limit=MAX_LIMIT,
    ):
        yield type(client)(_PathsAsUvicorn(client.app), raise_server_exceptions=False)


class _PathsAsUvicorn:
    """The app, its request path decoded once from the raw path, as uvicorn does:
    Starlette's TestClient decodes an already decoded path again, so an id holding
    "%00", sent as "%2500", reached the app as a NUL (hypothesis found it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, "path": unquote(scope["raw_path"].decode("latin-1"))}
        await self.app(scope, receive, send)


def documents(client: TestClient) -> int:
    count: int = client.get("/v1/collections/default").json()["stats"]["documents"]
    return count


def assert_refused(response: Any, statuses: set[int]) -> dict[str, str]:
    assert response.status_code in statuses, response.text
    error: dict[str, str] = response.json()["error"]
    assert set(error) == {"code", "message"} and error["message"]
    return error


def is_unicode(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def has_content(text: str) -> bool:
    """Something other than white space once control characters are read as a browser
    reads them, by the Unicode categories (a separate rule from the service's
    str.split-based one)."""
    return any(
        not (c.isspace() or unicodedata.category(c) in ("Zs", "Zl", "Zp"))
        for c in reference.as_windows_1252(text)
    )


@FUZZ
@given(text=st.text(max_size=60))
def test_any_text_is_stored_or_refused_cleanly(api: TestClient, text: str) -> None:
    before = documents(api)
    response = api.post(DOCS, json={"text": text})
    if response.status_code == 201:
        assert is_unicode(text) and has_content(text)
        stored = api.get(f"{DOCS}/{response.json()['id']}")
        assert stored.status_code == 200
        found = api.post("/v1/collections/default/search", json={"text": text, "limit": 20})
        assert response.json()["id"] in {match["id"] for match in found.json()["matches"]}
        assert documents(api) == before + 1
    else:
        error = assert_refused(response, {422})
        assert "text" in error["message"]
        assert documents(api) == before
        if is_unicode(text):
            # Valid text refused: only because nothing is left of it to fingerprint.
            assert not has_content(text)
            assert "empty" in error["message"] or "at least 1 character" in error["message"]


@FUZZ
@given(document_id=st.text(max_size=MAX_ID + 4))
@example(document_id="%00")  # percent-encoded as sent: an id like any other
def test_any_id_is_accepted_exactly_when_the_contract_allows_it(
    api: TestClient, document_id: str
) -> None:
    before = documents(api)
    response = api.post(DOCS, json={"id": document_id, "text": f"a text for {len(document_id)}"})
    valid = (
        1 <= len(document_id) <= MAX_ID and document_id.isprintable() and is_unicode(document_id)
    )
    if response.status_code == 409:  # hypothesis repeats itself; the id was stored already
        assert valid and documents(api) == before
        return
    if not valid:
        assert_refused(response, {422})
        assert documents(api) == before
        return
    assert response.status_code in (200, 201), response.text
    assert response.json()["id"] == document_id
    if "/" not in document_id and document_id not in (".", ".."):
        stored = api.get(f"{DOCS}/{quote(document_id, safe='')}")
        assert stored.status_code == 200 and stored.json()["id"] == document_id


@FUZZ
@given(length=st.integers(MAX_TEXT - 3, MAX_TEXT + 3), search=st.booleans())
def test_text_length_limit(api: TestClient, length: int, search: bool) -> None:
    text = ("ab " * length)[:length]
    assert len(text) == length
    before = documents(api)
    path = "/v1/collections/default/search" if search else DOCS
    response = api.post(path, json={"text": text})
    if length > MAX_TEXT:
        assert assert_refused(response, {413})["code"] == "too_large"
    else:
        assert response.is_success, response.text
    assert documents(api) == before + (0 if search or length > MAX_TEXT else 1)


@FUZZ
@given(metadata=st.dictionaries(st.text(max_size=8), st.text(max_size=60), max_size=6))
def test_metadata_size_limit(api: TestClient, metadata: dict[str, str]) -> None:
    before = documents(api)
    response = api.post(DOCS, json={"text": "some words to keep", "metadata": metadata})
    encodable = all(is_unicode(key + value) for key, value in metadata.items())
    if not encodable:
        assert_refused(response, {422})
    elif len(json.dumps(metadata, ensure_ascii=False).encode()) > MAX_METADATA:
        assert assert_refused(response, {413})["code"] == "too_large"
    else:
        assert response.is_success, response.text
        assert api.get(f"{DOCS}/{response.json()['id']}").json()["metadata"] == metadata
        return
    assert documents(api) == before


@FUZZ
@given(count=st.integers(0, MAX_BATCH + 2))
def test_batch_size_limit(api: TestClient, count: int) -> None:
    before = documents(api)
    batch = [{"text": f"batch document number {i} of {count}"} for i in range(count)]
    response = api.post(f"{DOCS}/batch", json={"documents": batch})
    if count == 0:
        assert_refused(response, {422})
    elif count > MAX_BATCH:
        assert assert_refused(response, {413})["code"] == "too_large"
    else:
        assert len(response.json()["results"]) == count
        return
    assert documents(api) == before


@FUZZ
@given(
    limit=st.one_of(st.integers(-2, MAX_LIMIT + 2), st.integers(10**18, 10**40)),
    by_post=st.booleans(),
)
def test_result_limit(api: TestClient, limit: int, by_post: bool) -> None:
    if by_post:
        response = api.post("/v1/collections/default/search", json={"text": "x y", "limit": limit})
    else:
        response = api.get("/v1/collections/default/search", params={"text": "x y", "limit": limit})
    if limit < 1:
        assert_refused(response, {400, 422})
    elif limit > MAX_LIMIT:
        assert assert_refused(response, {413})["code"] == "too_large"
    else:
        assert response.status_code == 200


@FUZZ
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(10**30), 10**30),
        st.text(max_size=5),
        st.booleans(),
        st.none(),
    ),
    field=st.sampled_from(["limit", "min_similarity", "max_distance"]),
)
def test_odd_numbers_never_break_a_search(api: TestClient, value: object, field: str) -> None:
    body = json.dumps({"text": "x y", field: value}, allow_nan=True)
    response = api.post(
        "/v1/collections/default/search",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        assert_refused(response, {400, 413, 422})


SCOPED_ADMIN_KEY = "f" * 16 + "-fuzz-admin"
HIDDEN = "hidden-crawl"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
SUBPATHS = ("", "/search", "/documents", "/documents/batch", "/documents/x", "/documents/x/similar")


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    """A service with a hidden collection and a key with every action on `news-*`."""
    for client in make_client(tmp_path_factory.mktemp("scoped-fuzz"), api_keys=SCOPED_ADMIN_KEY):
        admin = {"Authorization": f"Bearer {SCOPED_ADMIN_KEY}"}
        for name in (HIDDEN, "news-a"):
            assert client.put(f"/v1/collections/{name}", headers=admin).status_code == 201
        body = {"name": "fuzz", "actions": ["*"], "collections": ["news-*"]}
        key = client.post("/v1/keys", json=body, headers=admin).json()["key"]
        fuzzing = type(client)(_PathsAsUvicorn(client.app), raise_server_exceptions=False)
        yield fuzzing, key


@FUZZ
@given(
    method=st.sampled_from(METHODS),
    name=st.sampled_from([HIDDEN, "news-a", "news-b", "hidden", "news"]) | st.text(max_size=12),
    subpath=st.sampled_from(SUBPATHS),
    body=st.sampled_from([None, {}, {"text": "a text to match"}, {"documents": []}]),
)
@example(method="DELETE", name=HIDDEN, subpath="", body=None)
@example(method="GET", name="", subpath="", body=None)
def test_a_scoped_key_never_learns_of_a_collection_it_may_not_see(
    scoped: tuple[TestClient, str], method: str, name: str, subpath: str, body: Any
) -> None:
    client, key = scoped
    path = f"/v1/collections/{quote(name, safe='')}{subpath}" if name else "/v1/collections"
    response = client.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, response.text
    if name != HIDDEN:  # a 404 names the collection asked for, and only that
        assert HIDDEN not in response.text
    else:
        assert response.status_code == 404
    admin = {"Authorization": f"Bearer {SCOPED_ADMIN_KEY}"}
    assert client.get(f"/v1/collections/{HIDDEN}", headers=admin).status_code == 200
