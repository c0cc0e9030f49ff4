"""The RPC handler: read -> parse -> key -> admit (one Redis call) -> forward -> relay.

Nothing reaches a node before the key and the limit have passed, and what
reaches it is rebuilt by the gateway from the validated method and params
with a gateway-chosen id (``rpc.encode_call``): Go nodes match JSON keys
case-insensitively and take the last one, so the client's own bytes could
name any method. The client's id is put back into the answer
(``rpc.restore_single`` splices it without parsing a large result).

After admission (so every answer below passed the key check and the
limiter, and counts as usage): an ``eth_getLogs`` range over the plan's
limit is refused here; an allowlisted read is answered from the network's
cache when it can be, else sent once for every identical caller
(coalesced), hedged, and its answer kept when its finality allows
(``gateway.intel``; README "What is cached and why it is safe").
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import orjson
from aiohttp import hdrs, web

from gateway.config import Config, NetworkConfig
from gateway.filters.service import FILTER_METHODS, FilterService, answer_obj
from gateway.intel.cache import answer as cached_answer
from gateway.intel.cache import answer_block, call_key, result_bytes
from gateway.intel.head import NetworkHead
from gateway.intel.logsguard import check_logs_range
from gateway.intel.methods import READS
from gateway.intel.policy import Kind, Policy, classify
from gateway.limits.limiter import Decision, Limiter, LimiterUnavailable, Status, ip_bits
from gateway.ops.metrics import Metrics
from gateway.rpc import protocol as rpc
from gateway.rpc.auth import BAD_KEY, extract_key, key_hash, well_formed
from gateway.rpc.clientip import ClientIP
from gateway.store.errors import ErrorCounter
from gateway.store.insight import InsightSink, reply_code
from gateway.typedefs import KEY_HASH, KEY_ID, NOT_OFFERED, REPLY_ERROR, RPC_METHOD
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import Node, NodePool, UpstreamError

log = logging.getLogger("gateway.rpc")

JSON_TYPES = frozenset({"application/json", "application/json-rpc", "application/jsonrequest"})
NON_IDEMPOTENT = frozenset({"eth_sendRawTransaction"})
# Single answers longer than this (or of unknown length) are streamed, not
# buffered; the common small answer keeps the one-buffer path.
STREAM_OVER = 1 << 20
_MAX_GID = 1 << 31  # gateway ids wrap here: small, and exact in every JSON decoder

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
    Status.KEY_RATE_CAPPED: rpc.RATE_LIMITED,
    Status.KEY_DAILY_CAPPED: rpc.RATE_LIMITED,
}
# error.data.reason of a 429 that is not the plain token bucket: it names the
# limit that was reached, so a key holder can tell the owner's own key caps
# (Infura-style "key limits") from the plan's.
_REFUSAL_REASON = {
    Status.QUOTA_EXCEEDED: "daily quota reached",
    Status.TOO_EXPENSIVE: "request costs more compute units than the plan's burst",
    Status.KEY_RATE_CAPPED: "the key's own requests-per-second cap reached (set by its owner)",
    Status.KEY_DAILY_CAPPED: "the key's own daily compute-unit cap reached (set by its owner)",
}


class _Request:
    """What the handler learned from a body: its calls, or why it has none."""

    __slots__ = ("calls", "error", "is_batch", "plan")

    def __init__(
        self,
        calls: list[rpc.Call],
        is_batch: bool,
        error: tuple[rpc.ErrorKind, str | None] | None = None,
    ) -> None:
        self.calls = calls
        self.is_batch = is_batch
        self.error = error
        self.plan = ""  # the key's plan, once admitted (its eth_getLogs range limit)


class _Relay:
    """A large single answer to stream once the in-flight slot is given back."""

    __slots__ = ("client_id", "gid", "headers", "khash", "req", "stream")

    def __init__(
        self,
        stream: NodeStream,
        gid: int,
        client_id: Any,
        headers: dict[str, str],
        khash: str,
        req: _Request,
    ) -> None:
        self.stream = stream
        self.gid = gid
        self.client_id = client_id
        self.headers = headers
        self.khash = khash
        self.req = req


class RpcHandler:
    """Serves one network's prefix; one instance per network."""

    limiter: Limiter
    pool: NodePool
    errors: ErrorCounter
    client_ip: ClientIP
    insight: InsightSink | None = None  # set at startup when insight is on
    filters: FilterService | None = None  # set at startup: the filter methods' answers

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
        # CPU per call does not balloon with concurrency. A request takes a slot
        # only once its whole body is read and its key has the right shape, so
        # a slow or keyless client holds nothing shared.
        self.slots = slots or asyncio.Semaphore(cfg.limits.max_in_flight)
        self.methods = network.methods
        self.metrics = metrics
        self.fail_open = cfg.redis.fail_open
        self.max_body = cfg.limits.max_body_bytes
        self.max_batch = cfg.limits.max_batch
        self.max_depth = cfg.limits.max_json_depth
        self._net_metrics = metrics.network(network.name)
        self._policies = {
            p.name: f"{p.burst};w={max(1, math.ceil(p.burst / p.rate))}" for p in cfg.plans
        }
        self._gid = 1  # the next id a node sees; the client's id never leaves the gateway
        self._cfg = cfg

    def bind(
        self, limiter: Limiter, pool: NodePool, errors: ErrorCounter, client_ip: ClientIP
    ) -> None:
        """Attach the resources made by the app's cleanup contexts (at startup)."""
        self.limiter = limiter
        self.pool = pool
        self.errors = errors
        self.client_ip = client_ip  # the app's one: same trusted proxies as the dashboard

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            response = await self._handle(request)
        except Exception:  # never a traceback to the client
            log.exception("internal error network=%s", self.network.name)
            response = error_reply(rpc.INTERNAL_ERROR)
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
            request.get(NOT_OFFERED, ""),
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """read -> parse -> key -> admit -> forward -> relay."""
        refused = self._check_http(request)
        if refused is not None:
            return refused
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        req = self._parse(body)
        key = rpc_key(request)
        if key is None:
            return self._request_error(rpc.UNAUTHORIZED, req)
        khash = key_hash(key)
        async with self.slots:  # only now: the body is whole and the key well formed
            admitted = await self._admit(request, khash, req)
            if isinstance(admitted, web.Response):
                return admitted
            answer = await self._forward(request, khash, req, admitted)
        if isinstance(answer, _Relay):  # a large answer: relayed without holding a slot
            return await self._relay(request, answer)
        return answer

    # -- the steps -------------------------------------------------------------
    def _check_http(self, request: web.Request) -> web.Response | None:
        """405 / 415 / 413 (declared length), and the CORS preflight."""
        method = request.method
        if method != hdrs.METH_POST:
            if method == hdrs.METH_OPTIONS:
                return web.Response(status=204, headers=PREFLIGHT_HEADERS)
            return error_reply(
                rpc.METHOD_NOT_ALLOWED, data="use POST", headers={hdrs.ALLOW: "POST, OPTIONS"}
            )
        ctype = request.headers.get(hdrs.CONTENT_TYPE)
        if ctype is not None:
            mime = ctype.partition(";")[0].strip().lower()
            if mime not in JSON_TYPES and not mime.endswith("+json"):
                return error_reply(
                    rpc.UNSUPPORTED_MEDIA_TYPE, data="Content-Type must be application/json"
                )
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._too_large()
        return None

    async def _read(self, request: web.Request) -> bytes | web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        except ConnectionError:  # client gone, or too slow (server.body_timeout_s)
            return error_reply(rpc.REQUEST_TIMEOUT, data="body incomplete")
        if len(body) > self.max_body:
            return self._too_large()
        return body

    def _parse(self, body: bytes) -> _Request:
        """Parse before the key check, so that even auth errors can echo the ids."""
        try:
            parsed: Any = rpc.parse_body(body)
        except rpc.ParseError:
            return _Request([], False, (rpc.PARSE_ERROR, None))
        if body.count(b"[") + body.count(b"{") > self.max_depth and rpc.json_too_deep(
            parsed, self.max_depth
        ):  # the count is a cheap upper bound of the depth
            return _Request(
                [], False, (rpc.INVALID_REQUEST, f"JSON nested deeper than {self.max_depth}")
            )
        methods = self.methods
        if type(parsed) is not list:
            return _Request([rpc.validate_call(parsed, methods)], False)
        if not parsed:
            return _Request([], True, (rpc.INVALID_REQUEST, "empty batch"))
        if len(parsed) > self.max_batch:
            reason = f"batch of {len(parsed)} calls exceeds the limit of {self.max_batch}"
            return _Request([], True, (rpc.INVALID_REQUEST, reason))
        return _Request([rpc.validate_call(obj, methods) for obj in parsed], True)

    async def _admit(
        self, request: web.Request, khash: str, req: _Request
    ) -> dict[str, str] | web.Response:
        """One Redis round trip: key, state, allowlists, quota, bucket, usage.

        Only validated methods are counted, weighed and checked against the
        key's method allowlist; every keyed request costs at least one
        compute unit, even one we answer ourselves. Returns the RateLimit
        headers of an admitted request, or the refusal.
        """
        counts: dict[str, int] = {}
        for call in req.calls:
            if call.error is None:
                counts[call.method] = counts.get(call.method, 0) + 1
        if len(counts) == 1:
            request[RPC_METHOD] = next(iter(counts))
        elif counts:
            request[RPC_METHOD] = "batch"
        else:
            refused = {c.method for c in req.calls if c.error is rpc.METHOD_NOT_FOUND}
            if len(refused) == 1:
                request[NOT_OFFERED] = refused.pop()
        try:
            decision = await self.limiter.admit(
                khash,
                max(1, len(req.calls)),
                counts,
                request.headers.get(hdrs.ORIGIN, ""),
                ip_bits(self.client_ip(request)),
            )
        except LimiterUnavailable:  # logged (rate-limited) by the Redis client itself
            mode = "open" if self.fail_open else "closed"
            self.metrics.redis_errors.labels(mode).inc()
            if not self.fail_open:
                return self._request_error(rpc.SERVICE_UNAVAILABLE, req)
            decision = Decision(Status.ADMITTED, "")
        request[KEY_ID] = decision.key_id
        req.plan = decision.plan
        if decision.key_id:  # an existing key: its calls count in request insight
            request[KEY_HASH] = khash
        if decision.status is not Status.ADMITTED:
            return self._refused(decision, req)
        return self._limit_headers(decision)

    async def _forward(
        self, request: web.Request, khash: str, req: _Request, headers: dict[str, str]
    ) -> web.Response | _Relay:
        """Send the canonical form of the valid calls; relay with the client's ids."""
        if req.error is not None:
            kind, reason = req.error
            return error_reply(kind, None, reason, headers)
        calls = req.calls
        self._guard_logs(req)
        if self.filters is not None and any(c.method in FILTER_METHODS for c in calls):
            refused = await self._answer_filters(request, khash, req, headers)
            if refused is not None:
                return refused
        forward = [c for c in calls if c.error is None]
        if forward and not req.is_batch and forward[0].has_id and forward[0].method in READS:
            return await self._forward_read(request, khash, req, headers)
        head = self.pool.intel.heads.head
        misses = self._batch_hits(forward, head) if req.is_batch else {}
        if misses or any(c.local is not None for c in forward):
            forward = [c for c in forward if c.local is None]
        if not forward:
            if not any(c.answered for c in calls):
                return _no_content(headers)
            return self._local_answer(req, headers)
        gid = self._next_gids(len(forward))
        out = rpc.encode_batch(forward, gid) if req.is_batch else rpc.encode_call(forward[0], gid)
        idempotent = not any(c.method in NON_IDEMPOTENT for c in forward)
        try:
            reply, node = await self.pool.forward_from(
                out,
                idempotent=idempotent,
                stream_over=None if req.is_batch else STREAM_OVER,
                hedge=all(c.method in READS for c in forward),
            )
        except UpstreamError as exc:
            self.errors.add(khash)
            kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
            return self._upstream_failed(kind, req, headers)
        if not any(c.answered for c in calls):
            if isinstance(reply, NodeStream):
                reply.close()
            return _no_content(headers)
        if isinstance(reply, NodeStream):
            return _Relay(reply, gid, calls[0].id, headers, khash, req)
        try:
            if req.is_batch:
                answered: list[tuple[rpc.Call, dict[str, Any]]] | None = [] if misses else None
                answer, is_error = rpc.restore_batch(reply, calls, gid, answered)
                if answered:
                    self._keep_batch(answered, misses, head, node)
            else:
                answer, is_error = rpc.restore_single(reply, gid, calls[0].id)
        except rpc.BadAnswer as exc:
            self.errors.add(khash)
            log.warning("bad node answer network=%s reason=%s", self.network.name, exc)
            return self._upstream_failed(rpc.UPSTREAM_UNAVAILABLE, req, headers)
        if is_error:
            self.errors.add(khash)
            request[REPLY_ERROR] = True  # request insight reads the code from the answer
        return _reply(answer, 200, headers)

    async def _answer_filters(
        self, request: web.Request, khash: str, req: _Request, headers: dict[str, str]
    ) -> web.Response | None:
        """Answer the filter methods here (gateway/filters), as ``call.local`` or errors.

        A single call whose node path failed gets its HTTP status (502/504);
        in a batch the error takes the call's place. A notification is run
        for its effect (uninstall) and then dropped like any refused one.
        """
        assert self.filters is not None
        for call in req.calls:
            if call.error is not None or call.method not in FILTER_METHODS:
                continue
            answer = await self.filters.answer(khash, req.plan, call.method, call.params)
            if isinstance(answer, bytes):
                if call.has_id:
                    call.local = orjson.dumps(answer_obj(answer, call.id))
                else:
                    call.error = rpc.INVALID_PARAMS  # answered nothing: not forwarded either
                continue
            call.error, call.reason = answer
            if call.has_id:
                self.errors.add(khash)
                request[REPLY_ERROR] = True
            if not req.is_batch and call.error.http_status != 200:
                return error_reply(call.error, call.id, call.reason, headers)
        return None

    def _next_gids(self, n: int) -> int:
        """The first of ``n`` consecutive gateway ids for the calls a node will see."""
        gid = self._gid
        self._gid = gid + n if gid < _MAX_GID else 1
        return gid

    def _guard_logs(self, req: _Request) -> None:
        """Refuse an ``eth_getLogs`` range over the plan's limit before any node sees it.

        The call is answered by us (-32602, the limit in ``error.data``); in
        a batch only that call. It was admitted and counted as usage: the
        work of checking it was done on the key's behalf.
        """
        limit = -1
        for call in req.calls:
            if call.error is None and call.method == "eth_getLogs":
                if limit < 0:
                    limit = self._cfg.max_logs_range(req.plan)
                data = check_logs_range(call.params, self.pool.intel.heads, limit)
                if data is not None:
                    call.error, call.reason = rpc.INVALID_PARAMS, data

    def _batch_hits(
        self, calls: list[rpc.Call], head: NetworkHead
    ) -> dict[int, tuple[bytes, Policy]]:
        """Answer a batch's cached reads locally (``call.local``); the cacheable misses.

        The misses are returned by ``id(call)`` with their key and policy, to
        be stored from the node's answer. No coalescing for batches.
        """
        cache = self.pool.intel.cache
        misses: dict[int, tuple[bytes, Policy]] = {}
        if cache is None:
            return misses
        for call in calls:
            method = call.method
            if not call.has_id or method not in READS or method == "eth_blockNumber":
                continue  # eth_blockNumber: only single calls are clamped to the head
            policy = classify(method, call.params, head)
            if policy.kind is Kind.NEVER:
                continue
            key = call_key(method, call.params)
            hit = cache.get(method, key, policy, head)
            if hit is not None:
                call.local = cached_answer(orjson.dumps(call.id), hit)
            else:
                misses[id(call)] = (key, policy)
        return misses

    def _keep_batch(
        self,
        answered: list[tuple[rpc.Call, dict[str, Any]]],
        misses: dict[int, tuple[bytes, Policy]],
        head: NetworkHead,
        node: Node,
    ) -> None:
        """Cache the results of a batch's cacheable calls from the node's (parsed) answer."""
        intel = self.pool.intel
        cache = intel.cache
        if cache is None:
            return
        node_head = intel.heads.node_head(node.name)
        for call, item in answered:
            miss = misses.get(id(call))
            if miss is None or "error" in item or "result" not in item:
                continue
            key, policy = miss
            cache.put(key, policy, head, orjson.dumps(item["result"]), node_head=node_head)

    async def _forward_read(
        self, request: web.Request, khash: str, req: _Request, headers: dict[str, str]
    ) -> web.Response | _Relay:
        """One allowlisted read: from the cache, or one node call shared by identical callers.

        Runs after admission, so a hit has passed the key check and the
        limiter and was counted as usage; it never reaches a node. The head
        is read once, so lookup, coalescing key and store agree on it.
        """
        call = req.calls[0]
        intel = self.pool.intel
        cache = intel.cache
        head = intel.heads.head
        method, params = call.method, call.params
        policy = classify(method, params, head)
        key = call_key(method, params)
        id_json = orjson.dumps(call.id)
        shared = intel.shared if cache is not None and _may_be_final(policy, head) else None
        if cache is not None:
            hit = cache.get(method, key, policy, head)
            if hit is None and shared is not None:
                hit = await shared.get(key)
                if hit is not None:
                    cache.put(key, policy, head, hit)
            if hit is not None:
                return _reply(cached_answer(id_json, hit), 200, headers)
        block = policy.block if policy.block is not None else -1
        owner = False

        async def flight() -> _Flight:
            nonlocal owner
            owner = True
            gid = self._next_gids(1)
            reply, node = await self.pool.forward_from(
                rpc.encode_call(call, gid), stream_over=STREAM_OVER, hedge=True, min_block=block
            )
            if isinstance(reply, NodeStream):
                return reply, gid, None
            return reply, gid, await self._keep(method, key, policy, head, reply, node)

        coalescer = intel.coalescer
        try:
            if coalescer is None:
                reply, gid, shown = await flight()
            else:
                reply, gid, shown = await coalescer.run((key, head.tag), flight)
                if isinstance(reply, NodeStream) and not owner:
                    # A streamed answer can be read once: its owner relays it,
                    # a caller that joined asks on its own.
                    reply, gid, shown = await flight()
        except UpstreamError as exc:
            self.errors.add(khash)
            kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
            return self._upstream_failed(kind, req, headers)
        if isinstance(reply, NodeStream):
            return _Relay(reply, gid, call.id, headers, khash, req)
        if shown is not None:
            return _reply(cached_answer(id_json, shown), 200, headers)
        try:
            body, is_error = rpc.restore_single(reply, gid, call.id)
        except rpc.BadAnswer as exc:
            self.errors.add(khash)
            log.warning("bad node answer network=%s reason=%s", self.network.name, exc)
            return self._upstream_failed(rpc.UPSTREAM_UNAVAILABLE, req, headers)
        if is_error:
            self.errors.add(khash)
            request[REPLY_ERROR] = True  # request insight reads the code from the answer
        return _reply(body, 200, headers)

    async def _keep(
        self, method: str, key: bytes, policy: Policy, head: NetworkHead, reply: bytes, node: Node
    ) -> bytes | None:
        """Cache a node's answer if its policy allows; for ``eth_blockNumber`` what to answer.

        Runs once per node call (inside the coalesced flight). An
        ``eth_blockNumber`` answer is clamped to the network head, so answers
        never decrease even when a lagging node served the call; the result
        bytes to answer with are returned then (None: relay the node's answer).
        """
        intel = self.pool.intel
        cache = intel.cache
        is_number = method == "eth_blockNumber"
        if (cache is None or policy.kind is Kind.NEVER) and not is_number:
            return None
        result = result_bytes(reply)
        if result is None:
            return None  # an error, or not an answer: never kept
        shown: bytes | None = None
        if is_number:
            try:
                number = int(orjson.loads(result), 16)
            except (TypeError, ValueError):
                return None
            clamped = intel.heads.observe_number(node.name, number)
            result = shown = b'"%s"' % hex(clamped).encode()
        if cache is not None and cache.put(
            key, policy, head, result, node_head=intel.heads.node_head(node.name)
        ):
            shared = intel.shared
            if shared is not None and _is_final(policy, head, result):
                await shared.put(key, result)
        return shown

    async def _relay(self, request: web.Request, relay: _Relay) -> web.StreamResponse:
        """Stream a large single answer with the client's id spliced into its head.

        Memory stays bounded: the node is read only as fast as the client
        takes the bytes (``resp.write`` waits for the socket to drain, the
        node stream pauses its socket when unread). An answer in another
        shape than geth's is buffered (up to ``limits.max_response_bytes``)
        and restored the slow way. Once the head has gone out, a node that
        fails (or runs past the cap) mid-answer can only be reported by
        cutting the client's connection; a client that goes away (or is
        dropped by ``server.write_timeout_s``) releases everything.
        """
        stream, req = relay.stream, relay.req
        head = b'{"jsonrpc":"2.0","id":%d,' % relay.gid
        resp: web.StreamResponse | None = None
        try:
            first = b""
            while len(first) <= len(head):
                chunk = await stream.read()
                if not chunk:
                    break
                first += chunk
            if not first.startswith(head):
                whole = first + await stream.read_all()
                answer, is_error = rpc.restore_single(whole, relay.gid, relay.client_id)
                if is_error:
                    self.errors.add(relay.khash)
                return _reply(answer, 200, relay.headers)
            if first.startswith(b'"error"', len(head)):
                self.errors.add(relay.khash)
            new_head = b'{"jsonrpc":"2.0","id":%s,' % orjson.dumps(relay.client_id)
            resp = web.StreamResponse(status=200, headers=relay.headers)
            resp.headers.update(CORS_HEADERS)
            resp.content_type = "application/json"
            if stream.length is not None:
                resp.content_length = stream.length - len(head) + len(new_head)
            await resp.prepare(request)
            await resp.write(new_head + first[len(head) :])
            del first
            while chunk := await stream.read():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        except UpstreamError as exc:
            self.errors.add(relay.khash)
            if resp is None:  # nothing sent yet: a proper error answer
                kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
                return self._upstream_failed(kind, req, relay.headers)
            log.warning("node failed mid-answer network=%s error=%s", self.network.name, exc)
            if request.transport is not None:
                request.transport.abort()
            return resp
        except rpc.BadAnswer as exc:
            self.errors.add(relay.khash)
            log.warning("bad node answer network=%s reason=%s", self.network.name, exc)
            return self._upstream_failed(rpc.UPSTREAM_UNAVAILABLE, req, relay.headers)
        except ConnectionError:  # the client went away, or was dropped for not reading
            return resp if resp is not None else web.Response(status=499)
        finally:
            stream.close()  # no-op once read to the end; drops a half-read node answer

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
        return error_reply(rpc.BODY_TOO_LARGE, data=f"body exceeds {self.max_body} bytes")

    @staticmethod
    def _request_error(
        kind: rpc.ErrorKind,
        req: _Request,
        headers: dict[str, str] | None = None,
        data: Any = None,
    ) -> web.Response:
        """A request-level failure: one error per call of a batch, each with its id."""
        calls = req.calls
        if req.error is not None or not calls:
            return error_reply(kind, None, data, headers)
        if not req.is_batch:
            return error_reply(kind, calls[0].id, data, headers)
        items = [rpc.error_obj(kind, c.id, data) for c in calls]
        return _reply(orjson.dumps(items), kind.http_status, headers)

    def _refused(self, decision: Decision, req: _Request) -> web.Response:
        kind = _STATUS_ERROR[decision.status]
        if kind is not rpc.RATE_LIMITED:
            return self._request_error(kind, req)
        self._net_metrics.rate_limited()
        retry_ms = max(1, decision.retry_ms)
        data: dict[str, Any] = {"retry_after_ms": retry_ms}
        reason = _REFUSAL_REASON.get(decision.status)
        if reason is not None:
            data["reason"] = reason
        if decision.status is Status.TOO_EXPENSIVE:
            retry_ms = data["retry_after_ms"] = 1000
        headers = self._limit_headers(decision)
        headers[hdrs.RETRY_AFTER] = str(-(-retry_ms // 1000))
        return self._request_error(kind, req, headers, data)

    @staticmethod
    def _local_answer(req: _Request, headers: dict[str, str]) -> web.Response:
        """Answers made without a node: our errors, and cached answers in a batch."""
        items: list[Any] = [
            orjson.Fragment(c.local) if c.local is not None else rpc.call_error_obj(c)
            for c in req.calls
            if c.answered
        ]
        body = orjson.dumps(items if req.is_batch else items[0])
        return _reply(body, 200, headers)

    @staticmethod
    def _upstream_failed(
        kind: rpc.ErrorKind, req: _Request, headers: dict[str, str]
    ) -> web.Response:
        if not req.is_batch:
            return error_reply(kind, req.calls[0].id, None, headers)
        items = [
            orjson.Fragment(c.local)
            if c.local is not None
            else rpc.call_error_obj(c)
            if c.error is not None
            else rpc.error_obj(kind, c.id)
            for c in req.calls
            if c.answered
        ]
        return _reply(orjson.dumps(items), kind.http_status, headers)


# What one node call for a read gives every caller that shared it: the node's
# answer (bytes, or a stream only its owner may read), the gateway id it
# carries, and the result to answer with instead (a clamped eth_blockNumber).
_Flight = tuple[bytes | NodeStream, int, bytes | None]


def _may_be_final(policy: Policy, head: NetworkHead) -> bool:
    """Whether the answer may sit in the forever slot (the only one the Redis tier holds)."""
    kind = policy.kind
    if kind is Kind.FOREVER:
        return True
    if kind is not Kind.IF_FINAL:
        return False
    return policy.block is None or policy.block <= head.finalized


def _is_final(policy: Policy, head: NetworkHead, result: bytes) -> bool:
    """Whether a stored answer went to the forever slot (FOREVER, or final by its block)."""
    if not _may_be_final(policy, head):
        return False
    if policy.kind is Kind.FOREVER or policy.block is not None:
        return True
    block = answer_block(result)
    return block is not None and block <= head.finalized


def error_reply(
    kind: rpc.ErrorKind,
    id_: Any = None,
    data: Any = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """The one way an error leaves the handler: its body and HTTP status from the catalogue."""
    return _reply(rpc.error_body(kind, id_, data), kind.http_status, headers)


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
    match = request.match_info
    if "tail" in match:  # /bsc/ or /bsc/KEY/extra: never a key, whatever the header says
        return None
    key = extract_key(match.get("key", ""), request.headers.get(hdrs.AUTHORIZATION))
    if key is BAD_KEY or not key or not well_formed(key):
        return None
    return key
