"""Allowlisted reads: cache, coalescing, the ``eth_blockNumber`` clamp, routing by block.

Runs after admission (so a hit has passed the key check and the limiter
and counts as usage; it never reaches a node). A single read is answered
from the network's cache when it can be, else sent once for every
identical caller (coalesced), hedged, routed to a node that has the block
it names, and kept when its finality allows (``gateway.intel``; README
"What is cached and why it is safe"). A batch's cached reads are answered
locally and its cacheable misses kept from the node's answer; batches are
not coalesced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from gateway.intel.cache import answer as cached_answer
from gateway.intel.cache import answer_block, call_key, result_bytes
from gateway.intel.head import NetworkHead
from gateway.intel.methods import READS
from gateway.intel.policy import Kind, Policy, classify
from gateway.rpc import protocol as rpc
from gateway.rpc.logsplit import METHOD as GETLOGS
from gateway.rpc.logsplit import LogSplitter, refusal_text
from gateway.rpc.relay import STREAM_OVER, Relay
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import Node, NodePool

# What one node call for a read gives every caller that shared it: the node's
# answer (bytes, or a stream only its owner may read), the gateway id it
# carries, and the result to answer with instead (a clamped eth_blockNumber).
_Flight = tuple[bytes | NodeStream, int, bytes | None, str]
Misses = dict[int, tuple[bytes, Policy]]


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
        )

    async def single(self, call: rpc.Call) -> tuple[bytes, bool] | Relay:
        """One read: (answer with the client's id, is an error), or a Relay of a large one.

        Raises ``UpstreamError`` / ``rpc.BadAnswer``. The head is read once,
        so lookup, coalescing key and store agree on it.
        """
        intel = self.pool.intel
        cache = intel.cache
        head = intel.heads.head
        method, params = call.method, call.params
        policy = classify(method, params, head)
        key = call_key(method, params)
        shared = intel.shared if cache is not None and _may_be_final(policy, head) else None
        if cache is not None:
            hit = cache.get(method, key, policy, head)
            if hit is None and shared is not None:
                hit = await shared.get(key)
                if hit is not None:
                    cache.put(key, policy, head, hit)
            if hit is not None:
                call.served, call.node = "hit", "cache"
                return cached_answer(orjson.dumps(call.id), hit), False
        if method == GETLOGS:
            split = await self.logs.single(call)
            if split is not None:
                return split
        block = policy.block if policy.block is not None else -1
        owner = False
        left = False  # the owner was cancelled: a stream its flight brings is for nobody
        stream: NodeStream | None = None

        async def flight() -> _Flight:
            nonlocal owner, stream
            owner = True
            gid = self.next_gids(1)
            reply, node = await self.pool.forward_from(
                rpc.encode_call(call, gid),
                stream_over=STREAM_OVER,
                hedge=True,
                min_block=block,
                route=self.pool.eligibility.route(((method, params),), self.pool.nodes),
            )
            if method == GETLOGS and not isinstance(reply, NodeStream):
                self.logs.saw(node, params, reply)  # a range refusal teaches its limit
            if isinstance(reply, NodeStream):
                if left:
                    reply.close()  # callers that joined ask on their own (below)
                stream = reply
                return reply, gid, None, node.name
            shown = await self._keep(method, key, policy, head, reply, node)
            return reply, gid, shown, node.name

        coalescer = intel.coalescer
        if coalescer is None:
            reply, gid, shown, served_by = await flight()
        else:
            try:
                reply, gid, shown, served_by = await coalescer.run((key, head.tag), flight)
            except asyncio.CancelledError:
                # The flight may go on for callers that joined; a streamed answer
                # it brings holds a node connection until read or closed.
                if owner:
                    left = True
                    if stream is not None:
                        stream.close()
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

    def batch_hits(self, calls: list[rpc.Call], head: NetworkHead) -> Misses:
        """Answer a batch's cached reads locally (``call.local``); the cacheable misses.

        The misses are returned by ``id(call)`` with their key and policy, to
        be stored from the node's answer.
        """
        cache = self.pool.intel.cache
        misses: Misses = {}
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
                call.served, call.node = "hit", "cache"
            else:
                misses[id(call)] = (key, policy)
        return misses

    def keep_batch(
        self,
        answered: list[tuple[rpc.Call, dict[str, Any]]],
        misses: Misses,
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
