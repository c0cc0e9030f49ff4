"""The WebSocket side of one process: sockets by key, feeds, charging, revocation, drain.

Lifecycle: ``ws.setup.plug_ws`` adds one cleanup context (node feeds, the
charger, the revocation check) and an ``on_shutdown`` hook. The hook is
aiohttp's documented place to close WebSockets: it runs after the listener
stops and *before* the runner waits for handlers, so every socket gets its
1001 close frame once its in-flight calls are answered, instead of being
cut when the drain timeout runs out.

Charging: ``gateway.ws.charging.Charger`` meters each key's delivered
notifications in arrears, once per ``ws.charge_interval_s``.

Revocation: ``Store.revoke_key`` / ``rotate_key`` PUBLISH the key hash on
``<prefix>:keys``; the process's one subscription (``store.keyevents``,
``T.KEY_EVENTS``) calls this service, which re-reads that key's record
(``rev``, ``exp``), closing its sockets with 4001 or re-arming the expiry
timer; a broken subscription re-reads every key with sockets here. A
refused admission (a call or a charge) says the same thing, so a lost
pub/sub message still closes the sockets on the next call or charge.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from aiohttp import web
from redis.exceptions import RedisError

from gateway import typedefs as T
from gateway.config import Config, PlanConfig
from gateway.limits.limiter import Limiter
from gateway.redis.flushing import cancelling
from gateway.redis.keyspace import record_key
from gateway.telemetry.metrics import Metrics
from gateway.ws.charging import Charger
from gateway.ws.feed import Feed
from gateway.ws.leases import SocketLeases
from gateway.ws.metrics import WsMetrics
from gateway.ws.session import CLOSE_GOING_AWAY, CLOSE_REVOKED, KeyState, Session

log = logging.getLogger("gateway.ws")


class WsService:
    """Everything WebSocket in one process; one instance per app (``T.WS``)."""

    limiter: Limiter
    redis: Any
    leases: SocketLeases
    charger: Charger

    def __init__(self, cfg: Config, metrics: Metrics) -> None:
        self.cfg = cfg
        self.wcfg = cfg.ws
        self.metrics = WsMetrics(metrics)
        self.plans = {p.name: p for p in cfg.plans}
        self.keys: dict[str, KeyState] = {}
        self.sessions: set[Session] = set()
        self.feeds: dict[str, Feed] = {}
        self.draining = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sent_seen: dict[str, tuple[int, int, int, int]] = {}

    # -- sockets -------------------------------------------------------------
    def plan(self, name: str) -> PlanConfig:
        return self.plans.get(name) or self.plans.get(self.cfg.default_plan) or self.cfg.plans[0]

    def socket_cap(self, plan: PlanConfig) -> int:
        return plan.ws_max_sockets or self.wcfg.max_sockets_per_key

    def subscription_cap(self, plan: PlanConfig) -> int:
        return plan.ws_max_subscriptions or self.wcfg.max_subscriptions_per_socket

    def key_state(self, khash: str, key_id: str, plan: PlanConfig) -> KeyState:
        state = self.keys.get(khash)
        if state is None:
            state = self.keys[khash] = KeyState(khash, key_id, plan)
        state.plan = plan
        return state

    def register(self, sess: Session, expires_ms: int | None) -> None:
        # The charger drops a key's state once it has no sockets and owes
        # nothing, which it may have done while this socket was opening: put
        # it back (or take the one a later socket made), or this socket's
        # notifications would be counted on a state nobody charges.
        key = self.keys.setdefault(sess.key.khash, sess.key)
        if key is not sess.key:
            key.plan = sess.key.plan
            sess.key = key
        self.sessions.add(sess)
        key.sessions.add(sess)
        self.metrics.sockets.labels(sess.network).inc()
        if expires_ms is not None:
            self.arm_expiry(sess.key, expires_ms)

    def unregister(self, sess: Session, reason: str) -> None:
        self.sessions.discard(sess)
        key = sess.key
        key.sessions.discard(sess)
        for cid, up in list(sess.subs.items()):
            self.metrics.subscriptions.labels(up.kind).dec()
            up.feed.release(up, b'"' + cid.encode() + b'"', sess)
        sess.subs.clear()
        if not key.sessions and key.expiry is not None:
            key.expiry.cancel()
            key.expiry = None
        self.metrics.sockets.labels(sess.network).dec()
        self.metrics.disconnects.labels(reason).inc()

    def arm_expiry(self, key: KeyState, expires_ms: int) -> None:
        if key.expiry is not None:
            key.expiry.cancel()
        delay = max(0.0, expires_ms / 1000 - time.time())
        key.expiry = asyncio.get_running_loop().call_later(
            delay, lambda: self.spawn(self.close_key(key.khash, "key expired", "expired"))
        )

    async def close_key(self, khash: str, reason: str, why: str) -> None:
        """Close every socket of one key in this process (code 4001)."""
        key = self.keys.get(khash)
        if key is None:
            return
        await asyncio.gather(
            *(s.close(CLOSE_REVOKED, reason, why) for s in list(key.sessions)),
            return_exceptions=True,
        )

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifecycle -----------------------------------------------------------
    async def ctx(self, app: web.Application) -> AsyncIterator[None]:
        """Cleanup context: node feeds, the charger and the revocation check."""
        self.limiter = app[T.LIMITER]
        self.charger = Charger(self.keys, self.limiter, self.close_key)
        self.redis = app[T.REDIS]
        self.leases = SocketLeases(self.redis, self.cfg.redis.prefix, self.wcfg.socket_lease_s)
        pools = app[T.POOLS]
        http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        runners = []
        for net in self.cfg.networks:
            feed = Feed(net, self.wcfg, pools.get(net.name))
            feed.on_change = _gauge_updater(
                self.metrics.upstream_subscriptions.labels(net.name), feed
            )
            self.feeds[net.name] = feed
            runners.append(asyncio.create_task(feed.run(http), name=f"ws-feed-{net.name}"))
        runners.append(asyncio.create_task(self._charge_forever(), name="ws-charge"))
        runners.append(asyncio.create_task(self._recheck_forever(), name="ws-recheck"))
        runners.append(asyncio.create_task(self._renew_forever(), name="ws-leases"))
        events = app[T.KEY_EVENTS]
        events.add(self.key_changed)
        try:
            yield
        finally:
            events.remove(self.key_changed)
            for task in runners:
                task.cancel()
            await asyncio.wait(runners, timeout=3.0)
            for sess in list(self.sessions):
                sess.abort("shutdown")
            for feed in self.feeds.values():
                await feed.close()
            for task in list(self._tasks):
                task.cancel()
            await http.close()

    async def drain(self, app: web.Application) -> None:
        """on_shutdown: no new sockets; in-flight calls answered; then 1001 to all."""
        self.draining = True
        deadline = self.cfg.server.drain_timeout_s

        async def one(sess: Session) -> None:
            if sess.tasks:  # new frames are no longer read (see upgrade.py)
                await asyncio.wait(list(sess.tasks), timeout=deadline)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_flushed(sess), timeout=deadline)
            await sess.close(CLOSE_GOING_AWAY, "server shutting down", "shutdown")

        await asyncio.gather(*(one(s) for s in list(self.sessions)), return_exceptions=True)

    # -- charging ------------------------------------------------------------
    async def _charge_forever(self) -> None:
        while not cancelling():  # redis-py may swallow a cancel
            await asyncio.sleep(self.wcfg.charge_interval_s)
            try:
                await self.charge_once()
            except Exception:  # never let the charger die
                log.exception("ws charge failed")

    async def charge_once(self) -> None:
        """Publish the feeds' counters; charge each key's pending notifications."""
        for name, feed in self.feeds.items():
            c = feed.counters
            seen = self._sent_seen.get(name, (0, 0, 0, 0))
            now = (c.sent, c.dropped_budget, c.dropped_slow, feed.filled)
            self.metrics.notifications.labels(name).inc(now[0] - seen[0])
            self.metrics.dropped.labels("budget").inc(now[1] - seen[1])
            self.metrics.dropped.labels("slow").inc(now[2] - seen[2])
            self.metrics.gap_filled.labels(name).inc(now[3] - seen[3])
            self.metrics.failovers.labels(name).inc(feed.failovers - feed.failovers_seen)
            feed.failovers_seen = feed.failovers
            self._sent_seen[name] = now
        await self.charger.charge_all()

    # -- revocation ----------------------------------------------------------
    def key_changed(self, khash: str | None) -> None:
        """A ``KeyEvents`` listener: a key's record changed (None: any may have)."""
        if khash is None:
            self.spawn(self.recheck_all())
        elif khash in self.keys:
            self.spawn(self.recheck(khash))

    async def recheck(self, khash: str) -> None:
        """Re-read a key's state; close its sockets or re-arm its expiry."""
        try:
            rev, exp, key_id = await self.redis.hmget(
                record_key(self.cfg.redis.prefix, khash), "rev", "exp", "id"
            )
        except (RedisError, OSError):
            return
        self._apply(khash, rev, exp, key_id)

    async def _renew_forever(self) -> None:
        while not cancelling():  # redis-py may swallow a cancel
            await asyncio.sleep(self.wcfg.socket_lease_s / 3)
            held = [
                (khash, [s.lease for s in key.sessions if s.lease])
                for khash, key in self.keys.items()
            ]
            await self.leases.renew(held)

    async def _recheck_forever(self) -> None:
        while not cancelling():  # redis-py may swallow a cancel
            await asyncio.sleep(self.wcfg.recheck_interval_s)
            try:
                await self.recheck_all()
            except Exception:  # never let the safety net die
                log.exception("ws recheck failed")

    async def recheck_all(self) -> None:
        """Re-read every key with sockets here, in one pipelined round trip."""
        khashes = [k for k, state in self.keys.items() if state.sessions]
        if not khashes:
            return
        prefix = self.cfg.redis.prefix
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for khash in khashes:
                    pipe.hmget(record_key(prefix, khash), "rev", "exp", "id")
                rows = await pipe.execute()
        except (RedisError, OSError):
            return
        for khash, (rev, exp, key_id) in zip(khashes, rows, strict=True):
            self._apply(khash, rev, exp, key_id)

    def _apply(self, khash: str, rev: Any, exp: Any, key_id: Any) -> None:
        key = self.keys.get(khash)
        if key is None:
            return
        if rev or key_id is None:  # revoked, or the record is gone
            self.spawn(self.close_key(khash, "key revoked", "revoked"))
        elif exp and int(exp) <= time.time() * 1000:
            self.spawn(self.close_key(khash, "key expired", "expired"))
        elif exp:
            self.arm_expiry(key, int(exp))


def _gauge_updater(gauge: Any, feed: Feed) -> Callable[[], None]:
    """Keeps a network's upstream-subscription gauge equal to its feed's count."""

    def update() -> None:
        gauge.set(len(feed.subs))

    return update


async def _flushed(sess: Session) -> None:
    # The transport's buffer has no "emptied" event to wait on; poll it.
    while sess.queued:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


# The service's app key lives here (in typedefs it would make the cycle
# typedefs -> ws.service -> typedefs).
WS: web.AppKey[WsService] = web.AppKey("ws", WsService)
