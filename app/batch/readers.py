"""Input of ``neardup dedup``: JSON lines, CSV (or TSV) and Parquet, read in splits.

A corpus is a list of files; a file is read in one or more *splits*, each a run of its
records in file order: a byte range of a JSON lines file (a record belongs to the split
in which its line starts, as Hadoop's line reader has it), a run of row groups of a
Parquet file, a whole CSV file (a quoted field may hold a newline, so a CSV file cannot be
cut at an arbitrary byte), a whole WARC file or a whole compressed (``.gz``) file. A
document's *position* is its number in the whole input, in the order of the files and,
within a file, of its records; both engines read the same splits with these functions,
so they see the same documents at the same positions.

A record gives a document: its id is the value of ``id_field`` (a string or an integer;
a record without one gets its position as id), its text the values of ``text_fields``
that the record has (not null), joined by a newline, and, with a ``timestamp_field``, its
time: ISO 8601 with a UTC offset or Unix seconds, as the service's API reads them
(``timestamp_us``). The record itself is what
``kept.jsonl`` repeats: a JSON lines record exactly as its line was (white space at its
ends removed), a CSV or Parquet record as a JSON object of its columns.

A WARC file (a crawl, ``.warc`` or ``.warc.gz``) gives one document per HTML response
record: its id the record's WARC-Target-URI, its text the page decoded by the charset of
its HTTP Content-Type (else as app/core/page.decode_page finds it; a page that is no text
gives an empty text, which the job counts as empty), its time the record's WARC-Date;
``kept.jsonl`` repeats ``{"url", "warc_record_id", "date"}``. Its pages are HTML: the job
reads them as the service reads ``"html": true``.
"""

from __future__ import annotations

import base64
import gzip
import importlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Literal, cast

import orjson

Format = Literal["jsonl", "csv", "tsv", "parquet", "warc"]
FORMATS: tuple[Format, ...] = ("jsonl", "csv", "tsv", "parquet", "warc")
DocumentId = str | int

_EXTENSIONS: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".warc": "warc",
}
# JSON lines files are cut into splits of about this many bytes (Spark reads one a task).
DEFAULT_SPLIT_BYTES = 64 << 20
# Records read from a Parquet or CSV file at a time.
ARROW_BATCH_ROWS = 8192
CSV_BLOCK_BYTES = 4 << 20


def arrow(module: str) -> Any:
    """A pyarrow module, for CSV and Parquet input: the batch extra's (the server's image
    leaves it out), so its absence is a clear InputError, not a traceback."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(
            "reading CSV or Parquet needs pyarrow: pip install 'neardup[batch]'"
        ) from None


class InputError(ValueError):
    """The input cannot be read as asked: a message naming the file and the place."""


@dataclass(frozen=True, slots=True)
class Fields:
    """Which fields of a record are its id and its text."""

    id_field: str = "id"
    text_fields: tuple[str, ...] = ("text",)
    timestamp_field: str | None = None  # read only for a match_window


@dataclass(frozen=True, slots=True)
class JobOptions:
    """What every engine of ``neardup dedup`` takes: where to write, what the records
    hold, whether to say how far it is."""

    out: Path
    fields: Fields = field(default_factory=Fields)
    format: Format | None = None
    html: bool = False  # the text field holds pages (main content read from each)
    progress: bool = True
    simhash_blocks: int | None = None
    passages: bool = False  # passages.jsonl: the pairs that share passages
    drop_contained: bool = False  # kept.jsonl without documents inside another


@dataclass(frozen=True, slots=True)
class Split:
    """A run of one file's records. JSON lines: the lines that start in bytes
    [start, end); Parquet: row groups [start, end); others: the whole file (0, -1)."""

    path: str
    format: Format
    start: int = 0
    end: int = -1


def detect_format(path: str) -> Format:
    """The format a file's name says (``.gz`` looked through), or InputError."""
    name = path[:-3] if path.endswith(".gz") else path
    format_ = _EXTENSIONS.get(os.path.splitext(name)[1].lower())
    if format_ is None:
        raise InputError(
            f"{path}: cannot tell the format from the name; give --format ({', '.join(FORMATS)})"
        )
    if format_ == "parquet" and path.endswith(".gz"):
        raise InputError(f"{path}: a Parquet file compresses its own columns; not .gz")
    return format_


def holds_pages(paths: Sequence[str], format_: Format | None = None) -> bool:
    """Whether the input is a crawl (WARC), whose documents are HTML pages."""
    return any((format_ or detect_format(path)) == "warc" for path in paths)


def plan_splits(
    paths: Sequence[str], format_: Format | None = None, split_bytes: int = DEFAULT_SPLIT_BYTES
) -> list[Split]:
    """The splits of the input files, in input order."""
    splits: list[Split] = []
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        chosen = format_ or detect_format(path)
        if chosen == "jsonl" and not path.endswith(".gz"):
            size = os.path.getsize(path)
            starts = list(range(0, max(size, 1), split_bytes))
            splits += [
                Split(path, chosen, start, min(start + split_bytes, size)) for start in starts
            ]
        elif chosen == "parquet":
            pq = arrow("pyarrow.parquet")
            groups = pq.ParquetFile(path).metadata.num_row_groups
            splits += [Split(path, chosen, group, group + 1) for group in range(groups)]
        else:
            splits.append(Split(path, chosen))
    return splits


