"""The Redis backend's consistency check, the counterpart of the embedded Collection's
``_check()``: what one collection's keys say must agree with its stored documents. For
the tests (the differential streams call it after each run): it reads the whole
collection, O(documents) in a few round trips a row group."""

from __future__ import annotations

from collections import Counter

import numpy as np

from app.backends.redis.records import Held, Record
from app.backends.redis.resolved import Resolved
from app.backends.redis.retention import parse_member
from app.backends.redis.store.layout import rows_of
from app.backends.redis.store.store import RedisStore


def check_collection(resolved: Resolved, store: RedisStore) -> None:
    """Assert, with no writer running:

    - no work marks are left (every write finished its round trips);
    - the time index holds each stored document once, as (timestamp, seq, id), and
      nothing else;
    - each stored document is in its cluster's member set, scored by its seq;
    - the duplicates counter counts the stored documents that joined a cluster;
    - the n-gram and passage indexes hold exactly the entries of the stored texts.
    """
    layout = store.layout
    groups = range(layout.groups)
    fields = store.wire.send([("HKEYS", layout.group_keys(g)[1]) for g in groups])
    marks = store.wire.send([("HLEN", layout.group_keys(g)[3]) for g in groups])
    assert sum(marks) == 0, f"{sum(marks)} work marks left: a write did not finish"
    data = store.rows(rows_of([field for group in fields for field in group]))
    held = Held(data)
    records = [held.record(at) for at in range(len(data.rows))]

    expected_times = Counter(
        (int(stamp), record.seq, document_id)
        for stamp, record, document_id in zip(
            data.timestamps.tolist(), records, data.ids, strict=True
        )
    )
    (members,) = store.wire.send([("ZRANGE", resolved.time_key(), 0, -1)])
    assert Counter(parse_member(m) for m in members) == expected_times, (
        "the time index does not hold the stored documents"
    )

    scores = store.wire.send(
        [
            ("ZSCORE", resolved.members_key(r.cluster), i)
            for r, i in zip(records, data.ids, strict=True)
        ]
    )
    for record, document_id, score in zip(records, data.ids, scores, strict=True):
        assert score is not None and int(float(score)) == record.seq, (
            f"document {document_id!r} is not in the member set of its cluster {record.cluster}"
        )

    joined = sum(record.cluster != record.seq for record in records)
    (duplicates,) = store.wire.send([("HGET", resolved.counters_key(), "duplicates")])
    assert int(duplicates or 0) == joined, f"duplicates counter {duplicates}, joined {joined}"

    if resolved.ngram is not None or resolved.passages is not None:
        _check_side_entries(resolved, store, records, data.rows)


def _check_side_entries(
    resolved: Resolved, store: RedisStore, records: list[Record], rows: np.ndarray
) -> None:
    """The n-gram and passage entries are exactly those of the stored documents."""
    wanted: Counter[tuple[bytes, bytes]] = Counter()
    for command in resolved.side_entries("ZADD", records, rows):
        key, members = command[1], command[3::2]
        wanted.update((key, member) for member in members)
    tables = [t.table for t in (resolved.ngram, resolved.passages) if t is not None]
    keys = [table.key(shard) for table in tables for shard in range(1 << table.shard_bits)]
    held_entries = store.wire.send([("ZRANGE", key, 0, -1) for key in keys])
    found = Counter(
        (key, member) for key, entries in zip(keys, held_entries, strict=True) for member in entries
    )
    assert found == wanted, "the n-gram or passage entries are not the stored documents'"
