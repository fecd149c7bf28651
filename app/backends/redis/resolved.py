"""A Redis collection as stored now (Resolved) and what a collection asks of its registry
(Backend): the types RedisCollection, CollectionContext, Insertion and Reads share, so
that none imports another's module for them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.backends.redis.failures import Failures
from app.backends.redis.ngram import RedisNgram
from app.backends.redis.passages import RedisPassages
from app.backends.redis.records import Record
from app.backends.redis.store.grams import GramTable
from app.backends.redis.store.layout import DEFAULT_SHARD_BITS, Layout
from app.backends.redis.store.store import RedisStore
from app.backends.redis.store.wire import Command
from app.collection_config import CollectionConfig
from app.core.methods import EXACT, METHODS_OF_BITS, MINHASH, NGRAM, SIMHASH
from app.core.types import Rows
from app.service.indexes import (
    DocumentIndex,
    ExactMatcher,
    MinHashMatcher,
    NgramMatcher,
    SimHashMatcher,
)
from app.service.times import Clock


@dataclass(frozen=True)
class Resolved:
    """A collection as stored now: its settings and where its keys are."""

    name: str
    key: str  # the collection's name in its Redis keys: name~epoch (a new one per create)
    config: CollectionConfig
    layout: Layout
    matchers: list[DocumentIndex] = field(compare=False)
    ngram: RedisNgram | None = field(compare=False)
    passages: RedisPassages | None = field(compare=False)
    # Had a retention once: what it expired stays expired (the mark is kept and read)
    # even when the retention is gone.
    marked: bool = False
    # Passage entries keyed by spread fingerprints (RedisPassages): collections created
    # before that keep the raw ones, so that their entries are still found.
    spread_passages: bool = True

    @staticmethod
    def of(
        name: str,
        key: str,
        config: CollectionConfig,
        namespace: str,
        marked: bool = False,
        shard_bits: int = DEFAULT_SHARD_BITS,
        spread_passages: bool = True,
    ) -> Resolved:
        layout = Layout(
            key,
            namespace=namespace,
            shard_bits=shard_bits,
            simhash=config.simhash.enabled,
            max_distance=config.simhash.max_distance,
            minhash=config.minhash.enabled,
            num_perm=config.minhash.num_perm,
            threshold=config.minhash.threshold,
        )
        matchers: list[DocumentIndex] = [ExactMatcher()]
        if config.simhash.enabled:
            matchers.append(SimHashMatcher(config.simhash.max_distance))
        if config.minhash.enabled:
            minhash = config.minhash
            matchers.append(
                MinHashMatcher(minhash.threshold, minhash.num_perm, config.verifies_exactly)
            )
        ngram = None
        if config.ngram.enabled:
            settings = config.ngram
            matchers.append(
                NgramMatcher(
                    settings.threshold, settings.size, settings.cjk_size, settings.same_numbers
                )
            )
            # Beside the store's tables: the same hash tags, so the same slots.
            table = GramTable(f"{{{namespace}:{key}:t".encode(), layout.shard_bits)
            ngram = RedisNgram(settings, table)
        passages = None
        if config.passages.enabled:
            table = GramTable(f"{{{namespace}:{key}:t".encode(), layout.shard_bits, b"p")
            passages = RedisPassages(config.passages, table, spread_passages)
        return Resolved(
            name, key, config, layout, matchers, ngram, passages, marked, spread_passages
        )

    @property
    def num_perm(self) -> int:
        return self.config.minhash.num_perm if self.config.minhash.enabled else 0

    def counters_key(self) -> bytes:
        """A hash beside the layout's (same slot): seq, duplicates."""
        return self.layout.meta_key() + b"c"

    def time_key(self) -> bytes:
        """The time index (app/backends/redis/retention.py), in the counters' slot."""
        return self.layout.meta_key() + b"t"

    @property
    def retains(self) -> bool:
        """Whether reads and writes must heed a retention mark."""
        return self.config.retention.enabled or self.marked

    def members_key(self, cluster: int) -> bytes:
        return f"{{{self.layout.namespace}:{self.key}:c{cluster}}}".encode()

    def side_entries(
        self,
        command: str,
        records: Sequence[Record],
        rows: Rows,
        passage_keys: Sequence[npt.NDArray[np.uint64] | None] | None = None,
    ) -> list[Command]:
        """``ZADD`` (or ``ZREM``) of what the documents of these records hold beside the
        store's tables: their n-gram entries (short texts) and passage entries (texts;
        ``passage_keys``: each record's passage fingerprints where made already)."""
        commands: list[Command] = []
        if self.ngram is not None:
            short = [i for i, record in enumerate(records) if record.short is not None]
            if short:
                texts = [records[i].short or "" for i in short]
                commands += self.ngram.writes(command, texts, np.asarray(rows)[short])
        if self.passages is not None:
            kept = [i for i, record in enumerate(records) if record.text is not None]
            if kept:
                texts = [records[i].text or "" for i in kept]
                hosts = [records[i].host for i in kept]
                made = None if passage_keys is None else [passage_keys[i] for i in kept]
                commands += self.passages.writes(
                    command, texts, np.asarray(rows)[kept], hosts, made
                )
        return commands

    def retry_methods(self, record: Record) -> tuple[Any, ...]:
        """Every index that holds a document (the n-gram index: short texts only)."""
        bits = EXACT
        if self.config.simhash.enabled:
            bits |= SIMHASH
        if self.config.minhash.enabled:
            bits |= MINHASH
        if self.ngram is not None and record.short is not None:
            bits |= NGRAM
        return METHODS_OF_BITS[bits]


class Backend(Protocol):
    """What a RedisCollection asks of its registry."""

    clock: Clock
    failures: Failures
    max_documents: int | None  # NEARDUP_MAX_DOCUMENTS

    def held_everywhere(self) -> int:
        """The documents every collection holds."""

    def resolve(self, name: str) -> Resolved:
        """The collection's settings now (UnknownCollection if it is not stored)."""

    def cached(self, name: str) -> tuple[bytes, Resolved] | None:
        """The settings this process read last (as stored, and parsed), if any."""

    def parsed(self, name: str, raw: bytes) -> Resolved:
        """Settings as stored, parsed (the same object as last time if unchanged)."""

    def settings_command(self, name: str) -> Command:
        """The read of the collection's settings (to send with other commands)."""

    def store(self, resolved: Resolved) -> RedisStore:
        """This thread's store of the collection."""
