"""Redis failures as the API answers them (503 storage_unavailable), counted by kind."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from redis.exceptions import RedisError

from app.backends.redis.store.wire import ReplicasBehind
from app.errors import StorageUnavailable


class Failures:
    """Redis failures by kind (``redis_error``, ``replicas_behind``), for /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"redis_error": 0, "replicas_behind": 0}

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1


@contextlib.contextmanager
def storage_errors(failures: Failures | None = None) -> Iterator[None]:
    """Redis out of reach, an error reply, or replicas behind: 503 storage_unavailable.
    What a write did before it failed stays; a retry of the same request is safe."""
    try:
        yield
    except ReplicasBehind as error:
        if failures is not None:
            failures.add("replicas_behind")
        raise StorageUnavailable(f"Redis replicas did not confirm the write: {error}") from error
    except RedisError as error:
        if failures is not None:
            failures.add("redis_error")
        raise StorageUnavailable(f"Redis: {error}") from error
