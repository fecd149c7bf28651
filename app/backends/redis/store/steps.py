"""Steps: a read that takes several round trips, written once and driven two ways.

A search is round trips with work between them (lookups, then the rows found, then for
short texts the rows the n-gram index alone found). Written as a generator that yields
each round trip's ``Batch`` and is sent its replies, the same code runs

- in a thread (``run``: the wire's blocking sockets), for the sync callers (inserts,
  the batch job, the tests' references), and
- on the event loop (``run_async``: the wire's asyncio connections), for the API's
  searches, with no hop through the thread pool. Handing the GIL between the loop and a
  pool thread on every search cost as much CPU as the search itself when they ran on
  two cores (docs/benchmarks.md, issue 15).

>>> from app.backends.redis.store.wire import unpack
>>> def double_echo(value: bytes) -> Steps[int]:
...     (reply,) = yield Batch.of([("ECHO", value)], cluster=False)
...     return 2 * int(reply)
>>> class Echo:
...     def send_packed(self, packed, keys, durable):
...         return [unpack(p)[1] for p in packed]
>>> run(double_echo(b"21"), Echo())
42
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from app.backends.redis.store.wire import Command, key_of, pack

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Batch:
    """One round trip: commands packed as RESP, and in a cluster the key each is routed by."""

    packed: Sequence[bytes]
    keys: Sequence[bytes | str] | None = None
    durable: bool = False

    @staticmethod
    def of(commands: Sequence[Command], *, cluster: bool, durable: bool = False) -> Batch:
        keys = [key_of(command) for command in commands] if cluster else None
        return Batch([pack(command) for command in commands], keys, durable)


# Yields the batches, is sent each one's replies, returns the read's answer.
Steps = Generator[Batch, list[Any], T]


class SyncSender(Protocol):
    def send_packed(
        self, packed: Sequence[bytes], keys: Sequence[bytes | str] | None, durable: bool
    ) -> list[Any]: ...


class AsyncSender(Protocol):
    async def send_packed_async(
        self, packed: Sequence[bytes], keys: Sequence[bytes | str] | None, durable: bool
    ) -> list[Any]: ...


def run(steps: Steps[T], wire: SyncSender) -> T:
    """The answer of ``steps``, each batch sent and waited for in this thread."""
    try:
        batch = next(steps)
        while True:
            replies = wire.send_packed(batch.packed, batch.keys, batch.durable)
            batch = steps.send(replies)
    except StopIteration as done:
        answer: T = done.value
        return answer


async def run_async(steps: Steps[T], wire: AsyncSender) -> T:
    """The answer of ``steps``, each batch sent and awaited on the running event loop."""
    try:
        batch = next(steps)
        while True:
            replies = await wire.send_packed_async(batch.packed, batch.keys, batch.durable)
            batch = steps.send(replies)
    except StopIteration as done:
        answer: T = done.value
        return answer
