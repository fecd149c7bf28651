"""Short texts through the API: the n-gram index answers exactly what brute-force Jaccard
over Python sets of q-grams says, through inserts, batches, deletes, a restart and an
export/import. The tests that take `backend` (or the `client` made on it) run on every
backend (tests/conftest.py): the embedded service, a standalone Redis, a Redis Cluster."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.ngram import CJK_RANGES
from app.storage.sqlite import SCHEMA_VERSION, SQLiteStore
from app.transfer import export_lines, import_lines
from tests.conftest import LIMITS, Backend, make_client

THRESHOLD = 0.6
Q = 3
CJK_Q = 2  # the default: grams that start at a CJK character have 2 characters
# Only the exact and n-gram indexes: every similarity reported is then the n-gram Jaccard.
SETTINGS = {
    "simhash": {"enabled": False},
    "minhash": {"enabled": False},
    "ngram": {"threshold": THRESHOLD, "size": Q, "max_chars": 60},
}
SHORT = "/v1/collections/short"
CHINESE = "中国经济增长速度加快北京上海"


def qgrams(text: str, cjk_q: int = CJK_Q) -> set[str]:
    """The reference: at each position the substring of q characters, if it fits, q being
    ``cjk_q`` at a CJK character and Q at any other; a text where none fits is one q-gram,
    the whole text."""
    grams = set()
    for i, char in enumerate(text):
        q = cjk_q if any(low <= ord(char) <= high for low, high in CJK_RANGES) else Q
        if i + q <= len(text):
            grams.add(text[i : i + q])
    return grams or {text}


def jaccard(a: str, b: str, cjk_q: int = CJK_Q) -> float:
    x, y = qgrams(a, cjk_q), qgrams(b, cjk_q)
    return len(x & y) / len(x | y)


def short_texts(seed: int, count: int) -> list[str]:
    """Texts already in normal form (lower case, single spaces, no space between Chinese
    characters), so the reference needs no normaliser: small alphabets collide often."""
    rng = random.Random(seed)
    texts: list[str] = []
    while len(texts) < count:
        kind = rng.random()
        if kind < 0.45:
            words = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 4)))]
            for _ in range(rng.randint(0, 4)):
                words.append("".join(rng.choice("abc") for _ in range(rng.randint(1, 4))))
            text = " ".join(words)
        elif kind < 0.75:
            text = "".join(rng.choice(CHINESE[:6]) for _ in range(rng.randint(2, 12)))
        elif texts:
            base = rng.choice(texts)  # a planted edit of an earlier text
            at = rng.randrange(len(base) + 1)
            text = (base[:at] + rng.choice("abc中国") + base[at + 1 :]).strip()
            text = " ".join(text.split())
        else:
            continue
        if text:
            texts.append(text)
    return texts


def clients(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    """Two apps one after the other: the embedded service restarted on its database, or a
    second app on the same Redis."""
    for _ in range(2):
        yield from backend.serve(tmp_path)


@pytest.fixture
def client(backend: Backend, tmp_path: Path) -> Iterator[TestClient]:
    """An app on each backend in turn, with the limits of tests/conftest.py's client."""
    yield from backend.serve(tmp_path, **LIMITS)


def expected_matches(query: str, stored: dict[str, str]) -> dict[str, float]:
    return {
        document_id: round(jaccard(query, text), 6)
        for document_id, text in stored.items()
        if jaccard(query, text) >= THRESHOLD
    }


def found_by_ngram(client: TestClient, text: str) -> dict[str, float]:
    answer = client.post(f"{SHORT}/search", json={"text": text, "limit": 1000}).json()
    matches: list[dict[str, Any]] = answer["matches"]
    for match in matches:
        if "ngram" not in match["methods"]:
            assert match["methods"] == ["exact"] and len(text) > 60, match
    return {m["id"]: m["similarity"] for m in matches if "ngram" in m["methods"]}


