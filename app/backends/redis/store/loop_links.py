"""Connections of the wire on an asyncio event loop: the same RESP batches and hiredis
parsing as its blocking links (``wire._Link``), with the socket driven by the loop.

A connection is made, authenticated and given its database by redis-py (in a worker
thread: connecting blocks), then handed to the loop as a transport whose protocol feeds
every chunk received to a hiredis Reader; a batch's reader is woken once, when its last
reply is parsed. So a search's round trip costs the event loop one write, one or a few
``data_received`` calls and one wake-up: no thread, no GIL hand-over.

TLS connections stay with the blocking links (redis-py wraps their socket already; a
transport cannot take it over): ``LoopLinks.take`` answers None for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import weakref
from typing import Any, cast

import hiredis
import redis
from redis._parsers.base import BaseParser
from redis.exceptions import InvalidResponse

_MORE = object()  # hiredis's answer while a reply is incomplete


class LoopLink(asyncio.Protocol):
    """One connection on the loop: a batch is ``write`` then ``read``; the replies of a
    batch written on several links (a cluster's nodes) arrive in parallel."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection  # redis-py's, for its address and its pool
        self.reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error, notEnoughData=_MORE
        )
        self.transport: asyncio.Transport | None = None
        self.timeout: float | None = connection.socket_timeout
        self.broken: Exception | None = None
        self._wanted = 0
        self._replies: list[Any] = []
        self._waiter: asyncio.Future[list[Any]] | None = None

    # -- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        if len(self._replies) >= self._wanted:  # nothing asked: the link is out of step
            self._fail(InvalidResponse("a reply to no command"))
            return
        self._collect()

    def connection_lost(self, error: Exception | None) -> None:
        where = self.connection._host_error()
        reason = f": {error}" if error is not None else ""
        self._fail(redis.ConnectionError(f"Connection closed by server: {where}{reason}"))

    # -- the wire's side

    def usable(self) -> bool:
        transport = self.transport
        return self.broken is None and transport is not None and not transport.is_closing()

    def write(self, packet: bytes, count: int) -> None:
        """Send a batch of ``count`` commands (its replies are read by ``read``)."""
        if self.broken is not None:
            raise self.broken
        assert self.transport is not None
        self._wanted, self._replies = count, []
        self.transport.write(packet)

    async def read(self) -> list[Any]:
        """The replies of the batch written (error replies in their places, as
        redis-py's exceptions); redis-py's ConnectionError or TimeoutError."""
        if self.broken is not None:
            raise self.broken
        if len(self._replies) < self._wanted:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(self.timeout):
                    await waiter
            except TimeoutError:
                where = self.connection._host_error()
                raise redis.TimeoutError(f"Timeout reading from {where}") from None
            finally:
                self._waiter = None
        if self.broken is not None:
            raise self.broken
        return self._replies

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._fail(redis.ConnectionError("closed"))

    def _collect(self) -> None:
        reader, replies = self.reader, self._replies
        while len(replies) < self._wanted:
            reply = reader.gets()
            if reply is _MORE:
                return
            if isinstance(reply, redis.ConnectionError):  # LOADING and the like
                self._fail(reply)
                return
            replies.append(reply)
        if reader.gets() is not _MORE:
            self._fail(InvalidResponse("more replies than commands"))
            return
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(replies)

    def _fail(self, error: Exception) -> None:
        if self.broken is None:
            self.broken = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result([])  # read raises self.broken


class LoopLinks:
    """The idle loop links of one redis-py pool on one event loop."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.pool = pool
        self.idle: list[LoopLink] = []

    async def take(self) -> LoopLink | None:
        """An idle link, or a new one; None for a TLS connection (not for the loop)."""
        while self.idle:
            link = self.idle.pop()
            if link.usable():
                return link
            self.drop(link)
        connection: Any = await asyncio.to_thread(self.pool.get_connection)
        sock = connection._sock
        if isinstance(sock, ssl.SSLSocket):
            self.pool.release(connection)
            return None
        link = LoopLink(connection)
        loop = asyncio.get_running_loop()
        try:
            if sock.family == socket.AF_UNIX:
                await loop.create_unix_connection(lambda: link, sock=sock)
            else:
                await loop.create_connection(lambda: link, sock=sock)
        except BaseException:
            self._release(connection)
            raise
        return link

    def give(self, link: LoopLink) -> None:
        self.idle.append(link)

    def drop(self, link: LoopLink) -> None:
        """A link whose replies were not all read, or gone bad: closed, its connection
        back to redis-py's pool (which reconnects it when it is used)."""
        link.close()
        self._release(link.connection)

    def _release(self, connection: Any) -> None:
        with contextlib.suppress(Exception):
            connection.disconnect()
        with contextlib.suppress(Exception):
            self.pool.release(connection)


# The attribute of a redis-py pool that holds its loop links, by event loop (a test
# client runs each app on a loop of its own).
_LOOP_LINKS = "_neardup_loop_links"


# Every loop's links, to close when the app on that loop stops.
_OF_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[LoopLinks]] = (
    weakref.WeakKeyDictionary()
)


def loop_links_of(pool: redis.ConnectionPool) -> LoopLinks:
    """The pool's links on the running loop (made on first use)."""
    by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLinks] | None
    by_loop = getattr(pool, _LOOP_LINKS, None)
    if by_loop is None:
        pool.__dict__.setdefault(_LOOP_LINKS, weakref.WeakKeyDictionary())
        by_loop = getattr(pool, _LOOP_LINKS)
    loop = asyncio.get_running_loop()
    links = by_loop.get(loop)
    if links is None:
        links = by_loop[loop] = LoopLinks(pool)
        _OF_LOOP.setdefault(loop, []).append(links)
    return links


def close_loop_links() -> None:
    """Close the idle links of the running loop (none if not called on a loop): what an
    app does when it stops, its requests answered."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    # The list is kept: an app started again on this loop reuses the same LoopLinks.
    for links in _OF_LOOP.get(loop, []):
        while links.idle:
            links.drop(links.idle.pop())
