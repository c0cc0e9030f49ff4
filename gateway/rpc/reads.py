"""Allowlisted reads in one lane: a single call is a batch of one.

Runs after admission (so a hit has passed the key check and the limiter
and counts as usage; it never reaches a node). ``lookup`` answers every
read of a request from the network's cache when it can (``call.local``)
and plans the misses; the misses then go to a node as one call (``one``
for a lone read: coalesced, hedged, streamed when large; ``batch`` for a
batch: coalesced with identical batches, hedged when every call is a
read), routed to a node that has the highest block any of them names.
Every read's answer is then *settled* the same way, whichever way it
came: a block, receipt or log it names vouches for that node's head
(``NetworkIntel.vouch``: read your writes), ``eth_blockNumber`` is
answered from the confirmed head (never decreasing), a ``null`` by-hash
answer from a node behind the head is asked once more of a node at the
head, and the answer is kept when its finality allows (``gateway.intel``;
docs/CACHING.md).

It stays whole because the lookup, the two ways to a node and the settling
share one plan per read and one head snapshot per request: split, a batch
and a single call could drift apart again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.intel.cache import answer as cached_answer
from gateway.intel.cache import answer_block, call_key, result_bytes
from gateway.intel.head import NetworkHead
from gateway.intel.methods import READS
from gateway.intel.policy import Kind, Policy, classify
from gateway.rpc import protocol as rpc
from gateway.rpc.logsparts import refusal_text
from gateway.rpc.logsplit import METHOD as GETLOGS
from gateway.rpc.logsplit import LogSplitter
from gateway.rpc.relay import STREAM_OVER, Relay, read_bounded
from gateway.upstream.errors import UpstreamError
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import Node, NodePool

# What one node call for a read gives every caller that shared it: the node's
# answer (bytes, or a stream only its owner may read), the gateway id it
# carries, the result to answer with instead (settled: clamped, asked again),
# and the name of the node that answered.
_Flight = tuple[bytes | NodeStream, int, bytes | None, str]


@dataclass(frozen=True, slots=True)
class Plan:
    """A read the cache did not answer: its key and policy at the request's head."""

    key: bytes
    policy: Policy


Plans = dict[int, Plan]  # by id(call)


