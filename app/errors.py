"""Errors of the service layer, each mapped to one HTTP status in app/api/errors.py."""

from __future__ import annotations


class NeardupError(Exception):
    """Base of every error a client can cause; ``code`` is the contract's error code."""

    code = "error"


class UnknownCollection(NeardupError):
    code = "collection_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} does not exist")


class UnknownDocument(NeardupError):
    code = "document_not_found"

    def __init__(self, collection: str, document_id: str) -> None:
        super().__init__(f"document {document_id!r} does not exist in collection {collection!r}")


class DocumentExists(NeardupError):
    code = "document_exists"

    def __init__(self, document_id: str) -> None:
        super().__init__(
            f"document {document_id!r} already exists: PUT it to replace it, or use another id"
        )


class DuplicateId(NeardupError):
    """A batch holding the same id twice: the later one is refused."""

    code = "duplicate_id"

    def __init__(self, document_id: str, first_position: int) -> None:
        super().__init__(
            f"document {document_id!r} came earlier in this batch, at position {first_position}"
        )


class SettingsConflict(NeardupError):
    code = "settings_conflict"


class TooManyCollections(NeardupError):
    code = "too_many_collections"


class InvalidParameter(NeardupError):
    code = "invalid_parameter"


class InvalidBody(NeardupError):
    """A body (or one document of a batch) that is not what the operation takes."""

    code = "invalid_body"


class InvalidDocument(NeardupError):
    code = "invalid_document"


class UnreadablePage(NeardupError):
    """A page whose bytes are no text in the charset given, declared or detected."""

    code = "invalid_page"


class TooLarge(NeardupError):
    code = "too_large"


class InsufficientStorage(NeardupError):
    """The collection or the service holds as many documents as it may
    (limits.max_documents, NEARDUP_MAX_DOCUMENTS): nothing was stored."""

    code = "insufficient_storage"


class StorageUnavailable(NeardupError):
    """A write could not be made durable (disk full, read-only directory...)."""

    code = "storage_unavailable"


class StoreDamaged(RuntimeError):
    """The database file cannot be trusted: the service must not start on it."""


class NotReady(NeardupError):
    code = "not_ready"


class RateLimited(NeardupError):
    """A key past its requests or documents a second; ``retry_after`` in whole seconds."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnknownKey(NeardupError):
    code = "key_not_found"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"API key {key_id!r} does not exist")
