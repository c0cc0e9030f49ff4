"""Forward the calls a node must answer, and put the client's ids back.

One entry (``forward_calls``) for a single call and a batch alike: a
single call is a batch of one, so every call of a batch gets what a
single read gets (cache, coalescing, head clamp, routing by block,
hedging, retry; ``rpc.reads``). Answers come back as bytes, or as a
``Relay`` for a large single answer, which the transport streams once the
in-flight slot is given back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gateway.config import Config, NetworkConfig
from gateway.intel.methods import READS
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R
from gateway.rpc import traced
from gateway.rpc.delivery import node_failed
from gateway.rpc.history import refuse_missing_state
from gateway.rpc.reads import Plans, Reads
from gateway.rpc.relay import STREAM_OVER, Relay
from gateway.rpc.sinks import ErrorCounts
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import NodePool, UpstreamError

if TYPE_CHECKING:
    from gateway.telemetry.tracer import Tracer

NON_IDEMPOTENT = frozenset({"eth_sendRawTransaction"})


class ForwardContext(Protocol):
    """What forwarding uses of the pipeline (``rpc.pipeline.Pipeline`` provides it)."""

    cfg: Config
    network: NetworkConfig
    pool: NodePool
    reads: Reads
    errors: ErrorCounts
    tracer: Tracer | None

    def next_gids(self, n: int) -> int: ...


def _failed(
    pipe: ForwardContext,
    khash: str,
    exc: Exception,
    req: R.ParsedRequest,
    headers: dict[str, str],
    n: int = 1,
) -> R.Answer:
    """The answer for ``n`` calls no node answered (``rpc.delivery.node_failed``)."""
    return R.upstream_failed(
        node_failed(pipe.network.name, pipe.errors, khash, exc, n), req, headers
    )


def _done(
    pipe: ForwardContext,
    khash: str,
    body: bytes,
    is_error: bool,
    headers: dict[str, str],
    n: int = 1,
) -> R.Answer:
    answer = R.Answer(body, 200, headers)
    if is_error:
        pipe.errors.answered(khash, n)  # the node's answer: the calls' outcome, not a failure
        answer.is_error = True  # request insight reads the code from the answer
    return answer


def _error_items(parsed: Any, forwarded: int) -> int:
    """How many of a node batch answer's items are errors (all, for one whole-batch error)."""
    if type(parsed) is list:
        return max(1, sum(1 for a in parsed if type(a) is dict and "error" in a))
    return forwarded


async def forward_calls(
    pipe: ForwardContext, khash: str, req: R.ParsedRequest, headers: dict[str, str]
) -> R.Answer:
    """Every call a node must answer, single or batch, through one lane.

    Reads are looked up in the cache first (hits answer locally); a lone read
    miss goes through ``Reads.one`` (coalesced, hedged, settled, streamed when
    large); a batch's other calls go as one node batch, the canonical rebuild
    of its calls, coalesced, hedged and routed the same way, and every read
    among them is settled as a lone read is (``Reads.batch``).
    """
    calls = req.calls
    forward = [c for c in calls if c.error is None and c.local is None]
    reads = pipe.reads
    head = pipe.pool.intel.heads.head
    tracer = pipe.tracer
    if not forward:
        plans: Plans = {}
    elif tracer is None:
        plans = await reads.lookup(forward, head)
    else:
        plans = await traced.lookup(tracer, reads, forward, head)
    forward = [c for c in forward if c.local is None]
    # Old state no node in service keeps: refused unasked. Only the misses are
    # checked, since a cached answer for a block stays right (and is cheaper).
    if forward and refuse_missing_state(pipe.pool, forward):
        for call in forward:
            if call.error is not None:
                plans.pop(id(call), None)
        forward = [c for c in forward if c.error is None]
    if not forward:
        return R.local_answer(req, headers)
    if not req.is_batch and plans:  # a lone read: coalesced, hedged, streamed when large
        call = forward[0]
        try:
            out = await reads.one(call, plans[id(call)], head)
        except (UpstreamError, rpc.BadAnswer) as exc:
            return _failed(pipe, khash, exc, req, headers)
        if isinstance(out, Relay):
            return R.Answer(b"", 200, headers, relay=out)
        return _done(pipe, khash, out[0], out[1], headers)
    idempotent = not any(c.method in NON_IDEMPOTENT for c in forward)
    if req.is_batch:
        limits = pipe.cfg.limits
        try:
            parsed, gid = await reads.batch(
                forward, plans, head, idempotent=idempotent, deadline_s=limits.upstream_timeout_s
            )
            if not any(c.answered for c in calls):
                return R.Answer(b"", 204, headers)
            body, is_error = rpc.restore_batch(b"", calls, gid, parsed=parsed)
        except (UpstreamError, rpc.BadAnswer) as exc:
            return _failed(pipe, khash, exc, req, headers, len(forward))
        n = _error_items(parsed, len(forward)) if is_error else 1
        return _done(pipe, khash, body, is_error, headers, n)
    # one call that is not a read with an id (a write, a notification, an
    # operator's extra method): relayed as the node answers it
    call = forward[0]
    gid = pipe.next_gids(1)
    try:
        reply, node = await pipe.pool.forward_from(
            rpc.encode_call(call, gid),
            idempotent=idempotent,
            stream_over=STREAM_OVER,
            hedge=call.method in READS,
            route=pipe.pool.route(((call.method, call.params),)),
        )
    except UpstreamError as exc:
        return _failed(pipe, khash, exc, req, headers)
    call.served, call.node = "miss", node.name
    if not call.answered:
        if isinstance(reply, NodeStream):
            reply.close()
        return R.Answer(b"", 204, headers)
    if isinstance(reply, NodeStream):
        relay = Relay(reply, gid, call.id, pipe.cfg.limits.max_buffered_answer_bytes)
        return R.Answer(b"", 200, headers, relay=relay)
    try:
        body, is_error = rpc.restore_single(reply, gid, call.id)
    except rpc.BadAnswer as exc:
        return _failed(pipe, khash, exc, req, headers)
    return _done(pipe, khash, body, is_error, headers)
