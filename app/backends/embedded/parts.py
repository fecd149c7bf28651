"""The parts of an embedded collection, each owning its state (rows.py: the per-row
records, ids and clusters; retention.py: the rows by time and what expired;
visibility.py: what a read sees, and the clock; matcher.py: the indexes), and what
changes several of them at once: publishing, removing, forgetting durably, the passages
a text shares with the visible rows. Collection (reads, deletes, evictions, restores) and
Writes (the insert backend) both use them; neither calls back into the other."""

from __future__ import annotations

import numpy as np

from app.backends.embedded.matcher import Matcher
from app.backends.embedded.retention import Retention
from app.backends.embedded.rows import RowTable
from app.backends.embedded.visibility import Visibility
from app.collection_config import CollectionConfig
from app.core.passages import Candidates
from app.service.budget import DocumentBudget
from app.service.passages import Found, PassageQuery
from app.service.times import Clock
from app.service.types import Query
from app.storage.base import DocumentBatch, Store


class Parts:
    """One collection's parts (changed under its write lock; read without it)."""

    def __init__(
        self,
        name: str,
        config: CollectionConfig,
        store: Store,
        budget: DocumentBudget,
        clock: Clock,
    ) -> None:
        self.name = name
        self.config = config
        self.store = store
        self.budget = budget
        self.rows = RowTable(lambda rows: store.read_texts(name, rows))
        self.retention = Retention(self.rows, budget, config)
        self.visibility = Visibility(self.rows, self.retention, config, clock)
        self.matcher = Matcher(config, self.visibility, self.rows.simhash, self.rows.texts.many)

    def use_settings(self, config: CollectionConfig) -> None:
        """New time settings (match_window, retention, limits)."""
        self.config = config
        self.retention.use_settings(config)
        self.visibility.use_settings(config)

    def publish(self, batch: DocumentBatch) -> None:
        """Make committed documents visible: per-row records first, then the indexes, then
        their ids (under the write lock). O(batch)."""
        if len(batch) == 0:
            return
        self.rows.record(batch)
        self.budget.add(len(batch))
        self.retention.held(batch.timestamp_column(), batch.rows)
        self.matcher.insert(batch, batch.rows)
        self.rows.show(batch.rows)
        self.rows.name(batch)

    def remove(self, rows: list[int]) -> tuple[list[int], list[int]]:
        """Take rows out of memory (deleted, replaced, evicted, or whose commit failed),
        giving back their per-row memory. Returns what the store may forget: (rows no
        longer needed at all, rows whose id still names a cluster). O(rows)."""
        if not rows:
            return [], []
        array, was = self.rows.held(rows)
        if not len(array):
            return [], []
        # Invisible before the first index drops it; GONE only once no index returns it
        # (merge relies on it).
        self.rows.leaving(array, was)
        self.matcher.remove(array)
        released, named, live = self.rows.drop(array, was)
        self.budget.remove(live)
        self.retention.removed(live)
        self.rows.release(array, released)
        self.matcher.release(array)
        return released.tolist(), named.tolist()

    def forget_durably(self, rows: list[int]) -> None:
        """Delete rows from the store while the indexes still return them: their kept
        texts pinned first (``KeptTexts.pin``), so that a search meanwhile still verifies
        them; the caller removes them, then releases the texts."""
        if self.config.keeps_text:
            self.rows.texts.pin(rows)
        try:
            self.store.delete_documents(self.name, rows)
        except BaseException:
            self.rows.texts.release(np.array(rows, dtype=np.int64))  # still in the store
            raise

    def passages_of(
        self,
        asked: PassageQuery,
        query: Query,
        stamp: int | None = None,
        candidates: Candidates | None = None,
        horizon: int | None = None,
    ) -> list[Found] | None:
        """The visible documents sharing passages with the asked text (None: passages are
        off); with ``stamp``, a new document's time, those within its match window; with
        a ``horizon``, a read's (Visibility.mask), those shown before it."""
        passages = self.matcher.passages
        if passages is None:
            return None
        simhashes = self.rows.simhash.array
        return passages.find(
            asked,
            lambda rows: self.visibility.mask(
                rows, query, None if stamp is None else np.full(len(rows), stamp), horizon
            ),
            self.rows.ids.__getitem__,
            lambda row: (asked.simhash ^ int(simhashes[row])).bit_count(),
            candidates,
        )
