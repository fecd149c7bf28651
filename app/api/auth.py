"""API keys: ``Authorization: Bearer <key>`` on /v1 (and /metrics when configured).

The configured keys come from NEARDUP_API_KEYS and NEARDUP_API_KEY_FILE, each entry
``<key>`` or ``<key>:write`` (``*`` on every collection, and admin: it manages the stored
keys) or ``<key>:read`` (``search`` on every collection). The stored keys are made through
/v1/keys (app/api/keys.py) and scoped to actions and collections (app/service/keys.py).
With no key configured the service is open.

``Gate`` is the check, used by the middleware and the hot routes alike: the key (its
digest looked up in the key ring), what the request needs, the decision, the key's
request rate. The middleware refuses before the body is read or parsed, and writes the
audit line of every write (app/api/audit.py).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import audit
from app.api.errors import error_response, service_error_response
from app.api.middleware import HttpMiddleware, ResponseWatch
from app.errors import NotReady, RateLimited, UnknownCollection
from app.service.key_ring import KeyRing
from app.service.keys import WRITE_ACTIONS, Decision, Grant, Need, configured_grant, decide, need_of
from app.service.rates import Buckets

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


def configured_grants(keys: list[ApiKey]) -> list[Grant]:
    """The configured keys as grants: read is search on *, write is * on * and admin."""
    return [configured_grant(key.digest, key.role, number) for number, key in enumerate(keys, 1)]


def role_of(keys: list[ApiKey], presented: bytes) -> Role | None:
    """The role of the presented key, comparing against every key in constant time."""
    digest = _digest(presented)
    found: Role | None = None
    for key in keys:
        # No early exit: the time does not tell which key, or whether any, matched.
        if hmac.compare_digest(key.digest, digest):
            found = key.role
    return found


# Where the request's key is put in the ASGI scope for the handlers (the list of
# collections shows only those the key may see).
SCOPE_KEY = "neardup.key"
# Key changes are audited like writes; the key's own secret is never in the line.
KEY_ACTIONS = {"POST": "keys.create", "PATCH": "keys.update", "DELETE": "keys.delete"}


@dataclass(frozen=True, slots=True)
class Check:
    """A request's key, what it needs, and the refusal to send (None: go on)."""

    key: Grant | None
    need: Need
    refusal: Response | None


def key_of(request_scope: Scope) -> Grant | None:
    """The key the gate let through (None on a route it does not guard)."""
    found: Grant | None = request_scope.get(SCOPE_KEY)
    return found


def take_documents(request: Request, count: int) -> None:
    """Charge ``count`` documents to the request's key (RateLimited past its rate)."""
    gate: Gate = request.app.state.gate
    gate.take_documents(key_of(request.scope), count)


def audited_action(method: str, need: Need) -> str | None:
    """The audit trail's name of what the request does, or None (it only reads)."""
    if need.kind == "admin":
        return KEY_ACTIONS.get(method)
    if need.kind == "collection" and need.action in WRITE_ACTIONS:
        return need.action
    return None


class Gate:
    """The check of every guarded request: O(len(key) + the key's patterns), whatever
    the number of keys stored."""

    def __init__(
        self, ring: KeyRing, protect_metrics: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.ring = ring
        self.protect_metrics = protect_metrics
        self.clock = clock
        self.buckets = Buckets()

    def guards(self, path: str) -> bool:
        return (
            path == "/v1"
            or path.startswith("/v1/")
            or (self.protect_metrics and not self.ring.open and path == "/metrics")
        )

    def check(self, scope: Scope) -> Check:
        need = need_of(scope["method"], scope["path"])
        try:
            key = self._key(scope)
        except NotReady as error:
            return Check(None, need, service_error_response(error))
        decision = decide(key, need, self.clock())
        if decision.status != 200:
            return Check(key, need, self._refusal(decision, need))
        assert key is not None  # decide lets no request without a key through
        rate = key.rate.requests_per_second
        if rate is not None:
            wait = self.buckets.take(f"r:{key.id}", rate, 1, self.clock())
            if wait:
                return Check(key, need, service_error_response(_limited("requests", rate, wait)))
        return Check(key, need, None)

    def take_documents(self, key: Grant | None, count: int) -> None:
        """Charge ``count`` documents to the key's documents a second (RateLimited)."""
        rate = key.rate.documents_per_second if key is not None else None
        if rate is None or count <= 0:
            return
        wait = self.buckets.take(f"d:{key.id}", rate, count, self.clock())  # type: ignore[union-attr]
        if wait:
            raise _limited("documents", rate, wait)

    def _key(self, scope: Scope) -> Grant | None:
        if self.ring.open:
            return self.ring.lookup(b"")
        headers = dict(scope.get("headers", []))
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        return self.ring.lookup(token.strip()) if scheme.lower() == b"bearer" else None

    @staticmethod
    def _refusal(decision: Decision, need: Need) -> Response:
        if decision.status == 401:
            return error_response(
                401, "unauthorized", decision.reason, **{"WWW-Authenticate": "Bearer"}
            )
        if decision.status == 404:
            # The very answer of a collection that does not exist.
            return service_error_response(UnknownCollection(need.collection or ""))
        return error_response(decision.status, "forbidden", decision.reason)


def _limited(what: str, rate: float, wait: float) -> RateLimited:
    return RateLimited(
        f"this API key may send {rate:g} {what} a second: retry after the Retry-After seconds",
        max(1, math.ceil(wait)),
    )


class _AnswerWatch(ResponseWatch):
    """Also keeps the answer's body: the audit line holds the ids it names."""

    __slots__ = ("chunks",)

    def __init__(self, send: Send) -> None:
        ResponseWatch.__init__(self, send)  # not super(): it would build an object a request
        self.chunks: list[bytes] = []

    def sending(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))


class ApiKeyMiddleware(HttpMiddleware):
    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        super().__init__(app)
        self.gate = gate

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.gate.guards(scope["path"]):
            await self.app(scope, receive, send)
            return
        check = self.gate.check(scope)
        action = audited_action(scope["method"], check.need)
        if check.refusal is not None:
            await check.refusal(scope, receive, send)
            if action is not None:
                audit.record(check.key, action, check.need.collection, check.refusal.status_code)
            return
        scope[SCOPE_KEY] = check.key
        if action is None:
            await self.app(scope, receive, send)
            return
        keeps_answer = action in ("documents.add", "keys.create")
        watch = _AnswerWatch(send) if keeps_answer else ResponseWatch(send)
        try:
            await self.app(scope, receive, watch.send)
        finally:
            answer = b"".join(watch.chunks) if isinstance(watch, _AnswerWatch) else b""
            ids = _ids(scope["path"], action, watch.status, answer)
            audit.record(check.key, action, check.need.collection, watch.status, ids)


def _ids(path: str, action: str, status: int, answer: bytes) -> list[str] | None:
    """The ids a write touched: from its answer (inserts, a new key) or its path."""
    if action in ("documents.add", "keys.create"):
        return audit.ids_in_answer(answer) if status < 300 else _path_id(path, action)
    return _path_id(path, action)


def _path_id(path: str, action: str) -> list[str] | None:
    if action.startswith("keys."):
        _, _, key_id = path.partition("/v1/keys/")
        return [key_id] if key_id else None
    _, found, document_id = path.partition("/documents/")
    return [document_id] if found and document_id and document_id != "batch" else None
