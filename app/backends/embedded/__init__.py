"""The embedded backend: collections in process memory over SQLite (NEARDUP_BACKEND unset).

collection.py (one collection: its parts and what changes several at once), rows.py (the
per-row records and clusters), retention.py, matcher.py (the indexes and matching),
writes.py (the insert pipeline), pending.py, clusters.py, states.py; registry.py (every
collection, the merger and the evictor).
"""
