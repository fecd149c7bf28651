"""Many clients inserting, deleting and searching at once against the real server process,
for a bounded time; then every answer is checked against a brute-force reference.

The reference is the slow Python fingerprinting of tests/reference.py over the texts each
client sent. What a concurrent answer must hold, from the request timings alone:
- every match is a document some client inserted, with the reference's similarity and
  Hamming distance, and it satisfies the match rule;
- no match was deleted (delete acknowledged) before the search was sent;
- every document acknowledged before the search was sent, and not being deleted while
  it ran, that the indexes must find (exact text, SimHash within k, or fewer differing
  MinHash values than LSH bands, so that some band agrees whole) is in the answer.
Then the final state: every acknowledged document present, every deleted one gone, and
searches equal to brute force over exactly those documents. No answer is a 5xx.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.core.text import normalize
from devkit.corpus import english_like_text, mutate_words
from devkit.server import Server
from tests import reference

DOCS = "/v1/collections/default/documents"
SEARCH = "/v1/collections/default/search"
RUN_SECONDS = 8.0
CLIENTS = 6
K, THRESHOLD, NUM_PERM, BANDS = 3, 0.8, 128, 16
MIN_AGREE = math.ceil(THRESHOLD * NUM_PERM)


@dataclass(frozen=True)
class Reference:
    normalized: str
    simhash: int
    signature: list[int]
    shingles: frozenset[int]


def fingerprint(text: str) -> Reference:
    normalized = normalize(text)
    hashes = reference.shingle_hashes(normalized, "word", 5, 0)
    return Reference(
        normalized,
        reference.simhash(hashes),
        reference.one_permutation_minhash(hashes, 128, 0),
        frozenset(hashes),
    )


def texts_pool(seed: int) -> list[str]:
    rng = random.Random(seed)
    bases = [english_like_text(rng, 700) for _ in range(8)]
    pool = list(bases)
    for _ in range(140):
        pool.append(mutate_words(rng, rng.choice(bases), rng.choice([0, 0.005, 0.02, 0.1, 0.3])))
    return pool


@dataclass
class Event:
    kind: str  # insert | delete | search
    started: float
    ended: float
    status: int
    text: int = -1  # index into the pool: what was inserted or searched
    ids: list[str] = field(default_factory=list)  # inserted or deleted
    answer: Any = None


def client_loop(url: str, seed: int, pool: list[str], deadline: float, log: list[Event]) -> None:
    rng = random.Random(seed)
    mine: list[str] = []
    number = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        while time.monotonic() < deadline:
            action = rng.choices(["insert", "batch", "delete", "search"], [4, 1, 1, 4])[0]
            started = time.monotonic()
            if action in ("insert", "batch"):
                chosen = [rng.randrange(len(pool)) for _ in range(1 if action == "insert" else 4)]
                ids = [f"c{seed}-{number + i}" for i in range(len(chosen))]
                number += len(chosen)
                if action == "insert":
                    response = client.post(DOCS, json={"id": ids[0], "text": pool[chosen[0]]})
                    answers = [response.json()]
                else:
                    documents = [
                        {"id": i, "text": pool[t]} for i, t in zip(ids, chosen, strict=True)
                    ]
                    response = client.post(f"{DOCS}/batch", json={"documents": documents})
                    answers = response.json()["results"]
                ended = time.monotonic()
                for position, (document_id, text) in enumerate(zip(ids, chosen, strict=True)):
                    log.append(
                        Event(
                            "insert",
                            started,
                            ended,
                            response.status_code,
                            text,
                            [document_id],
                            answers[position],
                        )
                    )
                if response.status_code in (200, 201):
                    mine += ids
            elif action == "delete" and mine:
                victim = mine.pop(rng.randrange(len(mine)))
                response = client.delete(f"{DOCS}/{victim}")
                log.append(
                    Event("delete", started, time.monotonic(), response.status_code, ids=[victim])
                )
            else:
                text = rng.randrange(len(pool))
                response = client.post(SEARCH, json={"text": pool[text], "limit": 1000})
                log.append(
                    Event(
                        "search",
                        started,
                        time.monotonic(),
                        response.status_code,
                        text,
                        answer=response.json(),
                    )
                )


def must_find(query: Reference, other: Reference) -> bool:
    """Pairs every index finds for certain (LSH: some band of 8 values agrees whole)."""
    disagree = sum(a != b for a, b in zip(query.signature, other.signature, strict=True))
    return (
        query.normalized == other.normalized
        or reference.hamming(query.simhash, other.simhash) <= K
        or disagree < BANDS
    )


def check_match(match: dict[str, Any], query: Reference, other: Reference) -> None:
    minhash, similarity = reference.minhash_verdict(
        query.signature, other.signature, set(query.shingles), set(other.shingles), THRESHOLD
    )
    distance = reference.hamming(query.simhash, other.simhash)
    assert abs(match["similarity"] - similarity) < 1e-6, match
    assert match["hamming_distance"] == distance, match
    assert distance <= K or minhash or query.normalized == other.normalized, match


def test_concurrent_clients_get_answers_consistent_with_brute_force(tmp_path: Path) -> None:
    pool = texts_pool(7)
    log: list[Event] = []
    logs = [[] for _ in range(CLIENTS)]  # one list per thread: no shared appends
    with Server(tmp_path / "data", NEARDUP_LOG_LEVEL="warning") as server:
        deadline = time.monotonic() + RUN_SECONDS
        threads = [
            threading.Thread(target=client_loop, args=(server.url, i, pool, deadline, logs[i]))
            for i in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for client_log in logs:
            log += client_log
        assert all(event.status < 500 for event in log), [e for e in log if e.status >= 500]
        assert all(event.status in (200, 201, 204) for event in log)

        references = [fingerprint(text) for text in pool]
        text_of = {e.ids[0]: e.text for e in log if e.kind == "insert"}
        inserted = {e.ids[0]: e for e in log if e.kind == "insert"}
        deleted = {e.ids[0]: e for e in log if e.kind == "delete"}
        assert len(log) > 200 and len(deleted) > 10, "too little traffic to mean anything"

        answers = [e for e in log if e.kind in ("search", "insert")]
        for event in answers:
            query = references[event.text]
            matches = reference.whole_document_matches(event.answer["matches"])
            for match in matches:
                assert match["id"] in text_of, match
                check_match(match, query, references[text_of[match["id"]]])
                gone = deleted.get(match["id"])
                assert gone is None or gone.ended > event.started, (event, match)
            if event.kind == "insert":
                # Insert answers carry the best 10 only: one of them, at least, when due.
                visible = [m["id"] for m in matches]
                if not visible:
                    for other_id, insert in inserted.items():
                        gone = deleted.get(other_id)
                        assert not (
                            insert.ended < event.started
                            and (gone is None or gone.started > event.ended)
                            and other_id != event.ids[0]
                            and must_find(query, references[insert.text])
                        ), (event, other_id)
                continue
            found = {m["id"] for m in matches}
            for other_id, insert in inserted.items():
                gone = deleted.get(other_id)
                if (
                    insert.ended < event.started
                    and (gone is None or gone.started > event.ended)
                    and must_find(query, references[insert.text])
                ):
                    assert other_id in found, (event.started, other_id)

        # The final state, against brute force over the documents that remain.
        with httpx.Client(base_url=server.url, timeout=30) as client:
            live = {i: t for i, t in text_of.items() if i not in deleted}
            for document_id in list(live)[:100] + list(deleted)[:50]:
                status = client.get(f"{DOCS}/{document_id}").status_code
                assert status == (200 if document_id in live else 404), document_id
            stats = client.get("/v1/collections/default").json()["stats"]
            assert stats["documents"] == len(live)
            for text in range(0, len(pool), 7):
                query = references[text]
                answer = client.post(SEARCH, json={"text": pool[text], "limit": 1000}).json()
                matches = reference.whole_document_matches(answer["matches"])
                found = {m["id"] for m in matches}
                for match in matches:
                    check_match(match, query, references[live[match["id"]]])
                expected = {i for i, t in live.items() if must_find(query, references[t])}
                assert expected <= found
        assert server.stop() == 0
