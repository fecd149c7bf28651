"""The HTTP contract, endpoint by endpoint, error by error, through the ASGI app: every
test here runs on each backend (tests/conftest.py's `backend`: the embedded service, a
standalone Redis, a Redis Cluster), and must hold on all of them."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from app.core.text import normalize
from devkit.corpus import CHINESE_NEWS, english_like_text, mutate_words
from tests import reference
from tests.conftest import LIMITS, Backend

DOCS = "/v1/collections/default/documents"


@pytest.fixture
def client(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    """An app on each backend in turn, with the limits the tests below assume."""
    yield from backend.serve(tmp_path, **LIMITS)


def story(seed: int, length: int = 1500) -> str:
    return english_like_text(random.Random(seed), length)


def assert_error(response: object, status: int, code: str | None = None) -> dict[str, str]:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    body = response.json()["error"]  # type: ignore[attr-defined]
    assert set(body) == {"code", "message"} and body["message"]
    if code is not None:
        assert body["code"] == code
    return dict(body)


# ---------------------------------------------------------------- collections


def test_collections_are_created_listed_described_and_dropped(client: TestClient) -> None:
    settings = {"shingle": {"unit": "word", "size": 2}, "minhash": {"threshold": 0.7}}
    created = client.put("/v1/collections/news", json=settings)
    assert created.status_code == 201
    assert created.json()["settings"]["shingle"] == {"unit": "word", "size": 2}
    assert client.put("/v1/collections/news", json=settings).status_code == 200
    assert_error(client.put("/v1/collections/news", json={}), 409, "settings_conflict")
    names = [c["name"] for c in client.get("/v1/collections").json()["collections"]]
    assert names == ["default", "news"]
    described = client.get("/v1/collections/news").json()
    assert described["stats"]["documents"] == 0
    assert client.delete("/v1/collections/news").status_code == 204
    assert_error(client.get("/v1/collections/news"), 404, "collection_not_found")
    assert_error(client.delete("/v1/collections/news"), 404)


def test_collection_without_body_gets_the_defaults(client: TestClient) -> None:
    response = client.put("/v1/collections/plain")
    assert response.status_code == 201
    assert response.json()["settings"] == client.get("/v1/collections/default").json()["settings"]


def test_bad_collection_names_and_settings(client: TestClient) -> None:
    for name in ("Upper", "has.dot", "-lead", "x" * 65):
        assert_error(client.put(f"/v1/collections/{name}"), 400, "invalid_parameter")
    message = assert_error(
        client.put("/v1/collections/ok", json={"minhash": {"threshold": 1.5}}), 422
    )["message"]
    assert "minhash.threshold" in message
    assert_error(client.put("/v1/collections/ok", json={"simhash": {"k": 3}}), 422)
    assert_error(client.get("/v1/collections/ok"), 404)


# ---------------------------------------------------------------- documents


def test_insert_get_and_duplicate_answers(client: TestClient) -> None:
    original = story(1)
    first = client.post(DOCS, json={"id": "a", "text": original, "metadata": {"src": "x"}})
    assert first.status_code == 201
    assert first.json() == {
        "id": "a",
        "inserted": True,
        "duplicate_of": None,
        "cluster_id": "a",
        "matches": [],
        "contains": [],
        "contained_in": [],
    }
    edited = mutate_words(random.Random(2), original, 0.005)
    second = client.post(DOCS, json={"id": "b", "text": edited}).json()
    assert second["inserted"] and second["duplicate_of"] == "a" and second["cluster_id"] == "a"
    [match] = second["matches"]
    assert match["id"] == "a" and match["similarity"] > 0.8
    assert set(match["methods"]) <= {"exact", "simhash", "minhash", "passage"}

    stored = client.get(f"{DOCS}/a").json()
    assert stored["metadata"] == {"src": "x"} and stored["cluster_id"] == "a"
    expected = reference.simhash(reference.shingle_hashes(normalize(original), "word", 5, 0))
    assert stored["simhash"] == f"{expected:016x}"
    assert stored["created_at"].endswith("Z")
    assert stored["text"] is None  # the default collection does not keep texts

    generated = client.post(DOCS, json={"text": story(3)}).json()["id"]
    assert client.get(f"{DOCS}/{generated}").status_code == 200
    assert_error(client.post(DOCS, json={"id": "a", "text": story(4)}), 409, "document_exists")


def test_exact_duplicates_match_by_exact_hash(client: TestClient) -> None:
    client.post(DOCS, json={"id": "one", "text": "Hello   World"})
    answer = client.post(DOCS, json={"id": "two", "text": "ＨＥＬＬＯ world"}).json()
    assert answer["matches"][0]["id"] == "one"
    assert "exact" in answer["matches"][0]["methods"]
    assert answer["matches"][0]["similarity"] == 1.0


def test_skip_reports_the_duplicate_and_stores_nothing(client: TestClient) -> None:
    text = story(5)
    client.post(DOCS, json={"id": "kept", "text": text})
    skipped = client.post(DOCS, json={"id": "dup", "text": text, "on_duplicate": "skip"})
    assert skipped.status_code == 200
    assert skipped.json()["inserted"] is False and skipped.json()["duplicate_of"] == "kept"
    assert_error(client.get(f"{DOCS}/dup"), 404, "document_not_found")
    fresh = client.post(DOCS, json={"id": "new", "text": story(6), "on_duplicate": "skip"})
    assert fresh.status_code == 201


def test_batch_matches_earlier_documents_of_the_same_batch(client: TestClient) -> None:
    base = story(7)
    documents = [
        {"id": "b1", "text": base},
        {"id": "b2", "text": story(8)},
        {"id": "b3", "text": mutate_words(random.Random(9), base, 0.005)},
        {"id": "b4", "text": base},
    ]
    results = client.post(f"{DOCS}/batch", json={"documents": documents}).json()["results"]
    assert [r["id"] for r in results] == ["b1", "b2", "b3", "b4"]
    assert results[0]["matches"] == [] and results[1]["matches"] == []
    assert results[2]["duplicate_of"] == "b1" and results[2]["cluster_id"] == "b1"
    assert {m["id"] for m in results[3]["matches"]} == {"b1", "b3"}
    assert "exact" in results[3]["matches"][0]["methods"]
    assert client.get("/v1/collections/default").json()["stats"]["documents"] == 4

    skip = {"documents": [{"text": base}, {"text": story(10)}], "on_duplicate": "skip"}
    answers = client.post(f"{DOCS}/batch", json=skip).json()["results"]
    assert [a["inserted"] for a in answers] == [False, True]


@pytest.mark.parametrize("on_duplicate", ["insert", "skip"])
def test_batches_answer_exactly_as_one_by_one_inserts(
    client: TestClient, on_duplicate: str
) -> None:
    """Matching within a batch is a separate code path from matching against the
    indexes; the same documents sent one at a time are the reference."""
    rng = random.Random(41)
    bases = [story(200 + i, 900) for i in range(5)]
    documents = []
    for number in range(120):
        base = rng.choice(bases)
        rate = rng.choice([0, 0, 0.01, 0.03, 0.1, 0.25, 1.0])
        text = base if rate == 0 else mutate_words(rng, base, rate)
        documents.append({"id": f"d{number}", "text": text})
    client.put("/v1/collections/one-by-one")
    client.put("/v1/collections/batched")
    expected = [
        client.post(
            "/v1/collections/one-by-one/documents", json={**d, "on_duplicate": on_duplicate}
        ).json()
        for d in documents
    ]
    answers = []
    for start in range(0, len(documents), 37):
        batch = {"documents": documents[start : start + 37], "on_duplicate": on_duplicate}
        response = client.post("/v1/collections/batched/documents/batch", json=batch)
        answers += response.json()["results"]
    assert any(answer["matches"] for answer in answers)
    assert any(not answer["matches"] for answer in answers)
    assert answers == expected


def test_a_batch_is_refused_whole_only_when_the_request_is_wrong(client: TestClient) -> None:
    """Per-document refusals are tested in tests/api/test_ingestion.py."""
    assert_error(client.post(f"{DOCS}/batch", json={"documents": []}), 422, "invalid_body")
    too_many = {"documents": [{"text": f"doc {i}"} for i in range(51)]}
    assert_error(client.post(f"{DOCS}/batch", json=too_many), 413, "too_large")
    not_objects = {"documents": [{"id": "fine", "text": story(12)}, "a text"]}
    assert_error(client.post(f"{DOCS}/batch", json=not_objects), 422, "invalid_body")
    assert_error(client.post(f"{DOCS}/batch", json={"documents": [], "extra": 1}), 422)
    assert client.get(f"{DOCS}/fine").status_code == 404
    assert client.get("/v1/collections/default").json()["stats"]["documents"] == 0


def test_put_inserts_then_replaces(client: TestClient) -> None:
    first, second = story(14), story(15)
    assert client.put(f"{DOCS}/p", json={"text": first}).status_code == 201
    replaced = client.put(f"{DOCS}/p", json={"text": second, "metadata": {"v": 2}})
    assert replaced.status_code == 200
    assert client.get(f"{DOCS}/p").json()["metadata"] == {"v": 2}
    search = client.post("/v1/collections/default/search", json={"text": first}).json()
    assert search["matches"] == []
    search = client.post("/v1/collections/default/search", json={"text": second}).json()
    assert [m["id"] for m in search["matches"]] == ["p"]


def test_delete_hides_a_document_at_once(client: TestClient) -> None:
    text = story(16)
    client.post(DOCS, json={"id": "gone", "text": text})
    assert client.delete(f"{DOCS}/gone").status_code == 204
    assert_error(client.delete(f"{DOCS}/gone"), 404)
    assert_error(client.get(f"{DOCS}/gone"), 404)
    assert client.post("/v1/collections/default/search", json={"text": text}).json() == {
        "matches": []
    }
    assert client.post(DOCS, json={"id": "gone", "text": text}).status_code == 201


def test_an_id_that_is_a_url_is_read_replaced_compared_and_deleted(client: TestClient) -> None:
    """Crawlers' ids are URLs: their "/" arrive quoted (%2F) and the server unquotes the
    path before routing it."""
    url = "https://news.example/2024/05/story.html?x=1#top"
    path = f"{DOCS}/{quote(url, safe='')}"
    text = story(18)
    assert client.post(DOCS, json={"id": url, "text": text}).status_code == 201
    assert client.get(path).json()["id"] == url
    assert client.put(path, json={"text": text, "metadata": {"v": 2}}).status_code == 200
    assert client.get(path).json()["metadata"] == {"v": 2}
    client.post(DOCS, json={"id": "copy/of/it", "text": text + " Updated."})
    similar = client.get(f"{path}/similar").json()["matches"]
    assert [match["id"] for match in similar] == ["copy/of/it"]
    assert client.delete(path).status_code == 204
    assert_error(client.get(path), 404)
    # ".../similar" after an id is always that id's similar: nothing else takes a PUT.
    assert client.put(f"{path}/similar", json={"text": text}).status_code == 405


def test_a_chain_of_reissues_lands_in_one_cluster(client: TestClient) -> None:
    rng = random.Random(17)
    versions = [story(17, 3000)]
    for _ in range(7):
        versions.append(mutate_words(rng, versions[-1], 0.008))
    shingles = [set(reference.word_shingles(normalize(v), 5)) for v in versions]
    # Each re-issue is a near-duplicate of the one before; the ends of the chain are not.
    assert all(reference.jaccard(a, b) >= 0.85 for a, b in itertools.pairwise(shingles))
    assert reference.jaccard(shingles[0], shingles[-1]) < 0.7
    for number, text in enumerate(versions):
        answer = client.post(DOCS, json={"id": f"v{number}", "text": text}).json()
        assert answer["cluster_id"] == "v0"
        assert answer["duplicate_of"] == (None if number == 0 else "v0")
    assert client.get(f"{DOCS}/v7").json()["cluster_id"] == "v0"


def test_similar_excludes_itself_and_checks_its_parameters(client: TestClient) -> None:
    base = story(18)
    client.post(DOCS, json={"id": "s1", "text": base})
    client.post(DOCS, json={"id": "s2", "text": mutate_words(random.Random(1), base, 0.005)})
    client.post(DOCS, json={"id": "s3", "text": story(19)})
    similar = client.get(f"{DOCS}/s1/similar").json()["matches"]
    assert [m["id"] for m in similar] == ["s2"]
    strict = client.get(f"{DOCS}/s1/similar", params={"min_similarity": 1.0}).json()
    assert all(m["similarity"] == 1.0 for m in strict["matches"])
    assert_error(client.get(f"{DOCS}/s1/similar", params={"max_distance": 4}), 400)
    assert_error(client.get(f"{DOCS}/s1/similar", params={"limit": 0}), 400)
    assert_error(client.get(f"{DOCS}/s1/similar", params={"limit": 101}), 413)
    assert_error(client.get(f"{DOCS}/nobody/similar"), 404, "document_not_found")


def test_search_by_post_and_get_stores_nothing(client: TestClient) -> None:
    client.post(DOCS, json={"id": "t", "text": "breaking: oil prices rise after opec cut"})
    by_get = client.get(
        "/v1/collections/default/search",
        params={"text": "Breaking: oil prices rise after OPEC cut"},
    ).json()
    by_post = client.post(
        "/v1/collections/default/search", json={"text": "breaking: oil prices rise after opec cut"}
    ).json()
    assert by_get == by_post and by_get["matches"][0]["id"] == "t"
    assert client.get("/v1/collections/default").json()["stats"]["documents"] == 1
    assert_error(
        client.post("/v1/collections/default/search", json={"text": "x", "max_distance": 9}), 400
    )
    assert_error(client.get("/v1/collections/default/search"), 400)
    assert_error(client.post("/v1/collections/nope/search", json={"text": "x"}), 404)


def test_search_results_follow_the_match_rule_against_a_reference(client: TestClient) -> None:
    """Every answer satisfies the rule by the slow reference; clear duplicates are found."""
    rng = random.Random(20)
    bases = [story(100 + i, 1200) for i in range(6)]
    texts = [
        mutate_words(rng, rng.choice(bases), rng.choice([0, 0.01, 0.05, 0.2])) for _ in range(30)
    ]
    for number, text in enumerate(texts):
        client.post(DOCS, json={"id": f"r{number}", "text": text})
    hashes = [reference.shingle_hashes(normalize(t), "word", 5, 0) for t in texts]
    signatures = [reference.one_permutation_minhash(h, 128, 0) for h in hashes]
    fingerprints = [reference.simhash(h) for h in hashes]
    for query in range(0, 30, 3):
        answer = client.get(f"{DOCS}/r{query}/similar", params={"limit": 100}).json()["matches"]
        answer = reference.whole_document_matches(answer)
        for match in answer:
            other = int(match["id"][1:])
            minhash, similarity = reference.minhash_verdict(
                signatures[query], signatures[other], set(hashes[query]), set(hashes[other])
            )
            distance = reference.hamming(fingerprints[query], fingerprints[other])
            assert match["similarity"] == pytest.approx(similarity, abs=1e-6)
            assert match["hamming_distance"] == distance
            assert ("minhash" in match["methods"]) == minhash
            assert distance <= 3 or minhash or normalize(texts[query]) == normalize(texts[other])
        found = {match["id"] for match in answer}
        for other in range(30):
            agree = sum(a == b for a, b in zip(signatures[query], signatures[other], strict=True))
            if other != query and (
                agree >= 0.95 * 128 or fingerprints[query] == fingerprints[other]
            ):
                assert f"r{other}" in found
        similarities = [m["similarity"] for m in answer]
        assert similarities == sorted(similarities, reverse=True)


def test_chinese_near_duplicates_through_the_api(client: TestClient) -> None:
    for number, news in enumerate(CHINESE_NEWS):
        client.post(DOCS, json={"id": f"zh{number}", "text": news.original})
    for number, news in enumerate(CHINESE_NEWS):
        for variant in (news.word_changed, news.sentence_moved):
            found = client.post("/v1/collections/default/search", json={"text": variant}).json()[
                "matches"
            ]
            assert [m["id"] for m in found] == [f"zh{number}"], (number, found)


# ---------------------------------------------------------------- limits and bad input


def test_limits_give_413(client: TestClient) -> None:
    assert_error(client.post(DOCS, json={"text": "x" * 20_001}), 413, "too_large")
    assert_error(client.post(DOCS, json={"text": "x", "metadata": {"k": "v" * 2000}}), 413)
    assert_error(
        client.post(
            DOCS,
            content=b'{"text": "' + b"x" * 250_000 + b'"}',
            headers={"content-type": "application/json"},
        ),
        413,
    )
    assert client.get("/v1/collections/default").json()["stats"]["documents"] == 0


def test_a_collection_limit_refuses_each_document_past_it(client: TestClient) -> None:
    """limits.max_documents: a batch stores up to the limit and refuses the rest at their
    positions with 507 insufficient_storage; a delete makes room; PATCH raises it."""
    news = "/v1/collections/capped"
    assert client.put(news, json={"limits": {"max_documents": 3}}).status_code == 201
    batch = [{"id": f"c{i}", "text": english_like_text(random.Random(i), 400)} for i in range(5)]
    results = client.post(f"{news}/documents/batch", json={"documents": batch}).json()["results"]
    assert [r.get("inserted") for r in results[:3]] == [True, True, True]
    assert [r["error"]["code"] for r in results[3:]] == ["insufficient_storage"] * 2
    one = client.post(f"{news}/documents", json=batch[3])
    assert one.status_code == 507 and one.json()["error"]["code"] == "insufficient_storage"
    assert client.get("/readyz").status_code == 200
    assert client.delete(f"{news}/documents/c0").status_code == 204
    assert client.post(f"{news}/documents", json=batch[3]).status_code == 201
    assert client.patch(news, json={"limits": {"max_documents": 10}}).status_code == 200
    assert client.post(f"{news}/documents", json=batch[4]).status_code == 201
    assert client.get(news).json()["stats"]["documents"] == 4


def test_bad_bodies_give_422_that_say_what_is_wrong(client: TestClient) -> None:
    cases = [
        (b"{not json", "json"),
        (b'{"text": 5}', "text"),
        (b'{"text": "ok", "colour": 1}', "colour"),
        (b'{"text": "ok", "id": ""}', "id"),
        (b'{"text": "ok", "on_duplicate": "maybe"}', "on_duplicate"),
        (b'{"text": "   "}', "empty"),
    ]
    for body, mentioned in cases:
        response = client.post(DOCS, content=body, headers={"content-type": "application/json"})
        assert mentioned in assert_error(response, 422)["message"].lower(), body
    assert client.get("/v1/collections/default").json()["stats"]["documents"] == 0


def test_unknown_collection_everywhere_is_404(client: TestClient) -> None:
    base = "/v1/collections/missing"
    assert_error(client.post(f"{base}/documents", json={"text": "x"}), 404)
    assert_error(client.post(f"{base}/documents/batch", json={"documents": [{"text": "x"}]}), 404)
    assert_error(client.get(f"{base}/documents/a"), 404)
    assert_error(client.put(f"{base}/documents/a", json={"text": "x"}), 404)
    assert_error(client.delete(f"{base}/documents/a"), 404)
    assert_error(client.get(f"{base}/search", params={"text": "x"}), 404)


def test_an_unknown_collection_is_404_before_the_requests_own_errors(client: TestClient) -> None:
    """The collection is found first (the embedded registry does, and the Redis backend
    answers as it): a request above a limit, or a batch of only invalid documents, to a
    missing collection is 404."""
    base = "/v1/collections/missing"
    for response in (
        client.post(f"{base}/search", json={"text": "x", "limit": 101}),
        client.get(f"{base}/search", params={"text": "x", "limit": 101}),
        client.get(f"{base}/documents/a/similar", params={"limit": 101}),
        client.post(f"{base}/documents", json={"text": "x" * 20_001}),
        client.put(f"{base}/documents/a", json={"text": "x" * 20_001}),
        client.post(f"{base}/documents/batch", json={"documents": [{"id": "a"}]}),
        client.post(f"{base}/documents/batch", json={"documents": [{"text": "x"}] * 51}),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "collection_not_found"


# ---------------------------------------------------------------- operations


def test_health_readiness_metrics_and_docs(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    client.post(DOCS, json={"text": "count me"})
    metrics = client.get("/metrics").text
    assert 'neardup_documents{collection="default"} 1.0' in metrics
    assert "neardup_request_seconds_bucket" in metrics
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/collections/{name}/documents/batch" in paths


def test_either_method_can_be_switched_off(client: TestClient) -> None:
    base = story(30, 6000)
    near = "replaced " + base.split(" ", 1)[1]  # one word of a thousand changed
    client.put("/v1/collections/simhash-only", json={"minhash": {"enabled": False}})
    client.put("/v1/collections/minhash-only", json={"simhash": {"enabled": False}})
    for name in ("simhash-only", "minhash-only"):
        documents = f"/v1/collections/{name}/documents"
        client.post(documents, json={"id": "base", "text": base})
        answer = client.post(documents, json={"id": "near", "text": near}).json()
        [match] = reference.whole_document_matches(answer["matches"])
        assert match["id"] == "base"
        if name == "simhash-only":
            assert match["methods"] == ["simhash"]
            # With MinHash off, similarity is the share of equal SimHash bits.
            assert match["similarity"] == pytest.approx(1 - match["hamming_distance"] / 64)
        else:
            assert match["methods"] == ["minhash"]
