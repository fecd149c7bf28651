"""The Redis servers of the test session, as fixtures (devkit/redis_servers.py starts
them): a standalone redis-server and a Redis Cluster, skipped with a clear message where
redis-server cannot be found. tests/conftest.py makes them the whole suite's: one of each
per session, which tests share, each emptying the server before it uses it (`emptied`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devkit.redis_servers import (
    RedisClusterServers,
    RedisServer,
    _missing,
    standalone,
    start_cluster,
)

__all__ = [
    "RedisClusterServers",
    "RedisServer",
    "emptied",
    "redis_cluster",
    "redis_server",
    "standalone",
    "start_cluster",
]


def emptied(url: str) -> None:
    """Nothing left on the server (every primary of a cluster)."""
    from app.backends.redis.store.connect import connect  # needs redis-py

    made = connect(url)
    made.flushall()
    made.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A standalone redis-server for the whole test session."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    with standalone(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    """A Redis Cluster of 3 primaries and 3 replicas for the whole test session."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    servers = start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield servers
    finally:
        servers.stop()
