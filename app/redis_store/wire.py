"""Wire: a list of commands in one round trip, to one Redis or to every node of a cluster.

redis-py's pipelines cost 20-50 us of Python per command (response callbacks, command
policies, argument encoding one generator at a time); an insert of 10,000 documents is
some 80,000 ZADDs, so that was most of its time. Here commands are packed by hiredis in
C, written to each node's connection at once (all nodes before any is read, so a
cluster's nodes work in parallel), and replies read raw: lists of bytes, ints and None,
no callbacks (HGETALL answers a flat list).

In a cluster, a command answered MOVED or ASK (slots moving, a failover) is sent again
through redis-py's own client, which follows the redirect and refreshes its slot map;
that costs a round trip per such command, only while slots move. A node that cannot be
reached (a primary down, before or after its replica took over) fails the batch, and the
slot map is read again from the cluster, so that the next batch goes to the new primary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from app.redis_store.types import Client

Command = Sequence[Any]
_KEYED_AT = {b"FCALL": 3, b"FCALL_RO": 3, "FCALL": 3, "FCALL_RO": 3, "EVAL": 3, b"EVAL": 3}
_REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


def key_of(command: Command) -> bytes | str:
    """The key a command is routed by: its first key."""
    return cast("bytes | str", command[_KEYED_AT.get(command[0], 1)])


class ReplicasBehind(Exception):
    """Written, but fewer replicas than asked for acknowledged the writes in time. The
    writes stay (Redis cannot take them back): a retry of the same request is safe."""


class Wire:
    """Sends batches of commands, one round trip a batch, and counts the round trips.

    With ``wait_replicas``, a batch sent ``durable`` ends on every node it reaches with
    ``WAIT wait_replicas wait_timeout_ms``, on the same connection as its writes (WAIT
    counts the writes of its own connection), in the same round trip; ReplicasBehind
    if a node's replicas do not all confirm in time.
    """

    def __init__(self, client: Client, wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self._acknowledged: list[int] = []
        self.client = client
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.round_trips = 0

    def send(self, commands: Sequence[Command], durable: bool = False) -> list[Any]:
        """The reply of each command, in order; raises the first error reply, after every
        reply is read (the connections stay usable)."""
        if not commands:
            return []
        self.round_trips += 1
        wait = ("WAIT", self.wait_replicas, self.wait_timeout_ms)
        waits = durable and self.wait_replicas > 0
        acknowledged: list[int] = []
        if isinstance(self.client, RedisCluster):
            replies = self._send_cluster(self.client, commands, wait if waits else None)
        else:
            sent = [*commands, wait] if waits else commands
            replies = _finish(*_start(self.client.connection_pool, sent), len(sent))
            if waits:
                acknowledged.append(replies.pop())
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(self.client, RedisCluster) and waits:
            acknowledged = self._acknowledged
        if any(not isinstance(n, int) or n < self.wait_replicas for n in acknowledged):
            raise ReplicasBehind(
                f"WAIT {self.wait_replicas} {self.wait_timeout_ms}: replicas acknowledged "
                f"{acknowledged} (one count per node written)"
            )
        return replies

    def _send_cluster(
        self, cluster: RedisCluster, commands: Sequence[Command], wait: Command | None
    ) -> list[Any]:
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for position, command in enumerate(commands):
            slot = cast(Any, cluster).keyslot(key_of(command))
            node = cluster.nodes_manager.get_node_from_slot(slot)
            entry = by_node.setdefault(node.name, (node, []))
            entry[1].append(position)
        replies: list[Any] = [None] * len(commands)
        self._acknowledged = []
        started: list[tuple[redis.ConnectionPool, list[int], Any]] = []
        try:
            self._exchange(cluster, by_node, commands, wait, replies, started)
        except (redis.ConnectionError, redis.TimeoutError):
            with contextlib.suppress(redis.RedisError):
                cluster.nodes_manager.initialize()  # a failover: learn the new primaries
            raise
        for position, reply in enumerate(replies):
            if isinstance(reply, ResponseError) and str(reply).startswith(_REDIRECTS):
                replies[position] = cast(Any, cluster).execute_command(*commands[position])
        return replies

    def _exchange(
        self,
        cluster: RedisCluster,
        by_node: dict[str, tuple[Any, list[int]]],
        commands: Sequence[Command],
        wait: Command | None,
        replies: list[Any],
        started: list[tuple[redis.ConnectionPool, list[int], Any]],
    ) -> None:
        """Every node's batch written, then every node's replies read."""
        try:
            for node, positions in by_node.values():
                pool = cluster.get_redis_connection(node).connection_pool
                batch = [commands[p] for p in positions] + ([wait] if wait else [])
                started.append((pool, positions, _start(pool, batch)[1]))
            while started:
                pool, positions, connection = started.pop(0)
                answers = _finish(pool, connection, len(positions) + (1 if wait else 0))
                if wait:
                    self._acknowledged.append(answers.pop())
                for position, reply in zip(positions, answers, strict=True):
                    replies[position] = reply
        finally:
            for pool, _, connection in started:  # written to but not read: not reusable
                connection.disconnect()
                pool.release(connection)


def _start(pool: redis.ConnectionPool, commands: Sequence[Command]) -> tuple[Any, Any]:
    """(pool, connection): the commands written to a connection of the pool."""
    connection: Any = pool.get_connection()  # redis-py leaves its methods untyped
    try:
        packed = b"".join(hiredis.pack_command(tuple(command)) for command in commands)
        connection.send_packed_command([packed])
    except BaseException:
        connection.disconnect()
        pool.release(connection)
        raise
    return pool, connection


def _finish(pool: redis.ConnectionPool, connection: Any, count: int) -> list[Any]:
    """``count`` replies read from the connection, error replies as exceptions; the
    connection back to its pool."""
    replies: list[Any] = []
    try:
        for _ in range(count):
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
