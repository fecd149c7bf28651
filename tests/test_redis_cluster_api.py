"""The HTTP contract on the Redis backend over a Redis Cluster of 3 primaries and 3
replicas (tests/redis_servers.py), every write WAITed for a replica
(NEARDUP_REDIS_WAIT_REPLICAS=1): a subset of tests/test_api.py's contract tests, and a
stream of operations answered as the embedded service answers it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from fastapi.testclient import TestClient

from tests.conftest import make_client
from tests.redis_servers import RedisClusterServers, redis_cluster
from tests.test_api import (  # noqa: F401 (collected again here, on a Redis Cluster)
    test_a_chain_of_reissues_lands_in_one_cluster,
    test_batch_matches_earlier_documents_of_the_same_batch,
    test_collections_are_created_listed_described_and_dropped,
    test_delete_hides_a_document_at_once,
    test_insert_get_and_duplicate_answers,
    test_put_inserts_then_replaces,
    test_similar_excludes_itself_and_checks_its_parameters,
    test_unknown_collection_everywhere_is_404,
)
from tests.test_redis_api import LIMITS, compare_stream, emptied

__all__ = ["redis_cluster"]  # a fixture, used by name


@pytest.fixture
def client(redis_cluster: RedisClusterServers, tmp_path: Path) -> Iterator[TestClient]:
    emptied(redis_cluster.url)
    yield from make_client(tmp_path, backend=redis_cluster.url, redis_wait_replicas=1, **LIMITS)


def test_a_stream_of_operations_answers_as_the_embedded_service(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    compare_stream(redis_cluster.url, tmp_path, 3, redis_wait_replicas=1)
