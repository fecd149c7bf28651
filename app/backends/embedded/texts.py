"""The texts of an embedded collection that keeps them (passages' verification and
offsets, exact MinHash, ``get`` with the kept text), off the heap: the store holds every
text it acknowledged (SQLite's ``documents.text``), and a read asks it for the few rows
that get as far as verification. Only the texts of documents whose commit may not be
durable yet (published before the group commit, so that the next writer matches them)
are held here, until it settles.

The texts most recently inserted or read stay in a small cache (RECENT_CHARS in all,
least recently used out first): news repeats itself within hours (updates, rewrites, a
story in the next roundup), so the candidates a new text is verified against are mostly
recent ones, and a search's are often those the last searches read.

Costs: a read of r rows not cached is one statement on the reading thread's own
connection, O(r log N) from pages the OS caches (not the process: RSS holds the indexes
and at most RECENT_CHARS of texts); holding a batch's texts is O(batch), and they move to
the cache at the next hold or read after their commit settles.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

import numpy as np

from app.core.types import Rows
from app.storage.commit import Commit

# (rows) -> their stored texts, None where a row has none.
TextReader = Callable[[list[int]], list[str | None]]
# The recent texts cache's bound, in characters (about bytes for English; memory at most
# 4 bytes a character): some 4,000 1 KB stories.
RECENT_CHARS = 4 << 20


class KeptTexts:
    """Texts by row: those of unsettled commits from memory, the rest from ``read``."""

    def __init__(self, read: TextReader, recent_chars: int = RECENT_CHARS) -> None:
        self._read = read
        self._recent: dict[int, str] = {}
        # Durable texts read or inserted lately, least recently used first.
        self._cached: OrderedDict[int, str] = OrderedDict()
        self._cached_chars = 0
        self._cache_chars = recent_chars
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
                text = self._cached.pop(row, None)
                if text is not None:
                    self._cached_chars -= len(text)

    def __getitem__(self, row: int) -> str | None:
        return self.many([row])[0]

    def many(self, rows: Sequence[int]) -> list[str | None]:
        """The texts of rows, in order (None where a row has none)."""
        with self._lock:
            self._settle()
            texts = [self._recent.get(row) or self._cached_text(row) for row in rows]
        missing = [row for row, text in zip(rows, texts, strict=True) if text is None]
        if missing:
            read = self._read(missing)
            with self._lock:
                for row, text in zip(missing, read, strict=True):
                    if text is not None:
                        self._cache(row, text)
            found = iter(read)
            texts = [next(found) if text is None else text for text in texts]
        return texts

    def _cached_text(self, row: int) -> str | None:
        """A cached text, now the most recently used. Under the lock."""
        text = self._cached.get(row)
        if text is not None:
            self._cached.move_to_end(row)
        return text

    def _cache(self, row: int, text: str) -> None:
        """Keep a durable text among the recent ones, the least recently used let go past
        the bound. Under the lock."""
        if row in self._cached or len(text) > self._cache_chars:
            return
        self._cached[row] = text
        self._cached_chars += len(text)
        while self._cached_chars > self._cache_chars:
            _, dropped = self._cached.popitem(last=False)
            self._cached_chars -= len(dropped)

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
                    self._cache(row, text)
        self._drop(rows)

    def _drop(self, rows: list[int]) -> None:
        for row in rows:
            self._recent.pop(row, None)
            self._pinned.discard(row)

    @property
    def cached_chars(self) -> int:
        """Characters of the recent texts cached now."""
        return self._cached_chars

    def _check(self) -> None:
        held = {row for _, rows in self._unsettled for row in rows} | self._pinned
        assert set(self._recent) <= held, "a text held past its commit"
        assert self._cached_chars == sum(len(text) for text in self._cached.values())
        assert self._cached_chars <= self._cache_chars, "the recent texts past their bound"
