"""The retention of an embedded collection: its rows by time, what it expired and not
evicted yet, and the mark (every (timestamp, row) at or below it expired).

Expired documents turn HIDDEN at once (they leave every answer) and are evicted later,
EVICTION_CHUNK at a time (Collection.evict). A TimeOrder holds the rows by time:
expiring k documents costs O(k log), not a scan. The mark travels with the commits, so
that a restart brings nothing expired back.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.backends.embedded.rows import RowTable
from app.backends.embedded.states import GONE, LIVE
from app.collection_config import CollectionConfig
from app.core.time_order import TimeOrder
from app.core.types import Rows
from app.service.budget import DocumentBudget

NO_MARK = (np.iinfo(np.int64).min, -1)


class Retention:
    """What a collection's retention (max_age, max_documents) has expired. Changed under
    the collection's write lock only."""

    def __init__(self, rows: RowTable, budget: DocumentBudget, config: CollectionConfig) -> None:
        self._rows = rows
        self._budget = budget
        self.order = TimeOrder()  # held rows by (timestamp, row)
        self._order_gone = 0  # entries of the order whose rows are GONE already
        self._expiring: list[Rows] = []
        self.expiring = 0  # expired rows not evicted yet
        self.expired_through: tuple[int, int] = NO_MARK
        self._persisted_mark: tuple[int, int] = NO_MARK
        self.use_settings(config)

    def use_settings(self, config: CollectionConfig) -> None:
        self.max_age = config.retention.max_age_us
        self.max_kept = config.retention.max_documents

    def held(self, timestamps: npt.NDArray[np.int64], rows: Rows) -> None:
        """Published rows enter the time order."""
        self.order.insert(timestamps, rows)

    def removed(self, live: int) -> None:
        """``live`` LIVE rows went GONE: their entries are still in the order."""
        self._order_gone += live

    def expire(self, now: int) -> None:
        """Hide what the retention expires now: documents older than max_age, then the
        oldest past max_documents. O(expired x log) each."""
        if self.max_age is not None:
            self._expired(*self.order.take_before(now - self.max_age))
        if self.max_kept is not None:
            while len(self._rows) > self.max_kept:
                stamps, rows = self.order.take_oldest(len(self._rows) - self.max_kept)
                if not len(rows):
                    break
                self._expired(stamps, rows)
        if self._order_gone > len(self.order) // 2 + 4096:
            self.order.compact(lambda rows: self._rows.state.array[rows] != GONE)
            self._order_gone = 0

    def restore(self, mark: tuple[int, int]) -> None:
        """The mark of a restart: what it covers is expired again."""
        self.expired_through = self._persisted_mark = mark
        self._expired(*self.order.take_through(*mark))

    def _expired(self, stamps: npt.NDArray[np.int64], rows: Rows) -> None:
        """Entries taken off the time order, oldest first: LIVE rows turn HIDDEN and wait
        for eviction; the mark moves to the last of them. Deleted rows (still in the order)
        do not move it: whether a document arriving later counts as expired must not
        depend on what was deleted."""
        if not len(rows):
            return
        is_live = self._rows.state.array[rows] == LIVE
        live = rows[is_live]
        self._order_gone -= len(rows) - len(live)
        if not len(live):
            return
        last = int(np.flatnonzero(is_live)[-1])
        self.expired_through = max(self.expired_through, (int(stamps[last]), int(rows[last])))
        self._rows.hide(live)
        self._budget.remove(len(live))
        self._expiring.append(live)
        self.expiring += len(live)

    def expired_on_arrival(self, stamps: npt.NDArray[np.int64], now: int) -> npt.NDArray[np.bool_]:
        """Which new documents are expired already: matched and answered, not stored. (A
        new row is above every row of the mark, so its key is at or below it exactly when
        its timestamp is below the mark's.)"""
        expired: npt.NDArray[np.bool_] = stamps < self.expired_through[0]
        if self.max_age is not None:
            expired |= stamps < now - self.max_age
        return expired

    def still(self) -> bool:
        """Whether nothing expires (no max_age, no max_documents) and no mark waits to be
        recorded: an insert's commit then needs nothing that publishing it moves."""
        unset = self.max_age is None and self.max_kept is None
        return unset and self.expired_through == self._persisted_mark

    def mark_to_record(self) -> tuple[int, int] | None:
        """The mark, when it moved since it was last handed to the store."""
        if self.expired_through == self._persisted_mark:
            return None
        self._persisted_mark = self.expired_through
        return self.expired_through

    def recorded(self) -> None:
        """The mark went to the store with an eviction."""
        self._persisted_mark = self.expired_through

    def take_expiring(self, limit: int) -> Rows:
        """Up to ``limit`` expired rows to evict, oldest first."""
        taken: list[Rows] = []
        count = 0
        while self._expiring and count < limit:
            first = self._expiring[0]
            part, rest = first[: limit - count], first[limit - count :]
            taken.append(part)
            count += len(part)
            if len(rest):
                self._expiring[0] = rest
            else:
                self._expiring.pop(0)
        self.expiring -= count
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)

    def oldest(self) -> tuple[int, int] | None:
        """(timestamp, row) of the oldest LIVE document."""
        return self.order.oldest_alive(lambda rows: self._rows.state.array[rows] == LIVE)

    def _check(self, live: Rows, hidden: int) -> None:
        assert self.expiring == hidden == sum(map(len, self._expiring))
        self.order._check()
        assert len(self.order) - self._order_gone == len(live)
        mark = self.expired_through
        for row in live.tolist():
            assert (int(self._rows.timestamp.array[row]), row) > mark, (row, mark)
