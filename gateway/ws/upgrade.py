"""GET with ``Upgrade: websocket`` on an RPC path: auth, then one socket's read loop.

The key is checked before the handshake (path or Bearer header, the same
rules as HTTP): a bad key gets 401 and the -32001 body with ``"id": null``
and no socket opens. The check is ``admit`` with no calls (0 compute units:
it is the key lookup and allowlists, not a call).

A thin adapter: every frame (single or batch, text or binary) goes through
the network's one pipeline (``gateway.rpc.pipeline``), exactly as an HTTP
body would, and its answer is written back; an error answers that call
and leaves the socket open. ``eth_subscribe`` / ``eth_unsubscribe`` are
local methods of the ``ws`` transport (``ws.calls``). A large answer goes
out as one fragmented text message written piece by piece as the client
reads it (``Session.write_piece``), so a client that never reads holds a
bounded amount of memory and is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

from aiohttp import WSMsgType, hdrs, web
from redis.exceptions import RedisError

from gateway import typedefs as T
from gateway.limits.limiter import ip_bits
from gateway.redis.keyspace import record_key
from gateway.rpc import protocol as rpc
from gateway.rpc.auth import key_hash
from gateway.rpc.clientip import ClientIP
from gateway.rpc.delivery import deliver, failed_answer, node_failed
from gateway.rpc.http import http_reply, rpc_key
from gateway.rpc.pipeline import Caller, Pipeline
from gateway.rpc.replies import Answer, error_answer
from gateway.rpc.served import BY_GATEWAY
from gateway.upstream.errors import UpstreamError
from gateway.ws.charging import dropped_signal
from gateway.ws.leases import LeaseUnavailable, new_token
from gateway.ws.service import WsService
from gateway.ws.session import CLOSE_REVOKED, KeyState, Session

log = logging.getLogger("gateway.ws")


class WsRoute:
    """One network's WebSocket upgrades: a peer of the HTTP adapter (``rpc.http.RpcHttp``).

    Both feed the network's one pipeline; the app's router sends a GET here
    only when it asks to upgrade (``is_upgrade``), any other GET to HTTP.
    """

    def __init__(self, pipeline: Pipeline, svc: WsService, client_ip: ClientIP) -> None:
        self.pipeline = pipeline
        self.network = pipeline.network
        self.svc = svc
        self.client_ip = client_ip  # the app's one, as over HTTP

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The socket, or its refusal as an HTTP answer (never a traceback)."""
        try:
            return await self._open(request, self.svc)
        except Exception:  # never a traceback to the client
            log.exception("ws internal error network=%s", self.network.name)
            return _refuse(error_answer(rpc.INTERNAL_ERROR))

    async def _open(self, request: web.Request, svc: WsService) -> web.StreamResponse:
        if svc.draining:
            return _refuse(error_answer(rpc.SERVICE_UNAVAILABLE, None, "shutting down"))
        key = rpc_key(request)  # exactly as over HTTP: /bsc/KEY/extra is never a key
        if key is None:
            return _refuse(error_answer(rpc.UNAUTHORIZED))
        khash = key_hash(key)
        ip = self.client_ip(request)
        # this socket's own origin and address: its frames are judged by them
        caller = Caller(khash, request.headers.get(hdrs.ORIGIN, ""), ip, ip_bits(ip), "ws", None)
        decision = await self.pipeline.admit_socket(caller)  # refused as an HTTP request is
        if isinstance(decision, Answer):
            return _refuse(decision)
        request[T.KEY_ID] = decision.key_id
        plan = svc.plan(decision.plan)
        state = svc.key_state(khash, decision.key_id, plan)
        cap = svc.socket_cap(plan)
        lease = new_token()
        try:
            leased = await svc.leases.acquire(khash, lease, cap)
        except LeaseUnavailable:
            if not self.pipeline.redis_failed():
                return _refuse(error_answer(rpc.SERVICE_UNAVAILABLE))
            leased, lease = len(state.sessions) < cap, ""  # this process's count only
        if not leased:  # no Retry-After: only a socket's close makes room
            data = {"reason": f"at most {cap} open sockets per key"}
            headers = {**self.pipeline.limit_headers(decision), **BY_GATEWAY}
            return _refuse(error_answer(rpc.RATE_LIMITED, None, data, headers))
        try:
            return await self._serve(request, svc, state, caller, lease)
        finally:  # the socket is closed (or never opened): its lease goes
            if lease:
                svc.spawn(svc.leases.release(khash, lease))

    async def _serve(
        self, request: web.Request, svc: WsService, state: KeyState, caller: Caller, lease: str
    ) -> web.StreamResponse:
        khash = caller.khash
        assert khash is not None
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
            bad = error_answer(rpc.INVALID_REQUEST, None, "not a valid WebSocket handshake")
            return _refuse(bad, 400)
        await ws.prepare(request)
        sess = Session(
            ws,
            state,
            self.network.name,
            request.transport,
            wcfg.send_queue_bytes,
            lease,
            svc.cfg.server.write_timeout_s,
        )
        caller = dataclasses.replace(caller, session=sess)
        svc.register(sess, expires)
        limit = asyncio.Semaphore(wcfg.max_in_flight_per_socket)
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                    if svc.draining or sess.closing is not None:
                        continue  # shutting down: in-flight calls finish, new ones wait
                    await limit.acquire()
                    task = asyncio.create_task(self._frame(sess, caller, data))
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
    async def _frame(self, sess: Session, caller: Caller, data: bytes) -> None:
        if sess.missed:  # notifications were dropped over budget: this call says so
            signal = dropped_signal(sess, data)
            if signal is not None:
                sess.push(signal)
                return
        try:
            await self._answer(sess, caller, data)
        except Exception:  # one bad frame never ends the socket
            log.exception("ws frame failed network=%s", self.network.name)
            sess.push(rpc.error_body(rpc.INTERNAL_ERROR))

    async def _answer(self, sess: Session, caller: Caller, data: bytes) -> None:
        started = time.perf_counter()
        answer = await self.pipeline.run(data, caller)
        sent = False
        try:
            if answer.relay is not None:
                sent = await self._stream(sess, caller, answer)
            elif answer.body:
                sent = sess.push(answer.body)
        finally:  # cancelled (socket gone) or failed: local methods give back what they hold
            answer.settle(sent)
        elapsed = time.perf_counter() - started  # counted like an HTTP request
        self.pipeline.net_metrics.answered(answer.method, answer.status, elapsed)
        self.pipeline.record(caller, answer, answer.status, elapsed)
        if answer.status == 401:  # the key was revoked or expired since the upgrade
            await sess.close(CLOSE_REVOKED, "key revoked or expired", "revoked")

    async def _stream(self, sess: Session, caller: Caller, answer: Answer) -> bool:
        """A large answer as one fragmented text message, each piece once the last drained.

        Delivered as over HTTP (``rpc.delivery``): a failure before the first
        piece is answered as an error, and ``answer.status`` says so (502 /
        504) for the metrics and the log.
        """
        relay = answer.relay
        assert relay is not None
        errors, khash, net = self.pipeline.errors, caller.khash or "", self.network.name
        # Behind another large answer of this socket: its node connection sits
        # unread meanwhile, so the wait is bounded (one piece's drain time).
        try:
            async with asyncio.timeout(sess.drain_timeout_s):
                await sess.stream_lock.acquire()
        except TimeoutError:
            relay.close()
            late = UpstreamError("behind another answer of the socket", timeout=True)
            return sess.push(failed_answer(answer, node_failed(net, errors, khash, late)).body)
        except BaseException:  # cancelled while waiting (the socket went away)
            relay.close()
            raise
        out = _Pieces(sess)
        try:
            return await deliver(out, answer, net, errors, khash)
        finally:
            if out.begun:
                sess.end_stream()
            sess.stream_lock.release()


