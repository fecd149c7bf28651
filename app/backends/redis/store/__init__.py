"""One collection's documents and indexes in Redis or a Redis Cluster (docs/redis.md).

``layout`` names the keys and encodes the members, ``functions`` holds the Redis
functions that write a row group atomically, ``store`` the reads and writes (RedisStore),
``connect`` the client from a backend URL. redis-py (the ``redis`` extra) is imported by
these modules only, so the embedded service never needs it.
"""
