"""Single inserts that arrive together, inserted together.

A crawler sends one document per request, many requests at once. Each insert costs a
few hundred microseconds of Python bookkeeping (matching in four indexes, clusters, the
time order, the commit), of which a batch pays most once: one document alone costs ~450
us of CPU, one of a batch of 16 about a quarter of that (docs/benchmarks.md). So the
single inserts that reach the event loop in the same turn (the requests whose bodies
arrived together) are gathered and inserted as one batch, in arrival order, at the end
of that turn; each request gets its own document's result.

That changes no answer. A batch matches each document against the earlier ones of the
batch exactly as if they had been inserted one by one, and refuses a document on its own
with the error it would get alone. What a batch cannot express is kept apart: documents
with other options (on_duplicate, since, until) than the gathering batch's start
the next batch, and so does a document whose id is already in it (a retry racing its
first attempt), so that it is answered as a retry (or a conflict) of the first, as
it would be one by one. A failure of the whole batch (its commit) fails each request of
it, as the shared group commit would have anyway.

``serial``: one batch at a time, the next gathering every document that arrives while
one is in flight (a group commit). Both backends gather so. The Redis backend's insert is
~10 round trips under a per-collection lock; the embedded one's, at the defaults, verifies
passages under the write lock. Gathering per turn made batches of one or two when
requests arrived in different turns, each paying that alone: 16 connections of single
Reuters stories into the default embedded collection formed batches of 1.4 documents
(388 inserts/s); gathered while one is in flight, 7.9 (926/s; passages off 1,588 -> 1,777).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.service.types import InsertOptions, InsertResult, NewDocument, Refused

InsertMany = Callable[[list[NewDocument], InsertOptions], Awaitable[list[InsertResult | Refused]]]

# A larger batch delays its first document's answer for little gain: per document, a
# batch of 64 costs about what one of 256 does.
MAX_GATHERED = 64


@dataclass(slots=True)
class _Gathering:
    options: InsertOptions
    documents: list[NewDocument] = field(default_factory=list)
    answers: list[asyncio.Future[InsertResult | Refused]] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


class SingleInserts:
    """Gathers ``insert`` calls made in one turn of the event loop into ``insert_many``
    calls, in arrival order. ``batches`` counts those calls (tests)."""

    def __init__(self, insert_many: InsertMany, *, serial: bool = False) -> None:
        self._insert_many = insert_many
        self._open: _Gathering | None = None  # the one gathering that takes documents
        self.batches = 0
        self._serial = serial
        self._waiting: deque[_Gathering] = deque()  # serial: not started yet, in order
        self._pump: asyncio.Task[None] | None = None  # serial: inserting the waiting ones

    async def insert(self, document: NewDocument, options: InsertOptions) -> InsertResult | Refused:
        loop = asyncio.get_running_loop()
        gathering = self._open
        if (
            gathering is None
            or gathering.options != options
            or (document.id is not None and document.id in gathering.ids)
            or len(gathering.documents) >= MAX_GATHERED
        ):
            # A new one, after the one open: documents go in in the order they came.
            gathering = self._open = _Gathering(options)
            if self._serial:
                self._waiting.append(gathering)
                if self._pump is None:
                    # Its first step runs after the callbacks already due in this turn:
                    # the requests that arrived with this one join the gathering first.
                    self._pump = loop.create_task(self._insert_waiting())
            else:
                # Started after the callbacks already due in this turn: the other
                # requests that arrived with this one add their documents first.
                loop.call_soon(self._start, gathering)
        answer: asyncio.Future[InsertResult | Refused] = loop.create_future()
        gathering.documents.append(document)
        gathering.answers.append(answer)
        if document.id is not None:
            gathering.ids.add(document.id)
        return await answer

    def _start(self, gathering: _Gathering) -> None:
        if self._open is gathering:
            self._open = None
        self.batches += 1
        # A task, so that the batch's CPU work starts at once, in the order the
        # gatherings were opened, and its commit is awaited beside the next ones.
        asyncio.get_running_loop().create_task(self._insert(gathering))

    async def _insert_waiting(self) -> None:
        """serial: the waiting gatherings one after another, each closed to new documents
        when it starts (those go into the next)."""
        try:
            while self._waiting:
                gathering = self._waiting.popleft()
                if self._open is gathering:
                    self._open = None
                self.batches += 1
                await self._insert(gathering)
        finally:
            self._pump = None

    async def _insert(self, gathering: _Gathering) -> None:
        try:
            results = await self._insert_many(gathering.documents, gathering.options)
        except BaseException as error:  # every request of the batch hears of it
            for answer in gathering.answers:
                if not answer.done():
                    answer.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for answer, result in zip(gathering.answers, results, strict=True):
            if not answer.done():  # done: the request was cancelled meanwhile
                answer.set_result(result)
