"""RedisStore: one collection's documents and indexes in Redis or a Redis Cluster.

The same searches as the in-process indexes (app/core): SimHash within Hamming distance
k, exactly (every fingerprint within k found, none farther returned); MinHash LSH
candidates verified by the signatures' estimated Jaccard (agreeing positions / K at least
the threshold); equal 128-bit exact hashes. Key layout and member encodings are in
``layout``, the atomic group writes in ``functions``, the whole design in docs/redis.md.

Round trips, each one pipeline (in a cluster, one request per node, all sent before any
answer is read, as redis-py's cluster pipeline does):

- a search: (1) ``ZRANGE BYLEX`` on every table and band for every query; (2) ``HMGET``
  of the fixed fields, signatures and records of every row found, per row group. A row
  whose fields are gone was removed between the two and is dropped, so (2) is also the
  liveness check.
- an insert: (1) one function call per row group: ids claimed, rows numbered, fields and
  records written, atomically per group; (2) every table entry (``ZADD``); (3) the work
  marks cleared (``neardup_finish_v1``). A row is in a table only after its fields are
  written, so every row a search finds can be verified and resolved.
- a remove: (1) fields and ids dropped, atomically per group (the document is gone for
  every search from here); (2) the table entries; (3) the work marks.

A writer that dies between (1) and (3) leaves work marks; ``repair()`` finishes them
(entries are sets: writing or removing one twice is harmless).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from app.backends.redis.store import functions
from app.backends.redis.store.layout import (
    Layout,
    PrefixTable,
    exact_extra,
    rows_bytes,
    rows_of,
)
from app.backends.redis.store.rows import RowReads, pack_record, row_of
from app.backends.redis.store.search import StoreSearch
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Command, Wire
from app.core.types import ExactHashes, MinHashes, Rows, SimHashes

# Table entries as (table, shard of each entry, member of each entry), one part a table.
Entries: TypeAlias = list[tuple[PrefixTable, npt.NDArray[np.int64], list[bytes]]]
Floats: TypeAlias = npt.NDArray[np.float64]


class LayoutMismatch(Exception):
    """The collection exists in Redis with other layout settings than those given."""


class Status(IntEnum):
    """What an insert did with one document."""

    INSERTED = 0
    SAME = 1  # the id is held with the same digest: a retry, nothing changed
    OTHER = 2  # the id is held with another digest: nothing changed
    REPLACED = 3  # (replace only) the id's old row is gone, a new row holds it


@dataclass(frozen=True, slots=True)
class NewDocuments:
    """A batch to insert. ``digests`` decide retries (an id sent again with an equal
    digest is the same document); ``records`` are the caller's bytes, kept per row."""

    ids: list[str]
    simhash: SimHashes  # (m,)
    minhash: MinHashes  # (m, K); (m, 0) with MinHash off
    exact: ExactHashes  # (m, 2)
    timestamps: Rows  # (m,) microseconds
    digests: list[bytes]
    records: list[bytes]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class Written:
    """Per document of an insert: its status, its row (the held one for SAME and OTHER),
    the row it replaced (-1 but for REPLACED)."""

    status: npt.NDArray[np.int8]
    rows: Rows
    replaced: Rows


def _entries_of(
    layout: Layout,
    rows: Rows,
    simhash: SimHashes,
    exact: ExactHashes,
    minhash: MinHashes | None,
) -> Entries:
    """Every table entry of rows: (table, shard, member) columns, table by table."""
    parts: Entries = []
    if not len(rows):
        return parts

    def add(table: PrefixTable, keys: npt.NDArray[np.uint64], extra: Any) -> None:
        shards, members = table.encode(keys, extra, rows)
        parts.append((table, shards, members))

    add(layout.exact_table, np.ascontiguousarray(exact[:, 0]), exact_extra(exact))
    if layout.simhash:
        permuted = layout.permute(simhash)
        for t, table in enumerate(layout.simhash_tables):
            add(table, np.ascontiguousarray(permuted[:, t]), None)
    if layout.minhash:
        assert minhash is not None
        band_keys = layout.band_keys(minhash)
        for band, table in enumerate(layout.band_tables):
            add(table, np.ascontiguousarray(band_keys[:, band]), None)
    return parts


