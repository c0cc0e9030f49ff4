"""Every ``web.AppKey`` of the application, in one place, but two.

Two keys live beside their types, in packages that read app keys themselves:
``telemetry.metrics.METRICS`` (ops.routes reads keys) and ``rpc.clientip.CLIENT_IP``
(rpc.http sets request keys). Importing them here would make ops and rpc import
typedefs and typedefs import them: every arrow here points down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.config import AdminToken, Config
from gateway.limits.limiter import Limiter
from gateway.redis.clients import RedisClient
from gateway.redis.mux import MuxRedis
from gateway.store.accounts import Store
from gateway.store.audit import AuditLog
from gateway.store.cordons import CordonBook
from gateway.store.errorcounts import ErrorCounter
from gateway.store.insight import InsightSink
from gateway.store.keyevents import KeyEvents
from gateway.store.usagesink import UsageSink
from gateway.upstream.pool import NodePool

CONFIG = web.AppKey("config", Config)
REDIS: web.AppKey[RedisClient] = web.AppKey("redis")
# The admission check's own connection (None on a Cluster, where REDIS is
# used): /readyz pings it, so "ready" means the hot path can reach Redis.
MUX: web.AppKey[MuxRedis | None] = web.AppKey("mux")
# The URL every Redis client of this app connects to (the embedded server's
# socket when none is configured); pub/sub listeners open their own connection.
REDIS_URL = web.AppKey("redis_url", str)
STORE = web.AppKey("store", Store)
LIMITER: web.AppKey[Limiter] = web.AppKey("limiter")
POOLS = web.AppKey("pools", dict[str, NodePool])
ERRORS = web.AppKey("errors", ErrorCounter)
INSIGHT = web.AppKey("insight", InsightSink)
USAGE = web.AppKey("usage", UsageSink)
KEY_EVENTS = web.AppKey("key_events", KeyEvents)
# A network's WebSocket side for /readyz ("ok", "no WebSocket upstream",
# "untried"); set by gateway.ws when WebSocket is enabled.
WS_STATE: web.AppKey[Callable[[str], str]] = web.AppKey("ws_state")
# On the metrics listener's app: the gateway app whose /readyz details it serves.
READY_SOURCE = web.AppKey("ready_source", web.Application)

# The admin API (gateway.admin). On the gateway app: how a listener mounts the
# admin app on its own (the metrics listener calls it with its app), the
# functions that add admin routes (plug-ins add theirs), the cordons and the
# audit log. ``CONFIG_CHECK``: where the process can read its config again
# (``gateway serve`` sets it): () -> (the config or None, every mistake).
ADMIN_MOUNT: web.AppKey[Callable[[web.Application], None]] = web.AppKey("admin_mount")
ADMIN_ROUTES: web.AppKey[list[Callable[[web.Application], None]]] = web.AppKey("admin_routes")
CORDONS = web.AppKey("cordons", CordonBook)
AUDIT = web.AppKey("audit", AuditLog)
CONFIG_CHECK: web.AppKey[Callable[[], tuple[Config | None, list[str]]]] = web.AppKey("config_check")
# Where a single process takes a checked config to serve next (server.inplace).
CONFIG_APPLY: web.AppKey[Callable[[Config], None]] = web.AppKey("config_apply")
# On the admin app: the gateway app it serves.
ADMIN_SOURCE = web.AppKey("admin_source", web.Application)
# Per admin request: the caller's token (name and role), and what a write did
# for the audit log (action, target, detail), set by the handler.
ADMIN_CALLER = web.RequestKey("admin_caller", AdminToken)
ADMIN_AUDIT: web.RequestKey[dict[str, Any]] = web.RequestKey("admin_audit")

# Per-request values the access log reads (never the key itself).
RPC_METHOD = web.RequestKey("rpc_method", str)
KEY_ID = web.RequestKey("key_id", str)
