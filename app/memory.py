"""Giving freed heap memory back to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


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
