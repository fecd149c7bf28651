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

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from app.backends.redis.store import functions
from app.backends.redis.store.layout import (
    ROW_BYTES,
    Layout,
    PrefixTable,
    exact_extra,
    group_of,
    rows_bytes,
    rows_of,
)
from app.backends.redis.store.lookups import LookupTables, RangeLookups
from app.backends.redis.store.steps import Batch, Steps, run
from app.backends.redis.store.types import Client
from app.backends.redis.store.wire import Command, Wire, key_of, pack
from app.core.lsh import min_matches
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


@dataclass(frozen=True, slots=True)
class Found:
    """Pairs one index found, sorted by query position then best first: ``positions[i]``
    (a query) matches ``rows[i]``; ``values[i]`` is the Hamming distance (SimHash), the
    estimated Jaccard (MinHash) or 1.0 (exact)."""

    positions: Rows
    rows: Rows
    values: Floats

    @staticmethod
    def none() -> Found:
        empty = np.zeros(0, dtype=np.int64)
        return Found(empty, empty, np.zeros(0))

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, keep: npt.NDArray[np.bool_]) -> Found:
        return Found(self.positions[keep], self.rows[keep], self.values[keep])


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


@dataclass(frozen=True, slots=True)
class SearchResult:
    exact: Found
    simhash: Found
    minhash: Found
    rows: RowData  # every row found by any method
    also: list[Any] = dataclasses.field(default_factory=list)  # replies to search(also=...)


