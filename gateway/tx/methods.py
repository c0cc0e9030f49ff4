"""The methods that carry a raw transaction, as local methods of a network's pipeline.

``eth_sendRawTransaction``, BSC's ``eth_sendRawTransactionConditional``,
``eth_sendPrivateTransaction`` and ``eth_sendBundle`` all take this path;
none of them can reach a node or a builder any other way (config refuses
them in ``extra_methods``). The pipeline has validated the call and
admitted it against the key's plan (at the method's weight) before it
gets here. Then, before any node or endpoint sees a byte:

1. each transaction is checked (``tx.checks``): its size (geth's 128 KiB),
   then decoded, its signature and chain checked; a bundle's count
   (``tx_bundle_max``), its transactions decoded one at a time with a yield
   between two; a refusal answers -32000 in geth's words;
2. its senders' buckets are taken (``tx_per_sender_rate``, shared by every
   key and process), every transaction of a bundle counted as a raw send
   is, all senders in one Redis call: over it answers 429 naming the
   sender limit;
3. the route is chosen: the stricter of the plan's ``private_tx`` and the
   key's own choice (``tx.keymode``); ``eth_sendPrivateTransaction`` and
   bundles always go private. ``off``: every public node in service at once
   (``tx_broadcast = "all"``) or one like any call (``"one"``). ``on`` /
   ``fallback``: every private endpoint of the network and no public node;
   when none of them answers, ``on`` is 502 and ``fallback`` goes on to the
   public nodes.

The first acceptance answers with the transaction's hash (``tx.routes``
judges what counts); the sends still in flight finish in the background,
and the transaction log entry (hash, route, who accepted) is written once
all have. A call no endpoint accepted carries its hash and route into the
key's request log (``Call.note``). A transaction a private endpoint took is
handed to the network's ``Tracker`` (``tx.tracking``), and until it lands
the key's ``eth_getTransactionByHash`` answers it as pending.

It stays whole because the handlers share each step (check, limit, route,
follow) and the order of those steps is what the module promises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.config import NetworkConfig, PlanConfig
from gateway.rpc.errors import UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE
from gateway.rpc.localmethods import CallError, ForwardAs, LocalContext, LocalMethods
from gateway.rpc.pipeline import Pipeline
from gateway.rpc.protocol import Call
from gateway.tx import checks
from gateway.tx.codec import DecodedTx
from gateway.tx.dialects import answer_of
from gateway.tx.keymode import KeyModes, stricter
from gateway.tx.routes import Fanned, FanOut, Message, Result, Target, Verdict
from gateway.tx.senders import TxLimits, unavailable
from gateway.tx.targets import PublicNodes
from gateway.tx.tracking import Tracker
from gateway.tx.txlog import TxLog

SEND_RAW = "eth_sendRawTransaction"
SEND_CONDITIONAL = "eth_sendRawTransactionConditional"
SEND_PRIVATE = "eth_sendPrivateTransaction"
SEND_BUNDLE = "eth_sendBundle"
GET_BY_HASH = "eth_getTransactionByHash"
PUBLIC, PRIVATE, FALLBACK = "public", "private", "private, then public"


class TxMethods:
    """One network's transaction handlers; ``register`` adds them to its pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        private: list[Target],
        public: PublicNodes,
        modes: KeyModes,
        limits: TxLimits,
        txlog: TxLog,
        counter: Any,  # gateway_transactions_total
        fan: FanOut,
        tracker: Tracker | None = None,
    ) -> None:
        self.pipeline = pipeline
        net: NetworkConfig = pipeline.network
        self.network = net.name
        self.chain_id = net.chain_id
        self.net = net
        self.private = private
        self.public = public
        self.modes = modes
        self.limits = limits
        self.txlog = txlog
        self.counter = counter
        self.fan = fan
        self.tracker = tracker
        self.sent_privately: set[str] = set()  # keys whose lookups may find a pending one
        self.fail_open = pipeline.cfg.redis.fail_open

    def register(self, local: LocalMethods, offered: Collection[str]) -> None:
        if SEND_RAW in offered:
            local.add(SEND_RAW, self.send_raw)
        if SEND_CONDITIONAL in offered:
            local.add(SEND_CONDITIONAL, self.send_conditional)
        if self.private:
            local.add(SEND_BUNDLE, self.send_bundle)
            local.add(SEND_PRIVATE, self.send_private)
            if GET_BY_HASH in offered:
                local.add(GET_BY_HASH, self.get_by_hash)

    # -- one raw transaction ---------------------------------------------------------
    async def send_raw(self, call: Call, ctx: LocalContext) -> Any:
        raw_hex, tx = self._checked(call, SEND_RAW, ctx, checks.raw_param)
        return await self._send(call, ctx, SEND_RAW, [raw_hex], tx)

    async def send_conditional(self, call: Call, ctx: LocalContext) -> Any:
        """BSC's conditional send: the node judges the conditions; a builder gets it as sent."""
        raw_hex, tx, opts = self._checked(call, SEND_CONDITIONAL, ctx, checks.conditional_param)
        return await self._send(call, ctx, SEND_CONDITIONAL, [raw_hex, opts], tx)

    async def send_private(self, call: Call, ctx: LocalContext) -> Any:
        """Flashbots' private send: the method itself asks for the private route, so it never
        goes public, whatever the key's choice (no fallback)."""
        raw_hex, tx, _fields = self._checked(call, SEND_PRIVATE, ctx, checks.private_param)
        return await self._send(call, ctx, SEND_RAW, [raw_hex], tx, forced="on", name=SEND_PRIVATE)

    def _checked(self, call: Call, method: str, ctx: LocalContext, read: Any) -> Any:
        try:
            return read(call.params, self.chain_id, self.net.tx_max_bytes)
        except CallError as exc:
            self._count(method, "-", "invalid" if checks.invalid(exc) else "failed")
            raise

    async def _send(
        self,
        call: Call,
        ctx: LocalContext,
        method: str,
        params: list[Any],
        tx: DecodedTx,
        forced: str = "",
        name: str = "",
    ) -> Any:
        """Limit, route, fan out one transaction (sent as ``method``; ``name`` the client's)."""
        name = name or method
        khash = ctx.caller.khash
        assert khash is not None  # only an admitted call reaches a local method
        await self._sender_limit([tx], name)
        key_mode, options = await self._key_settings(khash)
        mode = forced or stricter(self._plan_mode(ctx.plan), key_mode)
        message = self._message(method, params, (params[0],), options)
        route = PUBLIC
        if mode != "off":
            route = PRIVATE
            fanned = await self.fan.fan_out(self.private, message)
            if fanned.first is None and mode == "fallback" and _all_failed(fanned.results):
                route = FALLBACK
                fanned = await self.fan.fan_out(self.public.targets(), message)
        else:
            fanned = await self.fan.fan_out(self.public.targets(), message)
        if fanned.first is None and route != PRIVATE:
            await self._nonce_low_check(fanned, tx.hash)
        self._log_when_settled(fanned, khash, name, tx.hash, tx.sender, route)
        if fanned.first is not None:
            self._count(name, route, "accepted")
            _served_by(call, fanned.first.target)
            if route == PRIVATE:
                await self._follow(khash, name, [tx], fanned.first.target, None)
            return tx.hash
        call.note = f"{tx.hash} via {route}: not accepted"
        return self._refusal(fanned.results, name, route, khash, private=route == PRIVATE)

    # -- eth_sendBundle -------------------------------------------------------------
    async def send_bundle(self, call: Call, ctx: LocalContext) -> Any:
        khash = ctx.caller.khash
        assert khash is not None
        try:
            bundle = checks.bundle_param(call.params, self.net.tx_bundle_max)
            hexes, txs = await checks.decode_all(
                bundle["txs"], self.chain_id, self.net.tx_max_bytes
            )
        except CallError as exc:
            self._count(SEND_BUNDLE, PRIVATE, "invalid" if checks.invalid(exc) else "failed")
            raise
        bundle["txs"] = hexes
        plan = self._plan(ctx.plan)
        if plan is not None:
            try:
                await self.limits.bundles(khash, plan.bundle_rate, plan.bundle_burst)
            except CallError as exc:
                self._count(SEND_BUNDLE, PRIVATE, "limited" if exc.code == -32005 else "failed")
                raise
        await self._sender_limit(txs, SEND_BUNDLE)
        _mode, options = await self._key_settings(khash)
        message = self._message(SEND_BUNDLE, [bundle], tuple(hexes), options)
        fanned = await self.fan.fan_out(self.private, message)
        hashes = ",".join(tx.hash for tx in txs)
        self._log_when_settled(fanned, khash, SEND_BUNDLE, hashes, txs[0].sender, PRIVATE)
        if fanned.first is not None:
            self._count(SEND_BUNDLE, PRIVATE, "accepted")
            _served_by(call, fanned.first.target)
            until = _block(bundle.get("maxBlockNumber"))
            await self._follow(khash, SEND_BUNDLE, txs, fanned.first.target, until)
            return answer_of(fanned.first.answer)
        call.note = f"{_short(hashes)} via {PRIVATE}: not accepted"
        return self._refusal(fanned.results, SEND_BUNDLE, PRIVATE, khash, private=True)

    # -- eth_getTransactionByHash: a pending private transaction ------------------------
    async def get_by_hash(self, call: Call, ctx: LocalContext) -> Any:
        """The key's own pending private transaction, else the nodes' answer as for any read.

        Redis is asked only for a key that may have one: its route is private,
        or it sent one through this process.
        """
        khash = ctx.caller.khash
        params = call.params
        if (
            self.tracker is not None
            and khash is not None
            and isinstance(params, list)
            and len(params) == 1
            and isinstance(params[0], str)
        ):
            mode, _ = await self._key_settings(khash)
            if khash in self.sent_privately or stricter(self._plan_mode(ctx.plan), mode) != "off":
                try:
                    found = await self.tracker.pending(khash, params[0])
                except Exception:  # Redis could not say: the nodes answer
                    found = None
                if found is not None:
                    return found
        return ForwardAs(call.method, params if isinstance(params, list) else [])

    async def _follow(
        self, khash: str, method: str, txs: list[DecodedTx], builder: str, until: int | None
    ) -> None:
        if self.tracker is None:
            return
        if len(self.sent_privately) >= 100_000:
            self.sent_privately.clear()
        self.sent_privately.add(khash)
        await self.tracker.follow(khash, method, txs, builder, until)

    # -- parts ----------------------------------------------------------------------
    def _message(
        self,
        method: str,
        params: list[Any],
        raws: tuple[str, ...],
        options: Mapping[str, Any] | None = None,
    ) -> Message:
        gid = self.pipeline.next_gids(1)
        body = orjson.dumps({"jsonrpc": "2.0", "id": gid, "method": method, "params": params})
        return Message(method, params, body, raws, options or {}, gid)

    def _body(self, method: str, params: list[Any]) -> bytes:
        return self._message(method, params, ()).body

    def _plan(self, name: str) -> PlanConfig | None:
        for plan in self.pipeline.cfg.plans:
            if plan.name == name:
                return plan
        return None

    def _plan_mode(self, name: str) -> str:
        plan = self._plan(name)
        return "off" if plan is None else str(plan.private_tx)

    async def _key_settings(self, khash: str) -> tuple[str, Mapping[str, Any]]:
        try:
            return await self.modes.settings(khash)
        except Exception as exc:  # Redis could not say: the failure policy decides
            if self.fail_open:
                return "", {}
            raise unavailable() from exc

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
                    self._count(method, route, "rejected")
                    err = res.error
                    code = err.get("code")
                    code = code if isinstance(code, int) else -32000
                    raise CallError(code, str(err.get("message", "")), err.get("data"))
        self.pipeline.errors.add(khash)  # no node answered: an upstream failure
        self._count(method, route, "failed")
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
            raise CallError.of(UPSTREAM_TIMEOUT, {"reason": reason})
        raise CallError.of(UPSTREAM_UNAVAILABLE, {"reason": reason})

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

    async def _sender_limit(self, txs: list[DecodedTx], method: str) -> None:
        try:
            await self.limits.senders(txs)
        except CallError as exc:
            self._count(method, "-", "sender_limited" if exc.code == -32005 else "failed")
            raise

    def _count(self, method: str, route: str, outcome: str) -> None:
        self.counter.labels(self.network, method, route, outcome).inc()


def _block(value: Any) -> int | None:
    """A bundle's ``maxBlockNumber`` (a number or hex text) as an int, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 16) if value.startswith(("0x", "0X")) else int(value)
        except ValueError:
            return None
    return None


def _served_by(call: Call, target: str) -> None:
    """``X-Gateway-Node`` names who took the send (not ``gateway``): a node's or a builder's
    configured name, or for a bare URL its host (the URL may carry a credential in its
    path; the host not)."""
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


def _short(hashes: str) -> str:
    """A bundle's hashes for the request log: the first, and how many more."""
    first, _, rest = hashes.partition(",")
    return first + (f" (+{rest.count(',') + 1} more)" if rest else "")
