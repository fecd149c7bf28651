"""Types shared by the Redis store's modules, named once."""

from __future__ import annotations

from typing import TypeAlias

import redis
from redis.cluster import RedisCluster

# A client of one Redis (standalone, or a primary) or of a Redis Cluster.
Client: TypeAlias = "redis.Redis | RedisCluster"