def _entry_commands(operation: str, entries: Entries) -> list[Command]:
    """One ``neardup_entries_v1`` call per shard number: every table's set of that shard
    number shares its hash tag, so one call in one slot writes them all."""
    if not entries:
        return []
    tables = [table for table, _, _ in entries]
    table_ids = np.concatenate([np.full(len(s), i) for i, (_, s, _) in enumerate(entries)])
    shards = np.concatenate([s for _, s, _ in entries])
    members = [m for _, _, part in entries for m in part]
    order = np.lexsort((table_ids, shards))
    shard_list, table_list = shards[order].tolist(), table_ids[order].tolist()
    ordered = [members[i] for i in order.tolist()]
    change = np.flatnonzero(np.diff(shards[order]) | np.diff(table_ids[order])) + 1
    commands: list[Command] = []
    keys: list[bytes] = []
    args: list[Any] = []
    current = -1
    for start, end in itertools.pairwise([0, *change.tolist(), len(ordered)]):
        shard = shard_list[start]
        if shard != current:
            if keys:
                commands.append(("FCALL", functions.ENTRIES, len(keys), *keys, operation, *args))
            current, keys, args = shard, [], []
        keys.append(tables[table_list[start]].key(shard))
        args.append(end - start)
        args.extend(ordered[start:end])
    commands.append(("FCALL", functions.ENTRIES, len(keys), *keys, operation, *args))
    return commands


