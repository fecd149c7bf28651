"""Shared passages through the API, on every backend (tests/conftest.py's ``backend``):
every passage reported is a maximal run of equal tokens that a brute-force DP over the
two texts finds (tests/core's reference), its offsets hold the same tokens in both texts
as sent, coverages are the shares the passages cover; through searches, similar, inserts,
batches, deletes and a restart (or a second process on the same Redis)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.service.beside import BESIDE_MIN_ITEMS
from devkit.corpus import english_like_text
from tests.conftest import LIMITS, Backend
from tests.core.test_passages import maximal_runs, reference_tokens

MINIMUM = 10
SETTINGS = {"passages": {"enabled": True, "min_tokens": MINIMUM}}
DOCS = "/v1/collections/p/documents"
CHINESE = (
    "新华社北京电国务院总理今天在人民大会堂会见了来访的外国代表团双方就经济合作交换意见"
    "并签署了多项协议涉及能源交通和农业领域"
)


@pytest.fixture
def client(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    yield from backend.serve(tmp_path, **LIMITS)


def _stories(seed: int, count: int, words: int = 120) -> list[str]:
    return [english_like_text(random.Random(seed * 100 + i), words * 6) for i in range(count)]


def _create(client: TestClient, **more: Any) -> None:
    answer = client.put("/v1/collections/p", json={**SETTINGS, **more})
    assert answer.status_code == 201, answer.text


def _tokens(text: str) -> list[str]:
    return [token for _, _, token in reference_tokens(text)]


def _check_passages(query: str, stored: str, match: dict[str, Any]) -> None:
    """The reported passages are exactly the reference's maximal runs (as code point
    offsets), with the coverages they make."""
    runs = maximal_runs(_tokens(query), _tokens(stored), MINIMUM)
    spans_q, spans_s = reference_tokens(query), reference_tokens(stored)
    expected = {
        (spans_q[a][0], spans_q[b - 1][1], spans_s[c][0], spans_s[d - 1][1]) for a, b, c, d in runs
    }
    reported = {(p["start"], p["end"], p["match_start"], p["match_end"]) for p in match["passages"]}
    assert reported == expected
    for start, end, match_start, match_end in reported:
        assert _tokens(query[start:end]) == _tokens(stored[match_start:match_end])

    def covered(spans: list[tuple[int, int]], length: int) -> float:
        points: set[int] = set()
        for start, end in spans:
            points.update(range(start, end))
        return round(len(points) / length, 6)

    assert match["query_coverage"] == pytest.approx(
        covered([(a, b) for a, b, _, _ in reported], len(query))
    )
    assert match["match_coverage"] == pytest.approx(
        covered([(c, d) for _, _, c, d in reported], len(stored))
    )


def test_a_roundup_finds_each_story_inside_it_and_each_story_the_roundup(
    client: TestClient,
) -> None:
    _create(client)
    stories = _stories(1, 6)
    for number, story in enumerate(stories):
        assert client.post(DOCS, json={"id": f"s{number}", "text": story}).status_code == 201
    roundup = "MARKETS ROUNDUP\n\n" + "\n\n---\n\n".join(
        f"{i + 1}. {s}" for i, s in enumerate(stories)
    )
    answer = client.post("/v1/collections/p/search", json={"text": roundup, "limit": 20}).json()
    found = {m["id"]: m for m in answer["matches"]}
    assert set(found) == {f"s{i}" for i in range(6)}
    for number, story in enumerate(stories):
        match = found[f"s{number}"]
        assert match["methods"] == ["passage"]
        _check_passages(roundup, story, match)
        assert match["match_coverage"] >= 0.95
    inserted = client.post(DOCS, json={"id": "roundup", "text": roundup}).json()
    assert {m["id"] for m in inserted["contains"]} == {f"s{i}" for i in range(6)}
    assert inserted["contained_in"] == [] and inserted["matches"] == []
    assert inserted["duplicate_of"] is None and inserted["cluster_id"] == "roundup"
    # The other way: a story finds the roundup around it.
    story = stories[3]
    answer = client.post("/v1/collections/p/search", json={"text": story}).json()
    around = {m["id"]: m for m in answer["matches"]}["roundup"]
    assert around["query_coverage"] >= 0.95 and around["methods"] == ["passage"]
    _check_passages(story, roundup, around)
    similar = client.get(f"{DOCS}/s3/similar").json()["matches"]
    assert [m["id"] for m in similar] == ["roundup"]
    assert similar[0]["passages"] == around["passages"]


def test_a_near_duplicate_found_by_passages_too_gets_both(client: TestClient) -> None:
    _create(client)
    story = _stories(2, 1, 200)[0]
    client.post(DOCS, json={"id": "a", "text": story})
    answer = client.post(DOCS, json={"id": "b", "text": story + " Reporting by a desk."}).json()
    [match] = answer["matches"]
    assert match["id"] == "a" and match["methods"][-1] == "passage"
    assert {"exact", "simhash", "minhash"} & set(match["methods"])
    assert answer["duplicate_of"] == "a"
    # Its passages are in its match: the relations do not repeat a near-duplicate.
    assert answer["contains"] == [] and answer["contained_in"] == []


def test_a_quoted_passage_is_neither_containment_and_min_coverage_filters(
    client: TestClient,
) -> None:
    _create(client)
    source, other = _stories(3, 2, 200)
    quote = " ".join(source.split()[40:70])
    client.post(DOCS, json={"id": "source", "text": source})
    text = other[:500] + " As the statement put it: " + quote + ". " + other[500:900]
    answer = client.post(DOCS, json={"id": "article", "text": text}).json()
    assert answer["contains"] == [] and answer["contained_in"] == []
    # By default a match by passages alone is a containment or a copy: the quote covers
    # less than half of either text, so only the article itself (exact, and whole).
    found = client.post("/v1/collections/p/search", json={"text": text}).json()["matches"]
    assert [m["id"] for m in found] == ["article"]
    every = {"text": text, "min_coverage": 0}
    found = client.post("/v1/collections/p/search", json=every).json()["matches"]
    by_id = {m["id"]: m for m in found}
    assert set(by_id) == {"source", "article"}
    match = by_id["source"]
    assert match["methods"] == ["passage"]
    _check_passages(text, source, match)
    coverage = max(match["query_coverage"], match["match_coverage"])
    above = {"text": text, "min_coverage": min(1.0, coverage + 0.01)}
    found = client.post("/v1/collections/p/search", json=above).json()["matches"]
    assert [m["id"] for m in found] == ["article"]  # a near-duplicate: not filtered
    found = client.get("/v1/collections/p/search", params=above).json()["matches"]
    assert [m["id"] for m in found] == ["article"]
    below = {"text": text, "min_coverage": coverage}
    found = client.post("/v1/collections/p/search", json=below).json()["matches"]
    assert {m["id"] for m in found} == {"source", "article"}


def test_nothing_under_the_minimum_is_a_passage(client: TestClient) -> None:
    _create(client)
    source, other = _stories(4, 2, 200)
    words = source.split()
    client.post(DOCS, json={"id": "source", "text": source})
    short = " ".join(words[20 : 20 + MINIMUM - 1])  # one token short
    found = client.post("/v1/collections/p/search", json={"text": other + " " + short}).json()
    assert all("passage" not in m["methods"] for m in found["matches"])


def test_chinese_offsets_are_code_points(client: TestClient) -> None:
    _create(client)
    client.post(DOCS, json={"id": "zh", "text": "🙂 " + CHINESE + "（完）"})
    query = "新闻摘要：" + CHINESE[3:40] + "。其他消息"
    [match] = client.post("/v1/collections/p/search", json={"text": query}).json()["matches"]
    [passage] = match["passages"]
    assert query[passage["start"] : passage["end"]] == CHINESE[3:40]
    stored = "🙂 " + CHINESE + "（完）"
    assert stored[passage["match_start"] : passage["match_end"]] == CHINESE[3:40]


def test_deletes_restarts_and_kept_texts(backend: Backend, tmp_path: Path) -> None:
    stories = _stories(5, 4)
    roundup = "\n\n".join(stories)
    for round_ in range(2):  # the embedded service restarted, or a second app on Redis
        for client in backend.serve(tmp_path, **LIMITS):
            if round_ == 0:
                _create(client)
                for number, story in enumerate(stories):
                    client.post(DOCS, json={"id": f"s{number}", "text": story})
                assert client.delete(f"{DOCS}/s1").status_code == 204
                assert client.get(f"{DOCS}/s0").json()["text"] is None  # kept, not given out
            found = client.post("/v1/collections/p/search", json={"text": roundup}).json()
            assert {m["id"] for m in found["matches"]} == {"s0", "s2", "s3"}
            for match in found["matches"]:
                _check_passages(roundup, stories[int(match["id"][1:])], match)
            client.app.state.registry.get("p")._check()  # type: ignore[attr-defined]


def test_a_batch_answers_as_its_documents_one_by_one(client: TestClient) -> None:
    """Relations within a batch (a roundup after its stories, a story after a roundup,
    a near-copy, a skipped duplicate) are those of the same documents sent one by one."""
    for name in ("one", "batch"):
        assert client.put(f"/v1/collections/{name}", json=SETTINGS).status_code == 201
    stories = _stories(6, 5)
    roundup = "\n\n".join(stories[:3])
    documents = [
        {"id": "s0", "text": stories[0]},
        {"id": "s1", "text": stories[1]},
        {"id": "r1", "text": roundup},
        {"id": "s2", "text": stories[2]},
        {"id": "r2", "text": stories[3] + "\n\n" + stories[4]},
        {"id": "s3", "text": stories[3]},
        {"id": "s1-again", "text": stories[1] + " (corrected)"},
    ]
    one_by_one = [
        client.post("/v1/collections/one/documents", json=document).json() for document in documents
    ]
    answer = client.post("/v1/collections/batch/documents/batch", json={"documents": documents})
    assert answer.json()["results"] == one_by_one
    by_id = {result["id"]: result for result in one_by_one}
    assert {m["id"] for m in by_id["r1"]["contains"]} == {"s0", "s1"}
    assert [m["id"] for m in by_id["s2"]["contained_in"]] == ["r1"]
    assert [m["id"] for m in by_id["s3"]["contained_in"]] == ["r2"]
    assert by_id["s1-again"]["duplicate_of"] == "s1"


def test_a_batch_large_enough_to_fingerprint_beside_answers_as_one_by_one(
    client: TestClient,
) -> None:
    """A batch of BESIDE_MIN_ITEMS documents or more has its passage fingerprints made,
    and on the embedded backend looked up, on another thread (app/service/beside.py);
    its answers (relations, near-duplicates, passages) are those of the same documents
    sent one by one, each done inline, and its relations are the brute-force
    reference's."""
    for name in ("one", "batch"):
        assert client.put(f"/v1/collections/{name}", json=SETTINGS).status_code == 201
    stories = _stories(7, 24, words=60)
    documents = [{"id": f"s{i}", "text": story} for i, story in enumerate(stories)]
    for i in range(0, 24, 3):  # roundups of three stories each, after them
        documents.append({"id": f"r{i}", "text": "\n\n".join(stories[i : i + 3])})
    documents += [{"id": f"c{i}", "text": stories[i] + " (corrected)"} for i in range(0, 24, 4)]
    assert len(documents) >= BESIDE_MIN_ITEMS
    one_by_one = [
        client.post("/v1/collections/one/documents", json=document).json() for document in documents
    ]
    answer = client.post("/v1/collections/batch/documents/batch", json={"documents": documents})
    assert answer.json()["results"] == one_by_one
    by_id = {result["id"]: result for result in one_by_one}
    for i in range(0, 24, 3):
        roundup = by_id[f"r{i}"]
        assert {m["id"] for m in roundup["contains"]} == {f"s{j}" for j in range(i, i + 3)}
        for match in roundup["contains"]:
            _check_passages("\n\n".join(stories[i : i + 3]), stories[int(match["id"][1:])], match)


@pytest.mark.parametrize("max_rows", [0, 2**31, 10**26])
def test_a_document_frequency_cap_out_of_range_is_refused(
    client: TestClient, max_rows: int
) -> None:
    """passages.max_rows is 1 to 2^31 - 1 (the row counts it caps are 32-bit): a value
    outside is a 422 with the contract's body on both backends, and nothing is made."""
    answer = client.put("/v1/collections/capped", json={"passages": {"max_rows": max_rows}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_body"
    assert client.get("/v1/collections/capped").status_code == 404
    made = client.put("/v1/collections/capped", json={"passages": {"max_rows": 2**31 - 1}})
    assert made.status_code == 201, made.text
