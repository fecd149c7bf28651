"""A brute-force model of document time, match windows, retention and limits, written from
the README's rules and independent of the service's code (no TimeOrder, no indexes).

Documents are exact copies of a few "stories", so which documents match is known without
fingerprints: two documents match when they tell the same story. Everything else (the
window, since / until, retention by age and count, the retention mark, clusters, limits)
is computed here by scanning every document.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INSERT_MATCH_LIMIT = 10
NO_MARK = (-(2**63), -1)


class FakeClock:
    """Unix seconds that move only when a test moves them."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @property
    def us(self) -> int:
        return round(self.now * 1_000_000)


@dataclass
class Doc:
    id: str
    story: int
    ts: int  # microseconds
    row: int
    cluster: int  # row naming its cluster
    state: str = "live"  # live, hidden (expired), gone (deleted)


@dataclass
class Expected:
    """What an insert must answer: None fields are not checked."""

    id: str
    inserted: bool
    matches: list[str]
    cluster_id: str | None
    duplicate_of: str | None
    refused: str | None = None  # an error code


@dataclass
class Model:
    window: int | None = None  # microseconds
    max_age: int | None = None
    max_kept: int | None = None
    limit: int | None = None
    docs: list[Doc] = field(default_factory=list)
    mark: tuple[int, int] = NO_MARK

    def visible(self, now: int) -> list[Doc]:
        return [
            d
            for d in self.docs
            if d.state == "live" and (self.max_age is None or d.ts >= now - self.max_age)
        ]

    def by_id(self, document_id: str, now: int) -> Doc | None:
        found = [d for d in self.visible(now) if d.id == document_id]
        return found[0] if found else None

    def expire(self, now: int) -> None:
        """What the retention hides now: by age, then the oldest past the count."""
        if self.max_age is not None:
            for d in self.docs:
                if d.state == "live" and d.ts < now - self.max_age:
                    self._hide(d)
        if self.max_kept is not None:
            live = sorted((d for d in self.docs if d.state == "live"), key=lambda d: (d.ts, d.row))
            for d in live[: max(0, len(live) - self.max_kept)]:
                self._hide(d)

    def _hide(self, doc: Doc) -> None:
        doc.state = "hidden"
        self.mark = max(self.mark, (doc.ts, doc.row))

    def _oldest_live_member(self, cluster: int, pending: list[Doc]) -> str | None:
        """The cluster's first document if it is live (or of this request), else its
        oldest live member."""
        root = (self.docs + pending)[cluster]
        if root.state == "live":
            return root.id
        for d in self.docs + pending:
            if d.cluster == cluster and d.row != cluster and d.state == "live":
                return d.id
        return None

    def insert(
        self,
        batch: list[tuple[str, int, int]],
        now: int,
        since: int | None = None,
        until: int | None = None,
        skip: bool = False,
        room: int | None = None,
    ) -> list[Expected]:
        """(id, story, ts) documents of one request, ids all new; ``room``: what the
        service-wide limit leaves."""
        self.expire(now)
        stored = self.visible(now)

        def in_range(d: Doc, ts: int) -> bool:
            return (
                (self.window is None or abs(d.ts - ts) <= self.window)
                and (since is None or d.ts >= since)
                and (until is None or d.ts <= until)
            )

        expired = [
            ts < self.mark[0] or (self.max_age is not None and ts < now - self.max_age)
            for _, _, ts in batch
        ]
        visible_count = len(stored)
        adds = sum(not e for e in expired)
        if self.max_kept is not None:
            adds = max(0, min(adds, self.max_kept - visible_count))
        wanted = adds if self.limit is None else min(adds, max(0, self.limit - visible_count))
        granted = wanted if room is None else max(0, min(wanted, room))
        unlimited = granted >= adds
        added = 0
        pending: list[Doc] = []
        answers = []
        for (document_id, story, ts), gone in zip(batch, expired, strict=True):
            matches = [d for d in stored + pending if d.story == story and in_range(d, ts)]
            adds_one = not gone and not (matches and skip)
            if adds_one and not unlimited and added >= granted:
                answers.append(Expected(document_id, False, [], None, None, "insufficient_storage"))
                continue
            cluster = matches[0].cluster if matches else None
            if gone or (matches and skip):
                cluster_id = self._name(cluster, pending) if cluster is not None else document_id
                duplicate_of = self._oldest_live_member(cluster, pending) if matches else None
                answers.append(
                    Expected(
                        document_id,
                        False,
                        [d.id for d in matches][:INSERT_MATCH_LIMIT],
                        cluster_id,
                        duplicate_of,
                    )
                )
                continue
            row = len(self.docs) + len(pending)
            doc = Doc(document_id, story, ts, row, row if cluster is None else cluster)
            pending.append(doc)
            added += 1
            answers.append(
                Expected(
                    document_id,
                    True,
                    [d.id for d in matches][:INSERT_MATCH_LIMIT],
                    self._name(doc.cluster, pending),
                    self._oldest_live_member(doc.cluster, pending) if matches else None,
                )
            )
        self.docs.extend(pending)
        self.expire(now)
        return answers

    def _name(self, cluster: int, pending: list[Doc]) -> str:
        every = self.docs + pending
        return every[cluster].id

    def delete(self, document_id: str, now: int) -> bool:
        self.expire(now)
        doc = self.by_id(document_id, now)
        if doc is None:
            return False
        doc.state = "gone"
        return True

    def search(
        self, story: int, now: int, since: int | None, until: int | None, limit: int
    ) -> list[str]:
        return [
            d.id
            for d in self.visible(now)
            if d.story == story
            and (since is None or d.ts >= since)
            and (until is None or d.ts <= until)
        ][:limit]

    def duplicates(self, now: int) -> int:
        return sum(1 for d in self.visible(now) if d.cluster != d.row)
