"""The ``NEARDUP_*`` settings of a Scrapy project, read once into a typed object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from scrapy.settings import BaseSettings

from neardup_client._base import DEFAULT_TIMEOUT, DEFAULT_URL

Drop = Literal["duplicates", "none"]

# Documents a batch holds at most. One batch is in flight at a time and the next one takes
# everything that arrived meanwhile (group commit), so under load a batch grows to this;
# alone, a page goes at once. bench/scrapy_crawl.py measures it.
DEFAULT_BATCH_SIZE = 100


@dataclass(frozen=True, slots=True)
class NeardupSettings:
    """What the pipeline and the middleware read from the crawler's settings:

    ``NEARDUP_URL``, ``NEARDUP_API_KEY``, ``NEARDUP_COLLECTION`` (created with
    ``NEARDUP_COLLECTION_SETTINGS`` when it does not exist); ``NEARDUP_BATCH_SIZE``,
    ``NEARDUP_TIMEOUT`` (seconds a request), ``NEARDUP_RETRIES``, ``NEARDUP_BACKOFF`` and
    ``NEARDUP_MAX_BACKOFF`` (503, 429, timeouts and connection errors, as the client's
    Retry); ``NEARDUP_DROP`` ("duplicates": the pipeline drops an item that is a
    near-duplicate of an earlier one; "none": it annotates it only);
    ``NEARDUP_FOLLOW_DUPLICATES`` (the middleware follows a near-duplicate page's links);
    the item's fields: ``NEARDUP_ID_FIELD`` (default: none, the URL is the id),
    ``NEARDUP_URL_FIELD`` ("url"), ``NEARDUP_HTML_FIELD`` ("html": bytes as fetched, or a
    decoded str), ``NEARDUP_CHARSET_FIELD`` ("charset", of bytes), ``NEARDUP_TEXT_FIELD``
    ("text": plain text, where an item has no HTML)."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    collection: str = "default"
    collection_settings: Mapping[str, Any] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    timeout: float = DEFAULT_TIMEOUT
    retries: int = 5
    backoff: float = 0.25
    max_backoff: float = 8.0
    drop: Drop = "duplicates"
    follow_duplicates: bool = False
    id_field: str | None = None
    url_field: str = "url"
    html_field: str = "html"
    charset_field: str = "charset"
    text_field: str = "text"

    def __post_init__(self) -> None:
        if self.drop not in ("duplicates", "none"):
            raise ValueError(f'NEARDUP_DROP is {self.drop!r}: set "duplicates" or "none"')
        if self.batch_size < 1:
            raise ValueError(f"NEARDUP_BATCH_SIZE is {self.batch_size}: set 1 or more")
        if self.retries < 0 or self.timeout <= 0:
            raise ValueError("NEARDUP_RETRIES must be 0 or more and NEARDUP_TIMEOUT above 0")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> NeardupSettings:
        defaults = cls()
        collection_settings = settings.getdict("NEARDUP_COLLECTION_SETTINGS") or None
        return cls(
            url=settings.get("NEARDUP_URL") or defaults.url,
            api_key=settings.get("NEARDUP_API_KEY") or None,
            collection=settings.get("NEARDUP_COLLECTION") or defaults.collection,
            collection_settings=collection_settings,
            batch_size=settings.getint("NEARDUP_BATCH_SIZE", defaults.batch_size),
            timeout=settings.getfloat("NEARDUP_TIMEOUT", defaults.timeout),
            retries=settings.getint("NEARDUP_RETRIES", defaults.retries),
            backoff=settings.getfloat("NEARDUP_BACKOFF", defaults.backoff),
            max_backoff=settings.getfloat("NEARDUP_MAX_BACKOFF", defaults.max_backoff),
            drop=settings.get("NEARDUP_DROP", defaults.drop),
            follow_duplicates=settings.getbool("NEARDUP_FOLLOW_DUPLICATES", False),
            id_field=settings.get("NEARDUP_ID_FIELD") or None,
            url_field=settings.get("NEARDUP_URL_FIELD") or defaults.url_field,
            html_field=settings.get("NEARDUP_HTML_FIELD") or defaults.html_field,
            charset_field=settings.get("NEARDUP_CHARSET_FIELD") or defaults.charset_field,
            text_field=settings.get("NEARDUP_TEXT_FIELD") or defaults.text_field,
        )
