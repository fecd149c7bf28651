"""A Docker engine for the deployment tests (tests/deploy/), made as an operator makes one
on a Debian machine with no registry of images in reach: Debian's docker.io (dockerd),
docker-compose and debootstrap, installed by ``make deploy``; dockerd started here when
none answers (its PID kept, and at the end stopped, its bridge and firewall rules
removed); stand-in base images made once from a debootstrapped Debian and kept by tag.

Docker Hub cannot be reached, so ``python:3.11-slim`` and ``redis:7.2`` (the Dockerfile's
and the compose file's bases) are made here: a minimal bookworm with Debian's Python 3.11
and a virtual environment first on PATH, and the same with Debian's redis-server. The
machine's CA certificates go into them, so that pip in a build trusts what this machine
trusts. ``docker build`` then builds the project's Dockerfile unchanged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOTFS_IMAGE = "neardup-standin/bookworm:base"
PYTHON_IMAGE = "python:3.11-slim"
REDIS_IMAGE = "redis:7.2"
MIRROR = "http://deb.debian.org/debian"
CA_DIRECTORY = Path("/usr/local/share/ca-certificates")
TOOLS = ("dockerd", "docker", "docker-compose", "debootstrap")
START_SECONDS = 60.0

PYTHON_DOCKERFILE = f"""FROM {ROOTFS_IMAGE}
RUN python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    LANG=C.UTF-8
CMD ["python3"]
"""
REDIS_DOCKERFILE = f"""FROM {ROOTFS_IMAGE}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends redis-server \\
    && rm -rf /var/lib/apt/lists/*
CMD ["redis-server", "--protected-mode", "no"]
"""


def missing() -> str | None:
    """Why the deployment tests cannot run here, or None."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return (
            f"{', '.join(absent)} not installed (make deploy installs docker.io, docker-compose "
            "and debootstrap as root with apt-get)"
        )
    return None


def run(
    *command: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A command's output as text; a failure raises with its output."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        output = f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{output}")
    return done


def answers() -> bool:
    return run("docker", "info", timeout=30, check=False).returncode == 0


@dataclass
class Engine:
    """The engine the tests use; ``process`` is dockerd when this module started it."""

    process: subprocess.Popen[bytes] | None
    log: Path | None

    def stop(self) -> None:
        """Stop the dockerd started here and remove what it added to the network: the
        docker0 bridge and its firewall chains (an engine found running is left as is)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _remove_network_leftovers()


def _remove_network_leftovers() -> None:
    links = run("ip", "-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == "docker0" or name.startswith("br-") or name.startswith("veth"):
            run("ip", "link", "delete", name, check=False)
    for table in ("nat", "filter"):
        rules = run("iptables-save", "-t", table, check=False)
        if rules.returncode != 0 or "DOCKER" not in rules.stdout:
            continue
        kept = [
            line
            for line in rules.stdout.splitlines()
            if "DOCKER" not in line and "docker0" not in line and " br-" not in line
        ]
        subprocess.run(["iptables-restore"], input="\n".join(kept) + "\n", text=True, check=False)


def start_engine(directory: Path) -> Engine:
    """The Docker engine: the one that answers, or a dockerd started now (its log in
    ``directory``)."""
    if answers():
        return Engine(None, None)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "dockerd.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["dockerd", "--pidfile", str(directory / "dockerd.pid")],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    engine = Engine(process, log)
    deadline = time.monotonic() + START_SECONDS
    # Polling another process's start: dockerd gives no other signal that it answers.
    while not answers():
        if process.poll() is not None or time.monotonic() > deadline:
            engine.stop()
            raise RuntimeError(f"dockerd did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return engine


def has_image(tag: str) -> bool:
    return run("docker", "image", "inspect", tag, timeout=60, check=False).returncode == 0


def make_base_images() -> None:
    """The stand-in base images, each made only when its tag is missing: a minimal
    bookworm (debootstrap, ~60 s) with Python 3.11, venv and the CA certificates,
    imported; then python:3.11-slim and redis:7.2 built on it."""
    if not has_image(ROOTFS_IMAGE):
        with tempfile.TemporaryDirectory(prefix="neardup-rootfs-") as scratch:
            root = Path(scratch) / "root"
            run(
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(root),
                MIRROR,
                timeout=1200,
            )
            for certificate in CA_DIRECTORY.glob("*.crt"):
                shutil.copy(certificate, root / "usr/local/share/ca-certificates")
            run("chroot", str(root), "update-ca-certificates")
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for path in (root / leftover).glob("*"):
                    if path.is_file():
                        path.unlink()
            with subprocess.Popen(
                ["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
            ) as tar:
                imported = subprocess.run(
                    ["docker", "import", "-", ROOTFS_IMAGE], stdin=tar.stdout, capture_output=True
                )
            if imported.returncode != 0:
                raise RuntimeError(f"docker import failed: {imported.stderr.decode()}")
    for tag, dockerfile in ((PYTHON_IMAGE, PYTHON_DOCKERFILE), (REDIS_IMAGE, REDIS_DOCKERFILE)):
        if not has_image(tag):
            with tempfile.TemporaryDirectory(prefix="neardup-standin-") as context:
                (Path(context) / "Dockerfile").write_text(dockerfile)
                # The host's network: apt reaches the mirror as this machine does.
                run("docker", "build", "--network", "host", "-q", "-t", tag, context)


def build_image(tag: str, context: Path) -> float:
    """``docker build`` of the project's Dockerfile, unchanged; the seconds it took."""
    started = time.monotonic()
    run("docker", "build", "--network", "host", "-q", "-t", tag, str(context), timeout=1800)
    return time.monotonic() - started


def image_megabytes(tag: str) -> float:
    size = run("docker", "image", "inspect", "-f", "{{.Size}}", tag).stdout.strip()
    return int(size) / 1e6


@contextlib.contextmanager
def engine_with_images(directory: Path) -> Iterator[Engine]:
    engine = start_engine(directory)
    try:
        make_base_images()
        yield engine
    finally:
        engine.stop()


def is_root() -> bool:
    return os.geteuid() == 0
