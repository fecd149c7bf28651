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
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.backends.redis.store.layout import in_upper_half, shards_of
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


class Packed(NamedTuple):
    """Commands packed as RESP, and the key each is routed by in a cluster."""

    commands: list[bytes]
    keys: list[bytes]


def _bulk(value: bytes) -> bytes:
    """A RESP bulk string, escaped for use in a ``%`` template."""
    return (b"$%d\r\n%s\r\n" % (len(value), value)).replace(b"%", b"%%")


@dataclass(frozen=True, slots=True)
class GramTable:
    """The sorted sets of one collection's n-gram index.

    >>> table = GramTable(b"{nd:c:t", shard_bits=4)
    >>> [command[:2] for command in table.writes("ZADD", np.array([0xA1 << 56],
    ...     dtype=np.uint64), np.array([3]), np.array([7]))]
    [('ZADD', b'{nd:c:ta}g')]
    """

    prefix: bytes  # the hash tag up to the shard, e.g. b"{nd:news:t"
    shard_bits: int
    suffix: bytes = b"g"  # after the hash tag: "g" the n-gram index's, "p" the passages'

    def key(self, shard: int) -> bytes:
        return b"%s%x}%s" % (self.prefix, shard, self.suffix)

    def _shards(self, keys: U64) -> list[int]:
        shards: list[int] = shards_of(keys, self.shard_bits).tolist()
        return shards

    def writes(
        self, command: str, keys: U64, sizes: Rows, rows: Rows, hosts: Rows | None = None
    ) -> list[Command]:
        """``ZADD`` (or ``ZREM``) of entries (order key, set size, row[, host]), one
        command per set touched."""
        if not len(keys):
            return []
        width = MEMBER_BYTES if hosts is None else HOSTED_BYTES
        packed = np.zeros((len(keys), width), dtype=np.uint8)
        packed[:, :8] = np.asarray(keys, dtype=">u8").view(np.uint8).reshape(-1, 8)
        capped = np.minimum(np.asarray(sizes), MAX_SET_SIZE).astype(">u2")
        packed[:, 8:10] = capped.view(np.uint8).reshape(-1, 2)
        packed[:, 10:14] = np.asarray(rows).astype(">u4").view(np.uint8).reshape(-1, 4)
        if hosts is not None:
            packed[:, 14:] = np.asarray(hosts).astype(">u4").view(np.uint8).reshape(-1, 4)
        # Grouped by shard in numpy and cut from one bytes: a member made and filed one at
        # a time cost ~0.7 us, most of an insert's client time for its passage entries.
        shards = shards_of(keys, self.shard_bits)
        order = np.argsort(shards, kind="stable")
        blob = packed[order].tobytes()
        members = [blob[at : at + width] for at in range(0, len(blob), width)]
        ordered = shards[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        ends = [*starts[1:].tolist(), len(keys)]
        commands: list[Command] = []
        for start, end, shard in zip(starts.tolist(), ends, ordered[starts].tolist(), strict=True):
            key = self.key(shard)
            if command == "ZADD":
                commands.append(("ZADD", key, *[p for m in members[start:end] for p in (0, m)]))
            else:
                commands.append(("ZREM", key, *members[start:end]))
        return commands

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

    def packed_lookups(
        self, keys: U64, low_size: int, high_size: int, limit: int | None = None
    ) -> Packed:
        """``lookups`` packed as RESP by one ``%`` formatting each (a tuple packed by
        hiredis costs ~1 us, three times as much: 40 lookups a Reuters story), and read
        from the nearer end of their set: a key in the upper half of its shard is looked
        up ``REV``, the bounds swapped, so that Redis's scan of a packed set (from one end
        to the range) is half as long. The members come back in the other order, and
        with a ``limit`` the last ``limit`` of them: the callers count them (a lookup
        that reaches the limit is boilerplate to both)."""
        low = min(max(low_size, 0), MAX_SET_SIZE).to_bytes(2, "big")
        high = min(max(high_size, 0), MAX_SET_SIZE).to_bytes(2, "big") + _TOP
        tail = b"" if limit is None else _bulk(b"LIMIT") + _bulk(b"0") + _bulk(b"%d" % limit)
        words = 5 + (0 if limit is None else 3)
        low_bound = b"$%d\r\n[%%s%s\r\n" % (9 + len(low), low.replace(b"%", b"%%"))
        high_bound = b"$%d\r\n[%%s%s\r\n" % (9 + len(high), high.replace(b"%", b"%%"))
        head = _bulk(b"ZRANGE") + b"$%d\r\n%s\r\n"
        forward = b"*%d\r\n" % words + head + low_bound + high_bound + _bulk(b"BYLEX") + tail
        backward = (
            b"*%d\r\n" % (words + 1)
            + head
            + high_bound
            + low_bound
            + _bulk(b"BYLEX")
            + _bulk(b"REV")
            + tail
        )
        raw = np.asarray(keys, dtype=">u8").tobytes()
        in_upper = in_upper_half(keys, self.shard_bits)
        commands: list[bytes] = []
        sets: list[bytes] = []
        for at, (shard, upper) in enumerate(
            zip(self._shards(keys), in_upper.tolist(), strict=True)
        ):
            key = raw[8 * at : 8 * at + 8]
            name = self.key(shard)
            template = backward if upper else forward
            commands.append(template % (len(name), name, key, key))
            sets.append(name)
        return Packed(commands, sets)

    @staticmethod
    def decode_hosted(members: list[bytes]) -> tuple[Rows, Rows, npt.NDArray[np.uint32]]:
        """(set sizes, rows, hosts' keys) of passage entries read (0: an entry without
        one)."""
        if members and all(len(member) == HOSTED_BYTES for member in members):
            packed = np.frombuffer(b"".join(members), dtype=np.uint8).reshape(-1, HOSTED_BYTES)
            sizes, rows = GramTable.decode([member[:MEMBER_BYTES] for member in members])
            hosts = np.ascontiguousarray(packed[:, 14:]).view(">u4").reshape(-1)
            return sizes, rows, hosts.astype(np.uint32)
        sizes, rows = GramTable.decode([member[:MEMBER_BYTES] for member in members])
        hosts = np.array(
            [
                int.from_bytes(member[MEMBER_BYTES:], "big") if len(member) == HOSTED_BYTES else 0
                for member in members
            ],
            dtype=np.uint32,
        )
        return sizes, rows, hosts

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
