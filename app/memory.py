"""Giving freed heap memory back to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable
from functools import cache

# Background trims at most this often. malloc_trim holds each arena's lock while it walks
# it, and the event loop's allocations wait for the main arena. After every merge and
# every 50,000 evictions, that stall landed on about one search in a hundred during the
# soak and showed in its search p99 (docs/journal.md, "Issue 13"); memory freed in a
# steady state is reused by the next inserts anyway.
TRIM_INTERVAL_SECONDS = 60.0


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """Ask glibc to return the free parts of its heap (``malloc_trim``); False elsewhere.

    A rebuild allocates and frees gigabytes of temporaries (the loaded columns, sort
    buffers); without this they stay in the resident size though nothing uses them.
    """
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


class PeriodicTrim:
    """release_free_memory for background threads, at most once per ``interval`` seconds
    (the first call trims). Thread-safe; O(1) when it does not trim."""

    def __init__(self, interval: float = TRIM_INTERVAL_SECONDS) -> None:
        self.interval = interval
        self._last: float | None = None
        self._lock = threading.Lock()
        self.trims = 0

    def __call__(self) -> bool:
        """Trim when the interval has passed since the last trim; whether it trimmed."""
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last < self.interval:
                return False
            self._last = now
            self.trims += 1
        return release_free_memory()


# Polls of the background merger (one a second) without a write before the heap a burst of
# writes freed is given back.
IDLE_TRIM_POLLS = 2


class IdleTrim:
    """release_free_memory once the writes stop: called each poll with a count of writes
    so far (rows handed out), it trims when the count has stood still for ``quiet_polls``
    polls after it last moved, once. PeriodicTrim keeps trims rare while writes go on
    (a trim's stall then lands on searches); at rest a trim stalls nothing, and an
    ingest's verification and merges leave a quarter to a third of the resident size in
    freed heap (docs/benchmarks.md, "Shared passages at the defaults on real text").
    Not thread-safe: one poller. O(1)."""

    def __init__(
        self, quiet_polls: int = IDLE_TRIM_POLLS, release: Callable[[], bool] = release_free_memory
    ) -> None:
        self.quiet_polls = quiet_polls
        self._release = release
        self._writes: int | None = None
        self._quiet = 0
        self._pending = False
        self.trims = 0

    def __call__(self, writes: int) -> bool:
        """One poll, ``writes`` the count now; whether it trimmed."""
        if writes != self._writes:
            self._pending = self._writes is not None  # the first poll sets the baseline
            self._writes, self._quiet = writes, 0
            return False
        if not self._pending:
            return False
        self._quiet += 1
        if self._quiet < self.quiet_polls:
            return False
        self._pending = False
        self.trims += 1
        return self._release()
