"""A Redis read's shared passages (the search, similar, an insert's stored passages): the
visibility the near-duplicate matching applies (the retention's mark, since / until, the
match window) over RedisPassages' find."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.backends.redis.resolved import Resolved
from app.backends.redis.retention import NO_RETENTION, Mark
from app.backends.redis.store.steps import Steps
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.core.types import Rows
from app.service.passages import (
    Found,
    PassageQuery,
)
from app.service.types import Query


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
