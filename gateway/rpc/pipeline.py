"""The one call pipeline every transport feeds: bytes in, an ``Answer`` out.

validate -> admit (one Redis round trip: key, allowlists, quota, bucket,
usage) -> ``eth_getLogs`` guard -> local methods | cache / coalesce / head
clamp / route by block -> forward -> restore the client's ids -> a bounded
relay for a large answer. HTTP single calls, HTTP batches and WebSocket
frames (single and batch) all come through ``Pipeline.run``; the adapters
(``rpc.http``, ``ws.upgrade``) only read bytes in and write bytes out.

Nothing reaches a node before the key and the limit have passed, and what
reaches it is rebuilt from the validated method and params with a
gateway-chosen id (``protocol.encode_call``): Go nodes match JSON keys
case-insensitively and take the last one, so the client's bytes could name
any method. The client's id goes back byte for byte (``rpc.ids``).

It stays whole because it is the call's steps in their order, each step a
call into the module that owns it; reading it top to bottom is reading the
path of a call, and ``run_locals`` (the local-methods step) sits with them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import orjson

from gateway.config import Config, NetworkConfig
from gateway.limits.limiter import Decision, Limiter, LimiterUnavailable, Status
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R
from gateway.rpc import traced
from gateway.rpc.forward import forward_calls
from gateway.rpc.guard import LogsGuard
from gateway.rpc.ids import keep_raw_ids
from gateway.rpc.insightrecord import record_answer
from gateway.rpc.localmethods import (
    TRANSPORTS,
    After,
    Caller,
    CallError,
    ForwardAs,
    LocalContext,
    LocalMethods,
)
from gateway.rpc.reads import Reads
from gateway.rpc.refusals import REFUSED_ERROR, refuse_calls, refused_answer
from gateway.rpc.served import served_headers
from gateway.rpc.sinks import CallInsight, ErrorCounts
from gateway.rpc.waiting import AdmissionWaits
from gateway.telemetry.metrics import Metrics
from gateway.upstream.pool import NodePool

if TYPE_CHECKING:
    from gateway.telemetry.tracer import Tracer

__all__ = ["REFUSED_ERROR", "Caller", "Pipeline"]

_NONE: tuple[After, ...] = ()  # no local follow-ups
_MAX_GID = 1 << 31  # gateway ids wrap here: small, and exact in every JSON decoder


class Pipeline:
    """One network's steps; one instance per network, shared by its transports."""

    def __init__(
        self,
        cfg: Config,
        network: NetworkConfig,
        metrics: Metrics,
        limiter: Limiter,
        pool: NodePool,
        errors: ErrorCounts,
        *,
        slots: asyncio.Semaphore | None = None,
        local: LocalMethods | None = None,
        insight: CallInsight | None = None,
        waits: AdmissionWaits | None = None,
    ) -> None:
        """Built whole by the app's one RPC cleanup context, once the resources exist."""
        self.network = network
        self.cfg = cfg
        # Shared by every network's pipeline: at most limits.max_in_flight calls
        # are worked on at once per worker; the rest wait in arrival order, so
        # CPU per call does not balloon with concurrency. A request takes a slot
        # only once its whole body is read and its key has the right shape.
        self.slots = slots or asyncio.Semaphore(cfg.limits.max_in_flight)
        self.local = local if local is not None else LocalMethods()
        self.metrics = metrics
        self.net_metrics = metrics.network(network.name)
        self.fail_open = cfg.redis.fail_open
        self.max_batch = cfg.limits.max_batch
        self.max_depth = cfg.limits.max_json_depth
        self.limiter = limiter
        # Shared by every network's pipeline: a key's waiting calls are counted per process.
        self.waits = waits or AdmissionWaits(cfg, metrics.admission_wait)
        self.pool = pool
        self.errors = errors
        self.insight = insight  # None: request insight is off
        self.guard = LogsGuard(cfg, pool.intel.heads)
        self.reads = Reads(pool, self.next_gids, cfg.limits.max_buffered_answer_bytes)
        self._policies = {
            p.name: f"{p.burst};w={max(1, math.ceil(p.burst / p.rate))}" for p in cfg.plans
        }
        self.tracer: Tracer | None = None  # None: tracing is off (trace_with)
        self._gid = 1  # the next id a node sees; the client's id never leaves the gateway
        self._local_version = -1
        self._methods: dict[str, frozenset[str]] = {}

    def next_gids(self, n: int) -> int:
        """The first of ``n`` consecutive gateway ids for the calls a node will see."""
        gid = self._gid
        self._gid = gid + n if gid < _MAX_GID else 1
        return gid

    def methods(self, transport: str) -> frozenset[str]:
        """The network's methods plus the local methods of ``transport``."""
        local = self.local
        if local.version != self._local_version:
            self._methods = {t: self.network.methods | local.names(t) for t in TRANSPORTS}
            self._local_version = local.version
        return self._methods[transport]

    def trace_with(self, tracer: Tracer | None) -> None:
        """Trace every call from now on (None: stop): this pipeline's steps, its log
        splits and its pool's node calls (the tracing plug-in, ``gateway.tracing``)."""
        self.tracer = tracer
        self.reads.logs.tracer = tracer
        self.pool.tracer = tracer

    # -- the steps -------------------------------------------------------------
    def run(self, body: bytes, caller: Caller) -> Coroutine[Any, Any, R.Answer]:
        """Validate, admit, guard, answer: every transport's one entry (awaited).

        With tracing on the same steps run inside the call's request span
        (``rpc.traced``) when the call is drawn; off, nothing but this ``None``
        check is added.
        """
        tracer = self.tracer
        if tracer is None or not tracer.sampled(caller.trace):
            return self._run(body, caller)
        return traced.run(tracer, self._run, body, caller, self.network.name)

    async def _run(self, body: bytes, caller: Caller) -> R.Answer:
        req = self.parse(body, caller.transport)
        khash = caller.khash
        if khash is None:
            return R.request_error(rpc.UNAUTHORIZED, req)
        method = _label(req)
        self.guard.before(req, khash)
        slots = self.slots
        # Only now: the body is whole and the key well formed. acquire/release
        # rather than ``async with``: two coroutine layers fewer per call.
        await slots.acquire()
        try:
            admitted = await self._admit(caller, khash, req)
            if isinstance(admitted, R.Answer):
                answer = admitted
            else:
                answer = await self._answer(caller, khash, req, self.limit_headers(admitted))
            answer.key_id = admitted.key_id
            answer.known_key = bool(admitted.key_id)
        finally:
            slots.release()
        answer.method = method
        if req.is_batch:
            answer.calls = req.calls
        elif req.calls:
            answer.note = req.calls[0].note
        answer.headers.update(served_headers(req))  # X-Gateway-Cache / X-Gateway-Node
        if method == "-" and req.calls:
            answer.not_offered = R.not_offered(req)
        return answer

    def parse(self, body: bytes, transport: str = "http") -> R.ParsedRequest:
        """Parse before the key check, so that even auth errors can echo the ids."""
        try:
            parsed: Any = rpc.parse_body(body)
        except rpc.ParseError:
            return R.ParsedRequest([], False, (rpc.PARSE_ERROR, None))
        if body.count(b"[") + body.count(b"{") > self.max_depth and rpc.json_too_deep(
            parsed, self.max_depth
        ):  # the count is a cheap upper bound of the depth
            reason = f"JSON nested deeper than {self.max_depth}"
            return R.ParsedRequest([], False, (rpc.INVALID_REQUEST, reason))
        methods = self.methods(transport)
        if type(parsed) is not list:
            req = R.ParsedRequest([rpc.validate_call(parsed, methods)], False)
        elif not parsed:
            return R.ParsedRequest([], True, (rpc.INVALID_REQUEST, "empty batch"))
        elif len(parsed) > self.max_batch:
            reason = f"a batch holds at most {self.max_batch} calls, this one {len(parsed)}"
            return R.ParsedRequest([], True, (rpc.INVALID_REQUEST, reason))
        else:
            req = R.ParsedRequest([rpc.validate_call(obj, methods) for obj in parsed], True)
        if b"\\" in body:  # an escaped string id would be re-spelled: keep the sent bytes
            keep_raw_ids(body, parsed, req.calls, req.is_batch)
        return req

    async def _admit(self, caller: Caller, khash: str, req: R.ParsedRequest) -> Decision | R.Answer:
        """One Redis round trip: key, state, allowlists, quota, bucket, usage.

        Only validated methods are counted, weighed and checked against the
        key's method allowlist; every keyed request costs at least one
        compute unit, even one we answer ourselves (a guard refusal among
        them). Returns the decision of an admitted request, else the refusal.
        """
        counts: dict[str, int] = {}
        for call in req.calls:
            if call.error is None:
                counts[call.method] = counts.get(call.method, 0) + 1
        per_call: list[str] | tuple[()] = ()
        if req.is_batch and sum(counts.values()) > 1:  # admitted call by call
            per_call = [c.method for c in req.calls if c.error is None]
        calls = max(1, len(req.calls))
        return await self._decide(caller, khash, req, calls, counts, per_call, in_slot=True)

    async def admit_socket(self, caller: Caller) -> Decision | R.Answer:
        """A WebSocket upgrade's admission: the key check with no calls (0 units).

        The same round trip, failure policy, ``gateway_redis_errors`` count
        and refusal as an HTTP request's (``_admit``), so a refused upgrade is
        answered exactly as a refused POST: a 429 with its ``Retry-After``,
        RateLimit headers and ``error.data.reason``, with ``"id": null``.
        """
        req = R.ParsedRequest([], False)
        if caller.khash is None:
            admitted: Decision | R.Answer = R.request_error(rpc.UNAUTHORIZED, req)
        else:
            admitted = await self._decide(caller, caller.khash, req, 0, {}, ())
        if isinstance(admitted, R.Answer):
            admitted.headers.update(served_headers(req))  # as run() adds them
        return admitted

    def redis_failed(self) -> bool:
        """Count one Redis round trip that failed under the failure policy; True: fail open."""
        self.metrics.redis_errors.labels("open" if self.fail_open else "closed").inc()
        return self.fail_open

    async def _decide(
        self,
        caller: Caller,
        khash: str,
        req: R.ParsedRequest,
        n: int,
        counts: dict[str, int],
        per_call: list[str] | tuple[()],
        *,
        in_slot: bool = False,
    ) -> Decision | R.Answer:
        """The limiter's decision, after a short wait where the bucket will soon hold it
        (``in_slot``: the request holds an in-flight slot, given back while it waits)."""
        admit = self.limiter.admit(
            khash, n, counts, caller.origin, caller.ip_bits, per_call=per_call
        )
        tracer = self.tracer
        try:
            decision = await (admit if tracer is None else traced.admission(tracer, admit, n))
            if decision.status is not Status.ADMITTED or decision.calls:  # may wait (waiting.py)
                decision = await self.waits.after(
                    decision,
                    self.limiter,
                    self.network.name,
                    khash,
                    n,
                    counts,
                    caller.origin,
                    caller.ip_bits,
                    per_call,
                    self.slots if in_slot else None,
                )
        except LimiterUnavailable:  # logged (rate-limited) by the Redis client itself
            if not self.redis_failed():
                return R.request_error(rpc.SERVICE_UNAVAILABLE, req)
            decision = Decision(Status.ADMITTED, "")
        req.plan = decision.plan
        if decision.calls:
            refuse_calls(req, decision)
        if decision.status is not Status.ADMITTED:
            refused = self._refused(decision, req, caller)
            refused.key_id = decision.key_id  # run() reads it (known_key) as for any answer
            return refused
        if decision.refused_calls():
            self.net_metrics.rate_limited()
        self.guard.learned(khash, decision.plan)
        return decision

    async def _answer(
        self, caller: Caller, khash: str, req: R.ParsedRequest, headers: dict[str, str]
    ) -> R.Answer:
        """After admission: the request's error, or its calls answered."""
        if req.error is not None:
            kind, reason = req.error
            return R.error_answer(kind, None, reason, headers)
        self.guard.after(req)
        names = self.local.names(caller.transport)
        followups = (
            await run_locals(self.local, self.reads, caller, req)
            if names and _calls_local(names, req.calls)
            else _NONE
        )
        try:
            answer = await forward_calls(self, khash, req, headers)
        except BaseException:
            for fn in followups:
                fn(False)
            raise
        if followups:
            answer.followups = followups
        return answer

    def record(self, caller: Caller, answer: R.Answer, status: int, elapsed: float) -> None:
        """One answered request of an existing key into this worker's insight sums (no I/O)."""
        if self.insight is not None:
            record_answer(self.insight, caller, answer, status, elapsed)

    def limit_headers(self, decision: Decision) -> dict[str, str]:
        """IETF RateLimit headers (draft-ietf-httpapi-ratelimit-headers-07 form)."""
        policy = self._policies.get(decision.plan)
        if policy is None:
            return {}
        return {
            "RateLimit-Policy": policy,
            "RateLimit": f"limit={decision.limit}, remaining={decision.remaining}, "
            f"reset={decision.reset_s}",
        }

    def _refused(self, decision: Decision, req: R.ParsedRequest, caller: Caller) -> R.Answer:
        if REFUSED_ERROR[decision.status] is rpc.RATE_LIMITED:
            self.net_metrics.rate_limited()
        headers = self.limit_headers(decision)
        return refused_answer(decision, req, headers, caller.origin, caller.ip)


