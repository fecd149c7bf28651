"""DocumentBudget: NEARDUP_MAX_DOCUMENTS, the live documents of every collection together."""

from __future__ import annotations

import threading


class DocumentBudget:
    """How many live documents the service may hold, over all its collections.

    A writer reserves room for the documents it may add before it decides which to
    store (``reserve``), counts what it added and gave back (``add``, ``remove``), and
    returns its reservation (``release``). Two collections inserting at once therefore
    never pass the limit together. ``limit`` None: no limit, only the count.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self.total = 0
        self._reserved = 0

    def reserve(self, wanted: int) -> int:
        """Reserve room for up to ``wanted`` more documents; returns how many were granted."""
        with self._lock:
            if self.limit is None:
                granted = wanted
            else:
                granted = max(0, min(wanted, self.limit - self.total - self._reserved))
            self._reserved += granted
            return granted

    def release(self, granted: int) -> None:
        with self._lock:
            self._reserved -= granted

    def add(self, count: int) -> None:
        with self._lock:
            self.total += count

    def remove(self, count: int) -> None:
        with self._lock:
            self.total -= count
