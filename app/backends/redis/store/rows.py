"""Reads of a collection's stored rows in Redis: documents by id (``lookup``: row,
fixed fields, signature and record) and by row (``rows``), one round trip each, written as
steps (steps.py) that a blocking or an event-loop wire drives; the grouping of ids and
rows by row group that the writes share."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backends.redis.store import functions
from app.backends.redis.store.layout import ROW_BYTES, Layout, group_of, rows_bytes
from app.backends.redis.store.steps import Batch, Steps, run
from app.backends.redis.store.wire import Command, Wire
from app.core.types import ExactHashes, MinHashes, Rows, SimHashes

# Up to this many rows, Python ints group rows faster than numpy's fixed costs (a search
# of one text finds a few rows; a batch's, thousands).
FEW_ROWS = 64


@dataclass(frozen=True, slots=True)
class RowData:
    """What is stored of some rows, sorted by row: fixed fields, signatures, records."""

    rows: Rows
    simhash: SimHashes
    exact: ExactHashes
    timestamps: Rows
    signatures: MinHashes
    ids: list[str]
    records: list[bytes]

    def index(self, rows: Rows) -> Rows:
        """Positions of rows (each one present) in this data."""
        positions: Rows = np.searchsorted(self.rows, rows).astype(np.int64)
        return positions


class RowReads:
    """The reads of one collection's rows (RedisStore's ``lookup*`` and ``rows*``).
    One instance serves one thread at a time, as its wire does."""

    def __init__(self, layout: Layout, wire: Wire) -> None:
        self.layout = layout
        self.wire = wire
        self.no_rows = self._row_data({})  # what a search that finds nothing answers

    def by_group(self, ids: Sequence[str]) -> dict[int, list[int]]:
        """Positions of ids by row group, in batch order within each group."""
        groups: dict[int, list[int]] = defaultdict(list)
        for position, group in enumerate(group_of(list(ids), self.layout.groups).tolist()):
            groups[group].append(position)
        return groups

    def by_row_group(self, rows: Rows) -> list[tuple[int, list[bytes]]]:
        """(group, row fields) of rows, by row group (ascending), in the given order
        within a group."""
        count = self.layout.groups
        if len(rows) <= FEW_ROWS:
            by_group: dict[int, list[bytes]] = {}
            for row in rows.tolist():
                by_group.setdefault(row % count, []).append(row.to_bytes(ROW_BYTES, "big"))
            return sorted(by_group.items())
        groups = rows % count
        return [(group, rows_bytes(rows[groups == group])) for group in np.unique(groups).tolist()]

    def lookup(self, ids: Sequence[str]) -> tuple[Rows, RowData]:
        """(row of each id or -1, the stored data of those held). One round trip."""
        rows, data, _ = self.lookup_also(ids)
        return rows, data

    def lookup_also(
        self, ids: Sequence[str], also: Sequence[Command] = (), *, durable: bool = False
    ) -> tuple[Rows, RowData, list[Any]]:
        """``lookup``, with the caller's commands in the same round trip (``durable``:
        WAITed when they write); their replies third."""
        return run(self.lookup_steps(ids, also, durable=durable), self.wire)

    def lookup_steps(
        self, ids: Sequence[str], also: Sequence[Command] = (), *, durable: bool = False
    ) -> Steps[tuple[Rows, RowData, list[Any]]]:
        """``lookup_also``'s steps."""
        by_group = self.by_group(ids)
        commands: list[Command] = [
            (
                "FCALL_RO",
                functions.LOOKUP,
                3,
                *self.layout.group_keys(group)[:3],
                *[ids[p] for p in positions],
            )
            for group, positions in by_group.items()
        ]
        rows = np.full(len(ids), -1, dtype=np.int64)
        held: dict[int, tuple[bytes, bytes]] = {}
        replies = yield self.batch([*also, *commands], durable)
        also_replies, replies = replies[: len(also)], replies[len(also) :]
        for positions, answers in zip(by_group.values(), replies, strict=True):
            for p, (row, blob, record) in zip(positions, answers, strict=True):
                if row and blob:
                    rows[p] = row_of(row)
                    held[int(rows[p])] = (blob, record)
        return rows, self._row_data(held), also_replies

    def rows(self, rows: Rows, *, records: bool = True) -> RowData:
        """The stored data of rows, those still held. One round trip."""
        return run(self.rows_steps(rows, records=records), self.wire)

    def rows_steps(self, rows: Rows, *, records: bool = True) -> Steps[RowData]:
        commands, plan = self.row_commands(rows, records)
        return self.parse_rows(plan, records, (yield self.batch(commands)))

    def batch(self, commands: Sequence[Command], durable: bool = False) -> Batch:
        return Batch.of(commands, cluster=self.wire.cluster, durable=durable)

    def row_commands(self, rows: Rows, records: bool) -> tuple[list[Command], list[list[bytes]]]:
        """HMGETs of the fields (and records) of rows, one per group and hash; and the row
        fields of each group, for ``_parse_rows``."""
        commands: list[Command] = []
        plan: list[list[bytes]] = []
        few = len(rows) <= FEW_ROWS
        unique = np.array(sorted(set(rows.tolist())), dtype=np.int64) if few else np.unique(rows)
        for group, fields in self.by_row_group(unique):
            _, s, r, _ = self.layout.group_keys(group)
            commands.append(("HMGET", s, *fields))
            if records:
                commands.append(("HMGET", r, *fields))
            plan.append(fields)
        return commands, plan

    def parse_rows(self, plan: list[list[bytes]], records: bool, answers: list[Any]) -> RowData:
        held: dict[int, tuple[bytes, bytes]] = {}
        replies = iter(answers)
        for fields in plan:
            blobs = next(replies)
            values = next(replies) if records else [b""] * len(fields)
            for field, blob, record in zip(fields, blobs, values, strict=True):
                if blob is not None:
                    held[row_of(field)] = (blob, record or b"")
        return self._row_data(held)

    def _row_data(self, held: dict[int, tuple[bytes, bytes]]) -> RowData:
        order = sorted(held)
        rows = np.array(order, dtype=np.int64)
        fixed, signatures = self.layout.parse_blobs([held[r][0] for r in order])
        ids, payloads = [], []
        for row in order:
            record = held[row][1]
            record_id, payload = unpack_record(record) if record else ("", b"")
            ids.append(record_id)
            payloads.append(payload)
        return RowData(
            rows,
            fixed["simhash"].astype(np.uint64),
            fixed["exact"].astype(np.uint64),
            fixed["timestamp"].astype(np.int64),
            signatures,
            ids,
            payloads,
        )


def row_of(field: bytes) -> int:
    return int.from_bytes(field, "big")


def pack_record(document_id: str, payload: bytes) -> bytes:
    """A row's ``r`` value: the id's length (2 bytes), the id (UTF-8), the payload."""
    encoded = document_id.encode("utf-8", "surrogatepass")
    return len(encoded).to_bytes(2, "big") + encoded + payload


def unpack_record(record: bytes) -> tuple[str, bytes]:
    size = int.from_bytes(record[:2], "big")
    return record[2 : 2 + size].decode("utf-8", "surrogatepass"), record[2 + size :]
