"""A Redis read's shared passages (the search, similar, an insert's relations): the
visibility the near-duplicate matching applies (the retention's mark, since / until, the
match window) over RedisPassages' find."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.backends.redis.passages import CANDIDATES
from app.backends.redis.resolved import Resolved
from app.backends.redis.retention import NO_RETENTION, Mark
from app.backends.redis.store.steps import Steps, run
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.core.types import Rows
from app.service.passages import (
    CONTAINED,
    BatchPassages,
    Found,
    PassageQuery,
    annotated,
    relations,
)
from app.service.types import Match, PassageMatch, Query


def passage_steps(
    resolved: Resolved,
    store: RedisStore,
    texts: Sequence[PassageQuery],
    query: Query,
    mark: Mark | None,
    cutoff: int | None,
    stamps: Sequence[int] | None = None,
    *,
    bar: float | None = None,
    near: Sequence[Rows] | None = None,
) -> Steps[list[list[Found]] | None]:
    """For each text, the visible stored documents sharing passages with it (None:
    passages are off): within the retention (``mark``; None: read beside the first
    lookups), the query's since / until and, with ``stamps`` (new documents' times), the
    match window of each; with a ``bar``, only those that may cover it and each text's
    rows ``near`` (RedisPassages.find_steps)."""
    passages = resolved.passages
    if passages is None:
        return None
    reading = mark is None and resolved.retains
    also: list[Command] = [("HGET", resolved.counters_key(), "mark")] if reading else []
    window = resolved.config.match_window_us
    since, until = query.since, query.until

    def visible_by(replies: list[Any]) -> Callable[[int, int, int], bool]:
        held = Mark.of(replies[0], cutoff) if reading else mark or NO_RETENTION

        def visible(number: int, timestamp: int, seq: int) -> bool:
            if not held.visible(timestamp, seq):
                return False
            if (since is not None and timestamp < since) or (
                until is not None and timestamp > until
            ):
                return False
            if stamps is None or window is None:
                return True
            return abs(timestamp - stamps[number]) <= window

        return visible

    found: list[list[Found]] = yield from passages.find_steps(
        store.reads, texts, visible_by, also, bar, near
    )
    return found


def insert_passages(
    resolved: Resolved,
    store: RedisStore,
    texts: Sequence[str],
    simhashes: Sequence[int],
    stamps: Sequence[int],
    excludes: Sequence[int],
    query: Query,
    mark: Mark,
    near: Sequence[Rows],
    hosts: Sequence[int] | None = None,
) -> tuple[list[list[Found]], BatchPassages] | None:
    """What an insert batch's documents share with the stored ones (two round trips for
    the batch): only what may be a containment (CONTAINED) and each document's rows
    ``near`` (its near-duplicates, whose matches the passages annotate); and the batch's
    own documents for the relations between them. None when passages are off."""
    if resolved.passages is None:
        return None
    config = resolved.config.passages
    asked = PassageQuery.batch(texts, simhashes, excludes, config, hosts)
    steps = passage_steps(
        resolved, store, asked, query, mark, None, stamps, bar=CONTAINED, near=near
    )
    found = run(steps, store.wire) or [[] for _ in asked]
    window = resolved.config.match_window_us
    batch = BatchPassages(config, CANDIDATES, asked, query, window)
    return found, batch


def insert_relations(
    shared: tuple[list[list[Found]], BatchPassages] | None,
    number: int,
    document_id: str,
    simhash: int,
    stamp: int,
    stored: bool,
    matches: list[Match],
) -> tuple[list[Match], list[PassageMatch] | None, list[PassageMatch] | None]:
    """The ``number``-th accepted document of a batch: its matches with their passages,
    its contains and contained_in (None, None with passages off); a document ``stored``
    is one the later ones of the batch relate to."""
    if shared is None:
        return matches, None, None
    from_store, batch = shared
    found = batch.find(number, simhash, stamp, {m.id for m in matches}, from_store[number])
    if stored:
        batch.stored(number, document_id, simhash, stamp)
    contains, contained_in = relations(found, matches)
    return (annotated(matches, found) if found else matches), contains, contained_in