METHODS = ("exact", "simhash", "minhash")
# Up to this many rows, Python ints group rows faster than numpy's fixed costs (a search
# of one text finds a few rows; a batch's, thousands).
_FEW_ROWS = 64
_NONE = Found.none()  # shared by the searches that find nothing: never written to
_NO_KEYS = np.zeros((0, 0), dtype=np.uint64)


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
        self._no_rows = self._row_data({})  # what a search that finds nothing answers
        self._tables = {  # what every search's lookups share
            method: LookupTables(method, tables)
            for method, tables in (
                ("exact", [layout.exact_table]),
                ("simhash", layout.simhash_tables),
                ("minhash", layout.band_tables),
            )
            if tables
        }

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

    def _by_group(self, ids: Sequence[str]) -> dict[int, list[int]]:
        """Positions of ids by row group, in batch order within each group."""
        groups: dict[int, list[int]] = defaultdict(list)
        for position, group in enumerate(group_of(list(ids), self.layout.groups).tolist()):
            groups[group].append(position)
        return groups

    def _by_row_group(self, rows: Rows) -> list[tuple[int, list[bytes]]]:
        """(group, row fields) of rows, by row group (ascending), in the given order
        within a group."""
        count = self.layout.groups
        if len(rows) <= _FEW_ROWS:
            by_group: dict[int, list[bytes]] = {}
            for row in rows.tolist():
                by_group.setdefault(row % count, []).append(row.to_bytes(ROW_BYTES, "big"))
            return sorted(by_group.items())
        groups = rows % count
        return [(group, rows_bytes(rows[groups == group])) for group in np.unique(groups).tolist()]

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
        by_group = self._by_group(documents.ids)
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
                status[p], rows[p] = code, _row(row)
                if code == Status.REPLACED:
                    replaced[p] = _row(old_row)
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
        by_group = self._by_group(ids)
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
                    rows[p] = _row(row)
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
        for group, fields in self._by_row_group(rows):
            _, s, _, w = self.layout.group_keys(group)
            commands.append(("FCALL", functions.FINISH, 2, w, s, *fields))
        return rows_of([row for answer in self.wire.send(commands) for row in answer])

    def _clear_marks(self, rows: Rows) -> None:
        """Drop the ``-`` marks of rows whose table entries are removed."""
        self.wire.send(
            [
                ("HDEL", self.layout.group_keys(group)[3], *fields)
                for group, fields in self._by_row_group(rows)
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

    # Reads ------------------------------------------------------------------------------

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
        by_group = self._by_group(ids)
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
        replies = yield self._batch([*also, *commands], durable)
        also_replies, replies = replies[: len(also)], replies[len(also) :]
        for positions, answers in zip(by_group.values(), replies, strict=True):
            for p, (row, blob, record) in zip(positions, answers, strict=True):
                if row and blob:
                    rows[p] = _row(row)
                    held[int(rows[p])] = (blob, record)
        return rows, self._row_data(held), also_replies

    def rows(self, rows: Rows, *, records: bool = True) -> RowData:
        """The stored data of rows, those still held. One round trip."""
        return run(self.rows_steps(rows, records=records), self.wire)

    def rows_steps(self, rows: Rows, *, records: bool = True) -> Steps[RowData]:
        commands, plan = self._row_commands(rows, records)
        return self._parse_rows(plan, records, (yield self._batch(commands)))

    def _batch(self, commands: Sequence[Command], durable: bool = False) -> Batch:
        return Batch.of(commands, cluster=self.wire.cluster, durable=durable)

    def _row_commands(self, rows: Rows, records: bool) -> tuple[list[Command], list[list[bytes]]]:
        """HMGETs of the fields (and records) of rows, one per group and hash; and the row
        fields of each group, for ``_parse_rows``."""
        commands: list[Command] = []
        plan: list[list[bytes]] = []
        few = len(rows) <= _FEW_ROWS
        unique = np.array(sorted(set(rows.tolist())), dtype=np.int64) if few else np.unique(rows)
        for group, fields in self._by_row_group(unique):
            _, s, r, _ = self.layout.group_keys(group)
            commands.append(("HMGET", s, *fields))
            if records:
                commands.append(("HMGET", r, *fields))
            plan.append(fields)
        return commands, plan

    def _parse_rows(self, plan: list[list[bytes]], records: bool, answers: list[Any]) -> RowData:
        held: dict[int, tuple[bytes, bytes]] = {}
        replies = iter(answers)
        for fields in plan:
            blobs = next(replies)
            values = next(replies) if records else [b""] * len(fields)
            for field, blob, record in zip(fields, blobs, values, strict=True):
                if blob is not None:
                    held[_row(field)] = (blob, record or b"")
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

    def count(self) -> int:
        """Documents held: the sizes of every group's fields hash. One round trip."""
        groups = range(self.layout.groups)
        return sum(self.wire.send([("HLEN", self.layout.group_keys(g)[1]) for g in groups]))

    def search(
        self,
        simhash: SimHashes,
        minhash: MinHashes | None,
        exact: ExactHashes,
        *,
        max_distance: int | None = None,
        threshold: float | None = None,
        methods: Sequence[str] = METHODS,
        records: bool = True,
        also: Sequence[Command] = (),
    ) -> SearchResult:
        """``search_steps``, sent from this thread."""
        steps = self.search_steps(
            simhash,
            minhash,
            exact,
            max_distance=max_distance,
            threshold=threshold,
            methods=methods,
            records=records,
            also=also,
        )
        return run(steps, self.wire)

    def search_steps(
        self,
        simhash: SimHashes,
        minhash: MinHashes | None,
        exact: ExactHashes,
        *,
        max_distance: int | None = None,
        threshold: float | None = None,
        methods: Sequence[str] = METHODS,
        records: bool = True,
        also: Sequence[Command] = (),
    ) -> Steps[SearchResult]:
        """Every live row matching each query by each method asked for. Two round trips.
        ``also``: read-only commands of the caller's, sent in the first round trip (the
        service reads the collection's settings there); their replies in ``also``.

        ``max_distance`` (default the layout's k, at most it) and ``threshold`` (default
        the layout's; a lower one finds only what the bands make candidates, as in
        process) are those of HammingIndex.search_many and LSHIndex.search_many. Cost:
        (1 + k + 1 + b) range lookups a query, then an HMGET per row group of the rows
        found.
        """
        layout = self.layout
        distance = layout.max_distance if max_distance is None else max_distance
        if not 0 <= distance <= layout.max_distance:
            raise ValueError(f"max_distance must be 0 to {layout.max_distance}, not {distance}")
        bar = layout.threshold if threshold is None else threshold
        simhash = np.asarray(simhash, dtype=np.uint64).reshape(-1)
        exact = np.asarray(exact, dtype=np.uint64).reshape(-1, 2)
        count = len(simhash)
        lookups = RangeLookups(count, keyed=self.wire.cluster)
        if "exact" in methods:
            high_words = np.ascontiguousarray(exact[:, 0])
            extra = exact_extra(exact)
            lookups.add(self._tables["exact"], high_words[:, None], None, extra)
        permuted = _NO_KEYS
        if "simhash" in methods and layout.simhash:
            permuted = layout.permute(simhash)
            masks = layout.prefix_masks()
            low = permuted & masks
            lookups.add(self._tables["simhash"], low, low | ~masks, None)
        if "minhash" in methods and layout.minhash:
            assert minhash is not None
            minhash = np.asarray(minhash, dtype=np.uint32).reshape(count, -1)
            lookups.add(self._tables["minhash"], layout.band_keys(minhash), None, None)

        packed = [pack(command) for command in also] + lookups.packed
        keys: list[bytes | str] | None = None
        if self.wire.cluster:
            keys = [*map(key_of, also), *lookups.keys]
        replies = yield Batch(packed, keys)
        also_replies, replies = replies[: len(also)], replies[len(also) :]
        found = dict.fromkeys(METHODS, _NONE)
        for hits in lookups.answers(replies):
            at, rows = hits.queries, hits.rows
            if hits.method == "simhash":
                distances = np.bitwise_count(hits.keys ^ permuted[at, hits.lanes]).astype(np.int64)
                near = distances <= distance
                found["simhash"] = _merge(at[near], rows[near], distances[near].astype(float))
            elif hits.method == "exact":
                same = (hits.keys == exact[at, 0]) & (hits.extra == exact_extra(exact)[at]).all(
                    axis=1
                )
                found["exact"] = _merge(at[same], rows[same], np.ones(int(same.sum())))
            else:
                found["minhash"] = _merge(at, rows, np.zeros(len(rows)))
        if all(not len(f) for f in found.values()):  # most searches of new texts
            return SearchResult(_NONE, _NONE, _NONE, self._no_rows, also_replies)

        commands, plan = self._row_commands(
            np.concatenate([f.rows for f in found.values()]), records
        )
        data = self._parse_rows(plan, records, (yield self._batch(commands)))
        live = {m: f.where(_within(f.rows, data.rows)) if len(f) else f for m, f in found.items()}
        lsh = live["minhash"]
        if len(lsh):
            assert minhash is not None
            stored = data.signatures[data.index(lsh.rows)]
            agree = np.count_nonzero(stored == minhash[lsh.positions], axis=1)
            verified = agree >= min_matches(bar, layout.num_perm)
            scores = agree[verified] / layout.num_perm
            lsh = _best_first(lsh.positions[verified], lsh.rows[verified], scores)
        return SearchResult(live["exact"], live["simhash"], lsh, data, also_replies)


def _pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    """The (field, value) pairs of an HGETALL: a map in RESP3, a flat list in RESP2."""
    if isinstance(reply, dict):
        return list(reply.items())
    return list(zip(reply[::2], reply[1::2], strict=True))


def _at(values: Sequence[str], positions: list[int]) -> list[str]:
    return [values[p] for p in positions]


def _row(field: bytes) -> int:
    return int.from_bytes(field, "big")


def pack_record(document_id: str, payload: bytes) -> bytes:
    """A row's ``r`` value: the id's length (2 bytes), the id (UTF-8), the payload."""
    encoded = document_id.encode("utf-8", "surrogatepass")
    return len(encoded).to_bytes(2, "big") + encoded + payload


def unpack_record(record: bytes) -> tuple[str, bytes]:
    size = int.from_bytes(record[:2], "big")
    return record[2 : 2 + size].decode("utf-8", "surrogatepass"), record[2 + size :]


def _merge(positions: Rows, rows: Rows, values: Floats) -> Found:
    """One Found of (position, row) pairs found in several tables, each pair once."""
    if len(rows) < 2:
        return Found(positions, rows, values)
    pair = (positions << 32) | rows
    if len(rows) <= _FEW_ROWS:  # the first index of each pair, in pair order
        first_of: dict[int, int] = {}
        for index, key in enumerate(pair.tolist()):
            first_of.setdefault(key, index)
        first = np.array([first_of[key] for key in sorted(first_of)], dtype=np.int64)
    else:
        _, first = np.unique(pair, return_index=True)
    return Found(positions[first], rows[first], values[first])


def _within(rows: Rows, held: Rows) -> npt.NDArray[np.bool_]:
    """Which of rows are in ``held`` (sorted): np.isin's answer at a fraction of its
    fixed cost, which a search pays for three methods."""
    if not len(held):
        return np.zeros(len(rows), dtype=bool)
    at = np.minimum(np.searchsorted(held, rows), len(held) - 1)
    found: npt.NDArray[np.bool_] = held[at] == rows
    return found


def _best_first(positions: Rows, rows: Rows, scores: Floats) -> Found:
    order = np.lexsort((rows, -scores, positions))
    return Found(positions[order], rows[order], scores[order])