def _label(req: R.ParsedRequest) -> str:
    """The metrics label: the one method the request calls, "batch", or "-"."""
    calls = req.calls
    if len(calls) == 1:
        return calls[0].method if calls[0].error is None else "-"
    methods = {c.method for c in calls if c.error is None}
    if len(methods) == 1:
        return methods.pop()
    return "batch" if methods else "-"


def _calls_local(names: frozenset[str], calls: list[rpc.Call]) -> bool:
    """Whether a valid call of ``calls`` names a local method (``run_locals`` has work)."""
    # a loop, not any(): no generator frame per request on the hot path
    for call in calls:  # noqa: SIM110
        if call.error is None and call.method in names:
            return True
    return False


async def run_locals(
    local: LocalMethods, reads: Reads, caller: Caller, req: R.ParsedRequest
) -> list[After]:
    """Answer the local calls of ``req`` in place; the follow-ups their handlers asked for.

    Each answered call gets its whole answer in ``call.local`` (the batch and
    single-answer code then treat it like a cache hit); a local notification
    runs and drops out of the request (it has no place in the answer). A
    handler answering ``ForwardAs`` has its call rewritten to that read and
    forwarded with the others. A lone call's refusal sets the request's HTTP
    status (``CallError.status``).
    """
    transport = caller.transport
    names = local.names(transport)
    if not names or not any(c.error is None and c.method in names for c in req.calls):
        return []
    ctx = LocalContext(caller, req.plan, reads)
    keep = []
    try:
        for call in req.calls:
            handler = local.get(call.method, transport) if call.error is None else None
            if handler is None:
                keep.append(call)
                continue
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": call.id}
            try:
                result = await handler(call, ctx)
                if isinstance(result, ForwardAs):  # a read the node answers, relayed
                    call.method, call.params = result.method, result.params
                    keep.append(call)
                    continue
                answer["result"] = result
            except CallError as exc:
                answer["error"] = exc.obj()
                call.code = exc.code
                if not req.is_batch:
                    req.status = exc.status
                    req.headers = exc.headers
            if call.has_id:
                call.local = orjson.dumps(answer)
                keep.append(call)
    except BaseException:
        for fn in ctx.followups:
            fn(False)
        raise
    req.calls = keep
    return ctx.followups
