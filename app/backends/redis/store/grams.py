"""The n-gram index of short texts in Redis: prefix entries of q-gram sets, by token.

A short text's distinct q-grams (app/core/ngram.py's codes) are ordered by
``fmix64(code)`` (then by code), one global order that needs no statistics and never
changes, so that every process indexes and probes alike. A stored set of n tokens puts
its first ``prefix_length(n, t, k)`` tokens in the index (AllPairs' prefix filter with k
meetings, as in NgramIndex); a query probes its own prefix, and a stored set is a
candidate when it meets the query in min(k, fewest shared tokens) of them. Candidates
are verified by the caller with the exact Jaccard of the two sets.

Entries are members of sorted sets scored 0, ordered by their bytes::

    member = order key (uint64 BE) | set size (uint16 BE) | row (uint32 BE)

in ``{nd:<collection>:t<shard>}g``, the shard being the order key's top ``shard_bits``
bits: the same hash tags (slots) as the store's other tables. One token's entries with
an admissible set size (t m <= n <= m / t for a query of m tokens) are one
``ZRANGE key [<key><low size> [<key><high size>\\xff.. BYLEX``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.redis.store import functions
from app.backends.redis.store.wire import Command
from app.core.mix import fmix64_array
from app.core.types import Rows

U64 = npt.NDArray[np.uint64]
MEMBER_BYTES = 8 + 2 + 4
# A passage entry may carry its document's host's key after its row (app/core/hosts.py).
HOSTED_BYTES = MEMBER_BYTES + 4
MAX_SET_SIZE = (1 << 16) - 1
_TOP = b"\xff" * 5  # above every row after a size


def order_keys(codes: U64) -> U64:
    """``fmix64`` of each code (MurmurHash3's finaliser, as the kernels compute it)."""
    return fmix64_array(codes)


def ordered(codes: U64) -> U64:
    """The order keys of a set's distinct codes, in the global order."""
    keys = order_keys(codes)
    return keys[np.lexsort((codes, keys))]


@dataclass(frozen=True, slots=True)
class GramTable:
    """The sorted sets of one collection's n-gram index.

    >>> table = GramTable(b"{nd:c:t", shard_bits=4)
    >>> [command[3:6] for command in table.writes("ZADD", np.array([0xA1 << 56],
    ...     dtype=np.uint64), np.array([3]), np.array([7]))]
    [(b'{nd:c:ta}g', '+', 14)]
    """

    prefix: bytes  # the hash tag up to the shard, e.g. b"{nd:news:t"
    shard_bits: int
    suffix: bytes = b"g"  # after the hash tag: "g" the n-gram index's, "p" the passages'

    def key(self, shard: int) -> bytes:
        return b"%s%x}%s" % (self.prefix, shard, self.suffix)

    def _shards(self, keys: U64) -> list[int]:
        if self.shard_bits == 0:
            return [0] * len(keys)
        shifted = np.asarray(keys, dtype=np.uint64) >> np.uint64(64 - self.shard_bits)
        return [int(s) for s in shifted.tolist()]

    def _by_shard(self, keys: U64) -> list[tuple[bytes, Rows]]:
        """(set, places in ``keys``) of each shard the keys touch, places in order."""
        if not len(keys):
            return []
        if self.shard_bits == 0:
            return [(self.key(0), np.arange(len(keys)))]
        shards = np.asarray(keys, dtype=np.uint64) >> np.uint64(64 - self.shard_bits)
        order = np.argsort(shards, kind="stable")
        touched, starts = np.unique(shards[order], return_index=True)
        return [
            (self.key(shard), places)
            for shard, places in zip(touched.tolist(), np.split(order, starts[1:]), strict=True)
        ]

    def writes(
        self, command: str, keys: U64, sizes: Rows, rows: Rows, hosts: Rows | None = None
    ) -> list[Command]:
        """``ZADD`` (or ``ZREM``) of entries (order key, set size, row[, host]): one
        ``neardup_members_v1`` call a set touched, its entries one string (the server
        splits it), where a command's members cost the client an argument each."""
        width = MEMBER_BYTES if hosts is None else HOSTED_BYTES
        packed = np.zeros((len(keys), width), dtype=np.uint8)
        packed[:, :8] = np.asarray(keys, dtype=">u8").view(np.uint8).reshape(-1, 8)
        capped = np.minimum(np.asarray(sizes), MAX_SET_SIZE).astype(">u2")
        packed[:, 8:10] = capped.view(np.uint8).reshape(-1, 2)
        packed[:, 10:14] = np.asarray(rows).astype(">u4").view(np.uint8).reshape(-1, 4)
        if hosts is not None:
            packed[:, 14:] = np.asarray(hosts).astype(">u4").view(np.uint8).reshape(-1, 4)
        operation = "+" if command == "ZADD" else "-"
        return [
            ("FCALL", functions.MEMBERS, 1, key, operation, width, packed[places].tobytes())
            for key, places in self._by_shard(keys)
        ]

    @staticmethod
    def written(command: Command) -> tuple[bytes, list[bytes]]:
        """The set and the entries of a command of ``writes``."""
        key, width, blob = command[3], int(command[5]), command[6]
        return key, [blob[at : at + width] for at in range(0, len(blob), width)]

    def lookups(
        self, keys: U64, low_size: int, high_size: int, limit: int | None = None
    ) -> list[Command]:
        """One range read per token: its entries of sets of low_size to high_size tokens
        (the first ``limit`` of them, when given)."""
        low = min(max(low_size, 0), MAX_SET_SIZE).to_bytes(2, "big")
        high = min(max(high_size, 0), MAX_SET_SIZE).to_bytes(2, "big")
        raw = np.asarray(keys, dtype=">u8").tobytes()
        tail: tuple[Any, ...] = ("BYLEX",) if limit is None else ("BYLEX", "LIMIT", 0, limit)
        return [
            ("ZRANGE", self.key(shard), b"[" + token + low, b"[" + token + high + _TOP, *tail)
            for shard, token in zip(
                self._shards(keys), (raw[at : at + 8] for at in range(0, len(raw), 8)), strict=True
            )
        ]

    def range_reads(
        self, keys: U64, low_size: int, high_size: int, limit: int, drop_full: bool
    ) -> RangeReads:
        """The entries of every token of ``keys`` with sets of low_size to high_size
        tokens (the first ``limit`` a token, 0: all; ``drop_full``: none of a token that
        has ``limit``), by one ``neardup_ranges_v1`` call a shard touched. O(tokens) to
        build; the reply's entries padded to HOSTED_BYTES."""
        low = min(max(low_size, 0), MAX_SET_SIZE).to_bytes(2, "big")
        high = min(max(high_size, 0), MAX_SET_SIZE).to_bytes(2, "big")
        keys = np.asarray(keys, dtype=np.uint64)
        full = limit if drop_full else 0
        arguments = (low, high, limit, HOSTED_BYTES, int(drop_full))
        touched = self._by_shard(keys)
        commands: list[Command] = [
            ("FCALL_RO", functions.RANGES, 1, key, *arguments, keys[places].astype(">u8").tobytes())
            for key, places in touched
        ]
        return RangeReads(commands, [places for _, places in touched], len(keys), full)

    @staticmethod
    def decode(members: list[bytes]) -> tuple[Rows, Rows]:
        """(set sizes, rows) of entries read."""
        if not members:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        packed = np.frombuffer(b"".join(members), dtype=np.uint8).reshape(-1, MEMBER_BYTES)
        sizes = np.ascontiguousarray(packed[:, 8:10]).view(">u2").reshape(-1)
        rows = np.ascontiguousarray(packed[:, 10:]).view(">u4").reshape(-1)
        return sizes.astype(np.int64), rows.astype(np.int64)


@dataclass(frozen=True, slots=True)
class RangeReads:
    """``GramTable.range_reads``: its commands, and for each the places (in the keys
    asked) of the tokens it reads."""

    commands: list[Command]
    places: list[Rows]
    tokens: int
    full: int  # a token with this many entries returns none of them (0: every token does)

    def decode(self, replies: list[Any]) -> tuple[Rows, Rows, Rows, Rows, npt.NDArray[np.uint32]]:
        """(counts, token, sizes, rows, hosts) from the commands' replies: each token's
        count of entries (in the keys' order), and of each entry returned its token's
        place, set size, row and host's key (0: none), in the order of the places.
        O(tokens + entries), in numpy."""
        counts = np.zeros(self.tokens, dtype=np.int64)
        token_parts: list[Rows] = []
        member_parts: list[bytes] = []
        for places, (raw_counts, members) in zip(self.places, replies, strict=True):
            each = np.frombuffer(raw_counts, dtype=">u4").astype(np.int64)
            counts[places] = each
            returned = np.where(each >= self.full, 0, each) if self.full else each
            if returned.sum() != len(members) // HOSTED_BYTES:
                raise ValueError("neardup_ranges_v1 answered entries its counts do not give")
            token_parts.append(np.repeat(places, returned))
            member_parts.append(members)
        token = np.concatenate(token_parts) if token_parts else np.zeros(0, dtype=np.int64)
        packed = np.frombuffer(b"".join(member_parts), dtype=np.uint8).reshape(-1, HOSTED_BYTES)
        order = np.argsort(token, kind="stable")
        token, packed = token[order], packed[order]
        sizes = np.ascontiguousarray(packed[:, 8:10]).view(">u2").reshape(-1).astype(np.int64)
        rows = np.ascontiguousarray(packed[:, 10:14]).view(">u4").reshape(-1).astype(np.int64)
        hosts = np.ascontiguousarray(packed[:, 14:]).view(">u4").reshape(-1).astype(np.uint32)
        return counts, token.astype(np.int64), sizes, rows, hosts
