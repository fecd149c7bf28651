"""tests/e2e/test_concurrency.py's clients against two `neardup serve` processes on one Redis:
six clients inserting, deleting and searching at once, half through each process, and
every answer checked against the brute-force reference from the request timings alone.
A document acknowledged through one process before a search was sent through the other
must be in its answer: read-your-writes across processes, under load."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.server import Server
from tests import reference
from tests.e2e.test_concurrency import (
    CLIENTS,
    DOCS,
    RUN_SECONDS,
    SEARCH,
    Event,
    check_match,
    client_loop,
    fingerprint,
    must_find,
    texts_pool,
)
from tests.redis_servers import RedisServer, emptied


def test_clients_of_two_processes_get_answers_consistent_with_brute_force(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    emptied(redis_server.url)
    pool = texts_pool(11)
    logs: list[list[Event]] = [[] for _ in range(CLIENTS)]  # one list per thread
    environment = {"NEARDUP_BACKEND": redis_server.url, "NEARDUP_LOG_LEVEL": "warning"}
    with (
        Server(tmp_path / "a", **environment) as first,
        Server(tmp_path / "b", **environment) as second,
    ):
        urls = [first.url, second.url]
        deadline = time.monotonic() + RUN_SECONDS
        threads = [
            threading.Thread(target=client_loop, args=(urls[i % 2], i, pool, deadline, logs[i]))
            for i in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log = [event for client_log in logs for event in client_log]
        assert all(event.status in (200, 201, 204) for event in log), [
            e for e in log if e.status not in (200, 201, 204)
        ]
        references = [fingerprint(text) for text in pool]
        text_of = {e.ids[0]: e.text for e in log if e.kind == "insert"}
        inserted = {e.ids[0]: e for e in log if e.kind == "insert"}
        deleted = {e.ids[0]: e for e in log if e.kind == "delete"}
        assert len(log) > 100 and len(deleted) > 5, "too little traffic to mean anything"
        for event in (e for e in log if e.kind in ("search", "insert")):
            query = references[event.text]
            matches = reference.whole_document_matches(event.answer["matches"])
            for match in matches:
                assert match["id"] in text_of, match
                check_match(match, query, references[text_of[match["id"]]])
                gone = deleted.get(match["id"])
                assert gone is None or gone.ended > event.started, (event, match)
            if event.kind == "insert":
                continue  # insert answers carry the best 10 only
            found = {m["id"] for m in matches}
            for other_id, insert in inserted.items():
                gone = deleted.get(other_id)
                if (
                    insert.ended < event.started
                    and (gone is None or gone.started > event.ended)
                    and must_find(query, references[insert.text])
                ):
                    assert other_id in found, (event.started, other_id)
        live = {i: t for i, t in text_of.items() if i not in deleted}
        for url in urls:  # the final state, through either process
            with httpx.Client(base_url=url, timeout=30) as client:
                for document_id in list(live)[:60] + list(deleted)[:30]:
                    status = client.get(f"{DOCS}/{document_id}").status_code
                    assert status == (200 if document_id in live else 404), document_id
                assert client.get("/v1/collections/default").json()["stats"]["documents"] == len(
                    live
                )
                for text in range(0, len(pool), 11):
                    query = references[text]
                    answer = client.post(SEARCH, json={"text": pool[text], "limit": 1000})
                    matches = reference.whole_document_matches(answer.json()["matches"])
                    for match in matches:
                        check_match(match, query, references[live[match["id"]]])
                    expected = {i for i, t in live.items() if must_find(query, references[t])}
                    assert expected <= {m["id"] for m in matches}
