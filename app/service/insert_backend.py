"""What the insert pipeline (app/service/insert.py) asks of a backend, for one insert call
under its write lock: what to read (the documents held under the batch's ids, the stored
matches of its fingerprints, its pairs within, the room, the stored passages), what to
write (publish; a backend whose commit can fail undoes it itself), and the stored
documents' ids and clusters by handle (an embedded row, a Redis sequence number: ordered
by age). The embedded and Redis backends each implement it; neither calls back into a
host."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig, PassagesConfig
from app.core.fingerprint import Fingerprints
from app.core.rule import Pairs
from app.core.types import Rows
from app.errors import InsufficientStorage, NeardupError
from app.service.beside import beside
from app.service.decide import refused_within
from app.service.passages import Found, PassageQuery
from app.service.types import (
    InsertOptions,
    InsertResult,
    NewDocument,
    Query,
    Refused,
    new_document_id,
)


@dataclass(slots=True)
class Call:
    """One insert call on its way: prepared, applied under the lock, answered."""

    documents: Sequence[NewDocument]
    ids: list[str]
    fingerprints: Fingerprints  # of the documents not empty once normalised
    kept: npt.NDArray[np.int64]  # their positions
    stamps: npt.NDArray[np.int64]  # each document's time, microseconds
    options: InsertOptions
    now: int  # when it was prepared, microseconds
    # Each document's passage fingerprints, made beside its fingerprints (None: passages
    # are off).
    passage_keys: list[npt.NDArray[np.uint64]] | None = None
    refused: dict[int, NeardupError] = field(default_factory=dict)
    # Position -> what the backend answers a retry from (its stored row or record).
    retried: dict[int, Any] = field(default_factory=dict)
    results: list[InsertResult | Refused | None] = field(default_factory=list)
    # Position -> row of ``fingerprints``, -1 for an empty text.
    fingerprint_at: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.documents)
        self.fingerprint_at = np.full(len(self.documents), -1, dtype=np.int64)
        self.fingerprint_at[self.kept] = np.arange(len(self.kept))

    def exact(self, position: int) -> npt.NDArray[np.uint64]:
        """The exact hash of a document with a fingerprint."""
        exact: npt.NDArray[np.uint64] = self.fingerprints.exact[self.fingerprint_at[position]]
        return exact


def prepare(
    documents: Sequence[NewDocument],
    options: InsertOptions,
    fingerprint_nonempty: Callable[[list[str]], tuple[Fingerprints, npt.NDArray[np.int64]]],
    clock: Callable[[], int],
    passages: PassagesConfig | None = None,
) -> Call:
    """What needs no lock: ids, fingerprints (``fingerprint_nonempty``: those of the texts
    not empty once normalised, and their positions), with shared passages on (``passages``)
    every text's passage fingerprints, made beside them (app/service/beside.py), times
    (the ``clock``'s, in microseconds, where a document has none), refusals of empty
    texts and of ids repeated within the batch. O(documents)."""
    ids = [document.id or new_document_id() for document in documents]
    texts = [document.text for document in documents]
    passage_keys = None
    if passages is not None and passages.enabled:
        passage_keys = beside(passages.fingerprints, texts, len(texts))
    fingerprints, kept = fingerprint_nonempty(texts)
    now = clock()
    stamps = np.array(
        [now if d.timestamp is None else d.timestamp for d in documents], dtype=np.int64
    )
    call = Call(documents, ids, fingerprints, kept, stamps, options, now)
    if passage_keys is not None:
        call.passage_keys = passage_keys()
    call.refused = refused_within(ids, call.fingerprint_at)
    return call


class Pending:
    """The documents of a batch stored so far, under the handles that continue the
    backend's (``first`` on): their positions, ids and clusters. O(1) a document."""

    def __init__(
        self, first: int, id_of: Callable[[int], str | None], cluster_of: Callable[[int], int]
    ) -> None:
        """``id_of``, ``cluster_of``: a stored document's id and cluster, by handle."""
        self.first = first
        self._stored_id = id_of
        self._stored_cluster = cluster_of
        self.positions: list[int] = []  # in the call
        self.numbers: list[int] = []  # among the accepted documents
        self.ids: list[str] = []
        self.clusters: list[int] = []
        self.cluster_names: list[str] = []
        self.replaced: list[int] = []  # the stored rows that stored replacements replace

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, position: int, number: int, document_id: str, cluster: int | None) -> int:
        handle = self.first + len(self.ids)
        self.positions.append(position)
        self.numbers.append(number)
        self.ids.append(document_id)
        self.clusters.append(handle if cluster is None else cluster)
        return handle

    def id_of(self, handle: int) -> str | None:
        if handle < self.first:
            return self._stored_id(handle)
        return self.ids[handle - self.first]

    def cluster_of(self, handle: int) -> int:
        """The handle naming the cluster of a stored or pending document."""
        if handle < self.first:
            return self._stored_cluster(handle)
        return self.clusters[handle - self.first]

    def members(self, cluster: int) -> list[int]:
        """The pending documents that joined a cluster, not the one naming it."""
        return [
            self.first + i
            for i, joined in enumerate(self.clusters)
            if joined == cluster and self.first + i != cluster
        ]