def document_id(value: Any, position: int, split: Split) -> DocumentId:
    """A record's id value as a document id: a string or an integer; its position if absent."""
    if value is None:
        return position
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InputError(
        f"{split.path}: the document at position {position} has an id of type "
        f"{type(value).__name__}; an id is a string or an integer"
    )


def timestamp_us(value: Any, position: int, split: Split, fields: Fields) -> int:
    """A record's time as microseconds since the Unix epoch, as the service reads a
    document's ``timestamp``: an ISO 8601 string with a UTC offset or ``Z``, or Unix
    seconds (a number; in CSV and TSV, where every field is text, a plain number is
    seconds and anything else ISO 8601); a Parquet timestamp with a time zone."""
    # Here, not at the top: importing app.service loads the service (numpy, numba), and
    # the `neardup` command line must start without them (tests/e2e/test_client.py).
    from app.service.times import BadTime, from_iso, from_seconds, parse_time_parameter

    try:
        if value is None:
            raise BadTime(f"no {fields.timestamp_field!r} field (or null)")
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise BadTime(f"{value.isoformat()!r} has no time zone")
            return from_iso(value.isoformat())
        if isinstance(value, str):
            if split.format in ("csv", "tsv"):
                return parse_time_parameter(value.strip())
            return from_iso(value)
        return from_seconds(value)
    except BadTime as error:
        raise InputError(
            f"{split.path}: the document at position {position} has no time this reads "
            f"(--timestamp-field {fields.timestamp_field}): {error}"
        ) from None


def _text_of(values: Sequence[Any]) -> str:
    return "\n".join(value if isinstance(value, str) else str(value) for value in values)


# ---------------------------------------------------------------------------- documents


def read_documents(split: Split, fields: Fields) -> Iterator[tuple[Any, str]]:
    """(id value or None, text) of each record of a split, in order."""
    for value, text, _ in read_timed_documents(split, fields):
        yield value, text


def read_timed_documents(split: Split, fields: Fields) -> Iterator[tuple[Any, str, Any]]:
    """(id value or None, text, time value or None) of each record of a split, in order:
    the time value as the record has it (``timestamp_us`` reads it), None without a
    ``timestamp_field``."""
    if split.format == "warc":
        for page in _warc_pages(split):
            yield page.url, page.html(), page.date
        return
    if split.format == "jsonl":
        timestamp_field = fields.timestamp_field
        for offset, line in _jsonl_lines(split):
            record = _parse_line(line, split, offset)
            yield (
                record.get(fields.id_field),
                _text_of([record[f] for f in fields.text_fields if record.get(f) is not None]),
                None if timestamp_field is None else record.get(timestamp_field),
            )
    else:
        for batch in _arrow_batches(split, fields):
            yield from _documents_of_batch(batch, fields)


def count_records(split: Split) -> int:
    """How many records a split holds (Parquet: from its metadata)."""
    if split.format == "jsonl":
        return sum(1 for _ in _jsonl_lines(split))
    if split.format == "warc":
        return sum(1 for _ in _warc_pages(split))
    if split.format == "parquet":
        pq = arrow("pyarrow.parquet")
        metadata = pq.ParquetFile(split.path).metadata
        return sum(metadata.row_group(group).num_rows for group in range(split.start, split.end))
    return sum(batch.num_rows for batch in _arrow_batches(split, None))


def read_records(split: Split, wanted: Sequence[int]) -> Iterator[tuple[int, bytes]]:
    """(index in the split, the record as one JSON line) of the records at the ascending
    indexes ``wanted``."""
    if not wanted:
        return
    if split.format == "warc":
        chosen = set(wanted)
        for index, page in enumerate(_warc_pages(split)):
            if index in chosen:
                yield index, page.line()
        return
    if split.format == "jsonl":
        targets = iter(wanted)
        target = next(targets)
        for index, (_, line) in enumerate(_jsonl_lines(split)):
            if index == target:
                yield index, line
                target = next(targets, -1)
                if target < 0:
                    return
        return
    first = 0
    at = 0
    for batch in _arrow_batches(split, None):
        end = first + batch.num_rows
        stop = at
        while stop < len(wanted) and wanted[stop] < end:
            stop += 1
        if stop > at:
            local = [index - first for index in wanted[at:stop]]
            for index, record in zip(wanted[at:stop], batch.take(local).to_pylist(), strict=True):
                yield index, record_line(record)
            at = stop
            if at == len(wanted):
                return
        first = end


