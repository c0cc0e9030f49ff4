"""``eth_sendRawTransaction`` and ``eth_sendBundle`` as local methods of a network's pipeline.

The pipeline has validated the call and admitted it against the key's plan
(at the method's weight) before it gets here. Then, before any node or
endpoint sees a byte:

1. the transaction is decoded and its signature and chain checked
   (``tx.codec``): a refusal answers -32000 in geth's words;
2. its sender's bucket is taken (``tx_per_sender_rate``, shared by every
   key and process): over it answers 429 naming the sender limit;
3. the route is chosen: the stricter of the plan's ``private_tx`` and the
   key's own choice (``tx.keymode``). ``off``: every public node in service
   at once (``tx_broadcast = "all"``) or one like any call (``"one"``).
   ``on`` / ``fallback``: every private endpoint of the network and no
   public node; when none of them answers, ``on`` is 502 and ``fallback``
   goes on to the public nodes.

The first acceptance answers with the transaction's hash (``tx.routes``
judges what counts); the sends still in flight finish in the background,
and the transaction log entry (hash, route, who accepted) is written once
all have. ``eth_sendBundle`` (registered only where private endpoints
exist) checks every transaction the same way, takes the key's bundle
bucket (the plan's ``bundle_rate``) and is fanned out to every endpoint.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.config import NetworkConfig, PlanConfig
from gateway.limits.limiter import LimiterUnavailable
from gateway.redis import keyspace as ks
from gateway.rpc.localmethods import CallError, LocalContext, LocalMethods
from gateway.rpc.pipeline import Pipeline
from gateway.rpc.protocol import Call
from gateway.tx.bucket import Buckets
from gateway.tx.checks import bundle_param, invalid, raw_param
from gateway.tx.keymode import KeyModes, stricter
from gateway.tx.routes import Fanned, FanOut, Result, Target, Verdict
from gateway.tx.targets import PublicNodes
from gateway.tx.txlog import TxLog

SEND_RAW = "eth_sendRawTransaction"
SEND_BUNDLE = "eth_sendBundle"
PUBLIC, PRIVATE, FALLBACK = "public", "private", "private, then public"


class TxMethods:
    """One network's transaction handlers; ``register`` adds them to its pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        private: list[Target],
        public: PublicNodes,
        modes: KeyModes,
        buckets: Buckets,
        txlog: TxLog,
        counter: Any,  # gateway_transactions_total
        fan: FanOut,
    ) -> None:
        self.pipeline = pipeline
        net: NetworkConfig = pipeline.network
        self.network = net.name
        self.chain_id = net.chain_id
        self.net = net
        self.private = private
        self.public = public
        self.modes = modes
        self.buckets = buckets
        self.txlog = txlog
        self.counter = counter
        self.fan = fan
        self.prefix = pipeline.cfg.redis.prefix
        self.fail_open = pipeline.cfg.redis.fail_open

    def register(self, local: LocalMethods, offered: Collection[str]) -> None:
        if SEND_RAW in offered:
            local.add(SEND_RAW, self.send_raw)
        if self.private:
            local.add(SEND_BUNDLE, self.send_bundle)

    # -- eth_sendRawTransaction ----------------------------------------------------
    async def send_raw(self, call: Call, ctx: LocalContext) -> Any:
        khash = ctx.caller.khash
        assert khash is not None  # only an admitted call reaches a local method
        try:
            raw_hex, tx = raw_param(call.params, self.chain_id)
        except CallError as exc:
            self._count(SEND_RAW, "-", "invalid" if invalid(exc) else "failed", khash)
            raise
        await self._sender_limit({tx.sender: 1}, khash, SEND_RAW)
        mode = stricter(self._plan_mode(ctx.plan), await self._key_mode(khash))
        body = self._body(SEND_RAW, [raw_hex])
        route = PUBLIC
        if mode != "off":
            route = PRIVATE
            fanned = await self.fan.fan_out(self.private, body)
            if fanned.first is None and mode == "fallback" and _all_failed(fanned.results):
                route = FALLBACK
                fanned = await self.fan.fan_out(self.public.targets(), body)
        else:
            fanned = await self.fan.fan_out(self.public.targets(), body)
        if fanned.first is None and route != PRIVATE:
            await self._nonce_low_check(fanned, tx.hash)
        self._log_when_settled(fanned, khash, SEND_RAW, tx.hash, tx.sender, route)
        if fanned.first is not None:
            self._count(SEND_RAW, route, "accepted", khash)
            _served_by(call, fanned.first.target)
            return tx.hash
        return self._refusal(fanned.results, SEND_RAW, route, khash, private=route == PRIVATE)

    # -- eth_sendBundle -------------------------------------------------------------
    async def send_bundle(self, call: Call, ctx: LocalContext) -> Any:
        khash = ctx.caller.khash
        assert khash is not None
        try:
            bundle, txs = bundle_param(call.params, self.chain_id)
        except CallError as exc:
            self._count(SEND_BUNDLE, PRIVATE, "invalid" if invalid(exc) else "failed", khash)
            raise
        plan = self._plan(ctx.plan)
        if plan is not None:
            key = ks.bundle_bucket(self.prefix, khash)
            wait = await self._take(key, plan.bundle_rate, plan.bundle_burst, 1)
            if wait:
                self._count(SEND_BUNDLE, PRIVATE, "limited", khash)
                raise _limited(
                    "the key's eth_sendBundle rate reached (its plan's bundle_rate)", wait
                )
        senders: dict[str, int] = {}
        for tx in txs:
            senders[tx.sender] = senders.get(tx.sender, 0) + 1
        await self._sender_limit(senders, khash, SEND_BUNDLE)
        fanned = await self.fan.fan_out(self.private, self._body(SEND_BUNDLE, [bundle]))
        hashes = ",".join(tx.hash for tx in txs)
        self._log_when_settled(fanned, khash, SEND_BUNDLE, hashes, txs[0].sender, PRIVATE)
        if fanned.first is not None:
            self._count(SEND_BUNDLE, PRIVATE, "accepted", khash)
            _served_by(call, fanned.first.target)
            return fanned.first.answer
        return self._refusal(fanned.results, SEND_BUNDLE, PRIVATE, khash, private=True)

    # -- parts ----------------------------------------------------------------------
    def _body(self, method: str, params: list[Any]) -> bytes:
        gid = self.pipeline.next_gids(1)
        return orjson.dumps({"jsonrpc": "2.0", "id": gid, "method": method, "params": params})

    def _plan(self, name: str) -> PlanConfig | None:
        for plan in self.pipeline.cfg.plans:
            if plan.name == name:
                return plan
        return None

    def _plan_mode(self, name: str) -> str:
        plan = self._plan(name)
        return "off" if plan is None else str(plan.private_tx)

    async def _key_mode(self, khash: str) -> str:
        try:
            return await self.modes.mode(khash)
        except Exception as exc:  # Redis could not say: the failure policy decides
            if self.fail_open:
                return ""
            raise _unavailable() from exc

    async def _take(self, key: str, rate: float, burst: int, cost: int) -> int:
        try:
            return await self.buckets.take(key, rate, burst, cost)
        except LimiterUnavailable:
            if self.fail_open:
                return 0
            raise _unavailable() from None

    async def _sender_limit(self, senders: dict[str, int], khash: str, method: str) -> None:
        rate, burst = self.net.tx_per_sender_rate, self.net.tx_per_sender_burst
        if rate <= 0:
            return
        for sender, n in senders.items():
            key = ks.sender_bucket(self.prefix, self.network, sender)
            wait = await self._take(key, rate, burst, n)
            if wait:
                self._count(method, "-", "sender_limited", khash)
                reason = (
                    f"the sender's transaction rate reached (sender limit: {_fmt(rate)} "
                    f"per second per sender, burst {burst}): {sender}"
                )
                raise _limited(reason, wait)

    async def _nonce_low_check(self, fanned: Fanned, tx_hash: str) -> None:
        """ "nonce too low" counts as accepted once a node returns the transaction by hash."""
        if not any(r.verdict is Verdict.NONCE_LOW for r in fanned.results):
            return
        found = await self.public.find(self._body("eth_getTransactionByHash", [tx_hash]))
        if found is not None:
            fanned.first = Result(found, Verdict.ACCEPTED)

    def _refusal(
        self, results: list[Result], method: str, route: str, khash: str, *, private: bool
    ) -> Any:
        for verdict in (Verdict.REJECTED, Verdict.NONCE_LOW):
            for res in results:
                if res.verdict is verdict and res.error is not None:
                    self.pipeline.errors.answered(khash)  # the node's answer, not a failure
                    self._count(method, route, "rejected", khash)
                    err = res.error
                    code = err.get("code")
                    code = code if isinstance(code, int) else -32000
                    raise CallError(code, str(err.get("message", "")), err.get("data"))
        self.pipeline.errors.add(khash)  # no node answered: an upstream failure
        self._count(method, route, "failed", khash)
        timeout = bool(results) and all(r.timeout for r in results)
        if private:
            reason = (
                "every private endpoint failed"
                if results
                else "no private endpoint is configured on this network"
            )
        else:
            reason = "no upstream node answered" if results else "no upstream node in service"
        if timeout:
            raise CallError(-32603, "Upstream timeout", {"reason": reason}, status=504)
        raise CallError(-32603, "Upstream unavailable", {"reason": reason}, status=502)

    def _log_when_settled(
        self, fanned: Fanned, khash: str, method: str, tx_hash: str, sender: str, route: str
    ) -> None:
        def write(done: asyncio.Future[list[Result]]) -> None:
            results = [] if done.cancelled() else done.result()
            accepted = [r.target for r in results if r.verdict is Verdict.ACCEPTED]
            if fanned.first is not None and fanned.first.target not in accepted:
                accepted.append(fanned.first.target)
            outcome = "accepted" if accepted else "not accepted"
            reason = "" if accepted else _why_not(results)
            self.txlog.add(khash, method, tx_hash, sender, route, accepted, outcome, reason)

        fanned.settled.add_done_callback(write)

    def _count(self, method: str, route: str, outcome: str, khash: str) -> None:
        self.counter.labels(self.network, method, route, outcome).inc()


