"""The HTTP contract on the Redis backend over the session's Redis Cluster of 3 primaries
and 3 replicas (tests/redis_servers.py), where it needs the cluster: a stream of
operations, every write WAITed for a replica (NEARDUP_REDIS_WAIT_REPLICAS=1), answered as
the embedded service answers it; a dropped collection's keys gone from every node. The
contract tests themselves (tests/api/test_api.py) run on the cluster too, through
tests/conftest.py's `backend` fixture."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.corpus import english_like_text
from tests.backends.redis.test_redis_api import compare_stream
from tests.conftest import LIMITS, make_client
from tests.redis_servers import RedisClusterServers, emptied


def test_a_stream_of_operations_answers_as_the_embedded_service(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    compare_stream(redis_cluster.url, tmp_path, 3, redis_wait_replicas=1)


def test_a_dropped_collection_leaves_no_key_on_any_node(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    """Every key of a dropped collection is deleted, on every primary (read with
    redis-cli --scan on each node)."""
    emptied(redis_cluster.url)
    texts = [english_like_text(random.Random(i), 600) for i in range(40)]
    for client in make_client(tmp_path, backend=redis_cluster.url, **LIMITS):
        settings = {"retention": {"max_documents": 30}}
        assert client.put("/v1/collections/gone", json=settings).status_code == 201
        batch = [{"id": f"g{i}", "text": t} for i, t in enumerate(texts)]
        batch.append({"id": "short", "text": "Breaking: quake hits Tokyo"})
        client.post("/v1/collections/gone/documents/batch", json={"documents": batch})
        assert _keys(redis_cluster, "{nd:gone~*")
        assert client.delete("/v1/collections/gone").status_code == 204
        assert _keys(redis_cluster, "{nd:gone~*") == []
        assert _keys(redis_cluster, "{nd:default~*")  # the others stay


def _keys(cluster: RedisClusterServers, pattern: str) -> list[str]:
    keys: list[str] = []
    for node in cluster.nodes:
        listed = subprocess.run(
            ["redis-cli", "-p", str(node.port), "--scan", "--pattern", pattern],
            capture_output=True,
            text=True,
            timeout=30,
        )
        keys += listed.stdout.split()
    return keys
