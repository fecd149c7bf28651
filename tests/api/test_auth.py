"""API keys on every /v1 route: no key, wrong key, read-only key writing, right key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.auth import InvalidKeys, load_keys, role_of
from app.config import Settings
from app.main import create_app
from tests.conftest import make_client

WRITE_KEY = "w" * 12 + "-write-key"
READ_KEY = "r" * 12 + "-read-key"
OTHER_KEY = "o" * 12 + "-unknown-key"
WRITER = {"Authorization": f"Bearer {WRITE_KEY}"}
READER = {"Authorization": f"Bearer {READ_KEY}"}

# Written out by hand, independently of the middleware's rule: which routes only read.
READ_ROUTES = {
    ("GET", "/v1/collections"),
    ("GET", "/v1/collections/{name}"),
    ("GET", "/v1/collections/{name}/documents/{document_id}"),
    ("GET", "/v1/collections/{name}/documents/{document_id}/similar"),
    ("GET", "/v1/collections/{name}/search"),
    ("POST", "/v1/collections/{name}/search"),
}
WRITE_ROUTES = {
    ("PUT", "/v1/collections/{name}"),
    ("PATCH", "/v1/collections/{name}"),
    ("DELETE", "/v1/collections/{name}"),
    ("POST", "/v1/collections/{name}/documents"),
    ("POST", "/v1/collections/{name}/documents/batch"),
    ("PUT", "/v1/collections/{name}/documents/{document_id}"),
    ("DELETE", "/v1/collections/{name}/documents/{document_id}"),
}
# Key management, for admin keys only (tests/api/test_keys.py).
ADMIN_ROUTES = {
    ("POST", "/v1/keys"),
    ("GET", "/v1/keys"),
    ("GET", "/v1/keys/{key_id}"),
    ("PATCH", "/v1/keys/{key_id}"),
    ("DELETE", "/v1/keys/{key_id}"),
}
TEXT = "the quick brown fox jumps over the lazy dog near the river bank today"
# A request that succeeds on each route, against the fixture's collection and document.
REQUESTS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/v1/collections"): {},
    ("GET", "/v1/collections/{name}"): {},
    ("GET", "/v1/collections/{name}/documents/{document_id}"): {},
    ("GET", "/v1/collections/{name}/documents/{document_id}/similar"): {},
    ("GET", "/v1/collections/{name}/search"): {"params": {"text": TEXT}},
    ("POST", "/v1/collections/{name}/search"): {"json": {"text": TEXT}},
    ("PUT", "/v1/collections/{name}"): {"json": {}},
    ("PATCH", "/v1/collections/{name}"): {"json": {"match_window": "1h"}},
    ("DELETE", "/v1/collections/{name}"): {},
    ("POST", "/v1/collections/{name}/documents"): {"json": {"text": TEXT + " again"}},
    ("POST", "/v1/collections/{name}/documents/batch"): {"json": {"documents": [{"text": TEXT}]}},
    ("PUT", "/v1/collections/{name}/documents/{document_id}"): {"json": {"text": TEXT}},
    ("DELETE", "/v1/collections/{name}/documents/{document_id}"): {},
}
ROUTES = sorted(READ_ROUTES | WRITE_ROUTES)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestClient]:
    key_file = tmp_path / "keys"
    key_file.write_text(f"# readers\n{READ_KEY}:read\n\n")
    for client in make_client(tmp_path, api_keys=WRITE_KEY, api_key_file=key_file):
        created = client.put("/v1/collections/news", headers=WRITER)
        assert created.status_code == 201, created.text
        stored = client.post(
            "/v1/collections/news/documents", json={"id": "doc", "text": TEXT}, headers=WRITER
        )
        assert stored.status_code == 201, stored.text
        yield client


def state(client: TestClient) -> Any:
    """Everything a refused request must leave alone."""
    listing = client.get("/v1/collections", headers=WRITER).json()
    document = client.get("/v1/collections/news/documents/doc", headers=WRITER)
    return listing, document.status_code, document.json()


def call(client: TestClient, route: tuple[str, str], headers: dict[str, str]) -> Any:
    method, template = route
    path = template.format(name="news", document_id="doc")
    return client.request(method, path, headers=headers, **REQUESTS[route])


def test_the_route_table_covers_every_v1_route() -> None:
    app = create_app(Settings(data_dir=Path("unused")))
    served = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/v1")
        for method in operations
    }
    assert served == READ_ROUTES | WRITE_ROUTES | ADMIN_ROUTES


@pytest.mark.parametrize("route", ROUTES)
def test_no_key_or_a_wrong_key_is_401_and_changes_nothing(
    secured: TestClient, route: tuple[str, str]
) -> None:
    before = state(secured)
    wrong = [
        {},
        {"Authorization": f"Bearer {OTHER_KEY}"},
        {"Authorization": f"Basic {WRITE_KEY}"},
        {"Authorization": WRITE_KEY},
        {"Authorization": f"Bearer {WRITE_KEY[:-1]}"},
        {"Authorization": "Bearer "},
    ]
    for headers in wrong:
        response = call(secured, route, headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert state(secured) == before


@pytest.mark.parametrize("route", ROUTES)
def test_a_read_only_key_reads_but_may_not_write(
    secured: TestClient, route: tuple[str, str]
) -> None:
    before = state(secured)
    response = call(secured, route, READER)
    if route in READ_ROUTES:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "forbidden"
        assert state(secured) == before


@pytest.mark.parametrize("route", ROUTES)
def test_the_right_key_gets_the_normal_answer(secured: TestClient, route: tuple[str, str]) -> None:
    response = call(secured, route, WRITER)
    expected = {
        "PUT": {200, 201},
        "PATCH": {200},
        "DELETE": {204},
        "POST": {200, 201},
        "GET": {200},
    }
    assert response.status_code in expected[route[0]], response.text


def test_health_readiness_and_docs_stay_open_metrics_on_request(tmp_path: Path) -> None:
    for client in make_client(tmp_path / "open", api_keys=WRITE_KEY):
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
            assert client.get(path).status_code == 200, path
    for client in make_client(tmp_path / "closed", api_keys=WRITE_KEY, metrics_require_key=True):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=WRITER).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_without_keys_the_service_is_open(tmp_path: Path) -> None:
    for client in make_client(tmp_path):
        assert client.post("/v1/collections/default/documents", json={"text": TEXT}).is_success


def test_keys_are_matched_exactly_among_many() -> None:
    entries = [f"key-number-{i:06d}-padding:{'read' if i % 2 else 'write'}" for i in range(50)]
    keys = load_keys(",".join(entries), None)
    for i in range(50):
        expected = "read" if i % 2 else "write"
        assert role_of(keys, f"key-number-{i:06d}-padding".encode()) == expected
    assert role_of(keys, b"key-number-000001-paddin") is None
    assert role_of(keys, b"key-number-000001-padding ") is None
    assert role_of(keys, b"") is None


@pytest.mark.parametrize(
    "inline",
    ["short:write", f"{WRITE_KEY}:admin", f"{WRITE_KEY} x", "ключ-ключ-ключ-ключ-ключ"],
)
def test_unusable_key_settings_stop_the_start(inline: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidKeys):
        create_app(Settings(data_dir=tmp_path, api_keys=inline))


def test_a_missing_or_empty_key_file_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidKeys, match="cannot read"):
        create_app(Settings(data_dir=tmp_path, api_key_file=tmp_path / "absent"))
    (tmp_path / "empty").write_text("# nothing yet\n")
    with pytest.raises(InvalidKeys, match="no key"):
        create_app(Settings(data_dir=tmp_path, api_key_file=tmp_path / "empty"))
