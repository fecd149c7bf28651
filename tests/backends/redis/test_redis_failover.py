"""A Redis primary killed (SIGKILL) under the Redis backend with
NEARDUP_REDIS_WAIT_REPLICAS=1: its replica takes over, and every document the service
acknowledged is still there, read and found by every method through the same service;
a write the lone new primary cannot copy to a replica is not acknowledged (503).
On a cluster of its own (3 primaries, 3 replicas; tests/redis_servers.py), since the test
breaks it."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.corpus import english_like_text
from tests.conftest import make_client
from tests.redis_servers import _missing, start_cluster

DOCS = "/v1/collections/default/documents"
FAILOVER_SECONDS = 60.0


def _role(port: int) -> str:
    info = subprocess.run(
        ["redis-cli", "-p", str(port), "INFO", "replication"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    return "primary" if "role:master" in info else "replica"


def test_acknowledged_documents_survive_a_primarys_death(tmp_path: Path) -> None:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    cluster = start_cluster(tmp_path / "cluster")
    try:
        served = contextlib.contextmanager(make_client)
        with served(tmp_path / "app", backend=cluster.url, redis_wait_replicas=1) as client:
            rng = random.Random(11)
            acknowledged: dict[str, str] = {}
            for number in range(15):
                documents = [
                    {"id": f"f{number}-{i}", "text": english_like_text(rng, 600)} for i in range(20)
                ]
                answer = client.post(f"{DOCS}/batch", json={"documents": documents})
                assert answer.status_code == 200
                assert all(r["inserted"] for r in answer.json()["results"])
                acknowledged.update((d["id"], d["text"]) for d in documents)
            assert client.get("/readyz").status_code == 200  # every primary has its replica
            victim = next(n for n in cluster.nodes if _role(n.port) == "primary")
            assert victim.process.poll() is None
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            # Polling another process's failover: there is no event to wait on. Reads
            # answer 503 until the replica took over and the service learnt it.
            deadline = time.monotonic() + FAILOVER_SECONDS
            first = next(iter(acknowledged))
            while client.get(f"{DOCS}/{first}").status_code != 200:
                assert time.monotonic() < deadline, "no failover"
                time.sleep(0.1)
            ids = list(acknowledged)
            while True:  # every shard answers again (each may take over on its own)
                statuses = {client.get(f"{DOCS}/{i}").status_code for i in ids}
                if statuses == {200}:
                    break
                assert statuses <= {200, 503} and time.monotonic() < deadline, statuses
                time.sleep(0.1)
            # The new primary has no replica left: a write that reaches it cannot be
            # WAITed for one, and is not acknowledged.
            late = [{"id": f"late-{i}", "text": english_like_text(rng, 600)} for i in range(40)]
            refused = client.post(f"{DOCS}/batch", json={"documents": late})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "storage_unavailable"
            # ... and readiness says so: the new primary lacks the replica writes wait for.
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert "has 0 of 1 replicas online" in ready.json()["error"]["message"]
            for document_id, text in acknowledged.items():
                found = client.post("/v1/collections/default/search", json={"text": text}).json()[
                    "matches"
                ]
                assert [(m["id"], m["methods"]) for m in found] == [
                    (document_id, ["exact", "simhash", "minhash", "passage"])
                ]
    finally:
        cluster.stop()
