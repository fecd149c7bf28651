"""Real redis-server processes for the tests: a standalone one and a 3-primary cluster.

Debian's redis-server and redis-cli (``make redis`` installs them as root); where they are
missing, the tests that need them skip and say so. Each server runs on a free localhost
port in a temporary directory, without persistence, and is stopped by its fixture.
Readiness is polled (PING, then CLUSTER INFO), never waited for by a fixed sleep.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.02
# Cluster nodes also listen on port + 10000 (the cluster bus): both must be free.
CLUSTER_BUS_OFFSET = 10_000
# Small sorted sets stay packed (listpack) up to this many members: docs/redis.md.
SERVER_OPTIONS = ("--zset-max-listpack-entries", "512")


def _missing() -> str | None:
    for program in ("redis-server", "redis-cli"):
        if shutil.which(program) is None:
            return (
                f"{program} is not installed (`make redis` installs Debian's redis-server as root)"
            )
    return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster_bus: bool = False) -> int:
    """A localhost port nothing listens on (and port + 10000 too, for a cluster node)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if not cluster_bus or (port + CLUSTER_BUS_OFFSET < 65536 and _port_free(port + 10_000)):
            return port
    raise RuntimeError("no free port pair found")


def _cli(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=10,
    )


def _wait_for(what: str, ready: object, process: subprocess.Popen[bytes] | None = None) -> None:
    assert callable(ready)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        if ready():
            return
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"{what} was not ready after {READY_TIMEOUT_SECONDS:.0f} s")


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(directory: Path, *options: str, cluster: bool = False) -> RedisServer:
    """A redis-server on a free port, its files in ``directory``, answering PING."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port(cluster_bus=cluster)
    command = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "no",
        "--logfile", str(directory / "redis.log"),
        *SERVER_OPTIONS,
        *options,
    ]  # fmt: skip
    if cluster:
        command += [
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(directory / "nodes.conf"),
            "--cluster-node-timeout", "2000",
        ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisServer(port, directory, process)
    try:
        _wait_for(
            f"redis-server on port {port}",
            lambda: _cli(port, "PING").stdout.strip() == "PONG",
            process,
        )
    except BaseException:
        server.stop()
        raise
    return server


@dataclass
class RedisClusterServers:
    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        """A redis-cluster:// URL with every node as a seed."""
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_cluster(directory: Path, primaries: int = 3, replicas: int = 1) -> RedisClusterServers:
    """``primaries`` primaries with ``replicas`` replicas each, made by redis-cli --cluster
    create, every node reporting cluster_state:ok."""
    servers = RedisClusterServers([])
    try:
        for index in range(primaries * (1 + replicas)):
            servers.nodes.append(start_server(directory / f"node{index}", cluster=True))
        addresses = [f"127.0.0.1:{node.port}" for node in servers.nodes]
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses,
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")

        def all_ok() -> bool:
            return all(
                "cluster_state:ok" in _cli(n.port, "CLUSTER", "INFO").stdout for n in servers.nodes
            )

        _wait_for("the cluster", all_ok)

        def replicas_online() -> bool:
            """Every primary's replicas connected and in sync, so WAIT can count them."""
            for node in servers.nodes:
                info = _cli(node.port, "INFO", "replication").stdout
                if "role:master" in info and info.count("state=online") < replicas:
                    return False
            return True

        _wait_for("the cluster's replicas", replicas_online)
    except BaseException:
        servers.stop()
        raise
    return servers


@contextlib.contextmanager
def standalone(directory: Path) -> Iterator[RedisServer]:
    server = start_server(directory)
    try:
        yield server
    finally:
        server.stop()
