"""NeardupSpiderMiddleware: each HTML page checked before its links are followed; the
links of a near-duplicate of a page crawled before it (a mirror, a print version, a URL
with tracking parameters) are not followed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from w3lib.encoding import http_content_type_encoding

from neardup_client._models import NewPage
from neardup_client.scrapy._checker import Answer, Checker

logger = logging.getLogger(__name__)

# Request.meta key: False leaves a page unchecked (an index page whose links must be
# followed whatever it repeats).
META_KEY = "neardup"


def page_of(response: Response) -> NewPage:
    """The page as fetched: its bytes, the charset of its Content-Type, its URL as id."""
    content_type = response.headers.get(b"Content-Type")
    charset = http_content_type_encoding(content_type.decode("latin-1")) if content_type else None
    return NewPage(response.body, response.url, charset, timestamp=datetime.now(UTC))


class NeardupSpiderMiddleware:
    """A spider middleware::

        SPIDER_MIDDLEWARES = {"neardup_client.scrapy.NeardupSpiderMiddleware": 50}

    Each HTML response (``meta={"neardup": False}`` leaves one out) is sent to the
    collection as fetched (id: its URL) when its callback's output starts; the items of
    that output pass at once (one whose id is the page's URL is answered with the page,
    not sent again), the requests wait for the answer. A page that is a near-duplicate of
    a page stored before it has its requests dropped, counted in
    ``neardup/requests_not_followed`` and ``neardup/pages_not_followed``, unless
    ``NEARDUP_FOLLOW_DUPLICATES``. A page that could not be checked has its links
    followed: nothing is lost for want of an answer."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.settings = checker.settings

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NeardupSpiderMiddleware:
        return cls(Checker.of(crawler))

    async def process_spider_output(
        self, response: Response, result: AsyncIterable[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        answer = self._check(response)
        if answer is None:
            async for entry in result:
                yield entry
            return
        held = []
        async for entry in result:
            if isinstance(entry, Request):
                held.append(entry)
            else:
                yield entry
        if not held:
            return
        if self._follow(await maybe_deferred_to_future(answer), len(held)):
            for request in held:
                yield request

    def _check(self, response: Response) -> Deferred[Answer] | None:
        request = response.request
        if not isinstance(response, HtmlResponse) or (
            request is not None and request.meta.get(META_KEY) is False
        ):
            return None
        # Its links wait for the answer: it does not wait for a fuller batch.
        return self.checker.check(page_of(response), response.url, response.url, urgent=True)

    def _follow(self, answer: Answer, requests: int) -> bool:
        if answer.outcome != "duplicate" or self.settings.follow_duplicates:
            return True
        stats = self.checker.stats
        if stats is not None:
            stats.inc_value("neardup/pages_not_followed")
            stats.inc_value("neardup/requests_not_followed", requests)
        logger.debug(
            "neardup: %d links of %s not followed: near-duplicate of %s",
            requests,
            answer.url,
            answer.duplicate_of,
        )
        return False
