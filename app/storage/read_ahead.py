"""Segment files read and verified ahead of the start that opens them.

A start must verify every byte of every segment file before its first answer (never an
answer from a bad segment): at 10M documents 8.8 GB to hash, the narrow per-row columns
to read into memory, and the faults that bring the mapped files' pages in. None of it
holds the GIL, so none of it need wait until the process is ready to open the segments:
``neardup serve`` starts a ReadAhead in its first moments, and it reads every file named
by a verified manifest as the open would (mapped or read, and verified) while the process
imports its modules, which take about as long (docs/benchmarks.md, "Start-up and
restarts"). The open then takes each array from here, and reads itself only what was not
done yet.

What was read from a file is handed out only while it is the same file (its inode, size
and modification time): a file replaced or written since is read again by the open.
Segment files are never rewritten in place (a write makes a new generation under new
names), so that is a safeguard, not the common path.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger("neardup")


FileIdentity = tuple[str, int, int, int]


Prepared = TypeVar("Prepared")


def file_identity(path: Path) -> FileIdentity | None:
    """(path, inode, size, modification time in ns); None where the file is missing."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (str(path), status.st_ino, status.st_size, status.st_mtime_ns)


class ReadAhead(Generic[Prepared]):
    """The work ``files`` lists, one file after another in a background thread;
    ``take(path)`` hands out what it made of a file (a work that raises leaves the file
    to the open, which then says what is wrong).

    The thread and the open meet file by file: the open asks for the file it needs
    next; a file done is handed out at once, the file in hand is waited for, and a file
    not reached yet is struck off the thread's list and left to the open (which then
    does it itself), so neither ever waits for work the other could do, nor is a file
    done twice. Memory: what is prepared and not taken yet (the columns read ahead)."""

    def __init__(self, files: Iterator[tuple[Path, Callable[[Path], Prepared]]]) -> None:
        self._files = files
        self._done: dict[FileIdentity, Prepared] = {}
        self._refused: set[str] = set()  # paths the open took over
        self._closed = False
        self._current: str | None = None
        self._finished = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="segment-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for path, work in self._files:
                with self._condition:
                    if self._closed:
                        break
                    if str(path) in self._refused:
                        continue
                    self._current = str(path)
                identity = file_identity(path)
                prepared = None
                if identity is not None:
                    try:
                        prepared = work(path)
                    except Exception as error:  # the open will find what is wrong
                        log.debug("nothing read ahead from %s: %s", path, error)
                with self._condition:
                    # Handed out only if the file is still the one read, and wanted.
                    same = file_identity(path) == identity
                    if prepared is not None and same and not self._closed:
                        assert identity is not None
                        self._done[identity] = prepared
                    self._current = None
                    self._condition.notify_all()
        except Exception as error:  # a listing that fails: the open does the rest
            log.debug("the read-ahead stopped: %s", error)
        finally:
            with self._condition:
                self._finished = True
                self._current = None
                self._condition.notify_all()

    def take(self, path: Path) -> Prepared | None:
        """What was prepared from the file as it is now; None where the caller must do
        it itself. Waits only while that very file is in hand."""
        key = str(path)
        with self._condition:
            while self._current == key:
                self._condition.wait()
            identity = file_identity(path)
            prepared = self._done.pop(identity, None) if identity is not None else None
            if prepared is None and not self._finished:
                self._refused.add(key)
            return prepared

    def close(self) -> None:
        """The open is over: what was made and not taken is dropped (the arrays of a
        segment refused, say), and the thread stops at its next file."""
        with self._condition:
            self._closed = True
            self._done.clear()

    def wait(self) -> None:
        """Until the thread has gone through every file (tests)."""
        self._thread.join()

    def _check(self) -> None:
        with self._condition:
            assert self._current is None or not self._finished
            assert all(identity[0] not in self._refused for identity in self._done)
