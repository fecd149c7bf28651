"""An insert call on its way, and the documents of a batch accepted so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.embedded.rows import RowTable
from app.backends.embedded.states import LIVE
from app.core.fingerprint import Fingerprints
from app.errors import NeardupError
from app.service.types import InsertOptions, InsertResult, NewDocument, Refused
from app.storage.base import DocumentBatch
from app.storage.commit import Commit


@dataclass(slots=True)
class Insertion:
    """One insert call on its way through Writes.prepare, apply and settled."""

    documents: Sequence[NewDocument]
    ids: list[str]
    fingerprints: Fingerprints  # of the documents not empty once normalised
    kept: npt.NDArray[np.int64]  # their positions
    stamps: npt.NDArray[np.int64]  # each document's time, microseconds
    options: InsertOptions
    refused: dict[int, NeardupError] = field(default_factory=dict)
    retried: dict[int, int] = field(default_factory=dict)  # position -> its stored row
    results: list[InsertResult | Refused | None] = field(default_factory=list)
    committed: Commit | None = None  # the group commit of the inserted documents
    batch: DocumentBatch | None = None
    retry_commit: Commit | None = None  # the newest commit when retries were found
    # Position -> row of ``fingerprints``, -1 for an empty text.
    fingerprint_at: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.documents)
        self.fingerprint_at = np.full(len(self.documents), -1, dtype=np.int64)
        self.fingerprint_at[self.kept] = np.arange(len(self.kept))


class PendingBatch:
    """Documents of a batch accepted so far, not yet committed: matched by brute force
    (a batch is small), under provisional rows that continue the collection's (``rows``).
    A row is looked up here from ``first_row`` on, in the collection's rows below."""

    def __init__(self, fingerprints: Fingerprints, rows: RowTable, now: float) -> None:
        self.fingerprints = fingerprints
        self._rows = rows
        self.first_row = rows.next_row
        self.now = now  # the insert time, Unix seconds
        self.timestamps: list[int] = []
        self.ids: list[str] = []
        self.positions: list[int] = []
        self.clusters: list[int] = []
        self.metadata: list[dict[str, Any] | None] = []
        self.texts: list[str | None] = []
        self.created: list[float] = []

    def add(
        self,
        position: int,
        document_id: str,
        cluster: int | None,
        metadata: dict[str, Any] | None,
        text: str | None,
        timestamp: int,
    ) -> int:
        row = self.first_row + len(self.ids)
        self.timestamps.append(timestamp)
        self.ids.append(document_id)
        self.positions.append(position)
        self.clusters.append(row if cluster is None else cluster)
        self.metadata.append(metadata)
        self.texts.append(text)
        self.created.append(self.now)
        return row

    def cluster_of(self, row: int) -> int:
        """The row naming the cluster of a stored or pending row."""
        if row < self.first_row:
            return int(self._rows.cluster.array[row])
        return self.clusters[row - self.first_row]

    def id_of(self, row: int) -> str | None:
        if row < self.first_row:
            return self._rows.ids[row]
        return self.ids[row - self.first_row]

    def oldest_member(self, cluster_row: int | None) -> str | None:
        """The id of the oldest LIVE document of a cluster (a pending one when the
        cluster has none stored): what ``duplicate_of`` names."""
        if cluster_row is None:
            return None
        if cluster_row >= self.first_row or self._rows.state.array[cluster_row] == LIVE:
            return self.id_of(cluster_row)
        oldest = self._rows.members.first_live(cluster_row, self._rows.state.array)
        if oldest is None:
            joined = self.members(cluster_row)
            oldest = joined[0] if joined else None
        return None if oldest is None else self.id_of(oldest)

    def members(self, cluster_row: int) -> list[int]:
        return [
            self.first_row + i
            for i, cluster in enumerate(self.clusters)
            if cluster == cluster_row and self.first_row + i != cluster_row
        ]

    def batch(self) -> DocumentBatch:
        positions = np.array(self.positions, dtype=np.int64)
        chosen = self.fingerprints.select(positions)
        return DocumentBatch(
            ids=self.ids,
            rows=np.arange(self.first_row, self.first_row + len(self.ids), dtype=np.int64),
            created_at=np.array(self.created, dtype=np.float64),
            clusters=np.array(self.clusters, dtype=np.int64),
            metadata=self.metadata,
            texts=self.texts if any(text is not None for text in self.texts) else None,
            simhash=chosen.simhash,
            minhash=chosen.minhash,
            exact=chosen.exact,
            shorts=chosen.shorts
            if chosen.shorts is not None and any(s is not None for s in chosen.shorts)
            else None,
            timestamps=np.array(self.timestamps, dtype=np.int64),
        )
