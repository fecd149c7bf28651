"""The documents of one crawl to the service: batched, sent off the crawl's event loop,
each one answered once, counted in the crawler's stats.

One Checker serves a crawler's pipeline and middleware (``Checker.of(crawler)``), so that a
page the middleware checked is not sent again when its item reaches the pipeline.

**How it sends.** The synchronous client runs in one worker thread of its own: its
requests, its JSON and its retries (waits of up to ``NEARDUP_MAX_BACKOFF`` seconds while
the service restarts) never run on the event loop, under Scrapy's asyncio reactor, its
default reactor or no reactor at all, with one code path for all three. Answers come
back to the event loop (``call_soon_threadsafe`` or ``reactor.callFromThread``) and fire
the Deferreds the pipeline and the middleware await. One batch is in flight at a time and
the next one takes every document that arrived meanwhile, up to ``NEARDUP_BATCH_SIZE``
(group commit): a page alone goes at once, under load the batches grow, and the service
sees the pages in the order the crawl checked them, so the first of a story crawled is
its original. Documents waiting hold their responses in Scrapy's scraper, whose limit on
the bytes it holds (SCRAPER_SLOT_MAX_ACTIVE_SIZE) slows the downloads while the service
is slower than the crawl: nothing queues without bound.

**Fewer, larger requests.** Each request costs the crawler's process about as much CPU as
a few documents' encoding, and the GIL it holds meanwhile is the crawl's. So while the
crawl is downloading, items wait for ``FILL`` documents (or ``LINGER`` seconds) before
they go; a page the middleware checks, whose links wait for its answer, goes at once and
takes the items before it; and when nothing is downloading (the crawl's end), everything
goes at once.

**Nothing lost.** A document the service cannot answer (out of reach after the retries,
a batch refused whole) or refuses (413, 422, 409: ``DocumentError``) gets an Answer with
an ``error`` code: its item is kept, counted in ``neardup/error`` (and
``neardup/error/<code>``) and logged with its URL.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from scrapy import signals
from scrapy.crawler import Crawler
from twisted.internet.defer import Deferred, succeed

from neardup_client._base import Retry, RetryEvent
from neardup_client._errors import APIError, NotFound, TransportError
from neardup_client._models import DocumentError, InsertResult, NewDocument, NewPage
from neardup_client._sync import Client
from neardup_client.scrapy._settings import NeardupSettings

logger = logging.getLogger(__name__)

Outcome = Literal["new", "duplicate", "contained", "error"]
Document = NewPage | NewDocument
CallSoon = Callable[..., object]

# Answers kept by id, so that the item of a page the middleware checked gets its answer
# instead of sending it again. The item follows its page at once (Scrapy holds at most
# SCRAPER_SLOT_MAX_ACTIVE_SIZE, 5 MB, of responses between the two): 10,000 answers,
# some 3 MB, cover any backlog and repeated ids.
ANSWERS_KEPT = 10_000
# The error code of a document no answer came for: the service out of reach.
UNREACHABLE = "unreachable"
# Items a batch waits for while the crawl downloads (bench/scrapy_crawl.py: at 30 a
# request's fixed cost is a small share of its documents' own), and how long the first of
# them waits at most: an item's answer only decides its output, so a wait costs no
# download.
FILL = 30
LINGER = 0.1


class Stats(Protocol):
    """What the Checker uses of Scrapy's stats collector."""

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """What the service said of a document (``result``), or why it could not say
    (``error``, a code: the service's own, ``unreachable``, ``no_content``...)."""

    id: str
    url: str | None
    result: InsertResult | None = None
    error: str | None = None
    message: str | None = None

    @property
    def already_stored(self) -> bool:
        """The id was stored with this content before (a resumed or repeated crawl): the
        service answers a retry, a duplicate of itself."""
        result = self.result
        return result is not None and not result.inserted and result.duplicate_of == result.id

    @property
    def duplicate_of(self) -> str | None:
        """The earlier document this one nearly repeats. A document stored before is
        told by its cluster: the first of a story names it."""
        result = self.result
        if result is None:
            return None
        if self.already_stored:
            return None if result.cluster_id == result.id else result.cluster_id
        return result.duplicate_of

    @property
    def cluster_id(self) -> str | None:
        return None if self.result is None else self.result.cluster_id

    @property
    def contains(self) -> list[str]:
        """Earlier documents mostly inside this one (collections with passages on)."""
        return [match.id for match in (self.result and self.result.contains) or ()]

    @property
    def contained_in(self) -> list[str]:
        """Earlier documents this one is mostly inside."""
        return [match.id for match in (self.result and self.result.contained_in) or ()]

    @property
    def outcome(self) -> Outcome:
        if self.result is None:
            return "error"
        if self.duplicate_of is not None:
            return "duplicate"
        return "contained" if self.contained_in else "new"


