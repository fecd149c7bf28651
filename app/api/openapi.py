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
    "description": "An API key, when the service has any (NEARDUP_API_KEYS): read keys may "
    "get and search, write keys everything.",
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
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
