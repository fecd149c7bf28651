"""numba's on-disk cache made safe for several processes compiling at once.

numba saves a compiled kernel by reading the function's index file, picking the first
data file name the index does not use, and writing both back. Two processes saving two
signatures of one function at the same moment can both pick the same name: the index
then points a signature at the other's machine code, and the next process to load it
fails ("index ... is out of bounds"; numba/numba#10128, where numba's developers propose
a file lock). That happens wherever processes share a cold cache: ``neardup warm-up``'s
two halves, ``neardup dedup --workers N``, pytest's workers after a kernel change.

``serialize_saves()`` wraps numba's save in an exclusive ``flock`` on one lock file in
the cache directory, so that one process at a time reads, extends and writes an index.
Loads need no lock: numba writes each file under a temporary name and renames it.
Where numba's cache has no such save (another numba), or the lock file cannot be made
(a read-only directory, where numba does not save either), saves go on as numba does.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from typing import Any

LOCK_FILE = "numba-save.lock"


def serialize_saves() -> bool:
    """Every numba cache save of this process under the cache directory's lock; whether
    it is (idempotent)."""
    try:
        from numba.core.caching import IndexDataCacheFile
    except ImportError:  # pragma: no cover - numba without the on-disk cache's class
        return False
    save = getattr(IndexDataCacheFile, "save", None)
    if save is None or not hasattr(IndexDataCacheFile, "_load_index"):
        return False
    if getattr(save, "serialized", False):
        return True
    IndexDataCacheFile.save = _locked(save)  # type: ignore[method-assign]
    return True


def _locked(save: Callable[..., None]) -> Callable[..., None]:
    def locked_save(self: Any, key: Any, data: Any) -> None:
        try:
            handle = open(os.path.join(self._cache_path, LOCK_FILE), "a")  # noqa: SIM115
        except OSError:  # nowhere to lock: numba's own save decides what it can write
            save(self, key, data)
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the handle closes
            save(self, key, data)

    locked_save.serialized = True  # type: ignore[attr-defined]
    return locked_save
