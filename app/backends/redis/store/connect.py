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


def _online_replicas(info: dict[str, Any]) -> int:
    """Replicas an ``INFO replication`` reply lists as online (redis-py parses each
    ``slaveN:ip=...,state=online,...`` line into a dict)."""
    return sum(
        1
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


def replicas_lacking(client: Client, wanted: int) -> list[str]:
    """ "host:port has n of ``wanted`` replicas online" for each primary with fewer (none
    when ``wanted`` is 0): one INFO a primary."""
    if wanted <= 0:
        return []
    if isinstance(client, RedisCluster):
        replies = cast(
            dict[str, dict[str, Any]],
            client.info("replication", target_nodes=RedisCluster.PRIMARIES),
        )
        if "role" in replies:  # a cluster of one primary answers with its reply alone
            replies = {"the primary": replies}
    else:
        pool = client.connection_pool.connection_kwargs
        replies = {f"{pool.get('host')}:{pool.get('port')}": client.info("replication")}
    lacking = []
    for node, info in sorted(replies.items()):
        online = _online_replicas(info)
        if online < wanted:
            lacking.append(f"{node} has {online} of {wanted} replicas online")
    return lacking