class _Pieces:
    """A socket's writes for ``rpc.delivery``: one fragmented text message, or one frame."""

    __slots__ = ("begun", "opcode", "sess")

    def __init__(self, sess: Session) -> None:
        self.sess = sess
        self.begun = False
        self.opcode = 0x01  # text, then continuation frames

    def whole(self, answer: Answer) -> bool:
        return self.sess.push(answer.body)

    async def start(self, answer: Answer, length: int | None) -> None:
        self.sess.begin_stream()
        self.begun = True

    async def write(self, chunk: bytes) -> None:
        if not await self.sess.write_piece(chunk, self.opcode):
            raise ConnectionError("the client did not take the answer")
        self.opcode = 0x00

    async def end(self) -> bool:
        return await self.sess.write_piece(b"", 0x80)

    def cut(self) -> bool:
        self.sess.abort("upstream")  # half a message cannot be taken back
        return False

    def gone(self) -> bool:
        return False


def is_upgrade(request: web.Request) -> bool:
    """Whether a GET asks for a WebSocket (else it is HTTP's: 405, or 401 with no key)."""
    return request.headers.get(hdrs.UPGRADE, "").lower() == "websocket"


def _done(sess: Session, limit: asyncio.Semaphore) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        sess.tasks.discard(task)
        limit.release()

    return done


def _refuse(answer: Answer, status: int | None = None) -> web.StreamResponse:
    """A refused upgrade, written as the HTTP door writes the same answer; no socket."""
    if status is not None:
        answer.status = status
    return http_reply(answer)


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
