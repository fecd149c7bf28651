"""A Redis collection's reads: a document by id, the matches of a text or of a stored
document. Each is written once as steps (app/backends/redis/store/steps.py), driven from a thread
(``get``, ``search``, ``similar``: the sync callers) or on the event loop (the
``*_async`` forms the API awaits: no thread hop a request).

A read on the event loop uses the settings this process read last and reads them again
in its first round trip: when they changed (the collection dropped, or dropped and
created again), it answers for what is stored now. A get is one round trip, a search
two (a third for short texts found by the n-gram index alone), similar three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from app.backends.redis.context import CollectionContext
from app.backends.redis.failures import storage_errors
from app.backends.redis.passage_reads import passage_steps
from app.backends.redis.records import Held
from app.backends.redis.resolved import Backend, Resolved
from app.backends.redis.retention import NO_RETENTION, Mark
from app.backends.redis.store.rows import RowData
from app.backends.redis.store.steps import Steps, run, run_async
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.core.fingerprint import Fingerprints
from app.core.hosts import NO_HOST
from app.core.methods import METHODS_OF_BITS
from app.core.rule import Pairs
from app.core.types import Rows
from app.errors import InvalidDocument, InvalidParameter, UnknownCollection, UnknownDocument
from app.service.matching import check_query
from app.service.passages import PassageQuery, with_passages
from app.service.times import iso_time_us
from app.service.types import Match, Query, StoredDocument, iso_time

T = TypeVar("T")


class Reads:
    """The reads of one RedisCollection, over its CollectionContext (no data of its own)."""

    def __init__(self, collection: CollectionContext, backend: Backend) -> None:
        self.collection = collection
        self.name = collection.name
        self.backend = backend

    def get(self, document_id: str) -> StoredDocument:
        return self._blocking(partial(self._get_steps, document_id, False))

    async def get_async(self, document_id: str, kept_text: bool = False) -> StoredDocument:
        """``get`` from the event loop (as ``similar_async``); with ``kept_text``, the text
        wherever the collection keeps it (passages keep it without giving it out)."""
        return await self._on_loop(partial(self._get_steps, document_id, kept_text))

    def _get_steps(
        self,
        document_id: str,
        kept_text: bool,
        resolved: Resolved,
        store: RedisStore,
        recheck: bool,
    ) -> Steps[StoredDocument]:
        _, _, rows, data, mark = yield from self._lookup_steps(
            resolved, store, document_id, recheck
        )
        held, at = self.held_of(rows, data, document_id, mark)
        record = held.record(at)
        return StoredDocument(
            id=document_id,
            metadata=record.metadata,
            created_at=iso_time(record.created),
            cluster_id=record.cluster_name,
            simhash=f"{int(held.data.simhash[at]):016x}",
            text=record.text if resolved.config.store_text or kept_text else None,
            timestamp=iso_time_us(int(held.data.timestamps[at])),
        )

    def _blocking(self, make: Callable[[Resolved, RedisStore, bool], Steps[T]]) -> T:
        """The steps ``make`` (resolved, store, recheck: False) gives, driven by the
        blocking wire on the settings read first (``_on_loop``'s counterpart for the
        callers in a thread)."""
        with storage_errors(self.backend.failures):
            resolved, store = self.collection.opened()
            return run(make(resolved, store, False), store.wire)

    async def _on_loop(self, make: Callable[[Resolved, RedisStore, bool], Steps[T]]) -> T:
        """The steps ``make`` (resolved, store, recheck) gives, driven on the event loop:
        on the settings last read, read again in their first round trip (``recheck``),
        or, when this process has not read them yet, on settings read in a thread."""
        with storage_errors(self.backend.failures):
            known = self.backend.cached(self.name)
            if known is None:
                resolved, store = await asyncio.to_thread(self.collection.opened)
            else:
                resolved = known[1]
                store = self.backend.store(resolved)
            return await run_async(make(resolved, store, known is not None), store.wire)

    def _lookup_steps(
        self, resolved: Resolved, store: RedisStore, document_id: str, recheck: bool
    ) -> Steps[tuple[Resolved, RedisStore, Rows, RowData, Mark]]:
        """One round trip: the document's lookup and the retention mark, with ``recheck``
        the settings read again beside them (UnknownCollection if the collection is
        gone; looked up again on the settings read if they changed)."""
        also: list[Command] = [self.backend.settings_command(self.name)] if recheck else []
        if resolved.retains:
            also.append(("HGET", resolved.counters_key(), "mark"))
        rows, data, replies = yield from store.lookup_steps([document_id], also)
        if recheck:
            if replies[0] is None:
                raise UnknownCollection(self.name)
            now = self.backend.parsed(self.name, replies[0])
            if now is not resolved:
                found = yield from self._lookup_steps(
                    now, self.backend.store(now), document_id, False
                )
                return found
        mark = (
            Mark.of(replies[-1], self.collection.cutoff(resolved))
            if resolved.retains
            else NO_RETENTION
        )
        return resolved, store, rows, data, mark

    def held_of(self, rows: Rows, data: RowData, document_id: str, mark: Mark) -> tuple[Held, int]:
        """The document looked up, if it is visible (not expired)."""
        if rows[0] < 0:
            raise UnknownDocument(self.name, document_id)
        held, at = Held(data), int(data.index(rows)[0])
        if not mark.visible(int(data.timestamps[at]), held.seq(at)):
            raise UnknownDocument(self.name, document_id)  # expired
        return held, at

    def search(self, text: str, query: Query) -> list[Match]:
        """Documents matching a text, best first; nothing is stored. Two round trips: the
        settings this process last read are used, and read again in the search's first
        round trip; if they changed meanwhile (the collection was dropped, or dropped and
        created again), the search is made again on the settings read."""
        with storage_errors(self.backend.failures):
            known = self.backend.cached(self.name)
            if known is not None:
                store = self.backend.store(known[1])
                matches = run(self._search_known_steps(known, store, text, query), store.wire)
                if matches is not None:
                    return matches
        return self._search_fresh(text, query)

    async def search_async(self, text: str, query: Query) -> list[Match]:
        """``search`` from the event loop: its round trips awaited there (no thread), but
        for the first search of a collection in this process, or one whose settings
        changed (then in a worker thread)."""
        with storage_errors(self.backend.failures):
            known = self.backend.cached(self.name)
            if known is not None:
                store = self.backend.store(known[1])
                steps = self._search_known_steps(known, store, text, query)
                matches = await run_async(steps, store.wire)
                if matches is not None:
                    return matches
        return await asyncio.to_thread(self._search_fresh, text, query)

    def _search_known_steps(
        self,
        known: tuple[bytes, Resolved],
        store: RedisStore,
        text: str,
        query: Query,
    ) -> Steps[list[Match] | None]:
        """The search on the settings last read, which are read again on the way; None if
        they changed meanwhile, or the query is invalid on them (judged afresh)."""
        raw, resolved = known
        try:
            self._validate(resolved, query)
            fingerprints = self._fingerprint(resolved, [text])
            scored, held, (now,) = yield from self.collection.match_store_steps(
                resolved,
                store,
                fingerprints,
                query,
                also=[self.backend.settings_command(self.name)],
                read_mark=True,
            )
        except InvalidParameter:
            return None
        if now != raw:
            return None
        matches = self._matches(scored, held, (0, len(scored.rows)), query.limit)
        return (
            yield from self._with_passages(
                resolved, store, text, fingerprints, query, matches, scored.rows
            )
        )

    def _with_passages(
        self,
        resolved: Resolved,
        store: RedisStore,
        text: str,
        fingerprints: Fingerprints,
        query: Query,
        matches: list[Match],
        near: Rows,
        mark: Mark | None = None,
        exclude: int = -1,
        host: int = NO_HOST,
    ) -> Steps[list[Match]]:
        """The matches (rows ``near``) with the passages the text shares
        (app/service/passages.py), when the collection has passages on: two round trips
        more (three to read the mark). Only candidates that may reach the query's
        ``min_coverage`` and the near-duplicates are read and verified."""
        if resolved.passages is None:
            return matches
        asked = PassageQuery.of(
            text,
            int(fingerprints.simhash[0]),
            resolved.config.passages,
            exclude,
            host if exclude >= 0 else query.host,  # a stored document's, or the query's
        )
        cutoff = self.collection.cutoff(resolved)
        found = yield from passage_steps(
            resolved, store, [asked], query, mark, cutoff, bar=query.min_coverage, near=[near]
        )
        return matches if found is None else with_passages(matches, found[0], query)

    def _search_fresh(self, text: str, query: Query) -> list[Match]:
        """The search on the settings read first (a round trip more)."""
        with storage_errors(self.backend.failures):
            resolved, store = self.collection.opened()
            self._validate(resolved, query)
            fingerprints = self._fingerprint(resolved, [text])
            matching = self.collection.match_store_steps(
                resolved, store, fingerprints, query, read_mark=True
            )
            scored, held, _ = run(matching, store.wire)
            matches = self._matches(scored, held, (0, len(scored.rows)), query.limit)
            steps = self._with_passages(
                resolved, store, text, fingerprints, query, matches, scored.rows
            )
            return run(steps, store.wire)

    def similar(self, document_id: str, query: Query) -> list[Match]:
        """Documents matching a stored one, itself excluded."""
        return self._blocking(partial(self._similar_steps, document_id, query))

    async def similar_async(self, document_id: str, query: Query) -> list[Match]:
        """``similar`` from the event loop: three round trips (the document's lookup with
        the settings read again, then the search's two)."""
        return await self._on_loop(partial(self._similar_steps, document_id, query))

    def _similar_steps(
        self, document_id: str, query: Query, resolved: Resolved, store: RedisStore, recheck: bool
    ) -> Steps[list[Match]]:
        resolved, store, rows, data, mark = yield from self._lookup_steps(
            resolved, store, document_id, recheck
        )
        self._validate(resolved, query)
        own, at = self.held_of(rows, data, document_id, mark)
        data = own.data
        fingerprints = Fingerprints(
            data.simhash[at : at + 1],
            data.signatures[at : at + 1, : resolved.num_perm],
            data.exact[at : at + 1],
            [own.record(at).short] if resolved.ngram is not None else None,
            [own.record(at).text] if resolved.config.verifies_exactly else None,
        )
        exclude = data.rows[at : at + 1]
        scored, held, _ = yield from self.collection.match_store_steps(
            resolved, store, fingerprints, query, exclude, mark=mark
        )
        matches = self._matches(scored, held, (0, len(scored.rows)), query.limit)
        text = own.record(at).text
        if text is None:
            return matches
        return (
            yield from self._with_passages(
                resolved,
                store,
                text,
                fingerprints,
                query,
                matches,
                scored.rows,
                mark,
                int(exclude[0]),
                own.record(at).host,
            )
        )

    def _validate(self, resolved: Resolved, query: Query) -> None:
        check_query(query, resolved.config.simhash.max_distance)

    def _fingerprint(self, resolved: Resolved, texts: Sequence[str]) -> Fingerprints:
        fingerprints, kept = self.collection.fingerprint_nonempty_of(resolved, texts)
        if len(kept) < len(texts):
            raise InvalidDocument("text is empty after normalisation")
        return fingerprints

    def _matches(self, scored: Pairs, held: Held, span: tuple[int, int], limit: int) -> list[Match]:
        start, end = span[0], min(span[1], span[0] + limit)
        if start >= end:
            return []
        at = held.data.index(scored.rows[start:end])
        return [
            Match(held.data.ids[i], similarity, distance, METHODS_OF_BITS[bits])
            for i, similarity, distance, bits in zip(
                at.tolist(),
                scored.similarity[start:end].tolist(),
                scored.distances[start:end].tolist(),
                scored.methods[start:end].tolist(),
                strict=True,
            )
        ]
