"""The passage index of an embedded collection: each document's winnowed fingerprints
(app/core/passages.py) under its row, and the search that verifies candidates against
the texts the collection keeps while passages are on."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from app.collection_config import PassagesConfig
from app.core.passages import (
    Candidates,
    PassageIndex,
    shared_passages_texts,
)
from app.core.types import Rows
from app.service.indexes import TableMatcher
from app.service.passages import Found, PassageQuery

# Candidates verified a query, most shared fingerprints first: a document inside the
# query, or the query inside it, shares many; a few shared k-grams seldom make a passage.
CANDIDATES = 32
# Texts fingerprinted and indexed at a time (a batch of inserts is at most 1,000).
INSERT_CHUNK = 4096
_NONE = np.zeros(0, dtype=np.uint64)


class PassageSearch(TableMatcher):
    """Rows by their texts' fingerprints; verification reads texts by ``text_of``.
    Costs: an insert O(text) to tokenize and winnow; a search O(f log N) lookups and up
    to CANDIDATES texts tokenized and compared in one compiled call, O(text) each."""

    name = "passage"
    index: PassageIndex

    def __init__(
        self, config: PassagesConfig, texts_of: Callable[[list[int]], list[str | None]]
    ) -> None:
        self.config = config
        self.index = PassageIndex(config.max_rows)
        self._texts_of = texts_of
        # Row -> fingerprints of a document an insert made them for, until it is indexed.
        self._prepared: dict[int, npt.NDArray[np.uint64]] = {}

    def prepare(self, row: int, keys: npt.NDArray[np.uint64]) -> None:
        """The fingerprints of a row about to be inserted (not made again then)."""
        self._prepared[row] = keys

    def insert(self, texts: Sequence[str | None] | None, rows: Rows) -> None:
        """Texts (None: not kept, nothing indexed; ``texts`` None: none given, those not
        prepared are read from the store, a chunk at a time: a start's) under their rows;
        the fingerprints
        an insert prepared are used, then forgotten (a batch is published at once). A
        restart's rebuild, every text at once, is fingerprinted INSERT_CHUNK texts at a
        time (all at once peaked at ~15 KB a 3 KB text above what the index keeps: 50,000
        texts +756 MB, in chunks of 4,096 +147 MB, and 20% faster) and loaded in bulk
        (PassageIndex.insert_chunks: about one copy of the table at the peak)."""
        if len(rows) <= INSERT_CHUNK:
            self.index.insert_many(self._keys(texts, rows), rows)
        else:
            self.index.insert_chunks(self._chunks(texts, rows))
        self._prepared.clear()

    def _chunks(
        self, texts: Sequence[str | None] | None, rows: Rows
    ) -> Iterator[tuple[list[npt.NDArray[np.uint64]], Rows]]:
        """(fingerprints, rows) of INSERT_CHUNK texts at a time, each made when asked for."""
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            part = None if texts is None else texts[start : start + INSERT_CHUNK]
            yield self._keys(part, chunk), chunk

    def _keys(self, texts: Sequence[str | None] | None, rows: Rows) -> list[npt.NDArray[np.uint64]]:
        """Each text's fingerprints: prepared by an insert, else made now (a restart's:
        its text given, or with none given read from the store, the chunk's at once)."""
        keys: list[npt.NDArray[np.uint64]] = []
        unprepared: list[tuple[int, str]] = []  # (position, text): a restart's rows
        unread: list[tuple[int, int]] = []  # (position, row) of those to read
        given = [None] * len(rows) if texts is None else texts
        for position, (text, row) in enumerate(zip(given, rows.tolist(), strict=True)):
            prepared = self._prepared.get(row)
            keys.append(_NONE if prepared is None else prepared)
            if prepared is None and text is not None:
                unprepared.append((position, text))
            elif prepared is None and texts is None:
                unread.append((position, row))
        if unread:
            read = self._texts_of([row for _, row in unread])
            unprepared += [
                (position, text)
                for (position, _), text in zip(unread, read, strict=True)
                if text is not None
            ]
        if unprepared:
            made = self.config.fingerprints([text for _, text in unprepared])
            for (position, _), text_keys in zip(unprepared, made, strict=True):
                keys[position] = text_keys
        return keys

    def candidates_many(self, keys: Sequence[npt.NDArray[np.uint64]]) -> list[Rows]:
        """The candidate rows of several texts, in one lookup."""
        return [candidates.rows for candidates in self.counted_candidates(keys)]

    def counted_candidates(
        self,
        keys: Sequence[npt.NDArray[np.uint64]],
        bar: float | None = None,
        near: tuple[Rows, Rows] | None = None,
    ) -> list[Candidates]:
        """The candidates of several texts (an insert batch), in one lookup, with what
        they share (``find``'s ``candidates``); with a ``bar``, only those that may
        cover it and the (text, row) pairs ``near`` (PassageIndex.candidates_counted)."""
        found, boilerplate = self.index.candidates_counted(keys, bar, near)
        return [
            Candidates(rows, shared, common)
            for (rows, shared), common in zip(found, boilerplate.tolist(), strict=True)
        ]

    def find(
        self,
        asked: PassageQuery,
        visible: Callable[[Rows], np.ndarray],
        id_of: Callable[[int], str | None],
        distance_of: Callable[[int], int],
        candidates: Candidates | None = None,
    ) -> list[Found]:
        """The stored documents sharing passages with the asked text: candidates by
        shared fingerprints (``candidates``, when looked up already: ``counted_candidates``,
        which filters by what an answer can use; the visible ones, its ``exclude`` left
        out), verified token by token."""
        if candidates is None:
            candidates = self.counted_candidates([asked.keys])[0]
        rows = candidates.rows[candidates.rows != asked.exclude]
        if len(rows):
            rows = rows[visible(rows)]
        verified = rows[:CANDIDATES].tolist()
        held = [  # (row, text) of the verified candidates
            (row, text)
            for row, text in zip(verified, self._texts_of(verified), strict=True)
            if text is not None
        ]
        if not held:
            return []
        k, minimum = self.config.k, self.config.min_tokens
        runs = shared_passages_texts(asked.tokens, [text for _, text in held], k, minimum)
        found: list[Found] = []
        for (row, stored), passages in zip(held, runs, strict=True):
            # Only a candidate with passages is named (most share a k-gram or two).
            document_id = id_of(row) if passages else None
            if document_id is not None:
                distance = distance_of(row)
                length = len(stored)
                found.append(Found(document_id, passages, len(asked.text), length, distance, row))
        return found