def record_line(record: dict[str, Any]) -> bytes:
    """A CSV or Parquet record as a JSON object (dates in ISO 8601, bytes in base64)."""
    return orjson.dumps(record, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


# ---------------------------------------------------------------------------- JSON lines


def _open_binary(path: str) -> IO[bytes]:
    if path.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    # 64 KB reads: with the default 8 KB, lines of a few KB cost 2.7 times as much.
    return open(path, "rb", buffering=1 << 16)


def _jsonl_lines(split: Split) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line without its end-of-line white space) of the non-blank lines
    that start in the split's byte range."""
    with _open_binary(split.path) as handle:
        offset = 0
        if split.start > 0:
            # A line that started before the split belongs to the previous one: skip to
            # the first line starting at or after ``start``.
            handle.seek(split.start - 1)
            offset = split.start - 1 + len(handle.readline())
        end = split.end
        for line in handle:
            if end >= 0 and offset >= end:
                break
            start = offset
            offset += len(line)
            stripped = line.strip()
            if stripped:
                yield start, stripped


def _parse_line(line: bytes, split: Split, offset: int) -> dict[str, Any]:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise InputError(f"{split.path} at byte {offset}: not JSON ({error})") from None
    if not isinstance(record, dict):
        raise InputError(f"{split.path} at byte {offset}: a line is not a JSON object")
    return cast(dict[str, Any], record)


# ---------------------------------------------------------------------------- WARC


@dataclass(frozen=True, slots=True)
class WarcPage:
    """An HTML response record of a WARC file."""

    url: str
    record_id: str
    date: str
    charset: str | None
    payload: bytes

    def html(self) -> str:
        """The page's text: decoded by its HTTP charset, its declaration or detection;
        empty when it is no text in any."""
        from app.core.page import UndecodablePage, decode_page

        try:
            return decode_page(self.payload, self.charset)
        except UndecodablePage:
            return ""

    def line(self) -> bytes:
        return orjson.dumps({"url": self.url, "warc_record_id": self.record_id, "date": self.date})


def _warc_pages(split: Split) -> Iterator[WarcPage]:
    """The HTML response records of a WARC file, in file order, as the service's
    ``neardup insert --warc`` reads them (``neardup_client.warc``)."""
    from neardup_client.warc import UnreadableWarc, html_responses

    try:
        for response in html_responses(split.path):
            yield WarcPage(
                response.url,
                response.record_id,
                response.date,
                response.charset,
                response.payload,
            )
    except UnreadableWarc as error:
        raise InputError(str(error)) from None


# ---------------------------------------------------------------------------- CSV, Parquet


def _arrow_batches(split: Split, fields: Fields | None) -> Iterator[Any]:
    """pyarrow RecordBatches of a CSV or Parquet split: the columns of ``fields`` that
    exist (all columns when None)."""
    if split.format == "parquet":
        pq = arrow("pyarrow.parquet")
        parquet = pq.ParquetFile(split.path)
        names = parquet.schema_arrow.names
        columns = None if fields is None else [n for n in _wanted(fields) if n in names]
        yield from parquet.iter_batches(
            batch_size=ARROW_BATCH_ROWS,
            row_groups=list(range(split.start, split.end)),
            columns=columns,
        )
        return
    pa, pacsv = arrow("pyarrow"), arrow("pyarrow.csv")

    delimiter = "\t" if split.format == "tsv" else ","
    parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES)
    try:
        with _open_binary(split.path) as handle:
            header = pacsv.open_csv(handle, read_options=read, parse_options=parse)
            names = header.schema.names
        # Every column as text, as it is in the file: "007" stays "007", an empty field "".
        convert = pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            include_columns=None if fields is None else [n for n in _wanted(fields) if n in names],
        )
        with _open_binary(split.path) as handle:
            reader = pacsv.open_csv(
                handle, read_options=read, parse_options=parse, convert_options=convert
            )
            yield from reader
    except pa.ArrowInvalid as error:
        raise InputError(
            f"{split.path}: not readable as {split.format.upper()} ({error})"
        ) from None


def _wanted(fields: Fields) -> list[str]:
    timestamp = () if fields.timestamp_field is None else (fields.timestamp_field,)
    return list(dict.fromkeys((fields.id_field, *fields.text_fields, *timestamp)))


def _documents_of_batch(batch: Any, fields: Fields) -> Iterator[tuple[Any, str, Any]]:
    names = batch.schema.names
    rows = batch.num_rows
    ids = batch.column(fields.id_field).to_pylist() if fields.id_field in names else [None] * rows
    timestamp_field = fields.timestamp_field
    times = (
        batch.column(timestamp_field).to_pylist()
        if timestamp_field is not None and timestamp_field in names
        else [None] * rows
    )
    columns = [batch.column(f).to_pylist() for f in fields.text_fields if f in names]
    if not columns:
        texts = [""] * rows
    elif len(columns) == 1:
        texts = [value if isinstance(value, str) else _text_of([value]) for value in columns[0]]
        texts = [
            "" if value is None else text for value, text in zip(columns[0], texts, strict=True)
        ]
    else:
        texts = [
            _text_of([value for value in values if value is not None])
            for values in zip(*columns, strict=True)
        ]
    yield from zip(ids, texts, times, strict=True)


def input_bytes(paths: Sequence[str]) -> int:
    """Total size of the input files on disk."""
    return sum(Path(path).stat().st_size for path in paths)
