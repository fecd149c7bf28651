"""The range lookups of a search's first round trip: ``ZRANGE <set> [<low> [<high> BYLEX``
on every table for every query, encoded as RESP directly, and their answers decoded in
bulk.

A search makes k + 1 + b + 1 lookups a query (21 with the defaults). Built as tuples one
at a time (the bounds as bytes, the set's name) and packed by hiredis they cost as much
client time as Redis takes to answer them all (docs/redis.md, "Round trips"). Here the
bounds of every lookup of a method are one numpy
array of fixed-width rows (the key bytes, then the extra bytes), and each command is one
``%`` formatting of a template made once per table: the table's set name with
the shard's hex digits left open, the bounds' bulk lengths (fixed), BYLEX. The answers
are decoded the same way: every member of every reply of a method, one ``(m, width)``
array, one decode.

Redis scans a sorted set kept as a listpack from one end to the range's first member
(in sets of a few hundred members, far more than the command itself costs: docs/redis.md,
docs/benchmarks.md, "Over Redis"), so a lookup whose key lies in the
upper half of its shard is sent ``ZRANGE <set> [<high> [<low> BYLEX REV``, which scans
from the other end. That halves the scan on average (keys are uniform within a shard).

The bytes are those of ``PrefixTable.bounds`` and ``PrefixTable.key`` packed by hiredis
(tests/backends/redis/test_redis_lookups.py compares them, and the answers with redis-py's).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.backends.redis.store.layout import ROW_BYTES, U8, U64, PrefixTable, in_upper_half
from app.core.types import Rows

# Up to this many lookups a method (a search of one text makes 1, 4 and 16), Python ints
# encode them faster than numpy's calls, whose fixed costs are most of a search's client
# time, more so between round trips, its caches cold (docs/journal.md, "Issue 15").
_FEW_LOOKUPS = 32
_MASK = (1 << 64) - 1
# Up to this many members a method's answers are decoded from Python ints (a search of a
# stored document's copy finds a dozen or so).
_FEW_MEMBERS = 64


@dataclass(frozen=True, slots=True)
class Hits:
    """The members one method's lookups found, one entry a member: the query it answers,
    its table (lane), its 64-bit key, extra bytes and row."""

    method: str
    queries: Rows
    lanes: Rows
    keys: U64
    extra: U8
    rows: Rows


def _templates(table: PrefixTable) -> tuple[bytes, bytes, int]:
    """(forward, backward, the name's size without the shard's digits) of a table: a
    whole command but for ``%d`` (the name's size), ``%x`` (the shard) and two ``%s``
    (the bounds' key and extra bytes, low then high; high then low backward)."""
    bound = table.key_bytes + table.extra_bytes
    tail = b"\xff" * (table.width - table.key_bytes + 1)  # above every extra byte and row
    name = table.prefix.replace(b"%", b"%%") + b"%x}" + table.name.replace(b"%", b"%%")
    low = b"$%d\r\n[%%s\r\n" % (bound + 1)
    high = b"$%d\r\n[%%s%s\r\n" % (bound + 1 + len(tail), tail.replace(b"%", b"%%"))
    head = b"$6\r\nZRANGE\r\n$%d\r\n" + name + b"\r\n"
    forward = b"*5\r\n" + head + low + high + b"$5\r\nBYLEX\r\n"
    backward = b"*6\r\n" + head + high + low + b"$5\r\nBYLEX\r\n$3\r\nREV\r\n"
    return forward, backward, len(table.prefix) + 1 + len(table.name)


class LookupTables:
    """One method's tables (SimHash permutations, bands, exact) and what every search's
    lookups in them share, made once: the commands' templates, and the runs of tables
    whose members have one width and shard bits (one run in every layout but those
    whose SimHash prefixes are shorter than the shard bits), decoded together."""

    def __init__(self, method: str, tables: list[PrefixTable]) -> None:
        self.method = method
        self.tables = tables
        self.templates = [_templates(table) for table in tables]
        runs: dict[tuple[int, int], list[int]] = {}
        for lane, table in enumerate(tables):
            runs.setdefault((table.width, table.shard_bits), []).append(lane)
        self.runs = list(runs.values())
        self.uniform = len(self.runs) == 1


class RangeLookups:
    """Lookups of keys from ``low[q, lane]`` to ``high[q, lane]`` in table ``lane`` for
    every query q, method by method; ``packed`` holds them as RESP (one bytes a
    command) and, when ``keyed``, ``keys`` the set each one reads (a cluster routes by
    it). Cost: a few numpy calls a method and one formatting a command.

    >>> tables = LookupTables("minhash", [PrefixTable(b"{nd:c:t", b"b0", shard_bits=4)])
    >>> lookups = RangeLookups(1, keyed=True)
    >>> lookups.add(tables, np.array([[0xA1 << 56]], dtype=np.uint64), None, None)
    >>> lookups.keys
    [b'{nd:c:ta}b0']
    """

    def __init__(self, count: int, *, keyed: bool = False) -> None:
        self.count = count
        self.keyed = keyed
        self.packed: list[bytes] = []
        self.keys: list[bytes] = []
        # (tables, their first command, the shard of each command): lane-major
        self._sent: list[tuple[LookupTables, int, npt.NDArray[np.int64] | list[int]]] = []

    def add(self, tables: LookupTables, low: U64, high: U64 | None, extra: U8 | None) -> None:
        """``low`` and ``high`` (None: equal to ``low``) are (count, lanes); ``extra``
        (count, extra bytes) is the same in every lane. A lookup's low and high keys
        must be in one shard. Commands are lane-major: every query's lookup in the
        first table, then in the second..."""
        if self.count * len(tables.tables) <= _FEW_LOOKUPS:
            self._add_few(tables, low, high, extra)
            return
        count = self.count
        lows = np.ascontiguousarray(low.T, dtype=np.uint64).reshape(-1)
        highs = None if high is None else np.ascontiguousarray(high.T, dtype=np.uint64).reshape(-1)
        shards = np.empty(len(lows), dtype=np.int64)
        backward = np.empty(len(lows), dtype=bool)
        low_parts: list[npt.NDArray[np.uint8]] = []
        high_parts: list[npt.NDArray[np.uint8]] = []
        for run in tables.runs:
            table = tables.tables[run[0]]
            at = slice(None) if tables.uniform else _commands(run, count)
            keys = lows[at]
            shards[at] = table.shards(keys)
            # Backward when the key is in the upper half of its shard (the docstring).
            backward[at] = in_upper_half(keys, table.shard_bits)
            low_parts.append(_bounds(table, keys, extra, len(run)))
            if highs is not None:
                high_parts.append(_bounds(table, highs[at], extra, len(run)))
        self._sent.append((tables, len(self.packed), shards))
        if tables.uniform:
            width = low_parts[0].shape[1]
            los = low_parts[0].tobytes()
            his = los if highs is None else high_parts[0].tobytes()
            bounds = [
                (los[at : at + width], his[at : at + width]) for at in range(0, len(los), width)
            ]
        else:  # runs of other widths: the bounds of each command, in command order
            order = np.concatenate([_commands(run, count) for run in tables.runs])
            flat = [row.tobytes() for part in low_parts for row in part]
            flat_high = flat if highs is None else [r.tobytes() for p in high_parts for r in p]
            bounds = [(b"", b"")] * len(order)
            for position, lo, hi in zip(order.tolist(), flat, flat_high, strict=True):
                bounds[position] = (lo, hi)
        templates = tables.templates
        if count > 1:
            templates = [t for t in templates for _ in range(count)]
        packed, keyed = self.packed, self.keyed
        for (forward, reverse, size), shard, back, (lo, hi) in zip(
            templates, shards.tolist(), backward.tolist(), bounds, strict=True
        ):
            size += (shard.bit_length() + 3) // 4 or 1  # the shard's hex digits
            if back:
                packed.append(reverse % (size, shard, hi, lo))
            else:
                packed.append(forward % (size, shard, lo, hi))
        if keyed:
            names = [(t.prefix, t.name) for t in tables.tables]
            for command, shard in enumerate(shards.tolist()):
                prefix, name = names[command // count]
                self.keys.append(b"%s%x}%s" % (prefix, shard, name))

    def _add_few(self, tables: LookupTables, low: U64, high: U64 | None, extra: U8 | None) -> None:
        """``add`` for a few lookups (a search of one text): the same bytes from Python
        ints, without the fixed cost of a dozen numpy calls."""
        count, packed = self.count, self.packed
        lows: list[list[int]] = low.T.tolist()
        highs: list[list[int]] = lows if high is None else high.T.tolist()
        extras = [b""] * count if extra is None else [row.tobytes() for row in extra]
        shards: list[int] = []
        for lane, table in enumerate(tables.tables):
            forward, reverse, size = tables.templates[lane]
            bits, key_bytes = table.shard_bits, table.key_bytes
            for q in range(count):
                key, top = lows[lane][q], highs[lane][q]
                shard = key >> (64 - bits)  # 0 without shard bits
                lo = ((key << bits) & _MASK).to_bytes(8, "big")[:key_bytes]
                hi = lo if top == key else ((top << bits) & _MASK).to_bytes(8, "big")[:key_bytes]
                if table.extra_bytes:
                    lo, hi = lo + extras[q], hi + extras[q]
                digits = (shard.bit_length() + 3) // 4 or 1
                if (key >> (63 - bits)) & 1:  # upper half of its shard: backward
                    packed.append(reverse % (size + digits, shard, hi, lo))
                else:
                    packed.append(forward % (size + digits, shard, lo, hi))
                shards.append(shard)
                if self.keyed:
                    self.keys.append(b"%s%x}%s" % (table.prefix, shard, table.name))
        self._sent.append((tables, len(packed) - len(shards), shards))

    def answers(self, replies: list[list[bytes]]) -> list[Hits]:
        """The members of ``replies`` (those of ``packed``, in order), per method that
        found any."""
        found: list[Hits] = []
        count = self.count
        for tables, start, shard_list in self._sent:
            commands = len(shard_list)
            answers = replies[start : start + commands]
            if not any(answers):  # most lookups find nothing
                continue
            if sum(map(len, answers)) <= _FEW_MEMBERS:
                found.append(_few_hits(tables, count, shard_list, answers))
                continue
            shards = np.asarray(shard_list, dtype=np.int64)
            sizes = np.fromiter(map(len, answers), dtype=np.int64, count=commands)
            parts: list[Hits] = []
            for run in tables.runs:
                run_shards, run_sizes, run_answers = shards, sizes, answers
                if not tables.uniform:
                    at = _commands(run, count)
                    run_shards, run_sizes = shards[at], sizes[at]
                    run_answers = [answers[i] for i in at.tolist()]
                if not run_sizes.any():
                    continue
                table = tables.tables[run[0]]
                members = b"".join(itertools.chain.from_iterable(run_answers))
                command = np.repeat(np.arange(len(run_sizes), dtype=np.int64), run_sizes)
                keys, extra, rows = table.decode(run_shards[command], [members])
                lanes = np.array(run, dtype=np.int64)[command // count]
                parts.append(Hits(tables.method, command % count, lanes, keys, extra, rows))
            found.append(_joined(parts))
        return found


def _few_hits(
    tables: LookupTables,
    count: int,
    shards: npt.NDArray[np.int64] | list[int],
    answers: list[list[bytes]],
) -> Hits:
    """``answers``' Hits from Python ints, for a few members (PrefixTable.decode's
    result, without its fixed numpy costs)."""
    queries, lanes, keys, rows, extras = [], [], [], [], []
    shard_of = shards.tolist() if isinstance(shards, np.ndarray) else shards
    for command, answer in enumerate(answers):
        if not answer:
            continue
        lane = command // count
        table = tables.tables[lane]
        bits, key_bytes = table.shard_bits, table.key_bytes
        high = shard_of[command] << (64 - bits) if bits else 0
        shift = 8 * (8 - key_bytes) - bits  # the key's bytes, left-aligned, then unshifted
        for member in answer:
            value = int.from_bytes(member[:key_bytes], "big")
            keys.append(high | (value << shift if shift >= 0 else value >> -shift))
            extras.append(member[key_bytes : key_bytes + table.extra_bytes])
            rows.append(int.from_bytes(member[-ROW_BYTES:], "big"))
            queries.append(command % count)
            lanes.append(lane)
    extra_bytes = tables.tables[0].extra_bytes
    return Hits(
        tables.method,
        np.array(queries, dtype=np.int64),
        np.array(lanes, dtype=np.int64),
        np.array(keys, dtype=np.uint64),
        np.frombuffer(b"".join(extras), dtype=np.uint8).reshape(len(rows), extra_bytes),
        np.array(rows, dtype=np.int64),
    )


def _commands(run: list[int], count: int) -> npt.NDArray[np.int64]:
    """The commands of a run's lanes (lane-major, ``count`` queries a lane)."""
    lanes = np.array(run, dtype=np.int64)
    return (lanes[:, None] * count + np.arange(count, dtype=np.int64)).reshape(-1)


def _bounds(table: PrefixTable, keys: U64, extra: U8 | None, lanes: int) -> U8:
    """(m, key + extra bytes): the bounds' bytes after ``[`` (the extra bytes, the same in
    every lane, repeated ``lanes`` times)."""
    part = table.key_part(keys)
    if extra is None or not table.extra_bytes:
        return part
    return np.concatenate([part, np.tile(extra, (lanes, 1))], axis=1)


def _joined(parts: list[Hits]) -> Hits:
    if len(parts) == 1:
        return parts[0]
    return Hits(
        parts[0].method,
        np.concatenate([p.queries for p in parts]),
        np.concatenate([p.lanes for p in parts]),
        np.concatenate([p.keys for p in parts]),
        np.concatenate([p.extra for p in parts]),
        np.concatenate([p.rows for p in parts]),
    )
