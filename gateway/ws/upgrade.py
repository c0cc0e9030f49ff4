"""GET with ``Upgrade: websocket`` on an RPC path: auth, then one socket's read loop.

The key is checked before the handshake (path or Bearer header, the same
rules as HTTP): a bad key gets 401 and the -32001 body with ``"id": null``
and no socket opens. The check is ``admit`` with no calls (0 compute units:
it is the key lookup and allowlists, not a call). Every frame then is a
JSON-RPC request or batch, admitted exactly as an HTTP body would be (one
admission call per frame), and answered on the socket; an error answers
that call and leaves the socket open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import WSMsgType, hdrs, web
from redis.exceptions import RedisError

from gateway import typedefs as T
from gateway.config import NetworkConfig
from gateway.filters.service import FILTER_METHODS, answer_obj
from gateway.limits.limiter import Decision, LimiterUnavailable, Status, ip_bits, record_key
from gateway.rpc import protocol as rpc
from gateway.rpc.auth import BAD_KEY, extract_key, key_hash, well_formed
from gateway.rpc.handler import NON_IDEMPOTENT, RpcHandler
from gateway.upstream.pool import UpstreamError
from gateway.ws import calls as C
from gateway.ws.fanout import NodeRefused, UpSub
from gateway.ws.leases import LeaseUnavailable, new_token
from gateway.ws.service import WS, WsService
from gateway.ws.session import CLOSE_REVOKED, KeyState, Session

log = logging.getLogger("gateway.ws")

_CORS = {"Access-Control-Allow-Origin": "*"}
_REFUSED = {
    Status.UNAUTHORIZED: rpc.UNAUTHORIZED,
    Status.FORBIDDEN: rpc.FORBIDDEN,
    Status.RATE_LIMITED: rpc.RATE_LIMITED,
    Status.QUOTA_EXCEEDED: rpc.RATE_LIMITED,
    Status.TOO_EXPENSIVE: rpc.RATE_LIMITED,
}


class WsRoute:
    """One network's GET route: WebSocket upgrades here, anything else to HTTP."""

    def __init__(self, http: RpcHandler) -> None:
        self.http = http
        self.network: NetworkConfig = http.network
        self.methods = http.network.methods | C.LOCAL_METHODS

    async def handle(self, request: web.Request) -> web.StreamResponse:
        upgrade = request.headers.get(hdrs.UPGRADE, "")
        svc = request.config_dict.get(WS)
        if upgrade.lower() != "websocket" or svc is None:
            return await self.http.handle(request)
        try:
            return await self._open(request, svc)
        except Exception:  # never a traceback to the client
            log.exception("ws internal error network=%s", self.network.name)
            return _refuse(rpc.INTERNAL_ERROR, 500)

    async def _open(self, request: web.Request, svc: WsService) -> web.StreamResponse:
        if svc.draining:
            return _refuse(rpc.SERVICE_UNAVAILABLE, 503, "shutting down")
        key = extract_key(
            request.match_info.get("key", ""), request.headers.get(hdrs.AUTHORIZATION)
        )
        if key is BAD_KEY or not key or not well_formed(key):
            return _refuse(rpc.UNAUTHORIZED, 401)
        khash = key_hash(key)
        origin = request.headers.get(hdrs.ORIGIN, "")
        bits = ip_bits(request.config_dict[T.CLIENT_IP](request))
        try:
            decision = await svc.limiter.admit(khash, 0, {}, origin, bits)
        except LimiterUnavailable:
            if not self.http.fail_open:
                return _refuse(rpc.SERVICE_UNAVAILABLE, 503)
            decision = Decision(Status.ADMITTED, "")
        if decision.status is not Status.ADMITTED:
            kind = _REFUSED[decision.status]
            return _refuse(kind, kind.http_status)
        request[T.KEY_ID] = decision.key_id
        plan = svc.plan(decision.plan)
        state = svc.key_state(khash, decision.key_id, plan, origin, bits)
        cap = svc.socket_cap(plan)
        lease = new_token()
        try:
            leased = await svc.leases.acquire(khash, lease, cap)
        except LeaseUnavailable:
            if not self.http.fail_open:
                return _refuse(rpc.SERVICE_UNAVAILABLE, 503)
            leased, lease = len(state.sessions) < cap, ""  # this process's count only
        if not leased:
            return _refuse(rpc.RATE_LIMITED, 429, f"at most {cap} open sockets per key")
        try:
            return await self._serve(request, svc, state, khash, lease)
        finally:  # the socket is closed (or never opened): its lease goes
            if lease:
                svc.spawn(svc.leases.release(khash, lease))

    async def _serve(
        self, request: web.Request, svc: WsService, state: KeyState, khash: str, lease: str
    ) -> web.StreamResponse:
        expires: int | None = None
        with contextlib.suppress(RedisError, OSError, ValueError, TypeError):
            exp = await svc.redis.hget(record_key(svc.cfg.redis.prefix, khash), "exp")
            expires = int(exp) if exp else None

        wcfg = svc.wcfg
        ws = web.WebSocketResponse(
            heartbeat=wcfg.heartbeat_s or None,
            max_msg_size=wcfg.max_message_bytes,
            compress=wcfg.compress,
            decode_text=False,
            timeout=wcfg.close_timeout_s,
        )
        if not ws.can_prepare(request).ok:
            return _refuse(rpc.INVALID_REQUEST, 400, "not a valid WebSocket handshake")
        await ws.prepare(request)
        sess = Session(
            ws, state, self.network.name, request.transport, wcfg.send_queue_bytes, lease
        )
        svc.register(sess, expires)
        limit = asyncio.Semaphore(wcfg.max_in_flight_per_socket)
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                    if svc.draining or sess.closing is not None:
                        continue  # shutting down: in-flight calls finish, new ones wait
                    await limit.acquire()
                    task = asyncio.create_task(self._frame(svc, sess, data))
                    sess.tasks.add(task)
                    task.add_done_callback(_done(sess, limit))
                elif msg.type is WSMsgType.ERROR:
                    break
        finally:
            reason = sess.closing or _close_reason(ws)
            svc.unregister(sess, reason)
            await sess.finish()
        return ws

    # -- one frame -----------------------------------------------------------
    async def _frame(self, svc: WsService, sess: Session, data: bytes) -> None:
        try:
            await self._answer(svc, sess, data)
        except Exception:  # one bad frame never ends the socket
            log.exception("ws frame failed network=%s", self.network.name)
            sess.push(rpc.error_body(rpc.INTERNAL_ERROR))

    async def _answer(self, svc: WsService, sess: Session, data: bytes) -> None:
        http = self.http
        frame = C.parse_frame(data, self.methods, http.max_batch, http.max_depth)
        calls = frame.calls
        counts: dict[str, int] = {}
        for call in calls:
            if call.error is None:
                counts[call.method] = counts.get(call.method, 0) + 1
        key = sess.key
        try:
            decision = await svc.limiter.admit(
                key.khash, max(1, len(calls)), counts, key.origin, key.ip_bits
            )
        except LimiterUnavailable:
            if not http.fail_open:
                self._all_failed(sess, frame, rpc.SERVICE_UNAVAILABLE, None)
                return
            decision = Decision(Status.ADMITTED, "")
        if decision.status is not Status.ADMITTED:
            kind = _REFUSED[decision.status]
            info: Any = None
            if kind is rpc.RATE_LIMITED:
                info = {"retry_after_ms": max(1, decision.retry_ms)}
            self._all_failed(sess, frame, kind, info)
            if decision.status is Status.UNAUTHORIZED:
                await sess.close(CLOSE_REVOKED, "key revoked or expired", "revoked")
            return
        if frame.error is not None:
            kind, reason = frame.error
            sess.push(rpc.error_body(kind, None, reason))
            return

        answers: list[Any] = [None] * len(calls)
        attach: list[tuple[UpSub, bytes, str]] = []
        try:
            forward: list[int] = []
            for i, call in enumerate(calls):
                if call.error is not None:
                    if call.answered:
                        answers[i] = rpc.call_error_obj(call)
                elif call.method == C.SUBSCRIBE:
                    if call.has_id:  # a subscription nobody can name would only leak
                        answers[i] = await self._subscribe(svc, sess, call, attach)
                elif call.method == C.UNSUBSCRIBE:
                    answers[i] = self._unsubscribe(svc, sess, call)
                elif http.filters is not None and call.method in FILTER_METHODS:
                    answer = await http.filters.answer(
                        key.khash, decision.plan, call.method, call.params
                    )
                    answers[i] = answer_obj(answer, call.id)
                else:
                    forward.append(i)
            if forward:
                await self._forward(calls, forward, answers)
            out = [a for i, a in enumerate(answers) if a is not None and calls[i].has_id]
            if out:
                sess.push(orjson.dumps(out if frame.is_batch else out[0]))
            # Listeners join only now, so no notification can precede the
            # answer that names its subscription.
            while attach:
                up, cid, sid = attach.pop()
                up.reserved -= 1
                if up.dead or sess.closing is not None:
                    up.feed.release(up, cid)
                    continue
                up.listeners[cid] = sess
                sess.subs[sid] = up
                svc.metrics.subscriptions.labels(up.kind).inc()
        finally:  # cancelled (socket gone) or failed: give the reservations back
            for up, cid, _ in attach:
                up.reserved -= 1
                up.feed.release(up, cid)

    async def _subscribe(
        self, svc: WsService, sess: Session, call: rpc.Call, attach: list[tuple[UpSub, bytes, str]]
    ) -> Any:
        parsed = C.subscribe_params(call.params)
        if isinstance(parsed, str):
            return rpc.error_obj(C.INVALID_PARAMS, call.id, parsed)
        kind, params, canon = parsed
        cap = svc.subscription_cap(sess.key.plan)
        if len(sess.subs) + len(attach) >= cap:
            return rpc.error_obj(
                rpc.RATE_LIMITED, call.id, {"reason": f"at most {cap} subscriptions per socket"}
            )
        feed = svc.feeds[self.network.name]
        try:
            up = await feed.reserve(kind, params, canon)
        except NodeRefused as exc:
            return {"jsonrpc": "2.0", "id": call.id, "error": exc.error}
        except (TimeoutError, ConnectionError):
            return rpc.error_obj(rpc.UPSTREAM_TIMEOUT, call.id, "no node accepted the subscription")
        sid = C.new_subscription_id()
        attach.append((up, b'"' + sid.encode() + b'"', sid))
        return {"jsonrpc": "2.0", "id": call.id, "result": sid}

    def _unsubscribe(self, svc: WsService, sess: Session, call: rpc.Call) -> Any:
        params = call.params
        sid = params[0] if type(params) is list and len(params) == 1 else None
        if type(sid) is not str:
            return rpc.error_obj(C.INVALID_PARAMS, call.id, "params must be [subscription id]")
        up = sess.subs.pop(sid, None)
        if up is not None:
            svc.metrics.subscriptions.labels(up.kind).dec()
            up.feed.release(up, b'"' + sid.encode() + b'"')
        return {"jsonrpc": "2.0", "id": call.id, "result": up is not None}

    async def _forward(self, calls: list[rpc.Call], forward: list[int], answers: list[Any]) -> None:
        chosen = [calls[i] for i in forward]
        body = C.upstream_body(chosen, len(chosen) > 1)
        idempotent = not any(c.method in NON_IDEMPOTENT for c in chosen)
        try:
            reply = await self.http.pool.forward(body, idempotent=idempotent)
        except UpstreamError as exc:
            kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
            for i in forward:
                answers[i] = rpc.error_obj(kind, calls[i].id)
            return
        assert isinstance(reply, bytes)  # no stream_over: every answer comes buffered
        restored = C.restore(reply, chosen)
        for n, i in enumerate(forward):
            answers[i] = (
                restored[n]
                if restored is not None
                else rpc.error_obj(
                    rpc.UPSTREAM_UNAVAILABLE, calls[i].id, "node answer not JSON-RPC"
                )
            )

    @staticmethod
    def _all_failed(sess: Session, frame: C.Frame, kind: rpc.ErrorKind, info: Any) -> None:
        if frame.error is not None or not frame.calls:
            sess.push(rpc.error_body(kind, None, info))
            return
        items = [rpc.error_obj(kind, c.id, info) for c in frame.calls if c.answered]
        if items:
            sess.push(orjson.dumps(items if frame.is_batch else items[0]))


def _done(sess: Session, limit: asyncio.Semaphore) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        sess.tasks.discard(task)
        limit.release()

    return done


def _refuse(kind: rpc.ErrorKind, status: int, data: Any = None) -> web.Response:
    """A refused upgrade: the JSON-RPC error body, ``"id": null``, no socket."""
    return web.Response(
        body=rpc.error_body(kind, None, data),
        status=status,
        content_type="application/json",
        headers=_CORS,
    )


def _close_reason(ws: web.WebSocketResponse) -> str:
    code = ws.close_code
    exc = ws.exception()
    if code == 1009 or getattr(exc, "code", None) == 1009:
        return "too_big"
    if (
        isinstance(exc, asyncio.TimeoutError | TimeoutError)
        or "timeout" in type(exc).__name__.lower()
    ):
        return "heartbeat"
    if code in (1000, 1001, 1005, None):
        return "client"
    return "client" if exc is None else "error"
