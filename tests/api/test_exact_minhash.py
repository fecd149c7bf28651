"""MinHash decided exactly near its threshold, through the API on every backend: a pair
whose estimate is over the threshold but whose exact Jaccard is under it is not a MinHash
match, and the other way round; where a collection keeps no texts, the estimate decides
as before (so the test can fail). The reference is the Jaccard of the word 5-grams as
Python tuples (tests/core/test_verify.py); the fingerprints only pick the planted pairs."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from app.core.fingerprint import FingerprintParams, fingerprint
from tests.conftest import LIMITS, Backend
from tests.core.test_verify import VOCABULARY, edited, reference_jaccard
from tests.reference import agreeing

PARAMS = FingerprintParams(unit="word", size=5)


@functools.cache
def planted() -> dict[str, tuple[str, str]]:
    """(earlier, later) texts: "over", estimate >= 0.8 > exact Jaccard; "under", exact
    Jaccard >= 0.8 > estimate; both LSH candidates within UNCERTAIN, SimHash more than 3
    bits apart (so that only MinHash can match them as a whole)."""
    rng = random.Random(28)
    pairs: dict[str, tuple[str, str]] = {}
    while len(pairs) < 2:
        words = [rng.choice(VOCABULARY) for _ in range(120)]
        earlier, later = " ".join(words), edited(rng, words, rng.randint(2, 4))
        prints = fingerprint([earlier, later], PARAMS)
        estimate = agreeing(prints.minhash[0], prints.minhash[1]) / 128
        distance = int(np.bitwise_count(prints.simhash[0] ^ prints.simhash[1]))
        exact = reference_jaccard(earlier, later)
        if distance <= 3 or not 0.7 <= estimate < 0.9:
            continue
        kind = "over" if estimate >= 0.8 > exact else "under" if exact >= 0.8 > estimate else ""
        if kind:
            pairs.setdefault(kind, (earlier, later))
    return pairs


def _collections(client: TestClient) -> list[tuple[str, bool]]:
    """(name, whether its texts decide) of two new collections: the defaults (texts kept
    for passages), and passages off (no text kept: the estimate decides)."""
    made = []
    for name, settings, exact in (
        ("kept", {}, True),
        ("estimated", {"passages": {"enabled": False}}, False),
    ):
        assert client.put(f"/v1/collections/{name}", json=settings).status_code == 201
        made.append((name, exact))
    return made


def _minhash(matches: list[dict[str, Any]], document_id: str) -> dict[str, Any] | None:
    return next((m for m in matches if m["id"] == document_id and "minhash" in m["methods"]), None)


def _expect(matches: list[dict[str, Any]], exact: bool) -> None:
    """What a collection answers for the planted pairs: decided by the exact Jaccard
    (``exact``), else by the estimate."""
    pairs = planted()
    under = _minhash(matches, "under")
    over = _minhash(matches, "over")
    if exact:
        assert under is not None and over is None, matches
        assert under["similarity"] == round(reference_jaccard(*pairs["under"]), 6)
    else:
        assert over is not None and under is None, matches


def test_minhash_near_its_threshold_is_decided_by_the_texts(
    backend: Backend, tmp_path: Path
) -> None:
    pairs = planted()
    for client in backend.serve(tmp_path, **LIMITS):
        for name, exact in _collections(client):
            documents = f"/v1/collections/{name}/documents"
            for kind, (earlier, _) in pairs.items():
                assert client.post(documents, json={"id": kind, "text": earlier}).status_code == 201
            for kind, (_, later) in pairs.items():
                search = client.post(f"/v1/collections/{name}/search", json={"text": later})
                found = search.json()["matches"]
                assert (_minhash(found, kind) is not None) == ((kind == "under") == exact), (
                    name,
                    kind,
                    found,
                )
            # An explained search names the refusal and both figures.
            over_earlier, over_later = pairs["over"]
            explained = client.post(
                f"/v1/collections/{name}/search", json={"text": over_later, "explain": True}
            ).json()
            refused = [r for r in explained["refused"] if r["id"] == "over"]
            if exact:
                exact_jaccard = reference_jaccard(over_earlier, over_later)
                [refusal] = refused
                assert refusal["methods"] == ["minhash"]
                assert refusal["reason"].startswith(
                    f"Jaccard {exact_jaccard:.3f} below the threshold 0.8 (estimate 0."
                ), refusal
            else:
                assert refused == []
            # Inserts answer the same, and similar by id from the later document.
            matches: list[dict[str, Any]] = []
            for kind, (_, later) in pairs.items():
                answer = client.post(documents, json={"id": f"{kind}-later", "text": later})
                assert answer.status_code == 201, answer.text
                matches += answer.json()["matches"]
            _expect(matches, exact)
            similar = [
                match
                for kind in pairs
                for match in client.get(f"{documents}/{kind}-later/similar").json()["matches"]
            ]
            _expect(similar, exact)
            # Similar explains the same refusal, from the stored later document.
            explained_similar = client.get(
                f"{documents}/over-later/similar", params={"explain": "true"}
            ).json()
            refused_similar = [r for r in explained_similar["refused"] if r["id"] == "over"]
            assert [r["reason"] for r in refused_similar] == [r["reason"] for r in refused]
            client.app.state.registry.get(name)._check()  # type: ignore[attr-defined]


def test_a_batch_decides_its_own_pairs_as_one_by_one(backend: Backend, tmp_path: Path) -> None:
    pairs = planted()
    for client in backend.serve(tmp_path, **LIMITS):
        for name, exact in _collections(client):
            documents = [
                document
                for kind, (earlier, later) in pairs.items()
                for document in (
                    {"id": kind, "text": earlier},
                    {"id": f"{kind}-later", "text": later},
                )
            ]
            answer = client.post(
                f"/v1/collections/{name}/documents/batch", json={"documents": documents}
            )
            assert answer.status_code == 200, answer.text
            _expect([m for r in answer.json()["results"] for m in r["matches"]], exact)
