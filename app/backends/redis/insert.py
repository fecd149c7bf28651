"""An insert on the Redis backend (a batch, from RedisCollection.insert): the insert
pipeline (app/service/insert.py) over the store, with its own round trips: the ids held
(the retention's mark and the seqs read beside them), matching against the store, the
stored passages, the writes in their order, and duplicate_of once the clusters are
written (docs/redis.md, "An insert"). Handles are sequence numbers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.redis.clusters import oldest_members
from app.backends.redis.context import CollectionContext
from app.backends.redis.passage_reads import passage_steps
from app.backends.redis.passages import CANDIDATES
from app.backends.redis.records import Held, Record, digest
from app.backends.redis.resolved import Resolved
from app.backends.redis.retention import NO_RETENTION, time_member
from app.backends.redis.store.steps import run
from app.backends.redis.store.store import NewDocuments, RedisStore, Status, Written
from app.backends.redis.store.wire import Command
from app.collection_config import CollectionConfig
from app.core.fingerprint import Fingerprints
from app.core.rule import Pairs
from app.core.types import Rows
from app.errors import DocumentExists, InsufficientStorage, StorageUnavailable
from app.service import decide, insert
from app.service.insert_backend import Call, Pending, SentAgain
from app.service.passages import CONTAINED, Found, PassageQuery
from app.service.times import MICROSECONDS
from app.service.types import InsertOptions, InsertResult, NewDocument, Query, Refused


def insert_documents(
    collection: CollectionContext,
    resolved: Resolved,
    store: RedisStore,
    documents: Sequence[NewDocument],
    options: InsertOptions,
) -> list[InsertResult | Refused]:
    """Insert documents in order (under the collection's write lock), as the embedded
    Collection does: the same answers, the same refusals at their positions."""
    call = insert.prepare(
        documents,
        options,
        lambda texts: collection.fingerprint_nonempty_of(resolved, texts),
        collection.clock_us,
        resolved.config.passages,
    )
    insert.apply(call, Insertion(collection, resolved, store, call))
    return insert.answers(call)


class Insertion:
    """One insert call: the pipeline's backend (app/service/insert_backend.py) over the
    store, then the writes and the answers' duplicate_of."""

    passage_candidates = CANDIDATES

    def __init__(
        self, collection: CollectionContext, resolved: Resolved, store: RedisStore, call: Call
    ) -> None:
        self.collection = collection
        self.resolved = resolved
        self.store = store
        self.call = call
        # Position -> (cluster, its name, whether its first document is known live), for
        # the answers with matches: their duplicate_of is found once everything is written.
        self.clusters: dict[int, tuple[int, str, bool]] = {}
        # Position -> the record of the document a replacement replaces, and its time.
        self.old_records: dict[int, Record] = {}
        self.old_times: dict[int, int] = {}
        self.mark = NO_RETENTION  # what the retention expired when the insert began
        self.by_budget = False  # NEARDUP_MAX_DOCUMENTS, not the collection's limit, binds
        self.first_seq = 0  # the seqs of this insert's documents start here
        # What the search of the store found: its pairs (store rows), the records, where
        # each seq's record is, the seqs whose document is live, the clusters' names.
        self._found = Pairs.empty()
        self._held: Held | None = None
        self._at_of: dict[int, int] = {}
        self._live: set[int] = set()
        self._cluster_names: dict[int, str] = {}

    @property
    def config(self) -> CollectionConfig:
        return self.resolved.config

    def held(
        self, call: Call, candidates: list[int]
    ) -> tuple[dict[int, int], dict[int, SentAgain]]:
        """(position -> row held under its id, for a replacement), (position -> stored
        record of a live id sent again, and whether its content is the same)."""
        if not candidates:
            return {}, {}
        # One round trip: the retention applied (the mark), seqs for every candidate
        # (WAITed like the documents: a failover must not hand out a seq again), the ids.
        counting: list[Command] = [
            ("HINCRBY", self.resolved.counters_key(), "seq", len(candidates))
        ]
        expiring = self.collection.expire_command(self.resolved)
        if expiring is not None:
            counting.append(expiring[0])
        rows, data, replies = self.store.lookup_also(
            [self.call.ids[p] for p in candidates], counting, durable=True
        )
        self.first_seq = int(replies[0]) - len(candidates) + 1
        if expiring is not None:
            self.mark = self.collection.expired(replies[1], expiring[1])
        held = Held(data)
        old_rows: dict[int, int] = {}
        again: dict[int, SentAgain] = {}
        expired: list[bytes] = []
        at_of = data.index(rows[rows >= 0])
        for position, at in zip(
            [p for p, row in zip(candidates, rows.tolist(), strict=True) if row >= 0],
            at_of.tolist(),
            strict=True,
        ):
            record = held.record(at)
            stamp = int(data.timestamps[at])
            if not self.mark.visible(stamp, record.seq):
                # An expired document's id is free again: evicted now, before the insert.
                expired.append(time_member(stamp, record.seq, self.call.ids[position]))
                continue
            if call.options.replace:
                old_rows[position] = int(data.rows[at])
                self.old_records[position] = record
                self.old_times[position] = stamp
                continue
            same_text = bool((data.exact[at] == call.exact(position)).all())
            again[position] = (
                record,
                same_text,
                record.metadata == self.call.documents[position].metadata,
            )
        self.collection.evict(self.resolved, self.store, expired)
        return old_rows, again

    def match(self, fingerprints: Fingerprints, query: Query, exclude: Rows, stamps: Rows) -> Pairs:
        """The store's matches (two or three round trips), their rows turned into seqs."""
        matching = self.collection.match_store_steps(
            self.resolved, self.store, fingerprints, query, exclude, stamps=stamps, mark=self.mark
        )
        found, held, _ = run(matching, self.store.wire)
        self._found, self._held = found, held
        self._at_of = dict(
            zip(found.ages.tolist(), held.data.index(found.rows).tolist(), strict=True)
        )
        # Clusters whose first document is live: found by the search, or of this batch.
        seqs = held.seqs(np.arange(len(held.data.rows)))
        self._live = set(seqs[self.mark.visible_many(held.data.timestamps, seqs)].tolist())
        return dataclasses.replace(found, rows=found.ages)

    def match_within(self, fingerprints: Fingerprints, stamps: Rows, query: Query) -> Pairs:
        return self.collection.match_within(self.resolved, fingerprints, stamps, query)

    def expired_on_arrival(self, stamps: Rows) -> npt.NDArray[np.bool_]:
        return np.array(
            [self.mark.expired_on_arrival(int(s)) for s in stamps.tolist()], dtype=np.bool_
        )

    def room(self, new: int) -> tuple[int, bool]:
        """As in Collection; between processes a limit can be passed by what they insert
        at the same moment."""
        adds, wanted = decide.wanted_room(new, self.mark.held, self.resolved.config)
        granted = wanted
        budget = self.collection.budget()
        if budget is not None and wanted:
            everywhere = self.collection.held_everywhere()
            granted = max(0, min(wanted, budget - everywhere))
            # The service's budget, not the collection's limit, refuses past this point.
            self.by_budget = granted < wanted
        return granted, granted >= adds

    def refusal(self, added: int) -> InsufficientStorage:
        if self.by_budget:
            return decide.service_full(self.collection.budget())
        return decide.collection_full(self.resolved.name, self.resolved.config.limits.max_documents)

    def look_up_passages(self, keys: list[npt.NDArray[np.uint64]]) -> None:
        """Nothing ahead: the lookup is ``stored_passages``' first round trip."""

    def stored_passages(
        self, asked: Sequence[PassageQuery], query: Query, stamps: Rows
    ) -> list[list[Found]]:
        """Two round trips for the batch: only what may be a containment (CONTAINED) and
        each document's stored matches."""
        near = [self._found.rows[start:end] for start, end in self._found.spans(len(asked))]
        steps = passage_steps(
            self.resolved,
            self.store,
            asked,
            query,
            self.mark,
            None,
            stamps.tolist(),
            bar=CONTAINED,
            near=near,
        )
        return run(steps, self.store.wire) or [[] for _ in asked]

    def first_handle(self) -> int:
        return self.first_seq

    def _record(self, seq: int) -> Record:
        assert self._held is not None
        return self._held.record(self._at_of[seq])

    def id_of(self, handle: int) -> str | None:
        assert self._held is not None
        return self._held.data.ids[self._at_of[handle]]

    def cluster_of(self, handle: int) -> int:
        record = self._record(handle)
        self._cluster_names[record.cluster] = record.cluster_name
        return record.cluster

    def cluster_name(self, cluster: int) -> str | None:
        return self._cluster_names[cluster]

    def oldest_member(self, position: int, cluster: int, pending: Pending) -> str | None:
        """Found once the clusters are written (_oldest): None until then."""
        stored = pending.first <= cluster < pending.first + len(pending)
        name = self._cluster_names[cluster] if cluster < pending.first else pending.id_of(cluster)
        self.clusters[position] = (cluster, name or "", stored or cluster in self._live)
        return None

    def retry_answer(self, document_id: str, stored: Any) -> InsertResult:
        record: Record = stored
        return decide.retry_answer(
            document_id, record.cluster_name, self.resolved.retry_methods(record)
        )

    def begin_writing(self, call: Call, pending: Pending) -> bool:
        """Nothing: the writes are round trips of ``publish``, the clusters' first (a
        failure before them stores nothing)."""
        return False

    def publish(self, call: Call, pending: Pending | None) -> None:
        """The writes (_write); the retention's count applied after them: the batch was
        matched against the documents held before it and each other."""
        self._write(pending, call.retried, call.options.replace)
        if pending and self.resolved.retains:
            self.collection.expire(self.resolved, self.store)

    def _write(self, pending: Pending | None, retried: dict[int, Record], replace: bool) -> None:
        """The clusters' members, then the documents (the store's three round trips;
        retries go through it too, so that a first attempt that died before its table
        entries were all written is finished), then the counters; then the answers'
        duplicate_of."""
        resolved, store = self.resolved, self.store
        stored = [] if pending is None else pending.positions
        positions = stored + sorted(retried)
        new_records: dict[int, Record] = {}
        commands: list[Command] = []
        for k, position in enumerate(stored):
            assert pending is not None
            seq, cluster = pending.first + k, pending.clusters[k]
            document = self.call.documents[position]
            record = Record(
                seq,
                self.call.now / MICROSECONDS,
                cluster,
                pending.cluster_names[k],
                document.metadata,
                document.text if resolved.config.keeps_text else None,
                self._short(position),
                document.host_key(),
            )
            new_records[position] = record
            document_id = self.call.ids[position]
            stamp = int(self.call.stamps[position])
            commands.append(("ZADD", resolved.members_key(cluster), seq, document_id))
            commands.append(("ZADD", resolved.time_key(), 0, time_member(stamp, seq, document_id)))
        if positions:
            at = self.call.fingerprint_at[positions]
            batch = NewDocuments(
                ids=[self.call.ids[p] for p in positions],
                simhash=self.call.fingerprints.simhash[at],
                minhash=self.call.fingerprints.minhash[at],
                exact=self.call.fingerprints.exact[at],
                timestamps=self.call.stamps[positions],
                digests=[
                    digest(self.call.exact(p), self.call.documents[p].metadata)
                    # A replacement replaces even the same content (a new row, as in the
                    # embedded service): its digest is its own.
                    + (new_records[p].seq.to_bytes(8, "big") if replace else b"")
                    for p in positions
                ],
                records=[
                    new_records[p].pack() if p in new_records else retried[p].pack()
                    for p in positions
                ],
            )
            # A replacement leaves the cluster its old document was in.
            leave: list[Command] = []
            for position, old in self.old_records.items():
                document_id = self.call.ids[position]
                leave.append(("ZREM", resolved.members_key(old.cluster), document_id))
                old_entry = time_member(self.old_times[position], old.seq, document_id)
                leave.append(("ZREM", resolved.time_key(), old_entry))
            store.wire.send(leave + commands, durable=True)
            written = store.insert(batch, replace=replace)
            if resolved.ngram is not None or resolved.passages is not None:
                entries = side_writes(
                    resolved,
                    positions,
                    written,
                    (new_records, self.call.passage_keys),
                    retried,
                    self.old_records,
                )
                store.wire.send(entries, durable=True)
            self._settle(positions, written, new_records, retried)
        self._oldest()

    def _short(self, position: int) -> str | None:
        """The normalised text of a short document (the n-gram index's), else None."""
        shorts = self.call.fingerprints.shorts
        return None if shorts is None else shorts[int(self.call.fingerprint_at[position])]

    def _settle(
        self,
        positions: list[int],
        written: Written,
        new_records: dict[int, Record],
        retried: dict[int, Record],
    ) -> None:
        """What the store did with each document: a new one counts as a duplicate when
        it joined a cluster; one another process stored meanwhile is a retry (same
        content) or a conflict."""
        joined = 0
        raced: list[int] = []
        unstored: list[bytes] = []  # time index entries of documents not stored
        for position, status in zip(positions, written.status.tolist(), strict=True):
            record = new_records.get(position)
            if record is not None and status in (Status.SAME, Status.OTHER):
                stamp = int(self.call.stamps[position])
                unstored.append(time_member(stamp, record.seq, self.call.ids[position]))
            if status in (Status.INSERTED, Status.REPLACED):
                if record is not None and record.cluster != record.seq:
                    joined += 1
                old = self.old_records.get(position)
                if status == Status.REPLACED and old is not None and old.cluster != old.seq:
                    joined -= 1
            elif status == Status.OTHER and position not in retried:
                self.call.results[position] = None
                self.call.refused[position] = DocumentExists(self.call.ids[position])
            elif record is not None:  # SAME: stored by another attempt meanwhile
                raced.append(position)
        commands: list[Command] = []
        if joined:
            commands.append(("HINCRBY", self.resolved.counters_key(), "duplicates", joined))
        if unstored:
            commands.append(("ZREM", self.resolved.time_key(), *unstored))
        self.store.wire.send(commands)
        if raced:
            rows, data = self.store.lookup([self.call.ids[p] for p in raced])
            held = Held(data)
            for position, row in zip(raced, rows.tolist(), strict=True):
                self.call.results[position] = None
                self.clusters.pop(position, None)
                if row < 0:
                    self.call.refused[position] = StorageUnavailable(
                        f"document {self.call.ids[position]!r} changed while it was inserted; "
                        "send it again"
                    )
                    continue
                retried[position] = held.record(int(data.index(np.array([row]))[0]))

    def _oldest(self) -> None:
        """duplicate_of of each answer with matches: the oldest live member of its
        cluster (clusters.oldest_members)."""
        oldest = oldest_members(self.store, self.resolved, self.mark, self.clusters.values())
        for position, (cluster, _, _) in self.clusters.items():
            result = self.call.results[position]
            if isinstance(result, InsertResult):
                self.call.results[position] = dataclasses.replace(
                    result, duplicate_of=oldest.get(cluster)
                )


def side_writes(
    resolved: Resolved,
    positions: list[int],
    written: Written,
    new: tuple[dict[int, Record], list[npt.NDArray[np.uint64]] | None],
    retried: dict[int, Record],
    old_records: dict[int, Record],
) -> list[Command]:
    """The n-gram and passage entries of the documents an insert stored (and of retries:
    their first attempt may have died before writing them; an entry written twice is
    one), and the removal of those of replaced documents (Resolved.side_entries). Sent
    after the store's insert: a row is in a table only once its fields are written.
    ``new``: the new documents' records by position, and the call's passage fingerprints
    of each position (prepare's; a retry's record is fingerprinted again: its text may
    differ from the one sent, the same once normalised)."""
    new_records, passage_keys = new
    adds: tuple[list[Record], list[int]] = ([], [])
    add_keys: list[npt.NDArray[np.uint64] | None] = []
    removes: tuple[list[Record], list[int]] = ([], [])
    for i, position in enumerate(positions):
        status = int(written.status[i])
        record = new_records.get(position) or retried.get(position)
        stored = status in (Status.INSERTED, Status.REPLACED) or (
            status == Status.SAME and position in retried
        )
        if stored and record is not None:
            adds[0].append(record)
            adds[1].append(int(written.rows[i]))
            made = None if passage_keys is None else passage_keys[position]
            add_keys.append(made if position in new_records else None)
        old = old_records.get(position)
        if status == Status.REPLACED and old is not None:
            removes[0].append(old)
            removes[1].append(int(written.replaced[i]))
    commands = resolved.side_entries("ZADD", adds[0], np.array(adds[1], dtype=np.int64), add_keys)
    return commands + resolved.side_entries(
        "ZREM", removes[0], np.array(removes[1], dtype=np.int64)
    )
