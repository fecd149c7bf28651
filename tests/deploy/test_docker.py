"""The image and the compose file, built and run as an operator does (issue 29).

Debian's dockerd (started here when none answers, stopped at the end), stand-in base
images made from a debootstrapped Debian (devkit/docker_env.py: Docker Hub is out of
reach), the project's Dockerfile built unchanged, then:

- ``docker run`` with a volume: ready, the README's examples answer what the README
  says, a restart keeps every acknowledged document, the health check turns healthy,
  the logs are JSON lines, ``docker stop`` is clean (exit 0, well within the grace);
- ``docker-compose up`` of the default service, with the API key from its secret file;
- ``docker-compose --profile redis-cluster``: two neardup services reading each other's
  writes, a ``docker kill`` of a Redis primary during inserts and one of a neardup
  container, with nothing acknowledged lost.

Skipped with the reason where Docker cannot be installed or started (make deploy needs
root and apt-get). Its own make target: ``make test-deploy``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from devkit import docker_env
from devkit.docker_env import run

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "neardup:0.1.0"  # the compose file's pinned tag
READY_SECONDS = 120.0
FAILOVER_SECONDS = 90.0
DOCS = "/v1/collections/default/documents"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def until(check: Callable[[], bool], what: str, seconds: float = READY_SECONDS) -> None:
    # Polling containers: another process's readiness, health or failover sends no event.
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.25)


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = docker_env.missing()
    if reason is not None:
        pytest.skip(reason)
    if not docker_env.is_root():
        pytest.skip("dockerd needs root")
    with docker_env.engine_with_images(tmp_path_factory.mktemp("docker")):
        seconds = docker_env.build_image(IMAGE, ROOT)
        print(f"image built in {seconds:.0f} s, {docker_env.image_megabytes(IMAGE):.0f} MB")
        yield IMAGE


# ---------------------------------------------------------------- docker run


def readme_examples() -> list[tuple[str, str, str | None, str]]:
    """(method, path, body, answer) of the README's first four curl examples ("Using
    it": an insert, a batch, a search and a similar; the answers hold no time)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Using it") :]
    found = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S)[:2]:
        lines = block.replace("\\\n", " ").splitlines()
        for at, line in enumerate(lines):
            if not line.startswith("$ curl"):
                continue
            words = shlex.split(line[2:])
            method = words[words.index("-X") + 1] if "-X" in words else "GET"
            url = next(w for w in words if w.startswith("localhost:8000"))
            body = words[words.index("-d") + 1] if "-d" in words else None
            found.append((method, url.removeprefix("localhost:8000"), body, lines[at + 1]))
    return found[:4]


def test_a_container_serves_restarts_and_stops_cleanly(image: str) -> None:
    name, volume, port = (
        f"neardup-test-{uuid.uuid4().hex[:8]}",
        f"neardup-test-{uuid.uuid4().hex[:8]}",
        free_port(),
    )
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    run(
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "-p",
        f"127.0.0.1:{port}:8000",
        "-v",
        f"{volume}:/data",
        image,
    )
    try:
        until(lambda: ready(url), "the container never became ready")
        print(f"docker run to ready: {time.monotonic() - started:.1f} s")
        examples = readme_examples()
        assert len(examples) == 4
        for method, path, body, answer in examples:
            got = httpx.request(
                method, url + path, content=body, headers={"content-type": "application/json"}
            )
            assert got.json() == json.loads(answer), (path, got.text)
        acknowledged = [f"doc-{i}" for i in range(200)]
        batch = [
            {"id": i, "text": f"document {i} of the restart check, words {i * 7} and {i * 13}"}
            for i in acknowledged
        ]
        assert (
            httpx.post(f"{url}{DOCS}/batch", json={"documents": batch}, timeout=30).status_code
            == 200
        )
        run("docker", "restart", "-t", "30", name)
        until(lambda: ready(url), "not ready after the restart")
        for document_id in [*acknowledged, "story-1", "story-2", "story-3"]:
            assert httpx.get(f"{url}{DOCS}/{document_id}").status_code == 200, document_id
        status = ("docker", "inspect", "-f", "{{.State.Health.Status}}", name)
        until(
            lambda: run(*status).stdout.strip() == "healthy",
            "the health check never turned healthy",
        )
        logs = run("docker", "logs", name).stdout + run("docker", "logs", name).stderr
        records = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        assert records and all({"level", "message", "time"} <= set(r) for r in records)
        stopping = time.monotonic()
        run("docker", "stop", "-t", "30", name)
        took = time.monotonic() - stopping
        state = json.loads(run("docker", "inspect", "-f", "{{json .State}}", name).stdout)
        assert state["ExitCode"] == 0 and not state["OOMKilled"], state
        assert took < 15, f"docker stop took {took:.1f} s: SIGTERM was not handled"
        print(f"docker stop: {took:.1f} s, exit 0")
    finally:
        run("docker", "rm", "-f", name, check=False)
        run("docker", "volume", "rm", "-f", volume, check=False)


