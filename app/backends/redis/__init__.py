"""The Redis / Redis Cluster backend (NEARDUP_BACKEND=redis://... or redis-cluster://...):
every process stateless over the same collections (docs/redis.md).

registry.py (RedisRegistry: the collections' settings, cached per process),
collection.py (RedisCollection, as the API uses it), context.py (CollectionContext: what
its reads and inserts share: settings, store, retention, the search of stored documents,
eviction), insert.py (an insert: refusals, retries, matching, the cluster each joins,
the writes), reads.py (get, search, similar on the event loop), resolved.py (the types
they share), records.py, retention.py
(the time index and the mark), ngram.py (the n-gram index's tables), failures.py,
transfer.py (export and import); store/ (the store and its wire: one collection's
documents and index tables in Redis, the key layout, the round trips).
"""
