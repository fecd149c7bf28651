"""Insert decisions the same on every backend: the refusals within a batch, a stored
id sent again (a retry or a conflict), the answer to a retry, how many of a batch's new
documents a collection has room for, and what becomes of each document (stored, skipped
or refused for room). The backends keep only where rows live and how they are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from app.collection_config import CollectionConfig
from app.errors import (
    DocumentExists,
    DuplicateId,
    InsufficientStorage,
    InvalidDocument,
    NeardupError,
)
from app.service.types import InsertResult, Match, OnDuplicate


def refused_within(
    ids: Sequence[str], fingerprint_at: npt.NDArray[np.int64]
) -> dict[int, NeardupError]:
    """Position -> refusal of the documents refused by their batch alone: a text empty
    once normalised (no fingerprint), an id that came earlier in the batch."""
    refused: dict[int, NeardupError] = {}
    first_position: dict[str, int] = {}
    for position, document_id in enumerate(ids):
        if fingerprint_at[position] < 0:
            refused[position] = InvalidDocument("text is empty after normalisation")
        elif document_id in first_position:
            refused[position] = DuplicateId(document_id, first_position[document_id])
        else:
            first_position[document_id] = position
    return refused


def sent_again(document_id: str, same_text: bool, same_metadata: bool) -> DocumentExists | None:
    """A live stored id in a plain insert: a retry (None: answered by retry_answer,
    nothing changed) when the text is equal once normalised and the metadata equal, a
    conflict (409) otherwise."""
    return None if same_text and same_metadata else DocumentExists(document_id)


def retry_answer(document_id: str, cluster_id: str, methods: tuple[Any, ...]) -> InsertResult:
    """The answer to a document sent again (its id stored with the same normalised text
    and metadata): a duplicate of itself, found by every index that holds it, nothing
    changed."""
    return InsertResult(
        id=document_id,
        inserted=False,
        duplicate_of=document_id,
        cluster_id=cluster_id,
        matches=[Match(document_id, 1.0, 0, methods)],
    )


def wanted_room(new: int, held: int, config: CollectionConfig) -> tuple[int, int]:
    """(adds, wanted) for a batch that may add ``new`` documents to a collection holding
    ``held``: how many add to what it holds (with a retention's max_documents, each one
    past it expires the oldest and adds nothing), and how many of those its limit
    (limits.max_documents) lets in. The service's budget may grant fewer still."""
    adds = new
    kept = config.retention.max_documents
    if kept is not None:
        adds = max(0, min(new, kept - held))
    limit = config.limits.max_documents
    wanted = adds if limit is None else min(adds, max(0, limit - held))
    return adds, wanted


def collection_full(name: str, limit: int | None) -> InsufficientStorage:
    return InsufficientStorage(
        f"collection {name!r} holds its limit of {limit} documents "
        "(limits.max_documents): delete documents, raise the limit, or set a retention"
    )


def service_full(budget: int | None) -> InsufficientStorage:
    return InsufficientStorage(
        f"the service holds its limit of {budget} documents over all collections "
        "(NEARDUP_MAX_DOCUMENTS): delete documents or collections"
    )


class Fate(Enum):
    """What an insert does with one accepted document."""

    STORED = "stored"
    SKIPPED = "skipped"  # a duplicate with on_duplicate "skip", or expired on arrival
    REFUSED = "refused"  # no room left (InsufficientStorage)


@dataclass(slots=True)
class Admission:
    """The documents of one batch decided in order against the room it was granted
    (``granted``, or any number when ``unlimited``): O(1) a document."""

    on_duplicate: OnDuplicate
    granted: int
    unlimited: bool
    added: int = 0  # stored documents that add to what the collection holds

    def decide(self, matched: bool, replaces: bool, expired: bool) -> Fate:
        """A duplicate is skipped with "skip"; a document already expired by the
        retention when it arrives is matched and answered but not stored; a new one is
        refused once the room is used up (a replacement adds nothing)."""
        if (matched and self.on_duplicate == "skip") or expired:
            return Fate.SKIPPED
        if not replaces:
            if not self.unlimited and self.added >= self.granted:
                return Fate.REFUSED
            self.added += 1
        return Fate.STORED
