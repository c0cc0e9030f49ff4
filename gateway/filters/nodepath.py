"""The node path a filter's reads take while the transports have no shared pipeline.

``PoolPath(pool)`` is a ``NodeCall``: an allowlisted read answered from the
network's cache when it can be, else sent once for every identical caller
(coalesced), hedged, routed to a node that has the block it names, and kept
when its finality allows: the same steps the HTTP read path takes
(rpc/handler.py ``_forward_read``), minus the relay to a client. The one
pipeline (issue 18) replaces it with its own entry point.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.filters.changes import NodeError
from gateway.intel.cache import call_key, result_bytes
from gateway.intel.policy import Kind, classify
from gateway.rpc import protocol as rpc
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import NodePool, UpstreamError

_MAX_GID = 1 << 31


class PoolPath:
    """``await path(method, params)`` -> the ``result`` as JSON bytes, or ``NodeError``."""

    def __init__(self, pool: NodePool) -> None:
        self._pool = pool
        self._gid = 1

    async def __call__(self, method: str, params: list[Any]) -> bytes:
        intel = self._pool.intel
        cache = intel.cache
        head = intel.heads.head
        policy = classify(method, params, head)
        key = call_key(method, params)
        if cache is not None:
            hit = cache.get(method, key, policy, head)
            if hit is not None:
                return hit

        async def flight() -> bytes:
            gid = self._gid
            self._gid = gid + 1 if gid < _MAX_GID else 1
            body = rpc.encode_call(rpc.Call(method=method, params=params, id=gid, has_id=True), gid)
            block = policy.block if policy.block is not None else -1
            try:
                reply, node = await self._pool.forward_from(body, hedge=True, min_block=block)
            except UpstreamError as exc:
                kind = rpc.UPSTREAM_TIMEOUT if exc.timeout else rpc.UPSTREAM_UNAVAILABLE
                raise NodeError(kind) from None
            if isinstance(reply, NodeStream):  # never asked to stream: read it whole
                reply = await reply.read_all()
            result = result_bytes(reply)
            if result is None:
                raise _node_error(reply)
            if cache is not None and policy.kind is not Kind.NEVER:
                cache.put(key, policy, head, result, node_head=intel.heads.node_head(node.name))
            return result

        coalescer = intel.coalescer
        if coalescer is None:
            return await flight()
        answer: bytes = await coalescer.run((key, head.tag), flight)
        return answer


def _node_error(reply: bytes) -> NodeError:
    """The node's own error, in its words; a reply that is no answer at all is a 502."""
    try:
        obj = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return NodeError(rpc.UPSTREAM_UNAVAILABLE, "bad node answer")
    error = obj.get("error") if type(obj) is dict else None
    if type(error) is dict and type(error.get("code")) is int:
        message = error.get("message")
        kind = rpc.ErrorKind(error["code"], message if type(message) is str else "", 200)
        return NodeError(kind, error.get("data"))
    return NodeError(rpc.UPSTREAM_UNAVAILABLE, "bad node answer")
