"""The real server process, started exactly as the Docker image starts it."""

from __future__ import annotations

import random
from pathlib import Path

import httpx

from tests.corpus import english_like_text
from tests.server import Server


def test_neardup_serve_answers_over_http_and_stops_cleanly(tmp_path: Path) -> None:
    with Server(tmp_path / "data") as server, httpx.Client(base_url=server.url) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        text = english_like_text(random.Random(1), 3000)
        inserted = client.post("/v1/collections/default/documents", json={"id": "w", "text": text})
        assert inserted.status_code == 201
        batch = client.post(
            "/v1/collections/default/documents/batch",
            json={"documents": [{"id": "w2", "text": "re-issued " + text.split(" ", 1)[1]}]},
        ).json()["results"]
        assert batch[0]["duplicate_of"] == "w"
        found = client.post("/v1/collections/default/search", json={"text": text}).json()
        assert found["matches"][0]["id"] == "w"
        assert server.stop() == 0


def test_neardup_help_documents_every_command() -> None:
    import subprocess

    from tests.server import neardup_command

    usage = subprocess.run([neardup_command(), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "serve" in usage.stdout
    serve = subprocess.run([neardup_command(), "serve", "--help"], capture_output=True, text=True)
    assert serve.returncode == 0 and "--port" in serve.stdout and "NEARDUP_" in serve.stdout
