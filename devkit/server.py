"""Servers as child processes on a free port: the real ``neardup serve`` (Server, and
``neardup`` for a benchmark's temporary data directory), and any ASGI app under uvicorn as
``neardup serve`` runs it (``uvicorn_app``: the peer and the bare app of bench/)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from devkit.harness import REPO_ROOT

STARTUP_SECONDS = 60
APP_STARTUP_SECONDS = 120  # uvicorn_app's


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def neardup_command() -> str:
    """The console script installed beside this interpreter (what the image runs)."""
    return str(Path(sys.executable).parent / "neardup")


class Server:
    """``with Server(data_dir) as server:`` starts, waits for /readyz, and stops cleanly."""

    def __init__(self, data_dir: Path, *arguments: str, **environment: str) -> None:
        """``arguments``: options of ``neardup serve`` (``--workers``, ``2``)."""
        self.data_dir = data_dir
        self.arguments = arguments
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.environment = {
            **os.environ,
            "NEARDUP_HOST": "127.0.0.1",
            "NEARDUP_PORT": str(self.port),
            "NEARDUP_DATA_DIR": str(data_dir),
            **environment,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    def start(self) -> Server:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [neardup_command(), "serve", *self.arguments],
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + STARTUP_SECONDS
        with httpx.Client(base_url=self.url, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited: {self.output()}")
                try:
                    if client.get("/readyz").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                # Polling readiness of another process: there is no event to wait on.
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server not ready in {STARTUP_SECONDS} s: {self.output()}")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as docker stop sends it; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-4000:]

    def output_lines(self) -> list[str]:
        """Every line the server wrote (stdout and stderr)."""
        return self.log_path.read_text(errors="replace").splitlines()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill()


@dataclass(slots=True)
class Running:
    """A server a benchmark started: its name, URL and process, and how to stop it (SIGTERM;
    returns the exit code)."""

    name: str
    url: str
    pid: int
    stop: Callable[[], int]


@contextmanager
def neardup(
    *, data_dir: str | Path | None = None, synchronous: str = "FULL", log_level: str = "warning"
) -> Iterator[Running]:
    """``neardup serve`` (Server) on a temporary data directory (in ``data_dir``), removed
    afterwards; NEARDUP_SYNCHRONOUS and NEARDUP_LOG_LEVEL as given."""
    root = Path(tempfile.mkdtemp(prefix="neardup-service-", dir=data_dir))
    server = Server(
        root / "data",
        NEARDUP_SYNCHRONOUS=synchronous,
        NEARDUP_LOG_LEVEL=log_level,
    )
    try:
        server.start()
        assert server.process is not None
        yield Running("neardup", server.url, server.process.pid, server.stop)
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def uvicorn_app(
    name: str, target: str, *options: str, log_level: str = "warning", **environment: str
) -> Iterator[Running]:
    """``uvicorn <target>`` (module:attribute under the repository root) on a free port,
    one worker, uvloop and httptools (as ``neardup serve``), ``log_level``; ready once
    /readyz answers 200."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(tempfile.gettempdir()) / f"{name}-{port}.log"
    command = [sys.executable, "-m", "uvicorn", target, "--app-dir", str(REPO_ROOT)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--loop", "uvloop", "--http", "httptools", "--log-level", log_level]
    command += options
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**os.environ, "NUMBA_NUM_THREADS": "1", **environment},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop() -> int:
        process.terminate()
        return process.wait(30)

    try:
        deadline = time.monotonic() + APP_STARTUP_SECONDS
        with httpx.Client(base_url=url, timeout=2, trust_env=False) as client:
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: {log_path.read_text()[-2000:]}")
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)  # polling another process's readiness
        yield Running(name, url, process.pid, stop)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log_path.unlink(missing_ok=True)  # a failed start raised with its tail above


@contextmanager
def peer(*, peer_hash: str = "default", log_level: str = "warning") -> Iterator[Running]:
    """The peer a user would otherwise write (bench/peer_app.py: datasketch MinHashLSH and
    simhash.SimhashIndex behind FastAPI) under uvicorn_app; ``peer_hash`` its PEER_HASH."""
    with uvicorn_app("peer", "bench.peer_app:app", log_level=log_level, PEER_HASH=peer_hash) as app:
        yield app


@contextmanager
def bare_app(*, log_level: str = "warning") -> Iterator[Running]:
    """bench/bare_app.py (the service's models and answers, no work) under uvicorn_app,
    without uvicorn's access log."""
    with uvicorn_app("bare", "bench.bare_app:app", "--no-access-log", log_level=log_level) as app:
        yield app