def test_short_texts_are_found_exactly_as_brute_force_jaccard_says(
    backend: Backend, tmp_path: Path
) -> None:
    texts = short_texts(1, 300)
    stored = {f"s{i}": text for i, text in enumerate(texts)}
    queries = short_texts(2, 60) + texts[::10]
    deleted = [f"s{i}" for i in range(0, 300, 7)]
    for run, client in enumerate(clients(backend, tmp_path)):
        if run == 0:
            assert client.put(SHORT, json=SETTINGS).status_code == 201
            items = list(stored.items())
            for start in range(0, 150, 50):  # batches, each matching its own earlier texts
                batch = [{"id": i, "text": t} for i, t in items[start : start + 50]]
                results = client.post(f"{SHORT}/documents/batch", json={"documents": batch})
                assert all("error" not in r for r in results.json()["results"])
            for document_id, text in items[150:]:  # one by one
                answer = client.post(f"{SHORT}/documents", json={"id": document_id, "text": text})
                assert answer.status_code == 201
                earlier = dict(items[: items.index((document_id, text))])
                best = expected_matches(text, earlier)
                got = {m["id"]: m["similarity"] for m in answer.json()["matches"]}
                assert set(got) <= set(best) and len(got) == min(len(best), 10)
                assert all(got[i] == best[i] for i in got)
            for document_id in deleted:
                assert client.delete(f"{SHORT}/documents/{document_id}").status_code == 204
        live = {i: t for i, t in stored.items() if i not in deleted}
        # Before and after a restart (the index rebuilt from SQLite), or through a second
        # app on the same Redis: the same answers.
        for query in queries:
            assert found_by_ngram(client, query) == expected_matches(query, live), query


def test_a_batch_of_short_texts_answers_as_one_by_one_inserts(
    backend: Backend, tmp_path: Path
) -> None:
    texts = short_texts(3, 120)
    for client in backend.serve(tmp_path):
        client.put(SHORT, json=SETTINGS)
        client.put("/v1/collections/single", json=SETTINGS)
        one_by_one = [
            client.post("/v1/collections/single/documents", json={"id": f"t{i}", "text": t}).json()
            for i, t in enumerate(texts)
        ]
        batch = [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)]
        results = client.post(f"{SHORT}/documents/batch", json={"documents": batch}).json()
        assert results["results"] == one_by_one
        assert any(r["matches"] for r in one_by_one)


def test_titles_match_in_the_default_collection_with_no_settings(
    backend: Backend, client: TestClient
) -> None:
    """The issue's example: no word 5-gram in common, found by the n-gram index."""
    docs = "/v1/collections/default/documents"
    client.post(docs, json={"id": "t1", "text": "Breaking: quake hits Tokyo"})
    answer = client.post(docs, json={"id": "t2", "text": "Breaking: quake hits Tokyo, 5 dead"})
    [match] = answer.json()["matches"]
    assert match["id"] == "t1" and "ngram" in match["methods"]
    reference = jaccard("breaking: quake hits tokyo", "breaking: quake hits tokyo, 5 dead")
    assert match["similarity"] == pytest.approx(reference, abs=1e-6)
    assert answer.json()["duplicate_of"] == "t1"
    if backend.url is None:  # the index's insert buffer (Redis's sorted sets have none)
        assert 'neardup_index_unmerged_entries{collection="default",index="ngram"}' in (
            client.get("/metrics").text
        )


