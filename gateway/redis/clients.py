"""Redis clients with hot-path timeouts.

redis-py's defaults retry with backoff and wait seconds on a hung server;
on the request path a slow answer is as bad as none, so every client here
gets millisecond socket timeouts, no retries, and a blocking pool (the
default asyncio pool raises ``MaxConnectionsError`` past its size, which
under load became HTTP 500s).

Every connection these clients make turns a write on a connection closed
under it into redis-py's ``ConnectionError`` (``_closing_safe``): redis-py
lets the transport's ``AttributeError`` / ``TypeError`` through, which is
not a ``RedisError``, so it passed every "Redis is unavailable" path and
answered HTTP 500.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry

from gateway.config import RedisConfig

RedisClient = Redis | RedisCluster
_Conn = TypeVar("_Conn", bound=AbstractConnection)
_SAFE: dict[type[Any], type[Any]] = {}  # redis-py connection class -> its closing-safe subclass


def _closing_safe(base: type[_Conn]) -> type[_Conn]:
    """``base`` whose writes raise ``ConnectionError`` when the connection is closed under them.

    A Redis Cluster client that sees a node fail disconnects that node's
    connections, some of them in use by other calls; a call whose write was
    already scheduled then finds the stream writer gone and raises
    ``AttributeError: 'NoneType' object has no attribute 'writelines'`` (or,
    on newer Pythons, a ``TypeError`` from the transport). Seen in the
    hung-primary failover test under load: 500s where every failed call must
    be a 503. redis-py's own fix normalises these the same way.
    """
    if base in _SAFE.values():
        return base
    safe = _SAFE.get(base)
    if safe is None:

        async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
            try:
                await base.send_packed_command(self, command, check_health)
            except (AttributeError, TypeError) as exc:  # only the transport, closed under us
                await self.disconnect(nowait=True)
                raise RedisConnectionError(f"connection closed while writing ({exc})") from exc

        safe = _SAFE[base] = type(
            f"ClosingSafe{base.__name__}", (base,), {"send_packed_command": send_packed_command}
        )
    return safe


class _Gates:
    """One semaphore of ``per_node`` places per cluster node (by name), shared by a client."""

    def __init__(self, per_node: int, timeout_s: float) -> None:
        self.per_node = per_node
        self.timeout_s = timeout_s
        self._by_node: dict[str, asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def place(self, node: str) -> AsyncIterator[None]:
        gate = self._by_node.get(node)
        if gate is None:
            gate = self._by_node[node] = asyncio.Semaphore(self.per_node)
        try:
            async with asyncio.timeout(self.timeout_s):
                await gate.acquire()
        except TimeoutError:
            # MaxConnectionsError, as redis-py's own pool says it: client-side
            # exhaustion, which redis-py neither retries nor takes for a node failure
            # (a ConnectionError raised here would reset the node's connections).
            raise MaxConnectionsError(f"no free connection to {node} in time") from None
        try:
            yield
        finally:
            gate.release()


class _GatedNode(ClusterNode):
    """A cluster node whose commands and pipelines wait for one of its gate's places.

    Gated here, where a connection is taken, and not where a command is first
    aimed: redis-py follows MOVED and ASK inside one call, so a gate on the
    first node let calls redirected from every other node, and every
    pipeline, take this node's connections past its pool (``MaxConnectionsError``
    at a cold start or a failover, when many calls redirect at once). The
    class is made per client (``_gates`` is its gates); nodes redis-py creates
    are adopted by ``GatedRedisCluster._adopt``.
    """

    __slots__ = ()
    _gates: _Gates

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gates.place(self.name):
            return await super().execute_command(*args, **kwargs)

    async def execute_pipeline(self, commands: Any) -> bool:
        async with self._gates.place(self.name):
            return await super().execute_pipeline(commands)


class GatedRedisCluster(RedisCluster):
    """A cluster client whose commands wait for a connection instead of failing.

    redis-py's cluster nodes raise ``MaxConnectionsError`` once
    ``max_connections`` commands are in flight to one node (there is no
    blocking pool for clusters). Here each node has a gate of ``per_node``
    places (``_GatedNode``): a command or pipeline for a busy node waits at
    most ``gate_timeout_s``, as ``BlockingConnectionPool`` does for one Redis.
    The gates are per node so that a hung node, whose calls each hold a place
    until they time out, cannot starve the healthy ones. Nodes are built with
    twice ``per_node`` connections: room for what redis-py runs outside the
    gates (topology discovery, MULTI/EXEC pipelines, a node first met in a
    redirect until it is adopted).
    """

    def __init__(
        self, *args: Any, per_node: int = 64, gate_timeout_s: float = 0.25, **kwargs: Any
    ) -> None:
        kwargs["max_connections"] = 2 * per_node
        super().__init__(*args, **kwargs)
        gates = _Gates(per_node, gate_timeout_s)
        self._node_class = type("GatedNode", (_GatedNode,), {"__slots__": (), "_gates": gates})
        self._adopted = 0
        self._adopt()

    def _adopt(self) -> None:
        """Gate every node redis-py knows (it makes plain ``ClusterNode`` objects)."""
        nodes = self.nodes_manager.nodes_cache
        for node in [*nodes.values(), *self.nodes_manager.startup_nodes.values()]:
            if type(node) is ClusterNode:
                node.__class__ = self._node_class
            node.connection_class = _closing_safe(node.connection_class)
            # a connection redis-py opened before the node was adopted (topology
            # discovery): the same object, with the closing-safe write
            for conn in node._connections:
                conn.__class__ = _closing_safe(type(conn))
        self._adopted = len(nodes)

    async def initialize(self, *args: Any, **kwargs: Any) -> GatedRedisCluster:
        await super().initialize(*args, **kwargs)
        self._adopt()
        return self

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        if type(target_node) is not self._node_class or (
            len(self.nodes_manager.nodes_cache) != self._adopted
        ):
            self._adopt()  # a node found since (a redirect, a new topology)
        return await super()._execute_command(target_node, *args, **kwargs)


def connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``), or a cluster."""
    timeout = cfg.timeout_ms / 1000
    connect_timeout = cfg.connect_timeout_ms / 1000
    if cfg.cluster:
        # reinitialize_steps=0: a MOVED (failover, resharding) re-points that
        # slot only; redis-py's default closes the whole client every 5th
        # MOVED, failing unrelated calls in flight on other connections.
        return GatedRedisCluster.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout,
            per_node=cfg.max_connections,
            retry=Retry(NoBackoff(), 1),
            require_full_coverage=False,
            reinitialize_steps=0,
            gate_timeout_s=timeout,
        )
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=cfg.max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
    )
    pool.connection_class = _closing_safe(pool.connection_class)  # before any connection
    return Redis.from_pool(pool)


def admin_connect(cfg: RedisConfig, url: str) -> RedisClient:
    """A client for the CLI and dashboard: same server, patient timeouts."""
    if cfg.cluster:
        return GatedRedisCluster.from_url(
            url,
            decode_responses=True,
            socket_timeout=5,
            socket_connect_timeout=5,
            require_full_coverage=False,
            reinitialize_steps=0,
            gate_timeout_s=5,
        )
    client = Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5)
    pool = client.connection_pool
    pool.connection_class = _closing_safe(pool.connection_class)  # before any connection
    return client


def pubsub_connect(url: str) -> Redis:
    """A plain client for SUBSCRIBE, even on a Cluster (PUBLISH reaches every node).

    No socket timeout: a subscriber waits for messages by design; redis-py's
    health checks (every 30 s) find a dead connection instead.
    """
    return Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=5, health_check_interval=30
    )
