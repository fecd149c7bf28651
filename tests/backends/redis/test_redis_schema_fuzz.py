"""schemathesis against the Redis backend: tests/test_schema_fuzz.py's run again, on a
real server process whose NEARDUP_BACKEND is a standalone redis-server. No answer may
be a 5xx, and every answer must match the OpenAPI schema (the same document)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.server import Server
from tests.api.test_schema_fuzz import (  # noqa: F401 (collected again here, on Redis)
    API_KEY,
    SCHEMA_DOCUMENT,
    test_every_answer_matches_the_schema_and_none_is_a_server_error,
)
from tests.backends.redis.test_redis_api import emptied
from tests.redis_servers import RedisServer, redis_server

__all__ = ["redis_server"]  # a fixture, used by name


@pytest.fixture(scope="module")
def server_url(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    emptied(redis_server.url)
    environment = {
        "NEARDUP_LOG_LEVEL": "warning",
        "NEARDUP_MAX_LIMIT": "100",
        "NEARDUP_API_KEYS": API_KEY,
        "NEARDUP_BACKEND": redis_server.url,
    }
    with Server(tmp_path_factory.mktemp("redis-schema-fuzz") / "data", **environment) as server:
        assert httpx.get(f"{server.url}/openapi.json").json() == SCHEMA_DOCUMENT
        yield server.url
        assert server.stop() == 0
