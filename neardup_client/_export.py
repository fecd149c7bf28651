"""Iteration over an export.

The service has no export endpoint: ``neardup export`` (on the machine that holds the
data directory; safe while the service runs) writes JSON lines, one per collection
followed by one per live document. ``read_export`` iterates such a file or stream, for
instance to post the texts again to a collection with other settings::

    for record in read_export("backup.jsonl"):
        if isinstance(record, ExportedDocument) and record.text is not None: ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from neardup_client._models import CollectionSettings, NewDocument


class ExportFormatError(ValueError):
    """A line of the export is not one ``neardup export`` writes."""


@dataclass(frozen=True, slots=True)
class ExportedCollection:
    name: str
    settings: CollectionSettings
    raw_settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExportedDocument:
    """A live document: its fingerprints, and its text when the collection keeps texts.
    ``created_at`` is seconds since the epoch; ``timestamp`` the document's own time (ISO
    8601), in exports of services that have one."""

    collection: str
    id: str
    created_at: float
    cluster_id: str
    metadata: dict[str, Any] | None
    simhash: str
    text: str | None
    timestamp: str | None = None

    def to_new_document(self) -> NewDocument:
        """The document to insert again, with its time when it has one (its text is
        needed: store_text collections)."""
        if self.text is None:
            raise ValueError(f"document {self.id!r}: its collection did not keep its text")
        return NewDocument(
            text=self.text, id=self.id, metadata=self.metadata, timestamp=self.timestamp
        )


ExportRecord = ExportedCollection | ExportedDocument
Source = str | os.PathLike[str] | IO[str] | IO[bytes] | Iterable[str] | Iterable[bytes]


def _lines(source: Source) -> Iterator[str | bytes]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as file:
            yield from file
    else:
        yield from source


def read_export(
    source: Source, collection: str | None = None
) -> Iterator[ExportedCollection | ExportedDocument]:
    """The records of an export, in file order (a path, an open text or binary file, or
    any iterable of lines); only those of ``collection`` when given. Blank lines are
    skipped; a line that is not an export record raises ExportFormatError with its
    number."""
    for number, line in enumerate(_lines(source), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            kind = data["type"]
            if kind == "collection":
                record: ExportRecord = ExportedCollection(
                    name=str(data["name"]),
                    settings=CollectionSettings.from_json(data["settings"]),
                    raw_settings=dict(data["settings"]),
                )
            elif kind == "document":
                record = ExportedDocument(
                    collection=str(data["collection"]),
                    id=str(data["id"]),
                    created_at=float(data["created_at"]),
                    cluster_id=str(data["cluster_id"]),
                    metadata=data.get("metadata"),
                    simhash=str(data["simhash"]),
                    text=data.get("text"),
                    timestamp=data.get("timestamp"),
                )
            else:
                raise ExportFormatError(f"line {number}: unknown record type {kind!r}")
        except (ValueError, KeyError, TypeError) as error:
            if isinstance(error, ExportFormatError):
                raise
            raise ExportFormatError(f"line {number}: not an export record ({error!r})") from error
        name = record.name if isinstance(record, ExportedCollection) else record.collection
        if collection is None or name == collection:
            yield record


def exported_documents(source: Source, collection: str | None = None) -> Iterator[ExportedDocument]:
    """Only the documents of an export (of one collection when given)."""
    for record in read_export(source, collection):
        if isinstance(record, ExportedDocument):
            yield record
