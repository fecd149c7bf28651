"""Run the real `neardup serve` command as a child process on a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

STARTUP_SECONDS = 60


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