class Reads:
    """One network's read steps; bound to its node pool at start-up."""

    def __init__(self, pool: NodePool, next_gids: Callable[[int], int], buffer_limit: int) -> None:
        self.pool = pool
        self.next_gids = next_gids
        self.buffer_limit = buffer_limit
        # eth_getLogs wider than a node takes: split (gateway/rpc/logsplit.py)
        self.logs = LogSplitter(
            pool,
            next_gids,
            concurrency=pool.cfg.logs_split_concurrency,
            timeout_s=pool.total_timeout_s,
            max_bytes=buffer_limit,
            max_chunks=pool.cfg.logs_max_chunks,
        )

    async def lookup(self, calls: list[rpc.Call], head: NetworkHead) -> Plans:
        """Answer the cached reads among ``calls`` (``call.local``); plan the others."""
        intel = self.pool.intel
        cache = intel.cache
        plans: Plans = {}
        for call in calls:
            method = call.method
            if not call.has_id or method not in READS:
                continue
            policy = classify(method, call.params, head)
            key = call_key(method, call.params)
            if cache is not None:
                hit = cache.get(method, key, policy, head)
                shared = intel.shared
                if hit is None and shared is not None and _may_be_final(policy, head):
                    hit = await shared.get(key)
                    if hit is not None:
                        cache.put(key, policy, head, hit)
                if hit is not None:
                    call.local = cached_answer(orjson.dumps(call.id), hit)
                    call.served, call.node = "hit", "cache"
                    continue
            plans[id(call)] = Plan(key, policy)
        return plans

    async def single(self, call: rpc.Call) -> tuple[bytes, bool] | Relay:
        """One read on its own (filters, local methods): the same lane as a client's."""
        head = self.pool.intel.heads.head
        plans = await self.lookup([call], head)
        if call.local is not None:
            out, call.local = call.local, None
            return out, False
        return await self.one(call, plans[id(call)], head)

    async def one(
        self, call: rpc.Call, plan: Plan, head: NetworkHead
    ) -> tuple[bytes, bool] | Relay:
        """A lone read miss: (answer with the client's id, is an error), or a Relay.

        Raises ``UpstreamError`` / ``rpc.BadAnswer``.
        """
        intel = self.pool.intel
        method, params = call.method, call.params
        if method == GETLOGS:
            split = await self.logs.single(call)
            if split is not None:
                return split
        block = plan.policy.block if plan.policy.block is not None else -1
        owner = False
        left = False  # the owner was cancelled: a stream its flight brings is for nobody
        taken: NodeStream | None = None

        async def flight() -> _Flight:
            nonlocal owner, taken
            owner = True
            gid = self.next_gids(1)
            reply, node = await self.pool.forward_from(
                rpc.encode_call(call, gid),
                stream_over=STREAM_OVER,
                hedge=True,
                min_block=block,
                route=self.pool.route(((method, params),)),
            )
            if method == GETLOGS and not isinstance(reply, NodeStream):
                self.logs.saw(node, params, reply)  # a range refusal teaches its limit
            if isinstance(reply, NodeStream):
                if left:
                    reply.close()  # callers that joined ask on their own (below)
                taken = reply
                return reply, gid, None, node.name
            shown, name = await self._settle_reply(call, plan, head, reply, node)
            return reply, gid, shown, name

        coalescer = intel.coalescer
        if coalescer is None:
            reply, gid, shown, served_by = await flight()
        else:
            try:
                reply, gid, shown, served_by = await coalescer.run((plan.key, head.tag), flight)
            except asyncio.CancelledError:
                # The flight may go on for callers that joined; a streamed answer
                # it brings holds a node connection until read or closed.
                if owner:
                    left = True
                    if taken is not None:
                        taken.close()
                raise
            if isinstance(reply, NodeStream) and not owner:
                # A streamed answer can be read once: its owner relays it,
                # a caller that joined asks on its own.
                reply, gid, shown, served_by = await flight()
        call.served, call.node = ("miss" if owner else "coalesced"), served_by
        if isinstance(reply, NodeStream):
            return Relay(reply, gid, call.id, self.buffer_limit)
        if shown is not None:
            return cached_answer(orjson.dumps(call.id), shown), False
        if method == GETLOGS and refusal_text(reply) is not None:
            split = await self.logs.single(call, refused=True)
            if split is not None:
                return split
        return rpc.restore_single(reply, gid, call.id)

    async def batch(
        self,
        forward: list[rpc.Call],
        plans: Plans,
        head: NetworkHead,
        *,
        idempotent: bool,
        deadline_s: float,
    ) -> tuple[Any, int]:
        """Several calls as one node call: (the parsed, settled answers, the first gateway id).

        Identical batches of reads at one head share one node call; every
        read's answer is settled as a lone read's is. Raises
        ``UpstreamError`` / ``rpc.BadAnswer``.
        """
        intel = self.pool.intel
        reads_only = all(id(c) in plans for c in forward)
        block = max((p.policy.block or -1 for p in plans.values()), default=-1)

        owner = False

        async def flight() -> tuple[Any, int, list[str]]:
            nonlocal owner
            owner = True
            gid = self.next_gids(len(forward))
            pool = self.pool
            reply, node = await pool.forward_from(
                rpc.encode_batch(forward, gid),
                idempotent=idempotent,
                stream_over=STREAM_OVER,
                hedge=reads_only,
                min_block=block,
                route=pool.route((c.method, c.params) for c in forward),
            )
            if isinstance(reply, NodeStream):  # parsed whole: bounded
                reply = await read_bounded(reply, self.buffer_limit, deadline_s=deadline_s)
            names = [node.name] * len(forward)  # who answered each call
            if not any(c.has_id for c in forward):
                return [], gid, names
            try:
                answers = rpc.loads_exact(reply)
            except rpc.ParseError:
                raise rpc.BadAnswer("not JSON") from None
            if type(answers) is list:
                by_gid = {
                    orjson.dumps(a["id"]): a for a in answers if type(a) is dict and "id" in a
                }
                for i, call in enumerate(forward):
                    plan = plans.get(id(call))
                    item = by_gid.get(b"%d" % (gid + i))
                    if plan is None or type(item) is not dict or "result" not in item:
                        continue
                    result = item["result"]
                    shown, names[i] = await self._settle(
                        call, plan, head, result, _dumps(result), node
                    )
                    if shown is not None:
                        item["result"] = orjson.Fragment(shown)
            return answers, gid, names

        coalescer = intel.coalescer
        if coalescer is None or not reads_only:
            answers, gid, names = await flight()
        else:
            key = (tuple(plans[id(c)].key for c in forward), head.tag)
            answers, gid, names = await coalescer.run(key, flight)
        for call, name in zip(forward, names, strict=True):
            call.served, call.node = ("miss" if owner else "coalesced"), name
        return answers, gid

    # -- settling one read's answer -------------------------------------------
    async def _settle_reply(
        self, call: rpc.Call, plan: Plan, head: NetworkHead, reply: bytes, node: Node
    ) -> tuple[bytes | None, str]:
        """A lone read's answer settled: the result bytes to answer with instead (or None),
        and the node whose answer it is."""
        policy = plan.policy
        if not (
            call.method == "eth_blockNumber"
            or policy.kind is not Kind.NEVER
            or (policy.block is not None and policy.block > head.number)
        ):
            return None, node.name  # nothing to keep, clamp or vouch for: relay the node's bytes
        raw = result_bytes(reply)
        if raw is None:
            return None, node.name  # an error, or not an answer
        result = None if raw == b"null" else _loads(raw)
        return await self._settle(call, plan, head, result, raw, node)

    async def _settle(
        self, call: rpc.Call, plan: Plan, head: NetworkHead, result: Any, raw: bytes, node: Node
    ) -> tuple[bytes | None, str]:
        """Vouch, clamp, ask again, keep: the result bytes to answer with instead (or None),
        and the node whose answer it is (another one, when a null was asked again)."""
        pool = self.pool
        intel = pool.intel
        heads = intel.heads
        shown: bytes | None = None
        policy = plan.policy
        if result is None and policy.kind is Kind.IF_FINAL and policy.block is None:
            again = await self._from_head(call, node)
            if again is not None:
                result, raw, node = again
                shown = raw
        mark = _mark(result)
        if mark is not None and mark[0] > (heads.node_head(node.name) or -1):
            intel.vouch(node.name, mark[0], mark[1])  # read your writes
        if call.method == "eth_blockNumber":
            number = _quantity(result)
            if number is None:
                return None, node.name
            if number > heads.head.number and intel.claim(node.name, number):
                await pool.confirms.confirm(node, number)
            raw = shown = b'"%s"' % hex(heads.block_number()).encode()
        cache = intel.cache
        if cache is not None and cache.put(
            plan.key,
            policy,
            head,
            raw,
            node_head=heads.node_head(node.name),
            finalized=heads.head.finalized,
        ):
            shared = intel.shared
            if shared is not None and _is_final(policy, heads.head, raw):
                await shared.put(plan.key, raw)
        return shown, node.name

    async def _from_head(self, call: rpc.Call, node: Node) -> tuple[Any, bytes, Node] | None:
        """A by-hash ``null`` from a node behind the head, asked once of a node at the head."""
        heads = self.pool.intel.heads
        have = heads.node_head(node.name)
        if have is not None and have >= heads.head.number:
            return None  # the node is at the head: a real null
        gid = self.next_gids(1)
        try:
            pool = self.pool
            reply, other = await pool.forward_from(
                rpc.encode_call(call, gid),
                hedge=False,
                min_block=heads.head.number,
                avoid=node,
                route=pool.route(((call.method, call.params),)),
            )
        except UpstreamError:
            return None
        if isinstance(reply, NodeStream):  # pragma: no cover - no stream_over asked
            reply.close()
            return None
        raw = result_bytes(reply)
        if raw is None or raw == b"null":
            return None
        return _loads(raw), raw, other