def _served_by(call: Call, target: str) -> None:
    """``X-Gateway-Node`` names who took the send (not ``gateway``): a node's name, or a
    private endpoint's host (its URL may carry a credential in its path; the host not)."""
    name = (urlsplit(target).hostname or "private") if "://" in target else target
    call.served, call.node = "miss", name


def _why_not(results: list[Result]) -> str:
    """The key's log's reason for a transaction nobody took: a node's own words if one
    refused it ("nonce too low"), else why none answered."""
    for res in results:
        if res.error is not None and res.error.get("message"):
            return f"{res.target}: {str(res.error['message'])[:200]}"
    if any(r.timeout for r in results):
        return "no node answered in time"
    return "no node answered" if results else "no node in service"


def _all_failed(results: list[Result]) -> bool:
    return all(r.verdict is Verdict.FAILED for r in results)


def _limited(reason: str, wait_ms: int) -> CallError:
    data = {"reason": reason, "retry_after_ms": wait_ms}
    headers = {"Retry-After": str(max(1, math.ceil(wait_ms / 1000)))}
    return CallError(-32005, "Rate limit exceeded", data, status=429, headers=headers)


def _unavailable() -> CallError:
    return CallError(-32603, "Service unavailable", status=503)


def _fmt(rate: float) -> str:
    return str(int(rate)) if rate == int(rate) else repr(rate)
