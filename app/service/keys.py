"""Scoped API keys: what a key may do, to which collections, until when. No I/O.

A key (``Grant``) holds ``actions`` and ``collections`` (names, or prefix patterns such as
``news-*``; ``*`` is every collection), an optional ``expires_at`` and optional rates.
``need_of`` says what a request needs from its method and path, and ``decide`` answers
whether a key has it: the one place of the rule, called by the API key middleware and the
hot routes, whichever backend stores the keys (app/storage/keys.py, app/backends/redis/
keys.py).

A key that may not see a collection is answered as if the collection did not exist (404);
one that sees it but lacks the action gets 403, which tells it nothing it did not know.

>>> key = Grant.scoped("k1", "news", ("search",), ("news-*",))
>>> decide(key, need_of("POST", "/v1/collections/news-fr/search"), now=0).status
200
>>> decide(key, need_of("DELETE", "/v1/collections/news-fr"), now=0).status
403
>>> decide(key, need_of("GET", "/v1/collections/forum/documents/a"), now=0).status
404
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

Action = Literal[
    "search",
    "documents.add",
    "documents.delete",
    "collections.create",
    "collections.delete",
    "collections.settings",
    "export",
    "metrics",
    "*",
]
ACTIONS: tuple[Action, ...] = get_args(Action)
# The actions the audit trail records: every change of a collection or its documents.
WRITE_ACTIONS = frozenset(
    {
        "documents.add",
        "documents.delete",
        "collections.create",
        "collections.delete",
        "collections.settings",
    }
)
COLLECTION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# A prefix pattern: what a name may start with, then one star.
PREFIX_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}\*")
KEY_PREFIX = "nd_"
# 32 random bytes: a key cannot be guessed, and its SHA-256 is all that is stored.
KEY_BYTES = 32


def digest(key: bytes) -> bytes:
    """The SHA-256 of a key: the only form in which a key is stored or compared."""
    return hashlib.sha256(key).digest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def new_key_id() -> str:
    return secrets.token_hex(8)


def check_pattern(pattern: str) -> str:
    """A collection pattern as given, or ValueError saying what a pattern may be."""
    if pattern == "*" or COLLECTION_NAME.fullmatch(pattern) or PREFIX_PATTERN.fullmatch(pattern):
        return pattern
    raise ValueError(
        f"{pattern!r} is not a collection pattern: give a collection name, a prefix "
        "followed by * (news-*), or * for every collection"
    )


def pattern_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` is covered by ``pattern``: O(len(pattern))."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


@dataclass(frozen=True, slots=True)
class Rate:
    """Requests and documents a second; None is no limit."""

    requests_per_second: float | None = None
    documents_per_second: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {
            "requests_per_second": self.requests_per_second,
            "documents_per_second": self.documents_per_second,
        }

    @property
    def limited(self) -> bool:
        return self.requests_per_second is not None or self.documents_per_second is not None


@dataclass(frozen=True, slots=True)
class Grant:
    """What one key may do. ``admin`` keys (the configured ``write`` keys) also manage
    keys; no stored key can be admin, so a key never makes a key stronger than itself."""

    id: str
    name: str
    actions: frozenset[str]
    collections: tuple[str, ...]
    description: str = ""
    expires_at: float | None = None  # Unix seconds
    created_at: float = 0.0
    rate: Rate = field(default_factory=Rate)
    digest: bytes = b""
    admin: bool = False

    @classmethod
    def scoped(
        cls, id: str, name: str, actions: tuple[str, ...], collections: tuple[str, ...]
    ) -> Grant:
        return cls(id, name, frozenset(actions), collections)

    def may_see(self, collection: str) -> bool:
        """Whether the key has any action on ``collection``: O(number of patterns)."""
        return any(pattern_matches(pattern, collection) for pattern in self.collections)

    def may(self, action: str) -> bool:
        return "*" in self.actions or action in self.actions

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def to_record(self) -> dict[str, Any]:
        """What a store keeps (the digest in hex, never the key)."""
        return {**self.public(), "digest": self.digest.hex()}

    def public(self) -> dict[str, Any]:
        """What the API shows of a key."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "actions": sorted(self.actions),
            "collections": list(self.collections),
            "expires_at": self.expires_at,
            "created_at": self.created_at,
            "rate": self.rate.to_dict(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Grant:
        rate = record.get("rate") or {}
        return cls(
            id=str(record["id"]),
            name=str(record["name"]),
            description=str(record.get("description") or ""),
            actions=frozenset(record["actions"]),
            collections=tuple(record["collections"]),
            expires_at=record.get("expires_at"),
            created_at=float(record.get("created_at") or 0.0),
            rate=Rate(rate.get("requests_per_second"), rate.get("documents_per_second")),
            digest=bytes.fromhex(record["digest"]),
        )

    def changed(self, changes: dict[str, Any]) -> Grant:
        """This key with ``changes`` (fields of ``public``, ``rate`` as a dict) applied."""
        values: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "actions":
                values[name] = frozenset(value)
            elif name == "collections":
                values[name] = tuple(value)
            elif name == "rate":
                values[name] = Rate(**value) if value is not None else Rate()
            elif name == "description":
                values[name] = value or ""
            else:
                values[name] = value
        return replace(self, **values)


# The configured keys: ``read`` is search on every collection (and /metrics, as before
# scoped keys), ``write`` everything.
def configured_grant(key_digest: bytes, role: Literal["read", "write"], number: int) -> Grant:
    actions = frozenset({"*"} if role == "write" else {"search", "metrics"})
    name = f"configured-{role}-{number}"
    return Grant(name, name, actions, ("*",), digest=key_digest, admin=role == "write")


# What the open service (no key configured) acts as: everything but managing keys, which
# needs an admin key (a key made on an open service would guard nothing).
OPEN = Grant("open", "open", frozenset({"*"}), ("*",))


@dataclass(frozen=True, slots=True)
class Need:
    """What a request needs: ``kind`` is ``collection`` (``action`` on ``collection``;
    an action of None is any action: the key only has to see it), ``list`` (any key; the
    answer holds what it may see), ``admin`` (key management) or ``any`` (any valid key)."""

    kind: Literal["collection", "list", "admin", "any"]
    action: str | None = None
    collection: str | None = None


_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_COLLECTION_ACTIONS = {
    "PUT": "collections.create",
    "PATCH": "collections.settings",
    "DELETE": "collections.delete",
}
_DOCUMENT_ACTIONS = {"PUT": "documents.add", "POST": "documents.add", "DELETE": "documents.delete"}


def need_of(method: str, path: str) -> Need:
    """What ``method`` on ``path`` (under /v1, or /metrics) needs: O(len(path)).

    >>> need_of("POST", "/v1/collections/news/documents/batch")
    Need(kind='collection', action='documents.add', collection='news')
    """
    if path == "/metrics":
        return Need("collection", "metrics", None)
    parts = path.split("/", 5)  # '', 'v1', 'collections', name, sub, rest
    if len(parts) < 3 or parts[1] != "v1":
        return Need("any")
    if parts[2] == "keys":
        return Need("admin")
    if parts[2] != "collections":
        return Need("any")
    if len(parts) == 3 or (len(parts) == 4 and parts[3] == ""):
        return Need("list")
    name = parts[3]
    if len(parts) == 4:
        action = None if method in _READS else _COLLECTION_ACTIONS.get(method, "*")
        return Need("collection", action, name)
    if parts[4] == "search":
        return Need("collection", "search", name)
    if parts[4] == "documents":
        if method in _READS:
            return Need("collection", "search", name)
        return Need("collection", _DOCUMENT_ACTIONS.get(method, "*"), name)
    # No other route under a collection: a read finds a 404, a write a 404 or 405.
    return Need("collection", "search" if method in _READS else "*", name)


@dataclass(frozen=True, slots=True)
class Decision:
    """200 (go on), or the refusal's status and reason (401, 403, 404)."""

    status: int
    reason: str = ""


ALLOWED = Decision(200)
UNKNOWN_KEY = Decision(401, "a valid API key is required: send Authorization: Bearer <key>")
EXPIRED_KEY = Decision(401, "this API key has expired")
NOT_ADMIN = Decision(
    403,
    "only an admin key manages keys: a write key of NEARDUP_API_KEYS or NEARDUP_API_KEY_FILE "
    "(a service configured with none has no admin key)",
)


def decide(key: Grant | None, need: Need, now: float) -> Decision:
    """Whether ``key`` (None: no key or an unknown one) may do what ``need`` says at
    ``now`` (Unix seconds): O(number of the key's patterns). A collection the key may not
    see is 404 (the caller answers it as a missing collection), an action it lacks on a
    collection it sees is 403."""
    if key is None:
        return UNKNOWN_KEY
    if key.expired(now):
        return EXPIRED_KEY
    if need.kind == "admin":
        return ALLOWED if key.admin else NOT_ADMIN
    if need.kind != "collection":
        return ALLOWED
    if need.collection is not None and not key.may_see(need.collection):
        return Decision(404)
    if need.action is not None and not key.may(need.action):
        return Decision(403, f"this API key may not {need.action} here")
    return ALLOWED
