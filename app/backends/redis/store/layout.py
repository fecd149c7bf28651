"""Where one collection's data lives in Redis: key names, row numbers, member encodings.

Two kinds of keys (docs/redis.md has the whole picture):

- **Row groups.** A document's id picks one of ``groups`` groups (a hash of the id); the
  group's four hashes share one hash tag, so they sit in one cluster slot and one script
  writes them atomically: ``i`` (id -> row and content digest, and the group's row
  counter under the empty field), ``s`` (row -> fixed fields and MinHash signature), ``r``
  (row -> id and the caller's record), ``w`` (row -> index work not yet finished). Row
  numbers are ``counter * groups + group``, so a row names its group and is never reused.
- **Prefix tables.** Every index entry is a member of a sorted set, all members scored 0
  so that the set is ordered by the member's bytes: a 64-bit key (a permuted SimHash, a
  band key, the high word of an exact hash) big-endian, then fixed extra bytes, then the
  row (uint32, big-endian). A table is split by the key's top ``shard_bits`` bits into
  ``2 ** shard_bits`` sorted sets, ``{nd:news:t<shard>}<table>``: the shard number is the
  hash tag, so tables spread over the slots of a cluster, no set holds more than its
  share, and one function call writes a batch's entries of one shard number in every
  table (a command per set cost twice as much). The shard's bits are implied by the
  key name and left out of the member: with 12 shard bits a key takes 7 bytes, a SimHash
  member 11. A lookup of every key sharing a prefix of at least ``shard_bits`` bits is
  one ``ZRANGE key [low [high BYLEX`` on one set (Manku et al.'s permuted tables, with
  Redis's lexicographic ranges as the binary search).

Worked example, SimHash k = 3 (4 tables led by one 16-bit block each), 12 shard bits: a
query's permuted key for table 0 is 0x1234_5678_9ABC_DEF0. Its prefix is the top 16
bits, 0x1234; the shard is the top 12, 0x123, so the set is ``{nd:news:t123}h0``; the
members sharing the prefix are those whose 7 key bytes lie from 40 00 00 00 00 00 00 (the
prefix's remaining 4 bits, 0x4, then zeros) to 4F FF FF FF FF FF F0 (then ones; the last
4 bits pad 52 bits to 7 bytes, zero in every member): ``ZRANGE {nd:news:t123}h0 [\\x40\\x00..
[\\x4f\\xff..\\xf0\\xff.. BYLEX``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt
import xxhash

from app.config import REDIS_DEFAULT_SHARD_BITS, REDIS_MAX_SHARD_BITS
from app.core.hamming import HammingIndex, block_layout
from app.core.lsh import LSHIndex, optimal_bands
from app.core.types import ExactHashes, MinHashes, Rows, SimHashes

# A table of N entries split into 2^s sets holds N / 2^s entries a set. Redis keeps a
# sorted set of at most zset-max-listpack-entries (128 by default) members as one packed
# listpack, ~14 bytes a member of 11 bytes, and a larger one as a skiplist, ~100 bytes a
# member; every set also costs ~90 bytes of its own. 12 bits (4,096 sets a table) keeps
# 100,000 documents at 24 a set, 1M at 244 (listpack with zset-max-listpack-entries 512,
# as docs/redis.md advises); bench/redis_store.py measures the bytes.
DEFAULT_SHARD_BITS = REDIS_DEFAULT_SHARD_BITS  # NEARDUP_REDIS_SHARD_BITS for new collections
# Row groups: a group's hashes hold N / groups rows. 1,024 spreads them over the slots of a
# cluster (16,384 slots) and keeps a group's hashes near a thousand rows at 1M documents.
DEFAULT_GROUPS = 1024
MAX_SHARD_BITS = REDIS_MAX_SHARD_BITS
MAX_GROUPS = 1 << 16
ROW_BYTES = 4
MAX_ROW = (1 << (8 * ROW_BYTES)) - 1
# The bytes after an upper bound's prefix: greater than every extra byte and row.
_TOP = b"\xff"

U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]

# The fixed fields at the start of every ``s`` value, little-endian, then the signature.
FIXED = np.dtype([("simhash", "<u8"), ("exact", "<u8", (2,)), ("timestamp", "<i8")])


def shards_of(keys: U64, shard_bits: int) -> npt.NDArray[np.int64]:
    """The shard of each 64-bit key: its top ``shard_bits`` bits (0 for every key with
    none). Every table's sets, the prefix tables' and the n-gram and passage ones, are
    split so."""
    if shard_bits == 0:
        return np.zeros(len(keys), dtype=np.int64)
    return (np.asarray(keys, dtype=np.uint64) >> np.uint64(64 - shard_bits)).astype(np.int64)


def in_upper_half(keys: U64, shard_bits: int) -> npt.NDArray[np.bool_]:
    """Whether each key lies in the upper half of its shard (the bit below the shard's):
    a lookup of it reads its set from the other end (``REV``), which is then nearer."""
    below = np.uint64(63 - shard_bits)
    upper: npt.NDArray[np.bool_] = ((np.asarray(keys, dtype=np.uint64) >> below) & 1) == 1
    return upper


def group_of(ids: list[str], groups: int) -> npt.NDArray[np.int64]:
    """The row group of each id: xxh3-64 of its UTF-8 bytes, modulo the group count."""
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(i.encode("utf-8", "surrogatepass")) for i in ids),
        dtype=np.uint64,
        count=len(ids),
    )
    return (hashes % np.uint64(groups)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class PrefixTable:
    """One index table as ``2 ** shard_bits`` sorted sets of fixed-width binary members.

    >>> table = PrefixTable(b"{nd:c:t", b"h0", shard_bits=4)
    >>> shards, members = table.encode(
    ...     np.array([0xA1 << 56], dtype=np.uint64), None, np.array([7], dtype=np.int64))
    >>> table.key(int(shards[0])), members[0].hex()
    (b'{nd:c:ta}h0', '100000000000000000000007')
    >>> keys, _, rows = table.decode(int(shards[0]), members)
    >>> hex(int(keys[0])), rows.tolist()
    ('0xa100000000000000', [7])
    """

    prefix: bytes  # the hash tag up to the shard, e.g. b"{nd:news:t"
    name: bytes  # the table's name after the tag, e.g. b"h0"
    shard_bits: int
    extra_bytes: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.shard_bits <= MAX_SHARD_BITS:
            raise ValueError(f"shard_bits must be 0 to {MAX_SHARD_BITS}, not {self.shard_bits}")

    @property
    def key_bytes(self) -> int:
        """Bytes of the 64-bit key kept in a member: what the shard does not imply."""
        return math.ceil((64 - self.shard_bits) / 8)

    @property
    def width(self) -> int:
        return self.key_bytes + self.extra_bytes + ROW_BYTES

    def key(self, shard: int) -> bytes:
        """The sorted set's name: the shard in hex in the hash tag, then the table's name.
        Every table's set of one shard number shares the tag (and so the slot), so that
        one function call writes a batch's entries of that shard number in all tables."""
        return b"%s%x}%s" % (self.prefix, shard, self.name)

    def shards(self, keys: U64) -> npt.NDArray[np.int64]:
        return shards_of(keys, self.shard_bits)

    def key_part(self, keys: U64) -> U8:
        """(m, key_bytes): the keys without their shard bits, left-aligned big-endian."""
        rest = np.ascontiguousarray(keys, dtype=np.uint64) << np.uint64(self.shard_bits)
        return rest.astype(">u8").view(np.uint8).reshape(-1, 8)[:, : self.key_bytes]

    def encode(
        self, keys: U64, extra: U8 | None, rows: Rows
    ) -> tuple[npt.NDArray[np.int64], list[bytes]]:
        """(shard, member) of each entry. O(m) numpy work and m bytes slices."""
        if len(rows) and int(rows.max()) > MAX_ROW:
            raise ValueError(f"row numbers must fit in {ROW_BYTES} bytes")
        count, width, key_bytes = len(keys), self.width, self.key_bytes
        packed = np.empty((count, width), dtype=np.uint8)
        packed[:, :key_bytes] = self.key_part(keys)
        if self.extra_bytes:
            assert extra is not None and extra.shape == (count, self.extra_bytes)
            packed[:, key_bytes : key_bytes + self.extra_bytes] = extra
        packed[:, width - ROW_BYTES :] = rows.astype(">u4").view(np.uint8).reshape(-1, ROW_BYTES)
        raw = packed.tobytes()
        return self.shards(keys), [raw[at : at + width] for at in range(0, len(raw), width)]

    def bounds(self, low: U64, high: U64, extra: U8 | None) -> list[tuple[bytes, bytes]]:
        """BYLEX bounds [min, max] of the members whose key lies in [low[i], high[i]] and
        whose extra bytes equal extra[i]. ``low[i]`` and ``high[i]`` must be in one shard."""
        los, his = self.key_part(low), self.key_part(high)
        if extra is not None:
            los = np.concatenate([los, extra], axis=1)
            his = np.concatenate([his, extra], axis=1)
        tail = _TOP * (self.width - self.key_bytes + 1)
        return [
            (b"[" + lo.tobytes(), b"[" + hi.tobytes() + tail)
            for lo, hi in zip(los, his, strict=True)
        ]

    def decode(
        self, shard: int | npt.NDArray[np.int64], members: list[bytes]
    ) -> tuple[U64, U8, Rows]:
        """(keys, extra bytes, rows) of members read from the set of ``shard`` (one for
        all, or one per member). Strided views of the joined bytes: a few numpy calls
        whatever the number of members (the extra bytes are a read-only view)."""
        raw = b"".join(members)
        width, key_bytes = self.width, self.key_bytes
        count = len(raw) // width
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return empty.astype(np.uint64), np.zeros((0, self.extra_bytes), np.uint8), empty
        # 8 bytes from each member's start: its key bytes, then bytes of its own beyond
        # them (a member is at least 5 + 4 bytes), masked off.
        keys = np.ndarray((count,), dtype=">u8", buffer=raw, strides=(width,)).astype(np.uint64)
        if key_bytes < 8:
            keys &= np.uint64(((1 << (8 * key_bytes)) - 1) << (8 * (8 - key_bytes)))
        keys >>= np.uint64(self.shard_bits)
        if self.shard_bits:
            keys |= np.asarray(shard).astype(np.uint64) << np.uint64(64 - self.shard_bits)
        extra: U8 = np.ndarray(
            (count, self.extra_bytes),
            dtype=np.uint8,
            buffer=raw,
            offset=key_bytes,
            strides=(width, 1),
        )
        rows = np.ndarray(
            (count,), dtype=">u4", buffer=raw, offset=width - ROW_BYTES, strides=(width,)
        )
        return keys, extra, rows.astype(np.int64)


@dataclass(frozen=True)
class Layout:
    """A collection's layout in Redis, fixed when the collection is created.

    ``max_distance`` and ``blocks`` are the SimHash tables' (as in HammingIndex),
    ``num_perm`` and ``threshold`` the MinHash bands' (as in LSHIndex); ``simhash`` and
    ``minhash`` False leave those tables out (the fixed fields are kept regardless).
    """

    collection: str
    namespace: str = "nd"
    simhash: bool = True
    max_distance: int = 3
    blocks: int | None = None
    minhash: bool = True
    num_perm: int = 128
    threshold: float = 0.8
    shard_bits: int = DEFAULT_SHARD_BITS
    groups: int = DEFAULT_GROUPS
    _hamming: HammingIndex = field(init=False, repr=False, compare=False)
    _lsh: LSHIndex | None = field(init=False, repr=False, compare=False)
    # Every search names the hashes of the groups it reads: made once per group.
    _group_keys: dict[int, tuple[bytes, bytes, bytes, bytes]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS:
            raise ValueError(f"groups must be 1 to {MAX_GROUPS}, not {self.groups}")
        if any(c in self.namespace + self.collection for c in "{}"):
            raise ValueError("namespace and collection must not contain braces")
        # The core's own permutation and band hashing, so that keys are the same as in
        # process; their tables stay empty.
        object.__setattr__(self, "_hamming", HammingIndex(self.max_distance, self.blocks))
        lsh = LSHIndex(self.threshold, self.num_perm) if self.minhash else None
        object.__setattr__(self, "_lsh", lsh)
        object.__setattr__(self, "_group_keys", {})

    def _tag(self, *parts: object) -> bytes:
        return ("{" + ":".join(map(str, (self.namespace, self.collection, *parts)))).encode()

    # Row groups -------------------------------------------------------------------------

    def group_keys(self, group: int) -> tuple[bytes, bytes, bytes, bytes]:
        """(ids, signatures, records, work) hashes of a group: one hash tag, one slot."""
        keys = self._group_keys.get(group)
        if keys is None:
            tag = self._tag(group) + b"}"
            keys = self._group_keys[group] = (tag + b"i", tag + b"s", tag + b"r", tag + b"w")
        return keys

    def meta_key(self) -> bytes:
        return self._tag("meta") + b"}"

    @property
    def signature_values(self) -> int:
        return self.num_perm if self.minhash else 0

    @property
    def blob_bytes(self) -> int:
        return FIXED.itemsize + 4 * self.signature_values

    def blobs(
        self, simhash: SimHashes, exact: ExactHashes, timestamps: Rows, minhash: MinHashes | None
    ) -> list[bytes]:
        """The ``s`` value of each document: fixed fields, then the signature."""
        count = len(simhash)
        fixed = np.zeros(count, dtype=FIXED)
        fixed["simhash"], fixed["exact"], fixed["timestamp"] = simhash, exact, timestamps
        parts = [fixed.view(np.uint8).reshape(count, FIXED.itemsize)]
        if self.signature_values:
            assert minhash is not None
            signatures = np.ascontiguousarray(minhash, dtype="<u4")
            parts.append(signatures.view(np.uint8).reshape(count, -1))
        raw = np.concatenate(parts, axis=1).tobytes()
        size = self.blob_bytes
        return [raw[at : at + size] for at in range(0, len(raw), size)]

    def parse_blobs(self, blobs: list[bytes]) -> tuple[npt.NDArray[np.void], MinHashes]:
        """(fixed fields, signatures) of ``s`` values: the fields by name (FIXED's), read
        in place, and the signatures as a copy. Writable (joined into a bytearray, the
        one copy a join makes anyway): a kernel given a read-only field (one row's
        SimHash is a contiguous view) would be compiled again for it."""
        packed = np.frombuffer(bytearray().join(blobs), dtype=self._blob_dtype)
        return packed, packed["signature"].astype(np.uint32)

    @cached_property
    def _blob_dtype(self) -> np.dtype[np.void]:
        """An ``s`` value as one record: FIXED's fields, then the signature."""
        return np.dtype([*FIXED.descr, ("signature", "<u4", (self.signature_values,))])

    # Prefix tables ----------------------------------------------------------------------

    @cached_property
    def simhash_prefix_bits(self) -> list[int]:
        """Bits of each permutation table's leading blocks, in HammingIndex's table order."""
        if not self.simhash:
            return []
        blocks = self._hamming.blocks
        _, widths = block_layout(blocks)
        return [
            sum(widths[b] for b in leading)
            for leading in itertools.combinations(range(blocks), blocks - self.max_distance)
        ]

    @cached_property
    def simhash_tables(self) -> list[PrefixTable]:
        # A lookup must stay in one set: a table is split by at most its prefix bits.
        return [
            PrefixTable(self._tag("t"), b"h%d" % t, min(self.shard_bits, bits))
            for t, bits in enumerate(self.simhash_prefix_bits)
        ]

    @cached_property
    def band_tables(self) -> list[PrefixTable]:
        if self._lsh is None:
            return []
        return [
            PrefixTable(self._tag("t"), b"b%d" % band, self.shard_bits)
            for band in range(self._lsh.bands)
        ]

    @cached_property
    def exact_table(self) -> PrefixTable:
        # The high word is the key, the low word the extra bytes: one member per hash.
        return PrefixTable(self._tag("t"), b"e", self.shard_bits, extra_bytes=8)

    @property
    def bands(self) -> tuple[int, int]:
        """(b, r) of the band tables: the same as LSHIndex's for these settings."""
        return optimal_bands(self.threshold, self.num_perm) if self.minhash else (0, 0)

    def permute(self, simhash: SimHashes) -> U64:
        """(m, tables) permuted keys, as HammingIndex permutes them."""
        return self._hamming.permute(simhash)

    def prefix_masks(self) -> U64:
        masks = [((1 << b) - 1) << (64 - b) if b else 0 for b in self.simhash_prefix_bits]
        return np.array(masks, dtype=np.uint64)

    def band_keys(self, minhash: MinHashes) -> U64:
        """(m, b) band keys, as LSHIndex hashes them."""
        assert self._lsh is not None
        return self._lsh.band_keys(minhash)

    def settings(self) -> dict[str, str]:
        """What must agree between every process that opens the collection."""
        return {
            "simhash": str(int(self.simhash)),
            "max_distance": str(self.max_distance),
            "blocks": str(self._hamming.blocks),
            "minhash": str(int(self.minhash)),
            "num_perm": str(self.num_perm),
            "bands": "{},{}".format(*self.bands),
            "shard_bits": str(self.shard_bits),
            "groups": str(self.groups),
        }


def exact_extra(exact: ExactHashes) -> U8:
    """(m, 8) big-endian bytes of the low words of exact hashes."""
    low = np.ascontiguousarray(np.asarray(exact, dtype=np.uint64).reshape(-1, 2)[:, 1])
    return low.astype(">u8").view(np.uint8).reshape(-1, 8)


def rows_bytes(rows: Rows) -> list[bytes]:
    """The 4-byte big-endian field name of each row in a group's hashes."""
    raw = np.asarray(rows, dtype=np.int64).astype(">u4").tobytes()
    return [raw[at : at + ROW_BYTES] for at in range(0, len(raw), ROW_BYTES)]


def rows_of(fields: list[bytes]) -> Rows:
    return np.frombuffer(b"".join(fields), dtype=">u4").astype(np.int64)
