"""Insert decisions the same on every backend: the answer to a retry, how many of a
batch's new documents a collection has room for, and the refusals when it has none."""

from __future__ import annotations

from typing import Any

from app.collection_config import CollectionConfig
from app.errors import InsufficientStorage
from app.service.types import InsertResult, Match


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
