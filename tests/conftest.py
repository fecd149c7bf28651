"""Fixtures: an app on a temporary data directory, ready before the test runs; the
backend a contract test runs on (the embedded service, a standalone Redis, a Redis
Cluster); the session's Redis servers (tests/redis_servers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app

# Fixtures of the whole suite: one standalone server and one cluster per session.
from tests.redis_servers import emptied, redis_cluster, redis_server

__all__ = ["redis_cluster", "redis_server"]  # fixtures, used by name

READY_TIMEOUT_SECONDS = 60

# The limits of the `client` fixtures, which the contract tests assume.
LIMITS: dict[str, Any] = {
    "max_text_chars": 20_000,
    "max_batch_documents": 50,
    "max_body_bytes": 200_000,
    "max_metadata_bytes": 1000,
    "max_limit": 100,
}

# What the `backend` fixture runs a test on.
BACKENDS = ("embedded", "redis", "redis-cluster")


def make_client(tmp_path: Path, **overrides: object) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "data", **overrides)  # type: ignore[arg-type]
    app = create_app(settings)
    with TestClient(app) as client:
        assert app.state.ready.wait(READY_TIMEOUT_SECONDS), app.state.startup_error
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """An app on the embedded service. Modules whose tests hold on every backend
    redefine it over `backend` (tests/api/test_api.py)."""
    yield from make_client(tmp_path, **LIMITS)


@dataclass(frozen=True)
class Backend:
    """Where an app keeps its collections: ``url`` is its NEARDUP_BACKEND (None: the
    embedded service, in its data directory), ``settings`` what every app on it is
    started with."""

    name: str
    url: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def serve(self, tmp_path: Path, **overrides: object) -> Iterator[TestClient]:
        """An app on this backend. Served again on the same ``tmp_path`` it is the
        embedded service restarted on its database, or another process on the Redis."""
        yield from make_client(tmp_path, backend=self.url, **{**self.settings, **overrides})

    def environment(self) -> dict[str, str]:
        """The same as a `neardup serve` process's environment."""
        variables = {f"NEARDUP_{name.upper()}": str(value) for name, value in self.settings.items()}
        return variables if self.url is None else {"NEARDUP_BACKEND": self.url, **variables}


def backend_named(request: pytest.FixtureRequest, name: str) -> Backend:
    """The backend ``name`` of BACKENDS, its server (the session's) emptied."""
    if name == "embedded":
        return Backend(name)
    pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")
    if name == "redis":
        backend = Backend(name, request.getfixturevalue("redis_server").url)
    else:
        # Every write WAITed for a replica, as a cluster in production is run.
        cluster = request.getfixturevalue("redis_cluster")
        backend = Backend(name, cluster.url, {"redis_wait_replicas": 1})
    assert backend.url is not None
    emptied(backend.url)
    return backend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each test that asks for it runs once on each backend: the embedded service, the
    session's standalone redis-server and its Redis Cluster (3 primaries, 3 replicas),
    emptied before the test. The Redis runs skip where redis-server or redis-py is
    missing."""
    return backend_named(request, request.param)
