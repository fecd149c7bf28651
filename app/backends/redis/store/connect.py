"""A Redis client from a backend URL (what ``NEARDUP_BACKEND`` will hold).

- ``redis://[:password@]host:port[/db]`` (or ``rediss://``): one Redis, standalone or a
  primary with replicas behind it;
- ``redis-cluster://host:port,host:port,...``: a Redis Cluster, from any of its nodes
  (the client learns the slots from the first that answers and follows MOVED / ASK).

Replies are bytes (members and fields are binary); hiredis parses them when installed.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from app.backends.redis.store.types import Client

CLUSTER_SCHEME = "redis-cluster"
# A lookup answers in well under a millisecond; a second without an answer is a dead node.
SOCKET_TIMEOUT_SECONDS = 5.0


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """(host, port) of each seed node of a ``redis-cluster://`` URL.

    >>> cluster_nodes("redis-cluster://127.0.0.1:7000,127.0.0.1:7001")
    [('127.0.0.1', 7000), ('127.0.0.1', 7001)]
    """
    parts = urlsplit(url)
    if parts.scheme != CLUSTER_SCHEME:
        raise ValueError(f"not a {CLUSTER_SCHEME}:// URL: {url!r}")
    nodes = []
    for seed in parts.netloc.split(","):
        host, _, port = seed.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a cluster seed is host:port, not {seed!r}")
        nodes.append((host, int(port)))
    return nodes


def connect(url: str) -> Client:
    """A client for a ``redis://``, ``rediss://`` or ``redis-cluster://`` URL."""
    if url.startswith(CLUSTER_SCHEME + "://"):
        make_node = cast(Any, ClusterNode)  # redis-py leaves its constructor untyped
        seeds = [make_node(host, port) for host, port in cluster_nodes(url)]
        return RedisCluster(startup_nodes=seeds, socket_timeout=SOCKET_TIMEOUT_SECONDS)
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"a Redis backend URL starts redis://, rediss:// or {CLUSTER_SCHEME}://")
    return redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_SECONDS)
