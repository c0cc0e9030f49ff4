"""Key changes, broadcast to every gateway process through Redis pub/sub.

Whatever changes a key's record (revoke, rotate, plan switch, limits,
account deletion) publishes the key's hash on ``<prefix>:keys``; every
process subscribes and drops its cached copy, so a revoked key stops
working everywhere within the pub/sub delay (milliseconds), well under the
1 s a revocation may take. If the subscription breaks, every cached record is
dropped at once (a message may have been missed) and the listener
reconnects with a backoff; the cache's own TTL is the last safety net.

One subscription per process serves everyone who cares (``add``): the
leased admission's record cache and the WebSocket service's revocation
check both listen here. A lost subscription is logged once per
``log_interval_s`` with the Redis address, the error class and message
(``gateway.redis.failurelog``), and one line says when it is back.

``PUBLISH`` reaches every node of a Redis Cluster (Redis 6.2 has no sharded
pub/sub), so one subscription to any node is enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.redis.failurelog import RateLimitedLog, redis_failure
from gateway.redis.keyspace import keys_channel

log = logging.getLogger("gateway.keyevents")

Listener = Callable[[str | None], None]  # a key hash, or None for "everything"


async def publish_key_change(redis: Any, prefix: str, khash: str) -> None:
    """Tell every gateway process to drop its cached copy of the key record ``khash``."""
    await redis.publish(keys_channel(prefix), khash)


class KeyEvents:
    """Runs the subscription and calls each listener with every changed key."""

    def __init__(
        self,
        connect: Callable[[], Redis],
        prefix: str,
        log_interval_s: float = 10.0,
        *,
        channel: str | None = None,
    ) -> None:
        """``channel``: another channel than the key changes (the admin API's cordons)."""
        self._connect = connect
        self._channel = keys_channel(prefix) if channel is None else channel
        self._listeners: list[Listener] = []
        self._lines = RateLimitedLog(log_interval_s)
        self.ready = asyncio.Event()

    def add(self, listener: Listener) -> None:
        """Call ``listener`` with each changed key hash, and None when all may have changed."""
        self._listeners.append(listener)

    def remove(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def _emit(self, khash: str | None) -> None:
        for listener in self._listeners:
            try:
                listener(khash)
            except Exception:  # one bad listener must not stop the others
                log.exception("key event listener failed")

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with a backoff.

        The loops also stop once the task is being cancelled even if redis-py
        swallowed that cancellation inside a command (it drops the connection
        and returns, or raises a connection error): a loop that went on would
        hang the app's shutdown.
        """
        task = asyncio.current_task()

        def stopping() -> bool:
            return task is not None and task.cancelling() > 0

        backoff = 0.1
        while not stopping():
            redis = self._connect()
            try:
                async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._channel)
                    self._emit(None)  # anything may have changed while we were away
                    self.ready.set()
                    if self._lines.recovered(None):
                        log.info("key events restored redis=%s", redis_address(redis))
                    backoff = 0.1
                    while not stopping():
                        msg = await pubsub.get_message(timeout=5.0)
                        if msg is not None and msg.get("type") == "message":
                            data = msg["data"]
                            self._emit(data.decode() if isinstance(data, bytes) else str(data))
            except (RedisError, OSError) as exc:
                self.ready.clear()
                self._emit(None)
                if not stopping():
                    self._failed(redis, exc)
            finally:
                with contextlib.suppress(Exception):
                    await redis.aclose()
            if not stopping():
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)

    def _failed(self, redis: Redis, exc: BaseException) -> None:
        """The first failure of each ``log_interval_s`` is logged, the others counted."""
        suppressed = self._lines.failed(None)
        if suppressed is not None:
            log.warning(
                "key events lost, reconnecting: %s (%d similar failures not logged before)",
                redis_failure(redis_address(redis), exc),
                suppressed,
            )


def redis_address(redis: Any) -> str:
    """``host:port`` (or ``unix:path``) of a redis-py client, for log lines; never a password."""
    kwargs = getattr(getattr(redis, "connection_pool", None), "connection_kwargs", None) or {}
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
