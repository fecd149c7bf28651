"""Fixtures: an app on a temporary data directory, ready before the test runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app

READY_TIMEOUT_SECONDS = 60


def make_client(tmp_path: Path, **overrides: object) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "data", **overrides)  # type: ignore[arg-type]
    app = create_app(settings)
    with TestClient(app) as client:
        assert app.state.ready.wait(READY_TIMEOUT_SECONDS), app.state.startup_error
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from make_client(
        tmp_path,
        max_text_chars=20_000,
        max_batch_documents=50,
        max_body_bytes=200_000,
        max_metadata_bytes=1000,
        max_limit=100,
    )
