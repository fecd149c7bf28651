"""Time and retention of a collection over Redis: the time index and the retention mark.

The embedded service's rules (README, "Time"): a document expires when its timestamp is
older than now minus ``max_age``, or when it is not among the ``max_documents`` newest
(ties: the later insert is the newer); it disappears from every answer at once and is
evicted later; what expired never comes back. Here:

- **The time index**, ``{nd:<key>:meta}t``: one member per stored document, scored 0 and
  ordered by its bytes: timestamp (int64, sign bit flipped, big-endian: byte order is
  time order for every year from 1 to 9999), seq (uint64 BE: the insert order), id.
  Written before the document (so no stored document lacks one; an entry whose document
  was never stored is dropped by the eviction), removed with it.
- **The mark**, field ``mark`` of ``{nd:<key>:meta}c`` (the same slot): the time index
  member of the newest expired document. Every document at or below it is expired,
  whatever the settings say later. ``neardup_expire_v1`` (``EXPIRE``, an EVAL script
  on the two keys, so atomic across processes) moves it up to the newest entry older
  than the max_age cutoff and past the oldest entries above the max_documents newest.
- A document is visible when its (timestamp, seq) is above the mark's and its timestamp
  is at least now minus max_age: every read checks both (the mark read in the same round
  trip as the lookups when the collection has a retention).
- **Eviction** (``RedisRegistry.evict``, a thread of every process): the entries at or
  below the mark, or older than the cutoff, a chunk at a time: the documents removed from
  the store when their record's seq is the entry's (an id stored again since is another
  document), then their entries, cluster members, n-gram entries and counters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_SIGN = 1 << 63
TIME_PREFIX_BYTES = 16  # timestamp and seq, before the id

# Moves the mark (KEYS: the counters hash, the time index; ARGV: the max_age cutoff as
# an 8-byte time prefix or '', max_documents or 0); answers {the mark ('' if none), the
# entries above it: the documents held}. Byte strings are compared byte by byte: Lua's <
# follows the server's locale.
EXPIRE = """
local function less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local held = redis.call('HGET', KEYS[1], 'mark') or ''
local mark = held
if ARGV[1] ~= '' then
  local below = redis.call('ZRANGE', KEYS[2], '(' .. ARGV[1], '-', 'BYLEX', 'REV', 'LIMIT', 0, 1)
  if below[1] and less(mark, below[1]) then mark = below[1] end
end
local kept = tonumber(ARGV[2])
local low = '-'
if mark ~= '' then low = '(' .. mark end
local visible = redis.call('ZLEXCOUNT', KEYS[2], low, '+')
if kept > 0 and visible > kept then
  mark = redis.call('ZRANGE', KEYS[2], low, '+', 'BYLEX', 'LIMIT', visible - kept - 1, 1)[1]
  visible = kept
end
if mark ~= held then redis.call('HSET', KEYS[1], 'mark', mark) end
return {mark, visible}
"""


def time_bytes(timestamp: int) -> bytes:
    """A timestamp (microseconds) as 8 bytes whose order is the time order."""
    return ((timestamp + _SIGN) & ((1 << 64) - 1)).to_bytes(8, "big")


def time_member(timestamp: int, seq: int, document_id: str) -> bytes:
    return (
        time_bytes(timestamp)
        + seq.to_bytes(8, "big")
        + document_id.encode("utf-8", "surrogatepass")
    )


def parse_member(member: bytes) -> tuple[int, int, str]:
    """(timestamp, seq, id) of a time index member."""
    timestamp = int.from_bytes(member[:8], "big") - _SIGN
    seq = int.from_bytes(member[8:16], "big")
    return timestamp, seq, member[16:].decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Mark:
    """What is expired now: (timestamp, seq) at or below ``through``, and timestamps
    below ``cutoff`` (now minus max_age; None without one)."""

    through: tuple[int, int] | None
    cutoff: int | None
    member: bytes = b""  # the mark as stored (its time index member), b"" if none
    held: int = 0  # the documents held above it, when an expire answered it

    @staticmethod
    def of(member: bytes | None, cutoff: int | None, held: int = 0) -> Mark:
        if not member:
            return Mark(None, cutoff, b"", held)
        timestamp, seq, _ = parse_member(member)
        return Mark((timestamp, seq), cutoff, member, held)

    def visible(self, timestamp: int, seq: int) -> bool:
        if self.cutoff is not None and timestamp < self.cutoff:
            return False
        return self.through is None or (timestamp, seq) > self.through

    def visible_many(
        self, timestamps: npt.NDArray[np.int64], seqs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        keep = np.ones(len(timestamps), dtype=np.bool_)
        if self.cutoff is not None:
            keep &= timestamps >= self.cutoff
        if self.through is not None:
            mark_time, mark_seq = self.through
            keep &= (timestamps > mark_time) | ((timestamps == mark_time) & (seqs > mark_seq))
        return keep

    def expired_on_arrival(self, timestamp: int) -> bool:
        """Older than max_age, or than the newest expired document: not stored."""
        if self.cutoff is not None and timestamp < self.cutoff:
            return True
        return self.through is not None and timestamp < self.through[0]


NO_RETENTION = Mark(None, None)


def cutoff_of(max_age_us: int | None, now_us: int) -> int | None:
    return None if max_age_us is None else now_us - max_age_us