# (stored row or record, same text, same metadata) of a live id sent again.
SentAgain = tuple[Any, bool, bool]


class InsertBackend(Protocol):
    """One insert call's reads and writes on a backend (the pipeline calls each once a
    call, in this order, except the per-document lookups)."""

    @property
    def config(self) -> CollectionConfig: ...

    @property
    def passage_candidates(self) -> int:
        """The stored candidates a document's passages are verified against."""

    def held(
        self, call: Call, candidates: list[int]
    ) -> tuple[dict[int, int], dict[int, SentAgain]]:
        """The live documents held under the candidates' ids: (position -> row of the one
        a replacement replaces, with ``options.replace``), (position -> what a retry is
        answered from, and whether text and metadata are the same, without it)."""

    def look_up_passages(self, keys: list[npt.NDArray[np.uint64]]) -> None:
        """Begin looking up the accepted documents' passage fingerprints (each one's),
        beside the matching that follows, for ``stored_passages`` (a backend whose
        lookup is a round trip of its own does nothing here)."""

    def match(self, fingerprints: Fingerprints, query: Query, exclude: Rows, stamps: Rows) -> Pairs:
        """The visible stored documents matching each fingerprint (``exclude``: the row
        each replaces, -1 for none; ``stamps``: their times, for the match window); its
        rows are handles."""

    def match_within(self, fingerprints: Fingerprints, stamps: Rows, query: Query) -> Pairs:
        """Pairs (later, earlier) of the batch's documents matching each other."""

    def expired_on_arrival(self, stamps: Rows) -> npt.NDArray[np.bool_]: ...

    def room(self, new: int) -> tuple[int, bool]:
        """(granted, unlimited) for a batch that may add ``new`` documents: at most
        ``granted`` may be stored, or any number when ``unlimited``."""

    def refusal(self, added: int) -> InsufficientStorage:
        """Why a document is refused for room, ``added`` of its batch stored before it."""

    def first_handle(self) -> int:
        """The handle of the first document this call stores (the next follow it)."""

    def id_of(self, handle: int) -> str | None:
        """A matched stored document's id (None: evicted since)."""

    def cluster_of(self, handle: int) -> int:
        """The handle naming a matched stored document's cluster."""

    def cluster_name(self, cluster: int) -> str | None:
        """The id naming a stored cluster."""

    def begin_writing(self, call: Call, pending: Pending) -> bool:
        """What ``pending`` stores is decided (its answers are not made yet): a backend may
        begin writing it here, so that the store works while the passages are verified;
        ``publish`` finishes the writes either way, and is called even where the answers
        then fail, when this began (True): the store will hold the batch."""

    def stored_passages(
        self, asked: Sequence[PassageQuery], query: Query, stamps: Rows
    ) -> list[list[Found]]:
        """Per document, the visible stored documents sharing passages with it (only what
        may be a containment, and its matches)."""

    def oldest_member(self, position: int, cluster: int, pending: Pending) -> str | None:
        """duplicate_of of an answer with matches: its cluster's oldest live document (a
        backend that finds it only once written fills it in then)."""

    def publish(self, call: Call, pending: Pending | None) -> None:
        """Write the stored documents (``pending``; None: none accepted) and the retries."""

    def retry_answer(self, document_id: str, stored: Any) -> InsertResult:
        """The answer to a document sent again, from what ``held`` found."""
