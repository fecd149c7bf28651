"""Reservations of address space that per-row columns grow into in place.

A large per-row array lives at the start of its own anonymous mapping, reserved for many
more rows than it holds: it grows by taking a longer view (nothing copied), and its
pages can be given back one by one (app/core/row_array.py's RowArray). A restart makes
such arrays from segment files: read into one (``reserved_rows``), or the file mapped
copy-on-write over its start (``reserved_rows_of_file``).

Apart from RowArray so that reading a segment needs only numpy: ``neardup serve`` reads
its segments in a thread started before the imports of the rest (app/storage/read_ahead.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

PAGE_BYTES = mmap.PAGESIZE
# Arrays of at least this many bytes live in their own anonymous mapping, whose pages can
# be given back to the kernel one by one (madvise); smaller ones are ordinary numpy arrays
# and keep their memory (a release is a no-op there).
MAPPED_MIN_BYTES = 1 << 20
_CAN_RELEASE = hasattr(mmap, "MADV_DONTNEED") and hasattr(mmap, "MAP_PRIVATE")


# A large array reserves the address space of this many rows (or four times what it
# needs, if more) up front, and grows by taking a longer view of it: growth copied the
# whole array before, on the event loop, which stalled every request in flight (the
# signatures, 512 bytes a row; docs/journal.md, "Issue 11"). Address space, not memory: the
# pages
# are not resident until written, and MAP_NORESERVE keeps them out of the kernel's
# commit accounting.
RESERVE_ROWS = 1 << 25
RESERVE_FACTOR = 4
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)


def reserved_rows(
    count: int, width: tuple[int, ...], dtype: type[np.generic], *, filled_at_once: bool = False
) -> npt.NDArray[Any]:
    """A zeroed (count, *width) array that a RowArray can adopt without copying it (its
    start of a reservation, as RowArray makes them): for a column that is filled and then
    held by an index, as the signatures a restart loads. ``filled_at_once``: the caller
    writes every row now (a column a restart reads), so those rows are asked for on huge
    pages where the kernel allows (transparent huge pages, madvise): a 2 MB page is
    faulted in where 512 were, so a column is read with far fewer faults (docs/journal.md,
    "Issue 27")."""
    reserved, mapping = _allocate((count, *width), np.dtype(dtype))
    view: npt.NDArray[Any] = reserved[:count]
    huge = getattr(mmap, "MADV_HUGEPAGE", None)
    if filled_at_once and mapping is not None and huge is not None and view.nbytes:
        with contextlib.suppress(OSError):  # a kernel without them: ordinary pages
            mapping.madvise(huge, 0, -(-view.nbytes // PAGE_BYTES) * PAGE_BYTES)
    return view


# A file mapped over the start of a reservation (mmap with MAP_FIXED at its address),
# which the mmap module cannot do: through the C library.
_MAP_FIXED = 0x10  # Linux, every architecture
_mmap_at: Any
try:
    _mmap_at = ctypes.CDLL(None, use_errno=True).mmap
    _mmap_at.restype = ctypes.c_void_p
    _mmap_at.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
except (OSError, AttributeError):  # no C library to ask
    _mmap_at = None


def reserved_rows_of_file(
    file: BinaryIO, count: int, width: tuple[int, ...], dtype: type[np.generic]
) -> npt.NDArray[Any] | None:
    """``reserved_rows`` whose first ``count`` rows are the file's bytes, mapped
    copy-on-write over the start of the reservation: nothing is read until a page is
    touched (from the page cache, not copied), a page is copied only when written, and the
    rows past the file grow in place as in any reservation. A page released later reads
    as the file again, not zeros: for columns whose released rows are never read (a
    RowArray's contract), such as signatures. None where it cannot be done (no C
    library, not Linux, an array too small to be mapped, or mmap refused). O(1)."""
    if _mmap_at is None or not sys.platform.startswith("linux") or not _CAN_RELEASE:
        return None
    array = reserved_rows(count, width, dtype)
    if array.nbytes < MAPPED_MIN_BYTES or _mapping_under(array) is None:
        return None
    address = array.ctypes.data
    length = -(-array.nbytes // PAGE_BYTES) * PAGE_BYTES  # the last page: zeros past the end
    flags = mmap.MAP_PRIVATE | _MAP_FIXED
    placed = _mmap_at(address, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, file.fileno(), 0)
    if placed != address:
        error = ctypes.get_errno()
        if placed not in (None, ctypes.c_void_p(-1).value):  # elsewhere: never with MAP_FIXED
            raise OSError(f"mmap placed the file at {placed:#x}, not {address:#x}")
        log_error = os.strerror(error) if error else "unknown error"
        raise OSError(error, f"could not map the file over its rows: {log_error}")
    return array


def _allocate(shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[npt.NDArray[Any], Any]:
    """Zeros of this shape: (array, its mapping, or None for a heap array). A mapped array
    may have more rows than asked (the reservation): callers use a view of what they need."""
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    nbytes = shape[0] * row_bytes
    if not _CAN_RELEASE or nbytes < MAPPED_MIN_BYTES:
        return np.zeros(shape, dtype=dtype), None
    # Private: a released page reads as zeros again and costs nothing until written.
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    reserved = max(RESERVE_ROWS, RESERVE_FACTOR * shape[0])
    try:
        mapping = mmap.mmap(-1, reserved * row_bytes, flags=flags | _MAP_NORESERVE)
    except (OSError, OverflowError, ValueError):  # address space limited (ulimit -v)
        reserved = shape[0]
        mapping = mmap.mmap(-1, nbytes, flags=flags)
    array = np.frombuffer(mapping, dtype=dtype).reshape((reserved, *shape[1:]))
    return array, mapping


def releasable_empty(shape: tuple[int, ...], dtype: type[np.generic]) -> npt.NDArray[Any]:
    """A zeroed array of exactly ``shape`` in its own anonymous mapping, so that
    ``release_prefix`` can give back its pages as a reader consumes it front to back;
    an ordinary heap array when it is too small to be mapped (or pages cannot be
    released). O(1) for a mapped one: no page is resident until written."""
    dtype_ = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype_.itemsize
    if not _CAN_RELEASE or nbytes < MAPPED_MIN_BYTES:
        return np.zeros(shape, dtype=dtype_)
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(mapping, dtype=dtype_).reshape(shape)


def _mapping_under(array: npt.NDArray[Any]) -> tuple[mmap.mmap, int] | None:
    """The anonymous mapping an array's memory lies in and the array's offset into it;
    None for a heap array."""
    owner: Any = array
    while isinstance(owner, np.ndarray) and isinstance(owner.base, np.ndarray):
        owner = owner.base
    if not isinstance(owner, np.ndarray) or not isinstance(owner.base, memoryview):
        return None
    mapping = owner.base.obj
    if not isinstance(mapping, mmap.mmap):
        return None
    return mapping, array.ctypes.data - owner.ctypes.data


def release_prefix(array: npt.NDArray[Any], through: int, after: int = 0) -> int:
    """Give back the whole pages of ``array[:through]``, a contiguous 1-D array of
    ``releasable_empty`` (or a view of one) whose first ``through`` items are never read
    again: they read as zeros after. ``after``: an earlier call gave back the pages up to
    that item, so only the pages from its page on are asked for. Returns the bytes asked
    for; 0 for a heap array. One system call."""
    found = _mapping_under(array)
    if found is None or through <= after:
        return 0
    mapping, offset = found
    own_first = -(-offset // PAGE_BYTES) * PAGE_BYTES  # the page before may hold others'
    first = max(own_first, (offset + after * array.itemsize) // PAGE_BYTES * PAGE_BYTES)
    last = (offset + through * array.itemsize) // PAGE_BYTES * PAGE_BYTES
    if last <= first:
        return 0
    mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
    return last - first
