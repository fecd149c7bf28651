"""/metrics: request, index, merge and commit figures an operator can alert on."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.backends.embedded.registry import Registry
from app.collection_config import CollectionConfig
from app.core import sorted_table
from app.service import NewDocument
from app.service.types import Unobserved
from app.storage import MemoryStore
from tests.conftest import make_client

DOCS = "/v1/collections/default/documents"


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in metrics.splitlines():
        found = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if found is None or found.group(1) != name:
            continue
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
        if pairs == labels:
            return float(found.group(3))
    return 0.0


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    yield from make_client(tmp_path)


def test_index_backlog_and_commits_are_reported(client: TestClient) -> None:
    texts = [f"document number {i} about the harvest in region {i * 7}" for i in range(12)]
    for i, text in enumerate(texts):
        assert client.post(DOCS, json={"id": f"d{i}", "text": text}).status_code == 201
    batch = [{"id": f"b{i}", "text": f"batch story {i} on trade talks"} for i in range(5)]
    assert client.post(f"{DOCS}/batch", json={"documents": batch}).status_code == 200
    for i in (0, 1, 2):
        assert client.delete(f"{DOCS}/d{i}").status_code == 204

    metrics = client.get("/metrics").text
    assert sample(metrics, "neardup_documents", collection="default") == 14
    for index in ("exact", "simhash", "minhash"):
        labels = {"collection": "default", "index": index}
        assert sample(metrics, "neardup_index_unmerged_entries", **labels) == 17
        assert sample(metrics, "neardup_index_tombstones", **labels) == 3
    # Changes: creating "default" at the first start, 12 inserts, one batch of 5, 3 deletes.
    assert sample(metrics, "neardup_commit_documents_sum") == 17
    assert sample(metrics, "neardup_commit_changes_sum") == 1 + 12 + 1 + 3
    assert sample(metrics, "neardup_commit_seconds_count") >= 1
    route = "/v1/collections/{name}/documents"
    assert sample(metrics, "neardup_requests_total", route=route, method="POST", status="201") == 12

    client.app.state.registry.get("default").merge(force=True)  # type: ignore[attr-defined]
    metrics = client.get("/metrics").text
    for index in ("exact", "simhash", "minhash"):
        labels = {"collection": "default", "index": index}
        assert sample(metrics, "neardup_index_unmerged_entries", **labels) == 0
        assert sample(metrics, "neardup_index_tombstones", **labels) == 0


def test_background_merges_are_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorted_table, "MERGE_MIN_ENTRIES", 4)
    registry = Registry(MemoryStore())
    merged = threading.Event()
    durations: list[tuple[str, float]] = []

    class Observer(Unobserved):
        def record_merge(self, collection: str, seconds: float) -> None:
            durations.append((collection, seconds))
            merged.set()

    collection, _ = registry.create("news", CollectionConfig())
    registry.start_background(Observer())
    try:
        collection.insert([NewDocument(f"text number {i} of the day") for i in range(300)])
        registry.wake_merger()
        assert merged.wait(30), "the merger never merged"
    finally:
        registry.close()
    assert durations[0][0] == "news" and durations[0][1] > 0
    assert all(backlog.unmerged_entries < 300 for backlog in collection.backlogs().values())
