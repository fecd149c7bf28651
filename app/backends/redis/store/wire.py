"""Wire: a list of commands in one round trip, to one Redis or to every node of a cluster.

redis-py's pipelines spend Python on every command (response callbacks, command
policies, argument encoding one generator at a time); an insert of 10,000 documents is
some 80,000 ZADDs, so that was most of its time. Here a batch is RESP bytes (packed by
hiredis in C, or by the caller: ``send_packed``), written to each node's socket with one
``sendall`` (all nodes before any is read, so a cluster's nodes work in parallel), and
every reply of a node is parsed by one hiredis Reader fed from the socket: lists of
bytes, ints and None, no callbacks (HGETALL answers a flat list). Reading the replies of
one lookup through redis-py's ``read_response``, one call a reply, cost more than the
round trip itself (a third of a search's client time: docs/redis.md, "Round trips").

Connections are redis-py's (it connects, authenticates and selects the database), taken
from a client's pool once and kept by the wire for the next batches (``_Links``): a
batch checks only that its socket has nothing to read (one ``poll``; data or EOF there
means a connection the server closed or left dirty, which is dropped for a new one),
where the pool's own checkout and release cost a share of every round trip.

In a cluster, a command answered MOVED or ASK (slots moving), TRYAGAIN or CLUSTERDOWN is
sent again through redis-py's own client, which follows the redirect and refreshes its
slot map; that costs a round trip per such command, only while slots move. A durable
batch (``WAIT``) sends its redirected commands again itself, once the slot map is read
afresh, each node's followed by its own ``WAIT``: a write is acknowledged only once the
replicas of the node that ran it have it. A node that
cannot be reached (a primary down, before or after its replica took over) fails the
batch, and the slot map is read again from the cluster, so that the next batch goes to
the new primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

import hiredis
import redis
from redis._parsers.base import BaseParser
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    InvalidResponse,
    TryAgainError,
)

from app.backends.redis.store.loop_links import LoopLink, LoopLinks, loop_links_of
from app.backends.redis.store.types import Client

Command = Sequence[Any]
_KEYED_AT = {b"FCALL": 3, b"FCALL_RO": 3, "FCALL": 3, "FCALL_RO": 3, "EVAL": 3, b"EVAL": 3}
# Replies that mean "ask again, elsewhere or later": redis-py's client knows how.
_REDIRECTS = (AskError, TryAgainError, ClusterDownError)
# Bytes a socket read takes at most (redis-py's socket_read_size).
READ_BYTES = 65536
_MORE = object()  # hiredis's answer while a reply is incomplete


def key_of(command: Command) -> bytes | str:
    """The key a command is routed by: its first key."""
    return cast("bytes | str", command[_KEYED_AT.get(command[0], 1)])


def pack(command: Command) -> bytes:
    """One command as RESP bytes (hiredis, in C)."""
    return cast(bytes, hiredis.pack_command(tuple(command)))


def unpack(packed: bytes) -> list[Any]:
    """The arguments of a command packed as RESP (the command's name as str, the rest as
    bytes): what a redirected command is sent again with."""
    reader = hiredis.Reader(notEnoughData=_MORE)
    reader.feed(packed)
    args = reader.gets()
    if not isinstance(args, list) or reader.gets() is not _MORE:
        raise ValueError("not one packed command")
    args[0] = args[0].decode()
    return args


class ReplicasBehind(Exception):
    """Written, but fewer replicas than asked for acknowledged the writes in time. The
    writes stay (Redis cannot take them back): a retry of the same request is safe."""


class _Link:
    """A redis-py connection as the wire uses it: its socket written with one sendall a
    batch and read through a hiredis Reader of its own."""

    __slots__ = ("buffer", "connection", "poll", "reader", "socket")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.socket = connection._sock  # redis-py's connected socket (plain or TLS)
        self.poll = select.poll()
        self.poll.register(self.socket, select.POLLIN)
        self.buffer = bytearray(READ_BYTES)
        self.reader = _reader()

    def usable(self) -> bool:
        """Still connected, with nothing to read (no EOF, no stray reply)."""
        return self.connection._sock is self.socket and not self.poll.poll(0)

    def exchange(self, packet: bytes, count: int) -> list[Any]:
        """Write ``packet``, read ``count`` replies: error replies as ResponseErrors in
        their places, except redis-py's connection errors (LOADING...), raised. Socket
        errors and timeouts are raised as redis-py's ConnectionError and TimeoutError."""
        self.write(packet)
        return self.read(count)

    def write(self, packet: bytes) -> None:
        try:
            self.socket.sendall(packet)
        except OSError as error:
            raise _socket_error("writing to", self.connection, error) from error

    def read(self, count: int) -> list[Any]:
        replies: list[Any] = []
        reader, buffer, receive = self.reader, self.buffer, self.socket.recv_into
        while True:
            reply = reader.gets()
            if reply is _MORE:
                try:
                    size = receive(buffer)
                except OSError as error:
                    raise _socket_error("reading from", self.connection, error) from error
                if not size:
                    raise redis.ConnectionError(
                        f"Connection closed by server: {self.connection._host_error()}"
                    )
                reader.feed(buffer, 0, size)
                continue
            if isinstance(reply, redis.ConnectionError):
                raise reply
            replies.append(reply)
            if len(replies) == count:
                if reader.gets() is not _MORE:  # more than was asked for: out of step
                    raise InvalidResponse("more replies than commands")
                return replies


