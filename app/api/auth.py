"""API keys: ``Authorization: Bearer <key>`` on /v1 (and /metrics when configured).

Keys come from NEARDUP_API_KEYS and NEARDUP_API_KEY_FILE, each entry ``<key>`` or
``<key>:write`` (read and write) or ``<key>:read`` (searches and gets only). With no key
configured the service is open. The check is an ASGI middleware, so that a request
without a key is refused before its body is read or parsed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_response

Role = Literal["read", "write"]
ROLE_NAMES: dict[str, Role] = {"read": "read", "write": "write"}
MIN_KEY_LENGTH = 16
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class InvalidKeys(ValueError):
    """The key configuration cannot be used: the service must not start open by mistake."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    digest: bytes
    role: Role


def parse_entries(entries: Iterable[str], source: str) -> list[ApiKey]:
    keys = []
    for number, raw in enumerate(entries, 1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        key, _, name = entry.partition(":")
        role = ROLE_NAMES.get(name.strip() or "write")
        if role is None:
            raise InvalidKeys(f"{source}, entry {number}: role must be read or write, not {name!r}")
        if len(key) < MIN_KEY_LENGTH or not key.isascii() or not key.isprintable() or " " in key:
            raise InvalidKeys(
                f"{source}, entry {number}: a key has at least {MIN_KEY_LENGTH} printable "
                "ASCII characters without spaces or colons"
            )
        keys.append(ApiKey(_digest(key.encode()), role))
    return keys


def load_keys(inline: str | None, key_file: Path | None) -> list[ApiKey]:
    """Every configured key; InvalidKeys when an entry or the file is unusable."""
    keys = parse_entries(inline.split(","), "NEARDUP_API_KEYS") if inline else []
    if key_file is not None:
        try:
            lines = key_file.read_text().splitlines()
        except OSError as error:
            raise InvalidKeys(f"cannot read the API key file {key_file}: {error}") from error
        keys += parse_entries(lines, str(key_file))
        if not keys:
            raise InvalidKeys(f"the API key file {key_file} holds no key")
    return keys


def _digest(key: bytes) -> bytes:
    # Comparing fixed-length digests keeps the time independent of the key's length too.
    return hashlib.sha256(key).digest()


def role_of(keys: list[ApiKey], presented: bytes) -> Role | None:
    """The role of the presented key, comparing against every key in constant time."""
    digest = _digest(presented)
    found: Role | None = None
    for key in keys:
        # No early exit: the time does not tell which key, or whether any, matched.
        if hmac.compare_digest(key.digest, digest):
            found = key.role
    return found


def required_role(method: str, path: str) -> Role:
    """Reads are GET and POST .../search (a search stores nothing); the rest writes."""
    if method in READ_METHODS or (method == "POST" and path.rstrip("/").endswith("/search")):
        return "read"
    return "write"


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: list[ApiKey], protect_metrics: bool) -> None:
        self.app = app
        self.keys = keys
        self.protect_metrics = protect_metrics

    def _protected(self, path: str) -> bool:
        return (
            path == "/v1"
            or path.startswith("/v1/")
            or (self.protect_metrics and path == "/metrics")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or not self._protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        role = role_of(self.keys, token.strip()) if scheme.lower() == b"bearer" else None
        if role is None:
            message = "a valid API key is required: send Authorization: Bearer <key>"
            challenge = {"WWW-Authenticate": "Bearer"}
            response = error_response(401, "unauthorized", message, **challenge)
        elif role == "read" and required_role(scope["method"], scope["path"]) == "write":
            response = error_response(403, "forbidden", "this API key may only read and search")
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
