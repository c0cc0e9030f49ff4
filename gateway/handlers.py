"""The RPC handler: read -> parse -> key -> admit (one Redis call) -> forward -> relay.

Nothing reaches a node before the key and the limit have passed. A single
call is forwarded as the original bytes and the node's answer relayed as
bytes; only a batch with calls we must answer ourselves is re-encoded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import orjson
from aiohttp import hdrs, web

from gateway import rpc
from gateway.auth import BAD_KEY, extract_key, key_hash, well_formed
from gateway.clientip import ClientIP
from gateway.config import Config, NetworkConfig
from gateway.insight import InsightSink, reply_code
from gateway.limiter import Decision, Limiter, LimiterUnavailable, Status, ip_bits
from gateway.metrics import Metrics
from gateway.typedefs import CLIENT_IP, KEY_HASH, KEY_ID, REPLY_ERROR, RPC_METHOD
from gateway.upstream import NodePool, UpstreamError
from gateway.usage import ErrorCounter

log = logging.getLogger("gateway.rpc")

JSON_TYPES = frozenset({"application/json", "application/json-rpc", "application/jsonrequest"})
NON_IDEMPOTENT = frozenset({"eth_sendRawTransaction"})
_PARSE_FAILED = object()
_TOO_DEEP = object()

CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "RateLimit, RateLimit-Policy, Retry-After",
}
PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Max-Age": "86400",
}
_STATUS_ERROR = {
    Status.UNAUTHORIZED: rpc.UNAUTHORIZED,
    Status.FORBIDDEN: rpc.FORBIDDEN,
    Status.RATE_LIMITED: rpc.RATE_LIMITED,
    Status.QUOTA_EXCEEDED: rpc.RATE_LIMITED,
    Status.TOO_EXPENSIVE: rpc.RATE_LIMITED,
}


class RpcHandler:
    """Serves one network's prefix; one instance per network."""

    limiter: Limiter
    pool: NodePool
    errors: ErrorCounter
    insight: InsightSink | None = None  # set at startup when insight is on

    def __init__(
        self,
        cfg: Config,
        network: NetworkConfig,
        metrics: Metrics,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        self.network = network
        # Shared by every network's handler: at most limits.max_in_flight calls
        # are worked on at once per worker; the rest wait in arrival order, so
        # CPU per call does not balloon with concurrency.
        self.slots = slots or asyncio.Semaphore(cfg.limits.max_in_flight)
        self.methods = network.methods
        self.metrics = metrics
        self.fail_open = cfg.redis.fail_open
        self.max_body = cfg.limits.max_body_bytes
        self.max_batch = cfg.limits.max_batch
        self.max_depth = cfg.limits.max_json_depth
        self.client_ip = ClientIP(cfg.server.trusted_proxies)
        self._net_metrics = metrics.network(network.name)
        self._policies = {
            p.name: f"{p.burst};w={max(1, math.ceil(p.burst / p.rate))}" for p in cfg.plans
        }

    def bind(self, limiter: Limiter, pool: NodePool, errors: ErrorCounter) -> None:
        """Attach the resources made by the app's cleanup contexts (at startup)."""
        self.limiter = limiter
        self.pool = pool
        self.errors = errors

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            async with self.slots:
                response = await self._handle(request)
        except Exception:  # never a traceback to the client
            log.exception("internal error network=%s", self.network.name)
            response = _reply(rpc.error_body(rpc.INTERNAL_ERROR), 500)
        elapsed = time.perf_counter() - started
        self._net_metrics.answered(request.get(RPC_METHOD, "-"), response.status, elapsed)
        if self.insight is not None and KEY_HASH in request:
            self._record_insight(request, response, elapsed)
        return response

    def _record_insight(
        self, request: web.Request, response: web.StreamResponse, elapsed: float
    ) -> None:
        """One answered call of an existing key into this worker's insight sums (no I/O)."""
        assert self.insight is not None
        status = response.status
        body = response.body if isinstance(response, web.Response) else None
        code = 0
        if isinstance(body, bytes) and (
            status >= 400 or request.get(REPLY_ERROR, False) or len(body) <= 512
        ):
            code = reply_code(body)
        failed = code != 0 or status >= 400
        self.insight.record(
            request[KEY_HASH],
            request.get(RPC_METHOD, "-"),
            code,
            status,
            elapsed * 1000,
            self.client_ip(request) if failed else "",
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        if method != hdrs.METH_POST:
            if method == hdrs.METH_OPTIONS:
                return web.Response(status=204, headers=PREFLIGHT_HEADERS)
            resp = _reply(rpc.error_body(rpc.METHOD_NOT_ALLOWED, None, "use POST"), 405)
            resp.headers[hdrs.ALLOW] = "POST, OPTIONS"
            return resp
        ctype = request.headers.get(hdrs.CONTENT_TYPE)
        if ctype is not None:
            mime = ctype.partition(";")[0].strip().lower()
            if mime not in JSON_TYPES and not mime.endswith("+json"):
                return _reply(
                    rpc.error_body(
                        rpc.UNSUPPORTED_MEDIA_TYPE, None, "Content-Type must be application/json"
                    ),
                    415,
                )
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._too_large()
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        except ConnectionError:  # client gone, or too slow (server.body_timeout_s)
            return _reply(rpc.error_body(rpc.INVALID_REQUEST, None, "body incomplete"), 408)
        if len(body) > self.max_body:
            return self._too_large()

        # Parse first so that even auth errors can echo the ids.
        try:
            parsed: Any = rpc.loads(body)
            if rpc.has_float_id(parsed):
                parsed = rpc.loads_exact(body)
        except rpc.ParseError:
            parsed = _PARSE_FAILED
        if body.count(b"[") + body.count(b"{") > self.max_depth and json_too_deep(
            parsed, self.max_depth
        ):  # the count is a cheap upper bound of the depth
            parsed = _TOO_DEEP
        calls: list[rpc.Call] = []
        request_error: tuple[rpc.ErrorKind, str | None] | None = None
        is_batch = type(parsed) is list
        if parsed is _PARSE_FAILED:
            request_error = (rpc.PARSE_ERROR, None)
        elif parsed is _TOO_DEEP:
            is_batch = False
            request_error = (rpc.INVALID_REQUEST, f"JSON nested deeper than {self.max_depth}")
        elif is_batch:
            if not parsed:
                request_error = (rpc.INVALID_REQUEST, "empty batch")
            elif len(parsed) > self.max_batch:
                request_error = (
                    rpc.INVALID_REQUEST,
                    f"batch of {len(parsed)} calls exceeds the limit of {self.max_batch}",
                )
            else:
                methods = self.methods
                calls = [rpc.validate_call(obj, methods) for obj in parsed]
        else:
            calls = [rpc.validate_call(parsed, self.methods)]

        key = rpc_key(request)
        if key is None:
            return self._request_error(rpc.UNAUTHORIZED, calls, is_batch, request_error)
        khash = key_hash(key)

        # One Redis round trip: key, state, allowlists, quota, bucket, usage.
        counts: dict[str, int] = {}
        for call in calls:
            if call.error is None:
                counts[call.method] = counts.get(call.method, 0) + 1
        if len(counts) == 1:
            request[RPC_METHOD] = next(iter(counts))
        elif counts:
            request[RPC_METHOD] = "batch"
        try:
            decision = await self.limiter.admit(
                khash,
                max(1, len(calls)),
                counts,
                request.headers.get(hdrs.ORIGIN, ""),
                ip_bits(self.client_ip(request)),
            )
        except LimiterUnavailable:
            self.metrics.redis_errors.labels("open" if self.fail_open else "closed").inc()
            if not self.fail_open:
                return self._request_error(
                    rpc.SERVICE_UNAVAILABLE, calls, is_batch, request_error, status=503
                )
            decision = Decision(Status.ADMITTED, "")
        request[KEY_ID] = decision.key_id
        if decision.key_id:  # an existing key: its calls count in request insight
            request[KEY_HASH] = khash
        if decision.status is not Status.ADMITTED:
            return self._refused(decision, calls, is_batch, request_error)

        headers = self._limit_headers(decision)
        if request_error is not None:
            kind, reason = request_error
            return _reply(rpc.error_body(kind, None, reason), kind.http_status, headers)

        forward = [c for c in calls if c.error is None]
        answered = [c for c in calls if c.answered]
        if not forward:
            if not answered:
                return _no_content(headers)
            return self._local_answer(calls, is_batch, headers)

        rewrite = len(forward) != len(calls)
        idempotent = not any(c.method in NON_IDEMPOTENT for c in forward)
        out = self._rewrite(body, calls) if rewrite else body
        try:
            reply = await self.pool.forward(out, idempotent=idempotent)
        except UpstreamError as exc:
            self.errors.add(khash)
            kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
            return self._upstream_failed(kind, calls, is_batch, headers)
        if b'"error"' in reply:
            self.errors.add(khash)
            request[REPLY_ERROR] = True
        if not answered:
            return _no_content(headers)
        if rewrite:
            reply = _merge(calls, reply)
        return _reply(reply, 200, headers)

    def _limit_headers(self, decision: Decision) -> dict[str, str]:
        """IETF RateLimit headers (draft-ietf-httpapi-ratelimit-headers-07 form)."""
        policy = self._policies.get(decision.plan)
        if policy is None:
            return {}
        return {
            "RateLimit-Policy": policy,
            "RateLimit": f"limit={decision.limit}, remaining={decision.remaining}, "
            f"reset={decision.reset_s}",
        }

    # -- answers we make ourselves --------------------------------------------
    def _too_large(self) -> web.Response:
        return _reply(
            rpc.error_body(rpc.BODY_TOO_LARGE, None, f"body exceeds {self.max_body} bytes"), 413
        )

    def _request_error(
        self,
        kind: rpc.ErrorKind,
        calls: Sequence[rpc.Call],
        is_batch: bool,
        request_error: tuple[rpc.ErrorKind, str | None] | None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        data: Any = None,
    ) -> web.Response:
        """A request-level failure: one error per call of a batch, each with its id."""
        status = status or kind.http_status
        if request_error is not None or not calls:
            return _reply(rpc.error_body(kind, None, data), status, headers)
        if not is_batch:
            return _reply(rpc.error_body(kind, calls[0].id, data), status, headers)
        items = [rpc.error_obj(kind, c.id, data) for c in calls]
        return _reply(orjson.dumps(items), status, headers)

    def _refused(
        self,
        decision: Decision,
        calls: Sequence[rpc.Call],
        is_batch: bool,
        request_error: tuple[rpc.ErrorKind, str | None] | None,
    ) -> web.Response:
        kind = _STATUS_ERROR[decision.status]
        if kind is not rpc.RATE_LIMITED:
            return self._request_error(kind, calls, is_batch, request_error)
        self._net_metrics.rate_limited()
        retry_ms = max(1, decision.retry_ms)
        data: dict[str, Any] = {"retry_after_ms": retry_ms}
        if decision.status is Status.QUOTA_EXCEEDED:
            data["reason"] = "daily quota reached"
        elif decision.status is Status.TOO_EXPENSIVE:
            data["reason"] = "request costs more compute units than the plan's burst"
            retry_ms = data["retry_after_ms"] = 1000
        headers = self._limit_headers(decision)
        headers[hdrs.RETRY_AFTER] = str(-(-retry_ms // 1000))
        return self._request_error(kind, calls, is_batch, request_error, headers=headers, data=data)

    def _local_answer(
        self, calls: Sequence[rpc.Call], is_batch: bool, headers: dict[str, str]
    ) -> web.Response:
        errors = [rpc.call_error_obj(c) for c in calls if c.answered]
        body = orjson.dumps(errors if is_batch else errors[0])
        return _reply(body, 200, headers)

    def _upstream_failed(
        self,
        kind: rpc.ErrorKind,
        calls: Sequence[rpc.Call],
        is_batch: bool,
        headers: dict[str, str],
    ) -> web.Response:
        if not is_batch:
            return _reply(rpc.error_body(kind, calls[0].id), kind.http_status, headers)
        items = [
            rpc.call_error_obj(c) if c.error is not None else rpc.error_obj(kind, c.id)
            for c in calls
            if c.answered
        ]
        return _reply(orjson.dumps(items), kind.http_status, headers)

    @staticmethod
    def _rewrite(body: bytes, calls: Sequence[rpc.Call]) -> bytes:
        """Only the forwardable calls, numbers kept exactly as the client wrote them."""
        exact = rpc.loads_exact(body)
        return orjson.dumps([obj for obj, c in zip(exact, calls, strict=True) if c.error is None])


def _merge(calls: Sequence[rpc.Call], reply: bytes) -> bytes:
    """Put the node's answers and our per-call errors back in request order."""
    try:
        answers = rpc.loads_exact(reply)
    except rpc.ParseError:
        answers = None
    if type(answers) is not list:
        answers = [answers] if type(answers) is dict else []
    by_id: dict[bytes, list[Any]] = {}
    for item in answers:
        ident = orjson.dumps(item.get("id")) if type(item) is dict else b"null"
        by_id.setdefault(ident, []).append(item)
    out: list[Any] = []
    for call in calls:
        if not call.answered:
            continue
        if call.error is not None:
            out.append(rpc.call_error_obj(call))
            continue
        bucket = by_id.get(orjson.dumps(call.id))
        if bucket:
            out.append(bucket.pop(0))
        else:
            out.append(rpc.error_obj(rpc.UPSTREAM_UNAVAILABLE, call.id, "no answer from node"))
    return orjson.dumps(out)


def _no_content(headers: dict[str, str]) -> web.Response:
    """204 for a request made only of notifications; browsers still need CORS."""
    resp = web.Response(status=204, headers=headers)
    resp.headers.update(CORS_HEADERS)
    return resp


def _reply(body: bytes, status: int, headers: dict[str, str] | None = None) -> web.Response:
    resp = web.Response(body=body, status=status, content_type="application/json", headers=headers)
    resp.headers.update(CORS_HEADERS)
    return resp


def rpc_key(request: web.Request) -> str | None:
    """The request's well-formed key, or None (missing, malformed, mismatched)."""
    key = extract_key(request.match_info.get("key", ""), request.headers.get(hdrs.AUTHORIZATION))
    if key is BAD_KEY or not key or not well_formed(key):
        return None
    return key


def client_ip(request: web.Request) -> str:
    """The client's address as the app's trusted-proxy rules see it."""
    return request.config_dict[CLIENT_IP](request)


def json_too_deep(parsed: Any, limit: int) -> bool:
    """Whether ``parsed`` nests containers deeper than ``limit`` (no recursion)."""
    level = [parsed]
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper: list[Any] = []
        add = deeper.append
        for obj in level:
            kind = type(obj)
            if kind is not dict and kind is not list:
                continue
            for value in obj.values() if kind is dict else obj:
                if type(value) is dict or type(value) is list:
                    add(value)
        level = deeper
        depth += 1
    return False
