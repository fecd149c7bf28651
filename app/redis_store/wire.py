"""Wire: a list of commands in one round trip, to one Redis or to every node of a cluster.

redis-py's pipelines cost 20-50 us of Python per command (response callbacks, command
policies, argument encoding one generator at a time); an insert of 10,000 documents is
some 80,000 ZADDs, so that was most of its time. Here commands are packed by hiredis in
C, written to each node's connection at once (all nodes before any is read, so a
cluster's nodes work in parallel), and replies read raw: lists of bytes, ints and None,
no callbacks (HGETALL answers a flat list).

In a cluster, a command answered MOVED or ASK (slots moving, a failover) is sent again
through redis-py's own client, which follows the redirect and refreshes its slot map;
that costs a round trip per such command, only while slots move.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from app.redis_store.types import Client

Command = Sequence[Any]
_KEYED_AT = {b"FCALL": 3, b"FCALL_RO": 3, "FCALL": 3, "FCALL_RO": 3}
_REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


def key_of(command: Command) -> bytes | str:
    """The key a command is routed by: its first key."""
    return cast("bytes | str", command[_KEYED_AT.get(command[0], 1)])


class Wire:
    """Sends batches of commands, one round trip a batch, and counts the round trips."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.round_trips = 0

    def send(self, commands: Sequence[Command]) -> list[Any]:
        """The reply of each command, in order; raises the first error reply, after every
        reply is read (the connections stay usable)."""
        if not commands:
            return []
        self.round_trips += 1
        if isinstance(self.client, RedisCluster):
            replies = self._send_cluster(self.client, commands)
        else:
            replies = _exchange(self.client.connection_pool, list(range(len(commands))), commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _send_cluster(self, cluster: RedisCluster, commands: Sequence[Command]) -> list[Any]:
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for position, command in enumerate(commands):
            slot = cast(Any, cluster).keyslot(key_of(command))
            node = cluster.nodes_manager.get_node_from_slot(slot)
            entry = by_node.setdefault(node.name, (node, []))
            entry[1].append(position)
        replies: list[Any] = [None] * len(commands)
        started: list[tuple[redis.ConnectionPool, list[int], Any]] = []
        try:
            for node, positions in by_node.values():
                pool = cluster.get_redis_connection(node).connection_pool
                started.append((pool, positions, _start(pool, [commands[p] for p in positions])))
            while started:
                pool, positions, connection = started.pop(0)
                answers = _finish(pool, connection, positions)
                for position, reply in zip(positions, answers, strict=True):
                    replies[position] = reply
        finally:
            for pool, _, connection in started:  # written to but not read: not reusable
                connection.disconnect()
                pool.release(connection)
        for position, reply in enumerate(replies):
            if isinstance(reply, ResponseError) and str(reply).startswith(_REDIRECTS):
                replies[position] = cast(Any, cluster).execute_command(*commands[position])
        return replies


def _start(pool: redis.ConnectionPool, commands: Sequence[Command]) -> Any:
    connection: Any = pool.get_connection()  # redis-py leaves its methods untyped
    try:
        packed = b"".join(hiredis.pack_command(tuple(command)) for command in commands)
        connection.send_packed_command([packed])
    except BaseException:
        connection.disconnect()
        pool.release(connection)
        raise
    return connection


def _finish(pool: redis.ConnectionPool, connection: Any, positions: Sequence[int]) -> list[Any]:
    replies: list[Any] = []
    try:
        for _ in positions:
            try:
                replies.append(connection.read_response())
            except ResponseError as error:
                replies.append(error)
    except BaseException:
        connection.disconnect()  # replies left unread: the connection is not reusable
        raise
    finally:
        pool.release(connection)
    return replies


def _exchange(
    pool: redis.ConnectionPool, positions: list[int], commands: Sequence[Command]
) -> list[Any]:
    return _finish(pool, _start(pool, commands), positions)
