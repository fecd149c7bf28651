"""NeardupPipeline: each item to the service, annotated with its answer; near-duplicates
dropped where ``NEARDUP_DROP = "duplicates"`` (the default)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, succeed

from neardup_client._models import NewDocument, NewPage, TimeLike
from neardup_client.scrapy._checker import Answer, Checker, Document
from neardup_client.scrapy._settings import NeardupSettings

logger = logging.getLogger(__name__)

# The fields an item gets: the answer's, as the service names them.
ANNOTATIONS = ("duplicate_of", "cluster_id", "contains", "contained_in")


def document_of(
    adapter: ItemAdapter, settings: NeardupSettings, fetched: TimeLike
) -> tuple[Document, str, str | None] | str:
    """(document, id, url) for an item, or why it has none: the page in its HTML field
    (bytes as fetched, sent base64 with the item's charset; a str as HTML), else the text
    of its text field; its id from the id field, else its URL. ``fetched``: its time."""
    url = adapter.get(settings.url_field)
    url = str(url) if url else None
    document_id = adapter.get(settings.id_field) if settings.id_field else None
    document_id = str(document_id) if document_id else url
    if document_id is None:
        return f"no {settings.url_field!r} field (nor {settings.id_field or 'id'!r})"
    metadata = None if url is None else {"url": url}
    html = adapter.get(settings.html_field)
    if isinstance(html, bytes) and html:
        charset = adapter.get(settings.charset_field)
        page = NewPage(html, url, str(charset) if charset else None, document_id, None, fetched)
        return page, document_id, url
    if isinstance(html, str) and html.strip():
        return NewDocument(html, document_id, metadata, True, fetched), document_id, url
    text = adapter.get(settings.text_field)
    if isinstance(text, str) and text.strip():
        return NewDocument(text, document_id, metadata, False, fetched), document_id, url
    return f"no {settings.html_field!r} nor {settings.text_field!r} field"


def annotate(adapter: ItemAdapter, answer: Answer) -> list[str]:
    """Set the answer's fields on the item; the ones its class does not declare."""
    values = {
        "duplicate_of": answer.duplicate_of,
        "cluster_id": answer.cluster_id,
        "contains": answer.contains,
        "contained_in": answer.contained_in,
    }
    missing = []
    for field, value in values.items():
        try:
            adapter[field] = value
        except KeyError:
            missing.append(field)
    return missing


class NeardupPipeline:
    """An item pipeline::

        ITEM_PIPELINES = {"neardup_client.scrapy.NeardupPipeline": 300}

    Each item goes to ``NEARDUP_COLLECTION`` as a page (its ``html`` field) or a text (its
    ``text`` field), with its URL and the time it reached the pipeline, in batches (see
    Checker); the item waits for its answer without blocking the crawl. It gets the
    fields ``duplicate_of``, ``cluster_id``, ``contains`` and ``contained_in`` (dicts
    take any field; an Item class must declare them). A near-duplicate of an earlier
    document is dropped (``NEARDUP_DROP = "duplicates"``) or kept ("none"). An item that
    could not be checked is kept and counted in ``neardup/error``."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.settings = checker.settings
        self._warned_fields = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NeardupPipeline:
        return cls(Checker.of(crawler))

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        adapter = ItemAdapter(item)
        answer = await maybe_deferred_to_future(self._answer(adapter))
        missing = annotate(adapter, answer)
        if missing and not self._warned_fields:
            self._warned_fields = True
            logger.warning(
                "neardup: %s does not declare %s: the answers are not set on its items",
                type(item).__name__,
                ", ".join(missing),
            )
        if answer.outcome == "duplicate" and self.settings.drop == "duplicates":
            raise DropItem(f"near-duplicate of {answer.duplicate_of}")
        return item

    def _answer(self, adapter: ItemAdapter) -> Deferred[Answer]:
        found = document_of(adapter, self.settings, datetime.now(UTC))
        if isinstance(found, str):
            url = adapter.get(self.settings.url_field)
            logger.warning("neardup: item of %s not checked (kept): %s", url, found)
            return succeed(self.checker.unchecked(str(url), url, "no_content", found))
        document, document_id, url = found
        return self.checker.check(document, document_id, url)
