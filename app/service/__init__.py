"""The service layer: collections of documents over the core indexes.

types.py (what goes in and out), matching.py (matches as columns), collection.py (one
collection: matching, clusters, writes), registry.py (every collection, the merger).
"""

from app.service.collection import Collection
from app.service.registry import DEFAULT_COLLECTION, MERGE_POLL_SECONDS, Registry, warm_up
from app.service.types import (
    INSERT_MATCH_LIMIT,
    InsertResult,
    Match,
    MergeObserver,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    StoredDocument,
)

__all__ = [
    "DEFAULT_COLLECTION",
    "INSERT_MATCH_LIMIT",
    "MERGE_POLL_SECONDS",
    "Collection",
    "InsertResult",
    "Match",
    "MergeObserver",
    "NewDocument",
    "OnDuplicate",
    "Query",
    "Refused",
    "Registry",
    "StoredDocument",
    "warm_up",
]
