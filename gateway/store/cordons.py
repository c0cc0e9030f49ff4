"""Cordoned nodes: an operator's "no new calls to this node", kept in Redis for every process.

The state is one hash (``keyspace.cordons``: ``<network>/<node>`` -> JSON
``{"by": token name, "at": ms}``), so a cordon survives a restart and is
the same for every worker and every replica sharing the Redis. A change is
published on ``keyspace.cordon_channel``; each process's ``CordonBook``
listens (``KeyEvents`` on that channel) and re-reads the hash at once, and
also every ``reread_s`` (the safety net for a missed message), then hands
the whole state to ``on_change`` (the admin plug-in applies it to the node
pools). A broken subscription re-reads on reconnect. Redis unreachable: the
last state read stays in force (a cordon is never dropped for a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisClusterException, RedisError

from gateway.redis import keyspace as ks
from gateway.redis.flushing import cancelling
from gateway.store.keyevents import KeyEvents

log = logging.getLogger("gateway.cordons")

State = dict[str, dict[str, Any]]  # "<network>/<node>" -> {"by", "at"}


def slot(network: str, node: str) -> str:
    return f"{network}/{node}"


class CordonBook:
    """Reads, writes and follows the cordons; see the module docstring."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        connect: Callable[[], Redis],
        on_change: Callable[[State], None],
        *,
        reread_s: float = 5.0,
        log_interval_s: float = 10.0,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.reread_s = reread_s
        self._on_change = on_change
        self._events = KeyEvents(connect, prefix, log_interval_s, channel=ks.cordon_channel(prefix))
        self._events.add(lambda _payload: self._due.set())
        self._due = asyncio.Event()
        self.state: State = {}
        self._failing = False

    @property
    def ready(self) -> asyncio.Event:
        """Set while the subscription is live (tests wait for it)."""
        return self._events.ready

    async def read(self) -> State:
        raw = await self.redis.hgetall(ks.cordons(self.prefix))
        state: State = {}
        for field, value in raw.items():
            name = field.decode() if isinstance(field, bytes) else str(field)
            try:
                info = orjson.loads(value)
            except orjson.JSONDecodeError:
                info = {}
            state[name] = info if isinstance(info, dict) else {}
        return state

    async def refresh(self) -> None:
        """Read the state and apply it; a Redis failure keeps the last state (logged once)."""
        try:
            state = await self.read()
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            if not self._failing:
                log.warning("cordons: cannot read Redis, keeping the last state: %s", exc)
                self._failing = True
            return
        if self._failing:
            log.info("cordons: Redis answers again")
            self._failing = False
        self.state = state
        self._on_change(state)

    async def cordon(self, network: str, node: str, by: str, at_ms: int) -> dict[str, Any]:
        info = {"by": by, "at": at_ms}
        await self.redis.hset(ks.cordons(self.prefix), slot(network, node), orjson.dumps(info))
        await self._announce()
        return info

    async def uncordon(self, network: str, node: str) -> bool:
        removed = int(await self.redis.hdel(ks.cordons(self.prefix), slot(network, node)))
        await self._announce()
        return removed > 0

    async def _announce(self) -> None:
        await self.redis.publish(ks.cordon_channel(self.prefix), b"changed")
        await self.refresh()  # this process at once, without waiting for its own message

    async def run(self) -> None:
        """Follow the channel and re-read every ``reread_s`` until cancelled."""
        listener = asyncio.create_task(self._events.run(), name="cordon-events")
        try:
            while not cancelling():  # a cancellation redis-py swallowed still ends it
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.reread_s):
                        await self._due.wait()
                self._due.clear()
                await self.refresh()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
