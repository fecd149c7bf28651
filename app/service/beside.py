"""Work run on another core beside the calling thread's own: an insert batch's passage
fingerprints while the thread makes its near-duplicate fingerprints. Both are compiled
kernels that release the GIL, so on a machine of two cores or more they overlap: 250
Reuters stories fingerprinted for both at 12 instead of 19 us a story, 3 KB texts at 24
instead of 35 (docs/journal.md, "Issue 42"). Small batches (a coalesced few single
inserts) and one-core machines do it inline: the hand-off would cost more than it saves.

Costs: one hand-off to a pool thread (tens of microseconds) where it runs beside.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")

# Below this many texts the work is done inline: the hand-off costs about what 30 texts'
# passage fingerprints do.
BESIDE_MIN_ITEMS = 32
# Pool threads: one a concurrent insert call, up to the cores beside the caller's.
_WORKERS = max(0, min(4, (os.cpu_count() or 1) - 1))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _the_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="neardup-beside")
        return _pool


def beside(work: Callable[[A], R], argument: A, items: int) -> Callable[[], R]:
    """``work(argument)`` on a pool thread while the caller goes on, where the machine
    has a core to spare and ``items`` (the texts) reach BESIDE_MIN_ITEMS; else done now,
    inline. Returns what waits for the result (and raises what the work raised)."""
    if _WORKERS == 0 or items < BESIDE_MIN_ITEMS:
        result = work(argument)
        return lambda: result
    return _the_pool().submit(work, argument).result
