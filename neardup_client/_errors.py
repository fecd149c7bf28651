"""Exceptions: every error the service answers, as the contract states it, and transport
failures that outlived the retries."""

from __future__ import annotations

from typing import Any


class NeardupError(Exception):
    """Base of every error the client raises."""


class TransportError(NeardupError):
    """The service could not be reached (connection refused, reset, timed out), after the
    retries. The httpx error is the ``__cause__``."""


class APIError(NeardupError):
    """The service answered with an error: ``{"error": {"code", "message"}}``.

    ``status`` is the HTTP status, ``code`` and ``message`` come from the body,
    ``request_id`` from the ``X-Request-ID`` header (quote it when reporting a problem),
    ``retry_after`` the seconds the service asked to wait (503, 429), if it said.
    """

    status: int

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after


class BadRequest(APIError):
    """400: a path or query parameter is invalid (``invalid_parameter``)."""


class Unauthorized(APIError):
    """401: no API key, or an unknown one."""


class Forbidden(APIError):
    """403: a read-only API key asked to write."""


class NotFound(APIError):
    """404: unknown collection (``collection_not_found``) or document."""


class Conflict(APIError):
    """409: ``document_exists``, ``settings_conflict``, ``too_many_collections``..."""


class TooLarge(APIError):
    """413: a body, text, batch, metadata or limit above the service's limit."""


class InvalidBody(APIError):
    """422: ``invalid_body`` (not what the operation takes) or ``invalid_document``
    (nothing left to fingerprint)."""


class RateLimited(APIError):
    """429: sent by a proxy in front of the service; retried like a 503."""


class InsufficientStorage(APIError):
    """507: the collection or the service holds as many documents as it may."""


class ServiceUnavailable(APIError):
    """503: ``not_ready`` while the indexes are rebuilt at start-up, or the storage
    cannot take writes. Retried; raised once the retries are spent."""


ERROR_OF_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: InvalidBody,
    429: RateLimited,
    503: ServiceUnavailable,
    507: InsufficientStorage,
}


def api_error(
    status: int, body: Any, text: str, request_id: str | None, retry_after: float | None
) -> APIError:
    """The exception for an error answer; a body not in the contract's shape (a proxy's
    page, say) still gives one, with the code ``http_<status>``."""
    code, message = f"http_{status}", text.strip()[:500] or f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = str(error.get("code", code))
        message = str(error.get("message", message))
    kind = ERROR_OF_STATUS.get(status, APIError)
    return kind(status, code, message, request_id, retry_after)


class BatchError(NeardupError):
    """Raised by ``BatchResult.raise_for_errors()``: some documents were refused."""

    def __init__(self, errors: list[Any]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(
            f"{len(errors)} document(s) refused; document {first.position} "
            f"(id {first.id!r}): {first.code}: {first.message}{more}"
        )
        self.errors = errors
