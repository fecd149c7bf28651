"""When a change queued for the store is durable: waited for by a thread or a coroutine.

``concurrent.futures.Future`` with ``asyncio.wrap_future`` did this job at a cost a
single insert felt (a Condition on the writer's side, a chained asyncio future, one
wake-up of the event loop per waiter; bench/bare_wrk.py --py-spy, docs/journal.md, "Issue
11"). A ``Commit`` holds its outcome under a plain lock, makes a ``threading.Event`` only
when a thread blocks on it, and ``settle`` wakes all the coroutines waiting on one group
commit with one call into their loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Commit:
    """The outcome of one queued change: None once it is durable, or the error that
    refused it. Settled once, by ``settle``.
    ``done`` and a settled ``exception`` / ``wait`` are O(1) and take no lock."""

    __slots__ = ("_done", "_error", "_event", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._error: BaseException | None = None
        self._event: threading.Event | None = None
        self._waiters: list[_Waiter] = []

    def done(self) -> bool:
        return self._done

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Block the calling thread until settled; the error, or None when durable.
        TimeoutError after ``timeout`` seconds."""
        if not self._done:
            with self._lock:
                if not self._done and self._event is None:
                    self._event = threading.Event()
                event = None if self._done else self._event
            if event is not None and not event.wait(timeout):
                raise TimeoutError("the change is not committed yet")
        return self._error

    def result(self, timeout: float | None = None) -> None:
        """Block until settled; raise its error, if any."""
        error = self.exception(timeout)
        if error is not None:
            raise error

    async def wait(self) -> BaseException | None:
        """Wait on the event loop until settled; the error, or None when durable."""
        if not self._done:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            with self._lock:
                waiting = not self._done
                if waiting:
                    self._waiters.append((loop, future))
            if waiting:
                await future
        return self._error

    def _finish(self, error: BaseException | None) -> list[_Waiter]:
        with self._lock:
            if self._done:
                raise RuntimeError("a commit is settled once")
            self._error = error
            self._done = True
            event, waiters, self._waiters = self._event, self._waiters, []
        if event is not None:
            event.set()
        return waiters

    def _check(self) -> None:
        assert not (self._done and self._waiters), "a settled commit keeps no waiters"
        assert self._error is None or self._done


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():  # done: its coroutine was cancelled meanwhile
            future.set_result(None)


def settle(outcomes: Iterable[tuple[Commit, BaseException | None]]) -> None:
    """Settle commits (None: durable), from any thread: threads blocked on them resume,
    and the coroutines waiting on them are woken by one call into each of their loops."""
    woken: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for commit, error in outcomes:
        for loop, future in commit._finish(error):
            woken.setdefault(loop, []).append(future)
    for loop, futures in woken.items():
        # A closed loop (RuntimeError) has nobody waiting on it any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_wake, futures)


def settled(error: BaseException | None = None) -> Commit:
    """A commit settled already (a store that writes at once)."""
    commit = Commit()
    commit._finish(error)
    return commit
