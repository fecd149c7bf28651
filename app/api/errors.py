"""The one place where errors become HTTP responses with the contract's JSON body."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app import errors

STATUS_OF: dict[type[errors.NeardupError], int] = {
    errors.UnknownCollection: 404,
    errors.UnknownDocument: 404,
    errors.DocumentExists: 409,
    errors.DuplicateId: 409,
    errors.SettingsConflict: 409,
    errors.TooManyCollections: 409,
    errors.InvalidParameter: 400,
    errors.InvalidDocument: 422,
    errors.InvalidBody: 422,
    errors.UnreadablePage: 422,
    errors.TooLarge: 413,
    errors.NotReady: 503,
    errors.StorageUnavailable: 503,
    errors.InsufficientStorage: 507,
    errors.RateLimited: 429,
    errors.UnknownKey: 404,
}
# A 503 while the indexes are rebuilt says when to come back, in seconds (RFC 9110
# 10.2.3): an empty or small data directory is ready within seconds of the start
# (docs/benchmarks.md, "Start-up and restarts").
RETRY_AFTER = {"Retry-After": "1"}
HEADERS_OF: dict[type[errors.NeardupError], dict[str, str]] = {errors.NotReady: RETRY_AFTER}
CODE_OF_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    422: "invalid_body",
    503: "not_ready",
}


def error_response(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers or None
    )


def service_error_response(error: errors.NeardupError) -> JSONResponse:
    """The answer to an error the service raised: its status, code and message."""
    status = STATUS_OF.get(type(error), 400)
    headers = HEADERS_OF.get(type(error), {})
    if isinstance(error, errors.RateLimited):
        headers = {"Retry-After": str(error.retry_after)}
    return error_response(status, error.code, str(error), **headers)


def _describe(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
    return f"{where or 'body'}: {error.get('msg', 'invalid')}"


def describe_validation_errors(problems: Sequence[Any]) -> str:
    """The first few problems pydantic found, as one message."""
    message = "; ".join(_describe(problem) for problem in problems[:5])
    if len(problems) > 5:
        message += f"; and {len(problems) - 5} more"
    return message


_PARAMETER = re.compile(r"\{[^}]+\}")


@lru_cache(maxsize=8)
def _path_patterns(app: FastAPI) -> list[tuple[int, re.Pattern[str], frozenset[str]]]:
    patterns = []
    for template, operations in app.openapi()["paths"].items():
        parts = _PARAMETER.split(template)
        regex = "[^/]+".join(re.escape(part) for part in parts)
        methods = {method.upper() for method in operations}
        if "GET" in methods:
            methods.add("HEAD")
        patterns.append((len(parts) - 1, re.compile(regex), frozenset(methods)))
    return sorted(patterns, key=lambda pattern: pattern[0])


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods of the path's resource in the OpenAPI document: as OpenAPI matches
    paths, a concrete one (``.../documents/batch``) before a templated one."""
    for _, pattern, methods in _path_patterns(app):
        if pattern.fullmatch(path):
            return sorted(methods)
    return []


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.NeardupError)
    async def service_error(request: Request, error: errors.NeardupError) -> JSONResponse:
        return service_error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = list(error.errors())
        message = describe_validation_errors(problems)
        if all(problem.get("loc", ("body",))[0] in ("path", "query") for problem in problems):
            return error_response(400, "invalid_parameter", message)
        return error_response(422, "invalid_body", message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        if error.status_code == 400 and error.__cause__ is not None:
            # FastAPI's answer to a body it could not decode at all (not UTF-8, nested
            # past the parser's depth): an invalid body like any other, with its reason.
            reason = type(error.__cause__).__name__
            return error_response(
                422, "invalid_body", f"body: not a JSON document in UTF-8 ({reason})"
            )
        code = CODE_OF_STATUS.get(error.status_code, "error")
        headers = dict(error.headers or {})
        if error.status_code == 405:
            # Starlette lists only the methods of the first route matching the path; a
            # 405 must list every method the resource has (RFC 9110).
            headers["Allow"] = ", ".join(allowed_methods(app, request.url.path))
        return error_response(error.status_code, code, str(error.detail), **headers)
