"""`neardup serve --workers N` on the Redis backend: several uvicorn workers, one service.

A real `neardup serve --workers 2` process over a real redis-server: the connections of a
client land on both worker processes (read from /proc: which worker holds which socket),
and a document inserted through any connection is read and found at once through every
other, whichever worker answers. Without NEARDUP_BACKEND the option is refused with a
message (the embedded service keeps its indexes in one process).
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("redis", reason="redis-py is in the test extra: pip install -e '.[test]'")

from devkit.corpus import english_like_text, mutate_words
from devkit.server import Server, neardup_command
from tests.redis_servers import RedisServer, emptied

DOCS = "/v1/collections/default/documents"
SEARCH = "/v1/collections/default/search"
CONNECTIONS = 16


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def workers(pid: int) -> list[int]:
    """uvicorn's worker processes under ``pid`` (multiprocessing's spawned children; not
    its resource tracker)."""
    return [
        child
        for child in children(pid)
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def server_side_inodes(port: int) -> dict[int, int]:
    """Established TCP connections to ``port`` on 127.0.0.1: client port -> the inode of
    the server's socket."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if state == "01" and int(local.split(":")[1], 16) == port:
            found[int(remote.split(":")[1], 16)] = inode
    return found


def workers_of_connections(server: Server, clients: list[httpx.Client]) -> list[int]:
    """The pid of the worker that holds each client's (kept-alive) connection."""
    assert server.process is not None
    ports = []
    for client in clients:  # opens the connection, or uses the one kept alive
        stream = client.get("/healthz").extensions["network_stream"]
        ports.append(stream.get_extra_info("client_addr")[1])
    held = {pid: socket_inodes(pid) for pid in workers(server.process.pid)}
    by_client_port = server_side_inodes(server.port)
    owners = []
    for port in ports:
        inode = by_client_port[port]
        owners += [pid for pid, inodes in held.items() if inode in inodes]
    return owners


@pytest.fixture
def served(redis_server: RedisServer, tmp_path: Path) -> Iterator[Server]:
    emptied(redis_server.url)
    server = Server(
        tmp_path / "data",
        "--workers",
        "2",
        NEARDUP_BACKEND=redis_server.url,
        NEARDUP_LOG_LEVEL="warning",
    )
    try:
        server.start()  # one worker answered /readyz
        ready = 0
        while ready < 30:  # the other too: new connections, each accepted by either
            with httpx.Client(base_url=server.url) as probe:
                ready = ready + 1 if probe.get("/readyz").status_code == 200 else 0
        yield server
        assert server.stop() == 0  # SIGTERM: the supervisor stops its workers and exits 0
    finally:
        if server.process is not None and server.process.poll() is None:
            for pid in children(server.process.pid):
                os.kill(pid, 9)
        server.kill()


def test_connections_spread_over_workers_that_see_each_others_writes(served: Server) -> None:
    assert served.process is not None
    assert len(workers(served.process.pid)) == 2
    clients = [httpx.Client(base_url=served.url, timeout=30) for _ in range(CONNECTIONS)]
    try:
        owners: list[int] = []
        for _ in range(10):  # new connections until both workers hold some (each accepts)
            owners = workers_of_connections(served, clients)
            if len(set(owners)) == 2:
                break
            for client in clients:
                client.close()
            clients = [httpx.Client(base_url=served.url, timeout=30) for _ in range(CONNECTIONS)]
        assert len(owners) == CONNECTIONS and len(set(owners)) == 2, owners
        rng = random.Random(15)
        for step in range(12):
            writer = clients[step % CONNECTIONS]
            text = english_like_text(rng, 1200)
            inserted = writer.post(DOCS, json={"id": f"doc-{step}", "text": text})
            assert inserted.status_code == 201, inserted.text
            near = mutate_words(rng, text, 0.005)
            for client in clients:  # through both workers, at once
                got = client.get(f"{DOCS}/doc-{step}")
                assert got.status_code == 200 and got.json()["id"] == f"doc-{step}"
                matches = client.post(SEARCH, json={"text": near}).json()["matches"]
                assert f"doc-{step}" in [m["id"] for m in matches]
        batch = [{"id": f"batch-{i}", "text": english_like_text(rng, 800)} for i in range(20)]
        answer = clients[1].post(f"{DOCS}/batch", json={"documents": batch})
        assert answer.status_code == 200, answer.text
        for i, client in enumerate(clients):
            assert client.get(f"{DOCS}/batch-{i}").status_code == 200
            stats = client.get("/v1/collections/default").json()["stats"]
            assert stats["documents"] == 12 + 20
        # Both workers served the reads above (each holds some of the connections).
        assert workers_of_connections(served, clients) == owners
    finally:
        for client in clients:
            client.close()


def test_several_workers_need_the_redis_backend(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if k != "NEARDUP_BACKEND"}
    environment["NEARDUP_DATA_DIR"] = str(tmp_path / "data")
    for command, env in (
        ([neardup_command(), "serve", "--workers", "2"], environment),
        ([neardup_command(), "serve"], {**environment, "NEARDUP_WORKERS": "3"}),
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1
        assert "need NEARDUP_BACKEND (Redis)" in done.stderr, done.stderr
        assert "embedded service keeps its indexes in one process" in done.stderr
