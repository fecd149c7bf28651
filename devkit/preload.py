"""Preload a running neardup with N distinct documents through the batch API.

Documents ``pre-{i}`` for i in [start, start + count), text ``corpus.document(i)`` (3 KB
of varied Reuters by default, see devkit/documents.py), sent 256 to a batch by a few
concurrent httpx clients. A load test can then ask for the neighbours of ``pre-{i}`` and
send near-duplicates of ``document(i)``. Only loopback addresses are accepted: this is a
load generator, and nothing but this machine is a target. The command is
``python -m loadtest.preload``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import socket
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import orjson
import uvloop
from tqdm import tqdm

from devkit.documents import DEFAULT_CHARS, Corpus, load_corpus

# httpcore imports sniffio each time it sets up a lock, an event or a semaphore (four
# times per request); anyio 4.16 no longer installs sniffio, and a failed import searches
# sys.path again every time: about 1 ms of CPU per request here, which capped httpx at a
# few hundred requests/s. Recording the absence makes the import fail at once, and
# httpcore then assumes asyncio, which it is. (Installing sniffio does as well.)
if importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]

T = TypeVar("T")
JSON_HEADERS = {"content-type": "application/json"}
DEFAULT_URL = "http://127.0.0.1:8000"
BATCH_SIZE = 256
CONCURRENCY = 4
REQUEST_TIMEOUT = 600.0  # a slow peer may take minutes over a batch of 256 at 1M


class PreloadFailed(RuntimeError):
    pass


def check_loopback(url: str) -> None:
    """Refuse any target that is not an address of this machine's loopback interface."""
    host = urlsplit(url).hostname
    if host is None:
        raise ValueError(f"no host in {url!r}")
    addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise ValueError(f"{url} is not a loopback address: load tests target this machine only")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop: the cheapest event loop for a load generator."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def batch_body(ids: list[str], texts: list[str]) -> bytes:
    documents = [{"id": i, "text": t} for i, t in zip(ids, texts, strict=True)]
    return orjson.dumps({"documents": documents})


@dataclass(frozen=True, slots=True)
class PreloadResult:
    documents: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.documents / self.seconds if self.seconds else 0.0


async def preload_async(
    url: str,
    count: int,
    *,
    start: int = 0,
    batch_size: int = BATCH_SIZE,
    concurrency: int = CONCURRENCY,
    chars: int = DEFAULT_CHARS,
    collection: str = "default",
    prefix: str = "pre",
    corpus: Corpus | None = None,
    progress: bool = True,
    description: str = "preload",
) -> PreloadResult:
    """Insert documents ``{prefix}-{i}``, i in [start, start + count); raise on any error."""
    check_loopback(url)
    corpus = corpus or load_corpus()
    path = f"/v1/collections/{collection}/documents/batch"
    starts = iter(range(start, start + count, batch_size))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    bar = tqdm(total=count, unit="doc", desc=description, disable=not progress, file=sys.stderr)

    async def worker(client: httpx.AsyncClient) -> None:
        for first in starts:  # one iterator shared by the workers of one event loop
            keys = range(first, min(first + batch_size, start + count))
            body = batch_body(
                [f"{prefix}-{k}" for k in keys], [corpus.document(k, chars) for k in keys]
            )
            response = await client.post(path, content=body, headers=JSON_HEADERS)
            if response.status_code != 200:
                raise PreloadFailed(
                    f"batch at {prefix}-{first}: HTTP {response.status_code}: {response.text[:500]}"
                )
            bar.update(len(keys))

    began = time.perf_counter()
    try:
        async with (
            httpx.AsyncClient(
                base_url=url, timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False
            ) as client,
            asyncio.TaskGroup() as group,
        ):
            for _ in range(concurrency):
                group.create_task(worker(client))
    except ExceptionGroup as errors:
        raise errors.exceptions[0] from None  # the first failure says what went wrong
    finally:
        bar.close()
    return PreloadResult(count, time.perf_counter() - began)


def preload(url: str, count: int, **options: Any) -> PreloadResult:
    """The synchronous entry point (runs its own event loop)."""
    return run_async(preload_async(url, count, **options))