def answers_of(documents: Sequence[tuple[str, str | None]], results: Sequence[Any]) -> list[Answer]:
    """An Answer per (id, url) from the client's batch results, in order."""
    answers = []
    for (document_id, url), result in zip(documents, results, strict=True):
        if isinstance(result, DocumentError):
            answers.append(Answer(document_id, url, error=result.code, message=result.message))
        else:
            answers.append(Answer(document_id, url, result=result))
    return answers


def _event_loop_caller() -> CallSoon:
    """How a worker thread hands a call to the crawl's event loop: the asyncio loop's
    ``call_soon_threadsafe`` where one runs (the asyncio reactor, or no reactor), else
    the Twisted reactor's ``callFromThread``. Called on the event loop."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        from twisted.internet import reactor

        call: CallSoon = reactor.callFromThread
        return call


class Checker:
    """Documents to a collection in batches, each answered once (``check``)."""

    _of_crawler: ClassVar[weakref.WeakKeyDictionary[Crawler, Checker]] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        settings: NeardupSettings,
        stats: Stats | None = None,
        client: Client | None = None,
        call_soon: CallSoon | None = None,
        downloading: Callable[[], bool] | None = None,
    ) -> None:
        """``client`` and ``call_soon`` (a thread-safe call on the event loop) are found
        or made here; tests pass their own. ``downloading``: whether the crawl has
        downloads in flight (where None, every document goes at once)."""
        self.settings = settings
        self.stats = stats
        self._call_soon = call_soon
        self._downloading = downloading
        self.client = client or Client(
            settings.url,
            api_key=settings.api_key,
            timeout=settings.timeout,
            retry=Retry(
                retries=settings.retries,
                backoff=settings.backoff,
                max_backoff=settings.max_backoff,
            ),
            on_retry=self._retried,
        )
        if self.client.on_retry is None:
            self.client.on_retry = self._retried
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Document, str, str | None]] = []
        self._waiting: dict[str, list[Deferred[Answer]]] = {}
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self._in_flight = False
        self._closed = False
        self._urgent = False  # a document that must not wait is pending
        self._timer: Any = None  # the reactor's IDelayedCall

    @classmethod
    def of(cls, crawler: Crawler) -> Checker:
        """The crawler's Checker, made on first use and closed with its spider."""
        checker = cls._of_crawler.get(crawler)
        if checker is None:
            settings = NeardupSettings.from_settings(crawler.settings)

            def downloading() -> bool:
                engine = crawler.engine
                return engine is not None and bool(engine.downloader.active)

            checker = cls(settings, crawler.stats, downloading=downloading)
            crawler.signals.connect(checker.close, signal=signals.spider_closed)
            cls._of_crawler[crawler] = checker
        return checker

    # ------------------------------------------------------------ on the event loop

    def known(self, document_id: str) -> Deferred[Answer] | None:
        """The answer for an id already checked or on its way, else None."""
        answer = self._answers.get(document_id)
        if answer is not None:
            return succeed(answer)
        waiting = self._waiting.get(document_id)
        if waiting is None:
            return None
        deferred: Deferred[Answer] = Deferred()
        waiting.append(deferred)
        return deferred

    def check(
        self, document: Document, document_id: str, url: str | None, urgent: bool = False
    ) -> Deferred[Answer]:
        """The service's answer for a document (sent with ``document_id``): at once for
        an id checked before, else once its batch is answered. Never fails: a document
        that cannot be checked is answered with an error. ``urgent``: something the crawl
        needs waits for the answer (a page's links), so it does not wait for a fuller
        batch."""
        known = self.known(document_id)
        if known is not None:
            return known
        deferred: Deferred[Answer] = Deferred()
        if self._closed:
            deferred.callback(self.unchecked(document_id, url, "closed", "the spider closed"))
            return deferred
        self._waiting[document_id] = [deferred]
        self._pending.append((document, document_id, url))
        self._urgent = self._urgent or urgent
        self._send()
        return deferred

    def unchecked(self, document_id: str, url: str | None, code: str, message: str) -> Answer:
        """An Answer for a document that is not sent (nothing to send), counted."""
        answer = Answer(document_id, url, error=code, message=message)
        self._count(answer)
        return answer

    def close(self) -> None:
        """Stop taking documents; the worker ends after the batch in flight."""
        self._closed = True
        self._send()  # what waited for a fuller batch goes now
        if self._executor is not None:
            self._executor.submit(self.client.close)
            self._executor.shutdown(wait=False)
        else:
            self.client.close()

    def _send(self, lingered: bool = False) -> None:
        if lingered:
            self._timer = None
        if self._in_flight or not self._pending:
            return
        if self._should_wait(lingered):
            if self._timer is None:
                from twisted.internet import reactor

                clock: Any = reactor  # zope interfaces do not type their methods
                self._timer = clock.callLater(LINGER, self._send, True)
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._call_soon is None:
            self._call_soon = _event_loop_caller()
        call_soon = self._call_soon
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="neardup")
            self._executor.submit(self._ensure_collection)
        size = self.settings.batch_size
        batch, self._pending = self._pending[:size], self._pending[size:]
        # A batch cut at its size may leave the urgent document behind: keep the flag.
        self._urgent = self._urgent and bool(self._pending)
        self._in_flight = True
        future = self._executor.submit(self._insert, batch)
        future.add_done_callback(lambda done: call_soon(self._answered, batch, done))

    def _should_wait(self, lingered: bool) -> bool:
        """Whether the pending items wait for more: only while the crawl downloads, none
        of them urgent, fewer than FILL, and not yet LINGER seconds."""
        return (
            not lingered
            and not self._urgent
            and not self._closed
            and self._downloading is not None
            and len(self._pending) < min(FILL, self.settings.batch_size)
            and self._downloading()
        )

    def _answered(
        self, batch: list[tuple[Document, str, str | None]], done: Future[list[Answer]]
    ) -> None:
        self._in_flight = False
        try:
            answers = done.result()
        except Exception as error:  # a bug here must not lose the items
            logger.exception("neardup: a batch of %d documents failed", len(batch))
            answers = [
                Answer(document_id, url, error="unexpected", message=str(error))
                for _, document_id, url in batch
            ]
        for answer in answers:
            self._count(answer)
            self._answers[answer.id] = answer
            if len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
            for deferred in self._waiting.pop(answer.id, ()):
                deferred.callback(answer)
        self._send()

    def _count(self, answer: Answer) -> None:
        if self.stats is None:
            return
        self.stats.inc_value(f"neardup/{answer.outcome}")
        if answer.error is not None:
            self.stats.inc_value(f"neardup/error/{answer.error}")
        if answer.already_stored:
            self.stats.inc_value("neardup/already_stored")

    # ------------------------------------------------------------ in the worker thread

    def _retried(self, event: RetryEvent) -> None:
        if self.stats is not None and self._call_soon is not None:
            self._call_soon(self.stats.inc_value, "neardup/retries")

    def _ensure_collection(self) -> None:
        """Create the collection where it does not exist (a service out of reach is left
        to the batches, which retry and count)."""
        name = self.settings.collection
        try:
            self.client.get_collection(name)
        except NotFound:
            self.client.create_collection(name, self.settings.collection_settings)
            logger.info("neardup: created the collection %r", name)
        except (APIError, TransportError) as error:
            logger.warning("neardup: collection %r not checked: %s", name, error)

    def _insert(self, batch: list[tuple[Document, str, str | None]]) -> list[Answer]:
        """The batch's answers; never raises for the service's failures."""
        keys = [(document_id, url) for _, document_id, url in batch]
        try:
            results = self.client.insert_batch(
                self.settings.collection,
                [document for document, _, _ in batch],
                batch_size=self.settings.batch_size,
            ).results
        except TransportError as error:
            code, message = UNREACHABLE, str(error)
        except APIError as error:
            code, message = error.code, str(error)
        else:
            answers = answers_of(keys, results)
            for answer in answers:
                if answer.error is not None:
                    logger.warning(
                        "neardup refused %s (kept): %s: %s",
                        answer.url or answer.id,
                        answer.error,
                        answer.message,
                    )
            return answers
        logger.error(
            "neardup: %d documents not checked (kept), from %s: %s",
            len(batch),
            keys[0][1] or keys[0][0],
            message,
        )
        return [Answer(document_id, url, error=code, message=message) for document_id, url in keys]
