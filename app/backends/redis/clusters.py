"""The first live member of a cluster on the Redis backend: what an insert's answer
names as ``duplicate_of``."""

from __future__ import annotations

from collections.abc import Iterable

from app.backends.redis.records import Held
from app.backends.redis.resolved import Resolved
from app.backends.redis.retention import Mark
from app.backends.redis.store.store import RedisStore

# Members of a cluster read a page at a time when its first document is gone.
MEMBER_PAGE = 32


def oldest_members(
    store: RedisStore, resolved: Resolved, mark: Mark, clusters: Iterable[tuple[int, str, bool]]
) -> dict[int, str | None]:
    """Cluster -> its oldest live member (None when it has none), for ``clusters`` given
    as (cluster, its first document's id, whether that one is known live): the first
    document when it is known to be live, else the member sets read a page at a time and
    their members looked up (held, visible under ``mark``, and still in that cluster).
    A round trip for each page and its lookup."""
    unknown: dict[int, str] = {}
    oldest: dict[int, str | None] = {}
    for cluster, name, live in clusters:
        if live:
            oldest[cluster] = name
        else:
            unknown[cluster] = name
    start = 0
    while unknown:
        asked = sorted(unknown)
        pages = store.wire.send(
            [("ZRANGE", resolved.members_key(c), start, start + MEMBER_PAGE - 1) for c in asked]
        )
        ids = sorted({m.decode() for page in pages for m in page})
        cluster_of: dict[str, int] = {}
        if ids:
            rows, data = store.lookup(ids)
            held = Held(data)
            for document_id, at in zip(
                [i for i, r in zip(ids, rows.tolist(), strict=True) if r >= 0],
                data.index(rows[rows >= 0]).tolist(),
                strict=True,
            ):
                record = held.record(at)
                if mark.visible(int(data.timestamps[at]), record.seq):
                    cluster_of[document_id] = record.cluster
        for cluster, page in zip(asked, pages, strict=True):
            for member in page:
                if cluster_of.get(member.decode()) == cluster:
                    oldest[cluster] = member.decode()
                    del unknown[cluster]
                    break
            else:
                if len(page) < MEMBER_PAGE:
                    oldest[cluster] = None
                    del unknown[cluster]
        start += MEMBER_PAGE
    return oldest
