"""Tables the kernels use, kept beside numba's cache so that a start reads them.

The class table of word tokenisation (app/core/fingerprint.py's ``char_classes``) is a
visible part of a start to make (one unicodedata call for each of the 1.1 million code
points, holding the GIL beside the segment's restore; docs/journal.md, "Issue 27").
``neardup warm-up`` (the install) and the first start keep it in numba's cache directory
(NUMBA_CACHE_DIR, else app/core/__pycache__), under a name holding the hash of what it is
made from, with an xxh3-64 of its bytes after them; a start adopts it where both match,
and makes it otherwise. A directory that cannot be written leaves every start making it,
as before.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import xxhash

from app.core import fingerprint

log = logging.getLogger("neardup")

_CHECKSUM_BYTES = 8


def cache_directory() -> Path:
    """Where numba keeps the kernels of app/core: NUMBA_CACHE_DIR, or beside them."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(fingerprint.__file__).parent / "__pycache__"


def char_classes_path(directory: Path | None = None) -> Path:
    return (directory or cache_directory()) / f"char-classes-{fingerprint.char_classes_key()}.bin"


def ready_char_classes(directory: Path | None = None) -> None:
    """The table in memory: already there, adopted from where it was kept, or made (the
    slow way, once) and kept for the next start."""
    if fingerprint.has_char_classes() or load_char_classes(directory):
        return
    save_char_classes(directory)


def load_char_classes(directory: Path | None = None) -> bool:
    """Adopt the kept table where it is whole (its checksum) and none is made yet.
    Whether it was adopted. O(1.1 MB)."""
    try:
        data = char_classes_path(directory).read_bytes()
    except OSError:
        return False
    body, checksum = data[:-_CHECKSUM_BYTES], data[-_CHECKSUM_BYTES:]
    if len(data) <= _CHECKSUM_BYTES or xxhash.xxh3_64_digest(body) != checksum:
        log.warning("the kept class table of word tokenisation is damaged: made again")
        return False
    # Writable, as the table made is: numba compiles a kernel again for a read-only array.
    return fingerprint.adopt_char_classes(np.frombuffer(bytearray(body), dtype=np.uint8))


def save_char_classes(directory: Path | None = None) -> None:
    """Keep the table (made now if it is not yet) for the next start; written to a
    temporary name and renamed, so that a reader sees all of it or none. A directory
    that cannot be written is left alone."""
    body = fingerprint.char_classes().tobytes()
    path = char_classes_path(directory)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(body + xxhash.xxh3_64_digest(body))
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        log.debug("the class table of word tokenisation is not kept: %s", error)
