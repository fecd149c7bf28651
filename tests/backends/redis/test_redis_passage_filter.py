"""The Redis backend verifies only the candidates that may pass (``may_cover``, from the
fingerprint counts its passage entries carry) and its near-duplicates: every insert's
``contains`` / ``contained_in`` and every search's passage matches at a ``min_coverage``
are still those of a brute force over every earlier document, on the corpus of the
embedded backend's test (tests/backends/embedded/test_passage_filter.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.service.passages import CONTAINED
from tests.backends.embedded.test_passage_filter import _corpus, _coverages
from tests.conftest import LIMITS, backend_named

DOCS = "/v1/collections/c/documents"


@pytest.fixture
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    yield from backend_named(request, "redis").serve(tmp_path, **LIMITS)


def test_relations_and_searches_are_those_of_every_earlier_document(client: TestClient) -> None:
    texts = _corpus(1)
    assert client.put("/v1/collections/c", json={}).status_code == 201
    rng = random.Random(1)
    results: list[dict[str, object]] = []
    at = 0
    while at < len(texts):
        size = rng.choice([1, 3, 12])
        chunk = [{"id": f"d{at + i}", "text": t} for i, t in enumerate(texts[at : at + size])]
        answer = client.post(f"{DOCS}/batch", json={"documents": chunk})
        assert answer.status_code == 200, answer.text
        results += answer.json()["results"]
        at += size
    checked = 0
    for number, (text, result) in enumerate(zip(texts, results, strict=True)):
        near = {m["id"] for m in result["matches"]}  # type: ignore[attr-defined]
        contains, contained_in = set(), set()
        for before in range(number):
            if f"d{before}" in near:
                continue
            query_share, match_share = _coverages(text, texts[before])
            if match_share >= CONTAINED:
                contains.add(f"d{before}")
            if query_share >= CONTAINED:
                contained_in.add(f"d{before}")
        assert {m["id"] for m in result["contains"]} == contains, number  # type: ignore[attr-defined]
        assert {m["id"] for m in result["contained_in"]} == contained_in, number  # type: ignore[attr-defined]
        checked += len(contains) + len(contained_in)
    assert checked > 40  # the corpus holds containments to find
    found = 0
    for text in random.Random(2).sample(texts, 25):
        body = {"text": text, "limit": 100, "min_coverage": 0.5}
        answer = client.post("/v1/collections/c/search", json=body).json()["matches"]
        alone = {m["id"] for m in answer if m["methods"] == ["passage"]}
        near = {m["id"] for m in answer if m["methods"] != ["passage"]}
        expected = set()
        for number, stored in enumerate(texts):
            if f"d{number}" in near:
                continue
            if max(_coverages(text, stored)) >= 0.5:
                expected.add(f"d{number}")
        assert alone == expected
        found += len(expected)
    assert found > 10
