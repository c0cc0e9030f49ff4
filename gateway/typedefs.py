"""Every ``web.AppKey`` of the application, in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.accounts import Store
from gateway.clientip import ClientIP
from gateway.config import Config
from gateway.limiter import Limiter
from gateway.metrics import Metrics
from gateway.redisconn import RedisClient
from gateway.upstream import NodePool
from gateway.usage import ErrorCounter

CONFIG = web.AppKey("config", Config)
REDIS: web.AppKey[RedisClient] = web.AppKey("redis")
STORE = web.AppKey("store", Store)
LIMITER: web.AppKey[Limiter] = web.AppKey("limiter")
POOLS = web.AppKey("pools", dict[str, NodePool])
METRICS = web.AppKey("metrics", Metrics)
ERRORS = web.AppKey("errors", ErrorCounter)

if TYPE_CHECKING:
    from gateway.handlers import RpcHandler
    from gateway.ws.service import WsService

HANDLERS: web.AppKey[list[RpcHandler]] = web.AppKey("handlers")
WS: web.AppKey[WsService] = web.AppKey("ws")

# Per-request values the access log reads (never the key itself).
RPC_METHOD = web.RequestKey("rpc_method", str)
KEY_ID = web.RequestKey("key_id", str)
CLIENT_IP = web.AppKey("client_ip", ClientIP)
