"""The checksums of a database's segment files, taken ahead of the start that opens them.

A start must verify every byte of every segment file before its first answer (never an
answer from a bad segment), and at 10M documents that is 8.8 GB: about 1.4 s with the
files in the page cache, more without. The hashing holds no GIL, so it need not wait for
the process to be ready to open the segments: ``neardup serve`` starts a ChecksumsAhead
in its first moments, and it hashes every file named by a verified manifest while the
process imports its modules (some 2 s that use one core). The open then takes each
file's checksum from here, and hashes only what was not done yet itself.

A checksum is taken from a file's own bytes, and handed out for that file only while it
is the same file (its inode, size and modification time): a file replaced or written
since is hashed again by the open. Files are never rewritten in place (a write makes a
new generation under new names), so that is a safeguard, not the common path.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import xxhash

log = logging.getLogger("neardup")

_CHUNK_BYTES = 1 << 24

FileIdentity = tuple[str, int, int, int]


def file_identity(path: Path) -> FileIdentity | None:
    """(path, inode, size, modification time in ns); None where the file is missing."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (str(path), status.st_ino, status.st_size, status.st_mtime_ns)


def file_checksum(path: Path) -> str:
    """The xxh3-64 of a file's bytes, read through a read-only mapping. O(bytes), off the
    GIL but for one call per 16 MB."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        hasher = xxhash.xxh3_64()
        if size:
            with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapping:
                mapping.madvise(mmap.MADV_SEQUENTIAL)
                view = memoryview(mapping)
                try:
                    for start in range(0, size, _CHUNK_BYTES):
                        hasher.update(view[start : start + _CHUNK_BYTES])
                finally:
                    view.release()
        return hasher.hexdigest()


class ChecksumsAhead:
    """Checksums of the files ``files`` yields, taken in a background thread in that
    order; ``checksum(path)`` hands one out.

    The thread and the open meet file by file: the open asks for the file it needs
    next; a file already hashed is handed out at once, the file being hashed is waited
    for, and a file not reached yet is struck off the thread's list and left to the open
    (which then hashes it itself), so neither ever waits for work the other could do."""

    def __init__(self, files: Iterator[Path]) -> None:
        self._files = files
        self._done: dict[FileIdentity, str] = {}
        self._refused: set[str] = set()  # paths the open took over
        self._current: str | None = None
        self._finished = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="segment-checksums", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for path in self._files:
                with self._condition:
                    if str(path) in self._refused:
                        continue
                    self._current = str(path)
                identity = file_identity(path)
                digest = None
                if identity is not None:
                    try:
                        digest = file_checksum(path)
                    except OSError as error:  # the open will find what is wrong
                        log.debug("no checksum ahead for %s: %s", path, error)
                # Handed out only if the file is still the one hashed.
                if digest is not None and file_identity(path) == identity:
                    assert identity is not None
                    with self._condition:
                        self._done[identity] = digest
                with self._condition:
                    self._current = None
                    self._condition.notify_all()
        except Exception as error:  # a listing that fails: the open hashes everything
            log.debug("checksums ahead stopped: %s", error)
        finally:
            with self._condition:
                self._finished = True
                self._current = None
                self._condition.notify_all()

    def checksum(self, path: Path) -> str | None:
        """The file's xxh3-64 if it was taken ahead from the file as it is now; None where
        the caller must hash it itself. Waits only while that very file is being hashed."""
        key = str(path)
        with self._condition:
            while self._current == key:
                self._condition.wait()
            identity = file_identity(path)
            digest = self._done.pop(identity, None) if identity is not None else None
            if digest is None and not self._finished:
                self._refused.add(key)
            return digest

    def wait(self) -> None:
        """Until the thread has gone through every file (tests)."""
        self._thread.join()

    def _check(self) -> None:
        with self._condition:
            assert self._current is None or not self._finished
            assert all(identity[0] not in self._refused for identity in self._done)
