"""The HTTP contract on the Redis backend (NEARDUP_BACKEND=redis://...), on a real
standalone redis-server (tests/redis_servers.py): tests/test_api.py's contract tests run
again here, each on an emptied server; the answers of a seeded stream of operations are
compared with the embedded service's for the same input; what the backend refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

import redis
from fastapi.testclient import TestClient

from tests.conftest import make_client
from tests.redis_servers import RedisServer, redis_server
from tests.test_api import (  # noqa: F401 (collected again here, on the Redis backend)
    test_a_batch_is_refused_whole_only_when_the_request_is_wrong,
    test_a_chain_of_reissues_lands_in_one_cluster,
    test_bad_bodies_give_422_that_say_what_is_wrong,
    test_bad_collection_names_and_settings,
    test_batch_matches_earlier_documents_of_the_same_batch,
    test_batches_answer_exactly_as_one_by_one_inserts,
    test_chinese_near_duplicates_through_the_api,
    test_collection_without_body_gets_the_defaults,
    test_collections_are_created_listed_described_and_dropped,
    test_delete_hides_a_document_at_once,
    test_either_method_can_be_switched_off,
    test_exact_duplicates_match_by_exact_hash,
    test_health_readiness_metrics_and_docs,
    test_insert_get_and_duplicate_answers,
    test_limits_give_413,
    test_put_inserts_then_replaces,
    test_search_by_post_and_get_stores_nothing,
    test_search_results_follow_the_match_rule_against_a_reference,
    test_similar_excludes_itself_and_checks_its_parameters,
    test_skip_reports_the_duplicate_and_stores_nothing,
    test_unknown_collection_everywhere_is_404,
)

__all__ = ["redis_server"]  # a fixture, used by name

# The limits of tests/conftest.py's client, which the contract tests assume.
LIMITS = {
    "max_text_chars": 20_000,
    "max_batch_documents": 50,
    "max_body_bytes": 200_000,
    "max_metadata_bytes": 1000,
    "max_limit": 100,
}


def emptied(url: str) -> None:
    made = redis.Redis.from_url(url)
    made.flushall()
    made.close()


@pytest.fixture
def client(redis_server: RedisServer, tmp_path: Path) -> Iterator[TestClient]:
    """An app on the Redis backend, on an emptied server."""
    emptied(redis_server.url)
    yield from make_client(tmp_path, backend=redis_server.url, **LIMITS)
