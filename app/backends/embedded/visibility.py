"""What a read of an embedded collection may see, and its clock: LIVE rows, not past
max_age by the clock, within a query's since / until and, for a new document, within the
collection's match window of it. Collection, the writes and Matcher ask it directly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.backends.embedded.retention import Retention
from app.backends.embedded.rows import RowTable
from app.backends.embedded.states import LIVE
from app.collection_config import CollectionConfig
from app.core.types import Rows
from app.service.times import Clock, now_us
from app.service.types import Query


class Visibility:
    """The visible rows of one collection, and the time it reads them at (the clock never
    goes back for it: ``now_locked`` raises its floor)."""

    def __init__(
        self, rows: RowTable, retention: Retention, config: CollectionConfig, clock: Clock
    ) -> None:
        self.window = config.match_window_us
        self._rows = rows
        self._floor = np.iinfo(np.int64).min
        self._retention = retention
        self._clock = clock

    def use_settings(self, config: CollectionConfig) -> None:
        self.window = config.match_window_us

    def now(self) -> int:
        """Microseconds. O(1)."""
        return max(now_us(self._clock), self._floor)

    def now_locked(self) -> int:
        """``now``, under the write lock: no later read goes back before it."""
        now = self.now()
        self._floor = now
        return now

    def row(self, row: int, now: int) -> bool:
        """Whether one row is visible at ``now``. O(1)."""
        if self._rows.state.array[row] != LIVE:
            return False
        max_age = self._retention.max_age
        return max_age is None or int(self._rows.timestamp.array[row]) >= now - max_age

    def horizon(self) -> int:
        """What a read takes as it starts and gives ``mask``: the rows shown by then
        (RowTable.shown_end). O(1)."""
        return self._rows.shown_end

    def mask(
        self,
        rows: Rows,
        query: Query,
        stamps: npt.NDArray[np.int64] | None = None,
        horizon: int | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which rows a read may return: LIVE, not past max_age by the clock, within the
        query's since / until, with ``stamps`` (the time of the document each row would
        match) within the match window of it, and with a ``horizon`` (the read's start)
        shown before it: a read looks its indexes up one after another without a lock,
        and a batch published meanwhile would be found by the later ones only.
        O(rows), vectorised."""
        timestamps = self._rows.timestamp.array[rows]
        keep: npt.NDArray[np.bool_] = self._rows.state.array[rows] == LIVE
        if horizon is not None:
            keep &= rows < horizon
        max_age, window = self._retention.max_age, self.window
        if max_age is not None:
            keep &= timestamps >= self.now() - max_age
        if query.since is not None:
            keep &= timestamps >= query.since
        if query.until is not None:
            keep &= timestamps <= query.until
        if stamps is not None and window is not None:
            keep &= np.abs(timestamps - stamps) <= window
        return keep
