"""The backends a collection lives in: embedded (in-process over SQLite) and Redis."""
