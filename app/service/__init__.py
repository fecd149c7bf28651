"""What is the same on every backend: types.py (what goes in and out), protocols.py (what
the API asks of a collection and a registry), matching.py (a search's checks), indexes.py
(the index kinds behind one interface), coalesce.py (single inserts gathered), budget.py,
times.py. The backends are in app/backends/.
"""

from app.service.types import (
    DEFAULT_COLLECTION,
    INSERT_MATCH_LIMIT,
    BackgroundObserver,
    InsertOptions,
    InsertResult,
    Match,
    NewDocument,
    OnDuplicate,
    Query,
    Refused,
    StoredDocument,
)

__all__ = [
    "DEFAULT_COLLECTION",
    "INSERT_MATCH_LIMIT",
    "BackgroundObserver",
    "InsertOptions",
    "InsertResult",
    "Match",
    "NewDocument",
    "OnDuplicate",
    "Query",
    "Refused",
    "StoredDocument",
]