class RedisStore:
    """One collection in Redis: documents by id and by row, and its index tables.

    Any number of processes may use the same collection at once; one instance serves
    one thread at a time (its round-trip counter is not locked).

    >>> store = RedisStore(redis.Redis(), Layout("news"))  # doctest: +SKIP
    >>> store.setup()  # doctest: +SKIP
    """

    def __init__(
        self, client: Client, layout: Layout, *, wait_replicas: int = 0, wait_timeout_ms: int = 1000
    ) -> None:
        """``wait_replicas`` > 0: a write is answered only once that many replicas of every
        node it reached have it (``WAIT``, in the same round trips), else ReplicasBehind."""
        self.client = client
        self.layout = layout
        self.wire = Wire(client, wait_replicas, wait_timeout_ms)
        self.reads = RowReads(layout, self.wire)
        self.searches = StoreSearch(layout, self.wire, self.reads)
        # Its reads and searches (rows.py, search.py), called as the store's own.
        self.lookup = self.reads.lookup
        self.lookup_also = self.reads.lookup_also
        self.lookup_steps = self.reads.lookup_steps
        self.rows = self.reads.rows
        self.rows_steps = self.reads.rows_steps
        self.search = self.searches.search
        self.search_steps = self.searches.search_steps

    @property
    def round_trips(self) -> int:
        """Batches of commands sent so far (one round trip each), for tests and metrics."""
        return self.wire.round_trips

    def setup(self) -> None:
        """Load the functions (on every primary) and record the layout, or check that
        the collection's recorded layout is this one (LayoutMismatch if not)."""
        self.client.function_load(functions.SOURCE, replace=True)
        wanted = self.layout.settings()
        key = self.layout.meta_key()
        (flat,) = self.wire.send([("HGETALL", key)])
        held = {k.decode(): v.decode() for k, v in _pairs(flat)}
        if not held:
            self.wire.send([("HSET", key, *itertools.chain.from_iterable(wanted.items()))])
        elif held != wanted:
            raise LayoutMismatch(
                f"collection {self.layout.collection!r} is stored with layout {held}, "
                f"not {wanted}: open it with the layout it was created with"
            )

    # Writes -----------------------------------------------------------------------------

    def insert(self, documents: NewDocuments, *, replace: bool = False) -> Written:
        """Store a batch and index it: three round trips (see the module docstring).

        An id the batch repeats is held from its first occurrence on: a later one is
        SAME or OTHER (or, with replace, REPLACED) as if sent after it.
        """
        count = len(documents)
        layout = self.layout
        minhash = documents.minhash if layout.minhash else None
        blobs = layout.blobs(documents.simhash, documents.exact, documents.timestamps, minhash)
        by_group = self.reads.by_group(documents.ids)
        commands: list[Command] = []
        for group, positions in by_group.items():
            args: list[Any] = [group, layout.groups, int(replace)]
            for p in positions:
                record = pack_record(documents.ids[p], documents.records[p])
                args += [documents.ids[p], documents.digests[p], blobs[p], record]
            commands.append(("FCALL", functions.INSERT, 4, *layout.group_keys(group), *args))
        status = np.zeros(count, dtype=np.int8)
        rows = np.full(count, -1, dtype=np.int64)
        replaced = np.full(count, -1, dtype=np.int64)
        old_blobs: dict[int, bytes] = {}  # by position: the answers come by group
        unfinished: dict[int, bytes] = {}  # retries of inserts that left their + mark
        answered = self.wire.send(commands, durable=True)
        for positions, answers in zip(by_group.values(), answered, strict=True):
            for p, (code, row, old_row, blob) in zip(positions, answers, strict=True):
                status[p], rows[p] = code, row_of(row)
                if code == Status.REPLACED:
                    replaced[p] = row_of(old_row)
                    old_blobs[p] = blob
                elif code == Status.SAME and blob:
                    unfinished[p] = blob
        new = np.flatnonzero((status == Status.INSERTED) | (status == Status.REPLACED))

        def entries(at: npt.NDArray[np.int64]) -> Entries:
            signatures = None if minhash is None else minhash[at]
            return _entries_of(
                layout, rows[at], documents.simhash[at], documents.exact[at], signatures
            )

        old = replaced[replaced >= 0]
        in_order = [old_blobs[p] for p in sorted(old_blobs)]
        retried = np.array(sorted(unfinished), dtype=np.int64)
        again = self._entries_of_blobs(rows[retried], [unfinished[p] for p in retried.tolist()])
        self._write_entries(entries(new) + again, self._entries_of_blobs(old, in_order))
        indexed = np.concatenate([new, retried])
        gone = self._finish(rows[indexed])
        if len(gone):  # removed or replaced while we indexed them: take them out again
            at = np.isin(rows[retried], gone)
            removes = entries(new[np.isin(rows[new], gone)])
            removes += self._entries_of_blobs(
                rows[retried][at], [unfinished[p] for p in retried[at].tolist()]
            )
            self._write_entries([], removes)
        self._clear_marks(old)
        return Written(status, rows, replaced)

    def remove(self, ids: Sequence[str], rows_held: Rows | None = None) -> Rows:
        """Remove documents by id: the row each one had, -1 for an id not held. Three
        round trips; the document is gone for every search after the first. With
        ``rows_held``, only the ids still held under those rows (not stored again since
        the caller read them): -1 for the others."""
        by_group = self.reads.by_group(ids)
        commands: list[Command] = []
        for group, positions in by_group.items():
            arguments: list[Any]
            if rows_held is None:
                arguments = [ids[p] for p in positions]
                function = functions.REMOVE
            else:
                fields = rows_bytes(rows_held[positions])
                arguments = [
                    part for p, f in zip(positions, fields, strict=True) for part in (ids[p], f)
                ]
                function = functions.REMOVE_IF
            commands.append(("FCALL", function, 4, *self.layout.group_keys(group), *arguments))
        rows = np.full(len(ids), -1, dtype=np.int64)
        blobs: dict[int, bytes] = {}  # by position: the answers come by group
        answered = self.wire.send(commands, durable=True)
        for positions, answers in zip(by_group.values(), answered, strict=True):
            for p, (row, blob) in zip(positions, answers, strict=True):
                if row:
                    rows[p] = row_of(row)
                    blobs[p] = blob
        removed = rows[rows >= 0]
        in_order = [blobs[p] for p in sorted(blobs)]
        self._write_entries([], self._entries_of_blobs(removed, in_order))
        self._clear_marks(removed)
        return rows

    def _entries_of_blobs(self, rows: Rows, blobs: list[bytes]) -> Entries:
        kept = [i for i, blob in enumerate(blobs) if blob]  # a blob-less row has no entries
        if not kept:
            return []
        fixed, signatures = self.layout.parse_blobs([blobs[i] for i in kept])
        return _entries_of(
            self.layout,
            rows[kept],
            fixed["simhash"],
            fixed["exact"],
            signatures if self.layout.minhash else None,
        )

    def _write_entries(self, adds: Entries, removes: Entries) -> None:
        commands = _entry_commands("+", adds) + _entry_commands("-", removes)
        self.wire.send(commands, durable=True)

    def _finish(self, rows: Rows) -> Rows:
        """Clear the ``+`` marks of rows just indexed; the rows found gone meanwhile."""
        commands: list[Command] = []
        for group, fields in self.reads.by_row_group(rows):
            _, s, _, w = self.layout.group_keys(group)
            commands.append(("FCALL", functions.FINISH, 2, w, s, *fields))
        return rows_of([row for answer in self.wire.send(commands) for row in answer])

    def _clear_marks(self, rows: Rows) -> None:
        """Drop the ``-`` marks of rows whose table entries are removed."""
        self.wire.send(
            [
                ("HDEL", self.layout.group_keys(group)[3], *fields)
                for group, fields in self.reads.by_row_group(rows)
            ]
        )

    def repair(self) -> int:
        """Finish the work a writer left half done (it died between its round trips):
        index the rows marked ``+``, remove the entries of those marked ``-``. Safe
        beside running writers. Returns the rows seen. O(groups + marked rows)."""
        groups = range(self.layout.groups)
        marks = self.wire.send([("HGETALL", self.layout.group_keys(g)[3]) for g in groups])
        pending: list[bytes] = []
        removed: list[bytes] = []
        removed_blobs: list[bytes] = []
        for flat in marks:
            for row, mark in _pairs(flat):
                if mark == b"+":
                    pending.append(row)
                else:
                    removed.append(row)
                    removed_blobs.append(mark[1:])
        removed_rows = rows_of(removed)
        self._write_entries([], self._entries_of_blobs(removed_rows, removed_blobs))
        self._clear_marks(removed_rows)
        if pending:
            data = self.rows(rows_of(pending), records=False)
            signatures = data.signatures if self.layout.minhash else None
            adds = _entries_of(self.layout, data.rows, data.simhash, data.exact, signatures)
            self._write_entries(adds, [])
            gone = self._finish(data.rows)
            if len(gone):  # removed meanwhile: its remover may have run before our ZADDs
                at = np.isin(data.rows, gone)
                self._write_entries(
                    [],
                    _entries_of(
                        self.layout,
                        data.rows[at],
                        data.simhash[at],
                        data.exact[at],
                        None if signatures is None else signatures[at],
                    ),
                )
            # Rows marked but without fields (removed before we read them) keep no mark
            # of ours: their remover's own marks cover their entries.
            self._finish(np.setdiff1d(rows_of(pending), data.rows))
        return len(pending) + len(removed)

    def count(self) -> int:
        """Documents held: the sizes of every group's fields hash. One round trip."""
        groups = range(self.layout.groups)
        return sum(self.wire.send([("HLEN", self.layout.group_keys(g)[1]) for g in groups]))


def _pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    """The (field, value) pairs of an HGETALL: a map in RESP3, a flat list in RESP2."""
    if isinstance(reply, dict):
        return list(reply.items())
    return list(zip(reply[::2], reply[1::2], strict=True))
