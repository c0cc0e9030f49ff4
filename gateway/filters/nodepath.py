"""The node path a filter's reads take: the pipeline's own read path (``rpc.reads``).

``ReadPath(reads)`` is a ``NodeCall``: each read (``eth_getLogs``,
``eth_getBlockByNumber``, ``eth_blockNumber``) goes through
``Reads.single``, exactly as a client's forwarded read does: answered from
the network's cache when it can be, else sent once for every identical
caller (coalesced), hedged, routed to a node that has the block it names,
and kept when its finality allows. So a thousand filters polled at one head
cost one node call per distinct read.

A large answer (relayed in pieces to a client) is read whole here, since
its logs are parsed: up to ``limits.max_buffered_answer_bytes``, or the
smaller bound of ``within(limit)`` (a poll's reads: ``filters.max_poll_bytes``);
past it, 502, as for any answer the gateway cannot hold. That error, and a
node's own "too many results" refusal, are marked ``too_large``: a filter's
poll asks again for fewer blocks (``filters.logsread``).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.filters.changes import NodeError
from gateway.intel.cache import result_bytes
from gateway.rpc import protocol as rpc
from gateway.rpc.errors import failure_kind
from gateway.rpc.reads import Reads
from gateway.rpc.relay import Relay
from gateway.upstream.pool import UpstreamError

_ID = 0  # the id the read is answered with here (never sent: the pipeline picks the node's)

# Providers' words for an eth_getLogs that matched too much, e.g. "query returned
# more than 10000 results" (Infura) and "Log response size exceeded" (Alchemy).
_TOO_MANY = re.compile(
    r"more than \d+ results|max results|response size|too many (?:logs|results)", re.I
)


class ReadPath:
    """``await path(method, params)`` -> the ``result`` as JSON bytes, or ``NodeError``."""

    def __init__(self, reads: Reads, limit: int = 0) -> None:
        self._reads = reads
        self._limit = limit  # 0: the relay's own bound (limits.max_buffered_answer_bytes)

    def within(self, limit: int) -> ReadPath:
        """The same path, its answers refused as ``too_large`` past ``limit`` bytes."""
        return ReadPath(self._reads, limit)

    async def __call__(self, method: str, params: list[Any]) -> bytes:
        call = rpc.Call(method=method, params=params, id=_ID, has_id=True)
        try:
            out = await self._reads.single(call)
            reply = await _whole(out, self._limit) if isinstance(out, Relay) else out[0]
        except UpstreamError as exc:
            raise NodeError(failure_kind(exc), too_large=exc.too_large) from None
        except rpc.BadAnswer as exc:
            raise NodeError(failure_kind(exc), {"reason": "bad node answer"}) from None
        if self._limit and len(reply) > self._limit:
            raise NodeError(rpc.UPSTREAM_UNAVAILABLE, too_large=True)
        result = result_bytes(reply)
        if result is None:
            raise _node_error(reply)
        return result


async def _whole(relay: Relay, limit: int) -> bytes:
    """A relayed answer read to its end, at most ``limit`` (or ``relay.buffer_limit``) bytes."""
    bound = min(limit, relay.buffer_limit) if limit else relay.buffer_limit
    try:
        parts = [await relay.start()]
        have = len(parts[0])
        if have > bound:
            raise UpstreamError("filter read over its bound", too_large=True)
        async for chunk in relay.rest():
            have += len(chunk)
            if have > bound:
                raise UpstreamError("filter read over its bound", too_large=True)
            parts.append(chunk)
        return b"".join(parts)
    finally:
        relay.close()


def _node_error(reply: bytes) -> NodeError:
    """The node's own error, in its words; a reply that is no answer at all is a 502."""
    try:
        obj = orjson.loads(reply)
    except orjson.JSONDecodeError:
        return NodeError(rpc.UPSTREAM_UNAVAILABLE, {"reason": "bad node answer"})
    error = obj.get("error") if type(obj) is dict else None
    if type(error) is dict and type(error.get("code")) is int:
        message = error.get("message")
        text = message if type(message) is str else ""
        kind = rpc.ErrorKind(error["code"], text, 200, explained=False)
        return NodeError(kind, error.get("data"), too_large=_TOO_MANY.search(text) is not None)
    return NodeError(rpc.UPSTREAM_UNAVAILABLE, {"reason": "bad node answer"})
