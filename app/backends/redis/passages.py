"""The passage index of a Redis collection: each document's winnowed fingerprints
(app/core/passages.py) as sorted-set entries beside the store's tables (a GramTable whose
set size field holds the document's count of fingerprints: member = key | count | row,
in the shard of the key's top bits, the same hash tags as the store's tables), written
and removed as the n-gram index's are, from the texts the records keep while passages
are on. The key is the fingerprint spread (``spread``, a bijection): winnowing keeps
each window's smallest hash, so raw fingerprints crowd the low shards, whose sets then
grow past Redis's packed encoding (measured on 13,881 Reuters stories: 363 of the 4,096
sets were skiplists and 1,208 empty, 2,259 B of entries a story; spread, 135 entries a
set). Collections created before keep raw keys (``spread_keys`` False), and entries
written before the count was kept hold 0 there: such a candidate is always verified,
and a removal takes both forms away.

A find is two round trips: the entries of the query's fingerprints (at most max_rows + 1
a fingerprint: one held more often is boilerplate and finds nothing), then the rows of
the candidates that may pass (``may_cover`` at the answer's coverage, from the shared
fingerprints and the counts the entries carry, and the near-duplicates; their records
hold the texts), verified token by token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.redis.records import Held
from app.backends.redis.store.grams import MAX_SET_SIZE, GramTable
from app.backends.redis.store.rows import RowData, RowReads
from app.backends.redis.store.steps import Batch, Steps
from app.backends.redis.store.wire import Command
from app.collection_config import PassagesConfig
from app.core.hosts import NO_HOST, HostPages, host_hits
from app.core.passages import may_cover, shared_passages_texts, spread
from app.core.types import Rows
from app.service.passages import Found, PassageQuery

# Candidates verified a query, most shared fingerprints first (as the embedded backend).
CANDIDATES = 32
_LEGACY_COUNT = 0  # the count field of entries written before it held the count


class RedisPassages:
    """One collection's passage entries."""

    def __init__(self, config: PassagesConfig, table: GramTable, spread_keys: bool) -> None:
        self.config = config
        self.table = table
        self.spread_keys = spread_keys

    def _keys(self, fingerprints: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The entries' keys of fingerprints."""
        return spread(fingerprints) if self.spread_keys else fingerprints

    def writes(
        self,
        command: str,
        texts: Sequence[str],
        rows: Rows,
        hosts: Sequence[int] | None = None,
        made: Sequence[npt.NDArray[np.uint64] | None] | None = None,
    ) -> list[Command]:
        """``ZADD`` (or ``ZREM``) of the entries of stored texts under their rows, each
        with its document's host's key where it has one (app/core/hosts.py); ``made``:
        each text's fingerprints where an insert made them already (None: made here)."""
        given: list[npt.NDArray[np.uint64] | None] = [None] * len(texts)
        if made is not None:
            given = list(made)
        unmade = [i for i, text_keys in enumerate(given) if text_keys is None]
        if unmade:
            fresh = self.config.fingerprints([texts[i] for i in unmade])
            for i, text_keys in zip(unmade, fresh, strict=True):
                given[i] = text_keys
        keys = [text_keys for text_keys in given if text_keys is not None]
        counts = np.array([len(k) for k in keys], dtype=np.int64)
        if not counts.sum():
            return []
        flat = self._keys(np.concatenate(keys))
        entry_rows = np.repeat(np.asarray(rows, dtype=np.int64), counts)
        sizes = np.repeat(counts, counts)
        each_host = np.zeros(len(rows), dtype=np.int64) if hosts is None else np.asarray(hosts)
        entry_hosts = np.repeat(each_host.astype(np.int64), counts)
        hosted = entry_hosts != NO_HOST
        commands = self.table.writes(command, flat[~hosted], sizes[~hosted], entry_rows[~hosted])
        commands += self.table.writes(
            command, flat[hosted], sizes[hosted], entry_rows[hosted], entry_hosts[hosted]
        )
        if command == "ZREM" and not self.spread_keys:
            # The entries of before hosts, and of before the count (both before spread keys).
            commands += self.table.writes(command, flat[hosted], sizes[hosted], entry_rows[hosted])
            legacy = np.full(len(flat), _LEGACY_COUNT, dtype=np.int64)
            commands += self.table.writes(command, flat, legacy, entry_rows)
        return commands

    def find_steps(
        self,
        reads: RowReads,
        queries: Sequence[PassageQuery],
        visible_by: Callable[[list[Any]], Callable[[int, int, int], bool]],
        also: Sequence[Command] = (),
        bar: float | None = None,
        near: Sequence[Rows] | None = None,
    ) -> Steps[list[list[Found]]]:
        """For each query, the stored documents sharing passages with it that are
        visible to it (``visible_by(replies to also)`` says, for its index, a timestamp
        and a seq), its ``exclude`` row left out; with a ``bar``, only those that may
        cover it (``may_cover``) and its rows ``near`` (its near-duplicates, whose
        matches the passages annotate). Two round trips for all of them: every query's
        fingerprints' entries (``also``, the caller's reads, beside them), then the rows
        of every query's candidates."""
        limit = self.config.max_rows + 1
        lookups = [
            self.table.packed_lookups(self._keys(q.keys), 0, MAX_SET_SIZE, limit) for q in queries
        ]
        if not any(per_query.commands for per_query in lookups):
            return [[] for _ in queries]
        first = reads.batch(also)
        answered = yield Batch(
            [*first.packed, *(c for per_query in lookups for c in per_query.commands)],
            None
            if first.keys is None
            else [*first.keys, *(k for per_query in lookups for k in per_query.keys)],
        )
        visible = visible_by(answered[: len(also)])
        replies = iter(answered[len(also) :])
        shared: list[dict[int, int]] = []
        for number, (query, per_query) in enumerate(zip(queries, lookups, strict=True)):
            counts: dict[int, int] = {}
            held_keys: dict[int, int] = {}  # row -> its count of fingerprints
            # Every fingerprint's entries decoded at once, not a decode each; one held more
            # often than the cap is boilerplate.
            entries = [next(replies) for _ in per_query.commands]
            held_by = [
                [] if len(members) > self.config.max_rows else members for members in entries
            ]
            boilerplate = sum(len(members) > self.config.max_rows for members in entries)
            sizes, rows, hosts = GramTable.decode_hosted(
                [member for members in held_by for member in members]
            )
            positions = np.repeat(
                np.arange(len(held_by), dtype=np.int64), [len(members) for members in held_by]
            )
            keep, pages = host_hits(
                positions, rows, hosts, np.array([0, len(held_by)]), [query.host], [query.exclude],
            )  # fmt: skip
            if query.host != NO_HOST:
                query.host_pages = HostPages.of(query.keys, pages)
            for size, row in zip(sizes[keep].tolist(), rows[keep].tolist(), strict=True):
                counts[row] = counts.get(row, 0) + 1
                held_keys[row] = size
            if bar and counts:
                close = set() if near is None else set(near[number].tolist())
                counts = _may_pass(counts, held_keys, boilerplate, len(query.keys), bar, close)
            shared.append(counts)
        wanted = sorted({row for counts in shared for row in counts})
        if not wanted:
            return [[] for _ in queries]
        data = yield from reads.rows_steps(np.array(wanted, dtype=np.int64))
        held = Held(data)
        at_of = {int(row): at for at, row in enumerate(data.rows.tolist())}
        answers: list[list[Found]] = []
        for number, (query, counts) in enumerate(zip(queries, shared, strict=True)):
            candidates = [
                at_of[row]
                for row in counts
                if row in at_of
                and visible(number, int(data.timestamps[at_of[row]]), held.seq(at_of[row]))
            ]
            candidates.sort(key=lambda at: (-counts[int(data.rows[at])], held.seq(at)))
            found = self._verified(query, candidates[:CANDIDATES], data, held)
            answers.append(query.without_chrome(found, self.config.k))
        return answers

    def _verified(
        self, query: PassageQuery, candidates: list[int], data: RowData, held: Held
    ) -> list[Found]:
        with_text = [(at, held.record(at)) for at in candidates]
        with_text = [(at, record) for at, record in with_text if record.text is not None]
        if not with_text:
            return []
        texts = [record.text or "" for _, record in with_text]
        runs = shared_passages_texts(query.tokens, texts, self.config.k, self.config.min_tokens)
        found: list[Found] = []
        for (at, record), passages in zip(with_text, runs, strict=True):
            assert record.text is not None
            if passages:
                distance = (query.simhash ^ int(data.simhash[at])).bit_count()
                length = len(record.text)
                found.append(
                    Found(
                        data.ids[at],
                        passages,
                        len(query.text),
                        length,
                        distance,
                        record.seq,
                        record.host,
                    )
                )
        return found


def _may_pass(
    counts: dict[int, int],
    held_keys: dict[int, int],
    boilerplate: int,
    query_keys: int,
    bar: float,
    near: set[int],
) -> dict[int, int]:
    """The candidates (row -> shared fingerprints) that may cover ``bar`` or are
    near-duplicates; one whose count is not known (0: an entry of before) may always
    pass (``may_cover`` of no fingerprints)."""
    rows = list(counts)
    shared = np.array([counts[row] for row in rows], dtype=np.int64)
    stored = np.array([held_keys[row] for row in rows], dtype=np.int64)
    keep = may_cover(shared, boilerplate, query_keys, stored, bar)
    return {
        row: counts[row]
        for row, passes in zip(rows, keep.tolist(), strict=True)
        if passes or row in near
    }
