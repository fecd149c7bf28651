"""/readyz on the Redis backend with NEARDUP_REDIS_WAIT_REPLICAS: ready only while every
primary has the replicas each write WAITs for, so that an orchestrator routing on it never
sends writes that must fail. A primary of its own (the test breaks its replication), and a
replica started and killed by the test."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from fastapi.testclient import TestClient

from devkit.redis_servers import start_server
from tests.conftest import make_client
from tests.redis_servers import _missing

DOCS = "/v1/collections/default/documents"
ATTACH_SECONDS = 30.0


def _until(check: Callable[[], bool], what: str) -> None:
    # Polling another process (a replica attaching, a primary noticing a loss): Redis
    # gives no event to wait on.
    deadline = time.monotonic() + ATTACH_SECONDS
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _ready(client: TestClient) -> bool:
    return client.get("/readyz").status_code == 200


def test_ready_only_while_the_primary_has_its_replicas(tmp_path: Path) -> None:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    primary = start_server(tmp_path / "primary")
    replica = None
    try:
        served = contextlib.contextmanager(make_client)
        with served(tmp_path / "app", backend=primary.url, redis_wait_replicas=1) as client:
            answer = client.get("/readyz")
            assert answer.status_code == 503
            error = answer.json()["error"]
            assert error["code"] == "storage_unavailable"
            assert f"127.0.0.1:{primary.port} has 0 of 1 replicas online" in error["message"]
            # What ready would have promised: the write is refused.
            refused = client.post(DOCS, json={"id": "a", "text": "early write"})
            assert refused.status_code == 503

            replica = start_server(
                tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)
            )
            _until(lambda: _ready(client), "the replica never attached")
            written = client.post(DOCS, json={"id": "a", "text": "a write once ready"})
            assert written.status_code in (200, 201), written.text

            replica.process.send_signal(signal.SIGKILL)
            replica.process.wait()
            _until(lambda: not _ready(client), "the lost replica is not noticed")
            assert "0 of 1 replicas online" in client.get("/readyz").json()["error"]["message"]
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


def test_ready_without_replicas_when_writes_wait_for_none(tmp_path: Path) -> None:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    primary = start_server(tmp_path / "primary")
    try:
        served = contextlib.contextmanager(make_client)
        with served(tmp_path / "app", backend=primary.url) as client:
            assert client.get("/readyz").status_code == 200
    finally:
        primary.stop()
