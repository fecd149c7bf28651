"""The texts of an embedded collection that keeps them (passages' verification and
offsets, exact MinHash, ``get`` with the kept text), off the heap: the store holds every
text it acknowledged (SQLite's ``documents.text``), and a read asks it for the few rows
that get as far as verification. Only the texts of documents whose commit may not be
durable yet (published before the group commit, so that the next writer matches them)
are held here, until it settles.

The texts most recently inserted or read stay in a small cache (RECENT_CHARS for every
collection of the process, least recently used out first): news repeats itself within
hours (updates, rewrites, a story in the next roundup), so the candidates a new text is
verified against are mostly recent ones, and a search's are often those the last
searches read.

Costs: a read of r rows not cached is one statement on the reading thread's own
connection, O(r log N) from pages the OS caches (not the process: RSS holds the indexes
and at most RECENT_CHARS of texts); holding a batch's texts is O(batch), and they move to
the cache at the next hold or read after their commit settles.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

import numpy as np

from app.core.types import Rows
from app.storage.commit import Commit

# (rows) -> their stored texts, None where a row has none.
TextReader = Callable[[list[int]], list[str | None]]
# The recent texts cache's bound, in characters (about bytes for English; memory at most
# 4 bytes a character): some 4,000 1 KB stories, for every collection of the process.
RECENT_CHARS = 4 << 20


class RecentTexts:
    """Durable texts read or inserted lately, by (owner, row), least recently used out
    first past ``chars`` characters in all. One per process, shared by every collection,
    so that its memory does not grow with their number. Thread-safe; O(1) a text."""

    def __init__(self, chars: int = RECENT_CHARS) -> None:
        self._texts: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._chars = 0
        self._bound = chars
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> str | None:
        """A text, now the most recently used (None: not here)."""
        with self._lock:
            text = self._texts.get(key)
            if text is not None:
                self._texts.move_to_end(key)
            return text

    def put(self, key: tuple[int, int], text: str) -> None:
        """Keep a durable text, the least recently used let go past the bound."""
        with self._lock:
            if key in self._texts or len(text) > self._bound:
                return
            self._texts[key] = text
            self._chars += len(text)
            while self._chars > self._bound:
                _, dropped = self._texts.popitem(last=False)
                self._chars -= len(dropped)

    def drop(self, key: tuple[int, int]) -> None:
        """A text never to be answered again (its row is gone)."""
        with self._lock:
            text = self._texts.pop(key, None)
            if text is not None:
                self._chars -= len(text)

    @property
    def chars(self) -> int:
        """Characters cached now."""
        return self._chars

    def _check(self) -> None:
        with self._lock:
            assert self._chars == sum(len(text) for text in self._texts.values())
            assert self._chars <= self._bound, "the recent texts past their bound"


RECENT = RecentTexts()
_owners = itertools.count()  # each KeptTexts's key in the shared cache


class KeptTexts:
    """Texts by row: those of unsettled commits from memory, the rest from ``read``."""

    def __init__(self, read: TextReader, recent: RecentTexts = RECENT) -> None:
        self._read = read
        self._recent: dict[int, str] = {}
        self._cache = recent
        self._owner = next(_owners)
        # (commit, rows) of held texts in the order they were held; a None commit: its
        # documents are not queued yet (``until`` names it).
        self._unsettled: deque[tuple[Commit | None, list[int]]] = deque()
        self._pinned: set[int] = set()  # rows held by ``pin``
        self._lock = threading.Lock()  # held / settled from writers, read from searches

    def hold(self, rows: Rows, texts: Sequence[str | None]) -> None:
        """Keep the texts of rows about to be published, before any index takes them,
        until ``until``'s commit settles."""
        numbers = np.asarray(rows, dtype=np.int64).tolist()
        with self._lock:
            self._settle()
            for row, text in zip(numbers, texts, strict=True):
                if text is not None:
                    self._recent[row] = text
            self._unsettled.append((None, numbers))

    def until(self, commit: Commit | None) -> None:
        """The commit that makes the last held texts durable (None: they are already)."""
        with self._lock:
            if self._unsettled and self._unsettled[-1][0] is None:
                _, rows = self._unsettled.pop()
                if commit is None or commit.done():
                    self._settled(commit, rows)
                else:
                    self._unsettled.append((commit, rows))

    def pin(self, rows: Sequence[int]) -> None:
        """Hold the stored texts of rows the store is about to forget while they are still
        visible (a delete, a replacement: the store's change commits first), until
        ``release``: a search meanwhile verifies them as before. One read."""
        texts = self._read(list(rows))
        with self._lock:
            for row, text in zip(rows, texts, strict=True):
                if text is not None:
                    self._recent[row] = text
            self._pinned.update(rows)

    def release(self, rows: Rows) -> None:
        """Rows gone (deleted, evicted, or their commit failed), or pinned ones the
        indexes no longer return: never read again from here."""
        with self._lock:
            numbers = np.asarray(rows, dtype=np.int64).tolist()
            self._drop(numbers)
        for row in numbers:
            self._cache.drop((self._owner, row))

    def __getitem__(self, row: int) -> str | None:
        return self.many([row])[0]

    def many(self, rows: Sequence[int]) -> list[str | None]:
        """The texts of rows, in order (None where a row has none)."""
        with self._lock:
            self._settle()
            texts = [self._recent.get(row) for row in rows]
        texts = [
            text or self._cache.get((self._owner, row))
            for row, text in zip(rows, texts, strict=True)
        ]
        missing = [row for row, text in zip(rows, texts, strict=True) if text is None]
        if missing:
            read = self._read(missing)
            for row, text in zip(missing, read, strict=True):
                if text is not None:
                    self._cache.put((self._owner, row), text)
            found = iter(read)
            texts = [next(found) if text is None else text for text in texts]
        return texts

    @property
    def held(self) -> int:
        """Texts held in memory now (of unsettled commits)."""
        return len(self._recent)

    def _settle(self) -> None:
        """Let go of the texts whose commit has settled (durable, or failed: its rows are
        taken out). Under the lock."""
        while self._unsettled:
            commit, rows = self._unsettled[0]
            if commit is None or not commit.done():
                return
            self._unsettled.popleft()
            self._settled(commit, rows)

    def _settled(self, commit: Commit | None, rows: list[int]) -> None:
        """Held texts whose commit settled: among the recent ones where it made them
        durable (None: they were), let go otherwise. Under the lock."""
        if commit is None or commit.exception() is None:
            for row in rows:
                text = self._recent.get(row)
                if text is not None and row not in self._pinned:
                    self._cache.put((self._owner, row), text)
        self._drop(rows)

    def _drop(self, rows: list[int]) -> None:
        for row in rows:
            self._recent.pop(row, None)
            self._pinned.discard(row)

    def _check(self) -> None:
        held = {row for _, rows in self._unsettled for row in rows} | self._pinned
        assert set(self._recent) <= held, "a text held past its commit"
        self._cache._check()
