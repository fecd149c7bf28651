"""The passage index of an embedded collection: each document's winnowed fingerprints
(app/core/passages.py) under its row, and the search that verifies candidates against
the texts the collection keeps while passages are on."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from app.collection_config import PassagesConfig
from app.core.hosts import host_key
from app.core.passages import (
    NO_CANDIDATES,
    Candidates,
    Chunk,
    Hits,
    Passage,
    PassageIndex,
    identical_passages,
    shared_passages_texts,
    text_hash,
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
        # Row -> (fingerprints, text hash, host) of a document an insert made them for,
        # until it is indexed.
        self._prepared: dict[int, tuple[npt.NDArray[np.uint64], int, int]] = {}

    def prepare(self, row: int, asked: PassageQuery) -> None:
        """The fingerprints, text hash and host of a row about to be inserted (not made
        again then)."""
        self._prepared[row] = (asked.keys, asked.text_hash, asked.host)

    def insert(
        self,
        texts: Sequence[str | None] | None,
        rows: Rows,
        metadata: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        """Texts (None: not kept, nothing indexed; ``texts`` None: none given, those not
        prepared are read from the store, a chunk at a time: a start's) under their rows;
        the fingerprints
        an insert prepared are used, then forgotten (a batch is published at once). A
        restart's rebuild, every text at once, is fingerprinted INSERT_CHUNK texts at a
        time (all at once peaked at ~15 KB a 3 KB text above what the index keeps: 50,000
        texts +756 MB, in chunks of 4,096 +147 MB, and 20% faster) and loaded in bulk
        (PassageIndex.insert_chunks: about one copy of the table at the peak)."""
        if len(rows) <= INSERT_CHUNK:
            self.index.insert_many(*self._keys(texts, rows, metadata))
        else:
            self.index.insert_chunks(self._chunks(texts, rows, metadata))
        self._prepared.clear()

    def _chunks(
        self,
        texts: Sequence[str | None] | None,
        rows: Rows,
        metadata: Sequence[dict[str, Any] | None] | None,
    ) -> Iterator[Chunk]:
        """(fingerprints, rows, text hashes, hosts) of INSERT_CHUNK texts at a time, each
        made when asked for."""
        for start in range(0, len(rows), INSERT_CHUNK):
            end = start + INSERT_CHUNK
            yield self._keys(
                None if texts is None else texts[start:end],
                rows[start:end],
                None if metadata is None else metadata[start:end],
            )

    def _keys(
        self,
        texts: Sequence[str | None] | None,
        rows: Rows,
        metadata: Sequence[dict[str, Any] | None] | None,
    ) -> tuple[list[npt.NDArray[np.uint64]], Rows, list[int], list[int]]:
        """Each text's fingerprints, text hash and host: prepared by an insert, else made
        now (a restart's: its text given, or with none given read from the store, the
        chunk's at once)."""
        keys: list[npt.NDArray[np.uint64]] = []
        hashes: list[int] = []
        hosts: list[int] = []
        unprepared: list[tuple[int, str]] = []  # (position, text): a restart's rows
        unread: list[tuple[int, int]] = []  # (position, row) of those to read
        given = [None] * len(rows) if texts is None else texts
        for position, (text, row) in enumerate(zip(given, rows.tolist(), strict=True)):
            prepared = self._prepared.get(row)
            keys.append(_NONE if prepared is None else prepared[0])
            hashes.append(0 if prepared is None else prepared[1])
            if prepared is not None:
                hosts.append(prepared[2])
            else:
                hosts.append(0 if metadata is None else host_key(metadata[position]))
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
            for (position, text), text_keys in zip(unprepared, made, strict=True):
                keys[position] = text_keys
                hashes[position] = text_hash(text)
        return keys, rows, hashes, hosts

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
        found, _ = self.index.candidates_counted(keys, bar, near)
        return [Candidates(rows, shared) if len(rows) else NO_CANDIDATES for rows, shared in found]

    def candidates_of(
        self,
        queries: Sequence[PassageQuery],
        bar: float | None = None,
        near: tuple[Rows, Rows] | None = None,
        hits: Hits | None = None,
    ) -> list[Candidates]:
        """``counted_candidates`` of queries, their hosts' chrome counted for none of
        their pages (their own rows not among them), each query told what its host's
        stored pages hold (its ``host_pages``; PassageIndex.candidates_hosted); ``hits``:
        the index's lookup of their fingerprints, where made already."""
        found, _, pages = self.index.candidates_hosted(
            [q.keys for q in queries], bar, near, [q.host for q in queries],
            [q.exclude for q in queries], hits,
        )  # fmt: skip
        for asked, text_pages in zip(queries, pages, strict=True):
            asked.host_pages = text_pages
        return [Candidates(rows, shared) if len(rows) else NO_CANDIDATES for rows, shared in found]

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
            candidates = self.candidates_of([asked])[0]
        rows = candidates.rows[candidates.rows != asked.exclude]
        if len(rows):
            rows = rows[visible(rows)]
        verified = rows[:CANDIDATES]
        copies = self._copies(asked, verified)  # known without reading their texts
        unread = [row for row in verified.tolist() if row not in copies]
        by_row = copies | self._verified(asked, unread, candidates.texts or {})
        length = len(asked.text)
        found: list[Found] = []
        hosts = self.index.hosts(verified).tolist()
        for row, host in zip(verified.tolist(), hosts, strict=True):  # the candidates' order
            passages, stored_length = by_row.get(row, ([], 0))
            # Only a candidate with passages is named (most share a k-gram or two).
            document_id = id_of(row) if passages else None
            if document_id is not None:
                distance = distance_of(row)
                found.append(
                    Found(document_id, passages, length, stored_length, distance, row, host)
                )
        return asked.without_chrome(found, self.config.k)

    def read_ahead(
        self, queries: Sequence[PassageQuery], found: Sequence[Candidates]
    ) -> list[Candidates]:
        """Each query's candidates (``counted_candidates``) with the texts ``find`` will
        verify, read for all of them at once (an insert batch: one statement for every
        document, not one each: a statement costs more than a text it reads;
        docs/journal.md, "Issue 42").
        The first CANDIDATES of each, its own row and its copies left out; ``find`` reads
        any other it needs itself. O(rows)."""
        wanted: set[int] = set()
        for asked, candidates in zip(queries, found, strict=True):
            if not len(candidates):  # most texts of a batch
                continue
            rows = candidates.rows[candidates.rows != asked.exclude][:CANDIDATES]
            if len(rows):
                wanted.update(rows[~self.index.identical(rows, asked.text_hash)].tolist())
        if not wanted:
            return list(found)
        ordered = sorted(wanted)
        texts: dict[int, str] = {}
        for start in range(0, len(ordered), INSERT_CHUNK):  # under SQLite's bound limit
            chunk = ordered[start : start + INSERT_CHUNK]
            texts.update(
                (row, text)
                for row, text in zip(chunk, self._texts_of(chunk), strict=True)
                if text is not None
            )
        return [
            replace(candidates, texts=texts) if len(candidates) else candidates
            for candidates in found
        ]

    def _verified(
        self, asked: PassageQuery, rows: list[int], known: Mapping[int, str]
    ) -> dict[int, tuple[list[Passage], int]]:
        """Row -> (passages, text length) of candidates verified against their stored
        texts (``known`` ones as given, the rest read in one statement; one compiled
        call); rows without a text are left out."""
        if not rows:
            return {}
        unread = [row for row in rows if row not in known]
        read = dict(zip(unread, self._texts_of(unread), strict=True)) if unread else {}
        held = [(row, text) for row in rows if (text := known.get(row) or read.get(row))]
        if not held:
            return {}
        k, minimum = self.config.k, self.config.min_tokens
        runs = shared_passages_texts(asked.tokens, [text for _, text in held], k, minimum)
        return {
            row: (passages, len(text)) for (row, text), passages in zip(held, runs, strict=True)
        }

    def _copies(self, asked: PassageQuery, rows: Rows) -> dict[int, tuple[list[Passage], int]]:
        """Row -> (passages, text length) of the candidates whose text is the asked one,
        known without reading them (``identical_passages``; none where the asked text
        repeats a run of ``min_tokens``, which only verification finds all of). O(rows),
        and O(n log n) once for a text with a copy among them."""
        if not len(rows):
            return {}
        copies = rows[self.index.identical(rows, asked.text_hash)].tolist()
        if not copies:
            return {}
        passages = identical_passages(asked.tokens, self.config.min_tokens)
        if passages is None:
            return {}
        return {row: (list(passages), len(asked.text)) for row in copies}
