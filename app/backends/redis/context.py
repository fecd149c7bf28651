"""What the reads and the insert of one collection over Redis share, with no state of
their own beyond its name: its settings and store as they are now, the retention's
cutoff and the expiry of what it leaves behind, the fingerprints and the search of the
stored documents (the match rule's parts over the store's replies), the pairs within a
batch, the eviction of expired documents and the document budget.

RedisCollection (app/backends/redis/collection.py) owns one and hands it to its Reads
(reads.py) and to each Insertion (insert.py): they call it, and it calls nothing of
theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.redis.records import Held, Record, joined
from app.backends.redis.resolved import Backend, Resolved
from app.backends.redis.retention import (
    EXPIRE,
    NO_RETENTION,
    Mark,
    cutoff_of,
    parse_member,
    time_bytes,
)
from app.backends.redis.store.rows import RowData
from app.backends.redis.store.steps import Steps
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.core.fingerprint import Fingerprints
from app.core.lsh import agreements
from app.core.methods import EXACT, MINHASH, NGRAM, SIMHASH
from app.core.rule import Pairs, Part, combined, in_time, pairs_within_batch, score
from app.core.types import Rows
from app.core.verify import ExactMinHash, candidate_threshold, search_bar
from app.service.times import now_us
from app.service.types import Query


class CollectionContext:
    """One collection's settings, store, retention, search and eviction over Redis (the
    module's docstring): a name and the registry's backend, nothing cached here."""

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self._backend = backend

    def opened(self) -> tuple[Resolved, RedisStore]:
        resolved = self._backend.resolve(self.name)
        return resolved, self._backend.store(resolved)

    def clock_us(self) -> int:
        return now_us(self._backend.clock)

    def cutoff(self, resolved: Resolved) -> int | None:
        return cutoff_of(resolved.config.retention.max_age_us, self.clock_us())

    def expire(self, resolved: Resolved, store: RedisStore) -> Mark:
        """Move the mark up to what the retention expires now (atomic in Redis: every
        process agrees), and answer it with the count of documents held. One round trip,
        for collections with a retention or a limit."""
        expiring = self.expire_command(resolved)
        if expiring is None:
            return NO_RETENTION
        command, cutoff = expiring
        (reply,) = store.wire.send([command], durable=True)
        return self.expired(reply, cutoff)

    def expire_command(self, resolved: Resolved) -> tuple[Command, int | None] | None:
        """The EXPIRE call of ``expire`` (to send with other commands), and the max_age
        cutoff it applies; None for a collection without a retention or a limit."""
        if not resolved.retains and resolved.config.limits.max_documents is None:
            return None
        cutoff = self.cutoff(resolved)
        kept = resolved.config.retention.max_documents or 0
        cut = b"" if cutoff is None else time_bytes(cutoff)
        keys = (resolved.counters_key(), resolved.time_key())
        return ("EVAL", EXPIRE, 2, *keys, cut, kept), cutoff

    @staticmethod
    def expired(reply: Any, cutoff: int | None) -> Mark:
        """The mark of an EXPIRE reply."""
        member, held = reply
        return Mark.of(member, cutoff, int(held))

    def budget(self) -> int | None:
        """NEARDUP_MAX_DOCUMENTS: the documents of every collection together."""
        return self._backend.max_documents

    def held_everywhere(self) -> int:
        return self._backend.held_everywhere()

    def fingerprint_nonempty_of(
        self, resolved: Resolved, texts: Sequence[str]
    ) -> tuple[Fingerprints, npt.NDArray[np.int64]]:
        return resolved.config.fingerprints(list(texts))

    def match_store_steps(
        self,
        resolved: Resolved,
        store: RedisStore,
        fingerprints: Fingerprints,
        query: Query,
        exclude: Rows | None = None,
        also: Sequence[Command] = (),
        stamps: Rows | None = None,
        mark: Mark = NO_RETENTION,
        read_mark: bool = False,
    ) -> Steps[tuple[Pairs, Held, list[Any]]]:
        """Every visible stored document (``mark``, or with ``read_mark`` the mark read in
        the first round trip) matching each of a batch of documents, by any method (two
        round trips; a third for short texts found by the n-gram index alone), within
        since / until, and with ``stamps`` (the times of a batch being inserted) within
        the collection's match window of each, scored and sorted best first. The
        replies to ``also`` (sent in the first round trip) come last."""
        ngram = resolved.ngram
        probes = ngram.probes(fingerprints.shorts) if ngram is not None else None
        probing = probes.commands if probes is not None else []
        read_mark = read_mark and resolved.retains
        reading: list[Command] = [("HGET", resolved.counters_key(), "mark")] if read_mark else []
        found = yield from store.search_steps(
            fingerprints.simhash,
            fingerprints.minhash if resolved.num_perm else None,
            fingerprints.exact,
            max_distance=query.max_distance,
            threshold=candidate_threshold(
                search_bar(resolved.config.minhash.threshold, query.min_similarity),
                resolved.config.verifies_exactly,
            ),
            also=[*also, *reading, *probing],
        )
        if read_mark:
            mark = Mark.of(found.also[len(also)], self.cutoff(resolved))
        also_replies = found.also[: len(also)]
        found = dataclasses.replace(found, also=found.also[len(also) + len(reading) :])
        data = found.rows
        parts: list[Part] = [
            (found.exact.positions, found.exact.rows, EXACT, None),
            (found.simhash.positions, found.simhash.rows, SIMHASH, None),
            (found.minhash.positions, found.minhash.rows, MINHASH, None),
        ]
        if ngram is not None and probes is not None and probes.commands:
            positions, rows = ngram.candidates(probes, found.also)
            missing = np.setdiff1d(rows, data.rows)
            if len(missing):  # found by the n-gram index alone: their records now
                data = joined(data, (yield from store.rows_steps(missing)))
            live = np.isin(rows, data.rows)
            positions, rows = positions[live], rows[live]
            held = Held(data)
            texts = [held.record(i).short for i in data.index(rows).tolist()]
            bar = max(ngram.threshold, query.min_similarity or 0.0)
            positions, rows, similarity = ngram.verified(
                probes, positions, rows, texts, bar, query.same_numbers
            )
            parts.append((positions, rows, NGRAM, similarity))
        held = Held(data)
        positions, rows, bits, exact_similarity = combined([p for p in parts if len(p[1])])
        keep = np.ones(len(rows), dtype=np.bool_)
        if exclude is not None:
            keep &= rows != exclude[positions]
        at = data.index(rows)
        if mark is not NO_RETENTION:
            keep &= mark.visible_many(data.timestamps[at], held.seqs(at))
        keep &= in_time(data.timestamps[at], query.since, query.until)
        window = resolved.config.match_window_us
        if stamps is not None and window is not None:
            keep &= np.abs(data.timestamps[at] - stamps[positions]) <= window
        positions, rows, bits, at = positions[keep], rows[keep], bits[keep], at[keep]
        scored = score(
            resolved.num_perm,
            fingerprints,
            positions,
            rows,
            bits,
            data.simhash[at],
            agreements(data.signatures[at], fingerprints.minhash[positions])
            if resolved.num_perm
            else None,
            held.seqs(at),
            exact_similarity[keep],
            query.min_similarity,
            self._minhash_decision(resolved, query, fingerprints, held, data),
        )
        return scored, held, also_replies

    @staticmethod
    def _minhash_decision(
        resolved: Resolved, query: Query, fingerprints: Fingerprints, held: Held, data: RowData
    ) -> ExactMinHash | None:
        """How the search's MinHash pairs are decided: the stored texts are in the records
        the search read (None: the estimate decides)."""

        def stored_texts(rows: list[int]) -> list[str | None]:
            at = data.index(np.array(rows, dtype=np.int64)).tolist()
            return [held.record(int(one)).text for one in at]

        texts = fingerprints.texts if query.exact_minhash else None
        return resolved.config.minhash_decision(
            query.min_similarity, texts, stored_texts, query.limit
        )

    def match_within(
        self, resolved: Resolved, fingerprints: Fingerprints, stamps: Rows, query: Query
    ) -> Pairs:
        """(later, earlier) documents of one batch matching by the indexes' own rules
        (the shared rule's pairs_within_batch)."""
        parts: list[Part] = []
        for matcher in resolved.matchers:
            pairs = matcher.pairs_within(fingerprints)
            parts.append((pairs.positions, pairs.rows, matcher.bit, pairs.similarity))
        config = resolved.config
        return pairs_within_batch(
            parts,
            fingerprints,
            stamps,
            resolved.num_perm,
            config.match_window_us,
            query.since,
            query.until,
            config.minhash_decision(None, fingerprints.texts),
        )

    def evict(self, resolved: Resolved, store: RedisStore, members: list[bytes]) -> int:
        """Remove the documents of expired time index entries: those whose record's
        seq is the entry's (an id stored again since is another document); then the
        entries, and what each document has beside its fields: its cluster membership,
        its n-gram entries, the counters. Returns the documents removed."""
        if not members:
            return 0
        entries = [parse_member(member) for member in members]
        ids = [document_id for _, _, document_id in entries]
        rows, data = store.lookup(ids)
        held = Held(data)
        doomed: list[tuple[str, Record, int]] = []
        for (_, seq, document_id), row in zip(entries, rows.tolist(), strict=True):
            if row >= 0:
                record = held.record(int(data.index(np.array([row]))[0]))
                if record.seq == seq:
                    doomed.append((document_id, record, row))
        # Only if still under the row read: an id stored again since is another document.
        rows_held = np.array([d[2] for d in doomed], dtype=np.int64)
        removed = (
            store.remove([d[0] for d in doomed], rows_held) if doomed else np.zeros(0, np.int64)
        )
        commands: list[Command] = [("ZREM", resolved.time_key(), *members)]
        evicted = joined = 0
        for (document_id, record, row), gone in zip(doomed, removed.tolist(), strict=True):
            if gone != row:
                continue  # removed, or stored again, meanwhile
            evicted += 1
            joined += record.cluster != record.seq
            commands.append(("ZREM", resolved.members_key(record.cluster), document_id))
            commands += resolved.side_entries("ZREM", [record], np.array([row]))
        counters = resolved.counters_key()
        if evicted:  # (none: the collection may be gone, and its counters with it)
            commands.append(("HINCRBY", counters, "evicted", evicted))
        if joined:
            commands.append(("HINCRBY", counters, "duplicates", -joined))
        store.wire.send(commands, durable=True)
        return evicted
