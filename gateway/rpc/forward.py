"""Forward the calls a node must answer, and put the client's ids back.

One read (``forward_read``: through ``rpc.reads``, cache and coalescing),
or anything else (``forward_calls``: a write, a batch, a call that is not
an allowlisted read) sent as the gateway's canonical rebuild. Answers come
back as bytes, or as a ``Relay`` for a large single answer, which the
transport streams once the in-flight slot is given back.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from gateway.config import Config, NetworkConfig
from gateway.intel.methods import READS
from gateway.rpc import protocol as rpc
from gateway.rpc import replies as R
from gateway.rpc.reads import Reads
from gateway.rpc.relay import STREAM_OVER, Relay, failure_kind, read_bounded
from gateway.store.errorcounts import ErrorCounter
from gateway.upstream.nodeclient import NodeStream
from gateway.upstream.pool import NodePool, UpstreamError

log = logging.getLogger("gateway.rpc")

NON_IDEMPOTENT = frozenset({"eth_sendRawTransaction"})


class Pipeline(Protocol):
    """What forwarding uses of the pipeline (``rpc.pipeline.Pipeline``)."""

    cfg: Config
    network: NetworkConfig
    pool: NodePool
    reads: Reads
    errors: ErrorCounter

    def next_gids(self, n: int) -> int: ...


def _failed(pipe: Pipeline, khash: str, exc: Exception) -> rpc.ErrorKind:
    pipe.errors.add(khash)
    if isinstance(exc, rpc.BadAnswer):
        log.warning("bad node answer network=%s reason=%s", pipe.network.name, exc)
        return rpc.UPSTREAM_UNAVAILABLE
    return failure_kind(exc)


def _done(
    pipe: Pipeline, khash: str, body: bytes, is_error: bool, headers: dict[str, str]
) -> R.Answer:
    answer = R.Answer(body, 200, headers)
    if is_error:
        pipe.errors.add(khash)
        answer.is_error = True  # request insight reads the code from the answer
    return answer


async def forward_read(
    pipe: Pipeline, khash: str, req: R.ParsedRequest, headers: dict[str, str]
) -> R.Answer:
    """One allowlisted read with an id: cache, coalescing, clamp, routing."""
    try:
        out = await pipe.reads.single(req.calls[0])
    except (UpstreamError, rpc.BadAnswer) as exc:
        return R.upstream_failed(_failed(pipe, khash, exc), req, headers)
    if isinstance(out, Relay):
        return R.Answer(b"", 200, headers, relay=out)
    return _done(pipe, khash, out[0], out[1], headers)


async def forward_calls(
    pipe: Pipeline, khash: str, req: R.ParsedRequest, headers: dict[str, str]
) -> R.Answer:
    """Send the canonical form of the valid calls; answer with the client's ids."""
    calls = req.calls
    forward = [c for c in calls if c.error is None and c.local is None]
    head = pipe.pool.intel.heads.head
    misses = pipe.reads.batch_hits(forward, head) if req.is_batch and forward else {}
    if misses or any(c.local is not None for c in forward):
        forward = [c for c in forward if c.local is None]
    if not forward:
        return R.local_answer(req, headers)
    gid = pipe.next_gids(len(forward))
    out = rpc.encode_batch(forward, gid) if req.is_batch else rpc.encode_call(forward[0], gid)
    try:
        reply, node = await pipe.pool.forward_from(
            out,
            idempotent=not any(c.method in NON_IDEMPOTENT for c in forward),
            stream_over=STREAM_OVER,
            hedge=all(c.method in READS for c in forward),
            route=pipe.pool.eligibility.route(
                ((c.method, c.params) for c in forward), pipe.pool.nodes
            ),
        )
        for call in forward:
            call.served, call.node = "miss", node.name
        if not any(c.answered for c in calls):
            if isinstance(reply, NodeStream):
                reply.close()
            return R.Answer(b"", 204, headers)
        if req.is_batch and isinstance(reply, NodeStream):  # parsed whole: bounded
            limits = pipe.cfg.limits
            reply = await read_bounded(
                reply, limits.max_buffered_answer_bytes, deadline_s=limits.upstream_timeout_s
            )
    except UpstreamError as exc:
        return R.upstream_failed(_failed(pipe, khash, exc), req, headers)
    if isinstance(reply, NodeStream):
        relay = Relay(reply, gid, calls[0].id, pipe.cfg.limits.max_buffered_answer_bytes)
        return R.Answer(b"", 200, headers, relay=relay)
    try:
        if req.is_batch:
            answered: list[tuple[rpc.Call, dict[str, Any]]] | None = [] if misses else None
            body, is_error = rpc.restore_batch(reply, calls, gid, answered)
            if answered:
                pipe.reads.keep_batch(answered, misses, head, node)
        else:
            body, is_error = rpc.restore_single(reply, gid, calls[0].id)
    except rpc.BadAnswer as exc:
        return R.upstream_failed(_failed(pipe, khash, exc), req, headers)
    return _done(pipe, khash, body, is_error, headers)