def _reader() -> Any:
    # Error replies become redis-py's exception classes (MovedError, NoScriptError...),
    # as its own hiredis parser makes them.
    return hiredis.Reader(
        protocolError=InvalidResponse, replyError=BaseParser.parse_error, notEnoughData=_MORE
    )


def _socket_error(doing: str, connection: Any, error: OSError) -> redis.RedisError:
    where = connection._host_error()
    if isinstance(error, TimeoutError):
        return redis.TimeoutError(f"Timeout {doing} {where}")
    return redis.ConnectionError(f"Error {doing} {where}: {error.args}")


class _Links:
    """Connections taken from one redis-py pool and kept for the wires of this process:
    the idle ones in a list (append and pop are atomic), so that concurrent batches use
    as many as run at once. A process forked with links does not use its parent's."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.pool = pool
        self.idle: list[_Link] = []
        self.pid = os.getpid()

    def take(self) -> _Link:
        if self.pid != os.getpid():
            self.idle, self.pid = [], os.getpid()
        while self.idle:
            try:
                link = self.idle.pop()
            except IndexError:  # another thread took the last one
                break
            if link.usable():
                return link
            self.drop(link)
        connection: Any = self.pool.get_connection()  # connected and checked by redis-py
        try:
            return _Link(connection)
        except BaseException:
            self.pool.release(connection)
            raise

    def give(self, link: _Link) -> None:
        self.idle.append(link)

    def drop(self, link: _Link) -> None:
        """A link whose replies were not all read (or whose socket went bad): closed,
        and its connection back to redis-py's pool, which reconnects it when used."""
        with contextlib.suppress(Exception):
            link.connection.disconnect()
        with contextlib.suppress(Exception):
            self.pool.release(link.connection)


# The attribute of a redis-py pool that holds its links: they live and go with the pool
# (a cluster client replaces its nodes' pools when the slot map changes).
_LINKS = "_neardup_links"


def links_of(pool: redis.ConnectionPool) -> _Links:
    links: _Links | None = getattr(pool, _LINKS, None)
    if links is None:
        links = _Links(pool)
        pool.__dict__.setdefault(_LINKS, links)  # one per pool, whichever thread wins
        links = getattr(pool, _LINKS)
    return links


