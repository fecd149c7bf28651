"""The HTML responses of a WARC file, as ``neardup dedup`` and ``neardup insert --warc``
both read them: one page per HTML response record, its URL (WARC-Target-URI) as its id,
its WARC-Date as its time, its payload as fetched with the charset of its Content-Type.

Reads with fastwarc (resiliparse's WARC reader, installed with neardup); gzip, per record
or whole, is read through. Nothing of the server is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO


class UnreadableWarc(ValueError):
    """A file that is not WARC (or is cut off inside a record)."""


@dataclass(frozen=True, slots=True)
class WarcResponse:
    """An HTML response record: ``payload`` is the HTTP body as fetched; ``offset`` the
    bytes of the file read when it was (for progress)."""

    url: str
    record_id: str
    date: str
    charset: str | None
    payload: bytes
    offset: int = 0


def html_responses(path: str | os.PathLike[str]) -> Iterator[WarcResponse]:
    """The HTML response records of the file at ``path``, in file order; other record
    types and content types are skipped. Raises UnreadableWarc where fastwarc cannot
    parse it. O(file) time, one record in memory at a time."""
    with open(path, "rb") as handle:
        yield from _responses(handle, str(path))


def _responses(handle: BinaryIO, name: str) -> Iterator[WarcResponse]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    try:
        for record in ArchiveIterator(handle, record_types=WarcRecordType.response):
            content_type = (record.http_content_type or "").lower()
            if "html" not in content_type:
                continue
            headers = record.headers
            payload = record.reader.read()
            yield WarcResponse(
                url=headers.get("WARC-Target-URI", "") or str(record.record_id),
                record_id=str(record.record_id),
                date=headers.get("WARC-Date", "") or "",
                charset=record.http_charset or None,
                payload=payload,
                offset=handle.tell(),
            )
    except Exception as error:  # fastwarc raises its own parse errors
        raise UnreadableWarc(f"{name}: not readable as WARC ({error})") from None
