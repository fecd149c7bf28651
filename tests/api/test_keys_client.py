"""The key verbs of the Python client (sync and async) and of ``neardup keys``, against a
real server process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.server import Server, neardup_command
from neardup_client import APIError, AsyncClient, Client

ADMIN_KEY = "c" * 16 + "-client-admin"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir: Path = tmp_path_factory.mktemp("keys-client") / "data"
    with Server(data_dir, NEARDUP_API_KEYS=ADMIN_KEY, NEARDUP_LOG_LEVEL="warning") as running:
        yield running


def test_the_sync_client_creates_lists_updates_and_revokes_keys(server: Server) -> None:
    with Client(server.url, api_key=ADMIN_KEY) as admin:
        admin.create_collection("news-fr")
        admin.create_collection("forum")
        made = admin.create_key(
            "dashboard", ["search"], ["news-*"], "reads the news", requests_per_second=20
        )
        assert made.key is not None and made.requests_per_second == 20
        assert [k.id for k in admin.list_keys()] == [made.id]
        assert admin.get_key(made.id).key is None  # shown once
        with Client(server.url, api_key=made.key) as scoped:
            assert [c.name for c in scoped.list_collections()] == ["news-fr"]
            with pytest.raises(APIError) as refused:
                scoped.get_collection("forum")
            assert refused.value.status == 404
        changed = admin.update_key(made.id, {"collections": ["*"]})
        assert changed.collections == ("*",)
        admin.delete_key(made.id)
        assert admin.list_keys() == []


def test_the_async_client_has_the_same_verbs(server: Server) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, api_key=ADMIN_KEY) as admin:
            made = await admin.create_key("crawler", ["documents.add"], ["news-*"])
            assert (await admin.get_key(made.id)).name == "crawler"
            updated = await admin.update_key(made.id, {"description": "the crawl"})
            assert updated.description == "the crawl"
            assert made.id in [k.id for k in await admin.list_keys()]
            await admin.delete_key(made.id)

    asyncio.run(run())


def test_the_command_line_manages_keys(server: Server) -> None:
    environment = {**os.environ, "NEARDUP_URL": server.url, "NEARDUP_API_KEY": ADMIN_KEY}

    def neardup(*arguments: str) -> list[dict[str, object]]:
        done = subprocess.run(
            [neardup_command(), "keys", *arguments],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        return [json.loads(line) for line in done.stdout.splitlines()]

    (made,) = neardup(
        "create", "cli-key", "--actions", "search,metrics", "--collections", "news-*,forum"
    )
    assert made["name"] == "cli-key" and str(made["key"]).startswith("nd_")
    assert made["actions"] == ["metrics", "search"]
    (changed,) = neardup("update", str(made["id"]), "--requests-per-second", "5")
    assert changed["requests_per_second"] == 5
    assert "key" not in changed
    assert made["id"] in [key["id"] for key in neardup("list")]
    assert neardup("delete", str(made["id"])) == []
    assert made["id"] not in [key["id"] for key in neardup("list")]
