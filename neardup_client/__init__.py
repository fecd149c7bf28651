"""neardup_client: a typed Python client of the neardup HTTP service (contract v1).

It imports only httpx and the standard library: it runs where the service's own
dependencies (numba, FastAPI) are not installed.

    from neardup_client import Client

    with Client("http://127.0.0.1:8000") as neardup:
        answer = neardup.insert("news", text="OPEC agrees to cut output...", id="story-1")
        for match in neardup.search("news", text="OPEC agreed to cut output..."):
            print(match.id, match.similarity, match.hamming_distance, match.methods)
"""

from neardup_client._async import AsyncClient
from neardup_client._base import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_DOCUMENTS,
    DEFAULT_URL,
    NO_RETRY,
    Retry,
    RetryEvent,
    parse_retry_after,
)
from neardup_client._errors import (
    APIError,
    BadRequest,
    BatchError,
    Conflict,
    Forbidden,
    InsufficientStorage,
    InvalidBody,
    NeardupError,
    NotFound,
    RateLimited,
    ServiceUnavailable,
    TooLarge,
    TransportError,
    Unauthorized,
)
from neardup_client._export import (
    ExportedCollection,
    ExportedDocument,
    ExportFormatError,
    exported_documents,
    read_export,
)
from neardup_client._models import (
    ApiKey,
    BatchItem,
    BatchResult,
    CollectionInfo,
    CollectionSettings,
    CollectionStats,
    Document,
    DocumentError,
    Explained,
    IndexHealth,
    InsertResult,
    LimitsSettings,
    Match,
    MetricSample,
    MinHashSettings,
    NewDocument,
    NewPage,
    NgramSettings,
    Passage,
    PassageSettings,
    Refusal,
    RetentionSettings,
    ShingleSettings,
    SimHashSettings,
    TimeLike,
    parse_metrics,
)
from neardup_client._sync import Client

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_DOCUMENTS",
    "DEFAULT_URL",
    "NO_RETRY",
    "APIError",
    "ApiKey",
    "AsyncClient",
    "BadRequest",
    "BatchError",
    "BatchItem",
    "BatchResult",
    "Client",
    "CollectionInfo",
    "CollectionSettings",
    "CollectionStats",
    "Conflict",
    "Document",
    "DocumentError",
    "Explained",
    "ExportFormatError",
    "ExportedCollection",
    "ExportedDocument",
    "Forbidden",
    "IndexHealth",
    "InsertResult",
    "InsufficientStorage",
    "InvalidBody",
    "LimitsSettings",
    "Match",
    "MetricSample",
    "MinHashSettings",
    "NeardupError",
    "NewDocument",
    "NewPage",
    "NgramSettings",
    "NotFound",
    "Passage",
    "PassageSettings",
    "RateLimited",
    "Refusal",
    "RetentionSettings",
    "Retry",
    "RetryEvent",
    "ServiceUnavailable",
    "ShingleSettings",
    "SimHashSettings",
    "TimeLike",
    "TooLarge",
    "TransportError",
    "Unauthorized",
    "exported_documents",
    "parse_metrics",
    "parse_retry_after",
    "read_export",
]
