"""What the Redis backend keeps of a document beside the store's fields (its record),
and the rows a read returned with their records parsed."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import xxhash

from app.backends.redis.store.rows import RowData
from app.core.types import Rows

# A record's JSON never holds a NUL byte (orjson escapes every control character), so one
# marks where its text follows, deflated (raw DEFLATE, level 1: 20-25 us a 1 KB text
# made, 7 read): a Reuters story's 1,112 bytes take ~600 in Redis. A shorter text than
# _DEFLATE_FROM characters stays in the JSON, as every text of a record written before.
_TEXT_MARK = b"\x00"
_DEFLATE_FROM = 200
_RAW_DEFLATE = -15  # zlib's wbits: no header, no checksum (Redis keeps the bytes intact)


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    created: float
    cluster: int
    cluster_name: str
    metadata: dict[str, Any] | None
    text: str | None
    short: str | None = None  # the normalised text, when the n-gram index holds it
    # Its host's key (app/core/hosts.py; 0: none): its passage entries carry it.
    host: int = 0

    def pack(self) -> bytes:
        fields = {
            "s": self.seq,
            "c": self.created,
            "k": self.cluster,
            "n": self.cluster_name,
            "m": self.metadata,
            "q": self.short,
        }
        if self.host:
            fields["h"] = self.host
        if self.text is not None and len(self.text) >= _DEFLATE_FROM:
            deflated = zlib.compress(self.text.encode("utf-8"), 1, wbits=_RAW_DEFLATE)
            return orjson.dumps(fields) + _TEXT_MARK + deflated
        fields["t"] = self.text
        return orjson.dumps(fields)

    @staticmethod
    def unpack(raw: bytes) -> Record:
        return Record.of_parts(*_parts(raw))

    @staticmethod
    def of_parts(data: dict[str, Any], deflated: bytes | None) -> Record:
        """A record of its packed fields and deflated text (``_parts``)."""
        text = data.get("t")
        if deflated is not None:
            text = zlib.decompress(deflated, wbits=_RAW_DEFLATE).decode("utf-8")
        return Record(
            data["s"],
            data["c"],
            data["k"],
            data["n"],
            data["m"],
            text,
            data.get("q"),
            data.get("h", 0),
        )


def _parts(raw: bytes) -> tuple[dict[str, Any], bytes | None]:
    """A packed record's fields, and its deflated text where it has one."""
    mark = raw.find(_TEXT_MARK)
    if mark < 0:
        return orjson.loads(raw), None
    return orjson.loads(raw[:mark]), raw[mark + 1 :]


class Held:
    """Rows a read returned, with their records parsed on demand."""

    def __init__(self, data: RowData) -> None:
        self.data = data
        self._records: dict[int, Record] = {}
        self._parts: dict[int, tuple[dict[str, Any], bytes | None]] = {}

    def _parsed(self, at: int) -> tuple[dict[str, Any], bytes | None]:
        """A row's record's fields and deflated text, its JSON parsed once."""
        parts = self._parts.get(at)
        if parts is None:
            parts = self._parts[at] = _parts(self.data.records[at])
        return parts

    def record(self, at: int) -> Record:
        record = self._records.get(at)
        if record is None:
            record = self._records[at] = Record.of_parts(*self._parsed(at))
        return record

    def seq(self, at: int) -> int:
        """The seq of a row's record, without inflating its text (a candidate that is
        not verified never needs it)."""
        seq: int = self._parsed(at)[0]["s"]
        return seq

    def seqs(self, at: Rows) -> Rows:
        return np.array([self.seq(i) for i in at.tolist()], dtype=np.int64)


def joined(first: RowData, second: RowData) -> RowData:
    """The rows of two reads together, sorted by row (a row in both: the first's)."""
    rows = np.concatenate([first.rows, second.rows])
    _, unique = np.unique(rows, return_index=True)
    ids, records = first.ids + second.ids, first.records + second.records
    return RowData(
        rows[unique],
        np.concatenate([first.simhash, second.simhash])[unique],
        np.concatenate([first.exact, second.exact])[unique],
        np.concatenate([first.timestamps, second.timestamps])[unique],
        np.concatenate([first.signatures, second.signatures])[unique],
        [ids[i] for i in unique.tolist()],
        [records[i] for i in unique.tolist()],
    )


def digest(exact: npt.NDArray[np.uint64], metadata: dict[str, Any] | None) -> bytes:
    """What decides a retry: the normalised text's hash and the metadata."""
    meta = orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)
    return exact.astype(">u8").tobytes() + xxhash.xxh3_64_digest(meta)
