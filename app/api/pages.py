"""Pages sent by clients, read into the text that is matched: sizes checked, bytes decoded,
the main content extracted (app/core/page.py), the extracted text's size checked.

A page costs milliseconds of CPU (a parse and an extraction); the async routes call
``read_off_loop`` so that the event loop keeps serving other requests meanwhile.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from app.api import limits
from app.api.schemas import PageFields
from app.config import Settings
from app.core.hosts import NO_HOST, host_key
from app.core.page import Extraction, Page, UndecodablePage, decode_page, read_page
from app.errors import InvalidBody, TooLarge, UnreadablePage
from app.service.protocols import ServiceCollection


@dataclass(frozen=True, slots=True)
class Read:
    """What is fingerprinted (``text``), the page it came from (None for a text), and the
    host that page names as its own (its canonical link or og:url; app/core/hosts.py)."""

    text: str
    page: Page | None = None
    host: int = NO_HOST


def _check_html_size(settings: Settings, size: int, what: str) -> None:
    if size > settings.max_html_bytes:
        raise TooLarge(
            f"{what}: the page has {size:,} bytes of HTML, more than the limit of "
            f"{settings.max_html_bytes:,} (NEARDUP_MAX_HTML_BYTES)"
        )


def _html_of(fields: PageFields, settings: Settings, what: str) -> str:
    if fields.html_base64 is None:
        assert fields.text is not None  # PageFields holds one of the two
        # UTF-8 has at least one byte a character: most pages are known small enough
        # without encoding them.
        if len(fields.text) * 4 > settings.max_html_bytes:
            _check_html_size(settings, len(fields.text.encode()), what)
        return fields.text
    # base64 holds 3 bytes in 4 characters: refuse before decoding what is too large.
    _check_html_size(settings, len(fields.html_base64) // 4 * 3 - 2, what)
    try:
        data = binascii.a2b_base64(fields.html_base64, strict_mode=True)
    except binascii.Error as error:
        raise InvalidBody(f"{what}: html_base64 is not base64 ({error})") from None
    _check_html_size(settings, len(data), what)
    try:
        return decode_page(data, fields.charset)
    except UndecodablePage as error:
        raise UnreadablePage(f"{what}: {error}") from None


def read(fields: PageFields, settings: Settings, extract: Extraction, what: str = "text") -> Read:
    """The text to fingerprint of a document or search; raises the request's (or the
    batch document's) error: TooLarge, InvalidBody, UnreadablePage."""
    if not fields.is_page:
        assert fields.text is not None
        limits.check_text(settings, fields.text, what)
        return Read(fields.text)
    html = _html_of(fields, settings, what)
    page = read_page(html, extract)
    limits.check_text(settings, page.text, f"{what} extracted from the page")
    return Read(page.text, page, host_key(None, html))


async def read_off_loop(
    fields: PageFields, settings: Settings, collection: ServiceCollection
) -> Read:
    """``read`` from a coroutine: a text at once, a page in the thread pool (with the
    collection's settings, which may wait on the network)."""
    if not fields.is_page:
        return read(fields, settings, "main")
    return await run_in_threadpool(lambda: read(fields, settings, collection.config.html.extract))