def _loads(raw: bytes) -> Any:
    """A result's JSON, numbers beyond 64 bits kept exact (as ``result_bytes`` keeps them)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw, parse_int=orjson.Fragment, parse_float=orjson.Fragment)


def _dumps(result: Any) -> bytes:
    return bytes(orjson.dumps(result))


def _quantity(result: Any) -> int | None:
    if type(result) is not str:
        return None
    try:
        return int(result, 16)
    except ValueError:
        return None


def _mark(result: Any) -> tuple[int, str] | None:
    """The newest (block number, block hash) an answer names: a block, receipt, tx or logs."""
    if type(result) is dict:
        return _one_mark(result)
    if type(result) is list and result and type(result[-1]) is dict:
        best: tuple[int, str] | None = None
        for item in result:
            mark = _one_mark(item) if type(item) is dict else None
            if mark is not None and (best is None or mark[0] > best[0]):
                best = mark
        return best
    return None


def _one_mark(obj: dict[str, Any]) -> tuple[int, str] | None:
    if "parentHash" in obj:  # a block or header names itself
        number, digest = obj.get("number"), obj.get("hash")
    else:  # a receipt, transaction or log names its block
        number, digest = obj.get("blockNumber"), obj.get("blockHash")
    if type(number) is not str or type(digest) is not str:
        return None
    value = _quantity(number)
    return None if value is None or not 0 <= value < 1 << 63 else (value, digest.lower())


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
