"""Delivering a relayed answer, and what a node's failure becomes: one place for both.

Every transport writes a large node answer (``rpc.relay``) the same way and
answers a node failure the same way, so both live here once:

* ``node_failed`` turns a failed node call (``UpstreamError`` or
  ``BadAnswer``) into the client's error kind (``errors.failure_kind``: 504 for a
  deadline, else 502), counts it against the key (``ErrorCounts.add``) and
  logs a bad node answer with the network's name (never a key or a URL);
  the forwarding step (``rpc.forward``) and ``deliver`` call it, nothing else.
* ``deliver`` streams a relayed answer through a transport's few writes
  (``Writes``): before the first byte a failure is still a proper error
  answer; after it, the connection (HTTP) or the half-sent message
  (WebSocket) can only be cut, and the failure is logged. A node's own
  error answer counts as the call's outcome (``ErrorCounts.answered``).

The HTTP doors (``rpc.http.AppOut``, the lean door's ``LeanCall``) and the
WebSocket session (``ws.upgrade``) each implement ``Writes``; none of them
counts, logs or maps a node failure itself.
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeVar

from gateway.rpc import protocol as rpc
from gateway.rpc.errors import failure_kind
from gateway.rpc.replies import Answer, error_answer
from gateway.rpc.sinks import ErrorCounts
from gateway.upstream.errors import UpstreamError

log = logging.getLogger("gateway.rpc")

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

NodeFailure = (UpstreamError, rpc.BadAnswer)  # what a node call may fail with


class Writes(Protocol[R_co]):
    """The writes a transport implements for ``deliver``; ``R``: what it returns.

    ``whole`` writes a complete answer (nothing streamed yet); ``start`` /
    ``write`` / ``end`` stream one (``write`` raises ``ConnectionError`` once
    the client is gone); ``cut`` gives up a half-sent answer (the node failed
    mid-answer); ``gone``: the client left.
    """

    def whole(self, answer: Answer) -> R_co: ...
    async def start(self, answer: Answer, length: int | None) -> None: ...
    async def write(self, chunk: bytes) -> None: ...
    async def end(self) -> R_co: ...
    def cut(self) -> R_co: ...
    def gone(self) -> R_co: ...


def node_failed(
    network: str, errors: ErrorCounts, khash: str, exc: Exception, n: int = 1
) -> rpc.ErrorKind:
    """The client's error for ``n`` calls no node answered; counted, a bad answer logged."""
    errors.add(khash, n)
    if isinstance(exc, rpc.BadAnswer):
        log.warning("bad node answer network=%s reason=%s", network, exc)
    return failure_kind(exc)


def failed_answer(answer: Answer, kind: rpc.ErrorKind) -> Answer:
    """The error that replaces a relayed answer not started; ``answer.status`` says so."""
    relay = answer.relay
    answer.status = kind.http_status  # the metrics and the call log read it
    return error_answer(kind, relay.client_id if relay else None, None, answer.headers)


async def deliver(
    out: Writes[R], answer: Answer, network: str, errors: ErrorCounts, khash: str
) -> R:
    """Write ``answer.relay`` through ``out``, the client's id in its head.

    Memory stays bounded: the node is read only as fast as ``out.write``
    returns (each transport waits for its socket to drain). The relay is
    closed whatever happens; a client that goes away releases everything.
    """
    relay = answer.relay
    assert relay is not None
    started = False
    try:
        first = await relay.start()
        if relay.is_error:
            answer.is_error = True
            errors.answered(khash)  # the node's answer: the call's outcome, not a failure
        if relay.whole:
            answer.body = first
            return out.whole(answer)
        started = True
        await out.start(answer, relay.length)
        await out.write(first)
        del first
        async for chunk in relay.rest():
            await out.write(chunk)
        return await out.end()
    except NodeFailure as exc:
        if not started:  # nothing sent yet: a proper error answer
            return out.whole(failed_answer(answer, node_failed(network, errors, khash, exc)))
        errors.add(khash)
        log.warning("node failed mid-answer network=%s error=%s", network, exc)
        return out.cut()  # half an answer cannot be taken back
    except ConnectionError:  # the client went away, or was dropped for not reading
        return out.gone()
    finally:
        relay.close()
