"""The keys a process knows: the configured ones and the stored ones, by digest.

``KeyRing.lookup`` is what every request with a key costs: a SHA-256 of the key and one
dict lookup, the same time whichever key (or none) matches and however many keys are
stored. The stored keys come from a ``KeyStore`` (SQLite on the embedded backend, Redis on
the Redis one) and are shared by every process: each reads the store's version every
``POLL_SECONDS`` (one small read) and loads every key again when it changed, so a key
created, changed or revoked through any process is seen by all within that. A change made
through this process is seen here at once.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from typing import Any, Protocol

from app.errors import NotReady, UnknownKey
from app.service.keys import OPEN, Grant, Rate, digest, new_key_id, new_secret
from app.service.times import Clock

log = logging.getLogger("neardup")

# How often each process asks the store whether a key changed: the longest a key revoked
# elsewhere still passes here (plus one load of the keys).
POLL_SECONDS = 0.1


class KeyStore(Protocol):
    """Where the stored keys live. ``version`` changes with every save and delete."""

    def version(self) -> int: ...

    def load(self) -> list[Grant]: ...

    def save(self, grant: Grant) -> None: ...

    def delete(self, key_id: str) -> bool: ...

    def close(self) -> None: ...


class KeyRing:
    """The configured keys (fixed) and the stored keys (kept in step with the store).

    With no configured key the service is open: every request acts as ``OPEN`` and the
    store is not consulted (as before keys existed: a service made open stays open)."""

    def __init__(self, configured: list[Grant], clock: Clock = time.time) -> None:
        self.clock = clock
        self._configured = {grant.digest: grant for grant in configured}
        self._stored: dict[bytes, Grant] | None = None  # None until first loaded
        self._by_id: dict[str, Grant] = {}
        self._version: int | None = None
        self._store: KeyStore | None = None
        self._refresh_lock = threading.Lock()
        self._stopping = threading.Event()
        self._poller: threading.Thread | None = None

    @property
    def open(self) -> bool:
        return not self._configured

    def lookup(self, token: bytes) -> Grant | None:
        """The key whose secret is ``token``, or None: O(len(token)), whatever the number
        of keys. NotReady while the stored keys are not loaded yet (at start-up)."""
        if self.open:
            return OPEN
        token_digest = digest(token)
        found = self._configured.get(token_digest)
        if found is None:
            stored = self._stored
            if stored is None:
                raise NotReady("the API keys are being loaded, retry shortly")
            found = stored.get(token_digest)
        # The dict found it by hash; the comparison of the digests themselves is
        # constant-time, so nothing about the key is told by the time it takes.
        if found is not None and hmac.compare_digest(found.digest, token_digest):
            return found
        return None

    # The store and its poller.

    def attach(self, store: KeyStore) -> None:
        """Use ``store``, load its keys and keep them in step in a thread."""
        self._store = store
        try:
            self.refresh()
        except Exception:  # the poller tries again; stored keys answer 503 meanwhile
            log.warning("could not load the API keys yet", exc_info=True)
        self._poller = threading.Thread(target=self._poll, name="key-ring", daemon=True)
        self._poller.start()

    def close(self) -> None:
        self._stopping.set()
        if self._poller is not None:
            self._poller.join()
        if self._store is not None:
            self._store.close()

    def _poll(self) -> None:
        failing = False
        while not self._stopping.wait(POLL_SECONDS):
            try:
                self.refresh()
                failing = False
            except Exception:
                if not failing:  # once per outage, not ten times a second
                    log.warning(
                        "could not read the API keys; the last ones read stay", exc_info=True
                    )
                failing = True

    def refresh(self, force: bool = False) -> None:
        """Load every stored key when the store's version changed: one read, and
        O(number of keys) when it did."""
        store = self._require_store()
        with self._refresh_lock:
            version = store.version()
            if not force and version == self._version and self._stored is not None:
                return
            grants = store.load()
            self._stored = {grant.digest: grant for grant in grants}
            self._by_id = {grant.id: grant for grant in grants}
            self._version = version

    def _require_store(self) -> KeyStore:
        if self._store is None:
            raise NotReady("the API keys are being loaded, retry shortly")
        return self._store

    # Key management (the admin routes): each change is in the store before it returns,
    # and seen by this process at once.

    def all(self) -> list[Grant]:
        self.refresh()
        return sorted(self._by_id.values(), key=lambda grant: (grant.created_at, grant.id))

    def get(self, key_id: str) -> Grant:
        self.refresh()
        found = self._by_id.get(key_id)
        if found is None:
            raise UnknownKey(key_id)
        return found

    def create(
        self,
        name: str,
        actions: list[str],
        collections: list[str],
        description: str = "",
        expires_at: float | None = None,
        rate: Rate | None = None,
    ) -> tuple[Grant, str]:
        """A new key and its secret, which is not kept: O(1) plus a store write."""
        secret = new_secret()
        grant = Grant(
            id=new_key_id(),
            name=name,
            description=description,
            actions=frozenset(actions),
            collections=tuple(collections),
            expires_at=expires_at,
            created_at=self.clock(),
            rate=rate or Rate(),
            digest=digest(secret.encode()),
        )
        self._require_store().save(grant)
        self.refresh(force=True)
        return grant, secret

    def update(self, key_id: str, changes: dict[str, Any]) -> Grant:
        grant = self.get(key_id).changed(changes)
        self._require_store().save(grant)
        self.refresh(force=True)
        return grant

    def delete(self, key_id: str) -> Grant:
        grant = self.get(key_id)
        if not self._require_store().delete(key_id):
            raise UnknownKey(key_id)
        self.refresh(force=True)
        return grant