# ---------------------------------------------------------------- docker-compose


class Compose:
    """docker-compose on a copy of the project's compose file, with a secrets file, in a
    project of its own (its containers, networks and volumes removed at the end)."""

    def __init__(self, directory: Path, ports: dict[str, int]) -> None:
        shutil.copy(ROOT / "docker-compose.yml", directory / "docker-compose.yml")
        (directory / "secrets").mkdir()
        self.key = secrets.token_hex(16)
        keys = directory / "secrets" / "neardup_api_keys"
        keys.write_text(f"# the test's key\n{self.key}\n")
        os.chown(keys, 10001, 0)  # the image's user reads it
        keys.chmod(0o600)
        self.directory = directory
        self.project = f"neardup-test-{uuid.uuid4().hex[:8]}"
        self.environment = {**os.environ, **{k: str(v) for k, v in ports.items()}}
        self.headers = {"authorization": f"Bearer {self.key}"}

    def __call__(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # The profile named always: its services are then known to every command (ps,
        # start); `up` starts only the services it is given and what they depend on.
        command = [
            "docker-compose",
            "-p",
            self.project,
            "-f",
            str(self.directory / "docker-compose.yml"),
            "--profile",
            "redis-cluster",
            *arguments,
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env=self.environment
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def container(self, service: str) -> str:
        return self("ps", "-q", service).stdout.strip()

    def down(self) -> None:
        self("down", "-v", "--remove-orphans", "-t", "10", check=False)


def test_compose_serves_the_default_service_with_its_api_key(image: str, tmp_path: Path) -> None:
    port = free_port()
    compose = Compose(tmp_path, {"NEARDUP_PUBLISHED_PORT": port})
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        compose("up", "-d", "neardup")
        until(lambda: ready(url), "the compose service never became ready")
        print(f"docker-compose up (default service) to ready: {time.monotonic() - started:.1f} s")
        document = {"id": "a", "text": "a document through compose"}
        assert httpx.post(url + DOCS, json=document).status_code == 401  # the key is required
        assert httpx.post(url + DOCS, json=document, headers=compose.headers).status_code == 201
        assert httpx.get(f"{url}{DOCS}/a", headers=compose.headers).status_code == 200
    finally:
        compose.down()


class Writer:
    """Single inserts through a neardup service, in a thread: only those answered 201 (or
    200 to a retry of one already written) are acknowledged. 503 is "not written durably"
    (a replica's WAIT timed out on a busy machine, a failover): a retry's business, as a
    client does it; a dead connection is no answer at all. What each refusal said is kept
    for the failure message."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers
        self.acknowledged: dict[str, str] = {}
        self.refusals: list[str] = []
        self.attempts = 0
        self._numbers = itertools.count()

    def _document(self) -> dict[str, str]:
        number = next(self._numbers)
        return {"id": f"d{number}", "text": f"cluster document {number}, words {number * 31}"}

    def _post(self, url: str, document: dict[str, str]) -> bool:
        try:
            answer = httpx.post(url + DOCS, json=document, headers=self.headers, timeout=10)
        except httpx.HTTPError as error:
            self.refusals.append(f"{document['id']}: {type(error).__name__} {error}")
            return False
        finally:
            self.attempts += 1
        if answer.status_code in (200, 201):
            self.acknowledged[document["id"]] = document["text"]
            return True
        assert answer.status_code == 503, answer.text
        self.refusals.append(f"{document['id']}: 503 {answer.text}")
        return False

    def insert(self, url: str) -> None:
        """One attempt, as the inserts during a kill make them."""
        self._post(url, self._document())

    def insert_retrying(self, url: str, tries: int = 4) -> bool:
        """A new document, retried under its id after a refusal with a growing pause (a
        client's back-off, not a synchronisation): True once acknowledged."""
        document = self._document()
        for attempt in range(tries):
            if self._post(url, document):
                return True
            time.sleep(0.25 * 2**attempt)
        return False

    def kill_during_inserts(self, url: str, kill: Callable[[], object]) -> None:
        """Inserts through ``url``; ``kill`` once 20 more are acknowledged, and 10 more
        attempts after it: the kill lands among inserts in flight."""
        stop = threading.Event()

        def insert_until_stopped() -> None:
            while not stop.is_set():
                self.insert(url)

        before = len(self.acknowledged)
        inserting = threading.Thread(target=insert_until_stopped)
        inserting.start()
        try:
            until(lambda: len(self.acknowledged) >= before + 20, "no inserts acknowledged")
            kill()
            killed_at = self.attempts
            until(lambda: self.attempts >= killed_at + 10, "inserts stopped after the kill")
        finally:
            stop.set()
            inserting.join()

    def all_readable(self, url: str) -> bool:
        try:
            return all(
                httpx.get(f"{url}{DOCS}/{i}", headers=self.headers, timeout=5).status_code == 200
                for i in self.acknowledged
            )
        except httpx.HTTPError:
            return False


def _role(compose: Compose, service: str) -> str:
    done = run("docker", "exec", compose.container(service), "redis-cli", "role", check=False)
    return done.stdout.split("\n", 1)[0].strip()


def test_compose_redis_cluster_loses_nothing_acknowledged(image: str, tmp_path: Path) -> None:
    ports = {"NEARDUP_A_PUBLISHED_PORT": free_port(), "NEARDUP_B_PUBLISHED_PORT": free_port()}
    compose = Compose(tmp_path, ports)
    a = f"http://127.0.0.1:{ports['NEARDUP_A_PUBLISHED_PORT']}"
    b = f"http://127.0.0.1:{ports['NEARDUP_B_PUBLISHED_PORT']}"
    writer = Writer(compose.headers)
    try:
        started = time.monotonic()
        compose("up", "-d", "neardup-a", "neardup-b")
        until(lambda: ready(a) and ready(b), "the Redis profile never became ready", 240)
        took = time.monotonic() - started
        print(f"docker-compose up (redis-cluster profile, both services) to ready: {took:.1f} s")
        for _ in range(50):
            writer.insert_retrying(a)
        assert len(writer.acknowledged) == 50, writer.refusals
        # A healthy, ready cluster refuses a write only now and then (a WAIT past its
        # timeout while the machine is busy), never as a rule.
        assert len(writer.refusals) <= 5, writer.refusals
        assert writer.all_readable(b)  # written through a, read through b

        primary = next(
            f"redis-{n}" for n in range(1, 7) if _role(compose, f"redis-{n}") == "master"
        )
        victim = compose.container(primary)
        writer.kill_during_inserts(a, lambda: run("docker", "kill", victim))
        until(
            lambda: writer.all_readable(b),
            "acknowledged documents lost with a Redis primary",
            FAILOVER_SECONDS,
        )
        # Its replica took over alone: not ready (writes there cannot be WAITed for), until
        # the killed node is back as the new primary's replica.
        assert not ready(a)
        run("docker", "start", victim)
        until(
            lambda: ready(a) and ready(b),
            "not ready again once the node came back",
            FAILOVER_SECONDS,
        )

        neardup_a = compose.container("neardup-a")
        writer.kill_during_inserts(a, lambda: run("docker", "kill", neardup_a))
        assert writer.all_readable(b), "acknowledged documents lost with a neardup container"
        run("docker", "start", neardup_a)
        until(lambda: ready(a), "neardup-a never came back")
        assert writer.all_readable(a)
        print(f"{len(writer.acknowledged)} acknowledged documents, all read back after both kills")
    finally:
        compose.down()
