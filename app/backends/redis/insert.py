"""An insert on the Redis backend (a batch, from RedisCollection.insert): refusals,
retries and conflicts, matching against the store and within the batch, clusters,
retention and limits, the writes in their order, and the answers, as the embedded
Collection gives them (docs/redis.md, "An insert")."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.backends.redis.clusters import oldest_members
from app.backends.redis.passage_reads import insert_passages, insert_relations
from app.backends.redis.records import Held, Record, digest
from app.backends.redis.resolved import InsertHost, Resolved
from app.backends.redis.retention import NO_RETENTION, time_member
from app.backends.redis.store.steps import run
from app.backends.redis.store.store import NewDocuments, RedisStore, Status, Written
from app.backends.redis.store.wire import Command
from app.core.rule import METHODS_OF_BITS, Pairs
from app.errors import DocumentExists, InsufficientStorage, NeardupError, StorageUnavailable
from app.service import decide
from app.service.times import MICROSECONDS
from app.service.types import (
    INSERT_MATCH_LIMIT,
    InsertOptions,
    InsertResult,
    Match,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    new_document_id,
)


@dataclass(slots=True)
class Pending:
    """A document of a batch that will be stored."""

    position: int
    seq: int
    cluster: int
    cluster_name: str


class Insertion:
    """One insert call: refusals, retries, matching, clusters, the writes, the answers."""

    def __init__(
        self,
        collection: InsertHost,
        resolved: Resolved,
        store: RedisStore,
        documents: Sequence[NewDocument],
    ) -> None:
        self.collection = collection
        self.resolved = resolved
        self.store = store
        self.documents = documents
        self.ids = [document.id or new_document_id() for document in documents]
        self.fingerprints, kept = collection.fingerprint_nonempty_of(
            resolved, [document.text for document in documents]
        )
        self.now = collection.clock_us()
        self.stamps = np.array(
            [self.now if d.timestamp is None else d.timestamp for d in documents], dtype=np.int64
        )
        self.fingerprint_at = np.full(len(documents), -1, dtype=np.int64)
        self.fingerprint_at[kept] = np.arange(len(kept))
        self.results: list[InsertResult | Refused | None] = [None] * len(documents)
        self.refused: dict[int, NeardupError] = {}
        # Position -> (cluster, its name, whether its first document is known live), for
        # the answers with matches: their duplicate_of is found once everything is written.
        self.clusters: dict[int, tuple[int, str, bool]] = {}
        # Position -> the record of the document a replacement replaces, and its time.
        self.old_records: dict[int, Record] = {}
        self.old_times: dict[int, int] = {}
        self.mark = NO_RETENTION  # what the retention expired when the insert began
        self.by_budget = False  # NEARDUP_MAX_DOCUMENTS, not the collection's limit, binds
        self.first_seq = 0  # the seqs of this insert's documents start here

    def run(self, options: InsertOptions) -> list[InsertResult | Refused]:
        self.refused = decide.refused_within(self.ids, self.fingerprint_at)
        candidates = [p for p in range(len(self.ids)) if p not in self.refused]
        old_rows, retried = self._held_ids(candidates, options.replace)
        accepted = [p for p in candidates if p not in retried and p not in self.refused]
        pending: list[Pending] = []
        if accepted:
            query = Query(limit=INSERT_MATCH_LIMIT, since=options.since, until=options.until)
            pending = self._match(accepted, old_rows, options.on_duplicate, query)
        self._write(pending, retried, options.replace)
        if pending and self.resolved.retains:
            # The count is applied after each request: the batch was matched against
            # the documents held before it and each other.
            self.collection.expire(self.resolved, self.store)
        for position, error in self.refused.items():
            given = self.documents[position].id
            self.results[position] = Refused(self.ids[position] if given else None, error)
        return [result for result in self.results if result is not None]

    def _exact(self, position: int) -> npt.NDArray[np.uint64]:
        exact: npt.NDArray[np.uint64] = self.fingerprints.exact[self.fingerprint_at[position]]
        return exact

    def _held_ids(
        self, candidates: list[int], replace: bool
    ) -> tuple[dict[int, int], dict[int, Record]]:
        """(position -> row held under its id, for a replacement), (position -> stored
        record of the documents sent again: retries); conflicts are refused."""
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
            [self.ids[p] for p in candidates], counting, durable=True
        )
        self.first_seq = int(replies[0]) - len(candidates) + 1
        if expiring is not None:
            self.mark = self.collection.expired(replies[1], expiring[1])
        held = Held(data)
        old_rows: dict[int, int] = {}
        retried: dict[int, Record] = {}
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
                expired.append(time_member(stamp, record.seq, self.ids[position]))
                continue
            if replace:
                old_rows[position] = int(data.rows[at])
                self.old_records[position] = record
                self.old_times[position] = stamp
                continue
            conflict = decide.sent_again(
                self.ids[position],
                bool((data.exact[at] == self._exact(position)).all()),
                record.metadata == self.documents[position].metadata,
            )
            if conflict is None:
                retried[position] = record
            else:
                self.refused[position] = conflict
        self.collection.evict(self.resolved, self.store, expired)
        return old_rows, retried

    def _room(self, new: int) -> tuple[int, bool]:
        """(granted, unlimited) for a batch that may add ``new`` documents: at most
        ``granted`` may be stored, or any number when ``unlimited`` (the retention
        expires one for each past that point, so they add nothing), as in Collection.
        Between processes a limit can be passed by what they insert at the same moment."""
        adds, wanted = decide.wanted_room(new, self.mark.held, self.resolved.config)
        granted = wanted
        budget = self.collection.budget()
        if budget is not None and wanted:
            everywhere = self.collection.held_everywhere()
            granted = max(0, min(wanted, budget - everywhere))
            # The service's budget, not the collection's limit, refuses past this point.
            self.by_budget = granted < wanted
        return granted, granted >= adds

    def _refusal(self) -> InsufficientStorage:
        if self.by_budget:
            return decide.service_full(self.collection.budget())
        return decide.collection_full(self.resolved.name, self.resolved.config.limits.max_documents)

    def _retry_result(self, position: int, record: Record) -> InsertResult:
        return decide.retry_answer(
            self.ids[position], record.cluster_name, self.resolved.retry_methods(record)
        )

    def _match(
        self,
        accepted: list[int],
        old_rows: dict[int, int],
        on_duplicate: OnDuplicate,
        query: Query,
    ) -> list[Pending]:
        """Each accepted document matched against the store and the earlier accepted
        documents of the batch; its answer, and the documents to store."""
        fingerprints = self.fingerprints.select(self.fingerprint_at[accepted])
        stamps = self.stamps[accepted]
        exclude = np.array([old_rows.get(p, -1) for p in accepted], dtype=np.int64)
        first_seq = self.first_seq
        matching = self.collection.match_store_steps(
            self.resolved, self.store, fingerprints, query, exclude, stamps=stamps, mark=self.mark
        )
        from_store, held, _ = run(matching, self.store.wire)
        if len(accepted) > 1:
            within = self.collection.match_within(self.resolved, fingerprints, stamps, query)
        else:
            within = Pairs.empty()
        store_spans = from_store.spans(len(accepted))
        batch_spans = within.spans(len(accepted))
        stored_at = held.data.index(from_store.rows)
        pending: list[Pending] = []
        pending_of: dict[int, Pending] = {}  # index in accepted -> its pending document
        # Clusters whose first document is live: found by the search, or of this batch.
        seqs = held.seqs(np.arange(len(held.data.rows)))
        live = set(seqs[self.mark.visible_many(held.data.timestamps, seqs)].tolist())
        expired = [self.mark.expired_on_arrival(int(self.stamps[p])) for p in accepted]
        new = sum(p not in old_rows and not e for p, e in zip(accepted, expired, strict=True))
        granted, unlimited = self._room(new)
        admission = decide.Admission(on_duplicate, granted, unlimited)
        shared = insert_passages(
            self.resolved,
            self.store,
            [self.documents[p].text for p in accepted],
            [int(h) for h in fingerprints.simhash.tolist()],
            [int(t) for t in stamps.tolist()],
            exclude.tolist(),
            query,
            self.mark,
            [from_store.rows[start:end] for start, end in store_spans],
            [self.documents[p].host_key() for p in accepted],
        )
        # (A document being replaced still counts: the embedded service answers while
        # the old version is live, and names it when it is its cluster's first.)
        for i, position in enumerate(accepted):
            start, end = store_spans[i]
            candidates: list[tuple[float, int, int, str, int, tuple[int, str]]] = []
            for j in range(start, min(end, start + INSERT_MATCH_LIMIT)):
                record = held.record(int(stored_at[j]))
                candidates.append(
                    (
                        float(from_store.similarity[j]),
                        int(from_store.distances[j]),
                        record.seq,
                        held.data.ids[int(stored_at[j])],
                        int(from_store.methods[j]),
                        (record.cluster, record.cluster_name),
                    )
                )
            start, end = batch_spans[i]
            for j in range(start, end):
                earlier = pending_of.get(int(within.rows[j]))
                if earlier is None:
                    continue  # skipped: it is not stored
                candidates.append(
                    (
                        float(within.similarity[j]),
                        int(within.distances[j]),
                        earlier.seq,
                        self.ids[earlier.position],
                        int(within.methods[j]),
                        (earlier.cluster, earlier.cluster_name),
                    )
                )
            candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
            candidates = candidates[:INSERT_MATCH_LIMIT]
            matches = [Match(c[3], c[0], c[1], METHODS_OF_BITS[c[4]]) for c in candidates]
            fate = admission.decide(bool(matches), position in old_rows, expired[i])
            if fate is decide.Fate.REFUSED:
                self.refused[position] = self._refusal()
                continue
            skipped = fate is decide.Fate.SKIPPED
            cluster = candidates[0][5] if candidates else None
            if not skipped:
                seq = first_seq + i
                cluster = cluster or (seq, self.ids[position])
                entry = Pending(position, seq, cluster[0], cluster[1])
                pending.append(entry)
                pending_of[i] = entry
                live.add(seq)
            assert cluster is not None or skipped
            if matches and cluster is not None:
                self.clusters[position] = (cluster[0], cluster[1], cluster[0] in live)
            simhash, stamp = int(fingerprints.simhash[i]), int(stamps[i])
            matches, contains, contained_in = insert_relations(
                shared, i, self.ids[position], simhash, stamp, not skipped, matches
            )
            self.results[position] = InsertResult(
                id=self.ids[position],
                inserted=not skipped,
                duplicate_of=None,  # filled in once the clusters are written (_oldest)
                cluster_id=cluster[1] if cluster is not None else self.ids[position],
                matches=matches,
                replaced=position in old_rows and not skipped,
                contains=contains,
                contained_in=contained_in,
            )
        return pending

    def _write(self, pending: list[Pending], retried: dict[int, Record], replace: bool) -> None:
        """The clusters' members, then the documents (the store's three round trips;
        retries go through it too, so that a first attempt that died before its table
        entries were all written is finished), then the counters; then the answers'
        duplicate_of."""
        resolved, store = self.resolved, self.store
        positions = [p.position for p in pending] + sorted(retried)
        new_records: dict[int, Record] = {}
        commands: list[Command] = []
        for entry in pending:
            document = self.documents[entry.position]
            record = Record(
                entry.seq,
                self.now / MICROSECONDS,
                entry.cluster,
                entry.cluster_name,
                document.metadata,
                document.text if resolved.config.keeps_text else None,
                self._short(entry.position),
                document.host_key(),
            )
            new_records[entry.position] = record
            document_id = self.ids[entry.position]
            stamp = int(self.stamps[entry.position])
            commands.append(("ZADD", resolved.members_key(entry.cluster), entry.seq, document_id))
            commands.append(
                ("ZADD", resolved.time_key(), 0, time_member(stamp, entry.seq, document_id))
            )
        if positions:
            at = self.fingerprint_at[positions]
            batch = NewDocuments(
                ids=[self.ids[p] for p in positions],
                simhash=self.fingerprints.simhash[at],
                minhash=self.fingerprints.minhash[at],
                exact=self.fingerprints.exact[at],
                timestamps=self.stamps[positions],
                digests=[
                    digest(self._exact(p), self.documents[p].metadata)
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
                document_id = self.ids[position]
                leave.append(("ZREM", resolved.members_key(old.cluster), document_id))
                old_entry = time_member(self.old_times[position], old.seq, document_id)
                leave.append(("ZREM", resolved.time_key(), old_entry))
            store.wire.send(leave + commands, durable=True)
            written = store.insert(batch, replace=replace)
            if resolved.ngram is not None or resolved.passages is not None:
                beside = side_writes(
                    resolved, positions, written, new_records, retried, self.old_records
                )
                store.wire.send(beside, durable=True)
            self._settle(positions, written, new_records, retried)
        for position, record in retried.items():
            if position not in self.refused and self.results[position] is None:
                self.results[position] = self._retry_result(position, record)
        self._oldest()

    def _short(self, position: int) -> str | None:
        """The normalised text of a short document (the n-gram index's), else None."""
        shorts = self.fingerprints.shorts
        return None if shorts is None else shorts[int(self.fingerprint_at[position])]

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
                stamp = int(self.stamps[position])
                unstored.append(time_member(stamp, record.seq, self.ids[position]))
            if status in (Status.INSERTED, Status.REPLACED):
                if record is not None and record.cluster != record.seq:
                    joined += 1
                old = self.old_records.get(position)
                if status == Status.REPLACED and old is not None and old.cluster != old.seq:
                    joined -= 1
            elif status == Status.OTHER and position not in retried:
                self.results[position] = None
                self.refused[position] = DocumentExists(self.ids[position])
            elif record is not None:  # SAME: stored by another attempt meanwhile
                raced.append(position)
        commands: list[Command] = []
        if joined:
            commands.append(("HINCRBY", self.resolved.counters_key(), "duplicates", joined))
        if unstored:
            commands.append(("ZREM", self.resolved.time_key(), *unstored))
        self.store.wire.send(commands)
        if raced:
            rows, data = self.store.lookup([self.ids[p] for p in raced])
            held = Held(data)
            for position, row in zip(raced, rows.tolist(), strict=True):
                self.results[position] = None
                self.clusters.pop(position, None)
                if row < 0:
                    self.refused[position] = StorageUnavailable(
                        f"document {self.ids[position]!r} changed while it was inserted; "
                        "send it again"
                    )
                    continue
                retried[position] = held.record(int(data.index(np.array([row]))[0]))

    def _oldest(self) -> None:
        """duplicate_of of each answer with matches: the oldest live member of its
        cluster (clusters.oldest_members)."""
        oldest = oldest_members(self.store, self.resolved, self.mark, self.clusters.values())
        for position, (cluster, _, _) in self.clusters.items():
            result = self.results[position]
            if isinstance(result, InsertResult):
                self.results[position] = dataclasses.replace(
                    result, duplicate_of=oldest.get(cluster)
                )


def side_writes(
    resolved: Resolved,
    positions: list[int],
    written: Written,
    new_records: dict[int, Record],
    retried: dict[int, Record],
    old_records: dict[int, Record],
) -> list[Command]:
    """The n-gram and passage entries of the documents an insert stored (and of retries:
    their first attempt may have died before writing them; an entry written twice is
    one), and the removal of those of replaced documents (Resolved.side_entries). Sent
    after the store's insert: a row is in a table only once its fields are written."""
    adds: tuple[list[Record], list[int]] = ([], [])
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
        old = old_records.get(position)
        if status == Status.REPLACED and old is not None:
            removes[0].append(old)
            removes[1].append(int(written.replaced[i]))
    commands = resolved.side_entries("ZADD", adds[0], np.array(adds[1], dtype=np.int64))
    return commands + resolved.side_entries(
        "ZREM", removes[0], np.array(removes[1], dtype=np.int64)
    )
