"""What the Redis backend keeps of a document beside the store's fields (its record),
and the rows a read returned with their records parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import xxhash

from app.backends.redis.store.rows import RowData
from app.core.types import Rows


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
            "t": self.text,
            "q": self.short,
        }
        if self.host:
            fields["h"] = self.host
        return orjson.dumps(fields)

    @staticmethod
    def unpack(raw: bytes) -> Record:
        data = orjson.loads(raw)
        return Record(
            data["s"],
            data["c"],
            data["k"],
            data["n"],
            data["m"],
            data["t"],
            data.get("q"),
            data.get("h", 0),
        )


class Held:
    """Rows a read returned, with their records parsed on demand."""

    def __init__(self, data: RowData) -> None:
        self.data = data
        self._records: dict[int, Record] = {}

    def record(self, at: int) -> Record:
        record = self._records.get(at)
        if record is None:
            record = self._records[at] = Record.unpack(self.data.records[at])
        return record

    def seqs(self, at: Rows) -> Rows:
        return np.array([self.record(i).seq for i in at.tolist()], dtype=np.int64)


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
