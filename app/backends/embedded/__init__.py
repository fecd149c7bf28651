"""The embedded backend: collections in process memory over SQLite (NEARDUP_BACKEND unset).

collection.py (one collection and its parts), parts.py (what changes several parts at
once), visibility.py (which rows a read may return), rows.py (the per-row records and
clusters), texts.py (the kept texts), retention.py, matcher.py (the indexes and
matching), passages.py, writes.py (the lock, the commit and the undo around the insert
pipeline of app/service/insert.py, and its adapter), clusters.py, states.py; registry.py
(every collection, the merger and the evictor).
"""