def _by_node(
    cluster: RedisCluster, keys: Sequence[bytes | str], positions: Iterable[int]
) -> dict[str, tuple[Any, list[int]]]:
    """The positions of these commands by the node their key's slot is on, as the client's
    slot map says now (one lookup per slot)."""
    by_node: dict[str, tuple[Any, list[int]]] = {}
    node_of: dict[int, Any] = {}
    manager = cluster.nodes_manager
    for position in positions:
        slot = cast(Any, cluster).keyslot(keys[position])
        node = node_of.get(slot)
        if node is None:
            node = node_of[slot] = manager.get_node_from_slot(slot)
        by_node.setdefault(node.name, (node, []))[1].append(position)
    return by_node


class Wire:
    """Sends batches of commands, one round trip a batch, and counts the round trips.

    With ``wait_replicas``, a batch sent ``durable`` ends on every node it reaches with
    ``WAIT wait_replicas wait_timeout_ms``, on the same connection as its writes (WAIT
    counts the writes of its own connection), in the same round trip; ReplicasBehind
    if a node's replicas do not all confirm in time.
    """

    def __init__(self, client: Client, wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self.client = client
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.round_trips = 0
        self.cluster = isinstance(client, RedisCluster)
        # A standalone client has one pool for good: its links are looked up once.
        self._links = None if self.cluster else links_of(cast(redis.Redis, client).connection_pool)
        self._wait = pack(("WAIT", wait_replicas, wait_timeout_ms))
        # Whether send_packed_async drives the sockets from the event loop (not over TLS).
        self.on_loop = True

    def send(self, commands: Sequence[Command], durable: bool = False) -> list[Any]:
        """The reply of each command, in order; raises the first error reply, after every
        reply is read (the connections stay usable)."""
        if not commands:
            return []
        keys = [key_of(command) for command in commands] if self.cluster else None
        return self.send_packed([pack(command) for command in commands], keys, durable)

    def send_packed(
        self,
        packed: Sequence[bytes],
        keys: Sequence[bytes | str] | None = None,
        durable: bool = False,
    ) -> list[Any]:
        """``send`` of commands packed as RESP by the caller, one bytes a command; in a
        cluster, ``keys`` holds the key each command is routed by."""
        if not packed:
            return []
        self.round_trips += 1
        waits = durable and self.wait_replicas > 0
        if self.cluster:
            assert keys is not None and len(keys) == len(packed)
            replies, acknowledged = self._send_cluster(
                cast(RedisCluster, self.client), packed, keys, waits
            )
        else:
            assert self._links is not None
            links = self._links
            link = links.take()
            packet = self._packet(packed, waits)
            with _lent(links, link):
                replies = link.exchange(packet, len(packed) + waits)
            acknowledged = [replies.pop()] if waits else []
        return self._checked(replies, acknowledged)

    async def send_packed_async(
        self,
        packed: Sequence[bytes],
        keys: Sequence[bytes | str] | None = None,
        durable: bool = False,
    ) -> list[Any]:
        """``send_packed`` from a coroutine on the running event loop, its sockets driven
        by the loop (app/backends/redis/store/loop_links.py): the same replies and errors, no
        thread. Over TLS, ``send_packed`` in a worker thread."""
        if not packed:
            return []
        if not self.on_loop:
            return await asyncio.to_thread(self.send_packed, packed, keys, durable)
        waits = durable and self.wait_replicas > 0
        if self.cluster:
            assert keys is not None and len(keys) == len(packed)
            cluster = cast(RedisCluster, self.client)
            by_node = _by_node(cluster, keys, range(len(keys)))
            replies: list[Any] = [None] * len(packed)
            trip = _Trip[LoopLink](self, packed, waits, replies)
            try:
                await self._exchange_on_loop(cluster, by_node, trip)
            except _NotOnLoop:
                return await asyncio.to_thread(self.send_packed, packed, keys, durable)
            except (redis.ConnectionError, redis.TimeoutError):
                with contextlib.suppress(redis.RedisError):
                    await asyncio.to_thread(cluster.nodes_manager.initialize)
                raise
            self.round_trips += 1
            acknowledged = trip.acknowledged
            if any(isinstance(reply, _REDIRECTS) for reply in replies):
                acknowledged += await asyncio.to_thread(
                    self._follow_redirects, cluster, packed, keys, waits, replies
                )
            return self._checked(replies, acknowledged)
        links = loop_links_of(cast(redis.Redis, self.client).connection_pool)
        link = await links.take()
        if link is None:  # TLS
            self.on_loop = False
            return await asyncio.to_thread(self.send_packed, packed, keys, durable)
        self.round_trips += 1
        with _lent(links, link):
            link.write(self._packet(packed, waits), len(packed) + waits)
            replies = await link.read()
        acknowledged = [replies.pop()] if waits else []
        return self._checked(replies, acknowledged)

    def _packet(self, packed: Sequence[bytes], waits: bool) -> bytes:
        """One node's batch as written: its commands, then its WAIT when ``waits``."""
        return b"".join([*packed, self._wait] if waits else packed)

    def _checked(self, replies: list[Any], acknowledged: list[int]) -> list[Any]:
        """The replies, once none is an error and every node's replicas confirmed."""
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if any(not isinstance(n, int) or n < self.wait_replicas for n in acknowledged):
            raise ReplicasBehind(
                f"WAIT {self.wait_replicas} {self.wait_timeout_ms}: replicas acknowledged "
                f"{acknowledged} (one count per node written)"
            )
        return replies

    def _send_cluster(
        self,
        cluster: RedisCluster,
        packed: Sequence[bytes],
        keys: Sequence[bytes | str],
        waits: bool,
    ) -> tuple[list[Any], list[int]]:
        """(replies, the WAIT count of each node written)."""
        manager = cluster.nodes_manager
        by_node = _by_node(cluster, keys, range(len(keys)))
        replies: list[Any] = [None] * len(packed)
        trip = _Trip[_Link](self, packed, waits, replies)
        try:
            self._exchange(cluster, by_node, trip)
        except (redis.ConnectionError, redis.TimeoutError):
            with contextlib.suppress(redis.RedisError):
                manager.initialize()  # a failover: learn the new primaries
            raise
        redirected = self._follow_redirects(cluster, packed, keys, waits, replies)
        return replies, trip.acknowledged + redirected

    def _follow_redirects(
        self,
        cluster: RedisCluster,
        packed: Sequence[bytes],
        keys: Sequence[bytes | str],
        waits: bool,
        replies: list[Any],
    ) -> list[int]:
        """The commands answered by a redirect sent again where their slots are now, their
        replies in place of the redirects; the WAIT counts of the nodes written again."""
        redirected = [p for p, reply in enumerate(replies) if isinstance(reply, _REDIRECTS)]
        if redirected and waits:
            # Sent again with the WAIT of the node that now owns their slots, on the same
            # connection (WAIT counts that connection's own writes): redis-py's client
            # would follow the redirect but not wait for the replicas.
            return self._send_again_and_wait(cluster, packed, keys, redirected, replies)
        for position in redirected:
            args = unpack(packed[position])
            replies[position] = cast(Any, cluster).execute_command(*args)
        return []

    def _send_again_and_wait(
        self,
        cluster: RedisCluster,
        packed: Sequence[bytes],
        keys: Sequence[bytes | str],
        positions: list[int],
        replies: list[Any],
    ) -> list[int]:
        """The redirected commands (not run where they were sent) sent again, each node's
        batch followed by its WAIT, once the slot map is read afresh; a command
        redirected again (a slot still migrating) is answered by that redirect, an error
        for the caller to retry (503). The WAIT counts of the nodes written."""
        with contextlib.suppress(redis.RedisError):
            cluster.nodes_manager.initialize()
        trip = _Trip[_Link](self, packed, True, replies)
        self._exchange(cluster, _by_node(cluster, keys, positions), trip)
        return trip.acknowledged

    def _exchange(
        self,
        cluster: RedisCluster,
        by_node: dict[str, tuple[Any, list[int]]],
        trip: _Trip[_Link],
    ) -> None:
        """Every node's batch written, then every node's replies read."""
        try:
            for node, positions in by_node.values():
                links = links_of(cluster.get_redis_connection(node).connection_pool)
                link = links.take()
                packet, _ = trip.written(links, link, positions)
                link.write(packet)
            while (first := trip.first()) is not None:
                trip.answered(first[0].read(first[1]))
        finally:
            trip.close()

    async def _exchange_on_loop(
        self,
        cluster: RedisCluster,
        by_node: dict[str, tuple[Any, list[int]]],
        trip: _Trip[LoopLink],
    ) -> None:
        """``_exchange`` with the nodes' loop links; _NotOnLoop over TLS (nothing sent)."""
        taken: list[tuple[LoopLinks, LoopLink, list[int]]] = []
        try:
            for node, positions in by_node.values():  # every link before any write
                links = loop_links_of(cluster.get_redis_connection(node).connection_pool)
                link = await links.take()
                if link is None:
                    self.on_loop = False
                    raise _NotOnLoop
                taken.append((links, link, positions))
        except BaseException:
            for links, link, _ in taken:  # nothing written: clean
                links.give(link)
            raise
        try:
            for links, link, positions in taken:
                link.write(*trip.written(links, link, positions))
            while (first := trip.first()) is not None:
                trip.answered(await first[0].read())
        finally:
            trip.close()


_Link_contra = TypeVar("_Link_contra", contravariant=True)
_LinkT = TypeVar("_LinkT")


class _Pool(Protocol[_Link_contra]):
    """Where a link goes back: ``_Links``, or ``LoopLinks`` on the event loop."""

    def give(self, link: _Link_contra) -> None: ...

    def drop(self, link: _Link_contra) -> None: ...


@contextlib.contextmanager
def _lent(links: _Pool[_LinkT], link: _LinkT) -> Iterator[None]:
    """One exchange on a standalone server's link: the link given back after it, or
    dropped if it fails (replies may be left unread on it)."""
    try:
        yield
    except BaseException:
        links.drop(link)
        raise
    links.give(link)


class _Trip(Generic[_LinkT]):
    """One round trip to a cluster's nodes, blocking or on the event loop: each node's
    packet (``written``), its answers put in their commands' places as they are read,
    in the order written (``answered``), its WAIT count (with ``waits``) kept in
    ``acknowledged``; ``close`` drops the links written to and not read (a failed trip):
    their replies would reach the next batch sent on them."""

    def __init__(
        self, wire: Wire, packed: Sequence[bytes], waits: bool, replies: list[Any]
    ) -> None:
        self._packet = wire._packet
        self._packed = packed
        self._waits = waits
        self._replies = replies
        self._unread: deque[tuple[_Pool[_LinkT], _LinkT, list[int]]] = deque()
        self.acknowledged: list[int] = []

    def written(
        self, links: _Pool[_LinkT], link: _LinkT, positions: list[int]
    ) -> tuple[bytes, int]:
        """The packet of these commands for ``link`` to write, and how many replies it
        has; the link unread until ``answered``."""
        self._unread.append((links, link, positions))
        batch = [self._packed[p] for p in positions]
        return self._packet(batch, self._waits), len(batch) + self._waits

    def first(self) -> tuple[_LinkT, int] | None:
        """The link written to first and not read yet, and how many replies it has."""
        if not self._unread:
            return None
        _, link, positions = self._unread[0]
        return link, len(positions) + self._waits

    def answered(self, answers: list[Any]) -> None:
        """The answers read from ``first``'s link: in place, the link given back."""
        links, link, positions = self._unread.popleft()
        links.give(link)
        if self._waits:
            self.acknowledged.append(answers.pop())
        for position, reply in zip(positions, answers, strict=True):
            self._replies[position] = reply

    def close(self) -> None:
        while self._unread:
            links, link, _ = self._unread.popleft()
            links.drop(link)


class _NotOnLoop(Exception):
    """A node's connections are TLS: the batch goes through the blocking links."""
