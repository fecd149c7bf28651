"""The real server process, started exactly as the Docker image starts it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx

from devkit.corpus import english_like_text
from devkit.server import Server


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
        found = client.post(
            "/v1/collections/default/search",
            json={"text": text},
            headers={"X-Request-ID": "crawler-42.search"},
        )
        assert found.json()["matches"][0]["id"] == "w"
        assert found.headers["x-request-id"] == "crawler-42.search"
        generated = client.get("/healthz", headers={"X-Request-ID": "bad id\twith space"})
        assert len(generated.headers["x-request-id"]) == 32  # a fresh uuid4, hex
        assert server.stop() == 0
    lines = [json.loads(line) for line in server.output_lines() if line.startswith("{")]
    [search_line] = [line for line in lines if line.get("request_id") == "crawler-42.search"]
    assert search_line["method"] == "POST" and search_line["status"] == 200
    assert search_line["path"] == "/v1/collections/default/search"
    assert search_line["level"] == "INFO" and search_line["duration_ms"] > 0
    assert any(line.get("request_id") == generated.headers["x-request-id"] for line in lines)


def test_neardup_help_documents_every_command() -> None:
    import subprocess

    from devkit.server import neardup_command

    usage = subprocess.run([neardup_command(), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "serve" in usage.stdout
    serve = subprocess.run([neardup_command(), "serve", "--help"], capture_output=True, text=True)
    assert serve.returncode == 0 and "--port" in serve.stdout and "NEARDUP_" in serve.stdout
