"""The OpenAPI document, with the API key scheme that ApiKeyMiddleware enforces.

Declared here rather than as a FastAPI security dependency: the middleware does the
checking, and a dependency on every route would only cost each request its resolution.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.schemas import BatchDocument

SCHEME = "apiKey"
SCHEME_DOCUMENT = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key, when the service has any (NEARDUP_API_KEYS). A key may do "
    "its `actions` on its `collections` (names or `prefix-*` patterns) until its "
    "`expires_at`: a collection it may not see answers 404, an action it lacks 403, past "
    "its rate 429 with Retry-After. Configured read keys: search on every collection; "
    "write keys: everything, and they alone manage /v1/keys.",
}
# The answers only the gate gives, on top of each operation's own.
GATE_RESPONSES = {
    "429": {
        "description": "The key's requests or documents a second are spent: retry after "
        "Retry-After seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    },
}


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            components = document.setdefault("components", {})
            components["securitySchemes"] = {SCHEME: SCHEME_DOCUMENT}
            # A batch's documents are validated one by one by the route; this is their shape.
            components.setdefault("schemas", {})["BatchDocument"] = BatchDocument.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            for path, operations in document["paths"].items():
                if path.startswith("/v1/"):
                    for operation in operations.values():
                        operation["security"] = [{SCHEME: []}]
                        operation.setdefault("responses", {}).update(GATE_RESPONSES)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