def test_collections_stored_before_cjk_size_keep_one_q_for_every_script(tmp_path: Path) -> None:
    """A collection whose stored settings have no ngram.cjk_size (made before it existed)
    reads back with cjk_size null and keeps q = size for Chinese too, through a restart;
    a new collection gets the default, 2 for grams that start at a CJK character."""
    old, edited = "/v1/collections/old", "中国经济增长速度加"
    for client in make_client(tmp_path):
        assert client.put(old, json=SETTINGS).status_code == 201
        assert client.get(old).json()["settings"]["ngram"]["cjk_size"] == CJK_Q
    with sqlite3.connect(tmp_path / "data" / "neardup.db") as db:
        (stored,) = db.execute("SELECT config FROM collections WHERE name = 'old'")
        config = json.loads(stored[0])
        del config["ngram"]["cjk_size"]
        db.execute("UPDATE collections SET config = ? WHERE name = 'old'", (json.dumps(config),))
    for client in make_client(tmp_path):
        assert client.get(old).json()["settings"]["ngram"]["cjk_size"] is None
        client.post(f"{old}/documents", json={"id": "a", "text": CHINESE})
        client.put(SHORT, json=SETTINGS)
        client.post(f"{SHORT}/documents", json={"id": "a", "text": CHINESE})
        uniform = client.post(f"{old}/search", json={"text": edited}).json()["matches"]
        per_script = client.post(f"{SHORT}/search", json={"text": edited}).json()["matches"]
        # 3-grams: 7 of 12 shared (0.583, below 0.6); bigrams: 8 of 13 (0.615).
        assert jaccard(edited, CHINESE, cjk_q=Q) < THRESHOLD <= jaccard(edited, CHINESE)
        assert uniform == []
        assert [(m["id"], m["similarity"]) for m in per_script] == [
            ("a", round(jaccard(edited, CHINESE), 6))
        ]


def test_export_then_import_keeps_the_short_text_index(tmp_path: Path) -> None:
    texts = short_texts(4, 80)
    for client in make_client(tmp_path / "a"):
        client.put(SHORT, json=SETTINGS)
        batch = [{"id": f"e{i}", "text": t} for i, t in enumerate(texts)]
        client.post(f"{SHORT}/documents/batch", json={"documents": batch})
    source = SQLiteStore(tmp_path / "a" / "data" / "neardup.db")
    lines = list(export_lines(source.load()))
    source.close()
    (tmp_path / "b" / "data").mkdir(parents=True)
    target = SQLiteStore(tmp_path / "b" / "data" / "neardup.db")
    import_lines(target, lines)
    target.close()
    stored = {f"e{i}": t for i, t in enumerate(texts)}
    for client in make_client(tmp_path / "b"):
        for query in texts[::8]:
            assert found_by_ngram(client, query) == expected_matches(query, stored)


V1_SCHEMA = """
CREATE TABLE collections (name TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE documents (
    collection TEXT NOT NULL REFERENCES collections(name) ON DELETE CASCADE,
    row INTEGER NOT NULL, id TEXT NOT NULL, created_at REAL NOT NULL,
    cluster INTEGER NOT NULL, metadata TEXT, simhash INTEGER NOT NULL,
    minhash BLOB NOT NULL, exact BLOB NOT NULL, text TEXT,
    deleted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (collection, row)
) WITHOUT ROWID;
PRAGMA user_version=1;
"""


def test_a_version_1_database_is_migrated_and_its_collections_keep_their_settings(
    tmp_path: Path,
) -> None:
    """A data directory written before the n-gram index: its collections have no ngram
    settings, so they go on without it; new documents and new collections work."""
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "neardup.db") as db:
        db.executescript(V1_SCHEMA)
        old = {
            "shingle": {"unit": "word", "size": 5},
            "simhash": {"enabled": True, "max_distance": 3},
            "minhash": {"enabled": True, "num_perm": 128, "threshold": 0.8},
            "store_text": False,
        }
        db.execute("INSERT INTO collections VALUES ('default', ?)", (json.dumps(old),))
    for client in make_client(tmp_path):
        settings = client.get("/v1/collections/default").json()["settings"]
        assert settings["ngram"]["enabled"] is False
        docs = "/v1/collections/default/documents"
        assert client.post(docs, json={"id": "a", "text": "quake hits tokyo"}).status_code == 201
        answer = client.post(docs, json={"id": "b", "text": "quake hits tokyo!"}).json()
        assert all("ngram" not in m["methods"] for m in answer["matches"])
        client.put(SHORT, json=SETTINGS)
        client.post(f"{SHORT}/documents", json={"id": "a", "text": "quake hits tokyo"})
        fresh = client.post(f"{SHORT}/documents", json={"id": "b", "text": "quake hits tokyo!"})
        assert [m["methods"] for m in fresh.json()["matches"]] == [["ngram"]]
    with sqlite3.connect(data / "neardup.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
